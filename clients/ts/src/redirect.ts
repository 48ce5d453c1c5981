/**
 * Following a refusal to the server that serves the workspace. Servers sharing one database each
 * drive the sandboxes of their own workspaces and sessions; another server refuses a call for one
 * of them, before doing anything, with `UNAVAILABLE` / `WORKSPACE_SERVED_ELSEWHERE` and that
 * server's URL in `metadata.server_url`. This transport sends such a call again, once, to that URL
 * (a connection per server, kept), so that a client of any server reaches every workspace.
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
export function followingRedirects(base: Transport, url: string, make: (url: string) => OwnTransport): OwnTransport {
  const others = new Map<string, OwnTransport>();
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
      try {
        return await base.unary(method, signal, timeoutMs, header, input, contextValues);
      } catch (err) {
        const target = servedElsewhere(err, url);
        if (target === undefined) throw err;
        return to(target).unary(method, signal, timeoutMs, header, input, contextValues);
      }
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
      const retry = (err: unknown): Promise<StreamResponse<I, O>> => {
        const target = servedElsewhere(err, url);
        if (target === undefined) throw err;
        return to(target).stream(method, signal, timeoutMs, header, replay(), contextValues);
      };
      let first: StreamResponse<I, O>;
      try {
        first = await base.stream(method, signal, timeoutMs, header, replay(), contextValues);
      } catch (err) {
        return retry(err);
      }
      const it = first.message[Symbol.asyncIterator]();
      let head: IteratorResult<unknown>;
      try {
        head = await it.next();
      } catch (err) {
        return retry(err);
      }
      const message = (async function* () {
        try {
          if (head.done) return;
          yield head.value as never;
          for (let r = await it.next(); !r.done; r = await it.next()) yield r.value as never;
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
