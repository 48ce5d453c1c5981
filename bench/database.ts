/**
 * Section (w): the store under the server, SQLite (embedded, the default) against PostgreSQL
 * (AGENT_WORKSPACE_DATABASE_URL), on two server children alike but for it, local provider, their
 * calls interleaved round-robin so load on the host falls on both alike. PostgreSQL is a private
 * cluster the section starts (Debian's binaries: `initdb` in a temporary directory, a Unix socket
 * only, test/helpers/postgres.ts), on the same two cores as everything else.
 *
 * Per store: a cold session, `StartSession` → ACTIVE on `WatchSession` and `EndSession` (the
 * session and workspace records written several times each); `UpdateAgentType` (one
 * compare-and-set write per call); `ListAuditEvents` of a workspace's last 50 calls (a query of
 * the audit table); and the mixed tool calls of an agent at work, `Bash` of `echo x`, `ReadFile`
 * and `WriteFile` of 4 KiB in turn (each an audit record, written in batches). Information rows:
 * PostgreSQL's p50 over SQLite's.
 *
 * Then a second server on the same PostgreSQL database (two replicas): a `Bash` on the first, and
 * the time from its start until its `tool_call_finished` reaches a `WatchEvents` reader on the
 * other server (through the database's notifications), against a reader on the server that ran
 * it, the two readers timed on the same calls; and a no-op `Bash` sent through the TypeScript
 * client of the replica that does not serve the workspace (its first call refused with the serving
 * one's URL and sent there; the client then sends the workspace's calls there directly), against
 * the client of the serving one.
 *
 * Last, load through two replicas against one: `workers` agents at once, each its own session
 * calling back to back through the server that serves it (the mixed tool calls above), and
 * `workers / 2` at once each starting a session, waiting for it ACTIVE and ending it; on one
 * PostgreSQL server, on two (the sessions spread over both, each agent calling its session's own),
 * and on the SQLite server; the three take turns in slices. Information rows: calls and sessions
 * per second of two replicas over one, and of one PostgreSQL server over SQLite, on two cores that
 * every server and the database share.
 */
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { AgentWorkspace } from "../clients/ts/src/index.ts";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { startPostgres } from "../test/helpers/postgres.ts";
import { clientsOf } from "../test/helpers/store-crash.ts";
import { type LoadCall, type Measure, type SectionResult, interleave, interleaveLoad, type LoadResult } from "./context.ts";
import type { Row } from "./report.ts";
import { startServerProcess } from "./server-process.ts";
import { round, roundSummary, summarize, type Summary } from "./stats.ts";

/** Options of section (w). */
export interface DatabaseOptions {
  /** Measured calls per series. */
  iterations: number;
  /** Unmeasured calls per series first. */
  warmup: number;
  /** The load through one and two replicas: slices per series, their length (ms), agents at once. */
  rounds: number;
  sliceMs: number;
  workers: number;
}

/** The servers a load series goes through: one (SQLite, or PostgreSQL) or the two PostgreSQL replicas. */
const LOADS = { "SQLite, one server": ["sqlite"], "PostgreSQL, one replica": ["a"], "PostgreSQL, two replicas": ["a", "b"] } as const;

/**
 * The mixed tool load of `workers` agents (a session each, spread round-robin over the servers of
 * each series, each agent calling through its session's server), and the session start load.
 */
async function loadAcross(urls: { sqlite: string; a: string; b: string }, options: DatabaseOptions, log: (msg: string) => void): Promise<{ tools: Record<string, LoadResult>; sessions: Record<string, LoadResult> }> {
  const type = `bench-load-${process.pid}`;
  const admin = { sqlite: clientsOf(urls.sqlite), a: clientsOf(urls.a), b: clientsOf(urls.b) };
  const opened: Array<{ c: ReturnType<typeof clientsOf>; end: () => Promise<unknown> }> = [];
  const content = "y".repeat(4095) + "\n";
  const active = async (c: ReturnType<typeof clientsOf>, id: string) => {
    for await (const ev of c.workspaces.watchSession({ id })) {
      if (ev.event.case !== "status") continue;
      if (ev.event.value.status === SessionStatus.ACTIVE) return;
      if (ev.event.value.status === SessionStatus.DEGRADED || ev.event.value.status === SessionStatus.ENDED) throw new Error(`session ${id}: ${ev.event.value.message}`);
    }
  };
  try {
    // The agent type is shared by the PostgreSQL replicas (one database); SQLite has its own.
    for (const c of [admin.sqlite, admin.a]) await c.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "local", tools: ["bash", "read", "write"] } } });
    const toolSeries: Record<string, LoadCall> = {};
    const sessionSeries: Record<string, LoadCall> = {};
    for (const [name, servers] of Object.entries(LOADS)) {
      const agents: Array<ReturnType<typeof clientsOf>> = [];
      for (let w = 0; w < options.workers; w++) {
        const server = servers[w % servers.length];
        const started = await admin[server].workspaces.startSession({ agentType: type, task: {} });
        const id = started.session?.id ?? "";
        await active(admin[server], id);
        const c = clientsOf(urls[server], started.sessionToken);
        await c.tools.writeFile({ path: "f.txt", content });
        agents.push(c);
        opened.push({ c, end: () => admin[server].workspaces.endSession({ id }) });
      }
      toolSeries[name] = async (w, n) => {
        const c = agents[w];
        const op = n % 3;
        if (op === 0) await c.tools.bash({ command: "echo x" });
        else if (op === 1) await c.tools.readFile({ path: "f.txt" });
        else await c.tools.writeFile({ path: "f.txt", content });
      };
      sessionSeries[name] = async (w) => {
        const c = admin[servers[w % servers.length]];
        const id = (await c.workspaces.startSession({ agentType: type, task: {} })).session?.id ?? "";
        try {
          await active(c, id);
        } finally {
          await c.workspaces.endSession({ id });
        }
      };
    }
    log(`(w) mixed tool load of ${options.workers} agents, ${options.rounds} slices of ${options.sliceMs} ms per series (${Object.keys(LOADS).join(", ")})`);
    const tools = await interleaveLoad(toolSeries, { concurrency: options.workers, rounds: options.rounds, sliceMs: options.sliceMs });
    log(`(w) session start load, ${options.workers / 2} at once`);
    const sessions = await interleaveLoad(sessionSeries, { concurrency: options.workers / 2, rounds: options.rounds, sliceMs: options.sliceMs });
    return { tools, sessions };
  } finally {
    for (const o of opened) {
      await o.end().catch(() => undefined);
      o.c.close();
    }
    await admin.sqlite.config.deleteAgentType({ id: type }).catch(() => undefined);
    await admin.a.config.deleteAgentType({ id: type }).catch(() => undefined);
    for (const c of Object.values(admin)) c.close();
  }
}

/** An information row of section (w): `server`'s rate over `baseline`'s (higher is better). */
function rateVersus(metric: string, server: LoadResult, baseline: LoadResult, note: string): Row {
  const errors = server.errors + baseline.errors;
  return {
    section: "w database",
    metric,
    server: server.rate,
    baseline: baseline.rate,
    unit: "/s",
    ratio: server.rate / baseline.rate,
    goal: "",
    note: `p99 ${summarize(server.latenciesMs).p99.toFixed(1)} against ${summarize(baseline.latenciesMs).p99.toFixed(1)} ms; ${note}${errors > 0 ? `; ${errors} errors: ${[...server.firstErrors, ...baseline.firstErrors].slice(0, 2).join(" | ")}` : ""}`,
  };
}

const STORES = ["sqlite", "postgres"] as const;
type StoreName = (typeof STORES)[number];
const OPS = ["session start → ACTIVE + end", "UpdateAgentType", "ListAuditEvents (50)", "tool calls (Bash, ReadFile, WriteFile in turn)"] as const;

/** The four series of one server. */
async function seriesOf(name: StoreName, url: string): Promise<{ series: Record<string, Measure>; close(): Promise<void> }> {
  const c = clientsOf(url);
  const type = `bench-db-${process.pid}`;
  await c.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, tools: ["bash", "read", "write", "list"] } } });
  const workspaceId = (await c.workspaces.createWorkspace({ provider: "local" })).workspace?.id ?? "";
  const content = "x".repeat(4095) + "\n";
  await c.tools.writeFile({ workspaceId, path: "f.txt", content });
  let updates = 0;
  let tool = 0;
  const timedCall = async (fn: () => Promise<unknown>) => {
    const t0 = performance.now();
    await fn();
    return performance.now() - t0;
  };
  const series: Record<string, Measure> = {
    [`${name}: ${OPS[0]}`]: async () => {
      const t0 = performance.now();
      const id = (await c.workspaces.startSession({ agentType: type, task: {} })).session?.id ?? "";
      let ms = Number.NaN;
      for await (const ev of c.workspaces.watchSession({ id })) {
        if (ev.event.case !== "status") continue;
        if (ev.event.value.status === SessionStatus.ACTIVE) break;
        if (ev.event.value.status === SessionStatus.DEGRADED || ev.event.value.status === SessionStatus.ENDED) throw new Error(`session ${id}: ${ev.event.value.message}`);
      }
      await c.workspaces.endSession({ id });
      ms = performance.now() - t0;
      return ms;
    },
    [`${name}: ${OPS[1]}`]: () => timedCall(() => c.config.updateAgentType({ agentType: { id: type, description: `update ${++updates}` } })),
    [`${name}: ${OPS[2]}`]: () =>
      timedCall(async () => {
        const { events } = await c.audit.listAuditEvents({ workspaceId, pageSize: 50 });
        if (events.length === 0) throw new Error("no audit events");
      }),
    [`${name}: ${OPS[3]}`]: () =>
      timedCall(async () => {
        const n = tool++ % 3;
        if (n === 0) await c.tools.bash({ workspaceId, command: "echo x" });
        else if (n === 1) await c.tools.readFile({ workspaceId, path: "f.txt" });
        else await c.tools.writeFile({ workspaceId, path: "f.txt", content });
      }),
  };
  return {
    series,
    async close() {
      await c.workspaces.deleteWorkspace({ id: workspaceId }).catch(() => undefined);
      await c.config.deleteAgentType({ id: type }).catch(() => undefined);
      c.close();
    },
  };
}

/**
 * `iterations` Bash calls on server `a`'s workspace, each timed from its start to its
 * tool_call_finished on a reader of `a` and on a reader of `b`. Returns both series, in ms.
 */
async function eventsAcross(a: string, b: string, iterations: number, warmup: number): Promise<{ own: number[]; other: number[] }> {
  const ca = clientsOf(a);
  const cb = clientsOf(b);
  const abort = new AbortController();
  const workspaceId = (await ca.workspaces.createWorkspace({ provider: "local" })).workspace?.id ?? "";
  // spanId → arrival time, per reader.
  const seen = [new Map<string, number>(), new Map<string, number>()];
  const wake: Array<() => void> = [];
  const readers = [ca, cb].map(async (c, i) => {
    const started = new Promise<void>((resolve) => wake.push(resolve));
    void (async () => {
      try {
        for await (const ev of c.audit.watchEvents({ workspaceId }, { signal: abort.signal })) {
          if (ev.event.case === "started") wake[i]?.();
          if (ev.event.case === "toolCallFinished" && ev.event.value.call?.tool === "bash") seen[i].set(ev.event.value.call.toolCallId, performance.now());
        }
      } catch {
        // Ends with the abort.
      }
    })();
    await started;
  });
  await Promise.all(readers);
  const own: number[] = [];
  const other: number[] = [];
  try {
    for (let i = 0; i < warmup + iterations; i++) {
      const id = `bench-${i}`;
      const t0 = performance.now();
      await ca.tools.bash({ workspaceId, command: "true" }, { headers: { "tool-call-id": id } });
      const deadline = Date.now() + 10_000;
      while (!(seen[0].has(id) && seen[1].has(id))) {
        if (Date.now() > deadline) throw new Error(`(w) the events of call ${id} did not reach both readers in 10 s`);
        await new Promise((r) => setImmediate(r));
      }
      if (i >= warmup) {
        own.push((seen[0].get(id) as number) - t0);
        other.push((seen[1].get(id) as number) - t0);
      }
    }
  } finally {
    abort.abort();
    await ca.workspaces.deleteWorkspace({ id: workspaceId }).catch(() => undefined);
    ca.close();
    cb.close();
  }
  return { own, other };
}

/** An information row of section (w): `server`'s p50 over `baseline`'s, with both p99s in the note. */
function versus(metric: string, server: Summary, baseline: Summary, note: string): Row {
  return {
    section: "w database",
    metric,
    server: server.p50,
    baseline: baseline.p50,
    unit: "ms",
    ratio: server.p50 / baseline.p50,
    goal: "",
    note: `p99 ${server.p99.toFixed(2)} against ${baseline.p99.toFixed(2)} ms; ${note}`,
  };
}

/** Runs section (w). */
export async function benchDatabase(options: DatabaseOptions, root: string, log: (msg: string) => void): Promise<SectionResult> {
  const pg = await startPostgres();
  const servers: Array<Awaited<ReturnType<typeof startServerProcess>>> = [];
  const sides: Array<Awaited<ReturnType<typeof seriesOf>>> = [];
  try {
    const url = await pg.createDatabase("bench");
    for (const name of STORES) {
      const dataDir = path.join(root, `database-${name}`);
      await mkdir(dataDir, { recursive: true });
      const server = await startServerProcess({ dataDir, env: { AGENT_WORKSPACE_DOCKER: "off", ...(name === "postgres" ? { AGENT_WORKSPACE_DATABASE_URL: url } : {}) } });
      servers.push(server);
      sides.push(await seriesOf(name, server.url));
    }
    const series = Object.assign({}, ...sides.map((s) => s.series)) as Record<string, Measure>;
    log(`(w) ${options.warmup} warmup + ${options.iterations} calls per series (${Object.keys(series).join(", ")})`);
    const samples = await interleave(series, options.warmup, options.iterations);
    const stats: Record<string, Summary> = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
    const rows: Row[] = OPS.map((op) =>
      versus(`${op} p50, PostgreSQL vs SQLite (local)`, stats[`postgres: ${op}`], stats[`sqlite: ${op}`], `a private PostgreSQL ${pg.version} on the same host, Unix socket`),
    );
    // The second replica on the PostgreSQL database.
    const replicaDir = path.join(root, "database-postgres-2");
    await mkdir(replicaDir, { recursive: true });
    const replica = await startServerProcess({ dataDir: replicaDir, env: { AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_DATABASE_URL: url } });
    servers.push(replica);
    log(`(w) ${options.warmup} warmup + ${options.iterations} Bash calls watched on both replicas`);
    const across = await eventsAcross(servers[1].url, replica.url, options.iterations, options.warmup);
    const own = summarize(across.own);
    const other = summarize(across.other);
    stats["postgres: tool_call_finished on the other replica"] = other;
    stats["postgres: tool_call_finished on the same replica"] = own;
    rows.push(
      versus(
        "Bash start → its tool_call_finished on a WatchEvents reader of the other replica p50, vs a reader of the server that ran it",
        other,
        own,
        `two servers on one PostgreSQL ${pg.version} database, the event through its notifications`,
      ),
    );
    // A call sent to the replica that does not serve the workspace: refused with the serving
    // server's URL, and sent there by the TypeScript client, against the client of that server.
    log(`(w) ${options.warmup} warmup + ${options.iterations} no-op Bash calls through each replica's client`);
    const direct = new AgentWorkspace({ url: servers[1].url });
    const redirected = new AgentWorkspace({ url: replica.url });
    try {
      const ws = (await direct.workspaces.create({ provider: "local" })).id;
      await redirected.workspace(ws).bash("true");
      const timedBash = (client: AgentWorkspace) => async () => {
        const t0 = performance.now();
        await client.workspace(ws).bash("true");
        return performance.now() - t0;
      };
      const calls = await interleave({ direct: timedBash(direct), redirected: timedBash(redirected) }, options.warmup, options.iterations);
      const d = summarize(calls.direct);
      const r = summarize(calls.redirected);
      stats["postgres: no-op Bash through the serving replica"] = d;
      stats["postgres: no-op Bash through the other replica (followed)"] = r;
      rows.push(
        versus(
          "no-op Bash through the TS client of the replica not serving the workspace p50, vs the client of the serving one",
          r,
          d,
          "its first call was refused with the serving replica's URL and followed; the client sends the workspace's later calls there directly",
        ),
      );
      await direct.workspaces.delete(ws).catch(() => undefined);
    } finally {
      direct.close();
      redirected.close();
    }
    const load = await loadAcross({ sqlite: servers[0].url, a: servers[1].url, b: replica.url }, options, log);
    const [sqliteName, oneName, twoName] = Object.keys(LOADS);
    const loadNote = (what: string) => `${what}; every server and the database on the same 2 cores`;
    rows.push(
      rateVersus(`mixed tool calls per second, ${options.workers} agents, two PostgreSQL replicas vs one`, load.tools[twoName], load.tools[oneName], loadNote("each agent calls the replica serving its session")),
      rateVersus(`mixed tool calls per second, ${options.workers} agents, one server: PostgreSQL vs SQLite`, load.tools[oneName], load.tools[sqliteName], loadNote("the same calls")),
      rateVersus(`session starts (→ ACTIVE + end) per second, ${options.workers / 2} at once, two PostgreSQL replicas vs one`, load.sessions[twoName], load.sessions[oneName], loadNote("started on the two in turn")),
      rateVersus(`session starts per second, ${options.workers / 2} at once, one server: PostgreSQL vs SQLite`, load.sessions[oneName], load.sessions[sqliteName], loadNote("the same sessions")),
    );
    const rates = Object.fromEntries([...Object.entries(load.tools).map(([k, v]) => [`tool calls/s: ${k}`, round(v.rate)]), ...Object.entries(load.sessions).map(([k, v]) => [`sessions/s: ${k}`, round(v.rate)])]);
    return {
      rows,
      data: { iterations: options.iterations, warmup: options.warmup, postgres: pg.version, rates, stats: Object.fromEntries(Object.entries(stats).map(([k, s]) => [k, roundSummary(s)])), p50: Object.fromEntries(Object.entries(stats).map(([k, s]) => [k, round(s.p50)])) },
      skipped: [],
    };
  } finally {
    for (const s of sides) await s.close().catch(() => undefined);
    for (const s of servers) await s.stop().catch(() => undefined);
    await pg.stop();
  }
}
