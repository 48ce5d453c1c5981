/**
 * A direct path for the commonest call: unary gRPC over HTTP/2 with uncompressed protobuf, as
 * generated clients (connect-node, grpc-js, grpcio) send it. connect-node's universal handler
 * runs even a unary call through a chain of async iterables and ends it by aborting a signal
 * without a reason (a fresh DOMException with a stack trace, several per call): together most of
 * a no-op call's CPU. Here the request is read from the HTTP/2 stream, decoded, and handed to
 * connect's own `invokeUnaryImplementation` with a context like connect's own (`unaryContext`),
 * so the same interceptors run (errors, and later authentication, permissions, audit) and the
 * handlers see the same context; the answer goes out as headers, one message, and trailers.
 *
 * Server-streaming calls have their own direct path (streaming.ts), and so do Connect unary calls
 * (unary-connect.ts); everything else (compressed messages, client and bidi streams, gRPC-Web,
 * Connect GET) stays on connect-node. `acceptsUnaryGrpc` says which requests this path takes.
 */
import type { IncomingHttpHeaders } from "node:http";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type MethodImplSpec } from "@connectrpc/connect";
import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { type DirectOptions, headerBlock, readBody, unaryContext, unwrapOne } from "./common.ts";
import type { Exchange } from "./exchange.ts";
import { CallHeaders } from "./headers.ts";
import { envelopeBinary } from "./wire.ts";

const CONTENT_TYPES = new Set(["application/grpc", "application/grpc+proto"]);

/** True when an HTTP/2 request (its method and headers) is one this path serves (see the module comment). */
export function acceptsUnaryGrpc(method: string | undefined, headers: IncomingHttpHeaders, spec: MethodImplSpec | undefined): spec is MethodImplSpec & { kind: "unary" } {
  if (spec?.kind !== "unary" || method !== "POST") return false;
  if (!CONTENT_TYPES.has(String(headers["content-type"]))) return false;
  const encoding = headers["grpc-encoding"];
  return encoding === undefined || encoding === "identity";
}

/** Serves one unary gRPC call on its HTTP/2 stream. Never throws; every outcome is a gRPC status. */
export async function serveUnaryGrpc(ex: Exchange, spec: MethodImplSpec & { kind: "unary" }, options: DirectOptions): Promise<void> {
  const contentType = String(ex.headers["content-type"]);
  const timeout = parseTimeout(typeof ex.headers["grpc-timeout"] === "string" ? ex.headers["grpc-timeout"] : null, options.maxTimeoutMs);
  const { context, settle, finish, answered } = unaryContext(ex, ex.closing, spec, { protocolName: "grpc", timeoutMs: timeout.timeoutMs, contentType }, options);
  try {
    if (timeout.error) throw timeout.error;
    let input;
    try {
      input = fromBinary(spec.method.input, unwrapOne(await readBody(ex, options.readMaxBytes), "grpc-encoding"));
    } catch (err) {
      throw err instanceof ConnectError ? err : new ConnectError(`parse binary: ${err instanceof Error ? err.message : String(err)}`, Code.InvalidArgument);
    }
    const output = await invokeUnaryImplementation(spec, context, input, options.interceptors);
    const message = envelopeBinary(spec.method.output, output, 0, options.writeMaxBytes);
    if (ex.done) return;
    settle();
    const trailer = new CallHeaders(context.responseTrailer);
    trailer.set("grpc-status", "0");
    ex.answer(200, headerBlock(context.responseHeader), message.bulk.byteLength > 0 ? [message.head, message.bulk] : [message.head], headerBlock(trailer));
  } catch (err) {
    if (ex.done) return;
    settle();
    // No message: headers, then the status (and the ErrorDetail) in the trailers.
    const status = setTrailerStatus(new CallHeaders(context.responseTrailer), options.withDetail(ConnectError.from(err)));
    ex.answer(200, headerBlock(context.responseHeader), [], headerBlock(status));
  } finally {
    finish();
    answered();
  }
}
