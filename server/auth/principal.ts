/**
 * Who is calling. Every call gets exactly one principal from the authentication interceptor,
 * and the permission interceptor decides with it. Kinds: an operator (holder of an API key, or
 * anyone on a server running open), a session (holder of a session token) and anonymous (no
 * credential).
 */
import { createContextKey } from "@connectrpc/connect";

/** An operator: administers agent types and workspaces and may call tools. */
export interface OperatorPrincipal {
  kind: "operator";
  /**
   * Which key: "key:" and the first 12 hex digits of the key's SHA-256, so logs and audit
   * records can tell keys apart without holding them; "open" on a server without keys.
   */
  id: string;
}

/**
 * The holder of a session token: may call tools on its own session's workspace, and read or
 * watch its own session; nothing else.
 */
export interface SessionPrincipal {
  kind: "session";
  sessionId: string;
  agentType: string;
}

/** A caller without a credential. */
export interface AnonymousPrincipal {
  kind: "anonymous";
}

export type Principal = OperatorPrincipal | SessionPrincipal | AnonymousPrincipal;

/** Every kind of principal, in the order the policy table lists them. */
export const PRINCIPAL_KINDS = ["operator", "session", "anonymous"] as const satisfies ReadonlyArray<Principal["kind"]>;

export const ANONYMOUS: AnonymousPrincipal = Object.freeze({ kind: "anonymous" });

/** The caller of the current call, set by the authentication interceptor. */
export const PRINCIPAL = createContextKey<Principal>(ANONYMOUS, { description: "the authenticated caller" });
