/** The glob tool: files matching a pattern, newest modification first. */
import { DomainError } from "../../core/errors.ts";
import type { ToolContext } from "./context.ts";
import { jailDirectory } from "./paths.ts";
import { compileGlob, type FoundEntry, walkMatches } from "./walk.ts";

/** Glob's default limit. */
export const DEFAULT_GLOB_LIMIT = 1000;

export interface GlobInput {
  pattern: string;
  /** Directory the pattern is relative to; empty for the workspace root. */
  path: string;
  /** Most paths returned; 0 for the default. */
  limit: number;
}

/** Matching files under `path`, newest modification first (ties by path); no match is an empty list. */
export async function glob(ctx: ToolContext, input: GlobInput): Promise<{ paths: string[]; truncated: boolean }> {
  if (input.limit < 0) throw new DomainError("INVALID_ARGUMENT", "limit must not be negative", { metadata: { field: "limit" } });
  const match = compileGlob(input.pattern);
  const base = await jailDirectory(ctx.workspace, input.path, "path");
  const max = input.limit === 0 ? DEFAULT_GLOB_LIMIT : input.limit;
  const found: FoundEntry[] = [];
  for await (const e of walkMatches(ctx.workspace, base, match)) found.push(e);
  found.sort((a, b) => b.mtimeMs - a.mtimeMs || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { paths: found.slice(0, max).map((e) => e.path), truncated: found.length > max };
}
