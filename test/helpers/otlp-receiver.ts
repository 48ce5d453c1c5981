/**
 * Test fixture: a real OTLP trace endpoint, over HTTP/protobuf (POST /v1/traces, plain or HTTPS) or gRPC (h2c,
 * `opentelemetry.proto.collector.trace.v1.TraceService/Export`), that decodes every export
 * request's protobuf and keeps the spans. The decoder reads the wire format with protobuf-es's
 * BinaryReader, field numbers from opentelemetry-proto's trace.proto and common.proto.
 */
import http from "node:http";
import http2 from "node:http2";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** An attribute value as OTLP carries it. */
export type OtlpValue = string | number | boolean | bigint | OtlpValue[] | undefined;

/** A received span. */
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, OtlpValue>;
  statusCode: number;
  statusMessage: string;
  /** The resource's attributes (service.name, …). */
  resource: Record<string, OtlpValue>;
}

/** Calls `field` for each field of the message in `bytes`. */
function fields(bytes: Uint8Array, field: (no: number, r: BinaryReader, wire: WireType) => boolean): void {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wire] = r.tag();
    if (!field(no, r, wire)) r.skip(wire);
  }
}

function anyValue(bytes: Uint8Array): OtlpValue {
  let v: OtlpValue;
  fields(bytes, (no, r) => {
    if (no === 1) v = r.string();
    else if (no === 2) v = r.bool();
    else if (no === 3) v = r.int64();
    else if (no === 4) v = r.double();
    else if (no === 5) {
      const items: OtlpValue[] = [];
      fields(r.bytes(), (n, rr) => (n === 1 ? (items.push(anyValue(rr.bytes())), true) : false));
      v = items;
    } else return false;
    return true;
  });
  return typeof v === "bigint" && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

function keyValue(bytes: Uint8Array, into: Record<string, OtlpValue>): void {
  let key = "";
  let value: OtlpValue;
  fields(bytes, (no, r) => {
    if (no === 1) key = r.string();
    else if (no === 2) value = anyValue(r.bytes());
    else return false;
    return true;
  });
  into[key] = value;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

function span(bytes: Uint8Array, resource: Record<string, OtlpValue>): OtlpSpan {
  const s: OtlpSpan = { traceId: "", spanId: "", parentSpanId: "", name: "", kind: 0, attributes: {}, statusCode: 0, statusMessage: "", resource };
  fields(bytes, (no, r) => {
    if (no === 1) s.traceId = hex(r.bytes());
    else if (no === 2) s.spanId = hex(r.bytes());
    else if (no === 4) s.parentSpanId = hex(r.bytes());
    else if (no === 5) s.name = r.string();
    else if (no === 6) s.kind = r.int32();
    else if (no === 9) keyValue(r.bytes(), s.attributes);
    else if (no === 15) {
      fields(r.bytes(), (n, rr) => {
        if (n === 2) s.statusMessage = rr.string();
        else if (n === 3) s.statusCode = rr.int32();
        else return false;
        return true;
      });
    } else return false;
    return true;
  });
  return s;
}

/** The spans of an ExportTraceServiceRequest. */
export function decodeExportRequest(bytes: Uint8Array): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  fields(bytes, (no, r) => {
    if (no !== 1) return false;
    const resourceSpans = r.bytes();
    const resource: Record<string, OtlpValue> = {};
    fields(resourceSpans, (n, rr) => {
      if (n === 1) fields(rr.bytes(), (k, rrr) => (k === 1 ? (keyValue(rrr.bytes(), resource), true) : false));
      else if (n === 2) fields(rr.bytes(), (k, rrr) => (k === 2 ? (out.push(span(rrr.bytes(), resource)), true) : false));
      else return false;
      return true;
    });
    return true;
  });
  return out;
}

/** A running endpoint. */
export interface OtlpReceiver {
  /** What OTEL_EXPORTER_OTLP_ENDPOINT should be. */
  endpoint: string;
  spans: OtlpSpan[];
  /** Export requests received: their headers (the configured ones must arrive), and how many spans each carried. */
  requests: Array<{ headers: Record<string, string | string[] | undefined>; spans?: number }>;
  close(): Promise<void>;
}

/** HTTPS for the HTTP receiver: its certificate and key (PEM), and the CA client certificates must chain to (then required). */
export interface ReceiverTls {
  cert: string;
  key: string;
  clientCa?: string;
}

/**
 * Starts an OTLP/HTTP (protobuf) endpoint on 127.0.0.1, on `port` or any free one; over HTTPS
 * with `tls` (requiring a client certificate when it names a client CA). Gzipped bodies
 * (`content-encoding: gzip`) are inflated.
 */
export async function startOtlpHttpReceiver(port = 0, tls?: ReceiverTls): Promise<OtlpReceiver> {
  const spans: OtlpSpan[] = [];
  const requests: OtlpReceiver["requests"] = [];
  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces" || req.headers["content-type"] !== "application/x-protobuf") {
        res.writeHead(404).end();
        return;
      }
      const body = Buffer.concat(chunks);
      const received = decodeExportRequest(req.headers["content-encoding"] === "gzip" ? gunzipSync(body) : body);
      requests.push({ headers: req.headers, spans: received.length });
      spans.push(...received);
      // An empty ExportTraceServiceResponse: everything accepted.
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  };
  const server = tls
    ? https.createServer({ cert: tls.cert, key: tls.key, ...(tls.clientCa ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: true } : {}) }, handler)
    : http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return {
    endpoint: `${tls ? "https" : "http"}://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    requests,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/** Starts an OTLP/gRPC endpoint (HTTP/2 without TLS) on 127.0.0.1. */
export async function startOtlpGrpcReceiver(): Promise<OtlpReceiver> {
  const spans: OtlpSpan[] = [];
  const requests: OtlpReceiver["requests"] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  const server = http2.createServer();
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  server.on("stream", (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => {
      if (headers[":path"] !== "/opentelemetry.proto.collector.trace.v1.TraceService/Export") {
        stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
        return;
      }
      requests.push({ headers });
      const body = Buffer.concat(chunks);
      // One length-prefixed message: a flag byte, four bytes of length, the message.
      spans.push(...decodeExportRequest(body.subarray(5, 5 + body.readUInt32BE(1))));
      stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(Buffer.from([0, 0, 0, 0, 0]));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    requests,
    close: () => new Promise((resolve) => {
      for (const s of sessions) s.destroy();
      server.close(() => resolve());
    }),
  };
}
