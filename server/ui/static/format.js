// Formatting of API values for people.

/** "SESSION_STATUS_ACTIVE" → "ACTIVE" (prefix given). */
export function enumName(value, prefix) {
  return typeof value === "string" && value.startsWith(prefix) ? value.slice(prefix.length) : String(value ?? "");
}

/** A protobuf JSON duration ("0.002s") as "2 ms" / "4.2 s". */
export function duration(value) {
  if (typeof value !== "string" || !value.endsWith("s")) return "";
  const seconds = Number(value.slice(0, -1));
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 1) return `${Math.max(0, Math.round(seconds * 1000))} ms`;
  return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
}

/** A timestamp as local time of day, with seconds. */
export function clock(value) {
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** A timestamp as local date and time. */
export function dateTime(value) {
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleString();
}

/**
 * A sort key of an RFC 3339 timestamp with up to nanoseconds, as a fixed-width string: Date
 * keeps only milliseconds, and calls of one millisecond must still sort in order.
 */
export function timeKey(value) {
  if (typeof value !== "string") return "".padStart(22, "0");
  const m = /^(.*?:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(value);
  if (!m) return "".padStart(22, "0");
  const seconds = Math.floor(Date.parse(`${m[1]}${m[3]}`) / 1000);
  return `${String(seconds).padStart(13, "0")}${(m[2] ?? "").padEnd(9, "0").slice(0, 9)}`;
}

/** Bytes for people. */
export function bytes(n) {
  const v = Number(n ?? 0);
  if (v < 1024) return `${v} B`;
  if (v < 1024 * 1024) return `${(v / 1024).toFixed(1)} KiB`;
  return `${(v / 1024 / 1024).toFixed(1)} MiB`;
}
