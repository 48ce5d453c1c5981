/**
 * The one permission check, for every call of every service. First the policy table: may this
 * kind of caller make this call at all (an anonymous caller who may not is told to authenticate,
 * UNAUTHENTICATED; anyone else gets CALLER_NOT_PERMITTED)? Then, for ToolService calls, the tool
 * the RPC declares with its `(agentworkspace.v1.tool)` option is checked against the workspace
 * named in the request. Streaming calls are decided before the handler runs, so a refused call
 * sends no message at all.
 */
import { type Interceptor, type StreamRequest, type StreamResponse, type UnaryRequest } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { DomainError } from "../../core/errors.ts";
import { PRINCIPAL, type Principal } from "../auth/principal.ts";
import type { Allowed } from "../policy.ts";
import { toolNameOf } from "../tools/registry.ts";

/** An admitted tool call: the workspace it runs in, and what to do when it ends. */
export interface Admission {
  /** The workspace the call runs in: the request's, or a session token's own when it names none. */
  workspaceId: string;
  /** Called once when the call ends, however it ends. */
  done(): void;
}

/**
 * Decides whether a principal may use a tool in a workspace; throws the refusal. It may wait (a
 * session still provisioning its workspace) until `signal`, the call's own, aborts.
 */
export interface ToolAccess {
  admit(principal: Principal, workspaceId: string, tool: string, signal: AbortSignal): Promise<Admission>;
}

/** Options of the permission interceptor. */
export interface PermissionOptions {
  policy: Readonly<Record<string, Allowed>>;
  toolAccess: ToolAccess;
}

/** The workspace id of a tool request ("" when the message has none). */
function workspaceIdOf(message: unknown): string {
  const id = (message as { workspaceId?: unknown } | undefined)?.workspaceId;
  return typeof id === "string" ? id : "";
}

/** Points the request at the admitted workspace (a session token's calls may leave it empty). */
function setWorkspaceId(message: unknown, id: string): void {
  if (message !== null && typeof message === "object" && "workspaceId" in message) (message as { workspaceId: string }).workspaceId = id;
}

/** `stream`, calling `done` once it ends or is abandoned. */
async function* finishing<T>(stream: AsyncIterable<T>, done: () => void): AsyncGenerator<T> {
  try {
    yield* stream;
  } finally {
    done();
  }
}

/**
 * The policy table's decision for one call: throws UNAUTHENTICATED for an anonymous caller the
 * procedure does not admit, CALLER_NOT_PERMITTED for any other, and returns when it may proceed.
 */
export function checkCaller(policy: Readonly<Record<string, Allowed>>, procedure: string, principal: Principal): void {
  const allowed = Object.hasOwn(policy, procedure) ? policy[procedure] : [];
  if (allowed.includes(principal.kind)) return;
  if (principal.kind === "anonymous") {
    throw new DomainError("UNAUTHENTICATED", "This call needs an API key: send 'authorization: Bearer <key>'", { metadata: { procedure } });
  }
  throw new DomainError("CALLER_NOT_PERMITTED", `A caller of kind '${principal.kind}' may not call ${procedure}`, { metadata: { procedure, caller: principal.kind } });
}

/** The interceptor; place it inside authentication. */
export function createPermissionInterceptor({ policy, toolAccess }: PermissionOptions): Interceptor {
  return (next) => async (req) => {
    const principal = req.contextValues.get(PRINCIPAL);
    checkCaller(policy, `/${req.service.typeName}/${req.method.name}`, principal);
    const tool = toolNameOf(req.method);
    if (tool === "") return next(req);
    if (!req.stream) {
      const message = (req as UnaryRequest).message;
      const admitted = await toolAccess.admit(principal, workspaceIdOf(message), tool, req.signal);
      setWorkspaceId(message, admitted.workspaceId);
      try {
        return await next(req);
      } finally {
        admitted.done();
      }
    }
    // A server-streaming request has one message: read it, decide, and hand the same message on.
    const messages: unknown[] = [];
    for await (const m of (req as StreamRequest).message) messages.push(m);
    const admitted = await toolAccess.admit(principal, workspaceIdOf(messages[0]), tool, req.signal);
    setWorkspaceId(messages[0], admitted.workspaceId);
    let res: StreamResponse;
    try {
      res = (await next({ ...req, message: createAsyncIterable(messages) } as StreamRequest)) as StreamResponse;
    } catch (err) {
      admitted.done();
      throw err;
    }
    return { ...res, message: finishing(res.message, admitted.done) };
  };
}
