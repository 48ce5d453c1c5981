/**
 * The server under benchmark, run as a child process of bench/run.ts so the client's own work
 * never shows up in the server's memory or CPU numbers.
 *
 * Usage: `node bench/server-child.ts --data-dir DIR` (configuration otherwise from the
 * environment, as server/main.ts reads it). It listens on 127.0.0.1 with an ephemeral port and
 * speaks JSON lines:
 * - stdout, once listening: `{"type":"ready","port":N,"url":"…","pid":N,"providers":[…]}`;
 * - stdin, requests `{"id":N,"cmd":"stats"|"track"|"untrack"|"profile-start"|"profile-stop","intervalMs"?:N,"gc"?:true,"file"?:"…"}`, each
 *   answered on stdout with `{"type":"stats","id":N,…ServerStats}`. `track` resets the peak and
 *   samples RSS every `intervalMs` (default 5) until `untrack`; the peak covers the samples since
 *   `track`. With `gc` (and node's `--expose-gc`) a full garbage collection runs first, so the
 *   numbers show live memory rather than garbage not yet collected. `profile-start` and
 *   `profile-stop` (with `file`) take a CPU profile of the main thread between them.
 * Closing stdin (the parent went away) or SIGTERM/SIGINT shuts the server down cleanly, which
 * also lets `--cpu-prof` write its profile.
 */
import "../server/base64.ts";
import { writeFile } from "node:fs/promises";
import { Session } from "node:inspector/promises";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { createApp } from "../server/app.ts";
import { parseSettings } from "../server/settings.ts";
import { listen } from "../server/http-server.ts";

/** What the child reports about itself. */
export interface ServerStats {
  /** Resident set size now, in bytes. */
  rss: number;
  /** Highest RSS sampled since the last `track` (or `rss` when not tracking), in bytes. */
  peakRss: number;
  /** Highest V8 heap + external memory (Buffers included) sampled in the same window, in bytes. */
  peakJs: number;
  /** Number of samples behind `peakRss` and `peakJs`. */
  samples: number;
  /** Lifetime maximum RSS as the kernel counts it, in bytes. */
  maxRss: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  /** CPU time consumed by the process so far, in microseconds. */
  cpuUserUs: number;
  cpuSystemUs: number;
}

/** A request from the parent. */
export interface ChildRequest {
  id: number;
  cmd: "stats" | "track" | "untrack" | "profile-start" | "profile-stop";
  /** For `profile-stop`: where to write the main thread's CPU profile (a .cpuprofile file). */
  file?: string;
  intervalMs?: number;
  /** Run a full GC before measuring (needs --expose-gc). */
  gc?: boolean;
}

const { values } = parseArgs({ options: { "data-dir": { type: "string" } }, strict: true });
if (!values["data-dir"]) throw new Error("--data-dir is required");

const config = parseSettings({ ...process.env, AGENT_WORKSPACE_DATA_DIR: values["data-dir"], AGENT_WORKSPACE_QUIET: "1" }, []);
const app = await createApp(config);
const server = await listen(app.handler, { host: "127.0.0.1", port: 0 });
app.egress.listening("127.0.0.1", server.port);
// As server/main.ts does: other servers sharing the database send this one's calls here.
await app.replica?.advertise(server.url);

let peak = 0;
let peakJs = 0;
let samples = 0;
let sampler: NodeJS.Timeout | undefined;
const sample = () => {
  const mem = process.memoryUsage();
  samples++;
  peak = Math.max(peak, mem.rss);
  peakJs = Math.max(peakJs, mem.heapUsed + mem.external);
  return mem;
};

function stats(): ServerStats {
  const mem = sampler ? sample() : process.memoryUsage();
  const cpu = process.cpuUsage();
  const windowed = sampler !== undefined || samples > 0;
  return {
    rss: mem.rss,
    peakRss: windowed ? Math.max(peak, mem.rss) : mem.rss,
    peakJs: windowed ? Math.max(peakJs, mem.heapUsed + mem.external) : mem.heapUsed + mem.external,
    samples,
    maxRss: process.resourceUsage().maxRSS * 1024,
    heapUsed: mem.heapUsed,
    external: mem.external,
    arrayBuffers: mem.arrayBuffers,
    cpuUserUs: cpu.user,
    cpuSystemUs: cpu.system,
  };
}

const send = (msg: object) => process.stdout.write(`${JSON.stringify(msg)}\n`);

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (sampler) clearInterval(sampler);
  const force = setTimeout(() => process.exit(code), 5000);
  force.unref();
  try {
    await app.close();
    await server.close();
  } finally {
    process.exit(code);
  }
}

// CPU profiles of a window only (the calls being measured, not the server's start).
let profiler: Session | undefined;
async function profile(cmd: "profile-start" | "profile-stop", file: string | undefined): Promise<void> {
  if (cmd === "profile-start") {
    profiler = new Session();
    profiler.connect();
    await profiler.post("Profiler.enable");
    await profiler.post("Profiler.setSamplingInterval", { interval: 100 });
    await profiler.post("Profiler.start");
    return;
  }
  if (!profiler || !file) return;
  const { profile } = await profiler.post("Profiler.stop");
  profiler.disconnect();
  profiler = undefined;
  await writeFile(file, JSON.stringify(profile));
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let req: ChildRequest;
  try {
    req = JSON.parse(line) as ChildRequest;
  } catch {
    return;
  }
  if (req.gc) (globalThis as { gc?: () => void }).gc?.();
  switch (req.cmd) {
    case "track":
      if (sampler) clearInterval(sampler);
      peak = 0;
      peakJs = 0;
      samples = 0;
      sample();
      sampler = setInterval(sample, req.intervalMs ?? 5);
      break;
    case "untrack":
      if (sampler) sample();
      clearInterval(sampler);
      sampler = undefined;
      break;
    case "profile-start":
    case "profile-stop":
      void profile(req.cmd, req.file).then(
        () => send({ type: "stats", id: req.id, ...stats() }),
        (err: Error) => send({ type: "stats", id: req.id, error: err.message, ...stats() }),
      );
      return;
    case "stats":
      break;
  }
  send({ type: "stats", id: req.id, ...stats() });
});
lines.on("close", () => void stop(0));
process.on("SIGTERM", () => void stop(0));
process.on("SIGINT", () => void stop(0));

send({ type: "ready", port: server.port, url: server.url, pid: process.pid, providers: app.workspaces.providerNames });
