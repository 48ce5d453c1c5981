/**
 * Section (r): what the TypeScript client (@agent-workspace/client) adds per call over the raw
 * connect-es client it is built on. Both call the same server over the same gRPC transport (one
 * HTTP/2 connection, passed to the client as its `transport`), interleaved round-robin: `ReadFile`
 * of a small file (the client's retrying read path) and a no-op `Bash` (its send-once path). The
 * difference of the p50s and of the p95s is the client's overhead; goal ≤ +0.05 ms at p50.
 */
import { createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { AgentWorkspace } from "../clients/ts/src/index.ts";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { type BenchContext, type SectionResult, createWorkspace, interleave, timed } from "./context.ts";
import { type Row, signed } from "./report.ts";
import { percentile, roundSummary, summarize } from "./stats.ts";

/** Options of section (r). */
export interface ClientTsOptions {
  /** Measured calls per series. */
  iterations: number;
  /** Unmeasured calls per series before. */
  warmup: number;
}

const GOAL_EXTRA_MS = 0.05;
const CONTENT = "a small file\n".repeat(20);

/** Runs section (r) on one local workspace. */
export async function benchClientTs(ctx: BenchContext, options: ClientTsOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(r) ${created.reason}`] };
  const workspaceId = created.workspace.id;
  const sessions = new Http2SessionManager(ctx.server.url);
  try {
    const transport = createGrpcTransport({ baseUrl: ctx.server.url, sessionManager: sessions });
    const raw = createClient(ToolService, transport);
    const aw = new AgentWorkspace({ url: ctx.server.url, transport });
    const ws = aw.workspace(workspaceId);
    await raw.writeFile({ workspaceId, path: "small.txt", content: CONTENT });
    const lines = CONTENT.split("\n").length - 1;
    const checkRead = (r: { totalLines: number }) => {
      if (r.totalLines !== lines) throw new Error(`ReadFile: ${r.totalLines} lines, expected ${lines}`);
    };
    const checkBash = (r: { exitCode: number }) => {
      if (r.exitCode !== 0) throw new Error(`Bash: exit ${r.exitCode}`);
    };
    const operations = {
      "ReadFile small": {
        client: timed(() => ws.read("small.txt"), checkRead),
        raw: timed(() => raw.readFile({ workspaceId, path: "small.txt" }), checkRead),
      },
      "Bash no-op": {
        client: timed(() => ws.bash("true"), checkBash),
        raw: timed(() => raw.bash({ workspaceId, command: "true" }), checkBash),
      },
    };
    const rows: Row[] = [];
    const data: Record<string, unknown> = {};
    for (const [label, series] of Object.entries(operations)) {
      const iterations = label.startsWith("Bash") ? Math.max(50, Math.round(options.iterations / 4)) : options.iterations;
      ctx.log(`(r) ${label}: ${options.warmup} warmup + ${iterations} calls per series (client, raw connect-es), interleaved`);
      const samples = await interleave(series, options.warmup, iterations);
      const client = summarize(samples.client);
      const base = summarize(samples.raw);
      const p95 = { client: percentile(samples.client, 95), raw: percentile(samples.raw, 95) };
      const common = { section: "r client-ts", unit: "ms" };
      rows.push(
        {
          ...common,
          metric: `${label} p50, client vs raw connect-es (grpc)`,
          server: client.p50,
          baseline: base.p50,
          ratio: client.p50 / base.p50,
          goal: `≤ raw + ${GOAL_EXTRA_MS} ms`,
          pass: client.p50 - base.p50 <= GOAL_EXTRA_MS,
          note: `${signed(client.p50 - base.p50)} ms per call at p50, ${signed(p95.client - p95.raw)} ms at p95; same transport, ${iterations} calls each`,
        },
        { ...common, metric: `${label} p95, client vs raw connect-es (grpc)`, server: p95.client, baseline: p95.raw, ratio: p95.client / p95.raw, goal: "" },
      );
      data[label] = { iterations, client: roundSummary(client), raw: roundSummary(base), p95: p95, p50DiffMs: client.p50 - base.p50, p95DiffMs: p95.client - p95.raw };
    }
    return { rows, data: { warmup: options.warmup, stats: data }, skipped: [] };
  } finally {
    sessions.abort();
    await created.workspace.delete();
  }
}
