/**
 * The workspace jail: the single place that decides whether a path names something inside a
 * workspace, used by the executor inside sandboxes and by the local provider on the host.
 *
 * Two layers:
 * - `toWorkspacePath` maps a caller's path lexically (no "..", absolute paths elsewhere, NUL
 *   bytes, overlong names) to a workspace-relative one;
 * - `Jail.locate` resolves that path on the real tree the way `openat2(RESOLVE_BENEATH)` or Go's
 *   `os.Root` would: one component at a time from an open descriptor of the workspace root, each
 *   directory opened with O_NOFOLLOW relative to the previous one's descriptor (through
 *   `/proc/self/fd/<fd>/<name>`, since Node has no openat), and checked to be the very directory
 *   the previous lstat saw. A symlink is followed only by reading it and resolving its target again
 *   from the root (absolute targets are read in the /workspace view), with a hop limit; a target
 *   that leaves the root is PATH_OUTSIDE_WORKSPACE. Every later step of an operation names its
 *   parent by that descriptor, so a link swapped in after the check can never redirect it.
 *
 * Directories are opened with O_NOFOLLOW alone and their type checked with fstat: the gVisor
 * release in Debian follows a symlink given O_NOFOLLOW together with O_DIRECTORY.
 *
 * Synchronous by design: each step is a short system call on a local filesystem, and keeping
 * them on one thread means no other code runs between a check and its use in this process.
 */
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readlinkSync, type Stats } from "node:fs";
import { Fault } from "./fault.ts";

/** The path tools and commands see as the workspace root, on every provider. */
export const WORKSPACE_ROOT = "/workspace";

/** Longest path accepted, in characters (Linux PATH_MAX). */
const MAX_PATH_LENGTH = 4096;
/** Longest path component, in bytes (Linux NAME_MAX). */
export const MAX_NAME_BYTES = 255;
/** Symlinks followed while resolving one path before giving up (Linux uses 40 too). */
const MAX_SYMLINK_HOPS = 40;
/**
 * Times the components of one path are looked at again because one changed between lstat and
 * open (or vanished after it was made): a real concurrent swap. Directories the resolution itself
 * makes are not counted.
 */
const MAX_RETRIES = 64;

/** Flags for opening a directory component: never through a symlink, never blocking. */
export const DIR_OPEN = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** The input with control characters escaped and cut at 200 characters, safe to put in a message. */
export function printable(input: string): string {
  const shown = input.length > 200 ? `${input.slice(0, 200)}…` : input;
  return shown.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

/** The caller-facing form of a workspace-relative path: "." for the root. */
export function displayPath(rel: string): string {
  return rel === "" ? "." : rel;
}

/** PATH_OUTSIDE_WORKSPACE for `input`. */
export function outside(input: string): Fault {
  return new Fault("PATH_OUTSIDE_WORKSPACE", `Path '${printable(input)}' is outside the workspace`, { path: printable(input) });
}

/** FILE_NOT_FOUND for `rel`. */
export function notFound(rel: string): Fault {
  return new Fault("FILE_NOT_FOUND", `File not found: ${displayPath(rel)}`, { path: rel });
}

function checkName(name: string, input: string): void {
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw new Fault("INVALID_ARGUMENT", `A component of '${printable(input)}' is longer than ${MAX_NAME_BYTES} bytes`, {
      path: printable(input),
      max_name_bytes: String(MAX_NAME_BYTES),
    });
  }
}

/**
 * Lexically resolves a caller's path to a workspace-relative POSIX path: "" for the root,
 * otherwise "a/b" with no ".", ".." or empty components. Accepts paths relative to the workspace
 * and absolute paths under /workspace. Throws PATH_OUTSIDE_WORKSPACE for NUL bytes, absolute
 * paths elsewhere and ".." that climbs above the root (even if it would come back down), and
 * INVALID_ARGUMENT for a path or component longer than Linux allows.
 */
export function toWorkspacePath(input: string): string {
  if (input.length > MAX_PATH_LENGTH) {
    throw new Fault("INVALID_ARGUMENT", `Path is longer than ${MAX_PATH_LENGTH} characters`, { max_path_length: String(MAX_PATH_LENGTH) });
  }
  if (input.includes("\0")) throw outside(input);
  let rest = input;
  if (rest.startsWith("/")) {
    if (rest !== WORKSPACE_ROOT && !rest.startsWith(`${WORKSPACE_ROOT}/`)) throw outside(input);
    rest = rest.slice(WORKSPACE_ROOT.length);
  }
  const parts: string[] = [];
  for (const part of rest.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (parts.length === 0) throw outside(input);
      parts.pop();
      continue;
    }
    checkName(part, input);
    parts.push(part);
  }
  return parts.join("/");
}

/** `/proc/self/fd/<fd>/<name>`: resolves `name` relative to the directory open as `fd`, like openat(2). */
export function at(fd: number, name = ""): string {
  return name === "" ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

/** The errno code of a Node system error ("ENOENT"), or undefined. */
export function errnoOf(err: unknown): string | undefined {
  const code = typeof err === "object" && err !== null ? (err as { code?: unknown }).code : undefined;
  return typeof code === "string" ? code : undefined;
}

/**
 * PATH_CHANGED for `rel`: a directory on it was swapped, moved or removed while the call resolved
 * or used it. A concurrency conflict the caller retries (ABORTED), never INTERNAL.
 */
export function pathChanged(rel: string, what: string, cause?: unknown): Fault {
  return new Fault("PATH_CHANGED", `'${displayPath(rel)}' ${what}; retry`, { path: rel }, cause);
}

/**
 * Fault injection for tests: called in this process just before a directory the jail has looked
 * at is opened, where a concurrent swap lands, so a test can make that swap happen there, every
 * time. Unset in production, and nothing outside this process can set it (the executor in a
 * sandbox never does).
 */
export const jailFaults: { beforeOpenDir?: (rel: string) => void } = {};

/**
 * Translates a system error met while working on `rel` into a Fault with the domain's reason.
 * Unknown errors become WRITE_FAILED when writing and INTERNAL otherwise, keeping the errno as
 * the cause (logged on the server, never sent).
 */
export function faultOf(err: unknown, rel: string, writing: boolean): Fault {
  if (err instanceof Fault) return err;
  const meta = { path: rel };
  switch (errnoOf(err)) {
    case "ENOENT":
      return new Fault("FILE_NOT_FOUND", `File not found: ${displayPath(rel)}`, meta, err);
    case "EISDIR":
      return new Fault("IS_DIRECTORY", `'${displayPath(rel)}' is a directory`, meta, err);
    case "ENOTDIR":
      return new Fault("NOT_A_DIRECTORY", `A parent of '${displayPath(rel)}' is not a directory`, meta, err);
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return new Fault("ACCESS_DENIED", `Access to '${displayPath(rel)}' was denied`, meta, err);
    case "ENOSPC":
    case "EDQUOT":
      return new Fault("RESOURCE_EXHAUSTED", `No space left in the workspace to write '${displayPath(rel)}'`, meta, err);
    case "ENAMETOOLONG":
      return new Fault("INVALID_ARGUMENT", `A component of '${printable(rel)}' is longer than ${MAX_NAME_BYTES} bytes`, meta, err);
    case "ELOOP":
      return new Fault("PATH_OUTSIDE_WORKSPACE", `'${displayPath(rel)}' changed into a symlink while in use`, meta, err);
    case "EINVAL":
      // gVisor answers EINVAL when a directory is renamed under an open through /proc/self/fd
      // (a command swapping it while a tool resolves through it): a race to retry, not a fault.
      return pathChanged(rel, "changed while it was in use", err);
    default:
      return writing ? new Fault("WRITE_FAILED", `Writing '${displayPath(rel)}' failed`, meta, err) : new Fault("INTERNAL", `Accessing '${displayPath(rel)}' failed`, meta, err);
  }
}

/** Where a path led: the directory that holds its final entry, open, and the entry itself. */
export interface Location {
  /** Descriptor of the directory holding the final entry (the root for the root itself). */
  dirFd: number;
  /** The final entry's name in that directory; "" for the root itself. */
  name: string;
  /** The canonical workspace-relative path of the final entry (symlinks inside followed). */
  rel: string;
  /** lstat of the final entry as found (a symlink when not followed), undefined when absent. */
  stat: Stats | undefined;
  /** Closes the descriptors the location holds (never the root's). Idempotent. */
  release(): void;
}

/** Options of `Jail.locate`. */
export interface LocateOptions {
  /** Follow a symlink in the final component (everything but delete). */
  followFinal: boolean;
  /** Create missing parent directories (mode 0755) on the way (write). */
  createParents?: boolean;
}

/** One workspace's root, open for the life of this object, and resolution beneath it. */
export class Jail {
  /** Descriptor of the workspace root. */
  readonly rootFd: number;
  /** The root's path as its own processes know it (the host directory, or /workspace). */
  readonly rootPath: string;

  /** Opens `rootPath`, which must be a directory (and is trusted: it is chosen by the server). */
  constructor(rootPath: string) {
    this.rootPath = rootPath;
    this.rootFd = openSync(rootPath, constants.O_RDONLY | constants.O_DIRECTORY);
  }

  /** Closes the root descriptor. */
  close(): void {
    closeSync(this.rootFd);
  }

  /** Maps an absolute symlink target into the workspace (the /workspace view, or the root's own path), or undefined. */
  #mapAbsolute(target: string): string | undefined {
    for (const base of new Set([WORKSPACE_ROOT, this.rootPath])) {
      if (target === base) return "";
      if (target.startsWith(`${base}/`)) return target.slice(base.length + 1);
    }
    return undefined;
  }

  /**
   * Resolves the workspace-relative path `rel` (already through `toWorkspacePath`) beneath the
   * root, as described at the top of this module. The caller must `release()` the result.
   */
  locate(rel: string, options: LocateOptions): Location {
    /** Directories opened below the root, in order; each descriptor is owned here until `finish`. */
    const dirs: Array<{ fd: number; name: string }> = [];
    const top = () => (dirs.length === 0 ? this.rootFd : dirs[dirs.length - 1].fd);
    const pathOf = (name: string) => [...dirs.map((d) => d.name), name].filter((n) => n !== "").join("/");
    const closeAll = () => {
      for (const d of dirs.splice(0)) closeSync(d.fd);
    };
    /** The location of `name` in the current directory; keeps only that directory's descriptor. */
    const finish = (name: string, stat: Stats | undefined): Location => {
      const canonical = pathOf(name);
      const keep = dirs.pop();
      closeAll();
      let released = false;
      return {
        dirFd: keep?.fd ?? this.rootFd,
        name,
        rel: canonical,
        stat,
        release: () => {
          if (released || keep === undefined) return;
          released = true;
          closeSync(keep.fd);
        },
      };
    };

    let pending = rel === "" ? [] : rel.split("/");
    let hops = 0;
    let retries = 0;
    const again = (name: string) => {
      if (++retries > MAX_RETRIES) throw pathChanged(rel, "kept changing while it was resolved");
      pending.unshift(name);
    };
    /**
     * True while the component about to be looked at is one this call just created (or found
     * created by someone else) with mkdir. Looking at it again then is the plan, not a race, and
     * costs no retry, so a path of any depth can be made; finding it missing again is a race.
     */
    let made = false;
    try {
      while (pending.length > 0) {
        const name = pending.shift() as string;
        const justMade = made;
        made = false;
        if (name === "" || name === ".") continue;
        if (name === "..") {
          if (dirs.length === 0) throw outside(rel);
          closeSync((dirs.pop() as { fd: number }).fd);
          continue;
        }
        checkName(name, rel);
        const last = pending.every((p) => p === "" || p === ".");
        /** A refusal here, with where it happened (a directory sealed by seal.ts, say). */
        const refused = (err: unknown) => {
          const f = faultOf(err, rel, false);
          if (f.reason === "ACCESS_DENIED") f.at = [pathOf(name), ...pending.filter((p) => p !== "" && p !== ".")].join("/");
          return f;
        };
        let st: Stats | undefined;
        try {
          st = lstatSync(at(top(), name));
        } catch (err) {
          if (errnoOf(err) !== "ENOENT") throw refused(err);
        }
        if (st === undefined) {
          if (last) return finish(name, undefined);
          if (!options.createParents) throw notFound(rel);
          try {
            mkdirSync(at(top(), name), 0o755);
          } catch (err) {
            if (errnoOf(err) !== "EEXIST") throw faultOf(err, rel, true);
          }
          if (justMade) again(name);
          else pending.unshift(name);
          made = true;
          continue;
        }
        if (st.isSymbolicLink() && (!last || options.followFinal)) {
          let target: string;
          try {
            target = readlinkSync(at(top(), name));
          } catch (err) {
            // Replaced since the lstat (EINVAL: no longer a link): look at it again.
            if (errnoOf(err) === "EINVAL" || errnoOf(err) === "ENOENT") {
              again(name);
              continue;
            }
            throw faultOf(err, rel, false);
          }
          if (++hops > MAX_SYMLINK_HOPS) {
            throw new Fault("INVALID_ARGUMENT", `Too many levels of symbolic links in '${displayPath(rel)}'`, { path: rel });
          }
          if (target.startsWith("/")) {
            const mapped = this.#mapAbsolute(target);
            if (mapped === undefined) throw outside(rel);
            closeAll();
            pending = [...mapped.split("/"), ...pending];
          } else {
            pending = [...target.split("/"), ...pending];
          }
          continue;
        }
        if (last) return finish(name, st);
        if (!st.isDirectory()) {
          throw new Fault("NOT_A_DIRECTORY", `'${displayPath(pathOf(name))}' is not a directory`, { path: pathOf(name) });
        }
        let fd: number;
        try {
          jailFaults.beforeOpenDir?.(pathOf(name));
          fd = openSync(at(top(), name), DIR_OPEN);
        } catch (err) {
          // ELOOP: it became a symlink since the lstat; ENOENT: it went away. Look again.
          if (errnoOf(err) === "ELOOP" || errnoOf(err) === "ENOENT") {
            again(name);
            continue;
          }
          throw refused(err);
        }
        const opened = fstatSync(fd);
        if (!opened.isDirectory() || opened.ino !== st.ino || opened.dev !== st.dev) {
          // Not the directory the lstat saw (swapped in between): look again.
          closeSync(fd);
          again(name);
          continue;
        }
        dirs.push({ fd, name });
      }
      // The path ended on a directory already open (the root, or one reached through ".." or a link).
      const final = dirs.pop();
      if (final === undefined) return finish("", fstatSync(this.rootFd));
      const st = fstatSync(final.fd);
      closeSync(final.fd);
      return finish(final.name, st);
    } catch (err) {
      closeAll();
      throw err;
    }
  }
}
