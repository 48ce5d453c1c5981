/**
 * A direct path for the commonest call: unary gRPC over HTTP/2 with uncompressed protobuf, as
 * generated clients (connect-node, grpc-js, grpcio) send it. connect-node's universal handler
 * runs even a unary call through a chain of async iterables and ends it by aborting a signal
 * without a reason (a fresh DOMException with a stack trace, several per call): together most of
 * a no-op call's CPU. Here the request is read from the HTTP/2 stream, decoded, and handed to
 * connect's own `invokeUnaryImplementation` with a context from connect's `createHandlerContext`,
 * so the same interceptors run (errors, and later authentication, permissions, audit) and the
 * handlers see the same context; the answer goes out as headers, one message, and trailers.
 *
 * Everything else (compressed messages, other codecs, streaming methods, gRPC-Web, Connect)
 * stays on connect-node; `accepts` says which requests this path takes.
 */
import type { Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createHandlerContext, type Interceptor, type MethodImplSpec } from "@connectrpc/connect";
import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";

/** How the path is configured (the same limits connect-node gets). */
export interface UnaryGrpcOptions {
  interceptors: Interceptor[];
  readMaxBytes: number;
  writeMaxBytes: number;
  /** Largest grpc-timeout accepted. */
  maxTimeoutMs: number;
  shutdownSignal: AbortSignal;
  /** Gives every error an ErrorDetail, as the error interceptor does for handler errors. */
  withDetail: (error: ConnectError) => ConnectError;
}

const CONTENT_TYPES = new Set(["application/grpc", "application/grpc+proto"]);

/** The reason a finished call's context is aborted with: one shared value, no stack captured per call. */
const CALL_ENDED = new ConnectError("the call ended", Code.Canceled);

/** Request headers without HTTP/2 pseudo-headers, as connect hands them to handlers. */
function requestHeaders(headers: IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const [key, value] of Object.entries(headers)) {
    if (key.startsWith(":") || value === undefined) continue;
    out.set(key, Array.isArray(value) ? value.join(", ") : value);
  }
  return out;
}

/** An HTTP/2 header block from web Headers. */
function headerBlock(_status: undefined, ...sources: Headers[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of sources) h.forEach((value, key) => (out[key] = value));
  return out;
}

/** Reads the whole request body, or fails with RESOURCE_EXHAUSTED past `max` bytes. */
function readBody(stream: ServerHttp2Stream, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        stream.removeAllListeners("data");
        reject(new ConnectError(`message larger than ${max - 5} bytes`, Code.ResourceExhausted));
        return;
      }
      chunks.push(chunk);
    });
    stream.once("end", () => resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)));
    stream.once("error", reject);
  });
}

/** The single message of a unary gRPC request body (5-byte envelope, uncompressed). */
function unwrap(body: Buffer): Uint8Array {
  if (body.length < 5) throw new ConnectError("protocol error: missing message", Code.InvalidArgument);
  if ((body[0] & 1) === 1) throw new ConnectError("protocol error: received compressed message without grpc-encoding", Code.Internal);
  const length = body.readUInt32BE(1);
  if (body.length !== 5 + length) throw new ConnectError("protocol error: expected exactly one message", Code.InvalidArgument);
  return body.subarray(5);
}

/** True when the request is one this path serves (see the module comment). */
export function accepts(req: Http2ServerRequest, spec: MethodImplSpec | undefined): spec is MethodImplSpec & { kind: "unary" } {
  if (spec?.kind !== "unary" || req.httpVersionMajor !== 2 || req.method !== "POST") return false;
  if (!CONTENT_TYPES.has(String(req.headers["content-type"]))) return false;
  const encoding = req.headers["grpc-encoding"];
  return encoding === undefined || encoding === "identity";
}

/** Serves one unary gRPC call on its HTTP/2 stream. Never throws; every outcome is a gRPC status. */
export async function serveUnaryGrpc(req: Http2ServerRequest, res: Http2ServerResponse, spec: MethodImplSpec & { kind: "unary" }, options: UnaryGrpcOptions): Promise<void> {
  const stream = res.stream;
  const contentType = String(req.headers["content-type"]);
  const timeout = parseTimeout(typeof req.headers["grpc-timeout"] === "string" ? req.headers["grpc-timeout"] : null, options.maxTimeoutMs);
  // The client going away (RST_STREAM, a closed connection) cancels the call.
  const cancel = new AbortController();
  let answered = false;
  stream.once("close", () => {
    if (!answered) cancel.abort(new ConnectError("the client went away", Code.Canceled));
  });
  const context = createHandlerContext({
    service: spec.method.parent,
    method: spec.method,
    protocolName: "grpc",
    requestMethod: "POST",
    url: req.url,
    timeoutMs: timeout.timeoutMs,
    shutdownSignal: options.shutdownSignal,
    requestSignal: cancel.signal,
    requestHeader: requestHeaders(req.headers),
    responseHeader: { "content-type": contentType },
  });
  try {
    if (timeout.error) throw timeout.error;
    let input;
    try {
      input = fromBinary(spec.method.input, unwrap(await readBody(stream, options.readMaxBytes + 5)));
    } catch (err) {
      throw err instanceof ConnectError ? err : new ConnectError(`parse binary: ${err instanceof Error ? err.message : String(err)}`, Code.InvalidArgument);
    }
    const output = await invokeUnaryImplementation(spec, context, input, options.interceptors);
    const bytes = toBinary(spec.method.output, output);
    if (bytes.length > options.writeMaxBytes) throw new ConnectError(`message larger than ${options.writeMaxBytes} bytes`, Code.ResourceExhausted);
    const envelope = Buffer.allocUnsafe(5 + bytes.length);
    envelope[0] = 0;
    envelope.writeUInt32BE(bytes.length, 1);
    envelope.set(bytes, 5);
    if (stream.destroyed) return;
    answered = true;
    const trailer = new Headers(context.responseTrailer);
    trailer.set("grpc-status", "0");
    res.writeHead(200, headerBlock(undefined, context.responseHeader));
    res.addTrailers(headerBlock(undefined, trailer));
    res.end(envelope);
  } catch (err) {
    if (stream.destroyed || res.headersSent) return;
    answered = true;
    // No message: headers, then the status (and the ErrorDetail) in the trailers.
    const status = setTrailerStatus(new Headers(context.responseTrailer), options.withDetail(ConnectError.from(err)));
    res.writeHead(200, headerBlock(undefined, context.responseHeader));
    res.addTrailers(headerBlock(undefined, status));
    res.end();
  } finally {
    context.abort(CALL_ENDED);
  }
}
