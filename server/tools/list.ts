/** The list tool: a directory's own entries, or with a pattern every matching file below it. */
import type { ToolContext } from "./context.ts";
import { jailDirectory } from "./paths.ts";
import { compileGlob, type FoundEntry, joinPath, walkMatches } from "./walk.ts";

/** Most entries ListFiles returns. */
export const MAX_LIST_ENTRIES = 10_000;

export interface ListInput {
  path: string;
  /** A glob relative to `path`; empty lists `path`'s own entries. */
  pattern: string;
}

export interface ListResult {
  files: FoundEntry[];
  truncated: boolean;
}

/** Lists entries sorted by path, at most MAX_LIST_ENTRIES. */
export async function listFiles(ctx: ToolContext, input: ListInput): Promise<ListResult> {
  const ws = ctx.workspace;
  const base = await jailDirectory(ws, input.path, "path");
  const files: FoundEntry[] = [];
  let truncated = false;
  if (input.pattern.trim() === "") {
    for (const e of await ws.fs.list(base)) files.push({ ...e, path: joinPath(base, e.name) });
  } else {
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
  return { files, truncated };
}
