/**
 * The Node request handler that serves the Connect router for gRPC, gRPC-Web and Connect (the
 * same job as connect-node's `connectNodeAdapter`), plus one guarantee that adapter cannot give:
 * errors raised by the protocol layer itself, before any interceptor runs (a malformed body, an
 * unknown or mistyped JSON field, a bad timeout header), carry an `agentworkspace.v1.ErrorDetail`
 * like every other error. For the Connect protocol's unary calls the detail is added to the JSON
 * error body; for gRPC to the `grpc-status-details-bin` trailer. (gRPC-Web and Connect streaming
 * carry their status inside the body stream and are left as the framework writes them.)
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse, ServerHttp2Stream } from "node:http2";
import { create, toBinary, toJson } from "@bufbuild/protobuf";
import type { DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ConnectRouterOptions,
  createConnectRouter,
  createServiceImplSpec,
  type MethodImplSpec,
} from "@connectrpc/connect";
import { createAsyncIterable, type UniversalHandler, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import { ErrorDetailSchema } from "../gen/agentworkspace/v1/errors_pb.js";
import type { DirectOptions } from "./direct/common.ts";
import { nodeExchange, rawExchange } from "./direct/exchange.ts";
import { serveServerStreaming, streamingProtocol } from "./direct/streaming.ts";
import { acceptsUnaryConnect, serveUnaryConnect } from "./direct/unary-connect.ts";
import { acceptsUnaryGrpc, serveUnaryGrpc } from "./direct/unary-grpc.ts";
import { logFailure, toConnectError } from "./interceptors/error-interceptor.ts";
import type { Logger } from "./logger.ts";
import { requestBody } from "./refused-bodies.ts";
import { type CallerCheck, createRestHandler, type RestRoute } from "./rest.ts";

/** A request handler for node:http and node:http2 servers alike. */
export type NodeHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void;

/** Options of `createNodeHandler`: the router's options plus its routes. */
export interface NodeHandlerOptions extends ConnectRouterOptions {
  routes: (router: ConnectRouter) => void;
  logger: Logger;
  /** REST paths (under /api/) served over the routes' unary RPCs. */
  rest?: RestRoute[];
  /** Refuses a REST caller before its body is read (authentication and the policy table). */
  restCallerCheck?: CallerCheck;
  /** Sees every served procedure ("/package.Service/Method") once the routes are registered; may throw to refuse them. */
  checkRoutes?: (procedures: string[]) => void;
}

/**
 * The error with an ErrorDetail (reason from its code, an unknown JSON field named), as every
 * error gets. A request body that does not parse is the caller's fault: the framework reports it
 * as INTERNAL (as grpc-go does); here it becomes INVALID_ARGUMENT.
 */
function withDetail(error: ConnectError): ConnectError {
  // Errors from handlers already carry their detail (the error interceptor gave it): keep it.
  if (error.findDetails(ErrorDetailSchema).length > 0) return error;
  const code = error.code === Code.Internal && error.rawMessage.startsWith("parse binary") ? Code.InvalidArgument : error.code;
  return toConnectError(new ConnectError(error.rawMessage, code));
}

/** Adds the ErrorDetail to a Connect unary JSON error body that lacks one. */
async function patchConnectUnaryError(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of res.body ?? []) chunks.push(chunk);
  const raw = Buffer.concat(chunks);
  let body: { code?: string; message?: string; details?: unknown[] };
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    return { ...res, body: (async function* () { yield raw; })() };
  }
  let status = res.status;
  if (body.details === undefined && typeof body.code === "string") {
    const code = Code[body.code.replace(/(^|_)([a-z])/g, (_m, _s, c: string) => c.toUpperCase()) as keyof typeof Code] as Code | undefined;
    if (code !== undefined) {
      const error = withDetail(new ConnectError(body.message ?? "", code));
      const detail = error.findDetails(ErrorDetailSchema)[0];
      body.code = Code[error.code].replace(/[A-Z]/g, (c, at: number) => (at === 0 ? "" : "_") + c.toLowerCase());
      body.details = [{ type: ErrorDetailSchema.typeName, value: Buffer.from(toBinary(ErrorDetailSchema, detail)).toString("base64").replace(/=+$/, ""), debug: toJson(ErrorDetailSchema, detail) }];
      if (error.code !== code) status = 400;
    }
  }
  const out = Buffer.from(JSON.stringify(body));
  const header = new Headers(res.header);
  header.set("content-length", String(out.byteLength));
  return { ...res, status, header, body: (async function* () { yield out; })() };
}

/** Adds the ErrorDetail to a gRPC status (in the trailer, or the headers of a trailers-only response). */
function patchGrpcStatus(headers: Headers | undefined): void {
  if (!headers || headers.has("grpc-status-details-bin")) return;
  const error = findTrailerError(headers);
  if (!error) return;
  headers.delete("grpc-status");
  headers.delete("grpc-message");
  setTrailerStatus(headers, withDetail(new ConnectError(error.rawMessage, error.code)));
}

/** Wraps a universal handler so that protocol-level errors get an ErrorDetail. */
function withProtocolErrorDetails(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]): Promise<UniversalServerResponse> => {
    const res = await handler(req);
    const contentType = res.header?.get("content-type") ?? "";
    if (res.status >= 400 && contentType.startsWith("application/json")) return patchConnectUnaryError(res);
    if (/^application\/grpc(\+|;|$)/.test(contentType)) {
      patchGrpcStatus(res.header);
      patchGrpcStatus(res.trailer);
    }
    return res;
  };
  return Object.assign(wrapped, handler);
}

/**
 * Serves an HTTP/2 stream straight from its session's `stream` event, before Node makes its
 * compatibility request and response for it; false leaves it to the request handler.
 */
export type StreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean;

/**
 * Builds the router and returns the Node request handler serving it, with `stream`: the unary
 * calls over HTTP/2 (gRPC and Connect) taken at the stream (direct/exchange.ts).
 */
export function createNodeHandler(options: NodeHandlerOptions): NodeHandler & { stream: StreamHandler } {
  const router = createConnectRouter(options);
  // Every service's implementation, by request path, for the direct unary gRPC path.
  const specs = new Map<string, MethodImplSpec>();
  const recording: ConnectRouter = Object.assign(Object.create(router) as ConnectRouter, {
    service(service: DescService, impl: object, serviceOptions?: object) {
      for (const spec of Object.values(createServiceImplSpec(service, impl as never).methods)) specs.set(`/${service.typeName}/${spec.method.name}`, spec);
      return router.service(service, impl as never, serviceOptions as never);
    },
  });
  options.routes(recording);
  const handlers = new Map<string, UniversalHandler>();
  for (const h of router.handlers) handlers.set(h.requestPath, withProtocolErrorDetails(h));
  options.checkRoutes?.([...handlers.keys()]);
  const rest = createRestHandler(options.rest ?? [], async (procedure, header, input, signal) => {
    const handler = handlers.get(procedure);
    if (!handler) throw new Error(`REST route names ${procedure}, which is not served`);
    header.set("content-type", "application/proto");
    header.set("connect-protocol-version", "1");
    const res = await handler({ httpVersion: "1.1", url: `http://localhost${procedure}`, method: "POST", header, body: createAsyncIterable([input]), signal });
    const chunks: Uint8Array[] = [];
    for await (const chunk of res.body ?? []) chunks.push(chunk);
    return { status: res.status, body: Buffer.concat(chunks) };
  }, options.restCallerCheck, (procedure, error, startedAt) => logFailure(options.logger, procedure, error, startedAt));
  const direct: DirectOptions = {
    interceptors: options.interceptors ?? [],
    readMaxBytes: options.readMaxBytes ?? 4 * 1024 * 1024,
    writeMaxBytes: options.writeMaxBytes ?? 4 * 1024 * 1024,
    maxTimeoutMs: options.maxTimeoutMs ?? Number.MAX_SAFE_INTEGER,
    shutdownSignal: options.shutdownSignal ?? new AbortController().signal,
    jsonOptions: options.jsonOptions ?? {},
    withDetail,
  };
  // The direct paths never compress: with compression on, every call stays on connect-node.
  const directPaths = (options.acceptCompression ?? []).length === 0;
  const stream: StreamHandler = (h2stream, headers) => {
    if (!directPaths) return false;
    const spec = specs.get(String(headers[":path"] ?? "").split("?", 1)[0]);
    if (spec?.kind !== "unary") return false;
    const method = String(headers[":method"]);
    if (acceptsUnaryGrpc(method, headers, spec)) {
      void serveUnaryGrpc(rawExchange(h2stream, headers), spec, direct);
      return true;
    }
    if (acceptsUnaryConnect(method, headers, spec)) {
      void serveUnaryConnect(rawExchange(h2stream, headers), spec, direct);
      return true;
    }
    return false;
  };
  const handler: NodeHandler = (req, res) => {
    const path = (req.url ?? "").split("?", 1)[0];
    if (path.startsWith("/api/") && rest(req, res, path)) return;
    const spec = specs.get(path);
    if (directPaths) {
      if (req.httpVersionMajor === 2 && acceptsUnaryGrpc(req.method, req.headers, spec)) {
        void serveUnaryGrpc(nodeExchange(req, res), spec, direct);
        return;
      }
      if (acceptsUnaryConnect(req.method, req.headers, spec)) {
        void serveUnaryConnect(nodeExchange(req, res), spec, direct);
        return;
      }
      const streaming = streamingProtocol(req, spec);
      if (streaming) {
        void serveServerStreaming(req, res, spec as MethodImplSpec & { kind: "server_streaming" }, streaming, direct);
        return;
      }
    }
    const handler = handlers.get(path);
    if (!handler) {
      (res as ServerResponse).writeHead(404);
      res.end();
      return;
    }
    // The body as refused-bodies.ts reads it: a call's one message bounded as a whole, refused
    // with a typed error every protocol carries (gRPC-Web's included) once the rest of the body
    // was discarded, and never a request destroyed under a client still sending it. Streams of
    // messages keep connect's per-message limit.
    const kind = handler.method.methodKind;
    const single = kind === "unary" || kind === "server_streaming";
    const contentType = String(req.headers["content-type"] ?? "");
    const enveloped = contentType.startsWith("application/grpc") || contentType.startsWith("application/connect+");
    const uReq = universalRequestFromNodeRequest(req, res, undefined, undefined);
    // connect refuses a Content-Length over its limit before reading any of the body (answering a
    // client that is still sending it): that check is left to requestBody, which reads it first.
    if (single && Number(req.headers["content-length"]) > direct.readMaxBytes) uReq.header.delete("content-length");
    handler({ ...uReq, body: requestBody(req, { maxMessage: direct.readMaxBytes, single, enveloped }) })
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((reason: unknown) => {
        // A client that went away mid-response; nothing is left to answer.
        if (ConnectError.from(reason).code === Code.Aborted) return;
        options.logger.error("request handler failed", { procedure: `${handler.service.typeName}/${handler.method.name}`, error: String(reason) });
      });
  };
  return Object.assign(handler, { stream });
}
