/**
 * Section (h): memory per idle workspace. For each provider, 50 workspaces (10 with --quick) are
 * created through the API and left idle to settle; then:
 * - the server's own RSS growth per workspace (the server child's RSS after a full GC, before
 *   and after), for information on every provider: it is what the server keeps per workspace
 *   (records, handles, for containers the attach stream to each executor);
 * - for container providers, the memory the workspace containers use (the Docker stats API,
 *   one-shot, usage minus page cache, summed over the containers) against as many raw containers
 *   of the same image and runtime, with no network and a volume, running `sleep infinity`
 *   (created with dockerode, alive at the same time). Goal: at most 1.1× per workspace.
 * The section runs twice, on servers that differ in AGENT_WORKSPACE_EXECUTOR_IDLE_MS only: with 0,
 * every container keeps its executor (a Node process) running; with a short idle time, settled past
 * it, the executors have exited and each container holds its wrapper shell (issue 29's goal: at
 * most 2 MiB beyond the sandbox's own). That run also times the call that wakes an executor
 * against a call right after it (both a no-op Bash), per workspace.
 * Everything created here is deleted again, also when the section fails.
 */
import type Docker from "dockerode";
import { type BenchContext, type BenchWorkspace, type SectionResult, createWorkspaces, mapLimit, mib, sleep } from "./context.ts";
import { type RawContainer, containerMemoryBytes, dockerClient, findContainer, providerContainerSpec, startRawContainer } from "./docker.ts";
import type { Row } from "./report.ts";
import { median, round } from "./stats.ts";

/** Options of section (h). */
export interface MemoryOptions {
  /** Providers to measure, in order. */
  providers: string[];
  /** Idle workspaces (and raw containers) per provider. */
  workspaces: number;
  /** How long the workspaces idle before measuring, in ms (past `executorIdleMs`). */
  settleMs: number;
  /** The server's AGENT_WORKSPACE_EXECUTOR_IDLE_MS (0: executors never exit). */
  executorIdleMs: number;
}

const GOAL_RATIO = 1.1;
/** Issue 29: an idle workspace costs at most this much beyond its sandbox. */
const GOAL_BEYOND_MIB = 2;
/** Docker calls at once while creating, measuring and removing. */
const PARALLEL = 4;

/** Sum of the containers' memory (usage minus cache), in bytes. */
async function totalMemory(containers: Docker.Container[]): Promise<number> {
  const each = await mapLimit(containers, 2 * PARALLEL, containerMemoryBytes);
  return each.reduce((a, b) => a + b, 0);
}

/** Measures one provider with `n` idle workspaces; deletes them (and raw containers) before returning. */
async function measureProvider(ctx: BenchContext, provider: string, n: number, settleMs: number, idleMs: number): Promise<{ rows: Row[]; data: unknown } | { skipped: string }> {
  const executor = idleMs > 0 ? `executor exited when idle (AGENT_WORKSPACE_EXECUTOR_IDLE_MS=${idleMs})` : "executor running (AGENT_WORKSPACE_EXECUTOR_IDLE_MS=0)";
  await sleep(200);
  const before = await ctx.server.stats({ gc: true });
  ctx.log(`(h) ${provider}: creating ${n} workspaces`);
  const created = await createWorkspaces(ctx, provider, n, PARALLEL);
  if (!created.ok) return { skipped: `(h) ${provider}: ${created.reason}` };
  const workspaces: BenchWorkspace[] = created.workspaces;
  const raws: RawContainer[] = [];
  try {
    await sleep(settleMs);
    const after = await ctx.server.stats({ gc: true });
    const serverPerWs = (after.rss - before.rss) / n;
    const rows: Row[] = [
      {
        section: "h memory",
        metric: `server RSS growth per idle workspace, ${n} workspaces (${provider}, ${executor})`,
        server: serverPerWs / 1024,
        baseline: Number.NaN,
        unit: "KiB",
        ratio: Number.NaN,
        goal: "",
        note: `server RSS ${mib(before.rss).toFixed(1)} → ${mib(after.rss).toFixed(1)} MiB (after a full GC each time)`,
      },
    ];
    const data: Record<string, unknown> = { workspaces: n, serverRssBeforeMiB: round(mib(before.rss), 1), serverRssAfterMiB: round(mib(after.rss), 1), serverKiBPerWorkspace: round(serverPerWs / 1024, 1) };
    if (provider !== "local") {
      const docker = dockerClient();
      const ours = await mapLimit(workspaces, PARALLEL, async (ws) => {
        const c = await findContainer(docker, ws.id);
        if (!c) throw new Error(`(h) container of workspace ${ws.id} not found`);
        return c;
      });
      const spec = providerContainerSpec(provider);
      ctx.log(`(h) ${provider}: starting ${n} raw '${spec.image}' containers (runtime ${spec.runtime ?? "default"}, sleep infinity)`);
      await mapLimit(Array.from({ length: n }), PARALLEL, async () => void raws.push(await startRawContainer(docker, spec)));
      await sleep(settleMs);
      const oursBytes = await totalMemory(ours);
      const rawBytes = await totalMemory(raws.map((r) => docker.getContainer(r.id)));
      const ratio = oursBytes / rawBytes;
      const beyond = mib((oursBytes - rawBytes) / n);
      rows.push({
        section: "h memory",
        metric: `container memory per idle workspace (${provider}, ${executor})`,
        server: mib(oursBytes / n),
        baseline: mib(rawBytes / n),
        unit: "MiB",
        ratio,
        goal: `≤ ${GOAL_RATIO}× sleep container, ≤ ${GOAL_BEYOND_MIB} MiB beyond it`,
        pass: ratio <= GOAL_RATIO || beyond <= GOAL_BEYOND_MIB,
        note: `${beyond.toFixed(2)} MiB beyond the raw container; docker stats usage − cache, summed over ${n} containers each; raw: 'sleep infinity', same image and runtime, no network`,
      });
      Object.assign(data, { image: spec.image, runtime: spec.runtime ?? "default", containerMiBPerWorkspace: round(mib(oursBytes / n), 2), rawMiBPerContainer: round(mib(rawBytes / n), 2) });
      if (idleMs > 0) {
        // The wake: a no-op Bash on a sleeping executor, then one on the executor it started.
        const woken: number[] = [];
        const warm: number[] = [];
        for (const ws of workspaces.slice(0, Math.min(n, 10))) {
          const call = async () => {
            const t0 = performance.now();
            const r = await ctx.clients.grpc.tools.bash({ workspaceId: ws.id, command: "true" });
            if (r.exitCode !== 0) throw new Error(`(h) no-op Bash exited ${r.exitCode}`);
            return performance.now() - t0;
          };
          woken.push(await call());
          warm.push(await call());
        }
        const w = median(woken);
        const h = median(warm);
        rows.push({
          section: "h memory",
          metric: `no-op Bash that wakes a sleeping executor vs the next one (${provider}, median of ${woken.length})`,
          server: w,
          baseline: h,
          unit: "ms",
          ratio: w / h,
          goal: "",
          note: `wake: WAKE to the wrapper, a new executor, PING, LISTEN again where egress is on; p100 ${Math.max(...woken).toFixed(1)} ms`,
        });
        Object.assign(data, { wakeMs: woken.map((x) => round(x, 2)), warmMs: warm.map((x) => round(x, 2)) });
      }
    }
    return { rows, data };
  } finally {
    await mapLimit(workspaces, PARALLEL, (w) => w.delete());
    await mapLimit(raws, PARALLEL, (r) => r.remove());
  }
}

/** Runs section (h) for each requested provider. */
export async function benchMemory(ctx: BenchContext, options: MemoryOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = { settleMs: options.settleMs, executorIdleMs: options.executorIdleMs };
  for (const provider of options.providers) {
    const result = await measureProvider(ctx, provider, options.workspaces, options.settleMs, options.executorIdleMs);
    if ("skipped" in result) {
      skipped.push(result.skipped);
      ctx.log(result.skipped);
      continue;
    }
    rows.push(...result.rows);
    data[provider] = result.data;
  }
  return { rows, data, skipped };
}
