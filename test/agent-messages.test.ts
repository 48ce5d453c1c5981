/**
 * The agent's own messages in its session's chain (seed 002 REQ-TOOL-004: "the whole chain in call
 * order, ending with the agent's summary"): PostAgentMessage records a note or the summary as an
 * audit record among the session's tool calls, sends it live to watchers once, redacts secrets,
 * and refuses what it must (no text, too much text, another session, no session named).
 */
import { randomBytes } from "node:crypto";
import { Code } from "@connectrpc/connect";
import anyTest, { type TestFn } from "ava";
import { AgentMessageKind, type AuditEvent, AuditOutcome, type WatchEventsResponse } from "../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { AgentWorkspace, AgentMessageKind as ClientKind, SessionNotReadyError } from "@agent-workspace/client";
import { expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, eventually, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
}
const test = anyTest as TestFn<Ctx>;
const KEY = `op-${randomBytes(12).toString("hex")}`;
let serial = 0;

test.before(async (t) => {
  t.context.server = await startServer({ apiKeys: [KEY], env: LOCAL_ONLY });
});
test.after.always(async (t) => {
  await t.context.server?.close();
});

async function session(t: { context: Ctx }) {
  const op = t.context.server.clients.connect;
  const agentType = `messages-${process.pid}-${++serial}`;
  await op.config.createAgentType({ agentType: { id: agentType, workspace: { enabled: true, provider: "local", tools: ["bash", "read", "write"] } } });
  const started = await op.workspaces.startSession({ agentType });
  const { session: ready } = await watchUntilReady(op, started.session!.id);
  return { op, id: ready.id, workspaceId: ready.workspaceId, agent: clientsWithToken(t.context.server.url, started.sessionToken) };
}

test("an agent's note and summary are in its session's chain in call order, once each live, with their kind and text", async (t) => {
  const { op, id, workspaceId, agent } = await session(t);
  const watch = new AbortController();
  const live: WatchEventsResponse[] = [];
  const stream = op.audit.watchEvents({ sessionId: id }, { signal: watch.signal });
  const reading = (async () => {
    try {
      for await (const ev of stream) live.push(ev);
    } catch {
      // Ends with the abort.
    }
  })();
  await eventually(() => live.find((e) => e.event.case === "started"), 10_000, "the watch to start");

  const note = await agent.audit.postAgentMessage({ text: "Looking at the failing test first." });
  t.is(note.sessionId, id);
  t.is(note.workspaceId, workspaceId);
  t.regex(note.spanId, /^[0-9a-f]{16}$/);
  await agent.tools.writeFile({ path: "fix.txt", content: "fixed\n" });
  await agent.tools.bash({ command: "cat fix.txt" });
  await expectError(t, agent.tools.readFile({ path: "missing.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  const summary = await agent.audit.postAgentMessage({ kind: AgentMessageKind.SUMMARY, text: "Fixed the test: fix.txt now holds the fix." });

  // The chain, oldest first: the note, three tool calls, the summary last.
  const records = (await op.audit.listAuditEvents({ sessionId: id, pageSize: 100 })).events.slice().reverse();
  const chain = records.filter((e) => e.tool !== "" || e.agentMessage !== undefined);
  t.deepEqual(
    chain.map((e) => (e.agentMessage ? `${AgentMessageKind[e.agentMessage.kind]}: ${e.agentMessage.text}` : `${e.tool} ${e.code}`)),
    ["NOTE: Looking at the failing test first.", "write ok", "bash ok", "read not_found", "SUMMARY: Fixed the test: fix.txt now holds the fix."],
  );
  const last = chain.at(-1) as AuditEvent;
  t.is(last.spanId, summary.spanId);
  t.is(last.procedure, "/agentworkspace.v1.AuditService/PostAgentMessage");
  t.is(last.principalKind, "session");
  t.is(last.workspaceId, workspaceId);
  // Only the message records carry a message.
  t.is(records.filter((e) => e.agentMessage !== undefined).length, 2);

  // Live: each message once, as agent_message, never as a call starting or finishing.
  await eventually(() => live.filter((e) => e.event.case === "agentMessage").length === 2 || undefined, 10_000, "both messages live");
  const messages = live.flatMap((e) => (e.event.case === "agentMessage" ? [e.event.value.event!] : []));
  t.deepEqual(messages.map((m) => [m.spanId, m.agentMessage?.kind]), [[note.spanId, AgentMessageKind.NOTE], [summary.spanId, AgentMessageKind.SUMMARY]]);
  const calls = live.flatMap((e) => (e.event.case === "toolCallStarted" || e.event.case === "toolCallFinished" ? [e.event.value.call!] : []));
  t.false(calls.some((c) => c.procedure.endsWith("/PostAgentMessage")));
  t.true(calls.some((c) => c.tool === "bash"));
  watch.abort();
  await reading;
});

test("an operator posts into a named session; secrets in the text are redacted; bad messages are refused with the field named", async (t) => {
  const { op, id, agent } = await session(t);
  const secret = `ghp_${randomBytes(18).toString("hex")}`;
  const posted = await op.audit.postAgentMessage({ sessionId: id, text: `Pushed with token ${secret}, done.` });
  const record = (await op.audit.listAuditEvents({ sessionId: id })).events.find((e) => e.spanId === posted.spanId);
  t.truthy(record?.agentMessage);
  t.false(record!.agentMessage!.text.includes(secret));
  t.regex(record!.agentMessage!.text, /^Pushed with token .*, done\.$/);
  t.is(record!.principalKind, "operator");

  const refused = [
    [op.audit.postAgentMessage({ text: "no session" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT, "session_id"],
    [agent.audit.postAgentMessage({ text: "   " }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT, "text"],
    [agent.audit.postAgentMessage({ text: "x".repeat(16 * 1024 + 1) }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT, "text"],
    [agent.audit.postAgentMessage({ text: "kind", kind: 7 as AgentMessageKind }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT, "kind"],
  ] as const;
  for (const [call, code, reason, field] of refused) {
    const { detail } = await expectError(t, call, code, reason);
    t.is(detail.metadata.field, field);
  }
  // Exactly 16 KiB is accepted.
  await agent.audit.postAgentMessage({ text: "y".repeat(16 * 1024) });
  await expectError(t, op.audit.postAgentMessage({ sessionId: "sess-0000000000000000", text: "nobody" }), Code.NotFound, ErrorReason.SESSION_NOT_FOUND);

  // A session token reaches only its own session.
  const other = await session(t);
  await expectError(t, other.agent.audit.postAgentMessage({ sessionId: id, text: "into someone else's chain" }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  // The attempt is audited as refused, and is no message of that chain.
  const records = (await op.audit.listAuditEvents({ sessionId: id })).events;
  t.false(records.some((e) => e.agentMessage?.text.includes("someone else")));
  t.true(records.some((e) => e.procedure.endsWith("/PostAgentMessage") && e.outcome === AuditOutcome.DENIED && e.agentMessage === undefined));

  // After the session ends its token is gone, and an operator cannot post into it either.
  await op.workspaces.endSession({ id });
  await expectError(t, agent.audit.postAgentMessage({ text: "too late" }), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
  await expectError(t, op.audit.postAgentMessage({ sessionId: id, text: "too late" }), Code.FailedPrecondition, ErrorReason.SESSION_NOT_READY);
});

test("the TypeScript client posts a session's note and summary with its token, and an operator's into a named session", async (t) => {
  const aw = new AgentWorkspace({ url: t.context.server.url, apiKey: KEY });
  try {
    const agentType = `messages-ts-${process.pid}`;
    await aw.agentTypes.create({ id: agentType, workspace: { enabled: true, provider: "local", tools: ["bash"] } });
    const session = await aw.startSession({ agentType });
    await session.ready();
    const note = await session.postMessage("starting");
    const summary = await session.postMessage("all done", { kind: ClientKind.SUMMARY });
    const byOperator = await aw.audit.postMessage({ sessionId: session.id, text: "from the operator" });
    const messages = (await aw.audit.list({ sessionId: session.id })).events.filter((e) => e.agentMessage !== undefined).reverse();
    t.deepEqual(
      messages.map((e) => [e.spanId, e.agentMessage?.kind, e.agentMessage?.text, e.principalKind]),
      [
        [note.spanId, ClientKind.NOTE, "starting", "session"],
        [summary.spanId, ClientKind.SUMMARY, "all done", "session"],
        [byOperator.spanId, ClientKind.NOTE, "from the operator", "operator"],
      ],
    );
    await session.end();
    const late = await aw.audit.postMessage({ sessionId: session.id, text: "late" }).catch((err: unknown) => err);
    t.true(late instanceof SessionNotReadyError);
  } finally {
    aw.close();
  }
});
