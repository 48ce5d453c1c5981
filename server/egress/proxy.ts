/**
 * The server's HTTP forward proxy for workspace egress (issue 16): CONNECT for TLS (a byte tunnel,
 * no interception) and absolute-form requests for plain HTTP. Every destination is checked against
 * the workspace's EgressPolicy twice: the name and port the client asked for, then the address the
 * proxy resolved and will connect to, which is the address it then connects to (no second lookup,
 * so no DNS-rebinding window). A client following a redirect makes a new request, checked again.
 *
 * Connections come in as plain duplex streams with their workspace (`accept`): from the executor's
 * tunnel out of a sandbox, or a socket in tests. A refusal answers 403 with one line naming the
 * destination and the rule, which npm, git and curl show to the agent, and is logged.
 *
 * A connection accepted with a credential (the local provider's endpoint, a host port any user of
 * the host can reach) must present it on every request as `Proxy-Authorization: Basic`, compared
 * in constant time; otherwise it gets 407 and reaches nothing, and it holds no connection of the
 * workspace's budget until it has presented it once. The credential is never logged, never
 * echoed, and never forwarded (Proxy-Authorization is a hop-by-hop header).
 *
 * Bounds per workspace: connections at once, an idle timeout on both sides of every connection,
 * and bytes per workspace in both directions; past one, the connection closes with a logged
 * reason. Nothing here blocks: a stalled destination holds only its own connection.
 */
import { timingSafeEqual } from "node:crypto";
import { lookup as dnsLookup } from "node:dns/promises";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, isIP, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ProxyCredential } from "../../providers/types.ts";
import type { Logger } from "../logger.ts";
import type { EgressPolicy, Refusal } from "./destinations.ts";

/** Resolves a host name to its addresses (the proxy's own DNS; tests may map names). */
export type Lookup = (host: string) => Promise<Array<{ address: string; family: number }>>;

export interface EgressLimits {
  /** Connections one workspace may hold at once. */
  maxConnections: number;
  /** A connection with no bytes either way for this long is closed. */
  idleTimeoutMs: number;
  /** Bytes one workspace may move (both directions, all connections) before its connections close. */
  maxBytes: number;
}

/** One workspace's egress: its policy, and what it has used. */
export interface EgressWorkspace {
  workspaceId: string;
  policy: EgressPolicy;
  /** Open connections and bytes moved so far (kept by the proxy). */
  usage: { connections: number; bytes: number };
}

/** The buffer a tunnel reads its destination into. */
const TUNNEL_READ_BYTES = 256 * 1024;

const HOP_BY_HOP = ["connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection", "te", "trailer", "upgrade"];

/** `host:port` of a CONNECT target or a URL, with IPv6 in brackets; undefined when malformed. */
export function splitHostPort(target: string): { host: string; port: number } | undefined {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(target) ?? /^([^:\[\]\s/]+):(\d{1,5})$/.exec(target);
  if (!m) return undefined;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { host: m[1].toLowerCase(), port } : undefined;
}

/** A Host header's value as the URL parser writes a host (default port dropped); "" when malformed. */
function canonicalHost(value: string): string {
  try {
    const u = new URL(`http://${value}`);
    return u.pathname === "/" && u.username === "" && u.search === "" ? u.host : "";
  } catch {
    return "";
  }
}

/** A refusal before any destination is looked at: its status, its one line, its extra headers. */
interface ProxyRefusal {
  status: number;
  line: string;
  headers: Record<string, string>;
}

/** The realm a 407 names. */
const REALM = "agent-workspace egress";

export class EgressProxy {
  readonly #server = createServer();
  readonly #workspaces = new WeakMap<Duplex, EgressWorkspace>();
  /** `username:password` each credential-bound connection must present; absent once admitted without one. */
  readonly #credentials = new WeakMap<Duplex, Buffer>();
  /** Connections counted against their workspace's budget. */
  readonly #admitted = new WeakSet<Duplex>();
  readonly #limits: EgressLimits;
  readonly #logger: Logger;
  readonly #lookup: Lookup;

  readonly #onRefused: ((refusal: { workspaceId: string; host: string; port: number; reason: string; message: string }) => void) | undefined;

  constructor(options: {
    limits: EgressLimits;
    logger: Logger;
    lookup?: Lookup;
    /** Told of every refusal (the audit trail). */
    onRefused?: (refusal: { workspaceId: string; host: string; port: number; reason: string; message: string }) => void;
  }) {
    this.#limits = options.limits;
    this.#logger = options.logger;
    this.#onRefused = options.onRefused;
    this.#lookup = options.lookup ?? ((host) => dnsLookup(host, { all: true, verbatim: true }));
    // Requests and tunnels are the proxy's alone: no keep-alive reuse across destinations.
    this.#server.keepAliveTimeout = 0;
    this.#server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.#tunnel(req, socket, head));
    this.#server.on("request", (req: IncomingMessage, res: ServerResponse) => void this.#forward(req, res));
    this.#server.on("clientError", (_err, socket: Duplex) => this.#refuse(socket, 400, "malformed proxy request"));
  }

  /**
   * Serves one client connection of `workspace` (a sandbox's tunnelled connection, a socket);
   * with `credential`, only requests that present it (see the module comment).
   */
  accept(stream: Duplex, workspace: EgressWorkspace, credential?: ProxyCredential): void {
    stream.on("error", () => undefined);
    this.#workspaces.set(stream, workspace);
    if (credential) {
      this.#credentials.set(stream, Buffer.from(`${credential.username}:${credential.password}`));
    } else {
      const refusal = this.#admit(stream, workspace);
      if (refusal) return this.#refuse(stream, refusal.status, refusal.line);
    }
    this.#server.emit("connection", stream);
  }

  /** Counts `stream` against its workspace's connections, or says why not (past the limit). */
  #admit(stream: Duplex, workspace: EgressWorkspace): ProxyRefusal | undefined {
    if (this.#admitted.has(stream)) return undefined;
    if (workspace.usage.connections >= this.#limits.maxConnections) {
      this.#log(workspace, "", 0, { reason: "too_many_connections", message: `more than ${this.#limits.maxConnections} connections at once` });
      return { status: 503, line: `agent-workspace egress: this workspace already holds ${this.#limits.maxConnections} connections`, headers: {} };
    }
    this.#admitted.add(stream);
    workspace.usage.connections++;
    stream.once("close", () => workspace.usage.connections--);
    return undefined;
  }

  /**
   * Why the request may not go on, or undefined: its connection needs no credential, or the
   * request carries it (and the connection is then admitted to its workspace's budget). A missing
   * or wrong credential is logged without any header's value.
   */
  #authorize(req: IncomingMessage, ws: EgressWorkspace): ProxyRefusal | undefined {
    const expected = this.#credentials.get(req.socket);
    if (expected !== undefined) {
      const m = /^basic[ \t]+([A-Za-z0-9+/]{1,1024}={0,2})[ \t]*$/i.exec(String(req.headers["proxy-authorization"] ?? ""));
      const given = m ? Buffer.from(m[1], "base64") : Buffer.alloc(0);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        this.#logger.warn("egress refused", { workspace_id: ws.workspaceId, reason: "proxy_auth", detail: m ? "wrong proxy credentials" : "no proxy credentials" });
        return {
          status: 407,
          line: "agent-workspace egress: this proxy needs the workspace's credentials, which its commands have in HTTP_PROXY and HTTPS_PROXY",
          headers: { "proxy-authenticate": `Basic realm="${REALM}"` },
        };
      }
    }
    return this.#admit(req.socket, ws);
  }

  #refuse(stream: Duplex, status: number, line: string, headers: Record<string, string> = {}): void {
    if (stream.destroyed) return;
    const body = `${line}\n`;
    const reason = status === 403 ? "Forbidden" : status === 407 ? "Proxy Authentication Required" : status === 503 ? "Service Unavailable" : status === 502 ? "Bad Gateway" : "Bad Request";
    const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("");
    // Closed once the answer is out, whether or not the client ever closes its side.
    stream.once("finish", () => stream.destroy());
    stream.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`);
  }

  #log(ws: EgressWorkspace, host: string, port: number, refusal: Refusal): void {
    this.#logger.warn("egress refused", { workspace_id: ws.workspaceId, host: host.slice(0, 253), port, reason: refusal.reason, detail: refusal.message.slice(0, 500) });
    this.#onRefused?.({ workspaceId: ws.workspaceId, host, port, reason: refusal.reason, message: refusal.message });
  }

  /** The address to connect to for `host:port`, or the refusal (checked name, then resolved address). */
  async #resolve(ws: EgressWorkspace, host: string, port: number): Promise<{ address: string } | Refusal> {
    const rule = ws.policy.matchName(host, port);
    if ("reason" in rule) return rule;
    let addresses: Array<{ address: string }>;
    try {
      addresses = isIP(host) !== 0 ? [{ address: host }] : await this.#lookup(host);
    } catch {
      return { reason: "unresolvable", message: `${host} does not resolve` };
    }
    let first: Refusal | undefined;
    for (const { address } of addresses) {
      const refusal = ws.policy.checkAddress(host, address, port);
      if (!refusal) return { address };
      first ??= refusal;
    }
    return first ?? { reason: "unresolvable", message: `${host} does not resolve` };
  }

  /**
   * Links the sides of one connection (the client first): bytes counted against the workspace (a `data` listener on
   * each side in `counted`; a side read otherwise counts through the returned function), an idle
   * timeout on every side, and the end of one side closing the others. Returns the counter.
   */
  #watch(ws: EgressWorkspace, sides: Duplex[], counted: Duplex[], host: string, port: number): (bytes: number) => boolean {
    const close = (why: string) => {
      this.#logger.warn("egress connection closed", { workspace_id: ws.workspaceId, host, port, reason: why });
      for (const s of sides) s.destroy();
    };
    const count = (bytes: number) => {
      ws.usage.bytes += bytes;
      if (ws.usage.bytes <= this.#limits.maxBytes) return true;
      close(`the workspace moved more than ${this.#limits.maxBytes} bytes`);
      return false;
    };
    for (const side of sides) {
      if (counted.includes(side)) side.on("data", (chunk: Buffer) => void count(chunk.length));
      (side as Socket).setTimeout?.(this.#limits.idleTimeoutMs, () => close(`idle for ${this.#limits.idleTimeoutMs} ms`));
      side.on("error", () => undefined);
      side.once("close", () => {
        for (const s of sides) {
          if (s === side || s.destroyed) continue;
          // A destination that closed without an error (done, or its HTTP client let go after the
          // response), or a client that ended, lets the others finish writing what they hold (the
          // tail of a download waiting for the client's credit, or still in the HTTP response) and
          // close in their own time (a tunnel's client was ended on the destination's end; an HTTP
          // response ends its connection itself), bounded by the idle timeout. An error, or a client
          // that broke off, takes the others down at once.
          const clientBrokeOff = side === sides[0] && !side.readableEnded;
          if (side.errored || clientBrokeOff) {
            s.destroy();
            continue;
          }
          const timer = setTimeout(() => s.destroy(), this.#limits.idleTimeoutMs);
          s.once("close", () => clearTimeout(timer));
        }
      });
    }
    return count;
  }

  async #tunnel(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    // The HTTP server let go of the socket with the CONNECT: its errors (a client reset) are ours now.
    client.on("error", () => undefined);
    const ws = this.#workspaces.get(req.socket);
    if (!ws) return void client.destroy();
    const refused = this.#authorize(req, ws);
    if (refused) return this.#refuse(client, refused.status, refused.line, refused.headers);
    const target = splitHostPort(req.url ?? "");
    if (!target) return this.#refuse(client, 400, `agent-workspace egress: CONNECT wants host:port, not '${(req.url ?? "").slice(0, 200)}'`);
    const found = await this.#resolve(ws, target.host, target.port);
    if ("reason" in found) {
      this.#log(ws, target.host, target.port, found);
      return this.#refuse(client, 403, `agent-workspace egress: ${found.message}`);
    }
    if (ws.usage.bytes > this.#limits.maxBytes) return this.#refuse(client, 403, `agent-workspace egress: this workspace moved more than ${this.#limits.maxBytes} bytes`);
    // Downloads are the bulk: the destination is read into a buffer of its own (fewer, larger reads
    // than a stream's 64 KiB; a bare Node relay here goes from about 540 to 850 MiB/s) and each
    // read is copied out to the client, which paces it.
    let count: (bytes: number) => boolean = () => true;
    const upstream: Socket = connect({
      host: found.address,
      port: target.port,
      onread: {
        buffer: Buffer.allocUnsafe(TUNNEL_READ_BYTES),
        callback: (n: number, buf: Uint8Array) => {
          if (!count(n)) return false;
          if (client.write(Buffer.from(buf.subarray(0, n)))) return true;
          client.once("drain", () => upstream.resume());
          return false;
        },
      },
    });
    let connected = false;
    upstream.once("connect", () => {
      connected = true;
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      client.pipe(upstream);
    });
    upstream.once("end", () => client.end());
    upstream.once("error", (err) => {
      if (!connected) this.#refuse(client, 502, `agent-workspace egress: ${target.host}:${target.port} could not be reached (${(err as NodeJS.ErrnoException).code ?? "error"})`);
      else client.destroy();
    });
    count = this.#watch(ws, [client, upstream], [client], target.host, target.port);
  }

  async #forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const ws = this.#workspaces.get(req.socket);
    if (!ws) return void req.socket.destroy();
    const answer = (status: number, line: string, headers: Record<string, string> = {}) => {
      res.writeHead(status, { ...headers, "content-type": "text/plain; charset=utf-8", connection: "close" });
      res.end(`${line}\n`);
    };
    const refused = this.#authorize(req, ws);
    if (refused) return answer(refused.status, refused.line, refused.headers);
    let url: URL;
    try {
      url = new URL(req.url ?? "");
    } catch {
      return answer(400, "agent-workspace egress: a proxy request names an absolute http:// URL");
    }
    if (url.protocol !== "http:") return answer(400, `agent-workspace egress: ${url.protocol} goes through CONNECT; only http:// is forwarded as a request`);
    if (url.username !== "" || url.password !== "") return answer(400, "agent-workspace egress: credentials in a proxied URL are not forwarded");
    const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
    const port = url.port === "" ? 80 : Number(url.port);
    // The Host header must name what the URL names: a server behind the checked address must not
    // be told it is serving another host.
    // Both are compared in the URL parser's canonical form ([::ffff:127.0.0.1] is [::ffff:7f00:1]).
    const hostHeader = (req.headers.host ?? "").toLowerCase();
    if (hostHeader !== "" && canonicalHost(hostHeader) !== url.host) {
      const refusal = { reason: "host_mismatch", message: `the Host header '${hostHeader.slice(0, 200)}' disagrees with the URL's host '${url.host.slice(0, 200)}'` };
      this.#log(ws, host, port, refusal);
      return answer(403, `agent-workspace egress: ${refusal.message}`);
    }
    const found = await this.#resolve(ws, host, port);
    if ("reason" in found) {
      this.#log(ws, host, port, found);
      return answer(403, `agent-workspace egress: ${found.message}`);
    }
    const headers = { ...req.headers };
    for (const h of HOP_BY_HOP) delete headers[h];
    headers.host = url.host;
    const upstream = httpRequest({ host: found.address, port, method: req.method, path: `${url.pathname}${url.search}`, headers, setHost: false, agent: false });
    upstream.on("response", (up) => {
      for (const h of HOP_BY_HOP) delete up.headers[h];
      res.writeHead(up.statusCode ?? 502, { ...up.headers, connection: "close" });
      up.pipe(res);
    });
    upstream.on("error", (err) => {
      if (!res.headersSent) answer(502, `agent-workspace egress: ${host}:${port} could not be reached (${(err as NodeJS.ErrnoException).code ?? "error"})`);
      else res.destroy();
    });
    upstream.once("socket", (socket: Socket) => this.#watch(ws, [req.socket, socket], [req.socket, socket], host, port));
    req.pipe(upstream);
  }

  close(): void {
    this.#server.close();
  }
}
