/**
 * The file operations of one workspace, on top of the jail: stat, read, atomic write, list,
 * remove, a directory walk, byte ranges, and a directory descriptor for a process's working
 * directory. The same code runs inside every sandbox (the executor, as the sandbox user) and in
 * the server for the local provider, so the answers are the same on every provider.
 *
 * Every operation resolves its path once with `Jail.locate` and then names the final entry only
 * by its parent's descriptor: a create, write-then-rename, mkdir or unlink cannot be redirected by
 * a link swapped in after the check, and files are opened with O_NOFOLLOW | O_NONBLOCK, so neither
 * a late symlink nor a FIFO can take over or block an open. FIFOs, sockets and devices are refused.
 *
 * Sensitive files (sensitive-files.ts) are refused here too, in the same step: the path asked for
 * and the canonical path it resolved to are both checked before anything is opened, so neither a
 * link to `.env` nor one swapped in mid-call reaches its bytes. Directories are never refused
 * (names may appear in listings; a virtualenv called `.env/` stays usable).
 */
import { randomBytes } from "node:crypto";
import {
  closeSync,
  type Dirent,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  type Stats,
  unlinkSync,
  fsyncSync,
  writeSync,
} from "node:fs";
import { Fault } from "./fault.ts";
import { at, DIR_OPEN, displayPath, errnoOf, faultOf, Jail, jailFaults, type Location, MAX_NAME_BYTES, notFound, pathChanged } from "./jail.ts";
import { type FileAccess, type FileGuard, guardFor } from "./sensitive-files.ts";
import type { DirEntry, EntryType, FileStat, FoundFile, ReadOutcome, WalkOptions } from "./types.ts";

/** Flags for opening a file to read: never through a symlink, never blocking on a FIFO. */
const FILE_READ = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
/** Largest total of byte ranges one `readRanges` call returns. */
export const MAX_RANGES_BYTES = 8 * 1024 * 1024;

function entryType(st: Stats): EntryType {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  if (st.isSymbolicLink()) return "symlink";
  return "other";
}

const info = (st: Stats): FileStat => ({ type: entryType(st), size: st.size, mtimeMs: st.mtimeMs });

export function isDirectory(rel: string, message = `'${displayPath(rel)}' is a directory`): Fault {
  return new Fault("IS_DIRECTORY", message, { path: rel });
}

function unsupported(rel: string): Fault {
  return new Fault("UNSUPPORTED_FILE_TYPE", `'${displayPath(rel)}' is not a regular file (FIFO, socket or device)`, { path: rel });
}

export function notDirectory(rel: string, message = `'${displayPath(rel)}' is not a directory`): Fault {
  return new Fault("NOT_A_DIRECTORY", message, { path: rel });
}

/** True when `name` in the directory open as `fd` is a directory (not following a symlink). */
function isDirectoryAt(fd: number, name: string): boolean {
  try {
    return lstatSync(at(fd, name)).isDirectory();
  } catch {
    return false;
  }
}

/** An atomic replacement in progress: bytes go to a temporary file that `commit` renames into place. */
export interface PendingWrite {
  /** True when the file did not exist before. */
  readonly created: boolean;
  /** Appends bytes to the new content. */
  write(chunk: Uint8Array): void;
  /** Puts the new content in place (rename in the same directory): readers see old or new, never a mix. */
  commit(): void;
  /** Drops the new content; the old file is untouched. */
  abort(): void;
}

/** SENSITIVE_FILE for `rel`: names the path and the rule, never the file's content or size. */
export function sensitive(rel: string, list: "deny" | "write_protected", pattern: string): Fault {
  const what = list === "deny" ? "is a sensitive file: the tools never read or change it" : "is write-protected: the tools may read it but never change it";
  return new Fault("SENSITIVE_FILE", `'${displayPath(rel)}' ${what} (rule '${pattern}')`, { path: rel, rule: pattern, list });
}

/** The file operations of one workspace root. */
export class JailedFs {
  readonly jail: Jail;
  /**
   * The sensitive-file rules in force; the executor sets the rules of each request before running
   * it (synchronously, so no other request runs in between).
   */
  guard: FileGuard;

  /**
   * Writes and deletions reach the disk before they are answered (fsync of the file and of its
   * directory). For a sandbox whose page cache dies with it (a VM's guest kernel): there a write
   * the server confirmed must survive the sandbox being killed. Elsewhere the host's page cache
   * already outlives the sandbox, and the cost is left out.
   */
  readonly durable: boolean;

  constructor(jail: Jail, guard: FileGuard = guardFor(), options: { durable?: boolean } = {}) {
    this.jail = jail;
    this.guard = guard;
    this.durable = options.durable === true;
  }

  /** Refuses `path` (as asked, or as resolved) when the rules forbid `access` to it. */
  #check(path: string, access: FileAccess): void {
    const hit = this.guard.check(path, access);
    if (hit !== undefined) throw sensitive(path, hit.list, hit.pattern);
  }

  /** Refuses a located entry that is not a directory, by its canonical path. */
  #checkFound(loc: Location, access: FileAccess): void {
    if (loc.stat?.isDirectory()) return;
    this.#check(loc.rel, access);
  }

  /**
   * Runs `fn` on the location of `rel`, releasing it afterwards and translating system errors. A
   * path that does not exist (or whose parent does not) is refused as sensitive when its name is:
   * whether a sensitive file exists is not for the caller to learn either.
   */
  #at<T>(rel: string, options: { followFinal: boolean; createParents?: boolean }, writing: boolean, fn: (loc: Location) => T): T {
    let loc: Location | undefined;
    try {
      loc = this.jail.locate(rel, options);
      return fn(loc);
    } catch (err) {
      const fault = faultOf(err, rel, writing);
      const access = writing ? "write" : "read";
      if (fault.reason === "FILE_NOT_FOUND" || fault.reason === "NOT_A_DIRECTORY" || fault.reason === "ACCESS_DENIED") this.#check(rel, access);
      // The kernel refused the way through a sealed tree (seal.ts): the rules say why, by the path reached.
      if (fault.reason === "ACCESS_DENIED" && fault.at !== undefined) {
        this.#check(fault.at, access);
        const tree = this.guard.checkTree(fault.at, access);
        if (tree !== undefined) throw sensitive(fault.at, tree.list, tree.pattern);
      }
      throw fault;
    } finally {
      loc?.release();
    }
  }

  /**
   * Opens the directory at `loc` (the root itself when its name is ""), checking it is the one
   * the lookup saw. The caller closes the descriptor unless it is the root's.
   */
  #openDir(loc: Location, rel: string): number {
    if (loc.stat === undefined) throw notFound(rel);
    if (!loc.stat.isDirectory()) throw notDirectory(rel);
    if (loc.name === "") return this.jail.rootFd;
    jailFaults.beforeOpenDir?.(loc.rel);
    const fd = openSync(at(loc.dirFd, loc.name), DIR_OPEN);
    const st = fstatSync(fd);
    if (!st.isDirectory() || st.ino !== loc.stat.ino || st.dev !== loc.stat.dev) {
      closeSync(fd);
      throw pathChanged(rel, "changed while it was opened");
    }
    return fd;
  }

  #closeDir(fd: number): void {
    if (fd !== this.jail.rootFd) closeSync(fd);
  }

  /** Opens the regular file at `loc` for reading; IS_DIRECTORY / UNSUPPORTED_FILE_TYPE otherwise. */
  #openFile(loc: Location, rel: string): { fd: number; st: Stats } {
    if (loc.stat === undefined) throw notFound(rel);
    if (loc.stat.isDirectory()) throw isDirectory(rel);
    if (!loc.stat.isFile()) throw unsupported(rel);
    const fd = openSync(at(loc.dirFd, loc.name), FILE_READ);
    const st = fstatSync(fd);
    if (!st.isFile()) {
      closeSync(fd);
      throw st.isDirectory() ? isDirectory(rel) : unsupported(rel);
    }
    return { fd, st };
  }

  /**
   * The canonical workspace-relative form of a path: symlinks inside the workspace followed,
   * PATH_OUTSIDE_WORKSPACE if any leaves it. The entry need not exist.
   */
  resolve(rel: string): string {
    return this.#at(rel, { followFinal: true }, false, (loc) => loc.rel);
  }

  /** Stats a path, following symlinks that stay inside. FILE_NOT_FOUND if absent. */
  stat(rel: string): FileStat {
    return this.#at(rel, { followFinal: true }, false, (loc) => {
      if (loc.stat === undefined) {
        this.#check(rel, "read");
        throw notFound(rel);
      }
      if (!loc.stat.isDirectory()) {
        this.#check(rel, "read");
        this.#checkFound(loc, "read");
      }
      return info(loc.stat);
    });
  }

  /**
   * Reads a regular file whole. IS_DIRECTORY for directories, UNSUPPORTED_FILE_TYPE for FIFOs,
   * sockets and devices (never opened in a way that could block), FILE_TOO_LARGE past maxBytes.
   */
  readFile(rel: string, maxBytes: number): Buffer {
    this.#check(rel, "read");
    return this.#at(rel, { followFinal: true }, false, (loc) => {
      this.#checkFound(loc, "read");
      return this.#readBody(loc, rel, maxBytes);
    });
  }

  /**
   * What ReadFile shows in one resolution: a regular file's bytes (as `readFile`), or a
   * directory's entry names, each marked when it is a directory (a symlink is not). Faults name
   * the canonical path.
   */
  read(rel: string, maxBytes: number): ReadOutcome {
    return this.#at(rel, { followFinal: true }, false, (loc): ReadOutcome => {
      if (loc.stat === undefined) {
        // A sensitive name is refused whether or not it exists: the answer reveals nothing.
        this.#check(rel, "read");
        throw notFound(loc.rel);
      }
      if (!loc.stat.isDirectory()) {
        this.#check(rel, "read");
        this.#checkFound(loc, "read");
        const bytes = this.#readBody(loc, loc.rel, maxBytes);
        return { kind: "file", rel: loc.rel, size: bytes.length, bytes };
      }
      const fd = this.#openDir(loc, loc.rel);
      try {
        const entries = (readdirSync(at(fd), { withFileTypes: true }) as Dirent[]).map((d) => ({
          name: d.name,
          // Filesystems without d_type report "unknown": look at those one by one.
          directory: d.isDirectory() || (!d.isFile() && !d.isSymbolicLink() && !d.isFIFO() && !d.isSocket() && !d.isCharacterDevice() && !d.isBlockDevice() && isDirectoryAt(fd, d.name)),
        }));
        return { kind: "directory", rel: loc.rel, size: loc.stat.size, entries };
      } finally {
        this.#closeDir(fd);
      }
    });
  }

  /** The bytes of the regular file at `loc`, at most maxBytes. */
  #readBody(loc: Location, rel: string, maxBytes: number): Buffer {
    const { fd, st } = this.#openFile(loc, rel);
    try {
      if (st.size > maxBytes) {
        throw new Fault("FILE_TOO_LARGE", `'${displayPath(rel)}' is ${st.size} bytes, more than the ${maxBytes} this tool reads`, {
          path: rel,
          size: String(st.size),
          max_bytes: String(maxBytes),
        });
      }
      // Read to EOF (the file may grow between fstat and read), never past maxBytes + 1. The first
      // read asks for one byte more than fstat's size: when it brings exactly that size, the file
      // ended there and no second read is needed (a filesystem that reads short mid-file brings
      // less, and the loop goes on).
      const chunks: Buffer[] = [];
      let total = 0;
      let want = Math.min(st.size + 1, maxBytes + 1);
      for (;;) {
        const buf = Buffer.allocUnsafe(Math.max(1, Math.min(want, maxBytes + 1 - total)));
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) break;
        chunks.push(buf.subarray(0, n));
        total += n;
        if (total > maxBytes) {
          throw new Fault("FILE_TOO_LARGE", `'${displayPath(rel)}' is more than the ${maxBytes} bytes this tool reads`, { path: rel, max_bytes: String(maxBytes) });
        }
        if (chunks.length === 1 && n === st.size && n < buf.length) break;
        want = 64 * 1024;
      }
      return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Starts replacing `rel` atomically, creating parent directories: the content goes to a
   * temporary file beside it, which `commit` renames over the old file (keeping its mode). A
   * symlink inside the workspace is written through to its target. IS_DIRECTORY for a directory,
   * UNSUPPORTED_FILE_TYPE for a FIFO, socket or device.
   */
  beginWrite(rel: string): PendingWrite {
    if (rel === "") throw isDirectory(rel, "'.' is a directory");
    this.#check(rel, "write");
    let loc: Location | undefined;
    let fd: number | undefined;
    let tmp = "";
    try {
      loc = this.jail.locate(rel, { followFinal: true, createParents: true });
      this.#checkFound(loc, "write");
      let mode = 0o644;
      let created = true;
      if (loc.stat !== undefined) {
        if (loc.stat.isDirectory()) throw isDirectory(rel);
        if (!loc.stat.isFile()) throw unsupported(rel);
        mode = loc.stat.mode & 0o7777;
        created = false;
      }
      const suffix = `.aw-${randomBytes(6).toString("hex")}.tmp`;
      tmp = Buffer.byteLength(loc.name) + suffix.length + 1 <= MAX_NAME_BYTES ? `.${loc.name}${suffix}` : suffix;
      fd = openSync(at(loc.dirFd, tmp), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
    } catch (err) {
      loc?.release();
      throw faultOf(err, rel, true);
    }
    const where = loc;
    const file = fd;
    let open = true;
    const finish = (commit: boolean) => {
      if (!open) return;
      open = false;
      try {
        if (commit) {
          fchmodSync(file, (where.stat?.mode ?? 0o644) & 0o7777);
          if (this.durable) fsyncSync(file);
          closeSync(file);
          renameSync(at(where.dirFd, tmp), at(where.dirFd, where.name));
          if (this.durable) fsyncSync(where.dirFd);
        } else {
          closeSync(file);
          unlinkSync(at(where.dirFd, tmp));
        }
      } catch (err) {
        if (commit) {
          try {
            unlinkSync(at(where.dirFd, tmp));
          } catch {
            // Already gone.
          }
        }
        throw faultOf(err, rel, true);
      } finally {
        where.release();
      }
    };
    return {
      created: where.stat === undefined,
      write: (chunk) => {
        try {
          for (let off = 0; off < chunk.length; ) off += writeSync(file, chunk, off, chunk.length - off);
        } catch (err) {
          const fault = faultOf(err, rel, true);
          try {
            finish(false);
          } catch {
            // The write's own error is the one to report.
          }
          throw fault;
        }
      },
      commit: () => finish(true),
      abort: () => finish(false),
    };
  }

  /** Replaces `rel` with `data` atomically (see `beginWrite`). */
  writeFile(rel: string, data: Uint8Array): { created: boolean } {
    const w = this.beginWrite(rel);
    w.write(data);
    w.commit();
    return { created: w.created };
  }

  /**
   * A directory's entries (unsorted), symlinks not followed, with the directory's canonical path.
   * NOT_A_DIRECTORY for files; faults name the canonical path.
   */
  list(rel: string, namesOnly = false): { rel: string; entries: DirEntry[] } {
    return this.#at(rel, { followFinal: true }, false, (loc) => {
      const fd = this.#openDir(loc, loc.rel);
      try {
        const entries: DirEntry[] = [];
        if (namesOnly) {
          // The directory's own record of each entry's type: no lstat per entry.
          for (const d of readdirSync(at(fd), { withFileTypes: true })) {
            entries.push({ name: d.name, type: d.isFile() ? "file" : d.isDirectory() ? "directory" : d.isSymbolicLink() ? "symlink" : "other", size: 0, mtimeMs: 0 });
          }
          return { rel: loc.rel, entries };
        }
        for (const name of readdirSync(at(fd))) {
          try {
            entries.push({ name, ...info(lstatSync(at(fd, name))) });
          } catch (err) {
            // An entry removed between readdir and lstat is simply not listed.
            if (errnoOf(err) !== "ENOENT") throw err;
          }
        }
        return { rel: loc.rel, entries };
      } finally {
        this.#closeDir(fd);
      }
    });
  }

  /** Removes a file or symlink (never its target, never a directory: IS_DIRECTORY). */
  remove(rel: string): void {
    if (rel === "") throw isDirectory(rel, "'.' is a directory");
    this.#check(rel, "write");
    this.#at(rel, { followFinal: false }, true, (loc) => {
      if (loc.stat === undefined) throw notFound(rel);
      this.#checkFound(loc, "write");
      if (loc.stat.isDirectory()) throw isDirectory(rel, `'${displayPath(rel)}' is a directory; DeleteFile deletes files only`);
      unlinkSync(at(loc.dirFd, loc.name));
      if (this.durable) fsyncSync(loc.dirFd);
    });
  }

  /**
   * Every regular file below the directory `base`, depth first: in each directory its files by
   * name descending, then its subdirectories by name ascending. Symlinks are never entered, and
   * each subdirectory is opened from its parent's descriptor, so a walk cannot leave the
   * workspace, loop, or be redirected mid-way. Unreadable or vanished subdirectories are skipped.
   * With `options.all` every entry is reported (a directory just before its contents, a symlink as
   * itself); directories named in `options.prune` are not entered. Only metadata is read.
   */
  *walk(base: string, options: WalkOptions = {}): Generator<FoundFile> {
    const { fd, rel } = this.#at(base, { followFinal: true }, false, (loc) => ({ fd: this.#openDir(loc, base), rel: loc.rel }));
    yield* this.#walkDir(fd, rel, options.all === true, new Set(options.prune));
  }

  *#walkDir(fd: number, prefix: string, all: boolean, prune: ReadonlySet<string>): Generator<FoundFile> {
    const join = (name: string) => (prefix === "" ? name : `${prefix}/${name}`);
    const subdirs: Array<{ name: string; st: Stats }> = [];
    try {
      let names: string[];
      try {
        names = readdirSync(at(fd));
      } catch {
        return;
      }
      names.sort((a, b) => (a < b ? 1 : a > b ? -1 : 0));
      for (const name of names) {
        let st: Stats;
        try {
          st = lstatSync(at(fd, name));
        } catch {
          continue;
        }
        if (st.isDirectory()) subdirs.push({ name, st });
        else if (st.isFile()) yield { path: join(name), name, type: "file", size: st.size, mtimeMs: st.mtimeMs };
        else if (all) yield { path: join(name), name, ...info(st) };
      }
      for (const { name, st } of subdirs.reverse()) {
        if (all) yield { path: join(name), name, type: "directory", size: st.size, mtimeMs: st.mtimeMs };
        if (prune.has(name)) continue;
        let child: number;
        try {
          child = openSync(at(fd, name), DIR_OPEN);
        } catch {
          continue;
        }
        const opened = fstatSync(child);
        if (!opened.isDirectory() || opened.ino !== st.ino) {
          closeSync(child);
          continue;
        }
        yield* this.#walkDir(child, join(name), all, prune);
      }
    } finally {
      this.#closeDir(fd);
    }
  }

  /**
   * Bytes of a regular file at the given [offset, length] ranges (shorter at end of file), at
   * most MAX_RANGES_BYTES in total. Used to check what a search reported against the file the
   * workspace really holds at that path.
   */
  readRanges(rel: string, ranges: Array<[number, number]>): Buffer[] {
    const total = ranges.reduce((sum, [, len]) => sum + len, 0);
    if (total > MAX_RANGES_BYTES || ranges.some(([off, len]) => !Number.isSafeInteger(off) || !Number.isSafeInteger(len) || off < 0 || len < 0)) {
      throw new Fault("INVALID_ARGUMENT", `Byte ranges of '${displayPath(rel)}' are invalid or exceed ${MAX_RANGES_BYTES} bytes`, { path: rel });
    }
    this.#check(rel, "read");
    return this.#at(rel, { followFinal: true }, false, (loc) => {
      this.#checkFound(loc, "read");
      const { fd } = this.#openFile(loc, rel);
      try {
        return ranges.map(([off, len]) => {
          const buf = Buffer.allocUnsafe(len);
          let got = 0;
          while (got < len) {
            const n = readSync(fd, buf, got, len - got, off + got);
            if (n === 0) break;
            got += n;
          }
          return buf.subarray(0, got);
        });
      } finally {
        closeSync(fd);
      }
    });
  }

  /**
   * A new descriptor of the directory `rel` (for a process's working directory: a process started
   * in `/proc/self/fd/<fd>` lands in that very directory, never one swapped in by name). The
   * caller closes it.
   */
  openDirectory(rel: string): number {
    return this.#at(rel, { followFinal: true }, false, (loc) => {
      const fd = this.#openDir(loc, rel);
      // A second descriptor of the root: through its own magic link, which must be followed.
      return fd === this.jail.rootFd ? openSync(at(fd), constants.O_RDONLY | constants.O_DIRECTORY) : fd;
    });
  }

  /**
   * `openDirectory`, except that the root is the jail's own descriptor, not a new one: the caller
   * closes the descriptor only when it is not `rootFd` (and never keeps the root's past the jail).
   */
  openDirectoryOrRoot(rel: string): number {
    return this.#at(rel, { followFinal: true }, false, (loc) => this.#openDir(loc, rel));
  }

  /** The jail's own descriptor of the root. */
  get rootFd(): number {
    return this.jail.rootFd;
  }
}
