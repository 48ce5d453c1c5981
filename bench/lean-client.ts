/**
 * A lean streaming client for section (c): node:http2 (or node:http for HTTP/1.1), envelope
 * parsing, and protobuf-es decoding of each message, with the HTTP/2 windows the README
 * recommends. It stands for the clients whose transport costs little per byte (grpc-go, gRPC
 * C-core, a Connect client in a compiled language), so the rate shows what the server delivers;
 * connect-node's own client, measured beside it, spends more CPU per message than the server.
 */
import http from "node:http";
import http2 from "node:http2";
import { create, fromBinary, fromJsonString, type MessageInitShape, toBinary, toJsonString } from "@bufbuild/protobuf";
import { StreamBashRequestSchema, type StreamBashResponse, StreamBashResponseSchema } from "../gen/agentworkspace/v1/tool_pb.js";

/** Windows of the lean client: 8 MiB per stream, 32 MiB per connection; DATA frames up to 1 MiB. */
export const LEAN_WINDOWS = { stream: 8 << 20, connection: 32 << 20, frame: 1 << 20 };

const PATH = "/agentworkspace.v1.ToolService/StreamBash";

function envelope(payload: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + payload.byteLength);
  out[0] = 0;
  out.writeUInt32BE(payload.byteLength, 1);
  out.set(payload, 5);
  return out;
}

/** Splits a byte stream into enveloped messages: (flags, payload) for each. */
class EnvelopeSplitter {
  #chunks: Buffer[] = [];
  #size = 0;

  push(chunk: Buffer, each: (flags: number, payload: Buffer) => void): void {
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    for (;;) {
      if (this.#size < 5) return;
      let head = this.#chunks[0];
      if (head.length < 5) head = this.#flatten();
      const length = head.readUInt32BE(1);
      if (this.#size < 5 + length) return;
      if (head.length < 5 + length) head = this.#flatten();
      each(head[0], head.subarray(5, 5 + length));
      const rest = head.subarray(5 + length);
      this.#chunks[0] = rest;
      this.#size -= 5 + length;
      if (rest.length === 0) this.#chunks.shift();
    }
  }

  #flatten(): Buffer {
    const all = Buffer.concat(this.#chunks, this.#size);
    this.#chunks = [all];
    return all;
  }
}

/**
 * A StreamBashResponse from its JSON, output bytes decoded by Node's native base64 (protobuf-es's
 * own decoder is JavaScript and would make this client the bottleneck); other events in full.
 */
function fromJsonLean(payload: Buffer): StreamBashResponse {
  const text = payload.toString("latin1");
  const output = /^\{"(stdout|stderr)":"([A-Za-z0-9+/=]*)"\}$/.exec(text);
  if (output) return create(StreamBashResponseSchema, { event: { case: output[1] as "stdout" | "stderr", value: Buffer.from(output[2], "base64") } });
  return fromJsonString(StreamBashResponseSchema, payload.toString("utf8"));
}

/** The protocol a lean call speaks. */
export type LeanProtocol = "grpc" | "connect-json-h2" | "connect-json-h1";

/** One StreamBash call; `onMessage` gets every decoded response. Resolves at the end of the stream, rejects on an error status. */
export async function leanStreamBash(baseUrl: string, protocol: LeanProtocol, request: MessageInitShape<typeof StreamBashRequestSchema>, onMessage: (m: StreamBashResponse) => void): Promise<void> {
  const message = create(StreamBashRequestSchema, request);
  const json = protocol !== "grpc";
  const body = envelope(json ? Buffer.from(toJsonString(StreamBashRequestSchema, message)) : toBinary(StreamBashRequestSchema, message));
  const splitter = new EnvelopeSplitter();
  let endError: string | undefined;
  const onEnvelope = (flags: number, payload: Buffer) => {
    if (json && (flags & 0b10) !== 0) {
      const end = JSON.parse(payload.toString("utf8")) as { error?: { code: string; message?: string } };
      if (end.error) endError = `${end.error.code}: ${end.error.message ?? ""}`;
      return;
    }
    onMessage(json ? fromJsonLean(payload) : fromBinary(StreamBashResponseSchema, payload));
  };
  const contentType = json ? "application/connect+json" : "application/grpc";
  if (protocol === "connect-json-h1") {
    await new Promise<void>((resolve, reject) => {
      const req = http.request(baseUrl + PATH, { method: "POST", agent: false, headers: { "content-type": contentType } }, (res) => {
        res.on("data", (chunk: Buffer) => splitter.push(chunk, onEnvelope));
        res.on("end", resolve);
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(body);
    });
  } else {
    const session = http2.connect(baseUrl, { settings: { initialWindowSize: LEAN_WINDOWS.stream, maxFrameSize: LEAN_WINDOWS.frame } });
    session.on("error", () => undefined);
    session.once("connect", () => session.setLocalWindowSize(LEAN_WINDOWS.connection));
    try {
      const status = await new Promise<string | undefined>((resolve, reject) => {
        const headers: http2.OutgoingHttpHeaders = { ":method": "POST", ":path": PATH, "content-type": contentType };
        if (!json) headers.te = "trailers";
        const stream = session.request(headers);
        let grpcStatus: string | undefined;
        stream.on("response", (h) => (grpcStatus ??= h["grpc-status"] as string | undefined));
        stream.on("trailers", (h) => (grpcStatus = h["grpc-status"] as string | undefined));
        stream.on("data", (chunk: Buffer) => splitter.push(chunk, onEnvelope));
        stream.on("close", () => resolve(grpcStatus));
        stream.on("error", reject);
        stream.end(body);
      });
      if (!json && status !== "0") endError = `grpc-status ${status}`;
    } finally {
      session.close();
    }
  }
  if (endError !== undefined) throw new Error(`StreamBash failed: ${endError}`);
}

/**
 * A lean unary client: Connect's JSON protocol (`POST /<service>/<method>`, `application/json`)
 * over one `node:http2` session, the way a hand-written harness (or a compiled client) calls the
 * server: the request's JSON written by the caller, the answer parsed with `JSON.parse`. It measures
 * the server and HTTP/2, not connect-node's client, which costs about a millisecond per call here.
 */
export class LeanUnary {
  readonly #session: http2.ClientHttp2Session;
  readonly #headers: Record<string, string>;

  private constructor(session: http2.ClientHttp2Session, headers: Record<string, string>) {
    this.#session = session;
    this.#headers = headers;
  }

  /** Opens the session (resolves once connected). `headers` go with every call (authorization). */
  static async connect(baseUrl: string, headers: Record<string, string> = {}): Promise<LeanUnary> {
    const session = http2.connect(baseUrl);
    session.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => {
      session.once("connect", () => resolve());
      session.once("error", reject);
    });
    return new LeanUnary(session, headers);
  }

  /** Calls `path` (`/agentworkspace.v1.ToolService/ReadFile`) with a JSON body; rejects on any status but 200. */
  call(path: string, body: string): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const stream = this.#session.request({ ":method": "POST", ":path": path, "content-type": "application/json", ...this.#headers });
      let status = 0;
      const chunks: Buffer[] = [];
      stream.on("response", (h) => (status = Number(h[":status"])));
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        if (status !== 200) reject(new Error(`${path}: HTTP ${status} ${text.slice(0, 300)}`));
        else resolve(JSON.parse(text));
      });
      stream.on("error", reject);
      stream.end(body);
    });
  }

  close(): void {
    this.#session.close();
  }
}
