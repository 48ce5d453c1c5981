/**
 * The direct unary paths' call context (server/direct/common.ts `unaryContext`): its signal aborts
 * when the client goes away before the answer is settled, at the protocol's deadline and at the
 * server's shutdown, each with connect's code; finishing a call aborts nothing and leaves nothing
 * on the shutdown signal, however many calls ran. (Through the real server: the cancel, deadline
 * and shutdown tests of resilience.test.ts and protocols.test.ts.)
 */
import { EventEmitter, getEventListeners } from "node:events";
import type { IncomingMessage } from "node:http";
import { Code, ConnectError, createMethodImplSpec } from "@connectrpc/connect";
import test from "ava";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { type DirectOptions, unaryContext } from "../server/direct/common.ts";

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
