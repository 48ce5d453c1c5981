/**
 * `node bench/ab-cpu.ts --a=DIR --b=DIR [--calls=N] [--rounds=R] [--tool=bash|read|names|health|flood] [--provider=local|docker|gvisor] [--transport=grpc|connect] [--a-args=… --b-args=…] [--a-env=K=V,… --b-env=…]`: the
 * server CPU per call of two checkouts of this repository (A and B, e.g. a commit and the work
 * tree), each serving one local workspace, measured in alternating rounds of N calls so that load
 * on the host falls on both alike (`--a-args`, `--b-args`: extra Node flags for either server;
 * `--a-env`, `--b-env`: extra environment, comma-separated, so one checkout can be compared with
 * itself under two settings).
 * Prints each round and the medians.
 */
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { a: { type: "string" }, b: { type: "string" }, calls: { type: "string", default: "1000" }, rounds: { type: "string", default: "6" }, tool: { type: "string", default: "bash" }, provider: { type: "string", default: "local" }, transport: { type: "string", default: "grpc" }, "a-args": { type: "string", default: "" }, "b-args": { type: "string", default: "" }, "a-env": { type: "string", default: "" }, "b-env": { type: "string", default: "" } } });
if (!values.a || !values.b) throw new Error("--a and --b name two checkouts");
const calls = Number(values.calls);

interface Side { name: string; stop(): Promise<void>; round(): Promise<{ cpu: number; ms: number }> }
/** `K=V,K2=V2` as an environment. */
function envOf(list: string): Record<string, string> {
  return Object.fromEntries(list.split(",").filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
}

async function side(name: string, dir: string, nodeArgs: string, extraEnv: string): Promise<Side> {
  const mod = (await import(path.join(path.resolve(dir), "bench", "server-process.ts"))) as typeof import("./server-process.ts");
  const data = await mkdtemp(path.join(os.tmpdir(), `aw-ab-${name}-`));
  const server = await mod.startServerProcess({ dataDir: data, env: { ...(values.provider === "local" ? { AGENT_WORKSPACE_DOCKER: "off" } : {}), ...envOf(extraEnv) }, nodeArgs: nodeArgs.split(" ").filter(Boolean) });
  const clients = mod.createClients(server.url);
  // connect: every call as Connect JSON over HTTP/1.1.
  const c = values.transport === "connect" ? { ...clients.grpc, ...clients.connect } : clients.grpc;
  const ws = await c.workspaces.createWorkspace({ provider: values.provider });
  const workspaceId = ws.workspace!.id;
  await c.tools.writeFile({ workspaceId, path: "f.txt", content: "x".repeat(4096) });
  // flood: a unary Bash printing 64 MiB to stdout, of which the answer keeps 50 KiB.
  const command = values.tool === "flood" ? "head -c 67108864 /dev/zero" : "true";
  // names: a listing of 200 names.
  if (values.tool === "names") await c.tools.bash({ workspaceId, command: "mkdir d && cd d && for i in $(seq 1 200); do : > f$i.txt; done" });
  const call = () =>
    values.tool === "read" ? c.tools.readFile({ workspaceId, path: "f.txt" }) : values.tool === "names" ? c.tools.listFiles({ workspaceId, path: "d", namesOnly: true }) : values.tool === "health" ? c.health.check({}) : c.tools.bash({ workspaceId, command });
  for (let i = 0; i < (values.tool === "flood" ? 3 : 200); i++) await call();
  return {
    name,
    async round() {
      const before = await server.stats();
      const t0 = performance.now();
      for (let i = 0; i < calls; i++) await call();
      const ms = (performance.now() - t0) / calls;
      const after = await server.stats();
      return { cpu: (after.cpuUserUs - before.cpuUserUs + after.cpuSystemUs - before.cpuSystemUs) / 1000 / calls, ms };
    },
    async stop() {
      await c.workspaces.deleteWorkspace({ id: workspaceId });
      clients.close();
      await server.stop();
      await rm(data, { recursive: true, force: true });
    },
  };
}

const sides = [await side("A", values.a, values["a-args"]!, values["a-env"]!), await side("B", values.b, values["b-args"]!, values["b-env"]!)];
const results = new Map<string, number[]>(sides.map((s) => [s.name, []]));
const latency = new Map<string, number[]>(sides.map((s) => [s.name, []]));
for (let r = 0; r < Number(values.rounds); r++) {
  for (const s of r % 2 === 0 ? sides : [...sides].reverse()) {
    const { cpu, ms } = await s.round();
    results.get(s.name)!.push(cpu);
    latency.get(s.name)!.push(ms);
    console.log(`round ${r} ${s.name}: server CPU ${cpu.toFixed(3)} ms per call, ${ms.toFixed(2)} ms per call`);
  }
}
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
for (const s of sides) console.log(`${s.name}: median server CPU ${median(results.get(s.name)!).toFixed(3)} ms per call, latency ${median(latency.get(s.name)!).toFixed(2)} ms (${values.tool}, ${calls} calls × ${values.rounds} rounds)`);
for (const s of sides) await s.stop();
