/**
 * Section (l): what the command policy costs. Every Bash, StreamBash and setup command is parsed
 * (tree-sitter's bash grammar, WebAssembly) and checked before it runs; this measures that check
 * in-process for three scripts — a one-word command, a typical agent command line, and a chain of
 * 60 commands with substitutions — under an allowlist (the policy that does the most work), against
 * the cheapest thing the check guards, spawning `bash -c true`, measured in the same run.
 *
 * Goals: the typical check costs at most 5% of that spawn at p50, and the 60-command chain at most
 * 50% (it is checked in full; there is no size above which checks stop).
 */
import { spawnSync } from "node:child_process";
import { CommandPolicy } from "../server/security/command-policy.ts";
import type { SectionResult } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

/** Options of section (l). */
export interface PolicyOptions {
  iterations: number;
  warmup: number;
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
  return { rows, data, skipped: [] };
}
