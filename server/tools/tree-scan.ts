/**
 * What a command changed, found by comparing two bounded walks of the workspace's tree: written
 * once above the provider's `walk` primitive, so it is the same on every provider. A snapshot holds
 * each entry's type, size and modification time; nothing is ever opened but directories, and a
 * symlink is an entry of its own, never followed (the walk enters no symlink), so a scan neither
 * reads a file's contents nor leaves the workspace.
 *
 * The insides of a few directories that are large, rebuilt by tools and never what an agent edits
 * (`PRUNED_DIRS`) are not walked: the directories themselves are entries, so their creation and
 * deletion are seen, what changes inside them is not. Names of sensitive files are entries like any
 * other, as ListFiles and Glob show them; their contents are never read, by a scan or a tool.
 */
import type { EntryType, WorkspaceFs } from "../../providers/types.ts";

/** Directories a scan reports but never enters, at any depth: git's internals and dependency trees. */
export const PRUNED_DIRS: readonly string[] = [".git", "node_modules", ".venv", "__pycache__"];

/** What a scan keeps of one entry. */
export interface SeenEntry {
  type: EntryType;
  size: number;
  mtimeMs: number;
}

/** The tree as a scan found it: workspace-relative path → entry. */
export type Snapshot = Map<string, SeenEntry>;

/** How far a scan may go. */
export interface ScanBounds {
  /** Entries at most; a tree with more is not listed. */
  maxEntries: number;
  /** Milliseconds at most; a walk still going then is stopped. */
  maxMs: number;
}

/** What happened to one path between two snapshots. */
export interface PathChange {
  path: string;
  change: "created" | "modified" | "deleted";
}

/**
 * Walks the whole workspace within `bounds`. Returns the snapshot, or undefined when the walk hit a
 * bound or failed (the sandbox stopped, the root vanished): then what the tree holds is not known.
 * Stopping early ends the walk (the provider's iterator is returned).
 */
export async function scanTree(fs: WorkspaceFs, bounds: ScanBounds): Promise<Snapshot | undefined> {
  const snapshot: Snapshot = new Map();
  const deadline = performance.now() + bounds.maxMs;
  try {
    for await (const e of fs.walk("", { all: true, prune: PRUNED_DIRS })) {
      if (snapshot.size >= bounds.maxEntries || performance.now() > deadline) return undefined;
      snapshot.set(e.path, { type: e.type, size: e.size, mtimeMs: e.mtimeMs });
    }
  } catch {
    return undefined;
  }
  return snapshot;
}

const ascending = (a: PathChange, b: PathChange) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0);

/**
 * The paths that differ between `before` and `after`: deletions first, deepest first (a
 * directory's entries before the directory), then creations and modifications, parents first. A
 * file is modified when its size or modification time differs; a directory is never reported
 * modified (its time changes with every entry made or removed in it, which are reported
 * themselves). An entry whose type changed (a file replaced by a directory) is deleted and created.
 */
export function diffSnapshots(before: Snapshot, after: Snapshot): PathChange[] {
  const deleted: PathChange[] = [];
  const changed: PathChange[] = [];
  for (const [path, old] of before) {
    const now = after.get(path);
    if (now === undefined || now.type !== old.type) deleted.push({ path, change: "deleted" });
  }
  for (const [path, now] of after) {
    const old = before.get(path);
    if (old === undefined || old.type !== now.type) changed.push({ path, change: "created" });
    else if (now.type !== "directory" && (old.size !== now.size || old.mtimeMs !== now.mtimeMs)) changed.push({ path, change: "modified" });
  }
  deleted.sort((a, b) => ascending(b, a));
  changed.sort(ascending);
  return [...deleted, ...changed];
}
