/**
 * The operator keys, held so that checking a presented token leaks neither a key nor how much of
 * one matched: both sides are hashed (SHA-256) and every key is compared with `timingSafeEqual`,
 * without stopping at the first match, so the time taken does not depend on which key (or
 * whether any) matched. Keys are never logged; only their fingerprints leave this module.
 */
import { createHash, timingSafeEqual } from "node:crypto";

/** The configured keys. */
export interface KeyRing {
  /** How many keys there are; 0 means the server runs open. */
  readonly size: number;
  /** The fingerprint ("key:…") of the key equal to `token`, or undefined. */
  match(token: string): string | undefined;
}

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/** A ring of `keys`. */
export function createKeyRing(keys: readonly string[]): KeyRing {
  const entries = keys.map((k) => {
    const hash = digest(k);
    return { hash, id: `key:${hash.toString("hex").slice(0, 12)}` };
  });
  return {
    size: entries.length,
    match(token) {
      const presented = digest(token);
      let found: string | undefined;
      for (const e of entries) {
        if (timingSafeEqual(e.hash, presented) && found === undefined) found = e.id;
      }
      return found;
    },
  };
}
