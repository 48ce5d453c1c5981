/**
 * The port proxy: `/ports/{workspace}/{port}/…` on the server's one port reaches a server the
 * workspace runs on its own loopback (an exposed port, see exposures.ts), for HTTP requests and
 * WebSocket upgrades. Nothing is opened on the host: each request is a connection the provider
 * makes from inside the sandbox (`WorkspaceHandle.dial`, over the executor's channel).
 *
 * Who may: the caller authenticates as for any call (`authorization: Bearer` with an operator
 * key or the session token; `x-agent-workspace-authorization` instead, when the application
 * behind the port wants an `authorization` header of its own), passes the policy of ExposePort,
 * and is admitted to the workspace with the `bash` tool: a session token reaches its own
 * session's workspace only, and an agent type without `bash` reaches none. The credential the
 * proxy used never reaches the sandbox. A request through the proxy counts as activity of the
 * workspace (its idle time) and wakes a paused one, as a tool call does.
 *
 * The application sees `Host: localhost:{port}`, the path below the prefix, and the usual
 * X-Forwarded-For/-Proto/-Host/-Prefix headers. Every proxy connection is counted on its exposure
 * and closed when the port is unexposed or the workspace goes.
 */
import http, { type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Duplex } from "node:stream";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { DomainError } from "../../core/errors.ts";
import type { Principal } from "../auth/principal.ts";
import { toConnectError } from "../interceptors/error-interceptor.ts";
import type { Admission } from "../interceptors/permission-interceptor.ts";
import type { Logger } from "../logger.ts";
import { errorBody, sendError } from "../rest.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";
import type { PortExposures } from "./exposures.ts";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/** `/ports/{workspace}/{port}` and what follows. */
const PORT_PATH = /^\/ports\/([A-Za-z0-9_.-]{1,128})\/(\d{1,5})(\/[^#]*|\?[^#]*)?$/;
/** The header a caller may authenticate with instead of `authorization`. */
const PROXY_AUTH = "x-agent-workspace-authorization";
/** Headers of one hop only (RFC 9110 7.6.1), never passed on, either way. */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "http2-settings"]);

/** The procedure whose policy entry decides who may use the proxy: whoever may expose a port. */
export const PORT_PROXY_PROCEDURE = "/agentworkspace.v1.ProcessService/ExposePort";

/** Whether the proxy serves `url`. */
export const isPortsPath = (url: string | undefined) => url !== undefined && (url === "/ports" || url.startsWith("/ports/"));

export interface PortProxyDeps {
  /** The caller of a request with these headers (UNAUTHENTICATED for a bad credential). */
  authenticate(header: Headers): Principal;
  /** Throws unless the principal may use the proxy (ExposePort's policy). */
  checkCaller(principal: Principal): void;
  /** Admits the principal to the workspace with the `bash` tool, as for a tool call. */
  admit(principal: Principal, workspaceId: string, signal: AbortSignal): Promise<Admission>;
  /** Whether the workspace exists (WORKSPACE_NOT_FOUND otherwise). */
  exists(workspaceId: string): boolean;
  /** The workspace's handle, woken when paused. */
  handleFor(workspaceId: string): Promise<WorkspaceHandle>;
  exposures: PortExposures;
  logger: Logger;
}

interface Target {
  workspaceId: string;
  port: number;
  /** The path and query the application gets. */
  path: string;
  prefix: string;
}

/** Where a request goes; undefined for a path that needs its trailing slash first. */
function targetOf(url: string): Target | undefined | "redirect" {
  const m = PORT_PATH.exec(url);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  const rest = m[3] ?? "";
  if (!rest.startsWith("/")) return "redirect";
  return { workspaceId: m[1], port, path: rest, prefix: `/ports/${m[1]}/${m[2]}` };
}

/** The request's headers as `Headers`, for authentication: the proxy's own credential header first. */
function credentialHeaders(headers: IncomingHttpHeaders): { header: Headers; used: string } {
  const header = new Headers();
  const own = headers[PROXY_AUTH];
  const used = typeof own === "string" ? PROXY_AUTH : "authorization";
  const value = headers[used];
  if (typeof value === "string") header.set("authorization", value);
  return { header, used };
}

/** The headers the application gets. */
function forwardedHeaders(req: Req, target: Target, used: string, upgrade: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const connectionTokens = new Set(String(req.headers.connection ?? "").toLowerCase().split(",").map((t) => t.trim()).filter((t) => t !== ""));
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || name.startsWith(":") || name === used || name === PROXY_AUTH || name === "host") continue;
    if (HOP_BY_HOP.has(name) || connectionTokens.has(name)) continue;
    out[name] = value;
  }
  const originalHost = req.headers[":authority"] ?? req.headers.host;
  const remote = req.socket?.remoteAddress;
  const priorFor = req.headers["x-forwarded-for"];
  out.host = `localhost:${target.port}`;
  if (remote) out["x-forwarded-for"] = typeof priorFor === "string" && priorFor !== "" ? `${priorFor}, ${remote}` : remote;
  out["x-forwarded-proto"] = (req.socket as { encrypted?: boolean } | undefined)?.encrypted ? "https" : "http";
  if (typeof originalHost === "string") out["x-forwarded-host"] = originalHost;
  out["x-forwarded-prefix"] = target.prefix;
  if (upgrade) {
    out.connection = "Upgrade";
    out.upgrade = String(req.headers.upgrade ?? "");
  } else {
    out.connection = "close";
  }
  return out;
}

/**
 * A page the workspace serves is served on the server's own origin, where the web UI keeps its
 * credential: its documents are sandboxed into an origin of their own (scripts, forms and popups
 * still work; the server's origin's storage and cookies are out of their reach).
 */
const SANDBOX_CSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/** The response headers the caller gets. */
function responseHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const connectionTokens = new Set(String(headers.connection ?? "").toLowerCase().split(",").map((t) => t.trim()).filter((t) => t !== ""));
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || connectionTokens.has(name)) continue;
    out[name] = value;
  }
  // The application's own policy still applies: every policy a response carries is enforced.
  const csp = out as Record<string, number | string | string[] | undefined>;
  const own = csp["content-security-policy"];
  csp["content-security-policy"] = own === undefined ? SANDBOX_CSP : [...(Array.isArray(own) ? own.map(String) : [String(own)]), SANDBOX_CSP];
  return out;
}

export function createPortProxy(deps: PortProxyDeps) {
  /** Authenticates, admits and connects; the caller must call `done` when the exchange ends. */
  async function open(req: Req, target: Target, signal: AbortSignal): Promise<{ stream: Duplex; used: string; done: () => void }> {
    const { header, used } = credentialHeaders(req.headers);
    const principal = deps.authenticate(header);
    deps.checkCaller(principal);
    if (!deps.exists(target.workspaceId) && principal.kind !== "session") {
      throw new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${target.workspaceId}' does not exist`, { metadata: { workspace_id: target.workspaceId.slice(0, 64) } });
    }
    const admission = await deps.admit(principal, target.workspaceId, signal);
    try {
      const exposure = deps.exposures.get(admission.workspaceId, target.port);
      const handle = await deps.handleFor(admission.workspaceId);
      if (!handle.dial) throw new DomainError("PROCESSES_UNSUPPORTED", "This workspace's provider runs no processes, so nothing listens on its ports");
      const stream = await handle.dial(target.port, signal);
      const untrack = deps.exposures.track(exposure, stream);
      let ended = false;
      return {
        stream,
        used,
        done: () => {
          if (ended) return;
          ended = true;
          untrack();
          admission.done();
          stream.destroy();
        },
      };
    } catch (err) {
      admission.done();
      throw err;
    }
  }

  /** An HTTP request under /ports/. */
  function request(req: Req, res: Res): void {
    const target = targetOf(req.url ?? "");
    if (target === "redirect") {
      const url = req.url ?? "";
      const q = url.indexOf("?");
      const location = q < 0 ? `${url}/` : `${url.slice(0, q)}/${url.slice(q)}`;
      (res as ServerResponse).writeHead(308, { location, "content-length": "0" });
      res.end();
      return;
    }
    if (target === undefined) {
      sendError(res, toConnectError(new DomainError("INVALID_ARGUMENT", "The port proxy serves /ports/{workspace_id}/{port}/ with a port from 1 to 65535", { metadata: { path: (req.url ?? "").slice(0, 200) } })));
      return;
    }
    const controller = new AbortController();
    res.once("close", () => controller.abort());
    void (async () => {
      let exchange: Awaited<ReturnType<typeof open>>;
      try {
        exchange = await open(req, target, controller.signal);
      } catch (err) {
        if (!res.headersSent) sendError(res, toConnectError(err));
        else res.end();
        req.resume();
        return;
      }
      const { stream, used, done } = exchange;
      if (res.destroyed) return done();
      res.once("close", done);
      const upstream = http.request({
        method: req.method,
        path: target.path,
        headers: forwardedHeaders(req, target, used, false),
        createConnection: () => stream as never,
      });
      upstream.on("response", (answer) => {
        if (res.destroyed) return void answer.destroy();
        (res as ServerResponse).writeHead(answer.statusCode ?? 502, responseHeaders(answer.headers));
        answer.pipe(res as ServerResponse);
        answer.once("error", () => res.destroy());
      });
      upstream.on("error", (err) => {
        if (res.destroyed) return done();
        deps.logger.info("port proxy: the application's connection failed", { workspace_id: target.workspaceId, port: target.port, error: err.message.slice(0, 200) });
        if (!res.headersSent) {
          sendError(res, toConnectError(new DomainError("PORT_NOT_LISTENING", `The application on port ${target.port} closed the connection without an answer`, { metadata: { port: String(target.port) } })));
        } else {
          res.destroy();
        }
        done();
      });
      req.pipe(upstream);
    })();
  }

  /** A WebSocket (or other) upgrade under /ports/ (HTTP/1.1): the raw bytes pass both ways once admitted. */
  function upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => undefined);
    const target = targetOf(req.url ?? "");
    if (target === undefined || target === "redirect") {
      refuseUpgrade(socket, new DomainError("INVALID_ARGUMENT", "Upgrades are served under /ports/{workspace_id}/{port}/ only", { metadata: { path: (req.url ?? "").slice(0, 200) } }));
      return;
    }
    const controller = new AbortController();
    socket.once("close", () => controller.abort());
    void (async () => {
      let exchange: Awaited<ReturnType<typeof open>>;
      try {
        exchange = await open(req, target, controller.signal);
      } catch (err) {
        refuseUpgrade(socket, err);
        return;
      }
      const { stream, used, done } = exchange;
      socket.once("close", done);
      stream.once("close", () => socket.destroy());
      const lines = [`${req.method ?? "GET"} ${target.path} HTTP/1.1`];
      for (const [name, value] of Object.entries(forwardedHeaders(req, target, used, true))) {
        for (const v of Array.isArray(value) ? value : [value]) if (v !== undefined) lines.push(`${name}: ${String(v).replace(/[\r\n]/g, "")}`);
      }
      stream.write(`${lines.join("\r\n")}\r\n\r\n`);
      if (head.length > 0) stream.write(head);
      stream.pipe(socket);
      socket.pipe(stream);
    })();
  }

  /** Answers a refused upgrade with the error as JSON, then closes. */
  function refuseUpgrade(socket: Duplex, err: unknown): void {
    const error = toConnectError(err);
    const body = Buffer.from(`${JSON.stringify(errorBody(error), null, 2)}\n`);
    const status = codeToHttpStatus(error.code);
    socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body.toString("utf8")}`);
  }

  return { request, upgrade };
}
