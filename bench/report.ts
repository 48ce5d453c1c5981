/**
 * Result rows shared by all sections, and the plain-text table they are printed as.
 */

/** One line of the result table: a server measurement against its raw baseline. */
export interface Row {
  /** Section letter and name, e.g. "a latency". */
  section: string;
  /** What was measured, e.g. "Bash no-op p50, grpc (local)". */
  metric: string;
  /** The server's value, in `unit`. */
  server: number;
  /** The raw baseline's value, in `unit`; NaN when there is none. */
  baseline: number;
  unit: string;
  /** server / baseline, whatever the unit (so for throughput, higher is better; for times, lower). */
  ratio: number;
  /** The goal, as text. */
  goal: string;
  /** Whether the goal was met; undefined for informational rows. */
  pass?: boolean;
  /** Anything worth knowing next to the number. */
  note?: string;
}

/** A difference with its sign spelled out and two decimals, e.g. "+0.31" or "−1.20". */
export function signed(x: number): string {
  return `${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(2)}`;
}

/** A value with its unit and two to three significant digits ("11.0 ms", "936 MB/s"; counts as "0 errors"); "—" when not finite. */
export function formatValue(x: number, unit: string): string {
  if (!Number.isFinite(x)) return "—";
  const digits = Math.abs(x) >= 100 || Number.isInteger(x) ? 0 : Math.abs(x) >= 10 ? 1 : 2;
  return `${x.toFixed(digits)} ${unit}`;
}

/** A ratio as "1.78×" ("—" when there is none). */
export function formatRatio(ratio: number): string {
  return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "—";
}

/** PASS, MISS or info. */
export function resultText(row: Row): string {
  return row.pass === undefined ? "info" : row.pass ? "PASS" : "MISS";
}

/** Renders rows as an aligned text table. */
export function formatTable(rows: readonly Row[]): string {
  const header = ["section", "metric", "server", "baseline", "ratio", "goal", "result"];
  const body = rows.map((r) => [
    r.section,
    r.metric,
    formatValue(r.server, r.unit),
    formatValue(r.baseline, r.unit),
    formatRatio(r.ratio),
    r.goal,
    resultText(r),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i >= 2 && i <= 4 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ").trimEnd();
  const out = [line(header), widths.map((w) => "-".repeat(w)).join("  ")];
  let last = "";
  for (const [i, b] of body.entries()) {
    if (last !== "" && rows[i].section !== last) out.push("");
    last = rows[i].section;
    out.push(line(b));
    if (rows[i].note) out.push(`${" ".repeat(widths[0] + 2)}  ↳ ${rows[i].note}`);
  }
  return out.join("\n");
}
