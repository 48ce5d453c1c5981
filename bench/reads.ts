/**
 * Section (f): the cost of a small read over the server's own floor. `ReadFile` of a 4 KiB text
 * file on the local provider against a no-op RPC — the standard gRPC health check
 * (`grpc.health.v1.Health/Check`) on the same server over the same HTTP/2 connection — so the
 * difference is what the read itself costs: the tool, the workspace lookup, the file access.
 * - latency: sequential calls, the two series interleaved round-robin; goal ReadFile p50 at most
 *   the no-op's p50 + 0.3 ms;
 * - rate: 16 calls in flight, back to back, the two series taking turns in 0.5 s slices; goal at
 *   least 5,000 reads/s on 2 cores. The no-op's rate at 16 in flight, measured the same way, is the
 *   baseline (the most any RPC can do here).
 */
import type { Client } from "@connectrpc/connect";
import type { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { type BenchContext, type SectionResult, createWorkspace, interleave, interleaveLoad, serverCpuMs, timed } from "./context.ts";
import { type Row, signed } from "./report.ts";
import { round, roundSummary, summarize } from "./stats.ts";
import type { ClientSet } from "./server-process.ts";
import { textOfSize } from "./tree.ts";

/** Options of section (f). */
export interface ReadsOptions {
  /** Measured calls per series for the latency. */
  iterations: number;
  /** Unmeasured calls per series before. */
  warmup: number;
  /** Calls in flight for the rate. */
  concurrency: number;
  /** Measured time per series for the rate, in ms (in slices of SLICE_MS). */
  rateMs: number;
}

/** The goals: ReadFile p50 at most this much above the no-op's; at least this many reads/s. */
const GOAL_EXTRA_MS = 0.3;
const GOAL_RATE = 5000;
const SLICE_MS = 500;
const SMALL = textOfSize(4 * 1024);

function readSmall(tools: Client<typeof ToolService>, workspaceId: string) {
  return async () => {
    const r = await tools.readFile({ workspaceId, path: "small.txt" });
    if (r.size !== BigInt(SMALL.length)) throw new Error(`ReadFile: size ${r.size}, expected ${SMALL.length}`);
  };
}

function noop(health: ClientSet["health"]) {
  return async () => {
    const r = await health.check({ service: "" });
    if (r.status !== ServingStatus.SERVING) throw new Error(`Health/Check: status ${r.status}`);
  };
}

/** The server's CPU time per call of `call`, over `n` sequential calls, in ms. */
async function cpuPerCall(ctx: BenchContext, call: () => Promise<void>, n: number): Promise<number> {
  const before = await ctx.server.stats();
  for (let i = 0; i < n; i++) await call();
  return serverCpuMs(before, await ctx.server.stats()) / n;
}

/** Runs section (f) on one local workspace. */
export async function benchReads(ctx: BenchContext, options: ReadsOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(f) ${created.reason}`] };
  const ws = created.workspace;
  try {
    const { tools, health } = ctx.clients.grpc;
    await tools.writeFile({ workspaceId: ws.id, path: "small.txt", content: SMALL });
    const series = { read: readSmall(tools, ws.id), noop: noop(health) };

    ctx.log(`(f) latency: ${options.warmup} warmup + ${options.iterations} calls of ReadFile 4 KiB and Health/Check, interleaved`);
    const samples = await interleave({ read: timed(series.read), noop: timed(series.noop) }, options.warmup, options.iterations);
    const read = summarize(samples.read);
    const none = summarize(samples.noop);
    const cpu = { read: await cpuPerCall(ctx, series.read, options.iterations), noop: await cpuPerCall(ctx, series.noop, options.iterations) };

    const rounds = Math.max(1, Math.round(options.rateMs / SLICE_MS));
    ctx.log(`(f) rate: ${options.concurrency} in flight, ${rounds} × ${SLICE_MS} ms slices per series`);
    const load = await interleaveLoad(series, { concurrency: options.concurrency, rounds, sliceMs: SLICE_MS, warmupMs: SLICE_MS });
    const errors = load.read.errors + load.noop.errors;
    const firstErrors = [...load.read.firstErrors, ...load.noop.firstErrors].slice(0, 3);

    const common = { section: "f reads", unit: "ms" };
    const rows: Row[] = [
      {
        ...common,
        metric: "ReadFile 4 KiB p50, vs Health/Check (local)",
        server: read.p50,
        baseline: none.p50,
        ratio: read.p50 / none.p50,
        goal: `≤ no-op + ${GOAL_EXTRA_MS} ms`,
        pass: read.p50 - none.p50 <= GOAL_EXTRA_MS,
        note: `${signed(read.p50 - none.p50)} ms vs the no-op RPC on the same connection; server CPU per call ${cpu.read.toFixed(3)} ms (no-op ${cpu.noop.toFixed(3)} ms)`,
      },
      { ...common, metric: "ReadFile 4 KiB p99, vs Health/Check (local)", server: read.p99, baseline: none.p99, ratio: read.p99 / none.p99, goal: "" },
      {
        section: "f reads",
        metric: `ReadFile 4 KiB rate, ${options.concurrency} in flight, vs Health/Check`,
        server: load.read.rate,
        baseline: load.noop.rate,
        unit: "calls/s",
        ratio: load.read.rate / load.noop.rate,
        goal: `≥ ${GOAL_RATE.toLocaleString("en")}/s`,
        pass: load.read.rate >= GOAL_RATE && errors === 0,
        note: errors > 0 ? `${errors} errors: ${firstErrors.join(" | ")}` : `p99 under load ${summarize(load.read.latenciesMs).p99.toFixed(2)} ms (no-op ${summarize(load.noop.latenciesMs).p99.toFixed(2)} ms)`,
      },
    ];
    const data = {
      iterations: options.iterations,
      warmup: options.warmup,
      latency: { read: roundSummary(read), noop: roundSummary(none) },
      serverCpuMsPerCall: { read: round(cpu.read), noop: round(cpu.noop) },
      rate: Object.fromEntries(
        Object.entries(load).map(([name, r]) => [name, { perSecond: round(r.rate, 1), ok: r.ok, errors: r.errors, seconds: round(r.seconds), latency: roundSummary(summarize(r.latenciesMs)) }]),
      ),
      concurrency: options.concurrency,
      sliceMs: SLICE_MS,
      rounds,
    };
    return { rows, data, skipped: [] };
  } finally {
    await ws.delete();
  }
}
