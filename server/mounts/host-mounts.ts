/**
 * Host mounts: files copied from the server's host into a workspace when it is made (seed 001's
 * `HostMount`), on every provider, through the workspace's own file primitives.
 *
 * The host side is read through the same jail the tools use for workspaces (providers/executor/
 * jail.ts), rooted at the allowed root that holds the mount: every path is resolved one component
 * at a time from an open descriptor of that root, and a link is followed (only with
 * follow_symlinks) only while its target stays inside it. So:
 *
 * - `host_path` must lie in an allowed root, compared as canonical paths on whole segments
 *   (`/data/repo` never admits `/data/repo-secrets`); `..` segments are refused outright; with no
 *   roots configured, every mount is refused;
 * - a mount is planned in full (every file and its size) before anything is copied, so one over
 *   its byte limit fails as a whole, and a copy that fails midway fails the workspace's creation,
 *   which removes the workspace: no half-copied tree is ever left;
 * - files are read at copy time through the jail again, each bounded by what is left of the
 *   limit, so a file swapped or grown after planning can neither escape nor overrun it;
 * - sensitive files of the server's lists (and the agent type's) are skipped, and FIFOs, sockets
 *   and devices are never opened.
 */
import { realpathSync } from "node:fs";
import { realpath } from "node:fs/promises";
import path from "node:path";
import picomatch from "picomatch";
import { DomainError, hasReason } from "../../core/errors.ts";
import { Jail, toWorkspacePath } from "../../providers/executor/jail.ts";
import { Fault } from "../../providers/executor/fault.ts";
import { JailedFs } from "../../providers/executor/jailed-fs.ts";
import { toDomainError } from "../../providers/faults.ts";
import { type FileRules, guardFor } from "../../providers/executor/sensitive-files.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";

/** A mount as requested (HostMount in the API). */
export interface HostMount {
  hostPath: string;
  mountPath: string;
  includeGlob: string[];
  excludeGlob: string[];
  maxBytes: number;
  followSymlinks: boolean;
}

/** A mount from the API's message (CreateWorkspace, StartSession, an agent type's configuration). */
export function mountFromProto(m: { hostPath: string; mountPath: string; includeGlob: string[]; excludeGlob: string[]; maxBytes: bigint; followSymlinks: boolean }): HostMount {
  return { hostPath: m.hostPath, mountPath: m.mountPath, includeGlob: [...m.includeGlob], excludeGlob: [...m.excludeGlob], maxBytes: Number(m.maxBytes), followSymlinks: m.followSymlinks };
}

/** What a mount copied and skipped (MountPreview in the API). */
export interface MountPreview {
  hostPath: string;
  mountPath: string;
  filesCopied: number;
  bytesCopied: number;
  skipped: Array<{ path: string; reason: "symlink" | "outside_roots" | "sensitive" | "write_protected" | "not_regular" | "not_text" | "too_long" | "path_not_supported" }>;
  skippedTruncated: boolean;
}

/** The server's side of mounts. */
export interface MountSettings {
  /** Canonical absolute directories mounts may come from; empty refuses every mount. */
  allowedRoots: string[];
  /** The most one mount may copy, and the ceiling of a request's max_bytes. */
  maxBytes: number;
}

/** Most mounts one workspace may have; most files one mount may copy. */
const MAX_MOUNTS = 32;
const MAX_FILES = 100_000;
const MAX_SKIPS_LISTED = 200;

const notAllowed = (hostPath: string, field: string, why: string) =>
  new DomainError("HOST_PATH_NOT_ALLOWED", `Host path '${hostPath.slice(0, 300)}' cannot be mounted: ${why}`, { metadata: { host_path: hostPath.slice(0, 300), field } });

/** Resolves the allowed roots at start: each must exist; kept canonical. */
export async function canonicalRoots(roots: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const r of roots) out.push(await realpath(r));
  return [...new Set(out)];
}

/** One file to copy: where it is below the root, where it goes, how big it was when planned. */
interface PlannedFile {
  rel: string;
  /** Its path relative to host_path (what a skip names). */
  within: string;
  target: string;
  size: number;
}

/** A checked mount, ready to copy. */
interface Plan {
  preview: MountPreview;
  root: string;
  files: PlannedFile[];
  limit: number;
}

/** The canonical root holding `canonical`, on whole segments, or undefined. */
function rootOf(canonical: string, roots: string[]): string | undefined {
  return roots.find((r) => canonical === r || canonical.startsWith(r === "/" ? "/" : `${r}/`));
}

/**
 * Why an agent type's mount could never be copied on this server, or undefined: checked when the
 * agent type is saved, so a mount outside the allowed roots is refused there and not first at a
 * session's provisioning. `roots` are canonical. A path that does not exist yet is judged by its
 * nearest existing parent (a link there counts); provisioning checks everything again, since the
 * host may change in between.
 */
export function mountRootProblem(hostPath: string, followSymlinks: boolean, roots: readonly string[]): string | undefined {
  if (roots.length === 0) return "this server allows no host mounts (AGENT_WORKSPACE_ALLOWED_HOST_ROOTS is not set)";
  const lexical = path.resolve(roots[0], hostPath);
  let existing = lexical;
  let rest = "";
  let canonical: string | undefined;
  while (canonical === undefined) {
    try {
      canonical = path.join(realpathSync(existing), rest);
    } catch {
      if (existing === path.dirname(existing)) return undefined;
      rest = path.join(path.basename(existing), rest);
      existing = path.dirname(existing);
    }
  }
  if (rootOf(canonical, [...roots]) === undefined) return `it is not inside an allowed root (${roots.join(", ")})`;
  if (canonical !== lexical && !followSymlinks) return "it goes through a symbolic link (set follow_symlinks to follow links inside the allowed roots)";
  return undefined;
}

/** Checks `mounts` against the settings without touching the host beyond resolving paths. */
export function checkMounts(mounts: HostMount[], settings: MountSettings, field: string): void {
  if (mounts.length > MAX_MOUNTS) throw new DomainError("INVALID_ARGUMENT", `At most ${MAX_MOUNTS} mounts per workspace`, { metadata: { field } });
  mounts.forEach((m, i) => {
    const f = `${field}[${i}]`;
    if (settings.allowedRoots.length === 0) throw notAllowed(m.hostPath, `${f}.host_path`, "this server allows no host mounts (AGENT_WORKSPACE_ALLOWED_HOST_ROOTS is not set)");
    if (m.hostPath.trim() === "" || m.hostPath.includes("\0")) throw new DomainError("INVALID_ARGUMENT", `${f}.host_path is required`, { metadata: { field: `${f}.host_path` } });
    if (m.hostPath.split("/").includes("..")) throw notAllowed(m.hostPath, `${f}.host_path`, "'..' segments are not allowed");
    if (m.maxBytes < 0) throw new DomainError("INVALID_ARGUMENT", `${f}.max_bytes must not be negative`, { metadata: { field: `${f}.max_bytes` } });
    for (const g of [...m.includeGlob, ...m.excludeGlob]) {
      if (g.trim() === "" || g.length > 1024) throw new DomainError("INVALID_PATTERN", `${f}: glob patterns must be 1-1024 characters`, { metadata: { field: `${f}.include_glob` } });
    }
    mountTarget(m, f);
  });
}

/** The workspace path a mount goes to (its mount_path, else the host path's last segment). */
function mountTarget(m: HostMount, field: string): string {
  const wanted = m.mountPath.trim() !== "" ? m.mountPath : path.basename(m.hostPath);
  try {
    return toWorkspacePath(wanted);
  } catch {
    throw new DomainError("PATH_OUTSIDE_WORKSPACE", `${field}.mount_path '${wanted.slice(0, 200)}' leaves the workspace`, { metadata: { field: `${field}.mount_path`, path: wanted.slice(0, 200) } });
  }
}

/** Plans one mount: resolves and checks its host path, walks it, applies globs, sums the bytes. */
async function plan(m: HostMount, settings: MountSettings, rules: FileRules | undefined, field: string): Promise<Plan> {
  const lexical = path.resolve(settings.allowedRoots[0], m.hostPath);
  let canonical: string;
  try {
    canonical = await realpath(lexical);
  } catch {
    throw new DomainError("FILE_NOT_FOUND", `Host path '${m.hostPath.slice(0, 300)}' does not exist`, { metadata: { host_path: m.hostPath.slice(0, 300), field: `${field}.host_path` } });
  }
  const root = rootOf(canonical, settings.allowedRoots);
  if (root === undefined) throw notAllowed(m.hostPath, `${field}.host_path`, `it is not inside an allowed root (${settings.allowedRoots.join(", ")})`);
  if (canonical !== lexical && !m.followSymlinks) throw notAllowed(m.hostPath, `${field}.host_path`, "it goes through a symbolic link (set follow_symlinks to follow links inside the allowed roots)");
  const limit = m.maxBytes > 0 ? Math.min(m.maxBytes, settings.maxBytes) : settings.maxBytes;
  const target = mountTarget(m, field);
  const base = path.relative(root, canonical).split(path.sep).join("/");
  const include = m.includeGlob.length > 0 ? picomatch(m.includeGlob, { dot: true }) : () => true;
  const exclude = m.excludeGlob.length > 0 ? picomatch(m.excludeGlob, { dot: true }) : () => false;
  const preview: MountPreview = { hostPath: canonical, mountPath: target, filesCopied: 0, bytesCopied: 0, skipped: [], skippedTruncated: false };
  const skip = (p: string, reason: MountPreview["skipped"][number]["reason"]) => {
    // Only what the globs would have copied is worth a word.
    if (!include(p) || exclude(p)) return;
    if (preview.skipped.length < MAX_SKIPS_LISTED) preview.skipped.push({ path: p, reason });
    else preview.skippedTruncated = true;
  };
  const jail = new Jail(root);
  const fs = new JailedFs(jail, guardFor(rules));
  const files: PlannedFile[] = [];
  let total = 0;
  const tooLarge = () =>
    new DomainError("MOUNT_TOO_LARGE", `Host mount '${m.hostPath.slice(0, 300)}' holds more than its limit of ${limit} bytes; nothing was copied`, {
      metadata: { host_path: m.hostPath.slice(0, 300), limit_bytes: String(limit), field: `${field}.max_bytes` },
    });
  const add = (rel: string, within: string, size: number) => {
    if (!include(within) || exclude(within)) return;
    if (fs.guard.check(within, "read") !== undefined || fs.guard.check(rel, "read") !== undefined) return skip(within, "sensitive");
    const dest = within === "" ? target : target === "" ? within : `${target}/${within}`;
    // The workspace's write-protected files (git hooks and config, shell start-up files) are never
    // written by anyone but the sandbox's own programs, mounts included.
    if (fs.guard.check(dest, "write") !== undefined) return skip(within, "write_protected");
    total += size;
    if (total > limit) throw tooLarge();
    if (files.length >= MAX_FILES) throw new DomainError("MOUNT_TOO_LARGE", `Host mount '${m.hostPath.slice(0, 300)}' holds more than ${MAX_FILES} files`, { metadata: { host_path: m.hostPath.slice(0, 300) } });
    files.push({ rel, within, target: dest, size });
  };
  try {
    const top = fs.stat(base);
    if (top.type === "file") {
      add(base, "", top.size);
      // A single file mounts under its target name, whatever its globs say of "".
      if (files.length === 0 && fs.guard.check(base, "read") !== undefined) throw notAllowed(m.hostPath, `${field}.host_path`, "it is a sensitive file");
    } else if (top.type === "directory") {
      // Depth-first over directories, never entering one twice (links may form loops).
      const seen = new Set<string>();
      const walk = (dirRel: string, within: string) => {
        const { rel: canonicalDir, entries } = fs.list(dirRel);
        if (seen.has(canonicalDir)) return;
        seen.add(canonicalDir);
        for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
          const rel = dirRel === "" ? e.name : `${dirRel}/${e.name}`;
          const inner = within === "" ? e.name : `${within}/${e.name}`;
          let type = e.type;
          let size = e.size;
          if (type === "symlink") {
            if (!m.followSymlinks) {
              skip(inner, "symlink");
              continue;
            }
            try {
              const st = fs.stat(rel);
              type = st.type;
              size = st.size;
            } catch {
              skip(inner, "outside_roots");
              continue;
            }
          }
          if (type === "directory") walk(rel, inner);
          else if (type === "file") add(rel, inner, size);
          else skip(inner, "not_regular");
        }
      };
      walk(base, "");
    } else {
      throw notAllowed(m.hostPath, `${field}.host_path`, "it is neither a file nor a directory");
    }
  } catch (err) {
    throw err instanceof Fault ? toDomainError(err) : err;
  } finally {
    jail.close();
  }
  return { preview, root, files, limit };
}

/** Checked, walked mounts, ready to copy (`planMounts`). */
export type MountPlans = Plan[];

/**
 * Checks and walks every mount on the host, before anything is made: a mount that is refused or
 * too large fails here, with nothing created yet.
 */
export async function planMounts(mounts: HostMount[], settings: MountSettings, rules: FileRules | undefined, field = "mounts"): Promise<MountPlans> {
  if (mounts.length === 0) return [];
  checkMounts(mounts, settings, field);
  const plans: Plan[] = [];
  for (const [i, m] of mounts.entries()) plans.push(await plan(m, settings, rules, `${field}[${i}]`));
  return plans;
}

/** Writes kept in flight while a mount copies: each crosses the executor's channel, so they overlap. */
const WRITES_IN_FLIGHT = 8;
/** The most bytes read and not yet written at once. */
const BYTES_IN_FLIGHT = 32 * 1024 * 1024;

/** What became of one file's write. */
type Written = { ok: true; bytes: number } | { ok: false; skip: MountPreview["skipped"][number]["reason"] } | { ok: false; error: unknown };

/**
 * Copies planned mounts into the workspace. Throws on the first problem (in the files' order, once
 * every write in flight has settled); the caller removes the workspace then.
 */
export async function copyMounts(handle: WorkspaceHandle, plans: MountPlans, rules: FileRules | undefined): Promise<MountPreview[]> {
  for (const p of plans) {
    const jail = new Jail(p.root);
    const fs = new JailedFs(jail, guardFor(rules));
    const writes: Array<Promise<Written>> = [];
    const inFlight = new Set<Promise<unknown>>();
    let bytesInFlight = 0;
    let failed = false;
    try {
      let left = p.limit;
      for (const f of p.files) {
        // Read again through the jail: whatever the path is now, it is inside the root, a
        // regular file, and no larger than what is left of the limit.
        let bytes: Buffer;
        try {
          bytes = fs.readFile(f.rel, left);
        } catch (err) {
          failed = true;
          if (err instanceof Fault && err.reason === "FILE_TOO_LARGE") {
            writes.push(Promise.resolve({ ok: false, error: new DomainError("MOUNT_TOO_LARGE", `Host mount '${p.preview.hostPath}' grew past its limit of ${p.limit} bytes while it was copied`, { metadata: { host_path: p.preview.hostPath, limit_bytes: String(p.limit) } }) }));
          } else {
            writes.push(Promise.resolve({ ok: false, error: toDomainError(err) }));
          }
          break;
        }
        left -= bytes.length;
        while (inFlight.size >= WRITES_IN_FLIGHT || (inFlight.size > 0 && bytesInFlight + bytes.length > BYTES_IN_FLIGHT)) await Promise.race(inFlight);
        // A write failed while this one waited for its slot: the mount fails, write nothing more.
        if (failed) break;
        const size = bytes.length;
        bytesInFlight += size;
        const write: Promise<Written> = handle.fs.writeFile(f.target, bytes).then(
          (): Written => ({ ok: true, bytes: size }),
          (err: unknown): Written => {
            // What a workspace cannot hold (the memory provider: text only, its path and size rules)
            // is skipped with its reason; anything else fails the mount.
            const skip = hasReason(err, "BINARY_CONTENT") ? "not_text" : hasReason(err, "CONTENT_TOO_LONG") ? "too_long" : hasReason(err, "PATH_TOO_DEEP", "PATH_SEGMENT_TOO_LONG", "PATH_NOT_ASCII") ? "path_not_supported" : undefined;
            if (skip === undefined) failed = true;
            return skip === undefined ? { ok: false, error: err } : { ok: false, skip };
          },
        );
        const settled = write.then(() => {
          bytesInFlight -= size;
          inFlight.delete(settled);
        });
        inFlight.add(settled);
        writes.push(write);
        if (failed) break;
      }
      // Every write settles before the outcome is known: nothing still writes into a workspace
      // its caller is about to remove.
      const results = await Promise.all(writes);
      for (const [i, r] of results.entries()) {
        if (r.ok) {
          p.preview.filesCopied++;
          p.preview.bytesCopied += r.bytes;
        } else if ("skip" in r) {
          if (p.preview.skipped.length < MAX_SKIPS_LISTED) p.preview.skipped.push({ path: p.files[i].within, reason: r.skip });
          else p.preview.skippedTruncated = true;
        } else {
          throw r.error;
        }
      }
    } finally {
      jail.close();
    }
  }
  return plans.map((p) => p.preview);
}
