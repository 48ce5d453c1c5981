/**
 * Workspace digests (seed 001): task-agnostic summaries of a session's workspace, cached by
 * section key with the session (SessionRecord.digests, persisted with it). Resolution of a key:
 * the session's latest digest, else the agent type's override, else a placeholder text (and a
 * warning in the server log, so an operator sees prompts going out without one).
 */
import { DomainError } from "../../core/errors.ts";

/** A digest as a session keeps it. */
export interface StoredDigest {
  summary: string;
  body: string;
  /** ISO time it was set. */
  updatedAt: string;
}

/** A resolved digest. */
export interface ResolvedDigest {
  sectionKey: string;
  summary: string;
  body: string;
  updatedAt?: string;
  source: "session" | "agent_type" | "placeholder";
}

/** The key an empty section key stands for (the seed's example). */
export const DEFAULT_SECTION_KEY = "workspace-digest";
export const MAX_SUMMARY_CHARS = 2_000;
export const MAX_BODY_CHARS = 64_000;
/** Section keys one session may keep. */
export const MAX_DIGESTS_PER_SESSION = 32;
const SECTION_KEY = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** The section key a request means; INVALID_ARGUMENT naming `field` for a malformed one. */
export function sectionKeyOf(key: string, field: string): string {
  if (key === "") return DEFAULT_SECTION_KEY;
  if (!SECTION_KEY.test(key)) {
    throw new DomainError("INVALID_ARGUMENT", `${field} '${key.slice(0, 80)}' is not a section key: 1-64 characters [a-z0-9._-], starting with a letter or digit`, {
      metadata: { field },
    });
  }
  return key;
}

/** Checks a digest's text; INVALID_ARGUMENT naming the field that is too long or not text. */
export function checkDigestText(summary: string, body: string, field: string): void {
  for (const [name, value, max] of [["summary", summary, MAX_SUMMARY_CHARS], ["body", body, MAX_BODY_CHARS]] as const) {
    if (value.length > max) {
      throw new DomainError("INVALID_ARGUMENT", `${field}.${name} holds ${value.length} characters; at most ${max}`, { metadata: { field: `${field}.${name}`, max_chars: String(max) } });
    }
    if (value.includes("\0")) throw new DomainError("INVALID_ARGUMENT", `${field}.${name} contains a NUL character`, { metadata: { field: `${field}.${name}` } });
  }
}

/** The placeholder of a key nobody has set. */
export function placeholder(sectionKey: string): ResolvedDigest {
  return {
    sectionKey,
    summary: "",
    body: `No workspace digest has been recorded for '${sectionKey}' yet. Explore the workspace (layout, notable directories, test/lint/format commands, known caveats) and record one with SetWorkspaceDigest.`,
    source: "placeholder",
  };
}
