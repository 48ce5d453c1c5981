/**
 * Session tokens: 32 random bytes, base64url, behind a recognisable prefix (so a leaked token is
 * easy to find and a key is never mistaken for one). The server keeps only their SHA-256: the
 * database and memory hold hashes, a token is shown once (StartSession's response) and is never
 * logged. Looking a presented token up by its hash leaks nothing of the token through timing.
 */
import { createHash, randomBytes } from "node:crypto";
import type { SessionPrincipal } from "./principal.ts";

/** What every session token starts with. */
export const SESSION_TOKEN_PREFIX = "awsess_";

/** The SHA-256 of a token, hex. */
export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** A new token and its hash. */
export function newSessionToken(): { token: string; hash: string } {
  const token = SESSION_TOKEN_PREFIX + randomBytes(32).toString("base64url");
  return { token, hash: hashToken(token) };
}

/** Finds the live session a token hash belongs to. */
export interface SessionTokenLookup {
  /** The principal of the session whose token hashes to `hash`, or undefined (unknown or ended). */
  principalOf(hash: string): SessionPrincipal | undefined;
}
