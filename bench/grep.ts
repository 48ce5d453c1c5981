/**
 * Section (b): `Grep` and `StreamGrep` over a large generated tree against the same ripgrep
 * binary run directly with equivalent arguments in the workspace directory. Two patterns: a rare
 * one (a handful of matches, so ripgrep reads the whole tree) and a frequent one with
 * max_results = 100 (so the server, like the raw baseline, stops ripgrep after 100 matches).
 *
 * Measured per run (median over runs, all series interleaved):
 * - unary Grep wall time vs raw rg to completion (rare) or to its 100th match line, killed
 *   there as the server does (frequent);
 * - StreamGrep: rare, time to the `done` message vs raw rg to completion; frequent, time to the
 *   100th match message vs raw rg's 100th match line.
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
  /** Measured runs per series; the median is reported. */
  runs: number;
  /** max_results of the frequent-pattern searches. */
  maxResults: number;
}

/** Allowed slack on top of the ratio goal: process start-up and one RPC round trip. */
const SLACK_MS = 5;
const GOAL_RATIO = 1.1;
/** StreamGrep's 100th match may trail raw rg's by at most this much (timer resolution, one hop). */
const STREAM_SLACK_MS = 1;

interface RawRun {
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
  let rest = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    if (!Number.isNaN(toLimit)) return;
    const text = rest + chunk;
    let at = 0;
    let nl: number;
    while ((nl = text.indexOf("\n", at)) >= 0) {
      if (text.startsWith('{"type":"match"', at) && ++matches === limit) {
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
      else resolve({ toLimit: Number.isNaN(toLimit) ? end : toLimit, toEnd: Number.isNaN(toLimit) ? end : Number.NaN, matches });
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
      rawFreq: async () => (await rawRg(dir, tree.frequentPattern, max)).toLimit,
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
        for await (const msg of tools.streamGrep(freq)) {
          if (msg.event.case === "match" && ++n === max) at = performance.now() - t;
        }
        if (n !== max) throw new Error(`StreamGrep frequent: ${n} matches, expected ${max}`);
        return at;
      },
    };
    type Name = keyof typeof series;
    const names = Object.keys(series) as Name[];
    const samples = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<Name, number[]>;
    const rawCheck = await rawRg(dir, tree.rarePattern, 0);
    if (rawCheck.matches !== tree.rareMatches) throw new Error(`raw rg found ${rawCheck.matches} rare matches, expected ${tree.rareMatches}`);
    ctx.log(`(b) 1 warmup + ${options.runs} runs of ${names.length} series`);
    for (let run = -1; run < options.runs; run++) {
      for (let j = 0; j < names.length; j++) {
        const name = names[(run + 1 + j) % names.length];
        const ms = await series[name]();
        if (run >= 0) samples[name].push(ms);
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
    const lag = m.streamFreq - m.rawFreq;
    const rows: Row[] = [
      row(`Grep rare (${tree.rareMatches} matches), wall`, m.grepRare, m.rawRare),
      row(`Grep frequent '${tree.frequentPattern}', max ${max}, wall`, m.grepFreq, m.rawFreq, { note: `raw rg killed after its ${max}th match line` }),
      row("StreamGrep rare, to done", m.streamRare, m.rawRare),
      row(`StreamGrep frequent, to ${max}th match`, m.streamFreq, m.rawFreq, {
        goal: `≤ rg's ${max}th (+${STREAM_SLACK_MS} ms)`,
        pass: lag <= STREAM_SLACK_MS,
        note: `${lag >= 0 ? "+" : "−"}${Math.abs(lag).toFixed(2)} ms vs raw rg`,
      }),
    ];
    const data = {
      tree: { ...tree, mib: round(mib(tree.bytes), 1), seed: options.tree.seed },
      runs: options.runs,
      maxResults: max,
      medianMs: Object.fromEntries(names.map((n) => [n, round(m[n])])),
      samplesMs: Object.fromEntries(names.map((n) => [n, samples[n].map((x) => round(x))])),
    };
    return { rows, data, skipped: [] };
  } finally {
    await ws.delete();
  }
}
