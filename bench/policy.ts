/**
 * Section (l): what the command policy costs. Every Bash, StreamBash and setup command is parsed
 * (tree-sitter's bash grammar, WebAssembly) and checked before it runs; this measures that check
 * in-process for three scripts — a one-word command, a typical agent command line, and a chain of
 * 60 commands with substitutions — under an allowlist (the policy that does the most work), against
 * the cheapest thing the check guards, spawning `bash -c true`, measured in the same run.
 *
 * Goals: the typical check costs at most 5% of that spawn at p50, and the 60-command chain at most
 * 50% (it is checked in full; there is no size above which checks stop).
 *
 * Then the whole corpus of everyday agent commands (test/fixtures/commands/, 600+ entries) under
 * the typical allowlist it is tested with, in CPU time: per command p50 and p99, and the total for the corpus,
 * against the raw baseline of parsing the same commands with tree-sitter alone (the parser's own
 * call, nothing of ours), interleaved in the same passes. The check parses more than once by design
 * (each line of a multi-line script again on its own, nested shell strings, a second reading of a
 * script with a backslash-newline) and walks every word through the file rules, so the goal is a
 * bound on that multiple: at most 8× the parse alone for the corpus total; p50 and p99 per command
 * are information.
 */
import { spawnSync } from "node:child_process";
import { CommandPolicy } from "../server/security/command-policy.ts";
import { loadShellParser } from "../server/security/shell-parser.ts";
import { loadCorpus, TYPICAL_POLICY } from "../test/fixtures/commands/corpus.ts";
import type { SectionResult } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

/** Options of section (l). */
export interface PolicyOptions {
  iterations: number;
  warmup: number;
  /** Passes over the whole corpus (each command checked once and parsed once per pass); 10, or 3 for a quick run. */
  corpusPasses?: number;
}

/** Goal of the corpus total: the check at most this many times tree-sitter's parse alone. */
const CORPUS_LIMIT = 8;

/**
 * The corpus, checked and parsed command by command, the two interleaved: per-command samples and
 * per-pass totals of each, in CPU time (the process's), so that other work on a shared host, which
 * stretches the longer check more than the short parse in wall time, does not skew the ratio.
 */
async function timeCorpus(policy: CommandPolicy, passes: number): Promise<{ check: number[]; parse: number[]; checkTotals: number[]; parseTotals: number[] }> {
  const corpus = loadCorpus();
  const parser = await loadShellParser();
  const out = { check: [] as number[], parse: [] as number[], checkTotals: [] as number[], parseTotals: [] as number[] };
  for (let pass = 0; pass < passes; pass++) {
    let [checkTotal, parseTotal] = [0, 0];
    const cpu = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1000;
    };
    for (const e of corpus) {
      let t0 = cpu();
      const refusal = await policy.check(e.command);
      const check = cpu() - t0;
      if (refusal !== undefined) throw new Error(`a corpus command was refused (${e.file}:${e.line}): ${refusal.message}`);
      t0 = cpu();
      const tree = parser.parse(e.command);
      const parse = cpu() - t0;
      // A few commands hold what the grammar lacks (`<>`): their raw parse, errors and all, is the baseline still.
      tree?.delete();
      out.check.push(check);
      out.parse.push(parse);
      checkTotal += check;
      parseTotal += parse;
    }
    out.checkTotals.push(checkTotal);
    out.parseTotals.push(parseTotal);
  }
  return out;
}

const SCRIPTS: Record<string, string> = {
  "one word": "ls",
  typical: "cd src && timeout 600 npm test -- --watch=false 2>&1 | tee ../test.log; echo \"exit: $?\"",
  "60-command chain": Array.from({ length: 60 }, (_, i) => (i % 3 === 0 ? `echo $(cat part${i}.txt)` : i % 3 === 1 ? `grep -c x f${i} || true` : `ls dir${i} | wc -l`)).join(" && "),
};

async function timeChecks(policy: CommandPolicy, script: string, n: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const refusal = await policy.check(script);
    samples.push(performance.now() - t0);
    if (refusal !== undefined) throw new Error(`the bench script was refused: ${refusal.message}`);
  }
  return samples;
}

/** Runs section (l). */
export async function benchPolicy(options: PolicyOptions): Promise<SectionResult> {
  const policy = new CommandPolicy({ defaultAction: "deny", allow: ["ls", "npm test", "tee", "grep", "cat", "wc"], deny: ["git push"] });
  const spawn: number[] = [];
  for (let i = 0; i < Math.max(20, options.iterations / 10); i++) {
    const t0 = performance.now();
    spawnSync("bash", ["-c", "true"]);
    spawn.push(performance.now() - t0);
  }
  const base = summarize(spawn);
  const rows: Row[] = [];
  const data: Record<string, unknown> = { spawnBashMs: base };
  for (const [name, script] of Object.entries(SCRIPTS)) {
    await timeChecks(policy, script, options.warmup);
    const s = summarize(await timeChecks(policy, script, options.iterations));
    data[name] = s;
    const limit = name === "60-command chain" ? 0.5 : 0.05;
    const ratio = s.p50 / base.p50;
    rows.push({
      section: "l policy",
      metric: `command check p50, ${name} (${script.length} chars)`,
      server: round(s.p50, 3),
      baseline: round(base.p50, 3),
      unit: "ms",
      ratio: round(ratio, 3),
      goal: `≤ ${limit}× spawning bash -c true`,
      pass: ratio <= limit,
    });
  }
  const typical = new CommandPolicy(TYPICAL_POLICY);
  const passes = options.corpusPasses ?? (options.iterations >= 2000 ? 10 : 3);
  await timeCorpus(typical, 1);
  const corpus = await timeCorpus(typical, passes);
  const [check, parse] = [summarize(corpus.check), summarize(corpus.parse)];
  const [checkTotal, parseTotal] = [summarize(corpus.checkTotals), summarize(corpus.parseTotals)];
  const commands = corpus.check.length / passes;
  data.corpus = { commands, passes, check, parse, checkTotal, parseTotal };
  for (const [metric, server, baseline] of [
    ["p50", check.p50, parse.p50],
    ["p99", check.p99, parse.p99],
  ] as const) {
    rows.push({
      section: "l policy",
      metric: `corpus (${commands} everyday commands, typical allowlist): check ${metric} per command, CPU`,
      server: round(server, 3),
      baseline: round(baseline, 3),
      unit: "ms",
      ratio: round(server / baseline, 2),
      goal: "information (baseline: tree-sitter parse alone)",
    });
  }
  const ratio = checkTotal.p50 / parseTotal.p50;
  rows.push({
    section: "l policy",
    metric: `corpus: check of all ${commands} commands, total CPU (median of ${passes} passes)`,
    server: round(checkTotal.p50, 1),
    baseline: round(parseTotal.p50, 1),
    unit: "ms",
    ratio: round(ratio, 2),
    goal: `≤ ${CORPUS_LIMIT}× tree-sitter parse alone`,
    pass: ratio <= CORPUS_LIMIT,
  });
  return { rows, data, skipped: [] };
}
