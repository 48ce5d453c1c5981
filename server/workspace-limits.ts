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

/** Applies defaults to requested limits; empty strings and 0 fall back to the defaults. */
export function resolveLimits(requested: LimitStrings, defaults: LimitStrings): Limits {
  const pick = (a: string, b: string) => (a.trim() !== "" ? a : b);
  const cpu = pick(requested.cpu, defaults.cpu);
  const memory = pick(requested.memory, defaults.memory);
  const disk = pick(requested.disk, defaults.disk);
  if (requested.pids < 0) throw new DomainError("INVALID_ARGUMENT", "limits.pids must not be negative", { metadata: { field: "limits.pids" } });
  return {
    cpus: cpu === "" ? 0 : parseCpu(cpu, "limits.cpu"),
    memoryBytes: memory === "" ? 0 : parseSize(memory, "limits.memory"),
    diskBytes: disk === "" ? 0 : parseSize(disk, "limits.disk"),
    pids: requested.pids > 0 ? requested.pids : defaults.pids,
  };
}

/** Formats bytes back into the compact form used in responses ("4G", "512M"). */
export function formatSize(bytes: number): string {
  if (bytes === 0) return "";
  for (const [unit, f] of [["T", 1024 ** 4], ["G", 1024 ** 3], ["M", 1024 ** 2], ["K", 1024]] as const) {
    if (bytes % f === 0) return `${bytes / f}${unit}`;
  }
  return String(bytes);
}
