/**
 * Following a refusal to the server that serves the workspace. Servers sharing one database each
 * drive the sandboxes of their own workspaces and sessions; another server refuses a call for one
 * of them, before doing anything, with `UNAVAILABLE` / `WORKSPACE_SERVED_ELSEWHERE` and that
 * server's URL in `metadata.server_url`. This transport sends such a call again, once, to that URL
 * (a connection per server, kept), so that a client of any server reaches every workspace.
 *
 * The server a refusal named is remembered for the workspace (the request's `workspace_id`) or,
 * for calls without one, the session token: later calls for it go there directly,
 * until that server fails one with UNAVAILABLE (the route is then forgotten and the next call asks
 * the first server again) or names yet another.
 *
 * Only refusals are followed: they come before the call did anything. A unary call is sent again
 * as it was; a server stream is sent again only when the refusal came before its first message
 * (which is where the server refuses); a client or bidirectional stream is never sent again (its
 * input cannot be replayed). The URL must be http(s), and a client of an https server never
 * follows it to plain http.
 */
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues, type StreamResponse, type Transport, type UnaryResponse } from "@connectrpc/connect";
import type { DescMethodStreaming, DescMethodUnary } from "@bufbuild/protobuf";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";

/** The server a refusal names, when `err` is a refusal this transport follows; else undefined. */
export function servedElsewhere(err: unknown, from: string): string | undefined {
  if (!(err instanceof ConnectError) || err.code !== Code.Unavailable) return undefined;
  const detail = err.findDetails(ErrorDetailSchema)[0];
  if (detail?.reason !== ErrorReason.WORKSPACE_SERVED_ELSEWHERE) return undefined;
  const target = detail.metadata.server_url ?? "";
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return undefined;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return undefined;
  if (from.startsWith("https:") && url.protocol !== "https:") return undefined;
  return target.replace(/\/+$/, "");
}

/** A transport and how to release its connections. */
export interface OwnTransport {
  transport: Transport;
  close(): void;
}

/**
 * `base` (for `url`), following refusals to the server they name through transports `make`
 * builds per URL. `close()` closes them all (not `base`: its owner does).
 */
/** How session tokens begin (an operator's API keys do not). */
const SESSION_TOKEN_PREFIX = "awsess_";

/** Routes kept at most; the oldest goes first. */
const MAX_ROUTES = 10_000;

/**
 * What a call is routed by: its workspace, else a session token (a session's calls all go to its
 * server); an operator's other calls (creating, listing) are never routed.
 */
function routeKey(input: unknown, header: Parameters<Transport["unary"]>[3]): string | undefined {
  const ws = (input as { workspaceId?: unknown } | undefined)?.workspaceId;
  if (typeof ws === "string" && ws !== "") return `workspace ${ws}`;
  const auth = header === undefined ? null : new Headers(header).get("authorization");
  return auth?.startsWith(`Bearer ${SESSION_TOKEN_PREFIX}`) ? `session ${auth}` : undefined;
}

export function followingRedirects(base: Transport, url: string, make: (url: string) => OwnTransport): OwnTransport {
  const others = new Map<string, OwnTransport>();
  const routes = new Map<string, string>();
  const remember = (key: string | undefined, target: string) => {
    if (key === undefined) return;
    routes.delete(key);
    routes.set(key, target);
    if (routes.size > MAX_ROUTES) routes.delete(routes.keys().next().value as string);
  };
  /**
   * Sends the call where its route says (else to `base`), follows one refusal, and keeps or
   * forgets the route by the outcome.
   */
  const send = async <T>(key: string | undefined, call: (t: Transport) => Promise<T>): Promise<T> => {
    const routed = key === undefined ? undefined : routes.get(key);
    const from = routed ?? url;
    try {
      return await call(routed === undefined ? base : to(routed));
    } catch (err) {
      const target = servedElsewhere(err, from);
      if (target === undefined) {
        // The server of the route is out of reach (or out of its database): the next call asks
        // the first server again, which knows whether another took the workspace over.
        if (key !== undefined && routed !== undefined && ConnectError.from(err).code === Code.Unavailable) routes.delete(key);
        throw err;
      }
      if (target === url.replace(/\/+$/, "")) {
        if (key !== undefined) routes.delete(key);
      } else remember(key, target);
      return call(to(target));
    }
  };
  const to = (target: string): Transport => {
    if (target === url.replace(/\/+$/, "")) return base;
    let t = others.get(target);
    if (!t) {
      t = make(target);
      others.set(target, t);
    }
    return t.transport;
  };
  const transport: Transport = {
    async unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: Parameters<Transport["unary"]>[3],
      input: MessageInitShape<I>,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      return send(routeKey(input, header), (t) => t.unary(method, signal, timeoutMs, header, input, contextValues));
    },
    async stream<I extends DescMessage, O extends DescMessage>(
      method: DescMethodStreaming<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: Parameters<Transport["unary"]>[3],
      input: AsyncIterable<MessageInitShape<I>>,
      contextValues?: ContextValues,
    ): Promise<StreamResponse<I, O>> {
      if (method.methodKind !== "server_streaming") return base.stream(method, signal, timeoutMs, header, input, contextValues);
      // One request message: kept, so that the call can be sent again.
      const messages: Array<MessageInitShape<I>> = [];
      for await (const m of input) messages.push(m);
      const replay = async function* () {
        yield* messages;
      };
      // A stream is refused before its first message: the response is taken to that point, so the
      // refusal surfaces (and is followed) within `send`.
      const open = async (t: Transport) => {
        const response = await t.stream(method, signal, timeoutMs, header, replay(), contextValues);
        const it = response.message[Symbol.asyncIterator]();
        return { response, it, head: await it.next() };
      };
      const { response: first, it, head } = await send(routeKey(messages[0], header), open);
      const message = (async function* () {
        try {
          if (head.done) return;
          yield head.value;
          for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
        } finally {
          // A reader that stopped early ends the call.
          await it.return?.();
        }
      })();
      return { ...first, message } as StreamResponse<I, O>;
    },
  };
  return {
    transport,
    close: () => {
      for (const t of others.values()) t.close();
      others.clear();
    },
  };
}
