/**
 * GitPush with a GitHub App, end to end: the server signs a JWT with the app's private key, a
 * GitHub API started by the test verifies it with the public key and issues installation tokens
 * with an expiry, and the git server accepts only those tokens while they are valid. Commits carry
 * the app's bot identity as GitHub attributes it; an expired token is replaced by a fresh one.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import anyTest, { type TestFn } from "ava";
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { type GitHubAppServer, startGitHubAppServer } from "./helpers/github-app-server.ts";
import { expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { bashOk, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  git: GitServer;
  api: GitHubAppServer;
  dir: string;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;
/** Tokens live this long; the server renews a quarter of a lifetime before expiry. */
const LIFETIME_MS = 4000;

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-git-app-"));
  const api = await startGitHubAppServer({ slug: "emergent-app", botUserId: 41898282, tokenLifetimeMs: LIFETIME_MS });
  // The git server knows no fixed token worth having: only the app's live tokens open it.
  const git = await startGitServer({ token: `unused-${Date.now()}-fixed-token`, acceptToken: (token) => api.isValid(token) });
  const keyFile = path.join(dir, "app.pem");
  await writeFile(keyFile, api.privateKeyPem, { mode: 0o600 });
  const logs: string[] = [];
  const server = await startServer({
    env: {
      ...LOCAL_ONLY,
      AGENT_WORKSPACE_GITHUB_APP_ID: String(api.appId),
      AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: keyFile,
      // A GitHub Enterprise style base URL: the API under /api/v3.
      AGENT_WORKSPACE_GITHUB_API_URL: `${api.url}/api/v3`,
      AGENT_WORKSPACE_GITHUB_APP_HOSTS: new URL(git.url).host,
    },
    onLog: (line) => logs.push(line),
  });
  t.context = { server, git, api, dir, logs };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
  await t.context.api?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

test("a session clones and pushes with the app's installation tokens; commits carry <slug>[bot] and its noreply address; an expired token is renewed", async (t) => {
  const { server, git, api, logs } = t.context;
  const op = server.clients.grpc;
  await git.createRepo("acme/svc", { branches: { main: { "src/server.ts": "export const port = 3000;\n" } } });
  api.addInstallation("acme/svc", 7001);
  await op.config.createAgentType({ agentType: { id: "app-pusher", workspace: { enabled: true, tools: ["bash", "write", "git"], repoSource: { type: "task_context" }, checkoutOnStart: true } } });
  const started = await op.workspaces.startSession({ agentType: "app-pusher", task: { repositoryUrl: git.repoUrl("acme/svc") } });
  const { session } = await watchUntilReady(op, started.session!.id, 60_000);
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  const ws = session.workspaceId;

  await op.tools.gitCheckout({ workspaceId: ws, branch: "fix/port", create: true });
  await op.tools.writeFile({ workspaceId: ws, path: "src/server.ts", content: "export const port = 8080;\n" });
  const commit = await op.tools.gitCommit({ workspaceId: ws, message: "fix: update port", files: ["src/server.ts"] });
  const bot = `emergent-app[bot] <41898282+emergent-app[bot]@users.noreply.github.com>`;
  t.is(commit.author, bot);
  const first = await op.tools.gitPush({ workspaceId: ws });
  t.deepEqual([first.created, first.commitsPushed], [true, 1]);
  const tokensAfterFirst = api.issued.length;
  t.true(tokensAfterFirst >= 1);
  const bare = git.repoPath("acme/svc");
  const remoteLog = execFileSync("git", ["-C", bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "fix/port"], { encoding: "utf8" }).trim();
  t.is(remoteLog, `${bot}|${bot}`);
  // Every authorised request carried an app token, the JWT was verified, and the identity was looked up once.
  const pushes = git.requests.filter((r) => r.path.endsWith("/git-receive-pack") && r.method === "POST");
  t.true(pushes.length >= 1 && pushes.every((r) => r.authorized));
  t.true(api.requests.filter((r) => r.path.endsWith("/access_tokens")).every((r) => r.appAuthenticated && r.status === 201));
  t.is(api.requests.filter((r) => r.path.endsWith("/app")).length, 1);

  // Past the token's lifetime the next push gets a fresh one, and the old one no longer opens the server.
  const old = api.issued.at(-1)!.token;
  await new Promise((resolve) => setTimeout(resolve, LIFETIME_MS + 200));
  t.false(api.isValid(old));
  await bashOk(op, "echo more >> src/server.ts", ws);
  await op.tools.gitCommit({ workspaceId: ws, message: "more", files: ["src/server.ts"] });
  const second = await op.tools.gitPush({ workspaceId: ws });
  t.is(second.commitsPushed, 1);
  t.true(api.issued.length > tokensAfterFirst, "a new token was issued");
  t.is(api.requests.filter((r) => r.path.endsWith("/app")).length, 1, "the identity is not looked up again");
  const everyToken = api.issued.map((i) => i.token);
  for (const token of everyToken) {
    t.false(logs.join("\n").includes(token), "no token in the logs");
    t.false((await bashOk(op, "cat .git/config; git config --list", ws)).includes(token));
  }
});

test("the app's API failing is GIT_CREDENTIAL_UNAVAILABLE for the push, with nothing of the key or a token in the message", async (t) => {
  const { server, git, api } = t.context;
  const op = server.clients.grpc;
  await git.createRepo("acme/down", { branches: { main: { "a.txt": "a\n" } } });
  api.addInstallation("acme/down", 7002);
  await op.config.createAgentType({ agentType: { id: "app-down", workspace: { enabled: true, tools: ["bash", "write", "git"], repoSource: { type: "task_context" }, checkoutOnStart: true } } });
  const started = await op.workspaces.startSession({ agentType: "app-down", task: { repositoryUrl: git.repoUrl("acme/down") } });
  const { session } = await watchUntilReady(op, started.session!.id, 60_000);
  const ws = session.workspaceId;
  await op.tools.gitCheckout({ workspaceId: ws, branch: "work", create: true });
  await op.tools.writeFile({ workspaceId: ws, path: "b.txt", content: "b\n" });
  await op.tools.gitCommit({ workspaceId: ws, message: "b", files: ["b.txt"] });
  // Once the clone's token has expired, the push needs a fresh one, and the API fails to issue it.
  await new Promise((resolve) => setTimeout(resolve, LIFETIME_MS + 200));
  api.fail = { status: 500, message: "installation token service is down", path: /access_tokens/ };
  try {
    const { detail } = await expectError(t, op.tools.gitPush({ workspaceId: ws }), Code.Unavailable, ErrorReason.GIT_CREDENTIAL_UNAVAILABLE);
    t.false(detail.message.includes("PRIVATE KEY"));
    t.regex(detail.message, /500|down/);
  } finally {
    api.fail = undefined;
  }
  t.is((await op.tools.gitPush({ workspaceId: ws })).commitsPushed, 1, "the next push, with the API back, works");
});
