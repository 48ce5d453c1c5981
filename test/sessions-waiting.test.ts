/**
 * Tool calls made while a session is PROVISIONING wait for its workspace, as the proto says:
 * they run once the session is ACTIVE, fail with WORKSPACE_NOT_PROVISIONED when it ends DEGRADED,
 * and stop, with nothing run, at their deadline (SESSION_NOT_READY), when cancelled (CANCELLED) or
 * when the session is ended meanwhile (UNAUTHENTICATED). Each call is one audit record, however
 * it ends. Through a real server (local provider), with setup commands that sleep.
 */
import anyTest, { type TestFn } from "ava";
import { Code, ConnectError } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { AuditOutcome } from "../gen/agentworkspace/v1/audit_pb.js";
import type { WorkspaceConfigSchema } from "../gen/agentworkspace/v1/config_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { type ConnectErrorBody, post, reasonOf } from "./helpers/http.ts";
import { expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, eventually, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  git: GitServer;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const git = await startGitServer({ token: "waiting-token-0123456789" });
  const logs: string[] = [];
  const server = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_SESSION_TICK_MS: "100" }, onLog: (line) => logs.push(line) });
  t.context = { server, git, logs };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
});

let serial = 0;

/** A session of a new agent type with `workspace`, still PROVISIONING, and its agent's clients. */
async function provisioning(t: { context: Ctx; is: (a: unknown, b: unknown, m?: string) => void }, workspace: MessageInitShape<typeof WorkspaceConfigSchema>) {
  const op = t.context.server.clients.connect;
  const id = `waiting-${process.pid}-${++serial}`;
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: ["bash", "read"], ...workspace } } });
  const started = await op.workspaces.startSession({ agentType: id, task: {} });
  const session = started.session!;
  t.is(session.status, SessionStatus.PROVISIONING);
  return { op, session, agent: { ...clientsWithToken(t.context.server.url, started.sessionToken), token: started.sessionToken } };
}

/** Resolves once the server logged that a call of `sessionId` waits for the workspace. */
const waiting = (t: { context: Ctx }, sessionId: string) =>
  eventually(() => (t.context.logs.some((l) => l.includes("a tool call waits for its session's workspace") && l.includes(sessionId)) ? true : undefined), 30_000, "the call to wait");

/** The audit records of calls the session's token made, once the trail has them all. */
async function agentCalls(server: TestServer, sessionId: string, expected: number) {
  return eventually(async () => {
    await server.app.audit.flushed();
    const { events } = await server.clients.connect.audit.listAuditEvents({ sessionId });
    const mine = events.filter((e) => e.principalKind === "session");
    return mine.length >= expected ? mine : undefined;
  }, 30_000, `${expected} audit records`);
}

test("a tool call during PROVISIONING waits for ACTIVE, then runs (unary and streaming), each recorded once", async (t) => {
  const { op, session, agent } = await provisioning(t, { setupCommands: ["sleep 2 && echo done > setup.txt"] });
  const unary = agent.tools.bash({ command: "cat setup.txt" });
  const streamed = (async () => {
    let out = "";
    for await (const m of agent.tools.streamBash({ command: "cat setup.txt" })) if (m.event.case === "stdout") out += Buffer.from(m.event.value).toString("utf8");
    return out;
  })();
  const read = agent.tools.readFile({ path: "setup.txt" });
  await waiting(t, session.id);
  t.is((await unary).stdout, "done\n", "it ran after the setup command, in the session's workspace");
  t.is(await streamed, "done\n");
  t.regex((await read).content, /done$/m);
  const { session: now } = await op.workspaces.getSession({ id: session.id });
  t.is(now?.status, SessionStatus.ACTIVE);
  const records = await agentCalls(t.context.server, session.id, 3);
  t.deepEqual(records.map((r) => [r.tool, r.outcome]).sort(), [["bash", AuditOutcome.OK], ["bash", AuditOutcome.OK], ["read", AuditOutcome.OK]]);
  t.true(records.every((r) => r.workspaceId === now?.workspaceId));
});

test("a tool the agent type does not enable is refused at once, even while the session provisions", async (t) => {
  const { agent } = await provisioning(t, { setupCommands: ["sleep 30"] });
  await expectError(t, agent.tools.writeFile({ path: "x", content: "x" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
});

test("a waiting call whose caller cancels ends CANCELLED and never runs", async (t) => {
  const { op, session, agent } = await provisioning(t, { setupCommands: ["sleep 2"] });
  const abort = new AbortController();
  const call = agent.tools.bash({ command: "touch ran" }, { signal: abort.signal });
  await waiting(t, session.id);
  abort.abort();
  const err = await t.throwsAsync(call, { instanceOf: ConnectError });
  t.is(err?.code, Code.Canceled);
  await watchUntilReady(op, session.id);
  t.is((await agent.tools.bash({ command: "ls -A" })).stdout, "", "the cancelled command never ran");
  const records = await agentCalls(t.context.server, session.id, 2);
  const cancelled = records.filter((r) => r.request.command === "touch ran");
  t.is(cancelled.length, 1, "one record of the cancelled call");
  t.like(cancelled[0], { outcome: AuditOutcome.CANCELLED, reason: ErrorReason.CANCELLED });
});

test("a waiting call bound by a deadline ends at it and never runs; the server's own answer at the deadline is SESSION_NOT_READY", async (t) => {
  const { server } = t.context;
  const { op, session, agent } = await provisioning(t, { setupCommands: ["sleep 5"] });
  // A client that keeps its deadline itself gives up at it (and the server sees it go).
  const err = await t.throwsAsync(agent.tools.bash({ command: "touch late" }, { timeoutMs: 1000 }), { instanceOf: ConnectError });
  t.is(err?.code, Code.DeadlineExceeded);
  // One that only sends it (curl with connect-timeout-ms) gets the server's answer.
  const raw = await post(server.url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ command: "touch later" }), "application/json", {
    authorization: `Bearer ${agent.token}`,
    "connect-timeout-ms": "1000",
  });
  const body = JSON.parse(raw.body) as ConnectErrorBody;
  t.is(body.code, "failed_precondition", raw.body);
  t.is(reasonOf(body), ErrorReason.SESSION_NOT_READY);
  t.regex(body.message, /still provisioning its workspace when the call's deadline passed; nothing ran/);
  await watchUntilReady(op, session.id);
  t.is((await agent.tools.bash({ command: "ls -A" })).stdout, "", "neither command ever ran");
  const records = await agentCalls(server, session.id, 3);
  t.is(records.filter((r) => r.request.command === "touch late").length, 1, "one record of the call the client gave up");
  const later = records.filter((r) => r.request.command === "touch later");
  t.is(later.length, 1);
  t.like(later[0], { outcome: AuditOutcome.ERROR, code: "failed_precondition", reason: ErrorReason.SESSION_NOT_READY });
});

test("a waiting call whose session's provisioning fails gets WORKSPACE_NOT_PROVISIONED with the cause", async (t) => {
  const { git } = t.context;
  git.delayMs = 2000;
  try {
    const { session, agent } = await provisioning(t, { repoSource: { type: "fixed", url: git.repoUrl("does-not-exist") } });
    const call = agent.tools.bash({ command: "true" });
    await waiting(t, session.id);
    const { detail } = await expectError(t, call, Code.FailedPrecondition, ErrorReason.WORKSPACE_NOT_PROVISIONED);
    t.regex(detail.message, /could not be provisioned/);
    const records = await agentCalls(t.context.server, session.id, 1);
    t.is(records.length, 1);
    t.is(records[0].reason, ErrorReason.WORKSPACE_NOT_PROVISIONED);
  } finally {
    git.delayMs = 0;
  }
});

test("a waiting call whose session is ended meanwhile fails UNAUTHENTICATED, nothing run", async (t) => {
  const { op, session, agent } = await provisioning(t, { setupCommands: ["sleep 30"] });
  const call = agent.tools.bash({ command: "true" });
  await waiting(t, session.id);
  await op.workspaces.endSession({ id: session.id });
  const { detail } = await expectError(t, call, Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
  t.regex(detail.message, /ended while the call waited/);
  t.is((await agentCalls(t.context.server, session.id, 1)).length, 1);
});
