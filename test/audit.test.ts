/**
 * The audit trail (seed 000 "Tool operation audit logging"; seed 002 REQ-TOOL-004's live chain):
 * one OpenTelemetry span per tool operation, asserted three ways for the same calls — captured
 * in-process by the SDK's in-memory exporter, received by a real OTLP/HTTP endpoint (protobuf
 * decoded), and read back from the database through ListAuditEvents — plus WatchEvents live.
 */
import { randomBytes } from "node:crypto";
import http2 from "node:http2";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { toJson } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import anyTest, { type TestFn } from "ava";
import { AuditEventSchema, AuditOutcome, type AuditEvent, type ListAuditEventsRequest, type WatchEventsResponse } from "../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { SessionStatus, WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ListAuditEventsRequestSchema } from "../gen/agentworkspace/v1/audit_pb.js";
import { type OtlpReceiver, type OtlpSpan, startOtlpGrpcReceiver, startOtlpHttpReceiver } from "./helpers/otlp-receiver.ts";
import { bearer, type ClientSet, expectError, LOCAL_ONLY, newWorkspace, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, eventually, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  otlp: OtlpReceiver;
  memory: InMemorySpanExporter;
}

const test = anyTest as TestFn<Ctx>;
const KEY = `op-${randomBytes(12).toString("hex")}`;
const ALL_TOOLS = ["bash", "read", "write", "edit", "patch", "delete", "list", "glob", "grep"];
const rand = (tag: string) => `${tag}${randomBytes(10).toString("hex")}`;

test.before(async (t) => {
  const otlp = await startOtlpHttpReceiver();
  const memory = new InMemorySpanExporter();
  t.context.otlp = otlp;
  t.context.memory = memory;
  t.context.server = await startServer({
    apiKeys: [KEY],
    env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_EXPORTER_OTLP_HEADERS: "x-collector-key=collector%20secret", OTEL_SERVICE_NAME: "aw-audit-test" },
    overrides: { spanExporters: [memory] },
  });
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.otlp?.close();
});

/** Every record a filter matches, all pages walked. */
async function allEvents(clients: ClientSet, filter: MessageInitShape<typeof ListAuditEventsRequestSchema> = {}): Promise<AuditEvent[]> {
  const out: AuditEvent[] = [];
  let pageToken = "";
  do {
    const page = await clients.audit.listAuditEvents({ ...filter, pageToken, pageSize: 50 });
    out.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}

/** The spans (in memory) whose ids are given. */
const memorySpans = (memory: InMemorySpanExporter, ids: Set<string>) => memory.getFinishedSpans().filter((s) => ids.has(s.spanContext().spanId));

/** Everything a span shows an observer, as one string to search for leaks. */
function spanText(s: ReadableSpan): string {
  return JSON.stringify({ name: s.name, attributes: s.attributes, status: s.status, events: s.events.map((e) => [e.name, e.attributes]), links: s.links.length });
}

/** Waits until the OTLP endpoint received every span id given. */
async function receivedAll(otlp: OtlpReceiver, ids: Set<string>): Promise<OtlpSpan[]> {
  return eventually(() => {
    const got = otlp.spans.filter((s) => ids.has(s.spanId));
    return new Set(got.map((s) => s.spanId)).size === ids.size ? got : undefined;
  }, 20_000, "the OTLP endpoint to receive every span");
}

async function newAgentType(clients: ClientSet, tools = ALL_TOOLS): Promise<string> {
  const id = `audit-${randomBytes(4).toString("hex")}`;
  await clients.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools } } });
  return id;
}

async function startSession(t: { context: Ctx }, tools = ALL_TOOLS) {
  const op = t.context.server.clients.connect;
  const agentType = await newAgentType(op, tools);
  const res = await op.workspaces.startSession({ agentType });
  const { session } = await watchUntilReady(op, res.session?.id ?? "");
  return { agentType, session, agent: clientsWithToken(t.context.server.url, res.sessionToken) };
}

test("Successful operation logged: every tool call is one record with who, where, when, how long and a summary, in memory, at the OTLP endpoint and in the database, and no content, output or secret appears in any of them", async (t) => {
  const { server, otlp, memory } = t.context;
  const { agentType, session, agent } = await startSession(t);
  const [r1, r2, r3, r4] = [rand("content"), rand("oldstr"), rand("newstr"), rand("grepline")];
  const [s1, s2, s3, s4, s5, s6] = [rand("bearer"), rand("urlpass"), `ghp_${randomBytes(18).toString("hex")}`, rand("pw"), rand("envvalue"), rand("streamenv")];
  const command = `true curl -H "Authorization: Bearer ${s1}" https://bob:${s2}@example.invalid/x ${s3}; echo password=${s4} >/dev/null; echo ${KEY} >/dev/null; cat b.txt`;

  await agent.tools.writeFile({ path: "a.txt", content: `${r1}\n` });
  await agent.tools.writeFile({ path: "b.txt", content: `needle ${r4}\nneedle again ${r4}\n` });
  t.true((await agent.tools.readFile({ path: "a.txt" })).content.includes(r1));
  await agent.tools.editFile({ path: "a.txt", oldString: r1, newString: r2 });
  await agent.tools.patchFile({ path: "a.txt", patches: [{ find: r2, replace: r3 }] });
  await agent.tools.listFiles({ path: "" });
  await agent.tools.glob({ pattern: "**/*.txt" });
  t.is((await agent.tools.grep({ pattern: "needle" })).matches.length, 2);
  for await (const _ of agent.tools.streamGrep({ pattern: "needle", maxResults: 1 })) void _;
  const ran = await agent.tools.bash({ command, env: { API_TOKEN: s5 } });
  t.true(ran.stdout.includes(r4), "the command really ran and printed the file");
  let streamed = "";
  for await (const m of agent.tools.streamBash({ command: `cat a.txt; echo "$SECRET_ENV"`, env: { SECRET_ENV: s6 } })) {
    if (m.event.case === "stdout") streamed += Buffer.from(m.event.value).toString();
  }
  t.true(streamed.includes(r3) && streamed.includes(s6));
  await agent.tools.deleteFile({ path: "b.txt" });

  // The database, read by the session itself (its token sees its own session).
  const records = (await allEvents(agent)).filter((e) => e.tool !== "");
  const count = (tool: string) => records.filter((e) => e.tool === tool).length;
  t.deepEqual(
    Object.fromEntries(ALL_TOOLS.map((tool) => [tool, count(tool)])),
    { bash: 2, read: 1, write: 2, edit: 1, patch: 1, delete: 1, list: 1, glob: 1, grep: 2 },
    "each call exactly once",
  );
  t.is(new Set(records.map((e) => e.procedure)).size, 11, "every RPC of ToolService appears");
  for (const e of records) {
    t.is(e.name, `execute_tool ${e.tool}`);
    t.is(e.workspaceId, session.workspaceId);
    t.is(e.sessionId, session.id);
    t.is(e.agentType, agentType);
    t.is(e.principalKind, "session");
    t.is(e.principalId, session.id);
    t.is(e.provider, "local");
    t.is(e.protocol, "connect");
    t.is(e.outcome, AuditOutcome.OK, `${e.procedure} ok`);
    t.is(e.code, "ok");
    t.is(e.reason, ErrorReason.UNSPECIFIED);
    t.truthy(e.startTime && Number(e.startTime.seconds) > Date.now() / 1000 - 300, "a timestamp");
    t.truthy(e.duration, "a duration");
    t.regex(e.traceId, /^[0-9a-f]{32}$/);
    t.regex(e.spanId, /^[0-9a-f]{16}$/);
  }
  // Newest first.
  const times = records.map((e) => Number(e.startTime?.seconds) * 1e9 + (e.startTime?.nanos ?? 0));
  t.deepEqual(times, [...times].sort((a, b) => b - a));
  const byProcedure = (p: string) => records.find((e) => e.procedure === `/agentworkspace.v1.ToolService/${p}`) as AuditEvent;
  t.deepEqual(byProcedure("EditFile").request, { path: "a.txt" });
  t.deepEqual(byProcedure("PatchFile").request, { path: "a.txt", patches: "1" });
  t.deepEqual(records.filter((e) => e.tool === "write").map((e) => e.request).reverse(), [
    { path: "a.txt", content_bytes: String(r1.length + 1) },
    { path: "b.txt", content_bytes: String(`needle ${r4}\nneedle again ${r4}\n`.length) },
  ]);
  t.is(byProcedure("Grep").request.pattern, "needle");
  t.is(byProcedure("Grep").result.matches, "2");
  t.is(byProcedure("StreamGrep").result.matches, "1");
  t.true(byProcedure("StreamGrep").truncated);
  t.is(byProcedure("Glob").request.pattern, "**/*.txt");
  const bash = byProcedure("Bash");
  t.is(bash.exitCode, 0);
  t.is(bash.request.env, "API_TOKEN", "variable names, never values");
  t.true(bash.request.command.startsWith('true curl -H "Authorization: [REDACTED]'), bash.request.command);
  t.true(bash.request.command.includes("https://[REDACTED]@example.invalid/x [REDACTED]; echo password=[REDACTED] >/dev/null; echo [REDACTED] >/dev/null; cat b.txt"), bash.request.command);
  t.is(byProcedure("StreamBash").exitCode, 0);
  t.is(byProcedure("StreamBash").request.command, 'cat a.txt; echo "$SECRET_ENV"');

  // The same calls, in memory and at the OTLP endpoint, with the conventions' attributes.
  const ids = new Set(records.map((e) => e.spanId));
  const inMemory = memorySpans(memory, ids);
  t.is(inMemory.length, 12, "each span once in memory");
  const received = await receivedAll(otlp, ids);
  t.is(received.length, 12, "each span once at the endpoint");
  for (const s of received) {
    const e = records.find((r) => r.spanId === s.spanId) as AuditEvent;
    t.is(s.traceId, e.traceId);
    t.is(s.name, e.name);
    t.is(s.kind, 2, "SPAN_KIND_SERVER");
    t.is(s.attributes["gen_ai.operation.name"], "execute_tool");
    t.is(s.attributes["gen_ai.tool.name"], e.tool);
    t.is(s.attributes["rpc.system"], "connect_rpc");
    t.is(s.attributes["rpc.service"], "agentworkspace.v1.ToolService");
    t.is(s.attributes["rpc.method"], e.procedure.split("/").pop());
    t.is(s.attributes["rpc.grpc.status_code"], 0);
    t.is(s.attributes["agentworkspace.workspace.id"], session.workspaceId);
    t.is(s.attributes["agentworkspace.session.id"], session.id);
    t.is(s.attributes["agentworkspace.agent_type"], agentType);
    t.is(s.attributes["agentworkspace.principal.kind"], "session");
    t.is(s.attributes["agentworkspace.provider"], "local");
    t.is(s.resource["service.name"], "aw-audit-test");
  }
  t.true(otlp.requests.every((r) => r.headers["x-collector-key"] === "collector secret"), "OTEL_EXPORTER_OTLP_HEADERS reach the collector");

  // No planted content, output or secret anywhere: not in the spans, not at the endpoint, not in the database.
  const everything = [
    ...inMemory.map(spanText),
    ...received.map((s) => JSON.stringify(s, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))),
    ...(await allEvents(server.clients.grpc, { sessionId: session.id })).map((e) => JSON.stringify(toJson(AuditEventSchema, e))),
  ].join("\n");
  for (const [what, planted] of Object.entries({ r1, r2, r3, r4, s1, s2, s3, s4, s5, s6, KEY })) {
    t.false(everything.includes(planted), `${what} leaked into the audit trail`);
  }
});

test("Failed operation logged: failures carry the same metadata plus code and reason; a non-zero exit and a search without matches are not failures", async (t) => {
  const { memory } = t.context;
  const { session, agent } = await startSession(t);
  await expectError(t, agent.tools.readFile({ path: "missing.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  await expectError(t, agent.tools.bash({ command: "sleep 5", timeoutMs: 300n }), Code.DeadlineExceeded, ErrorReason.COMMAND_TIMEOUT);
  t.is((await agent.tools.bash({ command: "exit 3" })).exitCode, 3);
  t.is((await agent.tools.grep({ pattern: "nothing-matches-this" })).matches.length, 0);

  const records = (await allEvents(agent)).filter((e) => e.tool !== "");
  const [grep, exit3, timeout, missing] = records;
  t.is(records.length, 4);
  for (const e of records) {
    t.is(e.workspaceId, session.workspaceId);
    t.is(e.sessionId, session.id);
    t.is(e.principalKind, "session");
    t.is(e.provider, "local");
    t.truthy(e.duration);
  }
  t.like(missing, { tool: "read", outcome: AuditOutcome.ERROR, code: "not_found", reason: ErrorReason.FILE_NOT_FOUND, request: { path: "missing.txt" } });
  t.like(timeout, { tool: "bash", outcome: AuditOutcome.ERROR, code: "deadline_exceeded", reason: ErrorReason.COMMAND_TIMEOUT, request: { command: "sleep 5", timeout_ms: "300" } });
  t.like(exit3, { tool: "bash", outcome: AuditOutcome.OK, exitCode: 3 });
  t.like(grep, { tool: "grep", outcome: AuditOutcome.OK, code: "ok" });
  // The in-memory spans: an error status naming the reason, never the message.
  const [span] = memorySpans(memory, new Set([missing.spanId]));
  t.is(span.status.code, 2, "SpanStatusCode.ERROR");
  t.is(span.status.message, "FILE_NOT_FOUND");
  t.is(span.attributes["error.type"], "FILE_NOT_FOUND");
  t.is(span.attributes["rpc.grpc.status_code"], Code.NotFound);
  const [ok] = memorySpans(memory, new Set([exit3.spanId]));
  t.is(ok.status.code, 0, "a non-zero exit leaves the status unset");
  t.is(ok.attributes["error.type"], undefined);

  // Filters: by outcome and tool.
  const failures = await allEvents(agent, { outcome: AuditOutcome.ERROR });
  t.deepEqual(failures.map((e) => e.spanId).sort(), [missing.spanId, timeout.spanId].sort());
  t.deepEqual((await allEvents(agent, { tool: "grep" })).map((e) => e.spanId), [grep.spanId]);
});

test("Refused calls are recorded as DENIED with the same metadata: a bad key, a tool the agent type lacks, another session's workspace, a command the policy refuses, a sensitive file", async (t) => {
  const { server, memory } = t.context;
  const op = server.clients.grpc;
  const { session, agent } = await startSession(t);
  const readOnly = await startSession(t, ["read"]);
  const otherWorkspace = await newWorkspace(op);

  await expectError(t, readOnly.agent.tools.bash({ command: "id" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
  await expectError(t, agent.tools.readFile({ workspaceId: otherWorkspace, path: "x" }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  await expectError(t, agent.tools.bash({ command: "echo ok; sudo id" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
  await expectError(t, agent.tools.readFile({ path: ".env" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
  const stranger = createClient(ToolService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [bearer("not-a-key-of-this-server")] }));
  await expectError(t, stranger.readFile({ workspaceId: otherWorkspace, path: "a.txt" }), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);

  const notEnabled = (await allEvents(op, { sessionId: readOnly.session.id, outcome: AuditOutcome.DENIED }))[0];
  t.like(notEnabled, { tool: "bash", reason: ErrorReason.TOOL_NOT_ENABLED, code: "permission_denied", sessionId: readOnly.session.id, workspaceId: readOnly.session.workspaceId, principalKind: "session", request: { command: "id" } });
  const denied = await allEvents(op, { sessionId: session.id, outcome: AuditOutcome.DENIED });
  t.deepEqual(denied.map((e) => ErrorReason[e.reason]), ["SENSITIVE_FILE", "COMMAND_NOT_ALLOWED", "OUTSIDE_SESSION"]);
  t.like(denied[0], { tool: "read", request: { path: ".env" }, workspaceId: session.workspaceId, provider: "local" });
  t.like(denied[1], { tool: "bash", request: { command: "echo ok; sudo id" }, workspaceId: session.workspaceId });
  t.like(denied[2], { tool: "read", workspaceId: otherWorkspace, principalKind: "session" });
  const unauthenticated = (await allEvents(op, { workspaceId: otherWorkspace, outcome: AuditOutcome.DENIED })).find((e) => e.reason === ErrorReason.UNAUTHENTICATED);
  t.like(unauthenticated, { tool: "read", code: "unauthenticated", principalKind: "anonymous", workspaceId: otherWorkspace, request: { path: "a.txt" } });
  const spans = memorySpans(memory, new Set(denied.map((e) => e.spanId)));
  t.true(spans.every((s) => s.attributes["agentworkspace.outcome"] === "denied" && s.status.code === 2));
  t.false(JSON.stringify(spans.map(spanText)).includes("not-a-key-of-this-server"));
});

test("Incoming W3C traceparent is honoured and the caller's tool call id is kept, over gRPC", async (t) => {
  const { server, otlp } = t.context;
  const op = server.clients.grpc;
  const ws = await newWorkspace(op);
  const traceId = randomBytes(16).toString("hex");
  const parent = randomBytes(8).toString("hex");
  await op.tools.bash({ workspaceId: ws, command: "true" }, { headers: { traceparent: `00-${traceId}-${parent}-01`, "tool-call-id": "toolu_01ABC" } });
  // Not sampled by the caller: still recorded, an audit trail does not sample.
  await op.tools.listFiles({ workspaceId: ws }, { headers: { traceparent: `00-${traceId}-${parent}-00`, "tool-call-id": "has spaces, so it is ignored" } });
  const [list, bash] = await allEvents(op, { workspaceId: ws, tool: "" }).then((all) => all.filter((e) => e.tool !== ""));
  t.like(bash, { traceId, parentSpanId: parent, toolCallId: "toolu_01ABC", protocol: "grpc" });
  t.like(list, { traceId, parentSpanId: parent, toolCallId: "" });
  const [received] = await receivedAll(otlp, new Set([bash.spanId]));
  t.is(received.traceId, traceId);
  t.is(received.parentSpanId, parent);
  t.is(received.attributes["gen_ai.tool.call.id"], "toolu_01ABC");
  t.is(received.attributes["rpc.system"], "grpc");
});

test("A streaming span ends with its stream: a client that cancels StreamBash mid-output is recorded as CANCELLED", async (t) => {
  const op = t.context.server.clients.grpc;
  const ws = await newWorkspace(op);
  const abort = new AbortController();
  await t.throwsAsync(async () => {
    for await (const m of op.tools.streamBash({ workspaceId: ws, command: "echo first; sleep 30" }, { signal: abort.signal })) {
      if (m.event.case === "stdout") abort.abort();
    }
  });
  const record = await eventually(async () => (await allEvents(op, { workspaceId: ws, tool: "bash" }))[0], 15_000, "the cancelled call's record");
  t.like(record, { outcome: AuditOutcome.CANCELLED, code: "canceled", request: { command: "echo first; sleep 30" } });
});

/** Collects a WatchEvents stream in the background. */
function watch(clients: ClientSet, filter: { workspaceId?: string; sessionId?: string }) {
  const abort = new AbortController();
  const seen: WatchEventsResponse[] = [];
  let failure: unknown;
  const done = (async () => {
    try {
      for await (const m of clients.audit.watchEvents(filter, { signal: abort.signal })) seen.push(m);
    } catch (err) {
      if (!abort.signal.aborted) failure = err;
    }
  })();
  return {
    seen,
    started: () => eventually(() => (seen[0]?.event.case === "started" ? true : undefined), 10_000, "the watch to start"),
    async stop() {
      abort.abort();
      await done;
      if (failure) throw failure;
    },
  };
}

const kinds = (seen: WatchEventsResponse[]) =>
  seen.map((m) => {
    const e = m.event;
    switch (e.case) {
      case "toolCallStarted":
      case "toolCallFinished":
        return `${e.case} ${e.value.call?.tool}`;
      case "fileChanged":
        return `fileChanged ${e.value.tool} ${e.value.path}`;
      case "workspaceStatus":
        return `workspace ${WorkspaceStatus[e.value.status]}${e.value.deleted ? " deleted" : ""}`;
      case "sessionStatus":
        return `session ${SessionStatus[e.value.status]}`;
      default:
        return String(e.case);
    }
  });

test("WatchEvents delivers a call's start while StreamBash is still running and its end after, in order, with file changes and workspace status changes", async (t) => {
  const op = t.context.server.clients.grpc;
  const everything = watch(op, {});
  await everything.started();
  const ws = await newWorkspace(op);
  const one = watch(op, { workspaceId: ws });
  await one.started();
  await op.tools.writeFile({ workspaceId: ws, path: "notes.md", content: "hello" });
  let sawStartWhileRunning = false;
  for await (const m of op.tools.streamBash({ workspaceId: ws, command: "echo a; sleep 1; echo b" })) {
    if (m.event.case === "stdout" && !sawStartWhileRunning) {
      // The command is running: its start is out, its end is not.
      await eventually(() => (kinds(one.seen).includes("toolCallStarted bash") ? true : undefined), 5000, "the start event");
      t.false(kinds(one.seen).includes("toolCallFinished bash"));
      sawStartWhileRunning = true;
    }
  }
  t.true(sawStartWhileRunning);
  await op.tools.deleteFile({ workspaceId: ws, path: "notes.md" });
  await eventually(() => (kinds(one.seen).includes("fileChanged delete notes.md") ? true : undefined), 5000, "the delete's events");
  t.deepEqual(kinds(one.seen), [
    "started",
    "toolCallStarted write",
    "toolCallFinished write",
    "fileChanged write notes.md",
    "toolCallStarted bash",
    "toolCallFinished bash",
    "toolCallStarted delete",
    "toolCallFinished delete",
    "fileChanged delete notes.md",
  ]);
  const finished = one.seen.find((m) => m.event.case === "toolCallFinished" && m.event.value.call?.tool === "bash");
  t.like(finished?.event.value, { call: { exitCode: 0, outcome: AuditOutcome.OK, request: { command: "echo a; sleep 1; echo b" }, workspaceId: ws } });
  await op.workspaces.deleteWorkspace({ id: ws });
  const mine = () =>
    everything.seen.filter((m) => {
      const e = m.event;
      return (e.case === "workspaceStatus" && e.value.workspaceId === ws) || ((e.case === "toolCallStarted" || e.case === "toolCallFinished") && e.value.call?.workspaceId === ws && e.value.call.tool === "");
    });
  // A unary call's end is published once its answer is written: it may come just after the answer.
  await eventually(() => (kinds(mine()).length >= 6 ? true : undefined), 5000, "the deletion's events");
  // CreateWorkspace learns its workspace from its response, so only its end names it; DeleteWorkspace names it from the start.
  t.deepEqual(kinds(mine()), ["workspace CREATING", "workspace READY", "toolCallFinished ", "toolCallStarted ", "workspace STOPPED deleted", "toolCallFinished "]);
  await one.stop();
  await everything.stop();
  // A watch the client cancelled leaves nothing registered: no queue keeps filling for nobody.
  await eventually(() => (t.context.server.app.audit.hub.watchers === 0 ? true : undefined), 5000, "the watchers to be gone");
});

test("A session token sees only its own session's records and events; naming another session is refused", async (t) => {
  const op = t.context.server.clients.grpc;
  const a = await startSession(t);
  const b = await startSession(t);
  const watchA = watch(a.agent, {});
  await watchA.started();
  await a.agent.tools.bash({ command: "echo a" });
  await b.agent.tools.bash({ command: "echo b" });
  await op.tools.bash({ workspaceId: a.session.workspaceId, command: "echo operator-in-a" });
  await eventually(() => (kinds(watchA.seen).filter((k) => k === "toolCallFinished bash").length === 2 ? true : undefined), 5000, "a's events");
  const commands = watchA.seen.flatMap((m) => (m.event.case === "toolCallFinished" ? [m.event.value.call?.request.command] : []));
  t.deepEqual(commands, ["echo a", "echo operator-in-a"], "its own calls and an operator's in its workspace; never b's");
  t.true((await allEvents(a.agent)).every((e) => e.sessionId === a.session.id));
  await expectError(t, a.agent.audit.listAuditEvents({ sessionId: b.session.id }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  await expectError(t, (async () => {
    for await (const _ of a.agent.audit.watchEvents({ sessionId: b.session.id })) void _;
  })(), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  // The operator sees both.
  const both = await allEvents(op, { tool: "bash" });
  t.true(both.some((e) => e.sessionId === a.session.id) && both.some((e) => e.sessionId === b.session.id));
  await watchA.stop();
});

test("ListAuditEvents pages newest first without gaps or repeats, filters by time, and refuses a forged page token", async (t) => {
  const op = t.context.server.clients.connect;
  const ws = await newWorkspace(op);
  const before = new Date();
  for (let i = 0; i < 7; i++) await op.tools.bash({ workspaceId: ws, command: `echo ${i}` });
  const pages: string[][] = [];
  let pageToken = "";
  do {
    const page = await op.audit.listAuditEvents({ workspaceId: ws, tool: "bash", pageSize: 3, pageToken });
    pages.push(page.events.map((e) => e.request.command));
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  t.deepEqual(pages, [["echo 6", "echo 5", "echo 4"], ["echo 3", "echo 2", "echo 1"], ["echo 0"]]);
  const seconds = (d: Date) => ({ seconds: BigInt(Math.floor(d.getTime() / 1000)), nanos: (d.getTime() % 1000) * 1e6 });
  t.is((await allEvents(op, { workspaceId: ws, tool: "bash", startTime: seconds(before) })).length, 7);
  t.is((await allEvents(op, { workspaceId: ws, tool: "bash", endTime: seconds(before) })).length, 0);
  await expectError(t, op.audit.listAuditEvents({ pageToken: "Zm9yZ2Vk" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  await expectError(t, op.audit.listAuditEvents({ pageSize: -1 }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
});

test("Administrative changes are in the trail too: workspaces and agent types made and removed, with the operator key's id and never the key", async (t) => {
  const op = t.context.server.clients.grpc;
  const agentType = await newAgentType(op);
  const ws = await newWorkspace(op);
  await op.workspaces.deleteWorkspace({ id: ws });
  await op.config.deleteAgentType({ id: agentType });
  const records = await allEvents(op, { workspaceId: ws });
  t.deepEqual(records.map((e) => e.procedure), ["/agentworkspace.v1.WorkspaceService/DeleteWorkspace", "/agentworkspace.v1.WorkspaceService/CreateWorkspace"]);
  t.true(records.every((e) => e.principalKind === "operator" && /^key:[0-9a-f]{12}$/.test(e.principalId) && e.provider === "local" && e.tool === ""));
  const types = await allEvents(op, { agentType });
  t.deepEqual(types.map((e) => e.procedure), ["/agentworkspace.v1.ConfigService/DeleteAgentType", "/agentworkspace.v1.ConfigService/CreateAgentType"]);
});

test("Records survive a restart, and retention removes them by count and by age", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-audit-"));
  try {
    const first = await startServer({ dataDir, env: { ...LOCAL_ONLY, AGENT_WORKSPACE_AUDIT_MAX_ROWS: "5" } });
    const ws = await newWorkspace(first.clients.grpc);
    try {
      for (let i = 0; i < 12; i++) await first.clients.grpc.tools.bash({ workspaceId: ws, command: `echo ${i}` });
      const kept = await allEvents(first.clients.grpc);
      t.true(kept.length <= 5, `at most 5 kept, got ${kept.length}`);
      t.is(kept[0].request.command, "echo 11", "the newest are kept");
    } finally {
      await first.close();
    }
    const second = await startServer({ dataDir, env: LOCAL_ONLY });
    try {
      t.is((await allEvents(second.clients.grpc, { tool: "bash" }))[0]?.request.command, "echo 11", "the records outlived the server");
    } finally {
      await second.close();
    }
    const third = await startServer({ dataDir, env: { ...LOCAL_ONLY, AGENT_WORKSPACE_AUDIT_MAX_AGE_MS: "1500" } });
    try {
      await third.clients.grpc.tools.bash({ workspaceId: ws, command: "echo new" });
      await eventually(async () => ((await allEvents(third.clients.grpc)).length === 0 ? true : undefined), 10_000, "every record to age out");
      t.pass();
    } finally {
      await third.close();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("A collector that is down loses no tool call and is logged once, not per span; it is told when it works again", async (t) => {
  // A port nothing listens on yet: the collector comes up there later.
  const probe = await startOtlpHttpReceiver();
  const port = Number(new URL(probe.endpoint).port);
  await probe.close();
  const logs: string[] = [];
  const server = await startServer({ env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${port}/v1/traces` }, onLog: (line) => logs.push(line) });
  let collector: OtlpReceiver | undefined;
  try {
    const op = server.clients.grpc;
    const ws = await newWorkspace(op);
    for (let i = 0; i < 40; i++) await op.tools.listFiles({ workspaceId: ws });
    await eventually(() => (logs.some((l) => l.includes("OTLP collector failed")) ? true : undefined), 15_000, "the failure to be logged");
    await new Promise((r) => setTimeout(r, 2500));
    for (let i = 0; i < 10; i++) await op.tools.listFiles({ workspaceId: ws });
    await new Promise((r) => setTimeout(r, 2500));
    t.is(logs.filter((l) => l.includes("OTLP collector failed")).length, 1, "logged once");
    t.is((await allEvents(op, { workspaceId: ws, tool: "list" })).length, 50, "every call is in the database");
    collector = await startOtlpHttpReceiver(port);
    await op.tools.listFiles({ workspaceId: ws });
    await eventually(() => (collector?.spans.some((s) => s.attributes["agentworkspace.workspace.id"] === ws) ? true : undefined), 30_000, "export to resume");
    await eventually(() => (logs.some((l) => l.includes("works again")) ? true : undefined), 10_000, "the recovery to be logged");
    t.pass();
  } finally {
    await server.close();
    await collector?.close();
  }
});

test("OTLP over gRPC: spans reach a gRPC collector with the configured headers as metadata", async (t) => {
  const collector = await startOtlpGrpcReceiver();
  const server = await startServer({ env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc", OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint, OTEL_EXPORTER_OTLP_HEADERS: "x-team=audit" } });
  try {
    const op = server.clients.connect;
    const ws = await newWorkspace(op);
    await op.tools.writeFile({ workspaceId: ws, path: "x.txt", content: "secret-content-never-exported" });
    const [record] = (await allEvents(op, { workspaceId: ws, tool: "write" }));
    const [span] = await receivedAll(collector, new Set([record.spanId]));
    t.is(span.name, "execute_tool write");
    t.is(span.attributes["agentworkspace.request.path"], "x.txt");
    t.is(span.attributes["rpc.system"], "connect_rpc");
    t.is(collector.requests[0].headers["x-team"], "audit");
    t.false(JSON.stringify(collector.spans).includes("secret-content-never-exported"));
  } finally {
    await server.close();
    await collector.close();
  }
});

test("A stalled watcher gets an events-dropped marker counting exactly what it lost, and tool calls go on", async (t) => {
  const server = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_WATCH_BUFFER: "16" } });
  const client = http2.connect(server.url, { settings: { initialWindowSize: 256 } });
  try {
    const op = server.clients.grpc;
    const ws = await newWorkspace(op);
    // A gRPC WatchEvents for the workspace whose reader stops reading at once.
    const body = Buffer.from(JSON.stringify({ workspaceId: ws }));
    const req = client.request({ ":method": "POST", ":path": "/agentworkspace.v1.AuditService/WatchEvents", "content-type": "application/connect+json", "connect-protocol-version": "1" });
    const envelope = Buffer.alloc(5 + body.length);
    envelope.writeUInt32BE(body.length, 1);
    body.copy(envelope, 5);
    req.end(envelope);
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => {
      chunks.push(c);
      req.pause();
    });
    await eventually(() => (chunks.length > 0 ? true : undefined), 10_000, "the watch to start");
    // Each write is three events (started, finished, file changed): far more than the socket, the
    // server's write budget and the watcher's 16 together hold.
    const calls = 3000;
    for (let i = 0; i < calls; i++) await op.tools.writeFile({ workspaceId: ws, path: "f.txt", content: String(i) });
    await op.tools.readFile({ workspaceId: ws, path: "f.txt" });
    // Now read everything there is: what was held, then the marker; a call made after that is delivered.
    req.removeAllListeners("data");
    req.on("data", (c: Buffer) => chunks.push(c));
    req.resume();
    const messages = () => {
      const all = Buffer.concat(chunks);
      const out: Array<Record<string, { call?: { tool?: string }; count?: string }>> = [];
      for (let at = 0; at + 5 <= all.length; ) {
        const len = all.readUInt32BE(at + 1);
        if (at + 5 + len > all.length) break;
        if (all[at] === 0) out.push(JSON.parse(all.subarray(at + 5, at + 5 + len).toString()));
        at += 5 + len;
      }
      return out;
    };
    await eventually(() => (messages().some((m) => m.eventsDropped) ? true : undefined), 20_000, "the marker");
    await op.tools.deleteFile({ workspaceId: ws, path: "f.txt" });
    await eventually(() => (messages().some((m) => m.fileChanged && JSON.stringify(m).includes('"delete"')) ? true : undefined), 20_000, "the last event");
    const got = messages();
    const drops = got.filter((m) => m.eventsDropped);
    t.true(drops.length >= 1, "at least one marker");
    const dropped = drops.reduce((n, m) => n + Number(m.eventsDropped.count), 0);
    const delivered = got.filter((m) => !m.eventsDropped && !m.started).length;
    // Every event of the 3000 writes, the final read, the delete: delivered or counted as dropped.
    t.is(delivered + dropped, calls * 3 + 2 + 3, `delivered ${delivered} + dropped ${dropped}`);
    t.true(dropped > 0);
  } finally {
    client.destroy();
    await server.close();
  }
});

test("Setup commands are tool operations too: each is a bash record of principal 'server' in its session, a refused one DENIED", async (t) => {
  const op = t.context.server.clients.grpc;
  const id = `audit-setup-${randomBytes(4).toString("hex")}`;
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: ALL_TOOLS, setupCommands: ["echo setting up", "sudo id"] } } });
  const res = await op.workspaces.startSession({ agentType: id });
  const { session } = await watchUntilReady(op, res.session?.id ?? "");
  const setup = (await allEvents(op, { sessionId: session.id, tool: "bash" })).reverse();
  t.is(setup.length, 2);
  t.like(setup[0], { procedure: "setup_command", principalKind: "server", outcome: AuditOutcome.OK, exitCode: 0, request: { command: "echo setting up" }, workspaceId: session.workspaceId, agentType: id, provider: "local" });
  t.like(setup[1], { procedure: "setup_command", outcome: AuditOutcome.DENIED, reason: ErrorReason.COMMAND_NOT_ALLOWED, request: { command: "sudo id" } });
});
