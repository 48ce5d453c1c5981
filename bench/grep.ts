/**
 * Section (b): `Grep` and `StreamGrep` over a large generated tree against the same ripgrep
 * binary run directly with equivalent arguments in the workspace directory. Two patterns: a rare
 * one (a handful of matches, so ripgrep reads the whole tree) and a frequent one with
 * max_results = 100 (so the server, like the raw baseline, stops ripgrep after 100 matches).
 *
 * Measured per run (median over runs, the series of each pattern interleaved; the frequent ones,
 * a few ms each, after a warm-up and over more runs):
 * - unary Grep wall time vs raw rg to completion (rare) or to its 100th match line, killed
 *   there as the server does (frequent);
 * - StreamGrep: rare, time to the `done` message vs raw rg to completion; frequent, times to the
 *   first and the 100th match messages vs raw rg's first and 100th match lines.
 * Goals: rare searches ≤ 1.1× rg + 5 ms; the frequent search's last match ≤ rg's + 5 ms (Grep and
 * StreamGrep), StreamGrep's first match ≤ rg's first + 3 ms.
 */
import { spawn } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { rgPath } from "@vscode/ripgrep";
import { type BenchContext, type SectionResult, createWorkspace, localWorkspaceDir, mib } from "./context.ts";
import type { Row } from "./report.ts";
import { median, round } from "./stats.ts";
import { generateTree, type TreeOptions } from "./tree.ts";

/** Options of section (b). */
export interface GrepOptions {
  tree: TreeOptions;
  /** Measured runs of the rare-pattern series (each reads the whole tree); the median is reported. */
  runs: number;
  /** Warm-up and measured runs of the frequent-pattern series (a few ms each: they need a warm server). */
  limitWarmup: number;
  limitRuns: number;
  /** max_results of the frequent-pattern searches. */
  maxResults: number;
}

/** Allowed slack on top of the ratio goal: process start-up and one RPC round trip. */
const SLACK_MS = 5;
const GOAL_RATIO = 1.1;
/** The goals for a search stopped at max_results: Grep and StreamGrep's last match within this of rg's. */
const LIMIT_SLACK_MS = 5;
/** StreamGrep's first match within this of rg's first. */
const FIRST_SLACK_MS = 3;

interface RawRun {
  /** Time to the first match line (NaN without one). */
  toFirst: number;
  /** Time to the `limit`-th match line (or to completion when fewer). */
  toLimit: number;
  /** Time to process exit (NaN when killed at the limit). */
  toEnd: number;
  matches: number;
}

/** Runs rg like the server does; with `limit`, kills it once that many match records are read. */
function rawRg(cwd: string, pattern: string, limit: number): Promise<RawRun> {
  const t0 = performance.now();
  const child = spawn(rgPath, ["--json", "--no-config", "--case-sensitive", "-e", pattern, "--", "."], { cwd, stdio: ["ignore", "pipe", "ignore"] });
  let matches = 0;
  let toLimit = Number.NaN;
  let toFirst = Number.NaN;
  let rest = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    if (!Number.isNaN(toLimit)) return;
    const text = rest + chunk;
    let at = 0;
    let nl: number;
    while ((nl = text.indexOf("\n", at)) >= 0) {
      if (!text.startsWith('{"type":"match"', at)) {
        at = nl + 1;
        continue;
      }
      if (++matches === 1) toFirst = performance.now() - t0;
      if (matches === limit) {
        toLimit = performance.now() - t0;
        child.kill("SIGKILL");
        return;
      }
      at = nl + 1;
    }
    rest = text.slice(at);
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => {
      const end = performance.now() - t0;
      if (Number.isNaN(toLimit) && code !== 0 && code !== 1) reject(new Error(`rg exited ${code}`));
      else resolve({ toFirst, toLimit: Number.isNaN(toLimit) ? end : toLimit, toEnd: Number.isNaN(toLimit) ? end : Number.NaN, matches });
    });
  });
}

/** Runs section (b) on the local provider. */
export async function benchGrep(ctx: BenchContext, options: GrepOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(b) ${created.reason}`] };
  const ws = created.workspace;
  try {
    const dir = localWorkspaceDir(ctx, ws.id);
    await mkdir(dir, { recursive: true });
    ctx.log(`(b) generating ${options.tree.files} files, ~${mib(options.tree.totalBytes).toFixed(0)} MiB in ${dir}`);
    const t0 = performance.now();
    const tree = generateTree(dir, options.tree);
    ctx.log(`(b) generated ${tree.files} files, ${mib(tree.bytes).toFixed(1)} MiB in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

    const tools = ctx.clients.grpc.tools;
    const max = options.maxResults;
    const rare = { workspaceId: ws.id, pattern: tree.rarePattern, caseSensitive: true };
    const freq = { workspaceId: ws.id, pattern: tree.frequentPattern, caseSensitive: true, maxResults: max };

    const series = {
      rawRare: async () => (await rawRg(dir, tree.rarePattern, 0)).toEnd,
      rawFreq: async () => {
        const r = await rawRg(dir, tree.frequentPattern, max);
        return { rawFreq: r.toLimit, rawFirst: r.toFirst };
      },
      grepRare: async () => {
        const t = performance.now();
        const res = await tools.grep(rare);
        const ms = performance.now() - t;
        if (res.matches.length !== tree.rareMatches) throw new Error(`Grep rare: ${res.matches.length} matches, expected ${tree.rareMatches}`);
        return ms;
      },
      grepFreq: async () => {
        const t = performance.now();
        const res = await tools.grep(freq);
        const ms = performance.now() - t;
        if (res.matches.length !== max || !res.truncated) throw new Error(`Grep frequent: ${res.matches.length} matches, truncated=${res.truncated}`);
        return ms;
      },
      streamRare: async () => {
        const t = performance.now();
        let n = 0;
        for await (const msg of tools.streamGrep(rare)) {
          if (msg.event.case === "match") n++;
          else if (msg.event.case === "done") {
            const ms = performance.now() - t;
            if (n !== tree.rareMatches) throw new Error(`StreamGrep rare: ${n} matches, expected ${tree.rareMatches}`);
            return ms;
          }
        }
        throw new Error("StreamGrep rare ended without done");
      },
      streamFreq: async () => {
        const t = performance.now();
        let n = 0;
        let at = Number.NaN;
        let first = Number.NaN;
        for await (const msg of tools.streamGrep(freq)) {
          if (msg.event.case !== "match") continue;
          if (++n === 1) first = performance.now() - t;
          if (n === max) at = performance.now() - t;
        }
        if (n !== max) throw new Error(`StreamGrep frequent: ${n} matches, expected ${max}`);
        return { streamFreq: at, streamFirst: first };
      },
    };
    type Series = keyof typeof series;
    type Name = Series | "rawFirst" | "streamFirst";
    const order = Object.keys(series) as Series[];
    const names: Name[] = [...order, "rawFirst", "streamFirst"];
    const samples = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<Name, number[]>;
    const rawCheck = await rawRg(dir, tree.rarePattern, 0);
    if (rawCheck.matches !== tree.rareMatches) throw new Error(`raw rg found ${rawCheck.matches} rare matches, expected ${tree.rareMatches}`);
    const rareOrder = order.filter((n) => n.endsWith("Rare"));
    const limitOrder = order.filter((n) => !n.endsWith("Rare"));
    ctx.log(`(b) rare: 1 warmup + ${options.runs} runs of ${rareOrder.length} series; frequent: ${options.limitWarmup} warmup + ${options.limitRuns} runs of ${limitOrder.length}`);
    const rounds: Array<[Series[], number]> = [[limitOrder, options.limitWarmup], [rareOrder, 1], [rareOrder, -options.runs], [limitOrder, -options.limitRuns]];
    for (const [group, count] of rounds) {
      for (let run = 0; run < Math.abs(count); run++) {
        for (let j = 0; j < group.length; j++) {
          const name = group[(run + j) % group.length];
          const ms: number | Partial<Record<Name, number>> = await series[name]();
          if (count > 0) continue; // warm-up
          for (const [key, value] of Object.entries(typeof ms === "number" ? { [name]: ms } : ms)) samples[key as Name].push(value as number);
        }
      }
    }
    const m = Object.fromEntries(names.map((n) => [n, median(samples[n])])) as Record<Name, number>;
    const unaryGoalText = `≤ ${GOAL_RATIO}× rg + ${SLACK_MS} ms`;
    /** A timing row against raw rg, held to the unary goal unless `pass`/`goal` say otherwise. */
    const row = (metric: string, server: number, raw: number, extra: Partial<Row> = {}): Row => ({
      section: "b grep",
      metric,
      server,
      baseline: raw,
      unit: "ms",
      ratio: server / raw,
      goal: unaryGoalText,
      pass: server <= GOAL_RATIO * raw + SLACK_MS,
      ...extra,
    });
    /** A row held to "at most `slack` ms after raw rg's same moment". */
    const lagRow = (metric: string, server: number, raw: number, slack: number, what: string, note = ""): Row => {
      const lag = server - raw;
      return row(metric, server, raw, {
        goal: `≤ rg's ${what} + ${slack} ms`,
        pass: lag <= slack,
        note: `${lag >= 0 ? "+" : "−"}${Math.abs(lag).toFixed(2)} ms vs raw rg${note}`,
      });
    };
    const rows: Row[] = [
      row(`Grep rare (${tree.rareMatches} matches), wall`, m.grepRare, m.rawRare),
      lagRow(`Grep frequent '${tree.frequentPattern}', max ${max}, wall`, m.grepFreq, m.rawFreq, LIMIT_SLACK_MS, `${max}th`, `; raw rg killed after its ${max}th match line`),
      row("StreamGrep rare, to done", m.streamRare, m.rawRare),
      lagRow("StreamGrep frequent, to 1st match", m.streamFirst, m.rawFirst, FIRST_SLACK_MS, "1st"),
      lagRow(`StreamGrep frequent, to ${max}th match`, m.streamFreq, m.rawFreq, LIMIT_SLACK_MS, `${max}th`),
    ];
    const data = {
      tree: { ...tree, mib: round(mib(tree.bytes), 1), seed: options.tree.seed },
      runs: options.runs,
      limitRuns: options.limitRuns,
      maxResults: max,
      medianMs: Object.fromEntries(names.map((n) => [n, round(m[n])])),
      samplesMs: Object.fromEntries(names.map((n) => [n, samples[n].map((x) => round(x))])),
    };
    return { rows, data, skipped: [] };
  } finally {
    await ws.delete();
  }
}
