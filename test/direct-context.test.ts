/**
 * The direct unary paths' call context (server/direct/common.ts `unaryContext`): its signal aborts
 * when the client goes away before the answer is settled, at the protocol's deadline and at the
 * server's shutdown, each with connect's code; finishing a call aborts nothing and leaves nothing
 * on the shutdown signal, however many calls ran. Work a call leaves for after its answer
 * (AFTER_ANSWER) runs after the answer on both direct paths. (Through the real server: the cancel, deadline
 * and shutdown tests of resilience.test.ts and protocols.test.ts.)
 */
import { EventEmitter, getEventListeners } from "node:events";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createMethodImplSpec, type Interceptor } from "@connectrpc/connect";
import test from "ava";
import { ReadFileRequestSchema, ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { AFTER_ANSWER, type DirectOptions, unaryContext } from "../server/direct/common.ts";
import type { Exchange } from "../server/direct/exchange.ts";
import { serveUnaryConnect } from "../server/direct/unary-connect.ts";
import { serveUnaryGrpc } from "../server/direct/unary-grpc.ts";

const spec = createMethodImplSpec(ToolService.method.bash, () => ({}) as never);
const req = { url: "/agentworkspace.v1.ToolService/Bash", headers: { ":path": "/x", "content-type": "application/grpc", "x-a": ["1", "2"] } } as unknown as IncomingMessage;
const call = (timeoutMs?: number) => ({ protocolName: "grpc", timeoutMs, contentType: "application/grpc" });
const optionsWith = (shutdown: AbortController) => ({ shutdownSignal: shutdown.signal }) as DirectOptions;
const codeOf = (signal: AbortSignal) => (signal.reason instanceof ConnectError ? signal.reason.code : undefined);

test("a finished call aborts nothing and leaves no listener on the shutdown signal", (t) => {
  const shutdown = new AbortController();
  const signals: AbortSignal[] = [];
  for (let i = 0; i < 2000; i++) {
    const closing = new EventEmitter();
    const { context, finish } = unaryContext(req, closing, spec, call(60_000), optionsWith(shutdown));
    signals.push(context.signal);
    finish();
    closing.emit("close");
  }
  t.is(getEventListeners(shutdown.signal, "abort").length, 1);
  shutdown.abort();
  t.true(signals.every((s) => !s.aborted));
});

test("headers as handlers see them, without pseudo-headers; the deadline counts down", (t) => {
  const { context, finish } = unaryContext(req, new EventEmitter(), spec, call(5000), optionsWith(new AbortController()));
  t.false([...context.requestHeader.keys()].some((k) => k.startsWith(":")));
  t.is(context.requestHeader.get("x-a"), "1, 2");
  t.is(context.responseHeader.get("content-type"), "application/grpc");
  const left = context.timeoutMs()!;
  t.true(left > 4000 && left <= 5000);
  t.is(unaryContext(req, new EventEmitter(), spec, call(), optionsWith(new AbortController())).context.timeoutMs(), undefined);
  finish();
});

test("the client going away before the answer is settled cancels; after, it does not", (t) => {
  const shutdown = new AbortController();
  const early = new EventEmitter();
  const a = unaryContext(req, early, spec, call(), optionsWith(shutdown));
  early.emit("close");
  t.is(codeOf(a.context.signal), Code.Canceled);
  const late = new EventEmitter();
  const b = unaryContext(req, late, spec, call(), optionsWith(shutdown));
  b.settle();
  late.emit("close");
  t.false(b.context.signal.aborted);
  a.finish();
  b.finish();
});

test("the deadline aborts with DEADLINE_EXCEEDED, a spent one at once; finishing first clears it", async (t) => {
  const shutdown = new AbortController();
  t.is(codeOf(unaryContext(req, new EventEmitter(), spec, call(0), optionsWith(shutdown)).context.signal), Code.DeadlineExceeded);
  const running = unaryContext(req, new EventEmitter(), spec, call(30), optionsWith(shutdown));
  const finished = unaryContext(req, new EventEmitter(), spec, call(30), optionsWith(shutdown));
  finished.finish();
  await new Promise((r) => setTimeout(r, 80));
  t.is(codeOf(running.context.signal), Code.DeadlineExceeded);
  t.false(finished.context.signal.aborted);
  running.finish();
});

test("shutdown aborts the calls in flight with its reason, and a call begun after it starts aborted", (t) => {
  const shutdown = new AbortController();
  const inFlight = unaryContext(req, new EventEmitter(), spec, call(), optionsWith(shutdown));
  const reason = new ConnectError("server shutting down", Code.Unavailable);
  shutdown.abort(reason);
  t.is(inFlight.context.signal.reason, reason);
  const after = unaryContext(req, new EventEmitter(), spec, call(), optionsWith(shutdown));
  t.is(after.context.signal.reason, reason);
});

/** A fake exchange: a request body, and a log of what happened to the answer. */
function exchange(headers: Record<string, string>, body: Buffer, log: string[], gone = false): Exchange {
  return {
    url: "/agentworkspace.v1.ToolService/ReadFile",
    headers,
    body: Readable.from([body]),
    closing: new EventEmitter(),
    get done() {
      return gone;
    },
    discard: async () => true,
    answer: (status) => void log.push(`answer ${status}`),
  };
}

const directOptions = (interceptors: Interceptor[]): DirectOptions => ({
  interceptors,
  readMaxBytes: 1 << 20,
  writeMaxBytes: 1 << 20,
  maxTimeoutMs: 60_000,
  shutdownSignal: new AbortController().signal,
  jsonOptions: {},
  withDetail: (e) => e,
});

/** What the audit trail does: leaves work for after the answer. */
const leaver = (log: string[]): Interceptor => (next) => async (r) => {
  const after = r.contextValues.get(AFTER_ANSWER);
  log.push(after ? "left work" : "no list");
  after?.push(() => log.push("work ran"));
  return next(r);
};

const readSpec = createMethodImplSpec(ToolService.method.readFile, () => ({ path: "a.txt", content: "1: hi" }));
const grpcBody = () => {
  const m = toBinary(ReadFileRequestSchema, create(ReadFileRequestSchema, { workspaceId: "ws-1", path: "a.txt" }));
  const b = Buffer.alloc(5 + m.length);
  b.writeUInt32BE(m.length, 1);
  b.set(m, 5);
  return b;
};
const afterImmediate = () => new Promise((r) => setImmediate(r));

for (const [name, serve, headers, body] of [
  ["gRPC", serveUnaryGrpc, { "content-type": "application/grpc" }, grpcBody],
  ["Connect JSON", serveUnaryConnect, { "content-type": "application/json" }, () => Buffer.from(JSON.stringify({ workspaceId: "ws-1", path: "a.txt" }))],
] as const) {
  test(`${name}: work a call leaves for after its answer runs after the answer, and also when the client went away`, async (t) => {
    const log: string[] = [];
    await serve(exchange(headers, body(), log), readSpec as never, directOptions([leaver(log)]));
    await afterImmediate();
    t.deepEqual(log, ["left work", "answer 200", "work ran"]);
    const gone: string[] = [];
    await serve(exchange(headers, body(), gone, true), readSpec as never, directOptions([leaver(gone)]));
    await afterImmediate();
    t.deepEqual(gone, ["left work", "work ran"]);
  });
}
