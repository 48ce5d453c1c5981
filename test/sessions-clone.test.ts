/**
 * The server-side clone against hostile and failing repositories: a repository over the size
 * limit, a server too slow for the time limit, a wrong token (which must appear nowhere), a
 * submodule pointing at the server's own files, and a symlink out of the workspace. Each either
 * fails provisioning with a clear cause (the session DEGRADED) or lands harmlessly in the sandbox.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import anyTest, { type TestFn } from "ava";
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, credentialsFile, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  git: GitServer;
  slow: GitServer;
  locked: GitServer;
  dir: string;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;
const TOKEN = "clone-token-abcdef0123456789";
const WRONG = "wrong-token-zyxw9876543210";

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-clone-"));
  const git = await startGitServer({ token: TOKEN });
  const slow = await startGitServer({ token: TOKEN });
  const locked = await startGitServer({ token: "the-right-token-for-locked" });
  await git.createRepo("big", { branches: { main: { "blob.bin": randomBytes(2 * 1024 * 1024).toString("base64") } } });
  await slow.createRepo("slow", { branches: { main: { "a.txt": "a\n" } } });
  await locked.createRepo("locked", { branches: { main: { "a.txt": "a\n" } } });
  const secret = path.join(dir, "server-secret");
  await writeFile(secret, "server secret\n");
  await git.createRepo("hostile", {
    branches: {
      main: { "README.md": "hostile\n", escape: { content: secret, mode: "120000" } },
    },
    // A submodule that would clone the server's own files over file://, were submodules followed.
    setup: (tree) => {
      execFileSync("git", ["-C", tree, "config", "-f", ".gitmodules", "submodule.sub.path", "sub"]);
      execFileSync("git", ["-C", tree, "config", "-f", ".gitmodules", "submodule.sub.url", `file://${dir}`]);
      execFileSync("git", ["-C", tree, "add", ".gitmodules"]);
      execFileSync("git", ["-C", tree, "update-index", "--add", "--cacheinfo", `160000,${"1".repeat(40)},sub`]);
    },
  });
  // A default branch whose name git in the sandbox would read as an option.
  await git.createRepo("dash", { branches: { main: { "a.txt": "a\n" } } });
  execFileSync("git", ["-C", git.repoPath("dash"), "update-ref", "refs/heads/-evil", "main"]);
  execFileSync("git", ["-C", git.repoPath("dash"), "symbolic-ref", "HEAD", "refs/heads/-evil"]);
  const hosts = { [new URL(git.url).host]: TOKEN, [new URL(slow.url).host]: TOKEN, [new URL(locked.url).host]: WRONG };
  const logs: string[] = [];
  const server = await startServer({
    env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: await credentialsFile(dir, hosts), AGENT_WORKSPACE_CLONE_MAX_BYTES: "512K", AGENT_WORKSPACE_CLONE_TIMEOUT_MS: "10000" },
    onLog: (line) => logs.push(line),
  });
  t.context = { server, git, slow, locked, dir, logs };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  for (const g of [t.context.git, t.context.slow, t.context.locked]) await g?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

let serial = 0;

async function sessionFor(t: { context: Ctx }, url: string) {
  const op = t.context.server.clients.connect;
  const id = `clone-${process.pid}-${++serial}`;
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: ["bash", "read"], repoSource: { type: "fixed", url }, checkoutOnStart: true } } });
  const started = await op.workspaces.startSession({ agentType: id, task: {} });
  const { session } = await watchUntilReady(op, started.session!.id);
  return { session, token: started.sessionToken };
}

// Serial (before the others): the server's temporary directory is then this clone's alone.
test.serial("a repository over the clone size limit fails provisioning with that cause", async (t) => {
  const { session } = await sessionFor(t, t.context.git.repoUrl("big"));
  t.is(session.status, SessionStatus.DEGRADED);
  t.regex(session.statusMessage, /larger than the clone size limit \(524288 bytes\)/);
  t.deepEqual(await readdir(path.join(t.context.server.dataDir, "tmp")), [], "the server's temporary clone is gone");
});

test("a git server slower than the clone time limit fails provisioning with that cause", async (t) => {
  t.context.slow.delayMs = 30_000;
  const { session } = await sessionFor(t, t.context.slow.repoUrl("slow")).finally(() => (t.context.slow.delayMs = 0));
  t.is(session.status, SessionStatus.DEGRADED);
  t.regex(session.statusMessage, /took longer than 10000 ms/);
});

test("a token the git server refuses fails provisioning, and the token is nowhere: not in the message, the logs or the events", async (t) => {
  const started = Date.now();
  const { session, token } = await sessionFor(t, t.context.locked.repoUrl("locked"));
  t.is(session.status, SessionStatus.DEGRADED);
  t.regex(session.statusMessage, /Cloning .*locked\.git failed/);
  t.true(t.context.locked.requests.some((r) => r.status === 401 && r.authorization !== undefined), "the configured (wrong) token was presented");
  const base64 = Buffer.from(`x-access-token:${WRONG}`).toString("base64");
  for (const text of [session.statusMessage, ...t.context.logs]) {
    t.false(text.includes(WRONG) || text.includes(base64), "no token in any message or log line");
  }
  const { detail } = await expectError(t, clientsWithToken(t.context.server.url, token).tools.bash({ command: "true" }), Code.FailedPrecondition, ErrorReason.WORKSPACE_NOT_PROVISIONED);
  t.false(JSON.stringify(detail).includes(WRONG));
  t.true(Date.now() - started < 60_000);
});

test("a hostile repository: its submodule is not followed and its escaping symlink stays a link the tools refuse to follow", async (t) => {
  const { session, token } = await sessionFor(t, t.context.git.repoUrl("hostile"));
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  const agent = clientsWithToken(t.context.server.url, token);
  const run = async (command: string) => (await agent.tools.bash({ command })).stdout;
  t.is(await run("ls -A sub | wc -l; test -d .git/modules && echo modules || echo no-modules"), "0\nno-modules\n", "the submodule was neither cloned nor registered");
  t.is(await run("readlink escape"), `${path.join(t.context.dir, "server-secret")}\n`);
  await expectError(t, agent.tools.readFile({ path: "escape" }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
  t.is(await run("cat README.md"), "hostile\n");
});

test("a default branch that would read as an option is refused before anything runs in the sandbox", async (t) => {
  const { session } = await sessionFor(t, t.context.git.repoUrl("dash"));
  t.is(session.status, SessionStatus.DEGRADED);
  t.regex(session.statusMessage, /has a default branch name this server does not check out: '-evil'/);
});
