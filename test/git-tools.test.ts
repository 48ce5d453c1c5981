/**
 * The git tools through a real server, on every provider: seed 000's git scenarios (status,
 * commit, diff, push, branch checkout) in a session cloned from a real git server over HTTP that
 * requires a token; the refusals (force pushes, protected branches, sensitive files, bad names);
 * and the errors an agent can act on.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { GitChange } from "../gen/agentworkspace/v1/git_pb.js";
import { gate, microvmGate, probeEngines } from "./helpers/engines.ts";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { remoteGit, remoteTip, repoSession as sharedRepoSession } from "./helpers/git-repos.ts";
import { type ClientSet, expectError, startServer, type TestServer } from "./helpers/server.ts";
import { bashOk as bashIn, credentialsFile } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  git: GitServer;
  dir: string;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;
const TOKEN = "git-tools-token-0123456789abcdef";
const BOT = { name: "emergent-app[bot]", email: "emergent-app[bot]@users.noreply.example.com" };
const TOOLS = ["bash", "read", "write", "git"];
const engines = await probeEngines();
const PROVIDERS = ["local", ...(["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "git tools")), ...(microvmGate(test, "git tools") ? ["microvm"] : [])];

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-git-tools-"));
  const git = await startGitServer({ token: TOKEN });
  const logs: string[] = [];
  const server = await startServer({
    env: {
      AGENT_WORKSPACE_GIT_CREDENTIALS: await credentialsFile(dir, { [new URL(git.url).host]: TOKEN }),
      AGENT_WORKSPACE_GIT_BOT_NAME: BOT.name,
      AGENT_WORKSPACE_GIT_BOT_EMAIL: BOT.email,
    },
    onLog: (line) => logs.push(line),
  });
  t.context = { server, git, dir, logs };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/** A repository on the git server, and a session of a new agent type cloned from it. */
const repoSession = async (t: ExecutionContext<Ctx>, provider: string, options: { protectedBranches?: string[]; baseBranch?: string } = {}) => {
  const s = await sharedRepoSession(t as ExecutionContext<unknown>, t.context.server.clients.grpc, t.context.git, provider, { tools: TOOLS, ...options });
  return { ...s, op: s.c };
};

/** Runs a command in the workspace; its stdout, or a thrown error with stderr. */
const bashOk = (c: ClientSet, ws: string, command: string) => bashIn(c, command, ws);

for (const provider of PROVIDERS) {
  test(`${provider}: seed 000's git scenarios: status, commit of the named file as the bot, diff, checkout of a new branch, push with a token the workspace never sees`, async (t) => {
    const { op, ws, bare } = await repoSession(t, provider);
    const c: ClientSet = op;

    // Git status: structured changed, staged and untracked files.
    await c.tools.writeFile({ workspaceId: ws, path: "src/server.ts", content: "export const port = 8080;\n" });
    await c.tools.writeFile({ workspaceId: ws, path: "notes.md", content: "todo\n" });
    await bashOk(c, ws, "printf '# svc, staged\\n' > README.md && git add README.md");
    const status = await c.tools.gitStatus({ workspaceId: ws });
    t.is(status.branch, "main");
    t.is(status.upstream, "origin/main");
    t.is(status.ahead, 0);
    t.regex(status.commit, /^[0-9a-f]{40}$/);
    const byPath = Object.fromEntries(status.files.map((f) => [f.path, f]));
    t.is(byPath["src/server.ts"]?.unstaged, GitChange.MODIFIED);
    t.is(byPath["src/server.ts"]?.staged, GitChange.UNSPECIFIED);
    t.is(byPath["README.md"]?.staged, GitChange.MODIFIED);
    t.true(byPath["notes.md"]?.untracked);

    // Git diff: staged and unstaged, unified text plus counts.
    const diff = await c.tools.gitDiff({ workspaceId: ws });
    t.regex(diff.unstaged?.diff ?? "", /-export const port = 3000;\n\+export const port = 8080;/);
    t.deepEqual(diff.unstaged?.files.map((f) => [f.path, f.added, f.removed]), [["src/server.ts", 1, 1]]);
    t.deepEqual(diff.staged?.files.map((f) => f.path), ["README.md"]);
    t.false(diff.unstaged?.truncated);

    // Git commit: exactly the named file, as the bot; README.md stays staged, uncommitted.
    const commit = await c.tools.gitCommit({ workspaceId: ws, message: "fix: update port", files: ["src/server.ts"] });
    t.regex(commit.commit, /^[0-9a-f]{40}$/);
    t.is(commit.branch, "main");
    t.is(commit.author, `${BOT.name} <${BOT.email}>`);
    t.is(commit.filesChanged, 1);
    const after = await c.tools.gitStatus({ workspaceId: ws });
    t.is(after.ahead, 1);
    t.false(after.files.some((f) => f.path === "src/server.ts"));
    t.is(after.files.find((f) => f.path === "README.md")?.staged, GitChange.MODIFIED);
    const shown = await bashOk(c, ws, "git log -1 --format='%an <%ae>|%cn <%ce>|%s' && git show --stat --format= HEAD");
    t.true(shown.startsWith(`${BOT.name} <${BOT.email}>|${BOT.name} <${BOT.email}>|fix: update port\n`), shown);

    // Git branch operations: create and switch.
    const co = await c.tools.gitCheckout({ workspaceId: ws, branch: "feature/new-thing", create: true });
    t.deepEqual([co.branch, co.created, co.commit], ["feature/new-thing", true, commit.commit]);
    t.is((await c.tools.gitStatus({ workspaceId: ws })).branch, "feature/new-thing");

    // Git push: the branch reaches the repository with the bot's commit.
    const pushed = await c.tools.gitPush({ workspaceId: ws });
    t.deepEqual([pushed.branch, pushed.commit, pushed.created, pushed.commitsPushed], ["feature/new-thing", commit.commit, true, 1]);
    t.is(remoteGit(bare, "rev-parse", "refs/heads/feature/new-thing"), commit.commit);
    t.is(remoteGit(bare, "log", "-1", "--format=%an <%ae>", "feature/new-thing"), `${BOT.name} <${BOT.email}>`);
    t.is(remoteGit(bare, "show", "feature/new-thing:src/server.ts"), "export const port = 8080;");
    // A second push has nothing new.
    t.is((await c.tools.gitPush({ workspaceId: ws, branch: "feature/new-thing" })).commitsPushed, 0);
    // The workspace knows where its branch is now, and the token is nowhere in it.
    const config = await bashOk(c, ws, "cat .git/config; git remote -v; git status -sb | head -1");
    t.false(config.includes(TOKEN), config);
    t.false(JSON.stringify(t.context.logs).includes(TOKEN), "no token in the server's logs");
    const { events } = await c.audit.listAuditEvents({ workspaceId: ws, tool: "git", pageSize: 100 });
    t.true(events.length >= 7);
    t.false(JSON.stringify(events, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)).includes(TOKEN), "no token in the audit trail");
    t.true(events.some((e) => e.request.action === "push" && e.result.commits_pushed === "1"), JSON.stringify(events.map((e) => [e.request, e.result])));
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: a same-size change in the second the index was written is seen by the tools after the agent's own git wrote the index again`, async (t) => {
    const { op: c, ws } = await repoSession(t, provider);
    // Within one second: src/server.ts is written again (same content), the agent's git records it
    // and writes the index, and the file is replaced by other content of the same size. A later second then sees the agent's git
    // write the index again (git add of another file). The tools' git must still see the change:
    // it reads the index with the same stat rules as the agent's git, or the entry the agent's git
    // left unsmudged (for it the change showed in nanoseconds) passes as clean for the tools.
    let sameSecond = false;
    for (let attempt = 0; attempt < 5 && !sameSecond; attempt++) {
      const out = await bashOk(c, ws, [
        `t=$(date +%s); while [ "$(date +%s)" = "$t" ]; do sleep 0.01; done`,
        "cp src/server.ts src/.same && mv src/.same src/server.ts && git add src/server.ts",
        // A new file renamed over it, as WriteFile and most editors replace a file: another inode.
        "printf 'export const port = %s;\\n' $((4000 + RANDOM % 5000)) > src/.next && mv src/.next src/server.ts",
        "stat -c %Y src/server.ts .git/index | uniq | wc -l",
      ].join(" && "));
      sameSecond = out.trim() === "1";
    }
    t.true(sameSecond, "the file and the index were written in one second");
    await bashOk(c, ws, "sleep 1.2 && printf 'other\\n' > notes.md && git add notes.md");
    const status = await c.tools.gitStatus({ workspaceId: ws });
    t.is(status.files.find((f) => f.path === "src/server.ts")?.unstaged, GitChange.MODIFIED, JSON.stringify(status.files));
    const diff = await c.tools.gitDiff({ workspaceId: ws });
    t.deepEqual(diff.unstaged?.files.map((f) => [f.path, f.added, f.removed]), [["src/server.ts", 1, 1]]);
    const commit = await c.tools.gitCommit({ workspaceId: ws, message: "port", files: ["src/server.ts"] });
    t.is(commit.filesChanged, 1);
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: pushes that would rewrite history or touch protected branches are refused, and nothing reaches the repository`, async (t) => {
    const { op: c, ws, bare } = await repoSession(t, provider, { baseBranch: "main" });
    const mainTip = remoteGit(bare, "rev-parse", "main");
    await c.tools.writeFile({ workspaceId: ws, path: "a.txt", content: "a\n" });
    await c.tools.gitCommit({ workspaceId: ws, message: "add a", files: ["a.txt"] });
    // The base branch (here also the repository's default) is protected.
    await expectError(t, c.tools.gitPush({ workspaceId: ws }), Code.PermissionDenied, ErrorReason.PROTECTED_BRANCH);
    await expectError(t, c.tools.gitPush({ workspaceId: ws, branch: "main", force: true }), Code.PermissionDenied, ErrorReason.FORCE_PUSH_DENIED);
    // A branch of its own pushes; rewriting it afterwards is a force push, refused.
    await c.tools.gitCheckout({ workspaceId: ws, branch: "work", create: true });
    await c.tools.gitPush({ workspaceId: ws });
    const pushed = remoteGit(bare, "rev-parse", "work");
    await bashOk(c, ws, "git reset -q --hard HEAD~1 && echo b > b.txt");
    await c.tools.gitCommit({ workspaceId: ws, message: "add b instead", files: ["b.txt"] });
    const { detail } = await expectError(t, c.tools.gitPush({ workspaceId: ws }), Code.PermissionDenied, ErrorReason.FORCE_PUSH_DENIED);
    t.is(detail.metadata.remote_commit, pushed);
    await expectError(t, c.tools.gitPush({ workspaceId: ws, force: true }), Code.PermissionDenied, ErrorReason.FORCE_PUSH_DENIED);
    t.is(remoteGit(bare, "rev-parse", "work"), pushed, "the repository's branch is untouched");
    t.is(remoteGit(bare, "rev-parse", "main"), mainTip);
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: sensitive files are counted in diffs but never shown, never committed, never pushed`, async (t) => {
    // The session fetches env-change as its base branch; applying it changes .env without naming it.
    const { op: c, ws, bare } = await repoSession(t, provider, { baseBranch: "env-change" });
    // In a container the worktree's .env is sealed (executor/seal.ts): the change is staged
    // without it, and only README.md changes in the worktree there.
    const sealed = provider !== "local";
    await bashOk(c, ws, sealed ? "git read-tree origin/env-change && git checkout-index -f -- README.md" : "git cherry-pick -n origin/env-change");
    const diff = await c.tools.gitDiff({ workspaceId: ws });
    const env = diff.staged?.files.find((f) => f.path === ".env");
    t.truthy(env);
    t.true(env?.sensitive);
    t.is(env?.added, 1);
    t.false((diff.staged?.diff ?? "").includes("secret-value"), diff.staged?.diff);
    t.regex(diff.staged?.diff ?? "", /README\.md/);
    const against = await c.tools.gitDiff({ workspaceId: ws, ref: "HEAD", paths: [".env", "README.md"] });
    t.false((against.againstRef?.diff ?? "").includes("secret-value"));
    // A sealed .env cannot be read to compare: it is listed by name, uncounted, after the counted files.
    t.deepEqual(against.againstRef?.files.map((f) => [f.path, f.sensitive]), sealed ? [["README.md", false], [".env", true]] : [[".env", true], ["README.md", false]]);
    if (sealed) t.like(against.againstRef?.files.find((f) => f.path === ".env"), { added: 0, removed: 0 });
    const { detail } = await expectError(t, c.tools.gitCommit({ workspaceId: ws, message: "leak", files: [".env"] }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
    t.is(detail.metadata.path, ".env");
    await expectError(t, c.tools.gitCommit({ workspaceId: ws, message: "leak", all: true }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
    await expectError(t, c.tools.gitCommit({ workspaceId: ws, message: "leak", files: ["."] }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
    // Committed behind the tool's back, with the agent's own git, it still does not leave.
    await bashOk(c, ws, "git checkout -q -b leak && git -c user.name=a -c user.email=a@b commit -qm leak");
    await expectError(t, c.tools.gitPush({ workspaceId: ws }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
    t.throws(() => remoteGit(bare, "rev-parse", "--verify", "refs/heads/leak"));
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: errors an agent can act on: no repository, nothing to commit, bad names, unknown branches, existing branches, conflicts`, async (t) => {
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider });
    const plain = workspace!.id;
    try {
      await expectError(t, c.tools.gitStatus({ workspaceId: plain }), Code.FailedPrecondition, ErrorReason.NOT_A_GIT_REPOSITORY);
      await bashOk(c, plain, "git init -q -b main . && echo a > a.txt");
      t.is((await c.tools.gitStatus({ workspaceId: plain })).commit, "");
      const first = await c.tools.gitCommit({ workspaceId: plain, message: "first", files: ["a.txt"] });
      t.is(first.filesChanged, 1);
      await expectError(t, c.tools.gitCommit({ workspaceId: plain, message: "again", files: ["a.txt"] }), Code.FailedPrecondition, ErrorReason.NOTHING_TO_COMMIT);
      await expectError(t, c.tools.gitCommit({ workspaceId: plain, message: "again", all: true }), Code.FailedPrecondition, ErrorReason.NOTHING_TO_COMMIT);
      await expectError(t, c.tools.gitCommit({ workspaceId: plain, message: "", files: ["a.txt"] }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
      await expectError(t, c.tools.gitCommit({ workspaceId: plain, message: "m" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
      await expectError(t, c.tools.gitCommit({ workspaceId: plain, message: "m", files: ["missing.txt"] }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
      await expectError(t, c.tools.gitCommit({ workspaceId: plain, message: "m", files: ["../outside.txt"] }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
      for (const bad of ["-f", "a..b", "a b", "x.lock", "/x", "x/", "@", "a~1", "a:b", ".hidden", "HEAD", ""]) {
        await expectError(t, c.tools.gitCheckout({ workspaceId: plain, branch: bad, create: true }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
      }
      await expectError(t, c.tools.gitCheckout({ workspaceId: plain, branch: "nope" }), Code.NotFound, ErrorReason.REVISION_NOT_FOUND);
      await expectError(t, c.tools.gitCheckout({ workspaceId: plain, branch: "main", create: true }), Code.AlreadyExists, ErrorReason.BRANCH_EXISTS);
      await expectError(t, c.tools.gitDiff({ workspaceId: plain, ref: "nope" }), Code.NotFound, ErrorReason.REVISION_NOT_FOUND);
      await expectError(t, c.tools.gitDiff({ workspaceId: plain, ref: "--output=/tmp/x" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
      // A local change the other branch would overwrite.
      await c.tools.gitCheckout({ workspaceId: plain, branch: "other", create: true });
      await bashOk(c, plain, "echo other > a.txt && git -c user.name=a -c user.email=a@b commit -qam other && git switch -q main && echo mine > a.txt");
      const { detail } = await expectError(t, c.tools.gitCheckout({ workspaceId: plain, branch: "other" }), Code.FailedPrecondition, ErrorReason.CHECKOUT_CONFLICT);
      t.is(detail.metadata.paths, "a.txt");
      // Against a ref: the working tree's change since the first commit.
      const against = await c.tools.gitDiff({ workspaceId: plain, ref: first.commit });
      t.deepEqual(against.againstRef?.files.map((f) => [f.path, f.added, f.removed]), [["a.txt", 1, 1]]);
      t.is(against.staged, undefined);
      await expectError(t, c.tools.gitPush({ workspaceId: plain }), Code.FailedPrecondition, ErrorReason.NO_REPOSITORY);
    } finally {
      await c.workspaces.deleteWorkspace({ id: plain }).catch(() => undefined);
    }
  });
}

test("local: a push whose caller gives up at its deadline lands nothing in the repository afterwards", async (t) => {
  const { op: c, ws, bare } = await repoSession(t, "local");
  await c.tools.gitCheckout({ workspaceId: ws, branch: "late", create: true });
  await c.tools.writeFile({ workspaceId: ws, path: "late.txt", content: "late\n" });
  await c.tools.gitCommit({ workspaceId: ws, message: "late", files: ["late.txt"] });
  t.context.git.delayMs = 2500;
  try {
    const err = await t.throwsAsync(c.tools.gitPush({ workspaceId: ws }, { timeoutMs: 1500 }));
    t.is(ConnectError.from(err).code, Code.DeadlineExceeded);
    // The push would land a few delayed requests later if the server went on without its caller.
    await new Promise((resolve) => setTimeout(resolve, 9000));
  } finally {
    t.context.git.delayMs = 0;
  }
  t.is(remoteTip(bare, "late"), undefined);
});

// The local provider's workspaces live under the data directory on the host, which may sit inside a
// checkout (`./.data` in a clone of this project): git must not find that repository from a workspace.
test("local: a workspace inside a repository on the host is no repository, for the git tools and for the agent's own git", async (t) => {
  const host = await mkdtemp(path.join(tmpdir(), "aw-host-repo-"));
  remoteGit(host, "init", "-q", "-b", "main");
  remoteGit(host, "-c", "user.name=h", "-c", "user.email=h@h", "commit", "-q", "--allow-empty", "-m", "host secret history");
  const server = await startServer({ dataDir: path.join(host, ".data") });
  try {
    const c = server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider: "local" });
    const ws = workspace!.id;
    await expectError(t, c.tools.gitStatus({ workspaceId: ws }), Code.FailedPrecondition, ErrorReason.NOT_A_GIT_REPOSITORY);
    await expectError(t, c.tools.gitDiff({ workspaceId: ws }), Code.FailedPrecondition, ErrorReason.NOT_A_GIT_REPOSITORY);
    const own = await c.tools.bash({ workspaceId: ws, command: "git log --oneline; git rev-parse --show-toplevel" });
    t.regex(own.stderr, /not a git repository/);
    t.notRegex(own.stdout + own.stderr, /host secret history/);
    // Inside the workspace, a repository of its own is found, from its subdirectories too.
    await c.tools.bash({ workspaceId: ws, command: "git init -q -b main . && mkdir -p sub" });
    const sub = await c.tools.bash({ workspaceId: ws, command: "cd sub && git rev-parse --show-toplevel" });
    t.is(path.basename(sub.stdout.trim()), ws);
    t.is((await c.tools.gitStatus({ workspaceId: ws })).branch, "main");
  } finally {
    await server.close();
    await rm(host, { recursive: true, force: true });
  }
});

test("local: a push mirror no push used for the operator's idle time is deleted, and the next push makes it again", async (t) => {
  const server = await startServer({
    env: {
      AGENT_WORKSPACE_GIT_CREDENTIALS: await credentialsFile(t.context.dir, { [new URL(t.context.git.url).host]: TOKEN }),
      AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS: "3000",
    },
  });
  try {
    const { c, ws, bare } = await sharedRepoSession(t as ExecutionContext<unknown>, server.clients.grpc, t.context.git, "local", { tools: TOOLS });
    const mirrors = async () => (await readdir(path.join(server.dataDir, "git-mirrors"))).filter((n) => n.endsWith(".git"));
    await c.tools.gitCheckout({ workspaceId: ws, branch: "idle", create: true });
    const pushFile = async (name: string) => {
      await c.tools.writeFile({ workspaceId: ws, path: name, content: `${name}\n` });
      const { commit } = await c.tools.gitCommit({ workspaceId: ws, message: name, files: [name] });
      await c.tools.gitPush({ workspaceId: ws });
      t.is(remoteTip(bare, "idle"), commit);
    };
    await pushFile("first.txt");
    t.is((await mirrors()).length, 1);
    // Checked every second: gone a little after 3 s without a push.
    const deadline = Date.now() + 20_000;
    while ((await mirrors()).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    t.deepEqual(await mirrors(), [], "the unused mirror was deleted");
    await pushFile("second.txt");
    t.is((await mirrors()).length, 1);
  } finally {
    await server.close();
  }
});
