/**
 * Prints the results of the last benchmark run as a Markdown table for the README:
 * `npm run bench:table` (or `node bench/table.ts [results.json]`, default
 * bench/results/latest.json). One line with the run's date, kind, commit, CPUs and load average
 * before and after, then every row: metric (with its section letter), ours, baseline, ratio,
 * goal, result — formatted as in the harness's own table.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { type Row, formatRatio, formatValue, resultText } from "./report.ts";

/** The parts of bench/results/latest.json this script reads (run.ts writes them). */
interface Results {
  startedAt: string;
  quick: boolean;
  sections: string[];
  providers: string[];
  git?: { commit: string; dirty: boolean };
  host: { cpus: number; cpuModel?: string; loadavgBefore: number[]; loadavgAfter: number[] };
  rows: Row[];
  skipped: string[];
}

const file = process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), "results", "latest.json");
const results = JSON.parse(readFileSync(file, "utf8")) as Results;

const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(" ");
const { host, git } = results;
const kind = results.quick ? "quick run" : "full run";
const commit = git ? `, commit ${git.commit.slice(0, 7)}${git.dirty ? " + local changes" : ""}` : "";
process.stdout.write(
  `${kind[0].toUpperCase()}${kind.slice(1)} of ${results.startedAt.slice(0, 16).replace("T", " ")} UTC${commit}: sections ${results.sections.join(", ")}; ` +
    `providers ${results.providers.join(", ")}; ${host.cpus} CPUs${host.cpuModel ? ` (${host.cpuModel})` : ""}; ` +
    `load average ${load(host.loadavgBefore)} before, ${load(host.loadavgAfter)} after.\n\n`,
);

const cell = (s: string) => s.replaceAll("|", "\\|");
const header = ["metric", "ours", "baseline", "ratio", "goal", "result"];
const body = results.rows.map((r) => [`(${r.section.split(" ")[0]}) ${r.metric}`, formatValue(r.server, r.unit), formatValue(r.baseline, r.unit), formatRatio(r.ratio), r.goal, resultText(r)].map(cell));
const widths = header.map((h, i) => Math.max(h.length, 3, ...body.map((b) => b[i].length)));
/** Columns 1–3 (numbers) right-aligned. */
const numeric = (i: number) => i >= 1 && i <= 3;
const line = (cells: string[]) => `| ${cells.map((c, i) => (numeric(i) ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join(" | ")} |`;
const rule = `| ${widths.map((w, i) => (numeric(i) ? `${"-".repeat(w - 1)}:` : "-".repeat(w))).join(" | ")} |`;
process.stdout.write(`${[line(header), rule, ...body.map(line)].join("\n")}\n`);
if (results.skipped.length > 0) process.stdout.write(`\nSkipped: ${results.skipped.join("; ")}\n`);
