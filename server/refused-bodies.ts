/**
 * Request bodies the server answers before it has read them to their end: a message over the size
 * limit (by its Content-Length, its envelope's length, or once it passes the limit), a REST call
 * refused before its body is read, an unknown path. A client still sending when that answer comes
 * must be able to read it, and closing the connection (HTTP/1.1) or resetting the stream (HTTP/2)
 * under it does not allow that: most clients then report their own write's failure instead (EPIPE,
 * ECONNRESET, "fetch failed", curl's "Stream error in the HTTP/2 framing layer"). Node's HTTP/2
 * client even rejects a response's headers while more than its session memory (10 MB) of its
 * upload is still queued (ENHANCE_YOUR_CALM), so a refusal must not start before the upload ends.
 *
 * So the rest of such a body is read and thrown away, at most REFUSED_BODY_DRAIN_BYTES of it (no
 * byte is kept), and a refusal goes out once that is done (`requestBody`, the direct paths'
 * `readBody`, the REST handler). Any other response that ends before its body was read
 * (`answerAfterBody`): on HTTP/1.1 its end waits for the body's end, so the connection stays usable;
 * on HTTP/2 it goes out at once (a bidirectional stream's client may wait for it) and the rest of
 * the body is discarded after it. A body longer than the bound is cut: the HTTP/1.1 connection is
 * ended after the answer (and read for a moment more, so that the client reads the answer rather
 * than a reset), the HTTP/2 stream reset after it; an HTTP/2 client may then miss the answer.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { constants as h2, type Http2ServerRequest, type Http2ServerResponse, type ServerHttp2Stream } from "node:http2";
import { ConnectError } from "@connectrpc/connect";
import { DomainError } from "../core/errors.ts";
import { toConnectError } from "./interceptors/error-interceptor.ts";

/**
 * How long a cut HTTP/1.1 connection goes on being read (and thrown away) after its answer and the
 * server's FIN. Closing a socket with unread bytes arriving makes the kernel reset it, and a reset
 * can discard the answer in the client's receive queue before the client read it; a client still
 * writing its body reads the answer meanwhile, sees the FIN, and stops.
 */
const LINGER_MS = 2000;

/** Ends `socket` after what was written, discarding what still arrives for at most LINGER_MS. */
function lingeringClose(socket: import("node:net").Socket): void {
  if (socket.destroyed) return;
  socket.removeAllListeners("data");
  socket.on("data", () => undefined);
  socket.on("error", () => undefined);
  socket.end();
  socket.resume();
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
}

/** The most of a refused request body the server reads (and discards) so its client reads the answer. */
export const REFUSED_BODY_DRAIN_BYTES = 64 * 1024 * 1024;

type NodeRequest = IncomingMessage | Http2ServerRequest;
type NodeResponse = ServerResponse | Http2ServerResponse;
type Handler = (req: NodeRequest, res: NodeResponse) => void;

/** A request body: a request object, or a raw HTTP/2 stream (whose headers are not on it). */
type Body = NodeRequest | ServerHttp2Stream;

/** The discard of each request under way: resolves true once its body ended, false when it was cut or its client left. */
const discards = new WeakMap<Body, Promise<boolean>>();
/** Requests whose body was cut: their HTTP/1.1 connection is closed after the answer. */
const cut = new WeakSet<Body>();

const isHttp2 = (req: NodeRequest): req is Http2ServerRequest => "stream" in req;

/**
 * Reads the rest of `req`'s body and throws it away, at most `max` bytes (a body whose
 * Content-Length already says it is longer is not read at all). Idempotent; whoever stops reading
 * a body early calls it, and every response's end does (`answerAfterBody`).
 */
export function discardRest(req: Body, max = REFUSED_BODY_DRAIN_BYTES): Promise<boolean> {
  let discard = discards.get(req);
  if (discard) return discard;
  discard = new Promise<boolean>((resolve) => {
    if (req.readableEnded) return resolve(true);
    if (req.destroyed) return resolve(false);
    const declared = "headers" in req ? Number(req.headers["content-length"]) : Number.NaN;
    let left = max;
    const settle = (whole: boolean) => {
      req.off("data", count);
      req.off("end", ended);
      req.off("close", gone);
      req.off("error", gone);
      if (!whole) {
        req.pause();
        cut.add(req);
      }
      resolve(whole);
    };
    const count = (chunk: Buffer) => {
      left -= chunk.length;
      if (left < 0) settle(false);
    };
    const ended = () => settle(true);
    const gone = () => settle(req.readableEnded);
    if (declared > max) return settle(false);
    req.on("data", count);
    req.once("end", ended);
    req.once("close", gone);
    req.once("error", gone);
    req.resume();
  });
  discards.set(req, discard);
  return discard;
}

/**
 * Resets a stream whose body was cut, once its answer has gone out (or a second later). CANCEL,
 * not the NO_ERROR RFC 9113 suggests: Node's HTTP/2 client, and connect-node's gRPC-Web transport
 * over it, wait forever after a NO_ERROR reset while their upload is unfinished; CANCEL ends them.
 */
export function resetWhenAnswered(stream: ServerHttp2Stream): void {
  const reset = () => {
    clearTimeout(timer);
    if (!stream.destroyed) stream.close(h2.NGHTTP2_CANCEL);
  };
  const timer = setTimeout(reset, 1000);
  timer.unref();
  if (stream.writableFinished) reset();
  else stream.once("finish", reset);
}

/**
 * `handler` with every response answered so that its client reads it while the request's body is
 * still arriving (see the module comment): the rest of the body is discarded, and on HTTP/1.1 the
 * response's end waits for it.
 */
export function answerAfterBody(handler: Handler): Handler {
  return (req, res) => {
    if (!isHttp2(req)) {
      // Known cut before the answer starts (a Content-Length past the bound): say so in its head.
      const writeHead = res.writeHead as (...args: unknown[]) => NodeResponse;
      (res as { writeHead: (...args: unknown[]) => NodeResponse }).writeHead = function (this: NodeResponse, ...args: unknown[]) {
        if (cut.has(req)) this.setHeader("connection", "close");
        return writeHead.apply(this, args);
      } as never;
    }
    const end = res.end as (...args: unknown[]) => NodeResponse;
    (res as { end: (...args: unknown[]) => NodeResponse }).end = function (this: NodeResponse, ...args: unknown[]) {
      res.end = end as never;
      // The commonest case, cheaply: the body was read to its end (every call's message is).
      if ((isHttp2(req) ? req.stream : req).readableEnded) return end.apply(this, args);
      if (isHttp2(req)) {
        end.apply(this, args);
        // The answer is out; the stream ends with the client's side, or is reset once cut.
        void discardRest(req).then((whole) => {
          if (!whole) resetWhenAnswered(req.stream);
        });
        return this;
      }
      void discardRest(req).then((whole) => {
        if (whole) {
          end.apply(res, args);
          return;
        }
        // Cut (or the client left): the connection can carry nothing more. Node closes it after
        // the answer with socket.destroySoon(), which destroys it the moment its FIN is out, with
        // body bytes still arriving: the reset that follows can discard the answer at the client.
        // This socket closes lingering instead.
        if (!res.headersSent) res.setHeader("connection", "close");
        const socket = req.socket;
        socket.destroySoon = () => lingeringClose(socket);
        end.apply(res, args);
        res.once("finish", () => lingeringClose(socket));
      });
      return this;
    } as never;
    handler(req, res);
  };
}

/** RESOURCE_EXHAUSTED for a request message over `max` bytes, with its ErrorDetail (metadata max_bytes). */
export function messageTooLarge(max: number): ConnectError {
  return toConnectError(
    new DomainError("RESOURCE_EXHAUSTED", `The request message is larger than the ${max} bytes this server accepts`, { metadata: { max_bytes: String(max) } }),
  );
}

/** Options of `requestBody`. */
export interface RequestBodyOptions {
  /** Largest message accepted, in bytes. */
  maxMessage: number;
  /**
   * The call has one request message (unary, server streaming): the whole body is bounded by it,
   * and a body refused or left early is discarded before the answer goes out. Otherwise (client and
   * bidi streams) messages are connect's to bound, and a body left early is discarded after it.
   */
  single: boolean;
  /** The body is enveloped (gRPC, gRPC-Web, Connect streaming): its first envelope's length is checked at once. */
  enveloped: boolean;
}

/**
 * The body of `req` as its chunks, for connect's handlers. For a call of one message, more than
 * that message (by Content-Length, by its envelope's length, or as it comes) is
 * RESOURCE_EXHAUSTED (`messageTooLarge`, with its detail on every protocol, gRPC-Web's trailer
 * included), raised once the rest of the body was discarded, so the answer reaches a client that
 * was still sending. Unlike a plain iteration of the request, stopping early (connect stops at a
 * message over its limit) never destroys the request, which would close the connection under
 * that client.
 */
export async function* requestBody(req: NodeRequest, options: RequestBodyOptions): AsyncGenerator<Uint8Array> {
  const { maxMessage, single, enveloped } = options;
  const max = single ? maxMessage + (enveloped ? 5 : 0) : Number.POSITIVE_INFINITY;
  let ended = false;
  try {
    if (Number(req.headers["content-length"]) > max) throw messageTooLarge(maxMessage);
    let size = 0;
    let prefix = Buffer.alloc(0);
    for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
      // The first envelope says how long its message is: refused before any of it is kept.
      if (single && enveloped && prefix.length < 5) {
        prefix = Buffer.concat([prefix, chunk.subarray(0, 5 - prefix.length)]);
        if (prefix.length === 5 && prefix.readUInt32BE(1) > maxMessage) throw messageTooLarge(maxMessage);
      }
      size += chunk.length;
      if (size > max) throw messageTooLarge(maxMessage);
      yield chunk;
    }
    ended = true;
  } finally {
    if (!ended) {
      if (single) await discardRest(req);
      else void discardRest(req);
    }
  }
}
