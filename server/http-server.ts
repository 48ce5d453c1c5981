/**
 * Serves one request handler on one port for HTTP/1.1 and HTTP/2. Without TLS, the first bytes
 * of each connection decide: the HTTP/2 connection preface goes to an HTTP/2 server (prior
 * knowledge, what gRPC clients use), anything else to an HTTP/1.1 server (curl, browsers,
 * Connect and gRPC-Web over 1.1). With TLS, ALPN negotiates the same choice.
 */
import { readFile } from "node:fs/promises";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import type { StreamHandler } from "./node-adapter.ts";
import { answerAfterBody } from "./refused-bodies.ts";

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

type Handler = Parameters<typeof http2.createServer>[1] & Parameters<typeof http.createServer>[1];

/** A listening server. */
export interface ListeningServer {
  port: number;
  url: string;
  /** Stops accepting, ends idle connections and waits for the rest. */
  close(): Promise<void>;
}

/** Options of `listen`. */
export interface ListenOptions {
  host: string;
  port: number;
  tlsCert?: string;
  tlsKey?: string;
  /** Serves HTTP/1.1 upgrade requests (WebSockets); without it they are refused. */
  upgrade?: (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void;
}

/**
 * HTTP/2 receive windows. Node's default of 64 KiB per stream and per connection makes a client
 * wait a round trip per 64 KiB it uploads (a WriteFile of 1 MiB: 16 of them); these let a request
 * of a few MiB arrive at once. Bounded, so one connection cannot park more than this in memory.
 */
const H2_SETTINGS: http2.Settings = { initialWindowSize: 1 << 20, maxFrameSize: 256 * 1024 };
const H2_CONNECTION_WINDOW = 8 << 20;

/**
 * Starts serving `handler`. Its `stream`, when it has one, sees each HTTP/2 stream first, as its
 * session hands it over, and may serve it there (node-adapter.ts); the rest go to `handler`.
 */
export async function listen(handler: Handler & { stream?: StreamHandler }, options: ListenOptions): Promise<ListeningServer> {
  const sessions = new Set<http2.ServerHttp2Session>();
  const track = (s: http2.Http2Server | http2.Http2SecureServer) =>
    s.on("session", (session) => {
      sessions.add(session);
      session.on("close", () => sessions.delete(session));
      session.setLocalWindowSize(H2_CONNECTION_WINDOW);
    });

  // Every accepted socket, so close() can end the ones neither inner server would (a client that
  // never sent a byte, a connection whose request body was left unread).
  const sockets = new Set<net.Socket>();
  // Every response is answered so that a client still sending its body reads it (refused-bodies.ts).
  const answering = answerAfterBody(handler as never) as Handler;
  let outer: net.Server;
  let h1: http.Server | undefined;
  if (options.tlsCert && options.tlsKey) {
    const secure = http2.createSecureServer({ cert: await readFile(options.tlsCert), key: await readFile(options.tlsKey), allowHTTP1: true, settings: H2_SETTINGS }, answering);
    track(secure);
    if (handler.stream) streamsFirst(secure, handler.stream);
    if (options.upgrade) secure.on("upgrade", options.upgrade);
    outer = secure;
  } else {
    const h2 = http2.createServer({ settings: H2_SETTINGS }, answering);
    track(h2);
    if (handler.stream) streamsFirst(h2, handler.stream);
    h1 = http.createServer(answering);
    h1.keepAliveTimeout = 30_000;
    if (options.upgrade) h1.on("upgrade", options.upgrade);
    const h1s = h1;
    outer = net.createServer((socket) => {
      socket.once("readable", function route() {
        const head: Buffer | null = socket.read(Math.min(PREFACE.length, socket.readableLength));
        if (head === null) {
          socket.once("readable", route);
          return;
        }
        socket.unshift(head);
        const isH2 = head.equals(PREFACE.subarray(0, head.length));
        if (isH2 && head.length < PREFACE.length) {
          // Too few bytes to decide yet; wait for more of the preface.
          socket.read(0);
          socket.once("readable", route);
          return;
        }
        (isH2 ? h2 : h1s).emit("connection", socket);
      });
      socket.on("error", () => socket.destroy());
    });
  }
  outer.on("connection", (socket: net.Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    outer.once("error", reject);
    outer.listen(options.port, options.host, () => resolve());
  });
  const port = (outer.address() as AddressInfo).port;
  const scheme = options.tlsCert ? "https" : "http";
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    port,
    url: `${scheme}://${host}:${port}`,
    async close() {
      const closed = new Promise<void>((resolve) => outer.close(() => resolve()));
      for (const s of sessions) s.close();
      h1?.closeIdleConnections();
      const force = setTimeout(() => {
        for (const s of sessions) s.destroy();
        h1?.closeAllConnections();
        for (const socket of sockets) socket.destroy();
      }, 2000);
      await closed;
      clearTimeout(force);
    },
  };
}

/**
 * Puts `first` in front of the request handler of an HTTP/2 server: Node's compatibility layer is
 * the server's listener of "stream" (it makes the request and response objects and emits
 * "request"), so it is taken off and called only for the streams `first` leaves.
 */
function streamsFirst(server: http2.Http2Server | http2.Http2SecureServer, first: StreamHandler): void {
  const compat = server.listeners("stream") as ((...args: unknown[]) => void)[];
  server.removeAllListeners("stream");
  server.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, ...rest: unknown[]) => {
    if (first(stream, headers)) return;
    for (const listener of compat) listener.call(server, stream, headers, ...rest);
  });
}
