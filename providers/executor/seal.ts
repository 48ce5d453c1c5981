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
 * commands) and seals both lists. `sweep` runs after every command and seals never-read files a
 * command left, so a later command cannot read what an earlier one wrote (a token a login command
 * stored); it re-reads only directories whose change time moved since the last sweep. A command
 * can of course keep a copy of what it could read while it ran: a sweep is hygiene, sealing at
 * placement is the boundary.
 *
 * Every step works from descriptors: directories are opened with O_NOFOLLOW relative to their
 * parent and checked to be the one just listed, and an entry is sealed through an O_PATH
 * descriptor, so a command swapping a name for a link while this runs redirects nothing. Imports
 * only node: modules: it runs inside sandboxes.
 */
import { chmodSync, chownSync, closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, type Stats } from "node:fs";
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
    this.#dir(this.#rootFd(), "", guard, mode, result, seen, undefined);
    // Directories gone since: their entries would otherwise be trusted if a new one took the name.
    for (const rel of this.#seen.keys()) if (!seen.has(rel)) this.#seen.delete(rel);
    return result;
  }

  #dir(fd: number, rel: string, guard: FileGuard, mode: "place" | "sweep", result: SealResult, seen: Set<string>, tree: "deny" | "write_protected" | undefined): void {
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
      let names: string[];
      try {
        names = this.#either(() => readdirSync(at(fd)));
      } catch {
        return;
      }
      result.listed++;
      for (const name of names) {
        let st: Stats;
        try {
          st = this.#either(() => lstatSync(at(fd, name)));
        } catch {
          continue;
        }
        const path = rel === "" ? name : `${rel}/${name}`;
        if (st.isDirectory()) subdirs.push(name);
        else if (st.isFile()) {
          const hit = tree === "deny" ? "deny" : guard.check(path, "read")?.list;
          if (hit === "deny") result.sealed += this.#seal(fd, name, SEALED.denyFile);
          else if (mode === "place" && (tree === "write_protected" || guard.check(path, "write")?.list === "write_protected")) {
            result.sealed += this.#seal(fd, name, st.mode & 0o111 ? 0o755 : 0o644);
          }
        }
      }
      // The listing is remembered as it was before this pass changed anything: sealing changes
      // the entries' ctimes, not the directory's.
      this.#seen.set(rel, { ino: Number(own.ino), ctimeNs: own.ctimeNs, subdirs });
    }
    for (const name of subdirs) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const child = this.#open(fd, name);
      if (child === undefined) continue;
      try {
        const inTree = tree ?? guard.checkTree(path, mode === "place" ? "write" : "read")?.list;
        if (inTree === "deny") result.sealed += this.#seal(fd, name, SEALED.denyDir);
        else if (inTree === "write_protected") result.sealed += this.#seal(fd, name, SEALED.protectedDir);
        this.#dir(child, path, guard, mode, result, seen, inTree);
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

  /** Makes entry `name` of `fd` root's with `mode`; 1 when that changed anything. */
  #seal(fd: number, name: string, mode: number): number {
    let entry: number;
    try {
      entry = this.#either(() => openSync(at(fd, name), O_PATH | constants.O_NOFOLLOW));
    } catch {
      return 0;
    }
    try {
      const st = fstatSync(entry);
      if (!st.isFile() && !st.isDirectory()) return 0;
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
