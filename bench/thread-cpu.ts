/**
 * `node bench/thread-cpu.ts [--calls=N] [--tool=bash|read|health]`: where a server's CPU per call
 * goes by thread. It makes N sequential calls in a local workspace and reads each of the server
 * process's threads' user and system time (/proc/<pid>/task/<tid>/stat) before and after, so the
 * main thread's share can be told from V8's helper threads, libuv's pool and the audit writer.
 * Beside each thread's CPU, its system time and its minor page faults per call (a count, the same
 * however busy the host is): on the AMD EPYC guest of 2026-12-03 a fault cost 15–19 µs of CPU
 * (bench/fault-count.ts), so a count tells whether faults explain a call's cost there (for the
 * server's no-op Bash they did not: 2.5–4.7 per call). And its sleeps per call (voluntary context
 * switches): each is a wait for something (the next request, the launcher's answer, a timer) and a
 * wake-up, and code that runs just after one runs colder (bench/wake-cost.ts).
 *
 * The kernel may account CPU time by its tick (on the AMD EPYC guest of 2026-12-03, every 4 ms):
 * a thread's time is then a sample, sound over thousands of calls, not a per-call reading.
 */
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { createClients, startServerProcess } from "./server-process.ts";

const { values } = parseArgs({ options: { calls: { type: "string", default: "3000" }, tool: { type: "string", default: "bash" }, transport: { type: "string", default: "grpc" } } });
const calls = Number(values.calls);
const TICK_US = 1_000_000 / 100;

interface ThreadStat {
  cpuUs: number;
  systemUs: number;
  minorFaults: number;
  /** Times the thread waited (voluntary context switches): each is a sleep and a wake-up. */
  sleeps: number;
}

async function threads(pid: number): Promise<Map<string, ThreadStat>> {
  const out = new Map<string, ThreadStat>();
  for (const tid of await readdir(`/proc/${pid}/task`)) {
    try {
      const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const key = `${name} (${tid})`;
      // After the name: state is field 3 of proc(5), so field n is fields[n - 3]: minflt (10), utime (14), stime (15).
      const status = await readFile(`/proc/${pid}/task/${tid}/status`, "utf8");
      const sleeps = Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(status)?.[1] ?? 0);
      out.set(key, { cpuUs: (Number(fields[11]) + Number(fields[12])) * TICK_US, systemUs: Number(fields[12]) * TICK_US, minorFaults: Number(fields[7]), sleeps });
    } catch {
      // The thread ended.
    }
  }
  return out;
}

const data = await mkdtemp(path.join(os.tmpdir(), "aw-threads-"));
const server = await startServerProcess({ dataDir: data, env: { AGENT_WORKSPACE_DOCKER: "off" }, nodeArgs: process.env.SERVER_NODE_ARGS?.split(" ").filter(Boolean) ?? [] });
const clients = createClients(server.url);
const c = values.transport === "connect" ? clients.connect : clients.grpc;
const ws = await clients.grpc.workspaces.createWorkspace({ provider: "local" });
const workspaceId = ws.workspace!.id;
await c.tools.writeFile({ workspaceId, path: "f.txt", content: "x".repeat(4096) });
const call = () => (values.tool === "read" ? c.tools.readFile({ workspaceId, path: "f.txt" }) : values.tool === "health" ? c.health.check({}) : c.tools.bash({ workspaceId, command: "true" }));
for (let i = 0; i < 300; i++) await call();
const before = await threads(server.pid);
for (let i = 0; i < calls; i++) await call();
const after = await threads(server.pid);
let total = 0;
let totalSystem = 0;
let totalFaults = 0;
const rows: [string, number, number, number, number][] = [];
for (const [k, v] of after) {
  const was = before.get(k);
  const d = (v.cpuUs - (was?.cpuUs ?? 0)) / calls;
  const sys = (v.systemUs - (was?.systemUs ?? 0)) / calls;
  const f = (v.minorFaults - (was?.minorFaults ?? 0)) / calls;
  const w = (v.sleeps - (was?.sleeps ?? 0)) / calls;
  total += d;
  totalSystem += sys;
  totalFaults += f;
  if (d > 0 || f > 0) rows.push([k, d, sys, f, w]);
}
rows.sort((a, b) => b[1] - a[1]);
console.log(
  `${calls} ${values.tool} calls over ${values.transport}: server CPU ${total.toFixed(0)} µs (${totalSystem.toFixed(0)} µs of it system time) and ${totalFaults.toFixed(1)} minor page faults per call, by thread:`,
);
for (const [k, d, sys, f, w] of rows) {
  console.log(`  ${d.toFixed(1).padStart(7)} µs (system ${sys.toFixed(1).padStart(6)} µs)  ${f.toFixed(2).padStart(7)} faults  ${w.toFixed(2).padStart(6)} sleeps  ${k}`);
}
await clients.grpc.workspaces.deleteWorkspace({ id: workspaceId });
clients.close();
await server.stop();
await rm(data, { recursive: true, force: true });
