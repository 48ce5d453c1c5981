/**
 * Sealing: the sandbox's kernel, not a parser, keeps commands away from sensitive files. In a
 * sandbox the executor keeps real uid 0 (main.ts); a sealed file is owned by root, so the sandbox
 * user's commands meet the kernel's permission check whatever they call it (a glob, `$PWD/…`, a
 * hard link made earlier: a hard link is the same inode, sealed with it; a new one is refused by
 * the kernel's protected_hardlinks under runc and gives no access under gVisor).
 *
 * - never-read files (the deny list) become root's with mode 0600, and directories of a tree the
 *   list names whole (`.ssh/**`) root's with 0755: their names stay visible (the file tools list
 *   them too), nothing in them can be read, and nothing created, renamed or removed;
 * - write-protected files the server put in place become root's with 0644 (0755 when executable):
 *   readable, not writable; directories of a write-protected tree (`.git/hooks/**`) root's with
 *   0755: nothing can be created, renamed or removed in them. A single write-protected file in a
 *   directory the sandbox user owns can still be replaced by a rename; the parser refuses that where
 *   it can see it.
 *
 * `place` runs after the server put files in place (a clone, a checkout, host mounts, setup
 * commands) and seals both lists, in the whole workspace. `sweep` runs after every command and
 * seals never-read files a command left where programs store what they obtain: the workspace root
 * (the sandbox's HOME) and its first-level directories (a project's `.env`), and the credential
 * directories the rules name whole, at any depth (`.ssh`, `.aws`, `.config/gh`, …). It re-reads
 * only directories whose change time moved since the last sweep, so it costs a few system calls
 * when nothing changed, whatever the workspace's size. A command can of course keep a copy of what
 * it could read while it ran: a sweep is hygiene, sealing at placement is the boundary.
 *
 * Every step works from descriptors: directories are opened with O_NOFOLLOW relative to their
 * parent and checked to be the one just listed, and an entry is sealed through an O_PATH
 * descriptor, so a command swapping a name for a link while this runs redirects nothing. Imports
 * only node: modules: it runs inside sandboxes.
 */
import { chmodSync, chownSync, closeSync, constants, type Dirent, fstatSync, lstatSync, openSync, readdirSync, type Stats } from "node:fs";
import { at, DIR_OPEN } from "./jail.ts";
import type { FileGuard } from "./sensitive-files.ts";

/** open(2)'s O_PATH on Linux (Node does not export it): a descriptor that only names the entry. */
const O_PATH = 0o10000000;

/** Mode bits of a sealed entry. */
const SEALED = { denyFile: 0o600, denyDir: 0o755, protectedDir: 0o755 } as const;

/** What one pass did. */
export interface SealResult {
  /** Entries whose owner or mode changed. */
  sealed: number;
  /** Directories listed. */
  listed: number;
}

/** The state kept between sweeps: each directory's inode and change time when it was last listed, and its subdirectories. */
interface Seen {
  ino: number;
  ctimeNs: bigint;
  subdirs: string[];
}

/** Seals the sensitive files of one workspace root. */
export class Sealer {
  readonly #rootFd: () => number;
  readonly #privileged: <T>(fn: () => T) => T;
  readonly #seen = new Map<string, Seen>();

  /** `rootFd` is the jail's open root; `privileged` runs a step as root (main.ts). */
  constructor(rootFd: () => number, privileged: <T>(fn: () => T) => T) {
    this.#rootFd = rootFd;
    this.#privileged = privileged;
  }

  /** One pass over the workspace; see the module comment for `place` and `sweep`. */
  seal(guard: FileGuard, mode: "place" | "sweep"): SealResult {
    const result: SealResult = { sealed: 0, listed: 0 };
    const seen = new Set<string>();
    const root = this.#rootFd();
    if (mode === "place") {
      this.#dir(root, "", guard, mode, result, seen, undefined, Number.POSITIVE_INFINITY);
    } else {
      // The root (HOME) and its first-level directories, then the credential directories whole.
      this.#dir(root, "", guard, mode, result, seen, undefined, 1);
      for (const prefix of guard.credentialDirs()) {
        const parts = prefix.split("/");
        let fd = root;
        const opened: number[] = [];
        try {
          for (const part of parts) {
            const next = this.#open(fd, part);
            if (next === undefined) break;
            opened.push(next);
            fd = next;
          }
          if (opened.length === parts.length) this.#dir(fd, prefix, guard, mode, result, seen, guard.checkTree(prefix, "read")?.list, Number.POSITIVE_INFINITY);
        } finally {
          for (const o of opened) closeSync(o);
        }
      }
    }
    // Directories gone since, or not visited by this kind of pass, are listed afresh next time.
    for (const rel of this.#seen.keys()) if (!seen.has(rel)) this.#seen.delete(rel);
    return result;
  }

  #dir(fd: number, rel: string, guard: FileGuard, mode: "place" | "sweep", result: SealResult, seen: Set<string>, tree: "deny" | "write_protected" | undefined, depth: number): void {
    seen.add(rel);
    const own = fstatSync(fd, { bigint: true });
    const before = this.#seen.get(rel);
    let subdirs: string[];
    // A sweep trusts a directory unchanged since it was last listed (a new or renamed entry changes
    // its ctime, which no command can set back) and only descends into it.
    if (mode === "sweep" && before !== undefined && before.ino === Number(own.ino) && before.ctimeNs === own.ctimeNs) {
      subdirs = before.subdirs;
    } else {
      subdirs = [];
      let entries: Dirent[];
      try {
        entries = this.#either(() => readdirSync(at(fd), { withFileTypes: true }));
      } catch {
        return;
      }
      result.listed++;
      for (const entry of entries) {
        const name = entry.name;
        let isDir = entry.isDirectory();
        let isFile = entry.isFile();
        if (!isDir && !isFile && !entry.isSymbolicLink()) {
          // The filesystem did not say (DT_UNKNOWN): ask.
          try {
            const st = this.#either(() => lstatSync(at(fd, name)));
            isDir = st.isDirectory();
            isFile = st.isFile();
          } catch {
            continue;
          }
        }
        const path = rel === "" ? name : `${rel}/${name}`;
        if (isDir) subdirs.push(name);
        else if (isFile) {
          const hit = tree === "deny" ? "deny" : guard.check(path, "read")?.list;
          if (hit === "deny") result.sealed += this.#seal(fd, name, SEALED.denyFile);
          else if (mode === "place" && (tree === "write_protected" || guard.check(path, "write")?.list === "write_protected")) {
            result.sealed += this.#seal(fd, name, "keepExec");
          }
        }
      }
      // The listing is remembered as it was before this pass changed anything: sealing changes
      // the entries' ctimes, not the directory's.
      this.#seen.set(rel, { ino: Number(own.ino), ctimeNs: own.ctimeNs, subdirs });
    }
    for (const name of subdirs) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const inTree = tree ?? guard.checkTree(path, mode === "place" ? "write" : "read")?.list;
      // A sweep stops at its depth, but a tree the rules name is always sealed whole.
      if (depth <= 0 && inTree === undefined) continue;
      // The last level of a sweep, unchanged since it was listed: one stat, no descriptor.
      const known = this.#seen.get(path);
      if (mode === "sweep" && inTree === undefined && depth <= 1 && known !== undefined) {
        try {
          const st = this.#either(() => lstatSync(at(fd, name), { bigint: true }));
          if (st.isDirectory() && Number(st.ino) === known.ino && st.ctimeNs === known.ctimeNs) {
            seen.add(path);
            continue;
          }
        } catch {
          continue;
        }
      }
      const child = this.#open(fd, name);
      if (child === undefined) continue;
      try {
        if (inTree === "deny") result.sealed += this.#seal(fd, name, SEALED.denyDir);
        else if (inTree === "write_protected") result.sealed += this.#seal(fd, name, SEALED.protectedDir);
        this.#dir(child, path, guard, mode, result, seen, inTree, inTree === undefined ? depth - 1 : Number.POSITIVE_INFINITY);
      } finally {
        closeSync(child);
      }
    }
  }

  /**
   * Runs `fn` as the sandbox user, and again as root when that was refused: the sandbox user's
   * directories are the user's to read, sealed ones root's (root here has no capability to read
   * what it does not own).
   */
  #either<T>(fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code !== "EACCES" && code !== "EPERM") throw err;
      return this.#privileged(fn);
    }
  }

  /** Opens subdirectory `name` of `fd` without following a link, as the sandbox user or as root (a sealed one). */
  #open(fd: number, name: string): number | undefined {
    let st: Stats;
    let child: number;
    try {
      st = this.#either(() => lstatSync(at(fd, name)));
      if (!st.isDirectory()) return undefined;
      child = this.#either(() => openSync(at(fd, name), DIR_OPEN));
    } catch {
      return undefined;
    }
    const opened = fstatSync(child);
    if (!opened.isDirectory() || opened.ino !== st.ino || opened.dev !== st.dev) {
      closeSync(child);
      return undefined;
    }
    return child;
  }

  /** Makes entry `name` of `fd` root's with `mode` ("keepExec": 0644, or 0755 when executable); 1 when that changed anything. */
  #seal(fd: number, name: string, wanted: number | "keepExec"): number {
    let entry: number;
    try {
      entry = this.#either(() => openSync(at(fd, name), O_PATH | constants.O_NOFOLLOW));
    } catch {
      return 0;
    }
    try {
      const st = fstatSync(entry);
      if (!st.isFile() && !st.isDirectory()) return 0;
      const mode = wanted === "keepExec" ? (st.mode & 0o111 ? 0o755 : 0o644) : wanted;
      if (st.uid === 0 && st.gid === 0 && (st.mode & 0o7777) === mode) return 0;
      // Through the descriptor: the inode it names, whatever the name points at by now.
      this.#privileged(() => {
        chownSync(at(entry), 0, 0);
        chmodSync(at(entry), mode);
      });
      return 1;
    } catch {
      return 0;
    } finally {
      closeSync(entry);
    }
  }
}
