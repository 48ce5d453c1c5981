/**
 * A direct path for server-streaming calls (StreamBash, StreamGrep) over gRPC (HTTP/2) and the
 * Connect protocol (HTTP/1.1 and HTTP/2, JSON and protobuf), uncompressed. connect-node sends
 * each message through a chain of async-iterable transforms, encodes it with protobuf-es (which
 * copies a 64 KiB output chunk twice and allocates twice its size) and copies it once more into
 * an envelope: at a few hundred MB/s that garbage alone kept the server's GC threads busier than
 * its main thread. Here a message goes from the implementation to the socket with its bulk bytes
 * uncopied (wire.ts), and messages produced together leave in one write.
 *
 * The call itself is connect's: a context from `createHandlerContext`, the implementation run by
 * `transformInvokeImplementation` with the same interceptors, errors given their ErrorDetail. The
 * response honours backpressure: the next message is only asked for once the socket took the
 * last one, so a slow client slows the command down instead of growing the server's memory.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Writable } from "node:stream";
import { fromBinary, fromJsonString, type Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type MethodImplSpec } from "@connectrpc/connect";
import { createAsyncIterable, transformInvokeImplementation } from "@connectrpc/connect/protocol";
import { endStreamFlag, endStreamToJson, parseContentType, parseTimeout as parseConnectTimeout } from "@connectrpc/connect/protocol-connect";
import { parseTimeout as parseGrpcTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { isOwned, markOwned, releaseOwned } from "../../core/owned-chunks.ts";
import { drainedOrClosed } from "../../core/streams.ts";
import { discardRest } from "../refused-bodies.ts";
import { CALL_ENDED, type DirectOptions, directContext, headerBlock, readBody, unwrapOne } from "./common.ts";
import { type Encoded, envelopeBinary, envelopeJson } from "./wire.ts";

/** The protocol of a server-streaming request this path serves. */
export type StreamingProtocol = { name: "grpc"; binary: true } | { name: "connect"; binary: boolean };

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;
type StreamingSpec = MethodImplSpec & { kind: "server_streaming" };

/** Bytes a response may hold queued in its stream before the next message waits for them to drain. */
const WRITE_BUDGET = 256 * 1024;

const GRPC_CONTENT_TYPES = new Set(["application/grpc", "application/grpc+proto"]);
const identity = (encoding: string | string[] | undefined) => encoding === undefined || encoding === "identity";

/** The protocol when this path serves the request (see the module comment), undefined otherwise. */
export function streamingProtocol(req: Request, spec: MethodImplSpec | undefined): StreamingProtocol | undefined {
  if (spec?.kind !== "server_streaming" || req.method !== "POST") return undefined;
  const contentType = String(req.headers["content-type"]);
  if (GRPC_CONTENT_TYPES.has(contentType)) {
    return req.httpVersionMajor === 2 && identity(req.headers["grpc-encoding"]) ? { name: "grpc", binary: true } : undefined;
  }
  const type = parseContentType(contentType);
  if (!type?.stream || !identity(req.headers["connect-content-encoding"])) return undefined;
  return { name: "connect", binary: type.binary };
}

/**
 * Writes envelopes to the response. On HTTP/2, messages written in the same turn of the event
 * loop are corked into one write (an HTTP/1.1 response corked past its buffer's high-water mark
 * never emits 'drain', so it is written as it comes). When the socket's buffer is full, `write`
 * waits until it drained (or the client went away: then it answers false).
 */
class EnvelopeWriter {
  readonly #res: Response;
  readonly #out: Writable;
  readonly #cork: boolean;
  #corked = false;

  constructor(res: Response) {
    this.#res = res;
    this.#cork = "stream" in res;
    this.#out = "stream" in res ? res.stream : res;
  }

  get open(): boolean {
    return !this.#res.destroyed && !this.#out.destroyed;
  }

  async write(message: Encoded): Promise<boolean> {
    if (!this.open) return false;
    if (this.#cork && !this.#corked) {
      this.#corked = true;
      this.#out.cork();
      process.nextTick(() => this.#uncork());
    }
    const { head, bulk } = message;
    let room = isOwned(head) ? this.#out.write(head, () => releaseOwned(head)) : this.#out.write(head);
    // A command's output chunk read for this call alone is freed once the socket took it.
    if (bulk.byteLength > 0) room = isOwned(bulk) ? this.#out.write(bulk, () => releaseOwned(bulk)) : this.#out.write(bulk);
    // The stream's own high-water mark (16 KiB) is below one 64 KiB output chunk: the next message
    // waits only past a budget of a few, so one is read while the others go out (bounded still).
    if (room || this.#out.writableLength <= WRITE_BUDGET) return true;
    this.#uncork();
    await drainedOrClosed(this.#out, this.#res);
    return this.open;
  }

  /** Sends what is corked now (before the response ends: ending while corked reorders on HTTP/1.1). */
  flush(): void {
    this.#uncork();
  }

  #uncork(): void {
    if (!this.#corked) return;
    this.#corked = false;
    this.#out.uncork();
  }
}

/** Serves one server-streaming call. Never throws; every outcome is the protocol's status. */
export async function serveServerStreaming(req: Request, res: Response, spec: StreamingSpec, protocol: StreamingProtocol, options: DirectOptions): Promise<void> {
  const grpc = protocol.name === "grpc";
  const contentType = grpc ? String(req.headers["content-type"]) : protocol.binary ? "application/connect+proto" : "application/connect+json";
  const timeoutHeader = req.headers[grpc ? "grpc-timeout" : "connect-timeout-ms"];
  const timeout = (grpc ? parseGrpcTimeout : parseConnectTimeout)(typeof timeoutHeader === "string" ? timeoutHeader : null, options.maxTimeoutMs);
  const { context, settle } = directContext(req, res, spec, { protocolName: protocol.name, timeoutMs: timeout.timeoutMs, contentType }, options);
  const encode = (message: object): Encoded => {
    if (protocol.binary) return envelopeBinary(spec.method.output, message, 0, options.writeMaxBytes);
    const encoded = envelopeJson(spec.method.output, message, 0, options.jsonOptions, options.writeMaxBytes);
    // A command's output chunk is in the envelope now, as base64: its own memory can go, and the
    // envelope, made for this message alone, goes once written (owned-chunks.ts).
    if (encoded.copied) {
      releaseOwned(encoded.copied);
      markOwned(encoded.head);
    }
    return encoded;
  };
  const writer = new EnvelopeWriter(res);
  const sendHeaders = () => {
    if (!res.headersSent) (res as ServerResponse).writeHead(200, headerBlock(context.responseHeader));
  };
  let iterator: AsyncIterator<unknown> | undefined;
  let error: ConnectError | undefined;
  try {
    if (timeout.error) throw timeout.error;
    const input = parseInput(spec, protocol, await readBody({ headers: req.headers, body: req, discard: () => discardRest(req) }, options.readMaxBytes), options);
    iterator = transformInvokeImplementation(spec, context, options.interceptors)(createAsyncIterable([input]))[Symbol.asyncIterator]();
    for (;;) {
      let next: IteratorResult<unknown>;
      try {
        next = await iterator.next();
      } catch (err) {
        iterator = undefined;
        throw err;
      }
      if (next.done) {
        iterator = undefined;
        break;
      }
      const message = encode(next.value as object);
      sendHeaders();
      if (!(await writer.write(message))) break;
    }
  } catch (err) {
    error = options.withDetail(ConnectError.from(err));
  } finally {
    // Stopped early (the client left): ending the implementation's iteration kills its command.
    await iterator?.return?.().catch(() => undefined);
  }
  settle();
  context.abort(CALL_ENDED);
  if (!writer.open) return;
  writer.flush();
  sendHeaders();
  if (grpc) {
    const trailer = new Headers(context.responseTrailer);
    if (error) setTrailerStatus(trailer, error);
    else trailer.set("grpc-status", "0");
    (res as Http2ServerResponse).addTrailers(headerBlock(trailer));
    res.end();
    return;
  }
  const json = Buffer.from(JSON.stringify(endStreamToJson(context.responseTrailer, error, options.jsonOptions)));
  const end = Buffer.allocUnsafe(5 + json.byteLength);
  end[0] = endStreamFlag;
  end.writeUInt32BE(json.byteLength, 1);
  json.copy(end, 5);
  res.end(end);
}

/** The request's one message, decoded; a malformed one is INVALID_ARGUMENT. */
function parseInput(spec: StreamingSpec, protocol: StreamingProtocol, body: Buffer, options: DirectOptions): Message {
  const bytes = unwrapOne(body, protocol.name === "grpc" ? "grpc-encoding" : "connect-content-encoding");
  if (protocol.binary) {
    try {
      return fromBinary(spec.method.input, bytes);
    } catch (err) {
      throw new ConnectError(`parse binary: ${err instanceof Error ? err.message : String(err)}`, Code.InvalidArgument);
    }
  }
  try {
    return fromJsonString(spec.method.input, new TextDecoder().decode(bytes), { ignoreUnknownFields: true, ...options.jsonOptions });
  } catch (err) {
    throw ConnectError.from(err, Code.InvalidArgument);
  }
}
