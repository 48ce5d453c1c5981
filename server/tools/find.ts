/**
 * The list and glob tools, built on the provider's `list` primitive: a directory walk that never
 * descends through symlinks, matched with picomatch (the glob engine of fast-glob, tinyglobby
 * and micromatch: well kept, pure JavaScript, bash-like semantics).
 */
import picomatch from "picomatch";
import { DomainError, hasReason } from "../../core/errors.ts";
import type { DirEntry, WorkspaceHandle } from "../../providers/types.ts";
import { WORKSPACE_ROOT } from "../../providers/jail.ts";
import { jailDirectory } from "./paths.ts";

/** One entry as the API reports it, with its workspace-relative path. */
export interface FoundEntry extends DirEntry {
  path: string;
}

/** Most entries ListFiles returns. */
export const MAX_LIST_ENTRIES = 10_000;
/** Glob's default limit. */
export const DEFAULT_GLOB_LIMIT = 1000;

const join = (dir: string, name: string) => (dir === "" ? name : `${dir}/${name}`);

/** Compiles a glob pattern relative to the search directory, rejecting ones that could leave it. */
function compile(pattern: string): (path: string) => boolean {
  let p = pattern.trim();
  if (p === "") throw new DomainError("INVALID_PATTERN", "pattern is required", { metadata: { field: "pattern" } });
  if (p.includes("\0")) throw new DomainError("INVALID_PATTERN", "pattern contains a NUL byte", { metadata: { field: "pattern" } });
  if (p.startsWith(`${WORKSPACE_ROOT}/`)) p = p.slice(WORKSPACE_ROOT.length + 1);
  if (p.startsWith("/") || p.split("/").includes("..")) {
    throw new DomainError("INVALID_PATTERN", `Pattern '${pattern.slice(0, 200)}' must be relative to the search directory and may not contain '..'`, {
      metadata: { field: "pattern" },
    });
  }
  if (p.startsWith("./")) p = p.slice(2);
  try {
    return picomatch(p, { dot: p.split("/").some((seg) => seg.startsWith(".")) });
  } catch (err) {
    throw new DomainError("INVALID_PATTERN", `Invalid glob pattern '${pattern.slice(0, 200)}'`, { metadata: { field: "pattern" }, cause: err });
  }
}

/**
 * Walks `base` (workspace-relative) depth first and yields every regular file whose path relative
 * to `base` matches. Symlinked directories are not entered, so a walk cannot leave the workspace
 * or loop.
 */
async function* walkMatches(ws: WorkspaceHandle, base: string, match: (p: string) => boolean): AsyncGenerator<FoundEntry> {
  const stack: string[] = [""];
  while (stack.length > 0) {
    const sub = stack.pop() as string;
    let entries: DirEntry[];
    try {
      entries = await ws.fs.list(join(base, sub));
    } catch (err) {
      // A directory removed or made unreadable during the walk is skipped, not fatal.
      if (hasReason(err, "FILE_NOT_FOUND", "ACCESS_DENIED", "NOT_A_DIRECTORY")) continue;
      throw err;
    }
    entries.sort((a, b) => (a.name < b.name ? 1 : a.name > b.name ? -1 : 0));
    for (const e of entries) {
      const relToBase = join(sub, e.name);
      if (e.type === "directory") stack.push(relToBase);
      else if (e.type === "file" && match(relToBase)) yield { ...e, path: join(base, relToBase) };
    }
  }
}

/** Lists a directory's own entries, or with a pattern every file below it that matches. */
export async function listFiles(ws: WorkspaceHandle, path: string, pattern: string): Promise<{ files: FoundEntry[]; truncated: boolean }> {
  const base = await jailDirectory(ws, path, "path");
  const files: FoundEntry[] = [];
  let truncated = false;
  if (pattern.trim() === "") {
    for (const e of await ws.fs.list(base)) files.push({ ...e, path: join(base, e.name) });
  } else {
    for await (const e of walkMatches(ws, base, compile(pattern))) {
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

/** Files matching `pattern` under `path`, newest modification first (ties by path). */
export async function glob(ws: WorkspaceHandle, pattern: string, path: string, limit: number): Promise<{ paths: string[]; truncated: boolean }> {
  if (limit < 0) throw new DomainError("INVALID_ARGUMENT", "limit must not be negative", { metadata: { field: "limit" } });
  const match = compile(pattern);
  const base = await jailDirectory(ws, path, "path");
  const max = limit === 0 ? DEFAULT_GLOB_LIMIT : limit;
  const found: FoundEntry[] = [];
  for await (const e of walkMatches(ws, base, match)) found.push(e);
  found.sort((a, b) => b.mtimeMs - a.mtimeMs || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { paths: found.slice(0, max).map((e) => e.path), truncated: found.length > max };
}
