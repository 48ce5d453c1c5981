/**
 * Section (c): streamed output. StreamBash of a command printing many bytes over gRPC, drained as
 * fast as the client can, against draining the same command spawned locally; then a slow reader
 * (a pause per message) while the server child samples its own RSS, to show whether the server
 * buffers what the client has not read yet (it should not: memory must stay flat).
 *
 * The goal row uses a default connect-node gRPC client, which offers gzip, so the server
 * compresses every chunk (the server picks the response encoding). An informational row repeats
 * the drain with a client that accepts no compression, which isolates that cost.
 */
import { spawn } from "node:child_process";
import { type BenchContext, type SectionResult, createWorkspace, mib, sleep } from "./context.ts";
import type { Row } from "./report.ts";
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
}

/** StreamBash over gRPC, optionally pausing after each message; returns the rate to the exit event. */
async function serverDrain(tools: ClientSet["tools"], workspaceId: string, bytes: number, delayMs = 0, source?: string): Promise<StreamRun> {
  const t0 = performance.now();
  let got = 0;
  let messages = 0;
  let exit: { exitCode: number; durationMs: bigint } | undefined;
  for await (const msg of tools.streamBash({ workspaceId, command: command(bytes, source) })) {
    messages++;
    if (msg.event.case === "stdout") got += msg.event.value.length;
    else if (msg.event.case === "exited") exit = msg.event.value;
    if (delayMs > 0) await sleep(delayMs);
  }
  const seconds = (performance.now() - t0) / 1000;
  if (exit?.exitCode !== 0 || got !== bytes) throw new Error(`StreamBash got ${got} bytes, exit ${exit?.exitCode}; expected ${bytes}, exit 0`);
  return { mbPerS: bytes / 1e6 / seconds, seconds, messages, commandSeconds: Number(exit.durationMs) / 1000 };
}

/** Runs section (c) on the local provider. */
export async function benchThroughput(ctx: BenchContext, options: ThroughputOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(c) ${created.reason}`] };
  const ws = created.workspace;
  // Informational client: shows how much of the gap response compression explains.
  const plain = createGrpcClientSet(ctx.server.url, { compression: false });
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

    const series: Record<string, () => Promise<number>> = {
      local: () => localDrain(options.bytes),
      grpc: async () => (await serverDrain(ctx.clients.grpc.tools, ws.id, options.bytes)).mbPerS,
      noCompression: async () => (await serverDrain(plain.tools, ws.id, options.bytes)).mbPerS,
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
    const info = (name: string, label: string): Row => ({
      section: "c stream",
      metric: `StreamBash ${(options.bytes / 1e6).toFixed(0)} MB, grpc, ${label}`,
      server: m[name],
      baseline: m.local,
      unit: "MB/s",
      ratio: m[name] / m.local,
      goal: "",
    });
    const rows: Row[] = [
      {
        section: "c stream",
        metric: `StreamBash ${(options.bytes / 1e6).toFixed(0)} MB, grpc, fast drain`,
        server: m.grpc,
        baseline: m.local,
        unit: "MB/s",
        ratio,
        goal: `≥ ${GOAL_RATIO}× local`,
        pass: ratio >= GOAL_RATIO,
        note: `default connect-node client; server RSS peak growth while draining ${mib(Math.max(...fastPeaks)).toFixed(1)} MiB`,
      },
      info("noCompression", "client accepts no compression"),
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
      fastDrainPeakGrowthMiB: fastPeaks.map((b) => round(mib(b), 1)),
      slowReader: { source: SLOW_SOURCE, delayMs: options.slowDelayMs, livePollMs: LIVE_POLL_MS, runs: slow },
    };
    return { rows, data, skipped: [] };
  } finally {
    plain.close();
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
