/**
 * `node bench/fault-count.ts [--calls=N]`: minor page faults per no-op `Bash` on the local provider,
 * by process, against the same `bash -c true` started by a minimal Node process (`spawn`, the
 * baseline of bench (a)) and by a plain Perl fork and exec; and what one fault costs this host.
 *
 * Faults are counts: the same however busy the host is, unlike the times beside them. They matter
 * where a fault is dear: on the AMD EPYC virtual machine of 2026-12-03 a fresh page cost 15–19 µs
 * of CPU, so a command's start there is mostly faults (the fork's copied-on-write pages on both
 * sides, then the new program's own pages after exec): about 245 for a minimal Node's spawn.
 *
 * For the server, its own faults per call; for each of its live helpers (the workspace's launcher),
 * its own and those of its children reaped meanwhile (the spare and the command it became). For
 * the baselines, the same two numbers for the process that starts the commands.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { createClients, startServerProcess } from "./server-process.ts";

const { values } = parseArgs({ options: { calls: { type: "string", default: "1000" } } });
const calls = Number(values.calls);
if (!Number.isInteger(calls) || calls < 1) throw new Error("--calls: a positive integer");

interface Faults {
  name: string;
  ppid: number;
  /** The process's own minor faults (field 10 of proc(5)'s stat). */
  own: number;
  /** Its waited-for children's (field 11). */
  children: number;
}

function faultsOf(pid: number): Faults {
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  // After the name, state is field 3, so field n is f[n - 3].
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { name: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")), ppid: Number(f[1]), own: Number(f[7]), children: Number(f[8]) };
}

/** Every live descendant of `root`, by pid. */
function descendants(root: number): Map<number, Faults> {
  const all = new Map<number, Faults>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      all.set(Number(entry), faultsOf(Number(entry)));
    } catch {
      // It ended.
    }
  }
  const out = new Map<number, Faults>();
  const todo = [root];
  while (todo.length > 0) {
    const parent = todo.pop() as number;
    for (const [pid, f] of all) {
      if (f.ppid === parent && !out.has(pid)) {
        out.set(pid, f);
        todo.push(pid);
      }
    }
  }
  return out;
}

const per = (n: number) => (n / calls).toFixed(1);

// What one fault costs here: fresh anonymous pages touched once each, system time per fault.
const faultCost = spawnSync(
  process.execPath,
  [
    "-e",
    `const { cpuUsage, resourceUsage } = process; const pages = 16384; let best = Infinity;
     for (let round = 0; round < 3; round++) {
       const f0 = resourceUsage().minorPageFault, c0 = cpuUsage();
       const b = Buffer.allocUnsafeSlow(pages * 4096); for (let i = 0; i < b.length; i += 4096) b[i] = 1;
       const c1 = cpuUsage(), faults = resourceUsage().minorPageFault - f0;
       best = Math.min(best, (c1.system - c0.system + c1.user - c0.user) / Math.max(1, faults));
     }
     console.log(best.toFixed(2));`,
  ],
  { encoding: "utf8" },
);
console.log(`one minor fault on this host: ${faultCost.stdout.trim()} µs of CPU (best of 3 rounds of 16,384 fresh pages)`);

const data = await mkdtemp(path.join(os.tmpdir(), "aw-faults-"));
const server = await startServerProcess({ dataDir: data, env: { AGENT_WORKSPACE_DOCKER: "off" } });
const clients = createClients(server.url);
try {
  const ws = await clients.grpc.workspaces.createWorkspace({ provider: "local" });
  const workspaceId = ws.workspace!.id;
  for (let i = 0; i < 300; i++) await clients.grpc.tools.bash({ workspaceId, command: "true" });
  const server0 = faultsOf(server.pid);
  const helpers0 = descendants(server.pid);
  for (let i = 0; i < calls; i++) await clients.grpc.tools.bash({ workspaceId, command: "true" });
  const server1 = faultsOf(server.pid);
  const helpers1 = descendants(server.pid);
  console.log(`${calls} no-op Bash calls over gRPC, minor faults per call:`);
  console.log(`  the server: ${per(server1.own - server0.own)}`);
  for (const [pid, after] of helpers1) {
    const before = helpers0.get(pid);
    if (!before) continue;
    console.log(`  ${after.name} (${pid}): ${per(after.own - before.own)} its own, ${per(after.children - before.children)} of its reaped children`);
  }
  await clients.grpc.workspaces.deleteWorkspace({ id: workspaceId });
} finally {
  clients.close();
  await server.stop();
  await rm(data, { recursive: true, force: true });
}

// The baselines: the starting process's own faults and its reaped children's, per command.
const node = spawnSync(
  process.execPath,
  [
    "-e",
    `const { spawn } = require("node:child_process"); const fs = require("node:fs");
     const faults = () => { const s = fs.readFileSync("/proc/self/stat", "latin1"); const f = s.slice(s.lastIndexOf(")") + 2).split(" "); return [Number(f[7]), Number(f[8])]; };
     const run = () => new Promise((resolve) => spawn("bash", ["-c", "true"]).on("close", resolve));
     (async () => {
       for (let i = 0; i < 100; i++) await run();
       const a = faults(); for (let i = 0; i < ${calls}; i++) await run(); const b = faults();
       console.log(((b[0] - a[0]) / ${calls}).toFixed(1) + " its own, " + ((b[1] - a[1]) / ${calls}).toFixed(1) + " of its reaped children");
     })();`,
  ],
  { encoding: "utf8" },
);
console.log(`  a minimal Node process's spawn('bash', ['-c', 'true']): ${node.stdout.trim()}`);
const perl = spawnSync(
  "perl",
  [
    "-e",
    `sub faults { open(my $f, "<", "/proc/self/stat") or die; my $s = <$f>; $s =~ s/.*\\) //; my @f = split / /, $s; return ($f[7], $f[8]) }
     sub run { my $pid = fork() // die; if (!$pid) { exec("bash", "-c", "true"); POSIX::_exit(127) } waitpid($pid, 0) }
     run() for 1 .. 100;
     my @a = faults(); run() for 1 .. ${calls}; my @b = faults();
     printf("%.1f its own, %.1f of its reaped children\\n", ($b[0] - $a[0]) / ${calls}, ($b[1] - $a[1]) / ${calls});`,
  ],
  { encoding: "utf8" },
);
console.log(`  a plain Perl fork and exec of the same: ${perl.stdout.trim()}`);
