/**
 * The workspace jail: the single place that decides whether a path names something inside a
 * workspace. Every tool path goes through `toWorkspacePath` (lexical: "..", absolute paths, NUL
 * bytes) and every host filesystem access goes through `resolveOnHost` (symlinks, including
 * dangling ones and symlinked parents). A path the jail rejects is never opened.
 *
 * Tools see a workspace as `/workspace`; absolute symlink targets are read in that view, so a
 * link to `/workspace/src` works on every provider while a link to `/etc/passwd` is refused on
 * every provider, whether the link was made by a tool or by a command inside a container.
 */
import { lstat, readlink, realpath } from "node:fs/promises";
import path from "node:path";
import { DomainError, errnoCode } from "../core/errors.ts";

/** The path tools and commands see as the workspace root, on every provider. */
export const WORKSPACE_ROOT = "/workspace";

/** Longest path accepted, in characters (Linux PATH_MAX). */
const MAX_PATH_LENGTH = 4096;
/** Symlinks followed while resolving one path before giving up (Linux uses 40 too). */
const MAX_SYMLINK_HOPS = 40;

function outside(input: string): DomainError {
  return new DomainError("PATH_OUTSIDE_WORKSPACE", `Path '${printable(input)}' is outside the workspace`, {
    metadata: { path: printable(input) },
  });
}

/** The input with control characters escaped, safe to put in a message. */
function printable(input: string): string {
  const shown = input.length > 200 ? `${input.slice(0, 200)}…` : input;
  return shown.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

/**
 * Lexically resolves a caller's path to a workspace-relative POSIX path: "" for the root,
 * otherwise "a/b" with no ".", ".." or empty components. Accepts paths relative to the workspace
 * and absolute paths under /workspace. Throws PATH_OUTSIDE_WORKSPACE for NUL bytes, absolute
 * paths elsewhere and ".." that climbs above the root (even if it would come back down).
 */
export function toWorkspacePath(input: string): string {
  if (input.length > MAX_PATH_LENGTH) {
    throw new DomainError("INVALID_ARGUMENT", `Path is longer than ${MAX_PATH_LENGTH} characters`);
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
    parts.push(part);
  }
  return parts.join("/");
}

/** The caller-facing form of a workspace-relative path: "." for the root. */
export function displayPath(rel: string): string {
  return rel === "" ? "." : rel;
}

/** Result of resolving a workspace path on the host. */
export interface HostResolution {
  /** Absolute host path with every existing component free of symlinks. */
  hostPath: string;
  /** The same location relative to the workspace root ("" for the root). */
  rel: string;
  /** False when the final component (or a parent) does not exist yet. */
  exists: boolean;
}

/**
 * Resolves a jailed workspace path against the workspace's host directory, following symlinks
 * the way the kernel would but inside the workspace view: relative targets stay relative to the
 * link, absolute targets under /workspace (or under the host root itself) are mapped into the
 * root, and any target that leaves the root, existing or dangling, throws PATH_OUTSIDE_WORKSPACE.
 * With `followFinal` false the last component is returned as is, even when it is a symlink (for
 * delete, which must remove the link and never its target).
 *
 * `rootReal` must be the realpath of the workspace directory.
 */
export async function resolveOnHost(rootReal: string, rel: string, followFinal: boolean): Promise<HostResolution> {
  const resolved: string[] = [];
  let pending = rel === "" ? [] : rel.split("/");
  let hops = 0;
  let exists = true;
  while (pending.length > 0) {
    const name = pending.shift() as string;
    if (name === "" || name === ".") continue;
    if (name === "..") {
      if (resolved.length === 0) throw outside(rel);
      resolved.pop();
      continue;
    }
    if (!exists) {
      resolved.push(name);
      continue;
    }
    const candidate = path.join(rootReal, ...resolved, name);
    let isLink = false;
    try {
      const st = await lstat(candidate);
      if (!st.isDirectory() && !st.isSymbolicLink() && pending.some((p) => p !== "" && p !== ".")) {
        throw new DomainError("NOT_A_DIRECTORY", `'${displayPath([...resolved, name].join("/"))}' is not a directory`, {
          metadata: { path: [...resolved, name].join("/") },
        });
      }
      isLink = st.isSymbolicLink();
    } catch (err) {
      if (err instanceof DomainError) throw err;
      const code = errnoCode(err);
      if (code === "ENOENT") {
        exists = false;
        resolved.push(name);
        continue;
      }
      if (code === "ENOTDIR") {
        throw new DomainError("NOT_A_DIRECTORY", `A parent of '${displayPath(rel)}' is not a directory`, {
          metadata: { path: rel },
        });
      }
      throw err;
    }
    if (isLink && (pending.length > 0 || followFinal)) {
      if (++hops > MAX_SYMLINK_HOPS) {
        throw new DomainError("INVALID_ARGUMENT", `Too many levels of symbolic links in '${displayPath(rel)}'`, {
          metadata: { path: rel },
        });
      }
      const target = await readlink(candidate);
      if (target.startsWith("/")) {
        pending = [...mapAbsoluteTarget(rootReal, target, rel).split("/"), ...pending];
        resolved.length = 0;
      } else {
        pending = [...target.split("/"), ...pending];
      }
      continue;
    }
    resolved.push(name);
  }
  return { hostPath: path.join(rootReal, ...resolved), rel: resolved.join("/"), exists };
}

/** Maps an absolute symlink target into the workspace, or throws PATH_OUTSIDE_WORKSPACE. */
function mapAbsoluteTarget(rootReal: string, target: string, rel: string): string {
  if (target === rootReal || target.startsWith(`${rootReal}/`)) return target.slice(rootReal.length);
  if (target === WORKSPACE_ROOT || target.startsWith(`${WORKSPACE_ROOT}/`)) return target.slice(WORKSPACE_ROOT.length);
  throw outside(rel);
}

/**
 * Verifies that an opened file descriptor really lies inside the root, closing the window
 * between resolution and open (a symlink swapped in by a concurrent command). Linux only:
 * reads /proc/self/fd.
 */
export async function assertFdInside(rootReal: string, fd: number, rel: string): Promise<void> {
  const actual = await realpath(`/proc/self/fd/${fd}`);
  if (actual !== rootReal && !actual.startsWith(`${rootReal}/`)) throw outside(rel);
}

/** Throws PATH_OUTSIDE_WORKSPACE unless `hostPath`'s realpath lies inside the root. */
export async function assertRealInside(rootReal: string, hostPath: string, rel: string): Promise<void> {
  const actual = await realpath(hostPath);
  if (actual !== rootReal && !actual.startsWith(`${rootReal}/`)) throw outside(rel);
}
