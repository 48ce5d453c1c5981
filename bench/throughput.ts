/**
 * Section (c): streamed output. StreamBash of a command printing many bytes, drained as fast as
 * the client can, against draining the same command spawned locally; then a slow reader (a pause
 * per message) while the server child samples its own RSS, to show whether the server buffers
 * what the client has not read yet (it should not: memory must stay flat).
 *
 * The goal rows use the lean client (lean-client.ts: node:http2, envelope parsing, protobuf-es
 * decoding, the README's window settings), so they show what the server delivers: gRPC, and
 * Connect JSON over h2c. Informational rows use connect-node's gRPC client with the README's
 * windows and with Node 24's defaults (64 KiB per stream and per connection, which caps a drain
 * at one window per round trip whatever the server does), and its Connect JSON client over
 * HTTP/1.1, each with its own CPU per second of wall time, since those clients spend more per
 * message than the server does.
 */
import { spawn } from "node:child_process";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { type BenchContext, type SectionResult, createWorkspace, mib, sleep } from "./context.ts";
import type { Row } from "./report.ts";
import { LEAN_WINDOWS, leanStreamBash, type LeanProtocol } from "./lean-client.ts";
import { type ClientSet, createGrpcClientSet } from "./server-process.ts";
import { median, round } from "./stats.ts";

/** Options of section (c). */
export interface ThroughputOptions {
  /** Bytes printed by the fast-drain command. */
  bytes: number;
  /** Measured fast-drain runs per series; the median is reported. */
  runs: number;
  /** Bytes printed in the slow-reader runs (also run with half of it, to compare). */
  slowBytes: number;
  /** Pause after each received message in the slow-reader runs, in ms. */
  slowDelayMs: number;
}

const GOAL_RATIO = 0.5;
/** Connect JSON goal, in MB/s of decoded output. */
const JSON_GOAL_MB_S = 150;
/** Server RSS growth under a slow reader that still counts as flat. */
const FLAT_MIB = 16;

const command = (bytes: number, source = "/dev/zero") => `head -c ${bytes} ${source}`;
/**
 * The slow reader reads incompressible output: zeros shrink ~1000:1 under the gzip a default
 * client negotiates, so HTTP/2 flow control would never hold the server back and the run would
 * not test server-side buffering at all.
 */
const SLOW_SOURCE = "/dev/urandom";
/** How often the slow-reader run asks the server for its live (post-GC) memory, in ms. */
const LIVE_POLL_MS = 250;

/** Drains `bash -c command` spawned here; returns MB/s (10^6 bytes per second). */
function localDrain(bytes: number): Promise<number> {
  const t0 = performance.now();
  const child = spawn("bash", ["-c", command(bytes)], { stdio: ["ignore", "pipe", "ignore"] });
  let got = 0;
  child.stdout.on("data", (c: Buffer) => (got += c.length));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", () => {
      const s = (performance.now() - t0) / 1000;
      if (got !== bytes) reject(new Error(`local drain got ${got} bytes, expected ${bytes}`));
      else resolve(bytes / 1e6 / s);
    });
  });
}

interface StreamRun {
  mbPerS: number;
  seconds: number;
  messages: number;
  /** How long the command itself ran (BashExited.duration_ms), in seconds. */
  commandSeconds: number;
  /** The client process's CPU time per second of wall time. */
  clientCpu: number;
}

/** Counts a drain's messages and bytes and checks its end. */
class DrainCount {
  got = 0;
  messages = 0;
  exit: { exitCode: number; durationMs: bigint } | undefined;
  readonly t0 = performance.now();
  readonly cpu0 = process.cpuUsage();

  add(msg: { event: { case: string | undefined; value?: unknown } }): void {
    this.messages++;
    if (msg.event.case === "stdout") this.got += (msg.event.value as Uint8Array).length;
    else if (msg.event.case === "exited") this.exit = msg.event.value as { exitCode: number; durationMs: bigint };
  }

  finish(bytes: number): StreamRun {
    const seconds = (performance.now() - this.t0) / 1000;
    const cpu = process.cpuUsage(this.cpu0);
    if (this.exit?.exitCode !== 0 || this.got !== bytes) throw new Error(`StreamBash got ${this.got} bytes, exit ${this.exit?.exitCode}; expected ${bytes}, exit 0`);
    return { mbPerS: bytes / 1e6 / seconds, seconds, messages: this.messages, commandSeconds: Number(this.exit.durationMs) / 1000, clientCpu: (cpu.user + cpu.system) / 1e6 / seconds };
  }
}

/** StreamBash through a connect-node client, optionally pausing after each message; the rate to the exit event. */
async function serverDrain(tools: ClientSet["tools"], workspaceId: string, bytes: number, delayMs = 0, source?: string): Promise<StreamRun> {
  const count = new DrainCount();
  for await (const msg of tools.streamBash({ workspaceId, command: command(bytes, source) })) {
    count.add(msg);
    if (delayMs > 0) await sleep(delayMs);
  }
  return count.finish(bytes);
}

/** StreamBash through the lean client. */
async function leanDrain(baseUrl: string, protocol: LeanProtocol, workspaceId: string, bytes: number): Promise<StreamRun> {
  const count = new DrainCount();
  await leanStreamBash(baseUrl, protocol, { workspaceId, command: command(bytes) }, (msg) => count.add(msg));
  return count.finish(bytes);
}

/** Runs section (c) on the local provider. */
export async function benchThroughput(ctx: BenchContext, options: ThroughputOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(c) ${created.reason}`] };
  const ws = created.workspace;
  // connect-node's gRPC client with the README's windows.
  const wide = createGrpcClientSet(ctx.server.url, { windows: LEAN_WINDOWS });
  const connectH1 = createConnectTransport({ baseUrl: ctx.server.url, httpVersion: "1.1", useBinaryFormat: false });
  const json = createClient(ToolService, connectH1);
  try {
    // Slow reader first, on the fresh server, so earlier allocations do not hide its growth. Two
    // sizes: flat memory means the growth does not depend on how much the command prints.
    const slow: SlowRun[] = [];
    // Warm up first: the first stream allocates for good (JIT code, compression contexts).
    await serverDrain(ctx.clients.grpc.tools, ws.id, Math.min(options.slowBytes, 5_000_000), 0, SLOW_SOURCE);
    for (const bytes of [Math.floor(options.slowBytes / 2), options.slowBytes]) {
      ctx.log(`(c) slow reader: ${(bytes / 1e6).toFixed(0)} MB of ${SLOW_SOURCE}, ${options.slowDelayMs} ms pause per message`);
      slow.push(await slowReader(ctx, ws.id, bytes, options.slowDelayMs));
    }

    const cpu: Record<string, number[]> = {};
    const drain = (name: string, run: () => Promise<StreamRun>) => async () => {
      const r = await run();
      (cpu[name] ??= []).push(r.clientCpu);
      return r.mbPerS;
    };
    const series: Record<string, () => Promise<number>> = {
      local: () => localDrain(options.bytes),
      grpc: drain("grpc", () => leanDrain(ctx.server.url, "grpc", ws.id, options.bytes)),
      json: drain("json", () => leanDrain(ctx.server.url, "connect-json-h2", ws.id, options.bytes)),
      connectWide: drain("connectWide", () => serverDrain(wide.tools, ws.id, options.bytes)),
      connectDefault: drain("connectDefault", () => serverDrain(ctx.clients.grpc.tools, ws.id, options.bytes)),
      connectJson: drain("connectJson", () => serverDrain(json, ws.id, options.bytes)),
    };
    const names = Object.keys(series);
    ctx.log(`(c) fast drain: 1 warmup + ${options.runs} runs × ${(options.bytes / 1e6).toFixed(0)} MB of ${names.join(", ")}`);
    const samples: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
    const fastPeaks: number[] = [];
    for (let run = -1; run < options.runs; run++) {
      for (let j = 0; j < names.length; j++) {
        const name = names[(run + 1 + j) % names.length];
        const before = name === "grpc" ? await ctx.server.track(5) : undefined;
        const rate = await series[name]();
        if (before) fastPeaks.push((await ctx.server.untrack()).peakRss - before.rss);
        if (run >= 0) samples[name].push(rate);
      }
    }
    const m = Object.fromEntries(names.map((n) => [n, median(samples[n])]));

    const ratio = m.grpc / m.local;
    const mb = (options.bytes / 1e6).toFixed(0);
    const clientCpu = (name: string) => `client CPU ${median(cpu[name]).toFixed(2)} s/s`;
    const info = (name: string, label: string, note: string): Row => ({
      section: "c stream",
      metric: `StreamBash ${mb} MB, ${label}`,
      server: m[name],
      baseline: m.local,
      unit: "MB/s",
      ratio: m[name] / m.local,
      goal: "",
      note: `${note}; ${clientCpu(name)}`,
    });
    const peakGrowth = mib(Math.max(...fastPeaks));
    const rows: Row[] = [
      {
        section: "c stream",
        metric: `StreamBash ${mb} MB, grpc, fast drain`,
        server: m.grpc,
        baseline: m.local,
        unit: "MB/s",
        ratio,
        goal: `≥ ${GOAL_RATIO}× local`,
        pass: ratio >= GOAL_RATIO,
        note: `lean client (node:http2, 8 MiB stream / 32 MiB connection windows); ${clientCpu("grpc")}`,
      },
      {
        section: "c stream",
        metric: `StreamBash ${mb} MB, connect-json/h2, fast drain`,
        server: m.json,
        baseline: Number.NaN,
        unit: "MB/s",
        ratio: Number.NaN,
        goal: `≥ ${JSON_GOAL_MB_S} MB/s`,
        pass: m.json >= JSON_GOAL_MB_S,
        note: `lean client, bytes counted after base64 decoding; ${clientCpu("json")}`,
      },
      {
        section: "c stream",
        metric: `StreamBash ${mb} MB, grpc fast drain: server peak RSS growth`,
        server: peakGrowth,
        baseline: Number.NaN,
        unit: "MiB",
        ratio: Number.NaN,
        goal: `flat (≤ ${FLAT_MIB} MiB)`,
        pass: peakGrowth <= FLAT_MIB,
        note: "RSS sampled every 5 ms while the lean client drains",
      },
      info("connectWide", "grpc, connect-node client, README windows", "Http2SessionManager with 8 MiB stream and 32 MiB connection windows"),
      info("connectDefault", "grpc, connect-node client, Node 24 default windows", "64 KiB stream and connection windows: one window per round trip"),
      info("connectJson", "connect-json/h1, connect-node client", "JSON decoding in the client"),
      ...slow.map(
        (s): Row => ({
          section: "c stream",
          metric: `slow reader ${(s.bytes / 1e6).toFixed(0)} MB random, ${options.slowDelayMs} ms/msg: server peak RSS growth`,
          server: s.growthMiB,
          baseline: Number.NaN,
          unit: "MiB",
          ratio: Number.NaN,
          goal: `flat (≤ ${FLAT_MIB} MiB)`,
          pass: s.growthMiB <= FLAT_MIB,
          note:
            `RSS ${s.beforeMiB} → peak ${s.peakMiB} → after ${s.afterMiB} MiB; live heap+external peak +${s.liveGrowthMiB} MiB; ` +
            `reader ${s.readerMbPerS} MB/s; command ran ${s.commandSeconds} of ${s.seconds} s` +
            (s.commandSeconds < 0.8 * s.seconds ? " (output was buffered somewhere: backpressure did not reach the command)" : " (backpressure reached the command)"),
        }),
      ),
    ];
    const data = {
      bytes: options.bytes,
      runs: options.runs,
      mbPerS: Object.fromEntries(names.map((n) => [n, samples[n].map((x) => round(x, 1))])),
      medianMbPerS: Object.fromEntries(names.map((n) => [n, round(m[n], 1)])),
      clientCpuPerS: Object.fromEntries(Object.entries(cpu).map(([n, xs]) => [n, xs.map((x) => round(x, 2))])),
      fastDrainPeakGrowthMiB: fastPeaks.map((b) => round(mib(b), 1)),
      slowReader: { source: SLOW_SOURCE, delayMs: options.slowDelayMs, livePollMs: LIVE_POLL_MS, runs: slow },
    };
    return { rows, data, skipped: [] };
  } finally {
    wide.close();
    await ws.delete();
  }
}

interface SlowRun {
  bytes: number;
  seconds: number;
  commandSeconds: number;
  readerMbPerS: number;
  messages: number;
  beforeMiB: number;
  peakMiB: number;
  afterMiB: number;
  /** Peak RSS (sampled every 5 ms) minus RSS before. */
  growthMiB: number;
  /** Peak of heapUsed + external right after forced GCs during the run, minus the same before. */
  liveGrowthMiB: number;
}

/**
 * One slow-reader run: RSS is sampled by the server every 5 ms, and live memory (after a forced
 * GC) is polled every LIVE_POLL_MS, which also keeps uncollected garbage from posing as growth.
 */
async function slowReader(ctx: BenchContext, workspaceId: string, bytes: number, delayMs: number): Promise<SlowRun> {
  const live = (s: { heapUsed: number; external: number }) => s.heapUsed + s.external;
  await sleep(100);
  const base = await ctx.server.stats({ gc: true });
  const before = await ctx.server.track(5);
  let liveMax = live(base);
  let polling = true;
  const poller = (async () => {
    while (polling) {
      await sleep(LIVE_POLL_MS);
      if (polling) liveMax = Math.max(liveMax, live(await ctx.server.stats({ gc: true })));
    }
  })();
  let run: StreamRun;
  try {
    run = await serverDrain(ctx.clients.grpc.tools, workspaceId, bytes, delayMs, SLOW_SOURCE);
  } finally {
    polling = false;
    await poller;
  }
  const window = await ctx.server.untrack();
  await sleep(100);
  const after = await ctx.server.stats({ gc: true });
  return {
    bytes,
    seconds: round(run.seconds),
    commandSeconds: round(run.commandSeconds),
    readerMbPerS: round(run.mbPerS, 1),
    messages: run.messages,
    beforeMiB: round(mib(before.rss), 1),
    peakMiB: round(mib(window.peakRss), 1),
    afterMiB: round(mib(after.rss), 1),
    growthMiB: round(mib(window.peakRss - before.rss), 1),
    liveGrowthMiB: round(mib(liveMax - live(base)), 1),
  };
}
