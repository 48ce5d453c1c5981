/**
 * WorkspaceFs over a directory of this host. The local provider uses it directly; container
 * providers use it on the host directory they bind-mount at /workspace, so file tools behave the
 * same on every provider and never pay for a round trip into the sandbox. Every access resolves
 * through the jail, and every opened descriptor is checked against the root again, so a symlink
 * swapped in by a concurrent command cannot redirect a read or write outside the workspace.
 */
import { constants, type Stats } from "node:fs";
import { chown, lstat, mkdir, open, opendir, rename, rm, stat, unlink } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { DomainError, errnoCode } from "../core/errors.ts";
import { assertFdInside, assertRealInside, displayPath, resolveOnHost } from "./jail.ts";
import type { DirEntry, EntryType, FileStat, WorkspaceFs } from "./types.ts";

/** Owner given to files and directories the server creates, so a non-root sandbox user can use them. */
export interface FileOwner {
  uid: number;
  gid: number;
}

function entryType(st: Stats): EntryType {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  if (st.isSymbolicLink()) return "symlink";
  return "other";
}

function notFound(rel: string): DomainError {
  return new DomainError("FILE_NOT_FOUND", `File not found: ${displayPath(rel)}`, { metadata: { path: rel } });
}

/** Translates an errno from the host filesystem into the domain's reasons. */
function fsError(err: unknown, rel: string, writing: boolean): unknown {
  if (err instanceof DomainError) return err;
  const meta = { metadata: { path: rel }, cause: err };
  switch (errnoCode(err)) {
    case "ENOENT":
      return notFound(rel);
    case "EISDIR":
      return new DomainError("IS_DIRECTORY", `'${displayPath(rel)}' is a directory`, meta);
    case "ENOTDIR":
      return new DomainError("NOT_A_DIRECTORY", `A parent of '${displayPath(rel)}' is not a directory`, meta);
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return new DomainError("ACCESS_DENIED", `Access to '${displayPath(rel)}' was denied`, meta);
    case "ENOSPC":
    case "EDQUOT":
      return new DomainError("RESOURCE_EXHAUSTED", `No space left in the workspace to write '${displayPath(rel)}'`, meta);
    case "ELOOP":
      return new DomainError("PATH_OUTSIDE_WORKSPACE", `'${displayPath(rel)}' changed into a symlink while in use`, meta);
    default:
      return writing ? new DomainError("WRITE_FAILED", `Writing '${displayPath(rel)}' failed`, meta) : err;
  }
}

/** A WorkspaceFs rooted at a host directory. */
export class HostDirectoryFs implements WorkspaceFs {
  readonly #root: string;
  readonly #owner: FileOwner | undefined;

  /** `rootReal` must already be a realpath; `owner` is applied to everything this class creates. */
  constructor(rootReal: string, owner?: FileOwner) {
    this.#root = rootReal;
    this.#owner = owner;
  }

  async resolve(rel: string): Promise<string> {
    try {
      return (await resolveOnHost(this.#root, rel, true)).rel;
    } catch (err) {
      throw fsError(err, rel, false);
    }
  }

  async stat(rel: string): Promise<FileStat> {
    try {
      const r = await resolveOnHost(this.#root, rel, true);
      if (!r.exists) throw notFound(rel);
      const st = await lstat(r.hostPath);
      return { type: entryType(st), size: st.size, mtimeMs: st.mtimeMs };
    } catch (err) {
      throw fsError(err, rel, false);
    }
  }

  async readFile(rel: string, maxBytes: number): Promise<Uint8Array> {
    try {
      const r = await resolveOnHost(this.#root, rel, true);
      if (!r.exists) throw notFound(rel);
      const pre = await lstat(r.hostPath);
      if (pre.isDirectory()) throw new DomainError("IS_DIRECTORY", `'${displayPath(rel)}' is a directory`, { metadata: { path: rel } });
      if (!pre.isFile()) throw unsupported(rel);
      // O_NONBLOCK: a FIFO swapped in after the lstat must not hang the call; O_NOFOLLOW: nor a symlink.
      const handle = await open(r.hostPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      try {
        await assertFdInside(this.#root, handle.fd, rel);
        const st = await handle.stat();
        if (!st.isFile()) throw unsupported(rel);
        if (st.size > maxBytes) {
          throw new DomainError("FILE_TOO_LARGE", `'${displayPath(rel)}' is ${st.size} bytes, more than the ${maxBytes} this tool reads`, {
            metadata: { path: rel, size: String(st.size), max_bytes: String(maxBytes) },
          });
        }
        return await handle.readFile();
      } finally {
        await handle.close();
      }
    } catch (err) {
      throw fsError(err, rel, false);
    }
  }

  async writeFile(rel: string, data: Uint8Array): Promise<{ created: boolean }> {
    if (rel === "") throw new DomainError("IS_DIRECTORY", "'.' is a directory", { metadata: { path: rel } });
    try {
      const r = await resolveOnHost(this.#root, rel, true);
      let mode = 0o644;
      let created = true;
      if (r.exists) {
        const st = await lstat(r.hostPath);
        if (st.isDirectory()) throw new DomainError("IS_DIRECTORY", `'${displayPath(rel)}' is a directory`, { metadata: { path: rel } });
        if (!st.isFile()) throw unsupported(rel);
        mode = st.mode & 0o7777;
        created = false;
      }
      const dir = path.dirname(r.hostPath);
      await this.#mkdirs(dir);
      await assertRealInside(this.#root, dir, rel);
      const tmp = path.join(dir, `.${path.basename(r.hostPath)}.aw-${randomBytes(6).toString("hex")}.tmp`);
      const handle = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
      try {
        try {
          await assertFdInside(this.#root, handle.fd, rel);
          await handle.writeFile(data);
          if (this.#owner) await handle.chown(this.#owner.uid, this.#owner.gid);
          await handle.chmod(mode);
        } finally {
          await handle.close();
        }
        await rename(tmp, r.hostPath);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
      return { created };
    } catch (err) {
      throw fsError(err, rel, true);
    }
  }

  async list(rel: string): Promise<DirEntry[]> {
    try {
      const r = await resolveOnHost(this.#root, rel, true);
      if (!r.exists) throw notFound(rel);
      const st = await stat(r.hostPath);
      if (!st.isDirectory()) {
        throw new DomainError("NOT_A_DIRECTORY", `'${displayPath(rel)}' is not a directory`, { metadata: { path: rel } });
      }
      const out: DirEntry[] = [];
      const dir = await opendir(r.hostPath, { bufferSize: 256 });
      for await (const dirent of dir) {
        try {
          const est = await lstat(path.join(r.hostPath, dirent.name));
          out.push({ name: dirent.name, type: entryType(est), size: est.size, mtimeMs: est.mtimeMs });
        } catch (err) {
          // An entry removed between readdir and lstat is simply not listed.
          if (errnoCode(err) !== "ENOENT") throw err;
        }
      }
      return out;
    } catch (err) {
      throw fsError(err, rel, false);
    }
  }

  async remove(rel: string): Promise<void> {
    if (rel === "") throw new DomainError("IS_DIRECTORY", "'.' is a directory", { metadata: { path: rel } });
    try {
      const r = await resolveOnHost(this.#root, rel, false);
      if (!r.exists) throw notFound(rel);
      const st = await lstat(r.hostPath);
      if (st.isDirectory()) {
        throw new DomainError("IS_DIRECTORY", `'${displayPath(rel)}' is a directory; DeleteFile deletes files only`, {
          metadata: { path: rel },
        });
      }
      await assertRealInside(this.#root, path.dirname(r.hostPath), rel);
      await unlink(r.hostPath);
    } catch (err) {
      throw fsError(err, rel, true);
    }
  }

  /** mkdir -p that gives each directory it creates to the workspace owner. */
  async #mkdirs(dir: string): Promise<void> {
    const first = await mkdir(dir, { recursive: true, mode: 0o755 });
    if (first === undefined || !this.#owner) return;
    // `first` is the topmost directory created; chown it and everything below it down to `dir`.
    for (let d = dir; d.length >= first.length; d = path.dirname(d)) {
      await chown(d, this.#owner.uid, this.#owner.gid);
      if (d === first) break;
    }
  }
}

function unsupported(rel: string): DomainError {
  return new DomainError("UNSUPPORTED_FILE_TYPE", `'${displayPath(rel)}' is not a regular file (FIFO, socket or device)`, {
    metadata: { path: rel },
  });
}
