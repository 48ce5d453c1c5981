/**
 * `/mcp`: the MCP bridge over streamable HTTP, on the server's own port.
 *
 * Stateless: every POST is authenticated on its own (the session token or operator key in its
 * `authorization` header, checked by the server's own `authenticate`), gets a fresh MCP server bound
 * to its caller and workspace, and is answered on its own response: JSON, or an SSE stream when
 * the request is a tool call asking for progress. So no MCP session outlives a request, none can
 * be taken over by someone else's id, none holds memory for a client that left, and a revoked
 * token or ended session stops working at the next request. GET (a standing notification stream)
 * and DELETE (ending an MCP session) have nothing to serve and answer 405.
 *
 * The workspace: a session token is bound to its session's workspace; an operator names one with
 * `?workspace=ws-…` (on a server running open, every caller is an operator and names it the same
 * way). A session token that names another workspace is refused by the server (OUTSIDE_SESSION).
 *
 * Each tool call runs through an in-process Connect transport over the server's own routes and
 * interceptors, with the caller's headers: the same call, the same checks and the same audit span
 * as over gRPC. Bodies are bounded like every request's (the server's message limit).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { ErrorDetailSchema, ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";
import { DomainError, hasReason } from "../../core/errors.ts";
import type { Principal } from "../auth/principal.ts";
import { describeCause, toConnectError } from "../interceptors/error-interceptor.ts";
import type { Logger } from "../logger.ts";
import { messageTooLarge } from "../refused-bodies.ts";
import { createBridge } from "./bridge.ts";

/** The path the bridge is served on. */
export const MCP_PATH = "/mcp";

/** Request headers handed on to each tool call: who is calling, what traces the call, its id. */
const FORWARDED = ["authorization", "user-agent", "traceparent", "tracestate", "tool-call-id"];

/** Options of `createMcpHandler`. */
export interface McpHttpOptions {
  /** ToolService through the server's own routes and interceptors. */
  transport: Transport;
  /** The caller a request's headers establish; throws UNAUTHENTICATED for a bad credential. */
  authenticate(header: Headers): Principal;
  /** Registry tools the caller's agent type enables in the workspace ("" for a session's own); undefined: all. */
  enabledTools(principal: Principal, workspaceId: string): readonly string[] | undefined;
  /** Whether the server knows a workspace (an operator naming an unknown one is told at once). */
  workspaceExists(workspaceId: string): boolean;
  /** The largest request body accepted. */
  maxBodyBytes: number;
  logger: Logger;
}

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/** A JSON-RPC error answer of the HTTP layer (no request id: the request was not read, or not admitted). */
function sendRpcError(res: Res, status: number, error: ConnectError, extra: Record<string, string> = {}): void {
  const detail = error.findDetails(ErrorDetailSchema)[0];
  const body = JSON.stringify({
    jsonrpc: "2.0",
    error: { code: status === 401 ? -32001 : -32000, message: error.rawMessage, data: { reason: `ERROR_REASON_${ErrorReason[detail?.reason ?? ErrorReason.UNSPECIFIED]}`, metadata: detail?.metadata ?? {} } },
    id: null,
  });
  (res as ServerResponse).writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...extra });
  res.end(body);
}

/** The body, parsed; throws RESOURCE_EXHAUSTED past `max` bytes and INVALID_ARGUMENT for bad JSON. */
function readBody(req: Req, max: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > max) {
        req.off("data", onData);
        req.pause();
        // The rest is discarded as the answer goes out (refused-bodies.ts, answerAfterBody).
        reject(messageTooLarge(max));
        return;
      }
      chunks.push(c);
    };
    if (Number(req.headers["content-length"]) > max) return reject(messageTooLarge(max));
    req.on("data", onData);
    req.once("error", reject);
    req.once("end", () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")));
      } catch (err) {
        reject(new DomainError("INVALID_ARGUMENT", `The request body is not JSON: ${(err as Error).message}`, { metadata: { field: "body" } }));
      }
    });
  });
}

/** Whether a JSON-RPC body holds a tool call that asks for progress (its answer is then an SSE stream). */
function wantsProgress(body: unknown): boolean {
  const messages = Array.isArray(body) ? body : [body];
  return messages.some((m) => {
    const r = m as { method?: unknown; params?: { _meta?: { progressToken?: unknown } } } | null;
    return r?.method === "tools/call" && r.params?._meta?.progressToken !== undefined;
  });
}

/** The `/mcp` request handler. */
export function createMcpHandler(options: McpHttpOptions): (req: Req, res: Res) => void {
  const unauthorized = { "www-authenticate": 'Bearer realm="agent-workspace"' };
  return (req, res) => {
    void (async () => {
      try {
        if (req.method !== "POST") {
          sendRpcError(res, 405, toConnectError(new DomainError("INVALID_ARGUMENT", `${req.method} is not served on ${MCP_PATH}: this MCP server is stateless, send each message with POST`, {})), { allow: "POST" });
          return;
        }
        const header = new Headers();
        for (const name of FORWARDED) {
          const v = req.headers[name];
          if (typeof v === "string") header.set(name, v);
        }
        let principal: Principal;
        try {
          principal = options.authenticate(header);
        } catch (err) {
          // A session another server serves (servers sharing a database): not a bad credential,
          // but the wrong server; 503, with that server's URL in the error's metadata.
          if (hasReason(err, "WORKSPACE_SERVED_ELSEWHERE")) sendRpcError(res, 503, toConnectError(err));
          else sendRpcError(res, 401, toConnectError(err), unauthorized);
          return;
        }
        if (principal.kind === "anonymous") {
          sendRpcError(res, 401, toConnectError(new DomainError("UNAUTHENTICATED", "This server needs a credential: send 'authorization: Bearer <session token or API key>'", {})), unauthorized);
          return;
        }
        const requested = new URL(req.url ?? MCP_PATH, "http://localhost").searchParams.get("workspace") ?? "";
        if (principal.kind === "operator") {
          if (requested === "") {
            sendRpcError(res, 400, toConnectError(new DomainError("INVALID_ARGUMENT", `Name the workspace: ${MCP_PATH}?workspace=<workspace id> (a session token needs none)`, { metadata: { field: "workspace" } })));
            return;
          }
          if (!options.workspaceExists(requested)) {
            sendRpcError(res, 404, toConnectError(new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${requested.slice(0, 64)}' not found`, { metadata: { workspace_id: requested.slice(0, 64) } })));
            return;
          }
        }
        const body = await readBody(req, options.maxBodyBytes);
        const server = createBridge({
          caller: { transport: options.transport, header: () => new Headers(header) },
          workspaceId: requested,
          enabledTools: options.enabledTools(principal, requested),
          onUnexpected: (err) => options.logger.error("mcp tool call failed", { error: describeCause(err) }),
        });
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !wantsProgress(body) });
        res.once("close", () => {
          void transport.close();
          void server.close();
        });
        await server.connect(transport);
        await transport.handleRequest(req as IncomingMessage, res as ServerResponse, body);
      } catch (err) {
        const error = toConnectError(err);
        if (!(err instanceof ConnectError) && !(err instanceof DomainError)) options.logger.error("mcp request failed", { error: describeCause(err) });
        if (res.headersSent) {
          res.end();
          return;
        }
        sendRpcError(res, error.code === Code.ResourceExhausted ? 413 : error.code === Code.InvalidArgument ? 400 : 500, error);
      }
    })();
  };
}

/** Whether a request URL is the bridge's path (with or without a query). */
export function isMcpPath(url: string | undefined): boolean {
  return url === MCP_PATH || (url?.startsWith(`${MCP_PATH}?`) ?? false);
}
