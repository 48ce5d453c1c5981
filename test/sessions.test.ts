/**
 * Seed 003's "Auto-provisioning on session start", "Task context binding" and "Setup commands
 * execution", scenario by scenario, through a real client of a real server (local provider),
 * cloning from a real git server over HTTP that requires a token; and the session token's reach.
 * Container providers run the same flow in sessions-containers.test.ts.
 */
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { Code } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WorkspaceConfigSchema } from "../gen/agentworkspace/v1/config_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { post } from "./helpers/http.ts";
import { ROOT } from "./helpers/process.ts";
import { type ClientSet, expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { bashOk, clientsWithToken, credentialsFile, eventually, outline, watchUntilReady } from "./helpers/sessions.ts";

type Config = MessageInitShape<typeof WorkspaceConfigSchema>;
interface Ctx {
  server: TestServer;
  git: GitServer;
  dir: string;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;
const TOKEN = "git-token-0123456789abcdef";
const ALL_TOOLS = ["bash", "read", "write", "edit", "patch", "delete", "list", "glob", "grep"];

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-sessions-"));
  const git = await startGitServer({ token: TOKEN });
  await git.createRepo("app", {
    branches: {
      main: { "README.md": "main branch\n", "run.sh": { content: "#!/bin/sh\necho run\n", mode: "100755" } },
      "feature/auth": { "README.md": "feature auth\n", "auth.ts": "export const auth = 1;\n" },
      develop: { "README.md": "develop\n" },
    },
  });
  await git.createRepo("untouched", { branches: { main: { "x.txt": "x\n" } } });
  await git.createRepo("infra", { defaultBranch: "trunk", branches: { trunk: { "infra.txt": "infra trunk\n" }, main: { "infra.txt": "infra main\n" } } });
  const credentials = await credentialsFile(dir, { [new URL(git.url).host]: TOKEN });
  const logs: string[] = [];
  const server = await startServer({
    env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: credentials, AGENT_WORKSPACE_SESSION_TICK_MS: "100" },
    onLog: (line) => logs.push(line),
  });
  t.context = { server, git, dir, logs };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

let serial = 0;
const newId = (hint: string) => `${hint}-${process.pid}-${++serial}`;

async function agentType(clients: ClientSet, workspace: Config): Promise<string> {
  const id = newId("sess");
  await clients.config.createAgentType({ agentType: { id, workspace: { tools: ALL_TOOLS, ...workspace } } });
  return id;
}

async function startSession(clients: ClientSet, type: string, task: { repositoryUrl?: string; branch?: string; pullRequestNumber?: bigint; baseBranch?: string } = {}) {
  const res = await clients.workspaces.startSession({ agentType: type, task });
  if (!res.session) throw new Error("no session");
  return { session: res.session, token: res.sessionToken };
}

const bash = bashOk;

test("PR-based task context: the repository is cloned at the task's branch, the task reaches commands and the API, and no credential reaches the workspace", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true, repoSource: { type: "task_context" }, checkoutOnStart: true });
  const url = git.repoUrl("app");
  const { session, token } = await startSession(op, type, { repositoryUrl: url, branch: "feature/auth", pullRequestNumber: 42n, baseBranch: "main" });
  t.is(session.status, SessionStatus.PROVISIONING);
  t.regex(token, /^awsess_[A-Za-z0-9_-]{43}$/);
  t.is(session.workspaceId, "");

  const { events, session: ready } = await watchUntilReady(op, session.id);
  t.deepEqual(outline(events), ["status PROVISIONING", "started SANDBOX", "ended SANDBOX ok", "started CLONE", "ended CLONE ok", "status ACTIVE"]);
  t.true(events.some((e) => e.kind === "output" && e.stage === "CLONE"), "git's progress is streamed");
  t.false(events.some((e) => e.text?.includes(server.dataDir)), "no event shows the server's own paths");
  t.is(ready.status, SessionStatus.ACTIVE);
  t.not(ready.workspaceId, "");
  t.is(ready.checkout?.branch, "feature/auth");
  t.is(ready.checkout?.repositoryUrl, url);
  t.is(ready.task?.pullRequestNumber, 42n);

  const agent = clientsWithToken(server.url, token);
  t.is(await bash(agent, "git rev-parse --abbrev-ref HEAD"), "feature/auth\n");
  t.is(await bash(agent, "cat README.md"), "feature auth\n");
  t.is(await bash(agent, "git rev-parse --abbrev-ref --symbolic-full-name @{u}"), "origin/feature/auth\n");
  t.regex(await bash(agent, "git branch -r"), /origin\/main/, "the base branch is fetched beside it");
  t.is(await bash(agent, "git remote get-url origin"), `${url}\n`);
  t.is(await bash(agent, "git status --porcelain"), "", "nothing left behind in the work tree");
  t.is(
    await bash(agent, "echo $AGENT_TASK_REPOSITORY_URL $AGENT_TASK_BRANCH $AGENT_TASK_PULL_REQUEST_NUMBER $AGENT_TASK_BASE_BRANCH"),
    `${url} feature/auth 42 main\n`,
  );
  const secrets = await bash(agent, `grep -rl -e '${TOKEN}' -e '${Buffer.from(`x-access-token:${TOKEN}`).toString("base64")}' . || true`);
  t.is(secrets, "", "the token is nowhere in the workspace (.git included)");
  const { workspace } = await op.workspaces.getWorkspace({ id: ready.workspaceId });
  t.is(workspace?.sessionId, session.id);
  t.is(workspace?.task?.branch, "feature/auth");
  t.is(workspace?.task?.baseBranch, "main");
  t.true(git.requests.every((r) => r.authorized || r.status === 401), "the server authenticated with its configured token");
  t.false(t.context.logs.some((l) => l.includes(TOKEN) || l.includes(token)), "neither the git token nor the session token is logged");
  const db = await readFile(path.join(server.dataDir, "agent-workspace.db"));
  t.false(db.includes(token), "the session token is not in the database");
});

test("task context overrides the agent type's branch, which is only the fallback", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.grpc;
  const type = await agentType(op, { enabled: true, repoSource: { type: "task_context", branch: "main" }, checkoutOnStart: true });
  const develop = await startSession(op, type, { repositoryUrl: git.repoUrl("app"), branch: "develop" });
  const fallback = await startSession(op, type, { repositoryUrl: git.repoUrl("infra") });
  const a = await watchUntilReady(op, develop.session.id);
  const b = await watchUntilReady(op, fallback.session.id);
  t.is(a.session.checkout?.branch, "develop");
  t.is(await bash(clientsWithToken(server.url, develop.token), "cat README.md"), "develop\n");
  t.is(b.session.checkout?.branch, "main", "no task branch: the agent type's branch, not the repository's default (trunk)");
  t.is(await bash(clientsWithToken(server.url, fallback.token), "cat infra.txt"), "infra main\n");
});

test("a task without a repository, repo_source none, and checkout_on_start = false all give an empty /workspace and no clone", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const cases: Array<[string, Config, { repositoryUrl?: string }]> = [
    ["task_context without repository", { enabled: true, repoSource: { type: "task_context" }, checkoutOnStart: true }, {}],
    ["none", { enabled: true, repoSource: { type: "none" }, checkoutOnStart: true }, { repositoryUrl: git.repoUrl("untouched") }],
    ["checkout_on_start false", { enabled: true, repoSource: { type: "fixed", url: git.repoUrl("untouched") }, checkoutOnStart: false }, {}],
  ];
  for (const [name, cfg, task] of cases) {
    const type = await agentType(op, cfg);
    const { session, token } = await startSession(op, type, task);
    const { events, session: ready } = await watchUntilReady(op, session.id);
    t.deepEqual(outline(events), ["status PROVISIONING", "started SANDBOX", "ended SANDBOX ok", "status ACTIVE"], name);
    t.is(ready.checkout, undefined, name);
    t.is(await bash(clientsWithToken(server.url, token), "ls -A | wc -l"), "0\n", `${name}: /workspace is empty`);
    t.false(git.requests.some((r) => r.path.includes("/untouched.git")), `${name}: the git server was not asked`);
  }
});

test("a fixed repository is cloned whatever the task says", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true, repoSource: { type: "fixed", url: git.repoUrl("infra") }, checkoutOnStart: true });
  const { session, token } = await startSession(op, type, { repositoryUrl: git.repoUrl("app"), branch: "develop" });
  const { session: ready } = await watchUntilReady(op, session.id);
  t.is(ready.checkout?.repositoryUrl, git.repoUrl("infra"));
  t.is(ready.checkout?.branch, "trunk", "the repository's default branch");
  t.is(await bash(clientsWithToken(server.url, token), "cat infra.txt"), "infra trunk\n");
});

test("setup commands run in order in /workspace after the clone; ACTIVE only after the last, with their output streamed", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, {
    enabled: true,
    repoSource: { type: "fixed", url: git.repoUrl("app") },
    checkoutOnStart: true,
    setupCommands: ["pwd > where.txt && test -f README.md && echo first >> order.txt", "echo second >> order.txt; echo to-stderr >&2"],
  });
  const { session, token } = await startSession(op, type);
  const { events, session: ready } = await watchUntilReady(op, session.id);
  t.deepEqual(outline(events), [
    "status PROVISIONING",
    "started SANDBOX",
    "ended SANDBOX ok",
    "started CLONE",
    "ended CLONE ok",
    "started SETUP_COMMAND 0",
    "ended SETUP_COMMAND 0 ok",
    "started SETUP_COMMAND 1",
    "ended SETUP_COMMAND 1 ok",
    "status ACTIVE",
  ]);
  t.true(events.some((e) => e.kind === "output" && e.stage === "SETUP_COMMAND" && e.index === 1 && e.text === "to-stderr\n"));
  t.deepEqual(ready.warnings, []);
  const agent = clientsWithToken(server.url, token);
  t.is(await bash(agent, "cat order.txt"), "first\nsecond\n");
  t.is(await bash(agent, "cat where.txt"), await bash(agent, "pwd"), "setup ran in the workspace root, where tool calls start");
});

test("a failing setup command skips the rest; the workspace is ready with a warning naming it", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true, setupCommands: ["echo one >> log.txt", "echo broken >&2; exit 3", "echo three >> log.txt"] });
  const { session, token } = await startSession(op, type);
  const { events, session: ready } = await watchUntilReady(op, session.id);
  t.deepEqual(outline(events), [
    "status PROVISIONING",
    "started SANDBOX",
    "ended SANDBOX ok",
    "started SETUP_COMMAND 0",
    "ended SETUP_COMMAND 0 ok",
    "started SETUP_COMMAND 1",
    "ended SETUP_COMMAND 1 failed",
    "warning SETUP_COMMAND",
    "status ACTIVE",
  ]);
  t.is(ready.status, SessionStatus.ACTIVE);
  t.is(ready.warnings.length, 1);
  t.is(ready.warnings[0].command, "echo broken >&2; exit 3");
  t.is(ready.warnings[0].exitCode, 3);
  t.regex(ready.warnings[0].message, /exited with 3; the remaining 1 were skipped \(partial setup\)/);
  t.is(await bash(clientsWithToken(server.url, token), "cat log.txt"), "one\n");
});

test("a setup command past its timeout is killed with its process tree; ready with a warning, logged", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  // The seed's 5 minutes, shortened through the agent type's setting.
  const type = await agentType(op, { enabled: true, setupCommandTimeoutMs: 1000n, setupCommands: ["(sleep 60; echo late > late.txt) & echo $! > child.pid; sleep 60", "echo never > never.txt"] });
  const { session, token } = await startSession(op, type);
  const { session: ready } = await watchUntilReady(op, session.id);
  t.is(ready.status, SessionStatus.ACTIVE);
  t.is(ready.warnings.length, 1);
  t.true(ready.warnings[0].timedOut);
  t.regex(ready.warnings[0].message, /timed out after 1000 ms and was killed/);
  const agent = clientsWithToken(server.url, token);
  t.is(await bash(agent, "ls never.txt 2>/dev/null || echo absent"), "absent\n", "the next command was skipped");
  // Gone, or a zombie waiting for an init that does not reap (outside a container): not running.
  const state = "s=$(cut -d' ' -f3 /proc/$(cat child.pid)/stat 2>/dev/null); if [ -z \"$s\" ] || [ \"$s\" = Z ]; then echo gone; else echo alive; fi";
  t.is(await bash(agent, state), "gone\n", "the background child died with the command");
  t.true(t.context.logs.some((l) => l.includes("setup command timed out") && l.includes(session.id)));
});

test("an agent type with the workspace disabled gets a session without one; its tool calls answer NOT_FOUND (HTTP 404)", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: false });
  const { session, token } = await startSession(op, type);
  t.is(session.status, SessionStatus.ACTIVE);
  t.false(session.workspaceEnabled);
  t.is(session.workspaceId, "");
  await expectError(t, clientsWithToken(server.url, token).tools.readFile({ path: "a" }), Code.NotFound, ErrorReason.WORKSPACE_DISABLED);
  const res = await post(server.url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ command: "true" }), "application/json", { authorization: `Bearer ${token}` });
  t.is(res.status, 404);
});

test("tool restriction: a session of an agent type with tools [read, grep] calling bash gets the seed's message and HTTP 403", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const id = newId("ro");
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: ["read", "grep"] } } });
  const { session, token } = await startSession(op, id);
  await watchUntilReady(op, session.id);
  const agent = clientsWithToken(server.url, token);
  const { error } = await expectError(t, agent.tools.bash({ command: "id" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
  t.is(error.rawMessage, "Tool 'bash' is not enabled for this agent type");
  const res = await post(server.url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ command: "id" }), "application/json", { authorization: `Bearer ${token}` });
  t.is(res.status, 403);
  t.is(JSON.parse(res.body).message, "Tool 'bash' is not enabled for this agent type");
  await expectError(t, agent.tools.readFile({ path: "missing" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
});

test("a session token reaches its own workspace and session only, and stops working at EndSession", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true });
  const a = await startSession(op, type);
  const b = await startSession(op, type);
  const readyA = (await watchUntilReady(op, a.session.id)).session;
  const readyB = (await watchUntilReady(op, b.session.id)).session;
  const agent = clientsWithToken(server.url, a.token);
  await agent.tools.writeFile({ path: "mine.txt", content: "a" });
  t.is((await agent.tools.bash({ workspaceId: readyA.workspaceId, command: "cat mine.txt" })).stdout, "a", "naming its own workspace works too");
  await expectError(t, agent.tools.readFile({ workspaceId: readyB.workspaceId, path: "x" }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  const plain = await op.workspaces.createWorkspace({});
  await expectError(t, agent.tools.bash({ workspaceId: plain.workspace!.id, command: "true" }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  await expectError(t, agent.workspaces.getSession({ id: b.session.id }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  t.is((await agent.workspaces.getSession({})).session?.id, a.session.id, "an empty id is its own session");
  for (const call of [
    () => agent.config.listAgentTypes({}),
    () => agent.config.createAgentType({ agentType: { id: newId("x") } }),
    () => agent.workspaces.createWorkspace({}),
    () => agent.workspaces.deleteWorkspace({ id: readyA.workspaceId }),
    () => agent.workspaces.listWorkspaces({}),
    () => agent.workspaces.startSession({ agentType: type }),
    () => agent.workspaces.listSessions({}),
    () => agent.workspaces.endSession({ id: b.session.id }),
  ]) {
    await expectError(t, call(), Code.PermissionDenied, ErrorReason.CALLER_NOT_PERMITTED);
  }
  const rest = await fetch(`${server.url}/api/v1/agent-types`, { headers: { authorization: `Bearer ${a.token}` } });
  t.is(rest.status, 403, "nor through the REST paths");
  t.is(((await rest.json()) as { reason: string }).reason, "ERROR_REASON_CALLER_NOT_PERMITTED");

  const ended = await op.workspaces.endSession({ id: a.session.id });
  t.is(ended.session?.status, SessionStatus.ENDED);
  t.is((await op.workspaces.endSession({ id: a.session.id })).session?.status, SessionStatus.ENDED, "ending twice is harmless");
  await expectError(t, agent.tools.bash({ command: "true" }), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
  await expectError(t, op.workspaces.getWorkspace({ id: readyA.workspaceId }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
  await expectError(t, clientsWithToken(server.url, "awsess_forged").tools.bash({ command: "true" }), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
  t.is((await clientsWithToken(server.url, b.token).tools.bash({ command: "echo ok" })).stdout, "ok\n", "the other session is untouched");
});

test("a clone that fails on every provider leaves the session DEGRADED: no workspace, the cause logged, tool calls FAILED_PRECONDITION", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true, repoSource: { type: "task_context" }, checkoutOnStart: true });
  const { session, token } = await startSession(op, type, { repositoryUrl: git.repoUrl("does-not-exist") });
  const { events, session: after } = await watchUntilReady(op, session.id);
  t.deepEqual(outline(events), ["status PROVISIONING", "started SANDBOX", "ended SANDBOX ok", "started CLONE", "ended CLONE failed", "status DEGRADED"]);
  t.is(after.status, SessionStatus.DEGRADED);
  t.is(after.workspaceId, "");
  t.regex(after.statusMessage, /could not be provisioned/);
  const { detail } = await expectError(t, clientsWithToken(server.url, token).tools.bash({ command: "true" }), Code.FailedPrecondition, ErrorReason.WORKSPACE_NOT_PROVISIONED);
  t.regex(detail.message, /could not be provisioned/);
  t.true(t.context.logs.some((l) => l.includes("session provisioning failed") && l.includes(session.id)));
  t.false(server.app.workspaces.listRecords("", {}).some((r) => r.session?.id === session.id), "the half-made workspace was removed");
});

test("idle sessions end and their workspaces go; tool calls keep a session alive", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  // Long enough that a loaded machine's pauses between the calls below stay well inside it.
  const type = await agentType(op, { enabled: true, sessionIdleTimeoutMs: 4000n });
  const idle = await startSession(op, type);
  const busy = await startSession(op, type);
  const idleWs = (await watchUntilReady(op, idle.session.id)).session.workspaceId;
  await watchUntilReady(op, busy.session.id);
  const agent = clientsWithToken(server.url, busy.token);
  const until = Date.now() + 5000;
  while (Date.now() < until) {
    await agent.tools.bash({ command: "true" });
    await new Promise((r) => setTimeout(r, 200));
  }
  const ended = await eventually(async () => {
    const { session } = await op.workspaces.getSession({ id: idle.session.id });
    return session?.status === SessionStatus.ENDED ? session : undefined;
  }, 20_000, "the idle session to end");
  t.regex(ended.statusMessage, /idle timeout/);
  t.is((await op.workspaces.getSession({ id: busy.session.id })).session?.status, SessionStatus.ACTIVE);
  await eventually(() => (server.app.workspaces.find(idleWs) === undefined ? true : undefined), 20_000, "the idle session's workspace to go");
  await expectError(t, op.workspaces.getWorkspace({ id: idleWs }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
  const long = await agent.tools.bash({ command: "sleep 5; echo done" });
  t.is(long.stdout, "done\n", "a call running longer than the idle timeout is not cut off");
});

test("StartSession refuses an unknown agent type and a bad task before anything is made", async (t) => {
  const op = t.context.server.clients.connect;
  await expectError(t, op.workspaces.startSession({ agentType: "no-such-type" }), Code.NotFound, ErrorReason.AGENT_TYPE_NOT_FOUND);
  const type = await agentType(op, { enabled: true });
  for (const task of [{ repositoryUrl: "file:///etc" }, { repositoryUrl: "ext::sh -c touch% /tmp/pwned" }, { repositoryUrl: "https://u:secret@example.com/r.git" }, { repositoryUrl: "https://example.com/r.git", branch: "--upload-pack=touch /tmp/x" }]) {
    const { detail } = await expectError(t, op.workspaces.startSession({ agentType: type, task }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.regex(detail.metadata.field ?? "", /^task\./);
  }
});

/** The ready warm-pool workspaces of an agent type, from the server's own records. */
function pooled(server: TestServer, type: string) {
  return server.app.workspaces.listRecords("", {}).filter((r) => r.agentType?.id === type && r.pool?.ready);
}

test("warm pool: a session takes a ready workspace (cloned, set up) at once, the pool refills, and a configuration change drains the old pool", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const workspace: Config = {
    enabled: true,
    repoSource: { type: "fixed", url: git.repoUrl("app") },
    checkoutOnStart: true,
    setupCommands: ["echo v1 > setup.txt"],
    warmPoolSize: 2,
  };
  const type = await agentType(op, workspace);
  const first = await eventually(() => (pooled(server, type).length === 2 ? pooled(server, type) : undefined), 30_000, "the pool to fill");
  const started = await op.workspaces.startSession({ agentType: type, task: {} });
  const s = started.session!;
  t.is(s.status, SessionStatus.ACTIVE, "no provisioning to wait for");
  t.true(s.fromWarmPool);
  t.true(first.some((r) => r.id === s.workspaceId));
  t.is(s.checkout?.branch, "main");
  const { events } = await watchUntilReady(op, s.id);
  t.deepEqual(outline(events), ["status PROVISIONING", "started WARM_POOL", "ended WARM_POOL ok", "status ACTIVE"]);
  const agent = clientsWithToken(server.url, started.sessionToken);
  t.is(await bash(agent, "cat setup.txt README.md"), "v1\nmain branch\n");
  const { workspace: ws } = await op.workspaces.getWorkspace({ id: s.workspaceId });
  t.is(ws?.sessionId, s.id, "the pooled workspace now belongs to the session");
  await eventually(() => (pooled(server, type).length === 2 ? true : undefined), 30_000, "the pool to refill");

  // A new configuration is a new pool: the old one drains, sessions get the new configuration.
  const old = new Set(pooled(server, type).map((r) => r.id));
  await op.config.updateWorkspaceConfig({ agentTypeId: type, workspaceConfig: { ...workspace, tools: ALL_TOOLS, setupCommands: ["echo v2 > setup.txt"] } });
  await eventually(() => {
    const now = pooled(server, type);
    return now.length === 2 && now.every((r) => !old.has(r.id)) ? true : undefined;
  }, 30_000, "the new pool to replace the old");
  for (const id of old) t.is(server.app.workspaces.find(id), undefined, "the old pool's workspaces are removed");
  const second = await op.workspaces.startSession({ agentType: type, task: {} });
  t.true(second.session?.fromWarmPool);
  t.is(await bash(clientsWithToken(server.url, second.sessionToken), "cat setup.txt"), "v2\n");
  t.true(server.app.workspaces.find(s.workspaceId) !== undefined, "the running session keeps its workspace");

  // An untouched workspace goes back to the pool when its session ends; a used one is removed.
  await op.config.updateWorkspaceConfig({ agentTypeId: type, workspaceConfig: { ...workspace, tools: ALL_TOOLS, setupCommands: ["echo v2 > setup.txt"], warmPoolSize: 3 } });
  await eventually(() => (pooled(server, type).length === 3 ? true : undefined), 30_000, "the pool to grow");
  const untouched = await op.workspaces.startSession({ agentType: type, task: {} });
  await op.workspaces.endSession({ id: untouched.session!.id });
  t.true(pooled(server, type).some((r) => r.id === untouched.session!.workspaceId), "returned to the pool");
  await op.workspaces.endSession({ id: second.session!.id });
  t.is(server.app.workspaces.find(second.session!.workspaceId), undefined, "a used workspace is removed");
  await op.config.updateWorkspaceConfig({ agentTypeId: type, workspaceConfig: { ...workspace, tools: ALL_TOOLS, warmPoolSize: 0 } });
  await eventually(() => (pooled(server, type).length === 0 ? true : undefined), 30_000, "the pool to drain");
});

test("a warm pool of a task_context agent type serves tasks without a repository; a task naming one is provisioned", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true, repoSource: { type: "task_context" }, checkoutOnStart: true, warmPoolSize: 1 });
  await eventually(() => (pooled(server, type).length === 1 ? true : undefined), 30_000, "the pool to fill");
  const withRepo = await op.workspaces.startSession({ agentType: type, task: { repositoryUrl: git.repoUrl("app") } });
  t.is(withRepo.session?.status, SessionStatus.PROVISIONING);
  t.false(withRepo.session?.fromWarmPool);
  const without = await op.workspaces.startSession({ agentType: type, task: {} });
  t.true(without.session?.fromWarmPool);
  t.is((await watchUntilReady(op, withRepo.session!.id)).session.checkout?.branch, "main");
  await op.config.updateWorkspaceConfig({ agentTypeId: type, workspaceConfig: { enabled: true, tools: ALL_TOOLS, warmPoolSize: 0 } });
  await eventually(() => (pooled(server, type).length === 0 ? true : undefined), 30_000, "the pool to drain");
});

test("examples/session.ts shows a session's live progress end to end", async (t) => {
  const { server, git } = t.context;
  const child = spawn(process.execPath, ["examples/session.ts", server.url, git.repoUrl("app"), "develop"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  t.is(code, 0, err);
  const order = ["PROVISIONING", "▶ sandbox", "✔ sandbox", "▶ clone", "✔ clone", "▶ setup_command", "│ preparing", "✔ setup_command", "status ACTIVE", `task: ${git.repoUrl("app")} develop`, "ENDED"];
  let at = 0;
  for (const marker of order) {
    const i = out.indexOf(marker, at);
    t.true(i >= 0, `'${marker}' after position ${at} in:\n${out}`);
    at = Math.max(at, i);
  }
});

test("WatchSession with follow: a client deadline ends it DEADLINE_EXCEEDED, a cancel ends it, EndSession ends it with ENDED; an unknown JSON field is refused", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, { enabled: true });
  const { session } = await startSession(op, type);
  await watchUntilReady(op, session.id);
  const seen: string[] = [];
  const deadline = (async () => {
    for await (const ev of server.clients.grpc.workspaces.watchSession({ id: session.id, follow: true }, { timeoutMs: 2000 })) seen.push(ev.event.case ?? "");
  })();
  await t.throwsAsync(deadline, { code: Code.DeadlineExceeded } as never);
  t.deepEqual(seen, ["status", "stageStarted", "stageEnded", "status"], "the kept events, then nothing until the deadline");

  const abort = new AbortController();
  const cancelled = (async () => {
    for await (const ev of server.clients.grpcWeb.workspaces.watchSession({ id: session.id, follow: true }, { signal: abort.signal })) if (ev.event.case === "status") abort.abort();
  })();
  await t.throwsAsync(cancelled, { code: Code.Canceled } as never);

  const statuses: string[] = [];
  const following = (async () => {
    for await (const ev of server.clients.grpc.workspaces.watchSession({ id: session.id, follow: true }, { timeoutMs: 30_000 })) {
      if (ev.event.case === "status") statuses.push(SessionStatus[ev.event.value.status]);
    }
  })();
  await eventually(() => (statuses.length >= 2 ? true : undefined), 10_000, "the watcher to catch up");
  await op.workspaces.endSession({ id: session.id });
  await following;
  t.deepEqual(statuses, ["PROVISIONING", "ACTIVE", "ENDED"], "the follower sees the end, and its stream closes");

  const res = await post(server.url, "/agentworkspace.v1.WorkspaceService/StartSession", JSON.stringify({ agentType: type, tsk: {} }), "application/json");
  t.is(res.status, 400);
  t.regex(res.body, /tsk/);
});

test("a server stopping while a session is watched and provisioning ends the stream and leaves nothing running", async (t) => {
  const own = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_SESSION_TICK_MS: "100" } });
  const pidFile = path.join(t.context.dir, "stopping.pid");
  let closed = false;
  try {
    const op = own.clients.grpc;
    // On the local provider a command can write outside the workspace: the pid goes to the test's directory.
    await op.config.createAgentType({ agentType: { id: "stopping", workspace: { enabled: true, tools: ["bash"], setupCommands: [`echo $$ > ${pidFile}; exec sleep 30`] } } });
    const { session } = await startSession(op, "stopping");
    const events: string[] = [];
    const watching = (async () => {
      for await (const ev of op.workspaces.watchSession({ id: session!.id, follow: true })) events.push(ev.event.case ?? "");
    })();
    await eventually(() => (events.filter((e) => e === "stageStarted").length >= 2 ? true : undefined), 20_000, "the setup command to start");
    // The stage starts before its command does (the policy check, the spawn): wait for the command itself.
    await eventually(() => readFile(pidFile, "utf8").then((s) => (s.trim() !== "" ? true : undefined), () => undefined), 20_000, "the setup command to run");
    const started = Date.now();
    await own.close();
    closed = true;
    await t.throwsAsync(watching);
    t.true(Date.now() - started < 15_000, "the stop did not wait for the 30 s setup command");
    t.false(own.app.workspaces.listRecords("", {}).some((r) => r.session?.id === session!.id), "the half-made workspace was undone");
    const pid = Number(await readFile(pidFile, "utf8"));
    const state = await readFile(`/proc/${pid}/stat`, "utf8").then((s) => s.split(" ")[2], () => "gone");
    t.true(state === "gone" || state === "Z", `the setup command is not running (state ${state})`);
  } finally {
    if (!closed) await own.close();
  }
});

test("setup commands pass the agent type's command policy: a refused one runs nothing and leaves a warning naming the rule", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = await agentType(op, {
    enabled: true,
    commandPolicy: { allow: ["echo", "cat"], deny: [] },
    setupCommands: ["echo one >> log.txt", "echo two >> log.txt; curl -o tool http://example.invalid/tool", "echo three >> log.txt"],
  });
  const { session, token } = await startSession(op, type);
  const { session: ready } = await watchUntilReady(op, session.id);
  t.is(ready.status, SessionStatus.ACTIVE);
  t.is(ready.warnings.length, 1);
  t.regex(ready.warnings[0].message, /Setup command 2 of 3 .*'curl' is not in the agent type's allowlist/);
  const agent = clientsWithToken(server.url, token);
  // The refused command's script ran nothing, not even its allowed first half; the rest was skipped.
  t.is(await bash(agent, "cat log.txt"), "one\n");
  const { detail } = await expectError(t, agent.tools.bash({ command: "curl http://example.invalid" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
  t.is(detail.metadata.why, "not_in_allowlist");
});
