/**
 * Section (a): round-trip latency of a no-op `Bash` (`command: "true"`) through the server, over
 * gRPC (binary, HTTP/2) and Connect (JSON, HTTP/1.1), against the cheapest raw way to run the
 * same command: for the local provider `spawn('bash', ['-c', 'true'])` timed inside a minimal
 * Node process (as a user's own small launcher would run it; the goal's baseline), and beside it,
 * labelled, the same spawn from inside the bench process (the old baseline: a big process forks
 * several times slower, which flattered the ratio); a raw Docker exec in the same container for
 * container providers. Calls are sequential and interleaved round-robin with the baselines, so
 * background load affects every series alike.
 *
 * Local only, for information: the same call on a second server whose local commands are spawned
 * by the executor per command (AGENT_WORKSPACE_LOCAL_LAUNCHER=spawn, the way before workspace
 * launchers), interleaved with the others, so the launcher's gain is measured in the same run. And
 * the call taken apart, in the same interleaved series: the server's floor, a no-op RPC (the gRPC
 * health check on the same connection) with its server CPU per call; and the sandbox's part, the
 * same command run through the local provider's executor and workspace launcher from this process
 * with no RPC at all. What a `Bash` costs beyond those two is the server's own work per call. And
 * under the floor, the same health check answered by a bare node:http2 server in its own process
 * (bare-grpc.ts: the raw stream API, nothing decoded or checked), its CPU per call measured as the
 * server's is: what any Node gRPC server pays per call on this machine.
 */
import type Docker from "dockerode";
import type { Client } from "@connectrpc/connect";
import type { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { type BenchContext, type Measure, type MinimalSpawner, type SectionResult, createWorkspace, interleave, minimalSpawner, run, serverCpuMs, timed } from "./context.ts";
import { WORKSPACE_LABEL, dockerClient, dockerExec, findContainer } from "./docker.ts";
import { mkdir } from "node:fs/promises";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { createLocalProvider } from "../providers/local.ts";
import { LeanUnary } from "./lean-client.ts";
import { descendantsCpuUs } from "./tree-cpu.ts";
import type { WorkspaceHandle } from "../providers/types.ts";
import path from "node:path";
import { createClients, startServerProcess, type Clients, type ServerProcess } from "./server-process.ts";
import { type Row, signed } from "./report.ts";
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { round, roundSummary, summarize, type Summary } from "./stats.ts";

/** Options of section (a). */
export interface LatencyOptions {
  /** Providers to measure, in order ("local", "docker", "gvisor"). */
  providers: string[];
  /** Measured calls per series on the local provider. */
  iterations: number;
  /** Measured calls per series on container providers. */
  containerIterations: number;
  /** Unmeasured calls per series before measuring. */
  warmup: number;
}

/** The goals: server p50 at most this multiple of the raw baseline's p50 … */
const GOAL_RATIO = 1.3;
/** … its p99 at most this multiple of the baseline's p99 … */
const P99_RATIO = 2;
/** … and (local) at most this much of the server's CPU per call. */
const CPU_GOAL_MS = 1;
/** Calls per transport in the CPU measurement (run alone, after the interleaved series). */
const CPU_CALLS = 500;

/** The old baseline: the spawn timed inside this (big) bench process. */
const IN_BENCH_SPAWN = "spawn in the bench process";
/** The goal's baseline: the spawn timed inside a minimal Node process. */
const MINIMAL_SPAWN = "spawn";
/** The series of the second server, whose local executor spawns every command. */
const SPAWN_MODE = "grpc, spawn per command";
/** The server's floor: a no-op RPC on the same gRPC connection. */
const NOOP_RPC = "grpc Health/Check";
/** The floor under the floor: the same no-op RPC answered by a bare node:http2 server (bare-grpc.ts). */
const BARE_RPC = "grpc Health/Check, bare node:http2 server";
/** The same call through a lean Connect JSON client over HTTP/2 (lean-client.ts). */
const LEAN = "connect-json/h2, lean client";
/** The harness's round trip alone: the lean client's no-op call answered by the bare node:http2 server. */
const LEAN_BARE = "connect-json/h2, lean client, bare node:http2 server";
/** The sandbox's part: the command through the local provider's executor and launcher, no RPC. */
const SANDBOX_PATH = "local provider exec, no RPC";

const spawnTrue: Measure = timed(
  () => run("bash", ["-c", "true"]),
  (r) => {
    if (r.code !== 0) throw new Error(`bash exited ${r.code}`);
  },
);

function serverTrue(tools: Client<typeof ToolService>, workspaceId: string): Measure {
  return timed(
    () => tools.bash({ workspaceId, command: "true" }),
    (res) => {
      if (res.exitCode !== 0) throw new Error(`Bash "true" exited ${res.exitCode}: ${res.stderr}`);
    },
  );
}

/**
 * The local provider in this process with one workspace under `dir` (the server's default limits,
 * so its launcher lives in cgroups as a server's does), and a measure of `bash -c true` through it.
 */
async function sandboxPath(dir: string): Promise<{ measure: Measure; close(): Promise<void> }> {
  const provider = createLocalProvider({ baseDir: dir });
  const record = await provider.create({ id: "bench-sandbox-path", labels: {}, image: "", limits: { cpus: 2, memoryBytes: 2 * 1024 ** 3, diskBytes: 0, pids: 1024 } });
  let handle: WorkspaceHandle | undefined;
  try {
    handle = await provider.open(record);
  } catch (err) {
    await provider.dispose();
    throw err;
  }
  const ws = handle;
  return {
    measure: timed(async () => {
      let exit: number | undefined;
      // As a unary `Bash` asks (the default 50 KiB kept of each stream): the launcher reads the
      // output itself, and the command starts from its spare.
      for await (const ev of ws.exec({ argv: ["bash", "-c", "true"], cwd: "", timeoutMs: 10_000, started: false, keepBytes: 51_200 })) if (ev.type === "exited") exit = ev.exit.exitCode;
      return exit;
    }, (exit) => {
      if (exit !== 0) throw new Error(`bash -c true through the provider exited ${exit}`);
    }),
    async close() {
      await ws.close();
      await provider.destroy(record);
      await provider.dispose();
    },
  };
}

function dockerExecTrue(container: Docker.Container): Measure {
  return timed(
    () => dockerExec(container, ["bash", "-c", "true"]),
    (r) => {
      if (r.exitCode !== 0) throw new Error(`docker exec "true" exited ${r.exitCode}`);
    },
  );
}

function rowsFor(
  provider: string,
  baselineName: string,
  stats: Record<string, Summary>,
  cpuPerCallMs: Record<string, number>,
  systemPerCallMs: Record<string, number>,
  helpersPerCallMs: Record<string, number>,
): Row[] {
  const base = stats[baselineName];
  const rows: Row[] = [];
  for (const transport of ["grpc", "connect"]) {
    const s = stats[transport];
    const label = transport === "grpc" ? "grpc/h2" : "connect-json/h1";
    const ratio = s.p50 / base.p50;
    rows.push({
      section: "a latency",
      metric: `Bash no-op p50, ${label} (${provider})`,
      server: s.p50,
      baseline: base.p50,
      unit: "ms",
      ratio,
      goal: `≤ ${GOAL_RATIO}× ${baselineName}`,
      pass: ratio <= GOAL_RATIO,
      note: `${signed(s.p50 - base.p50)} ms vs ${baselineName}`,
    });
    rows.push({
      section: "a latency",
      metric: `Bash no-op p99, ${label} (${provider})`,
      server: s.p99,
      baseline: base.p99,
      unit: "ms",
      ratio: s.p99 / base.p99,
      goal: `≤ ${P99_RATIO}× ${baselineName}'s p99`,
      pass: s.p99 <= P99_RATIO * base.p99,
    });
    const local = provider === "local";
    rows.push({
      section: "a latency",
      metric: `Bash no-op server CPU per call, ${label} (${provider})`,
      server: cpuPerCallMs[transport],
      baseline: Number.NaN,
      unit: "ms",
      ratio: Number.NaN,
      goal: local ? `≤ ${CPU_GOAL_MS} ms` : "",
      pass: local ? cpuPerCallMs[transport] <= CPU_GOAL_MS : undefined,
      note: `the server process alone (user + system), ${CPU_CALLS} calls in a row; of it in the kernel (system time) ${systemPerCallMs[transport].toFixed(2)} ms`,
    });
    if (local) {
      const helpers = helpersPerCallMs[transport];
      rows.push({
        section: "a latency",
        metric: `Bash no-op CPU per call, the server with its helper processes, ${label} (${provider})`,
        server: cpuPerCallMs[transport] + helpers,
        baseline: Number.NaN,
        unit: "ms",
        ratio: Number.NaN,
        goal: "",
        pass: undefined,
        note: `the same calls: the server ${cpuPerCallMs[transport].toFixed(2)} ms, its executors and workspace launchers ${helpers.toFixed(2)} ms (their own time, from /proc; a command's own is not counted)`,
      });
    }
  }
  return rows;
}

/** Information rows: the server against the old baseline, the spawn timed in the bench process. */
function inBenchRows(provider: string, stats: Record<string, Summary>): Row[] {
  const base = stats[IN_BENCH_SPAWN];
  return ["grpc", "connect"].map((transport) => ({
    section: "a latency",
    metric: `Bash no-op p50, ${transport === "grpc" ? "grpc/h2" : "connect-json/h1"} (${provider}) vs the old baseline`,
    server: stats[transport].p50,
    baseline: base.p50,
    unit: "ms",
    ratio: stats[transport].p50 / base.p50,
    goal: "",
    note: `${IN_BENCH_SPAWN} (a big process forks slowly: ${base.p50.toFixed(2)} ms against ${stats[MINIMAL_SPAWN].p50.toFixed(2)} ms from a minimal one)`,
  }));
}

/**
 * Information rows: the no-op call taken apart. Its two fixed parts against the goal's baseline,
 * and the server's own work as what is left of the call's p50 beyond them.
 */
function partRows(provider: string, stats: Record<string, Summary>, baselineName: string, cpuPerCallMs: Record<string, number>, systemPerCallMs: Record<string, number>): Row[] {
  const base = stats[baselineName].p50;
  const floor = stats[NOOP_RPC].p50;
  const sandbox = stats[SANDBOX_PATH].p50;
  const budget = GOAL_RATIO * base;
  return [
    {
      section: "a latency",
      metric: `Bash no-op, its parts (${provider}): no-op RPC p50 (grpc Health/Check, same connection)`,
      server: floor,
      baseline: base,
      unit: "ms",
      ratio: floor / base,
      goal: "",
      note: `interleaved with the Bash calls; its server CPU ${cpuPerCallMs[NOOP_RPC].toFixed(2)} ms per call (${CPU_CALLS} calls in a row; ${systemPerCallMs[NOOP_RPC].toFixed(2)} ms of it in the kernel)`,
    },
    {
      section: "a latency",
      metric: `Bash no-op, its parts (${provider}): the sandbox's part p50 (launcher + bash, no RPC)`,
      server: sandbox,
      baseline: base,
      unit: "ms",
      ratio: sandbox / base,
      goal: "",
      note: `the local provider in the bench process, interleaved; with the no-op RPC ${(floor + sandbox).toFixed(2)} ms against the goal's ${budget.toFixed(2)} ms (${GOAL_RATIO}× ${baselineName})`,
    },
    {
      section: "a latency",
      metric: `Bash no-op, its parts (${provider}): the rest, the server's own work p50 (grpc)`,
      server: stats.grpc.p50 - floor - sandbox,
      baseline: Number.NaN,
      unit: "ms",
      ratio: Number.NaN,
      goal: "",
      note: `grpc p50 ${stats.grpc.p50.toFixed(2)} ms less the two parts above; its server CPU beyond the no-op RPC's: ${(cpuPerCallMs.grpc - cpuPerCallMs[NOOP_RPC]).toFixed(2)} ms per call`,
    },
  ];
}

/** bare-grpc.ts in a child process: its port, and its CPU time so far. */
export async function startBareHttp2(): Promise<{ port: number; cpuUs(): Promise<number>; close(): void }> {
  const child: ChildProcess = spawn(process.execPath, ["--max-semi-space-size=16", path.join(path.dirname(fileURLToPath(import.meta.url)), "bare-grpc.ts")], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const next = async () => {
    const line = await lines.next();
    if (line.done) throw new Error("the bare gRPC server exited");
    return JSON.parse(line.value) as Record<string, number>;
  };
  const { port } = await next();
  return {
    port,
    async cpuUs() {
      child.stdin!.write("\n");
      const { user, system } = await next();
      return user + system;
    },
    close: () => child.kill(),
  };
}

/** bare-grpc.ts in a child process, with a health client on its own connection and its CPU. */
async function bareGrpcServer(): Promise<{ port: number; measure: Measure; cpuUs(): Promise<number>; close(): void }> {
  const bare = await startBareHttp2();
  const health = createClient(Health, createGrpcTransport({ baseUrl: `http://127.0.0.1:${bare.port}` }));
  return {
    port: bare.port,
    measure: timed(
      () => health.check({ service: "" }),
      (r) => {
        if (r.status !== ServingStatus.SERVING) throw new Error(`bare Health/Check: status ${r.status}`);
      },
    ),
    cpuUs: () => bare.cpuUs(),
    close: () => bare.close(),
  };
}

/** Runs section (a) for each requested provider. */
export async function benchLatency(ctx: BenchContext, options: LatencyOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = {};
  for (const provider of options.providers) {
    const created = await createWorkspace(ctx, provider);
    if (!created.ok) {
      skipped.push(`(a) ${provider}: ${created.reason}`);
      ctx.log(`(a) skipping ${provider}: ${created.reason}`);
      continue;
    }
    const ws = created.workspace;
    const docker = provider === "local" ? undefined : dockerClient();
    let spawner: MinimalSpawner | undefined;
    let spawnServer: { server: ServerProcess; clients: Clients } | undefined;
    let direct: { measure: Measure; close(): Promise<void> } | undefined;
    let lean: LeanUnary | undefined;
    let leanBare: LeanUnary | undefined;
    let bare: Awaited<ReturnType<typeof bareGrpcServer>> | undefined;
    try {
      const series: Record<string, Measure> = {
        grpc: serverTrue(ctx.clients.grpc.tools, ws.id),
        connect: serverTrue(ctx.clients.connect.tools, ws.id),
      };
      let baselineName: string;
      let iterations = options.iterations;
      if (provider === "local") {
        spawner = minimalSpawner("bash", ["-c", "true"]);
        baselineName = MINIMAL_SPAWN;
        series[MINIMAL_SPAWN] = spawner.measure;
        series[IN_BENCH_SPAWN] = spawnTrue;
        const dataDir = path.join(ctx.dataDir, "spawn-mode");
        await mkdir(dataDir, { recursive: true });
        const server = await startServerProcess({ dataDir, env: { AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_LOCAL_LAUNCHER: "spawn" } });
        spawnServer = { server, clients: createClients(server.url) };
        const other = await spawnServer.clients.grpc.workspaces.createWorkspace({ provider: "local" });
        series[SPAWN_MODE] = serverTrue(spawnServer.clients.grpc.tools, other.workspace?.id ?? "");
        const { health } = ctx.clients.grpc;
        series[NOOP_RPC] = timed(
          () => health.check({ service: "" }),
          (r) => {
            if (r.status !== ServingStatus.SERVING) throw new Error(`Health/Check: status ${r.status}`);
          },
        );
        bare = await bareGrpcServer();
        series[BARE_RPC] = bare.measure;
        const l = (lean = await LeanUnary.connect(ctx.server.url));
        const body = JSON.stringify({ workspaceId: ws.id, command: "true" });
        series[LEAN] = timed(
          () => l.call("/agentworkspace.v1.ToolService/Bash", body) as Promise<{ exitCode?: number }>,
          (r) => {
            // Proto3 JSON leaves a zero out.
            if ((r.exitCode ?? 0) !== 0) throw new Error(`Bash "true" (lean client) exited ${r.exitCode}`);
          },
        );
        const lb = (leanBare = await LeanUnary.connect(`http://127.0.0.1:${bare.port}`));
        series[LEAN_BARE] = timed(
          () => lb.call("/grpc.health.v1.Health/Check", "{}"),
          () => undefined,
        );
        direct = await sandboxPath(path.join(ctx.dataDir, "sandbox-path"));
        series[SANDBOX_PATH] = direct.measure;
      } else {
        iterations = options.containerIterations;
        const container = await findContainer(docker as Docker, ws.id);
        if (container) {
          baselineName = "docker exec";
          series[baselineName] = dockerExecTrue(container);
        } else {
          baselineName = "";
          const why = `(a) ${provider}: container of workspace ${ws.id} not found by label ${WORKSPACE_LABEL}; no raw docker-exec baseline`;
          skipped.push(why);
          ctx.log(why);
        }
      }
      ctx.log(`(a) ${provider}: ${options.warmup} warmup + ${iterations} calls per series (${Object.keys(series).join(", ")})`);
      const samples = await interleave(series, options.warmup, iterations);
      const cpuPerCallMs: Record<string, number> = {};
      /** The kernel's share of it (system time), per call. */
      const systemPerCallMs: Record<string, number> = {};
      /** The server's helper processes' CPU (executors, launchers; tree-cpu.ts), per call. */
      const helpersPerCallMs: Record<string, number> = {};
      for (const transport of ["grpc", "connect", ...(series[NOOP_RPC] ? [NOOP_RPC] : [])]) {
        const before = await ctx.server.stats();
        const helpersBefore = descendantsCpuUs(ctx.server.pid);
        for (let i = 0; i < CPU_CALLS; i++) await series[transport]();
        const after = await ctx.server.stats();
        helpersPerCallMs[transport] = (descendantsCpuUs(ctx.server.pid) - helpersBefore) / 1000 / CPU_CALLS;
        cpuPerCallMs[transport] = serverCpuMs(before, after) / CPU_CALLS;
        systemPerCallMs[transport] = (after.cpuSystemUs - before.cpuSystemUs) / 1000 / CPU_CALLS;
      }
      if (bare) {
        const before = await bare.cpuUs();
        for (let i = 0; i < CPU_CALLS; i++) await series[BARE_RPC]();
        cpuPerCallMs[BARE_RPC] = ((await bare.cpuUs()) - before) / 1000 / CPU_CALLS;
      }
      const stats = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
      // The issue's own harness: the lean client and the minimal spawn alone, call by call. In the
      // interleave above each call follows another series' (a second server's spawn, the bench
      // process's own fork, the provider in this process), whose tail of work it shares the two
      // cores with.
      let pair: Record<string, Summary> | undefined;
      if (series[LEAN] && series[MINIMAL_SPAWN]) {
        const two = await interleave({ [LEAN]: series[LEAN], [MINIMAL_SPAWN]: series[MINIMAL_SPAWN] }, options.warmup, iterations);
        pair = Object.fromEntries(Object.entries(two).map(([k, v]) => [k, summarize(v)]));
      }
      data[provider] = {
        workspaceId: ws.id,
        iterations,
        warmup: options.warmup,
        baseline: baselineName,
        serverCpuMsPerCall: Object.fromEntries(Object.entries(cpuPerCallMs).map(([k, v]) => [k, round(v)])),
        stats: Object.fromEntries(Object.entries(stats).map(([k, s]) => [k, roundSummary(s)])),
        ...(pair ? { pair: Object.fromEntries(Object.entries(pair).map(([k, s]) => [k, roundSummary(s)])) } : {}),
      };
      if (baselineName) {
        rows.push(...rowsFor(provider, baselineName, stats, cpuPerCallMs, systemPerCallMs, helpersPerCallMs));
        if (stats[IN_BENCH_SPAWN]) rows.push(...inBenchRows(provider, stats));
        if (stats[SPAWN_MODE]) {
          rows.push({
            section: "a latency",
            metric: `Bash no-op p50, grpc/h2 (${provider}), launcher vs a spawn per command`,
            server: stats.grpc.p50,
            baseline: stats[SPAWN_MODE].p50,
            unit: "ms",
            ratio: stats.grpc.p50 / stats[SPAWN_MODE].p50,
            goal: "",
            note: `the same call on a second server with AGENT_WORKSPACE_LOCAL_LAUNCHER=spawn, interleaved (${stats[SPAWN_MODE].p50.toFixed(2)} ms; ${(stats[SPAWN_MODE].p50 / stats[baselineName].p50).toFixed(2)}× ${baselineName})`,
          });
        }
        if (stats[LEAN]) {
          rows.push({
            section: "a latency",
            metric: `Bash no-op p50, ${LEAN} (${provider})`,
            server: stats[LEAN].p50,
            baseline: stats[baselineName].p50,
            unit: "ms",
            ratio: stats[LEAN].p50 / stats[baselineName].p50,
            goal: "",
            note: `node:http2 and JSON.parse, no connect-node client (against its ${stats.grpc.p50.toFixed(2)} ms over gRPC), interleaved`,
          });
        }
        if (pair) {
          const ratio = pair[LEAN].p50 / pair[MINIMAL_SPAWN].p50;
          rows.push({
            section: "a latency",
            metric: `Bash no-op p50, the issue's harness: ${LEAN} against the minimal spawn, the two alone (${provider})`,
            server: pair[LEAN].p50,
            baseline: pair[MINIMAL_SPAWN].p50,
            unit: "ms",
            ratio,
            goal: `≤ ${GOAL_RATIO}× spawn`,
            pass: ratio <= GOAL_RATIO,
            note: `${iterations} calls each, interleaved call by call with nothing else between them (p99 ${pair[LEAN].p99.toFixed(2)} against ${pair[MINIMAL_SPAWN].p99.toFixed(2)} ms)`,
          });
        }
        if (stats[LEAN_BARE] && stats[SANDBOX_PATH]) {
          // What no server can go below on this host: the sandbox's part (no RPC) and the harness's
          // round trip to a server that decodes and does nothing.
          const floor = stats[SANDBOX_PATH].p50 + stats[LEAN_BARE].p50;
          rows.push({
            section: "a latency",
            metric: `Bash no-op, the issue's harness: its floor on this host, the sandbox's part + ${LEAN}'s round trip to a bare node:http2 server (${provider})`,
            server: floor,
            baseline: stats[baselineName].p50,
            unit: "ms",
            ratio: floor / stats[baselineName].p50,
            goal: "",
            note: `p50s in the interleave above: the sandbox's part ${stats[SANDBOX_PATH].p50.toFixed(2)} ms, the bare round trip ${stats[LEAN_BARE].p50.toFixed(2)} ms; above ${GOAL_RATIO}× no server meets the harness's goal here`,
          });
        }
        if (stats[NOOP_RPC] && stats[SANDBOX_PATH]) rows.push(...partRows(provider, stats, baselineName, cpuPerCallMs, systemPerCallMs));
        if (cpuPerCallMs[BARE_RPC] !== undefined) {
          const bareCpu = cpuPerCallMs[BARE_RPC];
          rows.push({
            section: "a latency",
            metric: `no-op RPC server CPU per call (${provider}): ours vs a bare node:http2 server`,
            server: cpuPerCallMs[NOOP_RPC],
            baseline: bareCpu,
            unit: "ms",
            ratio: cpuPerCallMs[NOOP_RPC] / bareCpu,
            goal: "",
            note: `grpc Health/Check, ${CPU_CALLS} calls in a row each; the bare server's p50 ${stats[BARE_RPC].p50.toFixed(2)} ms against ours ${stats[NOOP_RPC].p50.toFixed(2)} ms (interleaved); a no-op Bash's server CPU is ${(cpuPerCallMs.grpc / bareCpu).toFixed(1)}× the bare server's per call`,
          });
        }
      } else {
        for (const transport of ["grpc", "connect"]) {
          rows.push({ section: "a latency", metric: `Bash no-op p50, ${transport} (${provider})`, server: stats[transport].p50, baseline: Number.NaN, unit: "ms", ratio: Number.NaN, goal: "no baseline" });
        }
      }
    } finally {
      lean?.close();
      leanBare?.close();
      bare?.close();
      await direct?.close();
      spawner?.close();
      spawnServer?.clients.close();
      await spawnServer?.server.stop();
      await ws.delete();
      // Should the server have failed to delete it, do not leave the container behind.
      const left = docker ? await findContainer(docker, ws.id) : undefined;
      if (left) await left.remove({ force: true }).catch(() => undefined);
    }
  }
  return { rows, data, skipped };
}
