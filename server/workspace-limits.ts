/** Parsing of resource limit strings ("2", "0.5", "4G", "512M") into provider-neutral numbers. */
import { DomainError } from "../core/errors.ts";
import type { Limits } from "../providers/types.ts";

const SIZE = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)$/i;
const FACTORS: Record<string, number> = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/** Bytes from "4G", "512Mi", "1024"; throws INVALID_ARGUMENT naming `field`. */
export function parseSize(value: string, field: string): number {
  const m = SIZE.exec(value.trim());
  if (!m) throw new DomainError("INVALID_ARGUMENT", `${field} '${value.slice(0, 50)}' is not a size like 512M or 4G`, { metadata: { field } });
  return Math.round(Number(m[1]) * FACTORS[m[2].toLowerCase()]);
}

/** Cores from "2" or "0.5"; throws INVALID_ARGUMENT naming `field`. */
export function parseCpu(value: string, field: string): number {
  const n = Number(value.trim());
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0 || n > 1024) {
    throw new DomainError("INVALID_ARGUMENT", `${field} '${value.slice(0, 50)}' is not a positive number of cores`, { metadata: { field } });
  }
  return n;
}

/** Limits as strings, as they arrive in requests and server configuration. */
export interface LimitStrings {
  cpu: string;
  memory: string;
  disk: string;
  pids: number;
}

/**
 * The server's defaults when neither the request, its agent type nor WORKSPACE_DEFAULT_* say
 * otherwise: finite, so a workspace created with no limits cannot take its host down. 2 GiB of
 * memory and 2 cores run a typical build or test suite (npm install, tsc, pytest, cargo check) of
 * an agent's repository, yet leave a developer machine (8 to 16 GiB, 4 or more cores) usable
 * when one workspace runs away; 1024 processes allow parallel builds and stop a fork bomb long
 * before the host's pid space; 10 GiB of disk hold a repository with its dependencies, and cost
 * the host only what is written (the disk is a sparse image).
 */
export const DEFAULT_LIMITS: Readonly<LimitStrings> = { cpu: "2", memory: "2G", disk: "10G", pids: 1024 };

/** The smallest memory limit: below it the sandbox's own executor (a Node process) cannot run. */
export const MIN_MEMORY_BYTES = 64 * 1024 ** 2;
/** The smallest disk limit: an ext4 filesystem with its journal needs a few MiB of its own. */
export const MIN_DISK_BYTES = 16 * 1024 ** 2;

/** A size limit of a request or an agent type: at least `min` (never 0, which would read as "none"). */
export function sizeLimit(value: string, field: string, min: number): number {
  const bytes = parseSize(value, field);
  if (bytes < min) {
    throw new DomainError("INVALID_ARGUMENT", `${field} '${value.slice(0, 50)}' is below the minimum of ${formatSize(min)}; leave it empty for the server's default`, {
      metadata: { field, min: formatSize(min) },
    });
  }
  return bytes;
}

/**
 * Applies defaults to requested limits; empty strings and 0 fall back to the defaults. A request
 * cannot switch a limit off ("0" is refused): only the server's configuration can leave a limit
 * out (its default then is "" or 0).
 */
export function resolveLimits(requested: LimitStrings, defaults: LimitStrings): Limits {
  if (requested.pids < 0) throw new DomainError("INVALID_ARGUMENT", "limits.pids must not be negative", { metadata: { field: "limits.pids" } });
  const given = (v: string) => v.trim() !== "";
  return {
    cpus: given(requested.cpu) ? parseCpu(requested.cpu, "limits.cpu") : defaults.cpu === "" ? 0 : parseCpu(defaults.cpu, "default cpu"),
    memoryBytes: given(requested.memory) ? sizeLimit(requested.memory, "limits.memory", MIN_MEMORY_BYTES) : defaults.memory === "" ? 0 : parseSize(defaults.memory, "default memory"),
    diskBytes: given(requested.disk) ? sizeLimit(requested.disk, "limits.disk", MIN_DISK_BYTES) : defaults.disk === "" ? 0 : parseSize(defaults.disk, "default disk"),
    pids: requested.pids > 0 ? requested.pids : defaults.pids,
  };
}

/**
 * Checks a WORKSPACE_DEFAULT_* size the way requests are checked, except that "0" or "none"
 * leaves the limit out (returns ""). Throws INVALID_ARGUMENT naming `field`.
 */
export function defaultSizeLimit(value: string, field: string, kind: "memory" | "disk"): string {
  if (isNone(value)) return "";
  sizeLimit(value, field, kind === "memory" ? MIN_MEMORY_BYTES : MIN_DISK_BYTES);
  return value.trim();
}

/** Checks a WORKSPACE_DEFAULT_CPU value; "0" or "none" leaves the limit out (returns ""). */
export function defaultCpuLimit(value: string, field: string): string {
  if (isNone(value)) return "";
  parseCpu(value, field);
  return value.trim();
}

const isNone = (value: string) => /^(0+(\.0*)?|none)$/i.test(value.trim());

/** Formats bytes back into the compact form used in responses ("4G", "512M"). */
export function formatSize(bytes: number): string {
  if (bytes === 0) return "";
  for (const [unit, f] of [["T", 1024 ** 4], ["G", 1024 ** 3], ["M", 1024 ** 2], ["K", 1024]] as const) {
    if (bytes % f === 0) return `${bytes / f}${unit}`;
  }
  return String(bytes);
}
