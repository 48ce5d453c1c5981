/**
 * Who is calling. Every call gets exactly one principal from the authentication interceptor,
 * and the permission interceptor decides with it. Kinds today: an operator (holder of an API
 * key, or anyone on a server running open) and anonymous (no credential). Sessions add a third
 * kind, `session`, carrying the session's agent type and workspace; nothing else changes.
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

/** A caller without a credential. */
export interface AnonymousPrincipal {
  kind: "anonymous";
}

export type Principal = OperatorPrincipal | AnonymousPrincipal;

/** Every kind of principal, in the order the policy table lists them. */
export const PRINCIPAL_KINDS = ["operator", "anonymous"] as const satisfies ReadonlyArray<Principal["kind"]>;

export const ANONYMOUS: AnonymousPrincipal = Object.freeze({ kind: "anonymous" });

/** The caller of the current call, set by the authentication interceptor. */
export const PRINCIPAL = createContextKey<Principal>(ANONYMOUS, { description: "the authenticated caller" });
