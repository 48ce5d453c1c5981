/**
 * What the direct call paths share: their options, request headers as handlers see them, and
 * reading the single request message of a call.
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import type { Readable } from "node:stream";
import { Code, ConnectError, createContextKey, createContextValues, createHandlerContext, type HandlerContext, type Interceptor, type MethodImplSpec } from "@connectrpc/connect";
import type { JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import { messageTooLarge } from "../refused-bodies.ts";
import type { Exchange } from "./exchange.ts";
import { CallHeaders } from "./headers.ts";

/** How the direct paths are configured (the same limits connect-node gets). */
export interface DirectOptions {
  interceptors: Interceptor[];
  readMaxBytes: number;
  writeMaxBytes: number;
  /** Largest timeout header accepted. */
  maxTimeoutMs: number;
  shutdownSignal: AbortSignal;
  jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>;
  /** Gives every error an ErrorDetail, as the error interceptor does for handler errors. */
  withDetail: (error: ConnectError) => ConnectError;
}

/**
 * Work a unary call leaves until its answer is written (the audit trail's span, record and live
 * event): a direct path sets this to a list in the call's context values and runs the list once
 * the answer went to the socket, or once the call ended without one (the client went away). The
 * caller then has its answer while the server finishes the call's bookkeeping. Where it is unset
 * (connect-node's own handlers) that work runs before the answer, as it always did. What goes in
 * must not throw, and must not be needed before it runs by anything but its own owner (the audit
 * trail ends what is left itself before a query: AuditTrail.flushed).
 */
export const AFTER_ANSWER = createContextKey<(() => void)[] | undefined>(undefined, { description: "work to run once the answer is written" });
/**
 * A unary call's: settles once its answer has gone out whole (its HTTP/2 stream, or HTTP/1.1
 * response, closed), or its client went away. Work that would hold this thread for a while after
 * a call (a command's change scan) waits for it, so the answer's last frames are not held behind
 * that work: AFTER_ANSWER runs as the answer is handed to the connection, and over gRPC the
 * trailers follow the message a few turns of the event loop later.
 */
export const ANSWER_GONE = createContextKey<(() => Promise<void>) | undefined>(undefined, { description: "settles once the answer has gone out" });

/** The reason a finished call's context is aborted with: one shared value, no stack captured per call. */
export const CALL_ENDED = new ConnectError("the call ended", Code.Canceled);

/**
 * A direct call's context, as connect makes it for its own handlers: the request's headers, the
 * protocol's timeout, the server's shutdown, and cancellation when the client goes away (`closing`
 * closes: a reset stream, a closed connection) before `settle()` said the answer is on its way.
 */
export function directContext(
  req: IncomingMessage | Http2ServerRequest,
  closing: { once(event: "close", listener: () => void): unknown },
  spec: MethodImplSpec,
  call: { protocolName: string; timeoutMs: number | undefined; contentType: string },
  options: DirectOptions,
): { context: ReturnType<typeof createHandlerContext>; settle(): void } {
  const cancel = new AbortController();
  let settled = false;
  closing.once("close", () => {
    if (!settled) cancel.abort(new ConnectError("the client went away", Code.Canceled));
  });
  const context = createHandlerContext({
    service: spec.method.parent,
    method: spec.method,
    protocolName: call.protocolName,
    requestMethod: "POST",
    url: req.url ?? "",
    timeoutMs: call.timeoutMs,
    shutdownSignal: options.shutdownSignal,
    requestSignal: cancel.signal,
    requestHeader: requestHeaders(req.headers),
    responseHeader: { "content-type": call.contentType },
  });
  return { context, settle: () => (settled = true) };
}

/**
 * Runs what calls left for after their answers. In the check phase of the loop: an HTTP/1.1 answer
 * is on the socket by then, and an HTTP/2 one too (nghttp2's frames go out from a native
 * immediate, which runs before the JavaScript ones).
 */
function runAll(work: (() => void)[]): void {
  for (const run of work) run();
}

/** Unary calls in flight by the shutdown signal they end with: one listener on that signal, not one per call. */
const inFlight = new WeakMap<AbortSignal, Set<AbortController>>();

function callsEndingWith(shutdown: AbortSignal): Set<AbortController> {
  let calls = inFlight.get(shutdown);
  if (!calls) {
    const set = new Set<AbortController>();
    calls = set;
    inFlight.set(shutdown, set);
    shutdown.addEventListener("abort", () => {
      for (const c of set) c.abort(shutdown.reason ?? new ConnectError("the server is shutting down", Code.Canceled));
      set.clear();
    }, { once: true });
  }
  return calls;
}

/**
 * A unary call's context: what `directContext` makes, for a call whose handler has returned when
 * its answer goes out. Its signal aborts when the client goes away before `settle()`, at the
 * protocol's deadline, or at the server's shutdown, as connect's does; but `finish()` ends it
 * without aborting, where connect aborts the signal of every call at its end. That abort ran every
 * listener the call's layers had added (the tool's, the provider's, the executor connection's),
 * and dispatching it was a measurable part of a no-op call's CPU; a unary handler has nothing
 * left running once it returned, so its listeners go with the signal. Streams keep
 * `directContext`, whose end aborts what is still producing. `answered()` runs what the call left
 * for after its answer (AFTER_ANSWER).
 */
export function unaryContext(
  req: { url?: string; headers: IncomingHttpHeaders },
  closing: { once(event: "close", listener: () => void): unknown },
  spec: MethodImplSpec,
  call: { protocolName: string; timeoutMs: number | undefined; contentType: string },
  options: DirectOptions,
): { context: HandlerContext; settle(): void; finish(): void; answered(): void } {
  const controller = new AbortController();
  const calls = callsEndingWith(options.shutdownSignal);
  let settled = false;
  let timer: NodeJS.Timeout | undefined;
  if (options.shutdownSignal.aborted) controller.abort(options.shutdownSignal.reason);
  else calls.add(controller);
  let gone = false;
  let goneWaiters: (() => void)[] | undefined;
  closing.once("close", () => {
    gone = true;
    if (goneWaiters) for (const resolve of goneWaiters.splice(0)) resolve();
    if (!settled) controller.abort(new ConnectError("the client went away", Code.Canceled));
  });
  const deadline = call.timeoutMs === undefined ? undefined : Date.now() + call.timeoutMs;
  if (call.timeoutMs !== undefined) {
    const expire = () => controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
    if (call.timeoutMs <= 0) expire();
    else timer = setTimeout(expire, call.timeoutMs);
  }
  const context: HandlerContext = {
    service: spec.method.parent,
    method: spec.method,
    protocolName: call.protocolName,
    requestMethod: "POST",
    url: req.url ?? "",
    signal: controller.signal,
    timeoutMs: () => (deadline === undefined ? undefined : deadline - Date.now()),
    requestHeader: requestHeaders(req.headers),
    responseHeader: new CallHeaders({ "content-type": call.contentType }),
    responseTrailer: new CallHeaders(),
    values: createContextValues(),
  };
  const afterAnswer: (() => void)[] = [];
  context.values.set(AFTER_ANSWER, afterAnswer);
  context.values.set(ANSWER_GONE, () => (gone ? Promise.resolve() : new Promise<void>((resolve) => (goneWaiters ??= []).push(resolve))));
  return {
    context,
    answered: () => {
      if (afterAnswer.length > 0) setImmediate(runAll, afterAnswer.splice(0));
    },
    settle: () => (settled = true),
    finish: () => {
      settled = true;
      clearTimeout(timer);
      calls.delete(controller);
    },
  };
}

/** Request headers without HTTP/2 pseudo-headers, as connect hands them to handlers. */
export function requestHeaders(headers: IncomingHttpHeaders): Headers {
  const out = new CallHeaders();
  for (const [key, value] of Object.entries(headers)) {
    if (key.startsWith(":") || value === undefined) continue;
    out.set(key, Array.isArray(value) ? value.join(", ") : value);
  }
  return out;
}

/** A Node header block from web Headers. */
export function headerBlock(...sources: Headers[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of sources) h.forEach((value, key) => (out[key] = value));
  return out;
}

/**
 * Reads the whole request body of one enveloped message (or, `enveloped` false, of a bare one: a
 * Connect unary request), or fails with RESOURCE_EXHAUSTED (`messageTooLarge`) when it is longer
 * than the envelope of a `maxMessage`-byte message (by its Content-Length, or once that much has
 * come). The refusal comes once the rest of the body was discarded (refused-bodies.ts), so a
 * client still sending reads it.
 */
export function readBody(request: Pick<Exchange, "headers" | "body" | "discard">, maxMessage: number, enveloped = true): Promise<Buffer> {
  const max = enveloped ? maxMessage + 5 : maxMessage;
  const body = request.body;
  const refuse = (reject: (err: unknown) => void) => void request.discard().then(() => reject(messageTooLarge(maxMessage)));
  return new Promise((resolve, reject) => {
    if (Number(request.headers["content-length"]) > max) return refuse(reject);
    const chunks: Buffer[] = [];
    let size = 0;
    const onEnd = () => resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        body.off("data", onData);
        body.off("end", onEnd);
        body.off("error", reject);
        body.pause();
        chunks.length = 0;
        refuse(reject);
        return;
      }
      chunks.push(chunk);
    };
    body.on("data", onData);
    body.once("end", onEnd);
    body.once("error", reject);
  });
}

/** The single message of an enveloped request body (gRPC, Connect streaming), uncompressed. */
export function unwrapOne(body: Buffer, encodingHeader: string): Uint8Array {
  if (body.length < 5) throw new ConnectError("protocol error: missing message", Code.InvalidArgument);
  if ((body[0] & 1) === 1) throw new ConnectError(`protocol error: received compressed message without ${encodingHeader}`, Code.Internal);
  if ((body[0] & 0b10) !== 0) throw new ConnectError("protocol error: missing message", Code.InvalidArgument);
  const length = body.readUInt32BE(1);
  if (body.length !== 5 + length) throw new ConnectError("protocol error: expected exactly one message", Code.InvalidArgument);
  return body.subarray(5);
}
