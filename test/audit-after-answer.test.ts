/**
 * A unary call on a direct path ends its audit span once its answer is written (AFTER_ANSWER):
 * the span is not ended when the handler returns, it ends when the direct path runs the list, a
 * query (`flushed`) or the shutdown (`close`) ends it first if it has not, and it ends once. On
 * connect-node's own handlers (no list) the span ends before the answer, as before.
 */
import test from "ava";
import { create } from "@bufbuild/protobuf";
import { createContextValues, type UnaryRequest, type UnaryResponse } from "@connectrpc/connect";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import { FileKind, ReadFileRequestSchema, ReadFileResponseSchema, ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { AuditTrail } from "../server/audit/audit-trail.ts";
import { Redactor } from "../server/audit/redact.ts";
import { AFTER_ANSWER } from "../server/direct/common.ts";
import { CallHeaders } from "../server/direct/headers.ts";
import { createLogger } from "../server/logger.ts";
import type { AuditStore, StoredAuditEvent } from "../server/store/store.ts";

function trailWithMemory() {
  const rows: StoredAuditEvent[] = [];
  const store: AuditStore = {
    append: async (r) => void rows.push(...r),
    query: async () => [],
    prune: async () => 0,
  };
  const spans = new InMemorySpanExporter();
  const trail = new AuditTrail({
    settings: { maxAgeMs: 0, maxRows: 0, watchBuffer: 16, changeScan: { maxEntries: 1000, maxMs: 100 }, otlp: undefined },
    store,
    logger: createLogger({ level: "error" }),
    redactor: new Redactor(),
    describe: () => undefined,
    workspaceOfSession: () => "",
    exporters: [spans],
  });
  return { trail, rows, spans };
}

/** One ReadFile through the trail's interceptors; `afterAnswer` stands for a direct path's list. */
async function readFile(trail: AuditTrail, afterAnswer?: (() => void)[]): Promise<UnaryResponse> {
  const method = ToolService.method.readFile;
  const contextValues = createContextValues();
  if (afterAnswer) contextValues.set(AFTER_ANSWER, afterAnswer);
  const req = {
    stream: false,
    service: ToolService,
    method,
    requestMethod: "POST",
    url: "/agentworkspace.v1.ToolService/ReadFile",
    signal: new AbortController().signal,
    header: new CallHeaders({ "content-type": "application/grpc" }),
    contextValues,
    message: create(ReadFileRequestSchema, { workspaceId: "ws-1", path: "a.txt" }),
  } as unknown as UnaryRequest;
  const handler = trail.outer(
    trail.inner(async () => ({
      stream: false,
      service: ToolService,
      method,
      header: new CallHeaders(),
      trailer: new CallHeaders(),
      message: create(ReadFileResponseSchema, { path: "a.txt", content: "hello", size: 5n, kind: FileKind.TEXT }),
    }) as unknown as UnaryResponse),
  );
  return (await handler(req)) as UnaryResponse;
}

test("with a direct path's list, the span ends when the list runs, and once", async (t) => {
  const { trail, rows, spans } = trailWithMemory();
  const after: (() => void)[] = [];
  await readFile(trail, after);
  t.is(spans.getFinishedSpans().length, 0, "not ended before the answer");
  t.is(after.length, 1);
  after[0]();
  t.is(spans.getFinishedSpans().length, 1);
  await trail.flushed();
  t.is(rows.length, 1);
  t.like(JSON.parse(rows[0].record), { tool: "read", outcome: "ok", request: { path: "a.txt" } });
  after[0]();
  await trail.flushed();
  t.is(spans.getFinishedSpans().length, 1, "ended once");
  t.is(rows.length, 1);
  await trail.close();
});

test("a query ends an answered call's span that is still waiting for its list, and the list then adds nothing", async (t) => {
  const { trail, rows, spans } = trailWithMemory();
  const after: (() => void)[] = [];
  await readFile(trail, after);
  await trail.flushed();
  t.is(spans.getFinishedSpans().length, 1);
  t.is(rows.length, 1);
  after[0]();
  await trail.flushed();
  t.is(spans.getFinishedSpans().length, 1);
  t.is(rows.length, 1);
  await trail.close();
});

test("the shutdown ends what is still waiting", async (t) => {
  const { trail, rows } = trailWithMemory();
  await readFile(trail, []);
  // (The in-memory exporter forgets its spans at the shutdown: the store's rows tell.)
  await trail.close();
  t.is(rows.length, 1);
});

test("without a list (connect-node's handlers), the span has ended when the call returns", async (t) => {
  const { trail, rows, spans } = trailWithMemory();
  await readFile(trail);
  t.is(spans.getFinishedSpans().length, 1);
  await trail.flushed();
  t.is(rows.length, 1);
  await trail.close();
});
