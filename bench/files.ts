/**
 * Section (d): file operations through the server (gRPC) on every provider, against the same
 * operations on the local provider, which reads and writes host files in process. The difference
 * is what a container provider adds: the hop to its executor inside the sandbox and back.
 *
 * Three operations, each measured as one interleaved round-robin over all providers (so
 * background load affects every provider alike): ReadFile of a 4 KiB text file, WriteFile of
 * 1 MiB (replacing the same file each time), and Glob of every `.txt` file under a tree of
 * 10 directories × 100 files (created once per workspace with one Bash call).
 * Goal: a container provider's 4 KiB read at most +0.3 ms above local at p50; the write and the
 * glob are reported for information, with their difference.
 */
import type { Client } from "@connectrpc/connect";
import type { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { type BenchContext, type BenchWorkspace, type Measure, type SectionResult, createTextFiles, createWorkspace, interleave, timed } from "./context.ts";
import { type Row, signed } from "./report.ts";
import { roundSummary, summarize, type Summary } from "./stats.ts";
import { textOfSize } from "./tree.ts";

/** Options of section (d). */
export interface FilesOptions {
  /** Providers to report, in order; local is measured in any case, as every provider's baseline. */
  providers: string[];
  /** Measured calls per provider and operation. */
  iterations: number;
  /** Unmeasured calls per provider and operation before measuring. */
  warmup: number;
}

/** The goal: a container provider's small-read p50 at most this many milliseconds above local's. */
const GOAL_EXTRA_MS = 0.3;
const SMALL = textOfSize(4 * 1024);
const LARGE = textOfSize(1024 * 1024, 2);
const TREE_DIRS = Array.from({ length: 10 }, (_, i) => `tree/d${i}`);
const TREE_FILES_PER_DIR = 100;
const TREE_FILES = TREE_DIRS.length * TREE_FILES_PER_DIR;

type Tools = Client<typeof ToolService>;

/** One measured operation; only the one with `goal` is held to GOAL_EXTRA_MS. */
interface Operation {
  label: string;
  goal: boolean;
  measure(tools: Tools, workspaceId: string): Measure;
}

const OPERATIONS: Operation[] = [
  {
    label: "ReadFile 4 KiB",
    goal: true,
    measure: (tools, workspaceId) =>
      timed(
        () => tools.readFile({ workspaceId, path: "small.txt" }),
        (r) => {
          if (r.size !== BigInt(SMALL.length)) throw new Error(`ReadFile: size ${r.size}, expected ${SMALL.length}`);
        },
      ),
  },
  {
    label: "WriteFile 1 MiB",
    goal: false,
    measure: (tools, workspaceId) =>
      timed(
        () => tools.writeFile({ workspaceId, path: "large.txt", content: LARGE }),
        (r) => {
          if (r.bytesWritten !== BigInt(LARGE.length)) throw new Error(`WriteFile: ${r.bytesWritten} bytes written, expected ${LARGE.length}`);
        },
      ),
  },
  {
    label: `Glob **/*.txt, ${TREE_FILES.toLocaleString("en")} files`,
    goal: false,
    measure: (tools, workspaceId) =>
      timed(
        () => tools.glob({ workspaceId, pattern: "**/*.txt", path: "tree", limit: TREE_FILES }),
        (r) => {
          if (r.paths.length !== TREE_FILES || r.truncated) throw new Error(`Glob: ${r.paths.length} paths (truncated=${r.truncated}), expected ${TREE_FILES}`);
        },
      ),
  },
];

/** The table rows of one operation on one provider, against local's numbers. */
function rowsFor(op: Operation, provider: string, s: Summary, local: Summary): Row[] {
  const common = { section: "d files", unit: "ms", goal: "" };
  if (provider === "local") {
    return [
      { ...common, metric: `${op.label} p50 (local)`, server: s.p50, baseline: Number.NaN, ratio: Number.NaN },
      { ...common, metric: `${op.label} p99 (local)`, server: s.p99, baseline: Number.NaN, ratio: Number.NaN },
    ];
  }
  const extra = s.p50 - local.p50;
  return [
    {
      ...common,
      metric: `${op.label} p50 (${provider})`,
      server: s.p50,
      baseline: local.p50,
      ratio: s.p50 / local.p50,
      note: `${signed(extra)} ms vs local`,
      ...(op.goal ? { goal: `≤ local + ${GOAL_EXTRA_MS} ms`, pass: extra <= GOAL_EXTRA_MS } : {}),
    },
    { ...common, metric: `${op.label} p99 (${provider})`, server: s.p99, baseline: local.p99, ratio: s.p99 / local.p99 },
  ];
}

/** Runs section (d): one workspace per provider (plus local), then each operation across all of them. */
export async function benchFiles(ctx: BenchContext, options: FilesOptions): Promise<SectionResult> {
  const skipped: string[] = [];
  const workspaces: BenchWorkspace[] = [];
  try {
    for (const provider of new Set(["local", ...options.providers])) {
      const created = await createWorkspace(ctx, provider);
      if (!created.ok) {
        skipped.push(`(d) ${provider}: ${created.reason}`);
        ctx.log(`(d) skipping ${provider}: ${created.reason}`);
        if (provider === "local") return { rows: [], data: {}, skipped };
        continue;
      }
      const ws = created.workspace;
      workspaces.push(ws);
      await ctx.clients.grpc.tools.writeFile({ workspaceId: ws.id, path: "small.txt", content: SMALL });
      await createTextFiles(ctx, ws.id, TREE_DIRS, TREE_FILES_PER_DIR);
    }

    const tools = ctx.clients.grpc.tools;
    const rows: Row[] = [];
    const data: Record<string, Record<string, Summary>> = {};
    for (const op of OPERATIONS) {
      const series = Object.fromEntries(workspaces.map((ws) => [ws.provider, op.measure(tools, ws.id)]));
      ctx.log(`(d) ${op.label}: ${options.warmup} warmup + ${options.iterations} calls on ${workspaces.map((w) => w.provider).join(", ")}`);
      const samples = await interleave(series, options.warmup, options.iterations);
      const stats = Object.fromEntries(Object.entries(samples).map(([provider, v]) => [provider, summarize(v)]));
      for (const ws of workspaces) {
        if (options.providers.includes(ws.provider)) rows.push(...rowsFor(op, ws.provider, stats[ws.provider], stats.local));
      }
      data[op.label] = Object.fromEntries(Object.entries(stats).map(([provider, s]) => [provider, roundSummary(s)]));
    }
    return { rows, data: { iterations: options.iterations, warmup: options.warmup, stats: data }, skipped };
  } finally {
    await Promise.all(workspaces.map((ws) => ws.delete()));
  }
}
