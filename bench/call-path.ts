/**
 * `node bench/call-path.ts [--calls=N] [--hz=N] [--top=N]`: where a no-op `Bash`'s time goes on the
 * server's main thread between its request and its answer, the part of the call that is the
 * server's own. Run as root with `perf` (Debian's `linux-perf`) and the kernel's syscall
 * tracepoints.
 *
 * It calls through the lean Connect JSON client (as the harness does) and records the
 * main thread with `perf record`: its system calls' entries (the read of the request, the write of
 * the command to the workspace's launcher, the launcher's answers, the write of the answer) and
 * `cpu-clock` samples with call stacks (JavaScript named from `--perf-basic-prof`). Each call is cut
 * into three spans:
 * - before the launch: from reading the request to writing the command to the launcher (decoding,
 *   authentication, the interceptors, the audit record's start, the policy, the tool's plan);
 * - the launcher's part: from that write to the launcher's last answer (the fork and exec, the
 *   command; the server waits, and handles the command's start if it comes apart from its end);
 * - after the exit: from the launcher's last answer to the answer's write.
 * For the first and last it lists where the samples fell, by the innermost frame of the server's
 * own code (or of connect, protobuf-es, OpenTelemetry; else the innermost frame), as shares.
 *
 * perf slows the server (sampling with call stacks), so the spans are longer than natively; the
 * call's p50 is printed without perf and under it, from the same server, to say by how much. The
 * shares are what to read.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { LeanUnary } from "./lean-client.ts";
import { createClients, startServerProcess } from "./server-process.ts";
import { summarize } from "./stats.ts";

const { values } = parseArgs({ options: { calls: { type: "string", default: "2000" }, hz: { type: "string", default: "10000" }, top: { type: "string", default: "20" } } });
const calls = Number(values.calls);
const hz = Number(values.hz);
const top = Number(values.top);
if (!Number.isInteger(calls) || calls < 10 || !Number.isInteger(hz) || hz < 100 || !Number.isInteger(top) || top < 1) throw new Error("--calls ≥ 10, --hz ≥ 100, --top ≥ 1: whole numbers");
if (spawnSync("perf", ["--version"]).status !== 0) throw new Error("perf is not installed (Debian: apt-get install linux-perf)");

const EVENTS = ["syscalls:sys_enter_read", "syscalls:sys_enter_write", "syscalls:sys_enter_writev"];
/** Frames of the server's own code and of the libraries on its call path. */
const OURS = /file:\/\/\/.*?\/(server|providers|core)\/|node_modules\/@(connectrpc|opentelemetry|bufbuild)\//;

interface Event {
  us: number;
  kind: "read" | "write" | "writev" | "sample";
  fd: number;
  frames: string[];
}

/** The events of `perf script`'s output, in time order. */
function parse(text: string): Event[] {
  const out: Event[] = [];
  for (const block of text.split(/\n(?=\s*\d+\.\d+:)/)) {
    const lines = block.split("\n");
    const m = /^\s*(\d+\.\d+):\s+(\S+):\s*(.*)$/.exec(lines[0]);
    if (!m) continue;
    const us = Number(m[1]) * 1e6;
    const enter = /^syscalls:sys_enter_(read|write|writev)$/.exec(m[2]);
    if (enter) {
      out.push({ us, kind: enter[1] as Event["kind"], fd: parseInt(/fd: 0x([0-9a-f]+)/.exec(m[3])?.[1] ?? "-1", 16), frames: [] });
    } else if (m[2] === "cpu-clock") {
      out.push({ us, kind: "sample", fd: -1, frames: lines.slice(1).map((l) => l.trim().replace(/^[0-9a-f]+ /, "")).filter(Boolean) });
    }
  }
  return out;
}

/** The descriptor `kind` used most often, other than `not`. */
function busiest(events: Event[], kind: Event["kind"], not = -1): number {
  const counts = new Map<number, number>();
  for (const e of events) if (e.kind === kind && e.fd !== not) counts.set(e.fd, (counts.get(e.fd) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]?.[0] ?? -1;
}

const dir = await mkdtemp(path.join(os.tmpdir(), "aw-call-path-"));
const server = await startServerProcess({
  dataDir: path.join(dir, "data"),
  env: { AGENT_WORKSPACE_DOCKER: "off" },
  nodeArgs: ["--perf-basic-prof", "--no-logfile-per-isolate", `--logfile=${path.join(dir, "v8.log")}`],
});
const data = path.join(dir, "perf.data");
let perf: ReturnType<typeof spawn> | undefined;
try {
  const clients = createClients(server.url);
  const ws = await clients.grpc.workspaces.createWorkspace({ provider: "local" });
  const lean = await LeanUnary.connect(server.url);
  const body = JSON.stringify({ workspaceId: ws.workspace!.id, command: "true" });
  const timed = async (n: number): Promise<number> => {
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await lean.call("/agentworkspace.v1.ToolService/Bash", body);
      ms.push(performance.now() - t0);
    }
    return summarize(ms).p50;
  };
  await timed(1000);
  const plain = await timed(1000);
  // The main thread alone: its thread id is the process id.
  const recorder = spawn("perf", ["record", "-q", "-g", "-e", "cpu-clock", "-F", String(hz), ...EVENTS.flatMap((e) => ["-e", e]), "-t", String(server.pid), "-o", data], { stdio: "inherit" });
  perf = recorder;
  // Taken now: a perf that cannot record (not root, no tracepoints) has exited before the calls end.
  const stopped = new Promise<number | null>((resolve) => recorder.once("exit", resolve));
  await new Promise((resolve) => setTimeout(resolve, 700));
  const traced = await timed(calls);
  recorder.kill("SIGINT");
  const code = await stopped;
  if (code !== 0 && code !== null) throw new Error(`perf record ended with ${code} (root, and the kernel's syscall tracepoints, are needed)`);
  lean.close();
  await clients.grpc.workspaces.deleteWorkspace({ id: ws.workspace!.id });
  clients.close();

  const script = spawnSync("perf", ["script", "-i", data, "-F", "time,event,trace,ip,sym"], { encoding: "utf8", maxBuffer: 1 << 30 });
  if (script.status !== 0) throw new Error(`perf script: ${script.stderr.slice(0, 500)}`);
  const events = parse(script.stdout);
  const socket = busiest(events, "writev");
  const toLauncher = busiest(events, "write", socket);
  const fromLauncher = busiest(events, "read", socket);
  interface Call {
    request: number;
    launch?: number;
    answers: number[];
    answer?: number;
  }
  const found: Call[] = [];
  let call: Call | undefined;
  for (const e of events) {
    if (e.kind === "read" && e.fd === socket && (call === undefined || call.answer !== undefined)) found.push((call = { request: e.us, answers: [] }));
    else if (call === undefined || call.answer !== undefined) continue;
    else if (e.kind === "write" && e.fd === toLauncher && call.launch === undefined) call.launch = e.us;
    else if (e.kind === "read" && e.fd === fromLauncher && call.launch !== undefined) call.answers.push(e.us);
    else if (e.kind === "writev" && e.fd === socket) call.answer = e.us;
  }
  const whole = found.filter((c): c is Required<Call> => c.launch !== undefined && c.answer !== undefined && c.answers.length > 0);
  if (whole.length < calls / 2) throw new Error(`only ${whole.length} of ${calls} calls could be cut into spans`);

  const spans = { before: new Map<string, number>(), after: new Map<string, number>() };
  const totals = { before: 0, after: 0 };
  let next = 0;
  const samples = events.filter((e) => e.kind === "sample");
  for (const c of whole) {
    const exit = c.answers[c.answers.length - 1];
    while (next < samples.length && samples[next].us < c.request) next++;
    for (let i = next; i < samples.length && samples[i].us < c.answer; i++) {
      const s = samples[i];
      const where = s.us < c.launch ? "before" : s.us >= exit ? "after" : undefined;
      if (where === undefined) continue;
      totals[where]++;
      const frame = s.frames.find((f) => OURS.test(f)) ?? s.frames[0] ?? "?";
      const key = frame.replace(/^JS:[*+~^]?'?/, "").replace(/file:\/\/\/\S*?\/(server|providers|core)\//, "$1/").replace(/(file:\/\/)?\/\S*node_modules\//, "");
      spans[where].set(key, (spans[where].get(key) ?? 0) + 1);
    }
  }
  const p50 = (f: (c: Required<Call>) => number) => summarize(whole.map(f)).p50;
  const µs = (n: number) => `${(n / 1000).toFixed(3)} ms`;
  console.log(`${whole.length} no-op Bash calls cut into spans; the call's p50 ${plain.toFixed(3)} ms without perf, ${traced.toFixed(3)} ms under it (load ${os.loadavg()[0].toFixed(2)})`);
  console.log(`  the launcher's answers read per call: ${(whole.reduce((n, c) => n + c.answers.length, 0) / whole.length).toFixed(2)}`);
  console.log(`  p50 before the launch ${µs(p50((c) => c.launch - c.request))}, the launcher's part ${µs(p50((c) => c.answers[c.answers.length - 1] - c.launch))}, after the exit ${µs(p50((c) => c.answer - c.answers[c.answers.length - 1]))}; request to answer ${µs(p50((c) => c.answer - c.request))}`);
  for (const where of ["before", "after"] as const) {
    console.log(`${where === "before" ? "Before the launch" : "After the exit"}: ${totals[where]} samples, by the innermost frame of the server's code (or its libraries'):`);
    for (const [k, n] of [...spans[where]].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${((100 * n) / totals[where]).toFixed(1).padStart(5)} %  ${k.slice(0, 120)}`);
  }
} finally {
  // A run that failed while perf recorded: perf goes first, then the server.
  if (perf !== undefined && perf.exitCode === null && perf.signalCode === null) perf.kill("SIGKILL");
  await server.stop().catch(() => undefined);
  await rm(`/tmp/perf-${server.pid}.map`, { force: true });
  await rm(dir, { recursive: true, force: true });
}
