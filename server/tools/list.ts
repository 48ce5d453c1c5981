/** The list tool: a directory's own entries, or with a pattern every matching file below it. */
import type { ToolContext } from "./context.ts";
import { DomainError, hasReason } from "../../core/errors.ts";
import { jailDirectory, jailPath } from "./paths.ts";
import { compileGlob, type FoundEntry, joinPath, walkMatches } from "./walk.ts";

/** Most entries ListFiles returns. */
export const MAX_LIST_ENTRIES = 10_000;

export interface ListInput {
  path: string;
  /** A glob relative to `path`; empty lists `path`'s own entries. */
  pattern: string;
  /** Path and type only (no pattern): nothing is read per entry. */
  namesOnly?: boolean;
}

export interface ListResult {
  files: FoundEntry[];
  truncated: boolean;
  /** The entries carry no size and no mtime. */
  namesOnly: boolean;
}

/** Lists entries sorted by path, at most MAX_LIST_ENTRIES. */
export async function listFiles(ctx: ToolContext, input: ListInput): Promise<ListResult> {
  const ws = ctx.workspace;
  const files: FoundEntry[] = [];
  let truncated = false;
  const namesOnly = input.namesOnly === true;
  if (namesOnly && input.pattern.trim() !== "") {
    throw new DomainError("INVALID_ARGUMENT", "names_only lists a directory's own entries; it cannot be combined with a pattern", { metadata: { field: "names_only" } });
  }
  if (input.pattern.trim() === "") {
    // One resolution: the listing reports the directory's canonical path itself.
    const listed = await ws.fs.list(jailPath(input.path, "path", false), { namesOnly: input.namesOnly === true }).catch((err: unknown) => {
      throw hasReason(err, "NOT_A_DIRECTORY") ? new DomainError("NOT_A_DIRECTORY", err.message, { metadata: { ...err.metadata, field: "path" } }) : err;
    });
    for (const e of listed.entries) files.push({ name: e.name, type: e.type, size: e.size, mtimeMs: e.mtimeMs, path: joinPath(listed.rel, e.name) });
  } else {
    const base = await jailDirectory(ws, input.path, "path");
    for await (const e of walkMatches(ws, base, compileGlob(input.pattern))) {
      if (files.length === MAX_LIST_ENTRIES) {
        truncated = true;
        break;
      }
      files.push(e);
    }
  }
  files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  if (files.length > MAX_LIST_ENTRIES) {
    files.length = MAX_LIST_ENTRIES;
    truncated = true;
  }
  return { files, truncated, namesOnly };
}
