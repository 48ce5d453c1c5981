/**
 * Directory walking shared by the list and glob tools: a depth-first walk over the provider's
 * `list` primitive that never descends through symlinks, and glob patterns compiled with
 * picomatch (the glob engine of fast-glob, tinyglobby and micromatch: well kept, pure JavaScript,
 * bash-like semantics).
 */
import picomatch from "picomatch";
import { DomainError } from "../../core/errors.ts";
import { WORKSPACE_ROOT } from "../../providers/executor/jail.ts";
import type { DirEntry, WorkspaceHandle } from "../../providers/types.ts";

/** One entry as the API reports it, with its workspace-relative path. */
export interface FoundEntry extends DirEntry {
  path: string;
}

/** `dir/name`, or `name` at the workspace root. */
export const joinPath = (dir: string, name: string) => (dir === "" ? name : `${dir}/${name}`);

/** Compiles a glob pattern relative to the search directory, rejecting ones that could leave it. */
export function compileGlob(pattern: string): (path: string) => boolean {
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
 * Every regular file below `base` (workspace-relative) whose path relative to `base` matches,
 * from the provider's walk: symlinked directories are never entered, so a walk cannot leave the
 * workspace or loop, and the order is the same on every provider.
 */
export async function* walkMatches(ws: WorkspaceHandle, base: string, match: (p: string) => boolean): AsyncGenerator<FoundEntry> {
  const cut = base === "" ? 0 : base.length + 1;
  for await (const file of ws.fs.walk(base)) {
    if (match(file.path.slice(cut))) yield file;
  }
}
