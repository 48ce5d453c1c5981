/**
 * Plain REST paths over RPCs. A route maps an HTTP method and path to one unary RPC: its path
 * parameters and JSON body become the request message, and the response message becomes the
 * JSON answer, with the proto field names (`repo_source`, `setup_commands`) and every field
 * written out. The call itself goes through the RPC's own handler with its interceptors
 * (authentication, permissions, errors), so a REST caller meets exactly the validation, the
 * status codes and the refusals of a Connect caller. Errors answer with the HTTP status of their
 * code and a JSON body: `{code, message, reason, metadata}`.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import {
  type DescMethodUnary,
  type DescMessage,
  type JsonValue,
  type MessageInitShape,
  type MessageShape,
  create,
  fromBinary,
  toBinary,
  toJson,
} from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, codeToString, errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { DomainError } from "../core/errors.ts";
import { toConnectError } from "./interceptors/error-interceptor.ts";
import { discardRest } from "./refused-bodies.ts";

/** One REST route over a unary RPC. */
export interface RestRoute<I extends DescMessage = DescMessage, O extends DescMessage = DescMessage> {
  method: "GET" | "PUT" | "POST" | "DELETE";
  /** A path with `{name}` parameters, e.g. "/api/v1/agent-types/{id}/workspace-config". */
  path: string;
  rpc: DescMethodUnary<I, O>;
  /** The request message from the path parameters and the parsed body (undefined without one). */
  request(params: Record<string, string>, body: JsonValue | undefined): MessageInitShape<I>;
  /** The JSON answer from the response message. */
  response(res: MessageShape<O>): JsonValue;
}

/** Declares a route with its types checked against the RPC. */
export function restRoute<I extends DescMessage, O extends DescMessage>(route: RestRoute<I, O>): RestRoute {
  return route as unknown as RestRoute;
}

/** Calls an RPC's handler with a binary request; resolves to the raw Connect unary response. */
export type RpcInvoker = (
  procedure: string,
  header: Headers,
  input: Uint8Array,
  signal: AbortSignal,
) => Promise<{ status: number; body: Uint8Array }>;

/** Options for the JSON of REST answers: the API's own field names, every field present. */
export const REST_JSON = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

/** Request headers handed on to the RPC: who is calling and what traces the call. */
const FORWARDED = ["authorization", "user-agent", "traceparent", "tracestate"];
const MAX_BODY = 1024 * 1024;

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

function send(res: Res, status: number, body: JsonValue, extra: Record<string, string> = {}): void {
  const out = Buffer.from(`${JSON.stringify(body, null, 2)}\n`);
  (res as ServerResponse).writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": String(out.length), ...extra });
  res.end(out);
}

/** The REST error body of a ConnectError carrying an ErrorDetail. */
export function errorBody(error: ConnectError): JsonValue {
  const detail = error.findDetails(ErrorDetailSchema)[0];
  return {
    code: codeToString(error.code),
    message: error.rawMessage,
    reason: `ERROR_REASON_${ErrorReason[detail?.reason ?? ErrorReason.UNSPECIFIED]}`,
    metadata: detail?.metadata ?? {},
  };
}

export function sendError(res: Res, error: ConnectError): void {
  send(res, codeToHttpStatus(error.code), errorBody(error));
}

function readJson(req: Req): Promise<JsonValue | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        req.removeAllListeners("data");
        req.pause();
        reject(new DomainError("RESOURCE_EXHAUSTED", `The request body is larger than ${MAX_BODY} bytes`));
        return;
      }
      chunks.push(c);
    });
    req.once("error", reject);
    req.once("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      if (text.trim() === "") return resolve(undefined);
      try {
        resolve(JSON.parse(text) as JsonValue);
      } catch (err) {
        reject(new DomainError("INVALID_ARGUMENT", `The request body is not JSON: ${(err as Error).message}`, { metadata: { field: "body" } }));
      }
    });
  });
}

/** Matches `path` against a route pattern, returning its parameters. */
function match(pattern: string, path: string): Record<string, string> | undefined {
  const want = pattern.split("/");
  const got = path.split("/");
  if (want.length !== got.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const m = /^\{(\w+)\}$/.exec(want[i]);
    if (m) {
      let value: string;
      try {
        value = decodeURIComponent(got[i]);
      } catch {
        return undefined;
      }
      if (value === "") return undefined;
      params[m[1]] = value;
    } else if (want[i] !== got[i]) {
      return undefined;
    }
  }
  return params;
}

/** The part of a body parse error worth showing: which field, if the message names one. */
function bodyError(err: unknown): DomainError {
  if (err instanceof DomainError) return err;
  const message = (err as Error).message;
  // protobuf-es names an unknown key, or a field by its full name (agentworkspace.v1.WorkspaceConfig.tools).
  const field = /key "([^"]{1,100})" is unknown/.exec(message)?.[1] ?? /field (?:\w+\.)*(\w+) from JSON/.exec(message)?.[1];
  return new DomainError("INVALID_ARGUMENT", `The request body does not fit: ${message.replace(/^cannot decode message [\w.]+ from JSON: /, "")}`, {
    metadata: field === undefined ? { field: "body" } : { field },
  });
}

/**
 * Decides, from the headers alone, whether the caller may make the call at all; throws the
 * refusal. It lets a REST call be refused before its body is read or parsed (the RPC's own
 * interceptors then decide again, in full).
 */
export type CallerCheck = (header: Headers, procedure: string) => void;

/** A handler for the REST paths; resolves to false for a path no route has. */
export function createRestHandler(
  routes: RestRoute[],
  invoke: RpcInvoker,
  checkCaller: CallerCheck = () => undefined,
  /** Hears of calls refused here, before the RPC ran (its own interceptors log the rest). */
  onRefused: (procedure: string, error: ConnectError, startedAt: number) => void = () => undefined,
): (req: Req, res: Res, path: string) => boolean {
  return (req, res, path) => {
    const matching = routes.map((r) => ({ r, params: match(r.path, path) })).filter((m) => m.params !== undefined);
    if (matching.length === 0) return false;
    const found = matching.find((m) => m.r.method === req.method);
    if (!found) {
      const allow = matching.map((m) => m.r.method).join(", ");
      send(res, 405, { code: "unimplemented", message: `${req.method} is not allowed on ${path}; use ${allow}`, reason: "ERROR_REASON_INVALID_ARGUMENT", metadata: {} }, { allow });
      return true;
    }
    const { r: route, params } = found as { r: RestRoute; params: Record<string, string> };
    const controller = new AbortController();
    res.once("close", () => controller.abort());
    const startedAt = performance.now();
    const procedure = `/${route.rpc.parent.typeName}/${route.rpc.name}`;
    void (async () => {
      try {
        const header = new Headers();
        for (const name of FORWARDED) {
          const v = req.headers[name];
          if (typeof v === "string") header.set(name, v);
        }
        checkCaller(header, procedure);
        const body = route.method === "GET" || route.method === "DELETE" ? undefined : await readJson(req);
        let input: Uint8Array;
        try {
          input = toBinary(route.rpc.input, create(route.rpc.input, route.request(params, body)));
        } catch (err) {
          throw bodyError(err);
        }
        const out = await invoke(procedure, header, input, controller.signal);
        if (out.status !== 200) {
          send(res, out.status, errorBody(errorFromJsonBytes(out.body, undefined, new ConnectError("The call failed", Code.Internal))));
          return;
        }
        send(res, 200, route.response(fromBinary(route.rpc.output, out.body)));
      } catch (err) {
        const error = toConnectError(err);
        onRefused(procedure.slice(1), error, startedAt);
        // A body refused unread (a caller refused, one over the limit) is discarded before the
        // answer, so a client still sending it reads that answer (refused-bodies.ts).
        await discardRest(req);
        if (!res.headersSent) sendError(res, error);
        else res.end();
      }
    })();
    return true;
  };
}

/** A message as REST JSON. */
export function restJson<D extends DescMessage>(schema: D, message: MessageShape<D>): JsonValue {
  return toJson(schema, message, REST_JSON);
}
