/**
 * Establishes who is calling, for every call on every protocol (and the REST paths, which run
 * through the same handlers). A call may carry `authorization: Bearer <key>`; a known key makes
 * the caller an operator, an unknown or malformed one fails the call with UNAUTHENTICATED at once
 * (it is a mistake worth hearing about, never silently downgraded). Without the header the caller
 * is anonymous, or an operator when the server runs open (no keys, loopback only). The token is
 * never logged or echoed. Whether the principal may make the call is the permission
 * interceptor's decision, not this one's.
 */
import type { Interceptor } from "@connectrpc/connect";
import { DomainError } from "../../core/errors.ts";
import type { KeyRing } from "../auth/api-keys.ts";
import { ANONYMOUS, PRINCIPAL, type Principal } from "../auth/principal.ts";

const OPEN: Principal = Object.freeze({ kind: "operator", id: "open" });
const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i;

/** The principal a request's headers establish; throws UNAUTHENTICATED for a bad credential. */
export function authenticate(header: Headers, keys: KeyRing): Principal {
  const value = header.get("authorization");
  if (value === null) return keys.size === 0 ? OPEN : ANONYMOUS;
  const m = BEARER.exec(value);
  if (!m) {
    throw new DomainError("UNAUTHENTICATED", "The authorization header must be 'Bearer <API key>'", { metadata: { header: "authorization" } });
  }
  const id = keys.match(m[1]);
  if (id === undefined) throw new DomainError("UNAUTHENTICATED", "The API key is not valid", { metadata: { header: "authorization" } });
  return { kind: "operator", id };
}

/** The interceptor; place it inside the error interceptor and outside permissions. */
export function createAuthenticationInterceptor(keys: KeyRing): Interceptor {
  return (next) => async (req) => {
    req.contextValues.set(PRINCIPAL, authenticate(req.header, keys));
    return next(req);
  };
}
