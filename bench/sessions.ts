/**
 * Section (k): session start, cold and from the warm pool, per provider, against the raw way to
 * make the same sandbox, measured in the same run.
 *
 * - cold: an agent type without a pool (no repository, no setup commands); the time from sending
 *   `StartSession` to receiving the ACTIVE status event on `WatchSession` (opened as soon as the
 *   response names the session; the stream replays the events so far, so none is missed). Each
 *   session is ended again, untimed. Interleaved round-robin with the raw baseline of section (j):
 *   `mkdir` (local), dockerode createVolume + createContainer + start of a `sleep infinity`
 *   container of the same image and runtime (docker, gvisor), QEMU restoring the template alone
 *   (microvm), removed again, untimed. One unmeasured round first.
 * - pool: an agent type like the cold one with `warm_pool_size` 3. Before each claim the pool is
 *   left to settle: `ListWorkspaces` (polled every 25 ms) shows exactly 3 READY workspaces of the
 *   agent type without a session, twice in a row, one of them new since the last claim (the
 *   refill that claim started: the listing shows a workspace only once it is made, so without
 *   this a claim could be timed while a refill still runs; after 3× the cold p95 without one it
 *   goes on anyway and says so). Then `StartSession` is timed until its response arrives, which
 *   is ACTIVE at once; a response without `from_warm_pool` is a miss (counted, reported, and its
 *   session ended). Goal: p50 ≤ 20 ms.
 *
 * The server runs with AGENT_WORKSPACE_SESSION_TICK_MS=50, so a pool starts filling soon after
 * its agent type is made. Everything made is removed again, also on failure: sessions ended, the
 * pool set to size 0 and drained, leftovers deleted, the agent types deleted.
 */
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { type Client, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { type Session, SessionStatus, WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type BenchContext, type BenchWorkspace, type Measure, type SectionResult, createWorkspace, interleave, liveWorkspaces, sleep } from "./context.ts";
import { rawCreate } from "./create.ts";
import type { Row } from "./report.ts";
import { percentile, round, roundSummary, summarize } from "./stats.ts";

/** Options of section (k). */
export interface SessionsOptions {
  /** Providers to measure, in order. */
  providers: string[];
  /** Measured cold starts (each with a raw baseline) and pool claims, per provider. */
  iterations: Record<string, number>;
  /** Warm pool size of the pooled agent type. */
  poolSize: number;
}

/** The issue's goal for a pool claim, at p50. */
const POOL_GOAL_MS = 20;
const TOOLS = ["bash", "read"];

type Config = Client<typeof ConfigService>;

/** Server-side createdAt → readyAt of a session, in ms (NaN when unset). */
function serverReadyMs(s: Session | undefined): number {
  return s?.createdAt && s.readyAt ? timestampMs(s.readyAt) - timestampMs(s.createdAt) : Number.NaN;
}

/** The first few distinct messages, for notes. */
function firstDistinct(messages: string[], n = 3): string[] {
  return [...new Set(messages)].slice(0, n);
}

/** Runs section (k) for each requested provider. */
export async function benchSessions(ctx: BenchContext, options: SessionsOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = { poolSize: options.poolSize, iterations: options.iterations, goalPoolP50Ms: POOL_GOAL_MS };
  const sessions = new Http2SessionManager(ctx.server.url);
  const config: Config = createClient(ConfigService, createGrpcTransport({ baseUrl: ctx.server.url, sessionManager: sessions }));
  try {
    for (const provider of options.providers) {
      // A provider the server lacks fails its first creation: skip it rather than fail the section.
      const probe = await createWorkspace(ctx, provider);
      if (!probe.ok) {
        skipped.push(`(k) ${provider}: ${probe.reason}`);
        ctx.log(`(k) skipping ${provider}: ${probe.reason}`);
        continue;
      }
      await probe.workspace.delete();
      const n = options.iterations[provider] ?? options.iterations.local ?? 10;
      const result = await benchProvider(ctx, config, provider, n, options.poolSize);
      rows.push(...result.rows);
      data[provider] = result.data;
    }
  } finally {
    sessions.abort();
  }
  return { rows, data, skipped };
}

/** Creates an agent type; `cleanup` ends what it left (sessions, pool), then deletes it. */
async function agentType(ctx: BenchContext, config: Config, id: string, provider: string, warmPoolSize: number) {
  await config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: TOOLS, warmPoolSize, setupCommands: [] } } });
  const open = new Set<string>();
  const w = ctx.clients.grpc.workspaces;
  const cleanup = async () => {
    liveWorkspaces.delete(entry);
    for (const sid of open) await w.endSession({ id: sid }).catch((err: unknown) => ctx.log(`warning: could not end session ${sid}: ${String(err)}`));
    open.clear();
    if (warmPoolSize > 0) {
      // Size 0: the pool drains on the next tick; what is left after 30 s is deleted directly.
      await config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { enabled: true, provider, tools: TOOLS, warmPoolSize: 0, setupCommands: [] } }).catch((err: unknown) => ctx.log(`warning: could not shrink the pool of ${id}: ${String(err)}`));
      const deadline = Date.now() + 30_000;
      const list = () => poolMembers(ctx, id, provider).catch(() => undefined);
      let left = await list();
      while ((left === undefined || left.length > 0) && Date.now() < deadline) {
        await sleep(100);
        left = await list();
      }
      for (const m of left ?? []) {
        ctx.log(`warning: pool workspace ${m.id} of ${id} was not drained within 30 s; deleting it`);
        await w.deleteWorkspace({ id: m.id }).catch(() => undefined);
      }
    }
    // A workspace still being removed keeps the agent type; try a few times.
    for (let i = 0; ; i++) {
      try {
        await config.deleteAgentType({ id });
        break;
      } catch (err) {
        if (i >= 20) {
          ctx.log(`warning: could not delete agent type ${id}: ${String(err)}`);
          break;
        }
        await sleep(250);
      }
    }
  };
  // Registered with the workspaces the harness removes on an interrupted run.
  const entry: BenchWorkspace = { id: `agent-type:${id}`, provider, delete: cleanup };
  liveWorkspaces.add(entry);
  return { id, open, cleanup };
}

/** Workspaces of agent type `type` without a session (the pool's), with their status. */
async function poolMembers(ctx: BenchContext, type: string, provider: string): Promise<Array<{ id: string; status: WorkspaceStatus }>> {
  const res = await ctx.clients.grpc.workspaces.listWorkspaces({ provider, pageSize: 1000 });
  return res.workspaces.filter((ws) => ws.agentType === type && ws.sessionId === "").map((ws) => ({ id: ws.id, status: ws.status }));
}

/** What waiting for a settled pool saw. */
interface Settled {
  /** The READY pool workspaces at the end. */
  ready: string[];
  /** Whether a workspace the caller did not know yet showed up (the refill of the last claim). */
  refilled: boolean;
  /** Every pool workspace listed while waiting. */
  listed: Set<string>;
  /** ListWorkspaces calls that failed while waiting, with their messages. */
  listErrors: string[];
}

/**
 * Waits until the pool shows exactly `size` workspaces, all READY, in two polls in a row, and —
 * unless `refillWithinMs` passed first — one of them is not in `known` (the refill a claim
 * starts, which the listing only shows once it is made, so without this a claim could be timed
 * while the refill still runs). Adds every pool workspace seen to `known`. A failed
 * ListWorkspaces is counted and polled again.
 */
async function settlePool(ctx: BenchContext, type: string, provider: string, size: number, known: Set<string>, refillWithinMs: number, timeoutMs: number): Promise<Settled> {
  const t0 = Date.now();
  const before = new Set(known);
  const listErrors: string[] = [];
  const listed = new Set<string>();
  let refilled = false;
  let last = "";
  for (;;) {
    let members: Array<{ id: string; status: WorkspaceStatus }> | undefined;
    try {
      members = await poolMembers(ctx, type, provider);
    } catch (err) {
      listErrors.push(err instanceof Error ? err.message : String(err));
      last = "";
    }
    if (members) {
      for (const m of members) {
        known.add(m.id);
        listed.add(m.id);
        if (!before.has(m.id)) refilled = true;
      }
      const ready = members.filter((m) => m.status === WorkspaceStatus.READY).map((m) => m.id).sort();
      const key = ready.length === size && members.length === size ? ready.join(",") : "";
      if (key !== "" && key === last && (refilled || Date.now() - t0 >= refillWithinMs)) return { ready, refilled, listed, listErrors };
      last = key;
      if (Date.now() - t0 > timeoutMs) throw new Error(`the warm pool of ${type} did not settle at ${size} ready workspaces within ${timeoutMs} ms (now ${members.length}, ${ready.length} ready)`);
    } else if (Date.now() - t0 > timeoutMs) {
      throw new Error(`the warm pool of ${type} could not be listed for ${timeoutMs} ms: ${listErrors.at(-1)}`);
    }
    await sleep(25);
  }
}

/** Cold session start: StartSession → ACTIVE on WatchSession; the session is ended after, untimed. */
function coldStart(ctx: BenchContext, type: { id: string; open: Set<string> }, serverMs: number[], errors: string[]): Measure {
  const w = ctx.clients.grpc.workspaces;
  return async () => {
    const t0 = performance.now();
    const res = await w.startSession({ agentType: type.id, task: {} });
    const id = res.session?.id ?? "";
    type.open.add(id);
    let ms = Number.NaN;
    let last = SessionStatus.UNSPECIFIED;
    let message = "";
    for await (const ev of w.watchSession({ id })) {
      if (ev.event.case !== "status") continue;
      last = ev.event.value.status;
      message = ev.event.value.message;
      if (last === SessionStatus.ACTIVE) {
        ms = performance.now() - t0;
        break;
      }
      if (last === SessionStatus.DEGRADED || last === SessionStatus.ENDED) break;
    }
    if (res.session?.status !== SessionStatus.PROVISIONING || res.session.fromWarmPool) errors.push(`cold StartSession answered ${SessionStatus[res.session?.status ?? 0]}${res.session?.fromWarmPool ? " from the warm pool" : ""}`);
    const ended = await w.endSession({ id });
    type.open.delete(id);
    if (!Number.isFinite(ms)) throw new Error(`session ${id} did not become ACTIVE (last status ${SessionStatus[last]}${message ? `: ${message}` : ""})`);
    serverMs.push(serverReadyMs(ended.session));
    return ms;
  };
}

async function benchProvider(ctx: BenchContext, config: Config, provider: string, iterations: number, poolSize: number): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const rows: Row[] = [];
  const w = ctx.clients.grpc.workspaces;
  const suffix = `${provider}-${process.pid}`;

  // 1. cold, interleaved with the raw baseline.
  const raw = rawCreate(ctx, provider);
  const coldServerMs: number[] = [];
  const coldErrors: string[] = [];
  const cold = await agentType(ctx, config, `bench-cold-${suffix}`, provider, 0);
  let samples: Record<string, number[]>;
  try {
    ctx.log(`(k) ${provider}: 1 warmup + ${iterations} cold sessions (StartSession → ACTIVE) each with ${raw.name}`);
    samples = await interleave({ cold: coldStart(ctx, cold, coldServerMs, coldErrors), raw: raw.measure }, 1, iterations);
  } finally {
    await cold.cleanup();
  }
  // The warmup's server-side time is the first; drop it like its sample.
  coldServerMs.shift();
  const coldSum = summarize(samples.cold);
  const rawSum = summarize(samples.raw);
  const coldP95 = percentile(samples.cold, 95);
  const rawP95 = percentile(samples.raw, 95);
  const coldServerP50 = percentile(coldServerMs.filter(Number.isFinite), 50);
  rows.push({
    section: "k sessions",
    metric: `StartSession → ACTIVE p50, cold (${provider})`,
    server: coldSum.p50,
    baseline: rawSum.p50,
    unit: "ms",
    ratio: coldSum.p50 / rawSum.p50,
    goal: `info, vs ${raw.name}`,
    note: `server's own createdAt → readyAt p50 ${coldServerP50.toFixed(1)} ms; max ${coldSum.max.toFixed(1)} ms (${raw.name}: ${rawSum.max.toFixed(1)} ms) over ${iterations}${coldErrors.length > 0 ? `; ${coldErrors.length} odd: ${firstDistinct(coldErrors).join("; ")}` : ""}`,
  });
  rows.push({
    section: "k sessions",
    metric: `StartSession → ACTIVE p95, cold (${provider})`,
    server: coldP95,
    baseline: rawP95,
    unit: "ms",
    ratio: coldP95 / rawP95,
    goal: `info, vs ${raw.name}`,
  });

  // 2. pool claims, each once the refill the last one started is made (or, failing that, after
  // three cold creations' time).
  const refillWithinMs = Math.min(20_000, Math.max(2_000, Math.ceil(3 * coldP95)));
  const pool = await agentType(ctx, config, `bench-pool-${suffix}`, provider, poolSize);
  const claims: number[] = [];
  const claimServerMs: number[] = [];
  const waits: number[] = [];
  const misses: string[] = [];
  const claimed: string[] = [];
  const listErrors: string[] = [];
  let noRefill = 0;
  let returned = 0;
  let drained = 0;
  let lastReady: string[] = [];
  const seen = new Set<string>();
  let firstFillMs = Number.NaN;
  try {
    ctx.log(`(k) ${provider}: pool of ${poolSize}; ${iterations} claims, each once the pool is full again`);
    let t = performance.now();
    const initial = await settlePool(ctx, pool.id, provider, poolSize, seen, 0, 120_000);
    firstFillMs = performance.now() - t;
    listErrors.push(...initial.listErrors);
    lastReady = initial.ready;
    for (let i = 0; i < iterations; i++) {
      if (i > 0) {
        t = performance.now();
        const settled = await settlePool(ctx, pool.id, provider, poolSize, seen, refillWithinMs, 60_000);
        waits.push(performance.now() - t);
        listErrors.push(...settled.listErrors);
        if (!settled.refilled) noRefill++;
        // EndSession gives an unused workspace back to a pool short of its size.
        const taken = claimed.at(-1);
        if (taken !== undefined && settled.listed.has(taken)) returned++;
        // Pool workspaces that went away without a claim: the pool removed them (above its size).
        const before = new Set([...lastReady.filter((id) => id !== taken), ...settled.listed]);
        drained += [...before].filter((id) => !settled.ready.includes(id)).length;
        lastReady = settled.ready;
      }
      const t0 = performance.now();
      const res = await w.startSession({ agentType: pool.id, task: {} });
      const ms = performance.now() - t0;
      const s = res.session;
      const id = s?.id ?? "";
      pool.open.add(id);
      if (s?.fromWarmPool && s.status === SessionStatus.ACTIVE) {
        claims.push(ms);
        claimServerMs.push(serverReadyMs(s));
        claimed.push(s.workspaceId);
      } else {
        misses.push(`claim ${i + 1}: ${SessionStatus[s?.status ?? 0]}, from_warm_pool ${s?.fromWarmPool ?? false}, ${ms.toFixed(1)} ms`);
      }
      await w.endSession({ id });
      pool.open.delete(id);
    }
  } finally {
    await pool.cleanup();
  }
  const claimSum = summarize(claims);
  const claimP95 = percentile(claims, 95);
  const reused = claimed.filter((id, i) => claimed.indexOf(id) < i).length;
  const made = seen.size - poolSize;
  const pass = claims.length > 0 && claimSum.p50 <= POOL_GOAL_MS;
  rows.push({
    section: "k sessions",
    metric: `StartSession from warm pool p50 (${provider})`,
    server: claimSum.p50,
    baseline: rawSum.p50,
    unit: "ms",
    ratio: claimSum.p50 / rawSum.p50,
    goal: `≤ ${POOL_GOAL_MS} ms`,
    pass,
    note:
      `${claims.length} claims, ${misses.length} missed the pool; server's own createdAt → readyAt p50 ${percentile(claimServerMs, 50).toFixed(1)} ms; ` +
      `${made} refills; ${returned} ended sessions gave their workspace back to the pool, ${reused} claims took one back, ${drained} pool workspaces were removed by the pool unclaimed` +
      (noRefill > 0 ? `; ${noRefill} times no refill showed up within ${refillWithinMs} ms` : "") +
      (listErrors.length > 0 ? `; ListWorkspaces failed ${listErrors.length} times while waiting: ${firstDistinct(listErrors, 1).join("")}` : ""),
  });
  rows.push({
    section: "k sessions",
    metric: `StartSession from warm pool p95 (${provider})`,
    server: claimP95,
    baseline: rawP95,
    unit: "ms",
    ratio: claimP95 / rawP95,
    goal: "info",
    note: `max ${claimSum.max.toFixed(1)} ms; pool full again p50 ${percentile(waits, 50).toFixed(0)} ms after each end; first fill of ${poolSize} ${firstFillMs.toFixed(0)} ms`,
  });
  return {
    rows,
    data: {
      baseline: raw.name,
      cold: { ...roundSummary(coldSum), p95: round(coldP95), samples: samples.cold.map((x) => round(x)), serverReadyMs: coldServerMs.map((x) => round(x)), odd: coldErrors },
      raw: { ...roundSummary(rawSum), p95: round(rawP95), samples: samples.raw.map((x) => round(x)) },
      pool: {
        ...roundSummary(claimSum),
        p95: round(claimP95),
        samples: claims.map((x) => round(x)),
        serverReadyMs: claimServerMs.map((x) => round(x)),
        misses,
        goalMet: pass,
        claimedWorkspaces: claimed,
        returnedByEndSession: returned,
        reusedReturnedWorkspaces: reused,
        drainedUnclaimed: drained,
        poolWorkspacesSeen: seen.size,
        refillWithinMs,
        noRefill,
        listWorkspacesErrors: listErrors.length,
        listWorkspacesFirstErrors: firstDistinct(listErrors),
        firstFillMs: round(firstFillMs),
        settleWaitsMs: waits.map((x) => round(x)),
      },
    },
  };
}
