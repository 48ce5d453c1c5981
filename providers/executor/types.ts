/**
 * The event stream of one execution, shared by the executor (which produces it in the sandbox)
 * and the provider boundary (providers/types.ts re-exports it). Types only.
 */

/**
 * Events of one execution, in order: exactly one `started` (or a `spawn_failed` exit), any
 * number of output chunks of at most 64 KiB, exactly one `exited`. The consumer's pace is the
 * producer's: output is read from the process only as fast as the iterator is drained, so memory
 * stays bounded however much a command prints.
 */
export type ExecEvent =
  | { type: "started"; startedAt: Date; pid?: number }
  | { type: "stdout"; data: Uint8Array }
  | { type: "stderr"; data: Uint8Array }
  | { type: "exited"; exit: ExecExit };

/** How an execution ended. */
export interface ExecExit {
  /** Exit code; 128+N when killed by signal N; 127 when the program could not be started. */
  exitCode: number;
  /** Name of the killing signal ("SIGKILL"), or "" when the process exited by itself. */
  signal: string;
  /** True when the timeout fired. */
  timedOut: boolean;
  /** True when the workspace's memory limit killed the process. */
  oomKilled: boolean;
  durationMs: number;
  /** Set when the program could not be started at all (e.g. "ENOENT"). */
  spawnError?: string;
  /**
   * Each stream's total in bytes, when the sandbox sent only a head of it (ExecSpec.keepBytes):
   * the events then carry at most that head.
   */
  outputBytes?: { stdout: number; stderr: number };
}

/** What a filesystem entry is. Symlinks are reported as such only by listings. */
export type EntryType = "file" | "directory" | "symlink" | "other";

/** Metadata of one entry. */
export interface FileStat {
  type: EntryType;
  size: number;
  mtimeMs: number;
}

/** One directory entry, not followed if it is a symlink. */
export interface DirEntry extends FileStat {
  name: string;
}

/** An entry found by a walk (a regular file, unless the walk asked for every entry), with its workspace-relative path. */
export interface FoundFile extends DirEntry {
  path: string;
}

/** What a walk reports besides regular files, and where it does not go. */
export interface WalkOptions {
  /**
   * Every entry, not only regular files: each directory (just before its contents), symlinks
   * (as themselves, never followed) and other entries (FIFOs, sockets, devices).
   */
  all?: boolean;
  /** Names of directories, at any depth, that are never entered (with `all`, still reported themselves). */
  prune?: readonly string[];
}

/** What reading a path found: a file's bytes, or a directory's entry names. */
export type ReadOutcome =
  | { kind: "file"; rel: string; size: number; bytes: Uint8Array }
  | { kind: "directory"; rel: string; size: number; entries: Array<{ name: string; directory: boolean }> };
