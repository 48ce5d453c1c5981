/**
 * Establishes who is calling, for every call on every protocol (and the REST paths, which run
 * through the same handlers). A call may carry `authorization: Bearer <key>`; a known key makes
 * the caller an operator, a live session's token makes it that session, an unknown or malformed one fails the call with UNAUTHENTICATED at once
 * (it is a mistake worth hearing about, never silently downgraded). Without the header the caller
 * is anonymous, or an operator when the server runs open (no keys, loopback only). The token is
 * never logged or echoed. Whether the principal may make the call is the permission
 * interceptor's decision, not this one's.
 */
import type { Interceptor } from "@connectrpc/connect";
import { DomainError } from "../../core/errors.ts";
import type { KeyRing } from "../auth/api-keys.ts";
import { ANONYMOUS, PRINCIPAL, type Principal } from "../auth/principal.ts";
import { hashToken, SESSION_TOKEN_PREFIX, type SessionTokenLookup } from "../auth/session-tokens.ts";

const OPEN: Principal = Object.freeze({ kind: "operator", id: "open" });
const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i;

/** No sessions: for servers and tests without a session manager. */
const NO_SESSIONS: SessionTokenLookup = { principalOf: () => undefined };

/** The principal a request's headers establish; throws UNAUTHENTICATED for a bad credential. */
export function authenticate(header: Headers, keys: KeyRing, sessions: SessionTokenLookup = NO_SESSIONS): Principal {
  const value = header.get("authorization");
  if (value === null) return keys.size === 0 ? OPEN : ANONYMOUS;
  const m = BEARER.exec(value);
  if (!m) {
    throw new DomainError("UNAUTHENTICATED", "The authorization header must be 'Bearer <API key>'", { metadata: { header: "authorization" } });
  }
  if (m[1].startsWith(SESSION_TOKEN_PREFIX)) {
    // A session token is a session token even on a server running open: it never becomes an operator.
    const session = sessions.principalOf(hashToken(m[1]));
    if (session === undefined) {
      throw new DomainError("UNAUTHENTICATED", "The session token is not valid: its session has ended, or it never existed", { metadata: { header: "authorization" } });
    }
    return session;
  }
  const id = keys.match(m[1]);
  if (id === undefined) throw new DomainError("UNAUTHENTICATED", "The API key is not valid", { metadata: { header: "authorization" } });
  return { kind: "operator", id };
}

/** The interceptor; place it inside the error interceptor and outside permissions. */
export function createAuthenticationInterceptor(keys: KeyRing, sessions: SessionTokenLookup = NO_SESSIONS): Interceptor {
  return (next) => async (req) => {
    req.contextValues.set(PRINCIPAL, authenticate(req.header, keys, sessions));
    return next(req);
  };
}
