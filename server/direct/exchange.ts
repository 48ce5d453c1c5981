/**
 * One request and its answer, as the direct unary paths see them, over either of Node's HTTP
 * APIs: a raw HTTP/2 stream (`rawExchange`), or a request and response object (`nodeExchange`:
 * HTTP/1.1, or HTTP/2 through Node's compatibility layer). On HTTP/2 the server hands unary
 * calls to these paths straight from the session's `stream` event (http-server.ts), before Node
 * makes its compatibility request and response objects for it: two streams, a dozen listeners
 * and their header handling per call, of which a unary call needs none.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse, ServerHttp2Stream } from "node:http2";
import type { Readable } from "node:stream";
import { discardRest, resetWhenAnswered } from "../refused-bodies.ts";

/** A request and the means to answer it. */
export interface Exchange {
  /** The request's path and query. */
  readonly url: string;
  /** The request's headers (on HTTP/2 with its pseudo-headers). */
  readonly headers: IncomingHttpHeaders;
  /** Where the body is read from. */
  readonly body: Readable;
  /** Emits "close" once the request is over: answered, or its client gone. */
  readonly closing: { once(event: "close", listener: () => void): unknown };
  /** True once the client went away or the answer started: nothing more can be sent. */
  readonly done: boolean;
  /** Reads the rest of the body and throws it away (refused-bodies.ts); true when it ended whole. */
  discard(): Promise<boolean>;
  /** Sends the whole answer: the last chunk ends it; trailers only over HTTP/2. */
  answer(status: number, headers: Record<string, string>, chunks: Uint8Array[], trailers?: Record<string, string>): void;
}

/** An HTTP/2 stream as its session handed it over, with no compatibility objects. */
export function rawExchange(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): Exchange {
  // Node's compatibility layer swallows a stream's errors (a client's reset mid-answer): so does
  // this, or the error would be thrown at the process. Its close is what a call reacts to.
  stream.on("error", () => undefined);
  return {
    url: String(headers[":path"] ?? ""),
    headers,
    body: stream,
    closing: stream,
    get done() {
      return stream.destroyed || stream.headersSent;
    },
    discard: () => discardRest(stream),
    answer(status, head, chunks, trailers) {
      if (stream.destroyed || stream.headersSent) return;
      // A raw header list (name, value, name, value…), which Node takes with less preparation than
      // an object; names are checked as in the object form.
      const list: string[] = [":status", String(status)];
      for (const name in head) list.push(name, head[name]);
      stream.respond(list as unknown as Record<string, string>, { waitForTrailers: trailers !== undefined });
      if (trailers !== undefined) {
        stream.once("wantTrailers", () => {
          if (!stream.destroyed) stream.sendTrailers(trailers);
        });
      }
      for (let i = 0; i < chunks.length - 1; i++) stream.write(chunks[i]);
      stream.end(chunks.at(-1));
      // A body the call did not read to its end (it was refused): the rest is discarded after the
      // answer, and the stream reset once answered if the body was cut (as `answerAfterBody`).
      if (!stream.readableEnded) {
        void discardRest(stream).then((whole) => {
          if (!whole) resetWhenAnswered(stream);
        });
      }
    },
  };
}

/** A request and response object: HTTP/1.1, or HTTP/2 through Node's compatibility layer. */
export function nodeExchange(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse): Exchange {
  const out = "stream" in res ? res.stream : res;
  return {
    url: req.url ?? "",
    headers: req.headers,
    body: "stream" in req ? req.stream : req,
    closing: res,
    get done() {
      return out.destroyed || res.headersSent;
    },
    discard: () => discardRest(req),
    answer(status, head, chunks, trailers) {
      const node = res as ServerResponse;
      node.writeHead(status, head);
      if (trailers !== undefined) (res as Http2ServerResponse).addTrailers(trailers);
      for (let i = 0; i < chunks.length - 1; i++) node.write(chunks[i]);
      node.end(chunks.at(-1));
    },
  };
}
