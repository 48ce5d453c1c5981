/**
 * `node bench/syscall-count.ts [--calls=N] [--tool=bash|read|health]`: the system calls the server's
 * main thread makes per call, by name, counted by `strace -c` attached to that thread alone (not
 * the audit writer's thread, not libuv's pool) over N sequential calls in a local workspace.
 *
 * Most of these are fixed per call, but not all, unlike faults (bench/fault-count.ts): the event
 * loop's turns (`epoll_pwait`, `read`) grow when the launcher's answers arrive in more pieces, and
 * `futex` when threads contend. strace's slowdown and a busy host both add to those, so take it on
 * an idle host (on the one below, 1,000 `Bash` calls made 24 per call idle and 210 during a CI run).
 * They matter where entering the kernel is dear: on the AMD EPYC guest of 2026-12-03, a PVM guest
 * (its kernel's entries go through the hypervisor), a quarter of the main thread's CPU per no-op
 * `Bash` was kernel time.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { createClients, startServerProcess } from "./server-process.ts";

const { values } = parseArgs({ options: { calls: { type: "string", default: "500" }, tool: { type: "string", default: "bash" } } });
const calls = Number(values.calls);
if (!Number.isInteger(calls) || calls < 1) throw new Error("--calls: a positive integer");
if (!["bash", "read", "health"].includes(values.tool)) throw new Error("--tool: bash, read or health");

const data = await mkdtemp(path.join(os.tmpdir(), "aw-syscalls-"));
const server = await startServerProcess({ dataDir: data, env: { AGENT_WORKSPACE_DOCKER: "off" } });
const clients = createClients(server.url);
const workspaceId = (await clients.grpc.workspaces.createWorkspace({ provider: "local" })).workspace!.id;
await clients.grpc.tools.writeFile({ workspaceId, path: "f.txt", content: "x".repeat(4096) });
const call = () =>
  values.tool === "health"
    ? clients.grpc.health.check({})
    : values.tool === "read"
      ? clients.grpc.tools.readFile({ workspaceId, path: "f.txt" })
      : clients.grpc.tools.bash({ workspaceId, command: "true" });
for (let i = 0; i < 200; i++) await call();

// -p names the main thread only (its tid is the pid); strace prints its table on SIGINT. A strace
// that is missing or cannot attach (ptrace refused) ends the run with its own words, and the
// server is stopped either way.
let report = "";
try {
  const strace = spawn("strace", ["-c", "-S", "calls", "-p", String(server.pid)], { stdio: ["ignore", "ignore", "pipe"] });
  strace.stderr.setEncoding("utf8").on("data", (d: string) => (report += d));
  const closed = new Promise<number | null>((resolve) => strace.once("close", resolve));
  await new Promise<void>((resolve, reject) => {
    strace.once("error", reject);
    strace.stderr.on("data", () => report.includes("attached") && resolve());
    void closed.then((code) => reject(new Error(`strace ended before it attached (exit ${code}): ${report.trim()}`)));
  });
  for (let i = 0; i < calls; i++) await call();
  strace.kill("SIGINT");
  await closed;
} catch (err) {
  await server.stop();
  await rm(data, { recursive: true, force: true });
  throw err;
}

const rows: Array<[string, number, number]> = [];
for (const line of report.split("\n")) {
  // % time, seconds, usecs/call, calls, [errors], syscall
  const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$/.exec(line);
  if (m && m[3] !== "total") rows.push([m[3], Number(m[1]) / calls, Number(m[2] ?? 0) / calls]);
}
const total = rows.reduce((sum, [, n]) => sum + n, 0);
console.log(`${calls} ${values.tool} calls: ${total.toFixed(1)} system calls per call on the server's main thread`);
for (const [name, n, errors] of rows) console.log(`  ${n.toFixed(2).padStart(7)}  ${name}${errors > 0 ? ` (${errors.toFixed(2)} failed)` : ""}`);

await clients.grpc.workspaces.deleteWorkspace({ id: workspaceId });
clients.close();
await server.stop();
await rm(data, { recursive: true, force: true });
