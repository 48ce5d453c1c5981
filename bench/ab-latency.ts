/**
 * `node bench/ab-latency.ts --a=DIR --b=DIR [--calls=N] [--blocks=B] [--tools=health,read,names,bash]`:
 * the latency and server CPU of two checkouts of this repository (A and B, e.g. a commit in a
 * worktree and the work tree), each serving one local workspace, called through the lean Connect
 * JSON client over HTTP/2 (lean-client.ts, the way issue 29 measured calls). For each tool the N
 * calls are split into B blocks that alternate between the two servers, so that load on the host
 * falls on both alike; it prints, per side, the median over the blocks of each block's p50 and of
 * its server CPU per call, and in how many blocks B was the faster and the cheaper; besides, the CPU
 * of the server's helper processes (the local executors and launchers, tree-cpu.ts). bench/ab-cpu.ts
 * is the same comparison through connect-node's client, in rounds.
 */
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { LeanUnary } from "./lean-client.ts";
import { descendantsCpuUs } from "./tree-cpu.ts";
import { textOfSize } from "./tree.ts";

const { values } = parseArgs({ options: { a: { type: "string" }, b: { type: "string" }, calls: { type: "string", default: "6000" }, blocks: { type: "string", default: "20" }, tools: { type: "string", default: "health,read,names,bash" } } });
if (!values.a || !values.b) throw new Error("--a and --b name two checkouts");
const blocks = Number(values.blocks);
const perBlock = Math.max(1, Math.floor(Number(values.calls) / blocks));
const TOOLS = ["health", "read", "names", "bash"] as const;
type Tool = (typeof TOOLS)[number];
const tools = values.tools!.split(",").map((t) => t.trim()) as Tool[];
for (const t of tools) if (!TOOLS.includes(t)) throw new Error(`--tools: ${t} is none of ${TOOLS.join(", ")}`);

interface Side {
  name: string;
  ops: Record<Tool, () => Promise<unknown>>;
  cpuUs(): Promise<number>;
  /** CPU of the server's live helper processes (executors, launchers; tree-cpu.ts). */
  helpersUs(): number;
  stop(): Promise<void>;
}

async function side(name: string, dir: string): Promise<Side> {
  const mod = (await import(path.join(path.resolve(dir), "bench", "server-process.ts"))) as typeof import("./server-process.ts");
  const data = await mkdtemp(path.join(os.tmpdir(), `aw-abl-${name}-`));
  const server = await mod.startServerProcess({ dataDir: data, env: { AGENT_WORKSPACE_DOCKER: "off" } });
  const clients = mod.createClients(server.url);
  const ws = await clients.grpc.workspaces.createWorkspace({ provider: "local" });
  const workspaceId = ws.workspace!.id;
  await clients.grpc.tools.writeFile({ workspaceId, path: "read.txt", content: textOfSize(4096) });
  await clients.grpc.tools.bash({ workspaceId, command: "mkdir d && cd d && for i in $(seq 1 200); do : > file-$i.txt; done" });
  const lean = await LeanUnary.connect(server.url);
  const tool = (method: string, body: object) => () => lean.call(`/agentworkspace.v1.ToolService/${method}`, JSON.stringify({ workspaceId, ...body }));
  return {
    name,
    ops: {
      health: () => lean.call("/grpc.health.v1.Health/Check", "{}"),
      read: tool("ReadFile", { path: "read.txt" }),
      names: tool("ListFiles", { path: "d", namesOnly: true }),
      bash: tool("Bash", { command: "true" }),
    },
    async cpuUs() {
      const s = await server.stats();
      return s.cpuUserUs + s.cpuSystemUs;
    },
    helpersUs: () => descendantsCpuUs(server.pid),
    async stop() {
      lean.close();
      await clients.grpc.workspaces.deleteWorkspace({ id: workspaceId });
      clients.close();
      await server.stop();
      await rm(data, { recursive: true, force: true });
    },
  };
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
const sides = [await side("A", values.a), await side("B", values.b)];
for (const t of tools) {
  for (const s of sides) for (let i = 0; i < 200; i++) await s.ops[t]();
  const p50s = sides.map(() => [] as number[]);
  const cpus = sides.map(() => [] as number[]);
  /** The helpers' CPU over all blocks (their clock ticks are 10 ms: summed, not per block). */
  const helpers = sides.map(() => 0);
  for (let block = 0; block < blocks; block++) {
    for (const i of block % 2 === 0 ? [0, 1] : [1, 0]) {
      const s = sides[i];
      const before = await s.cpuUs();
      const helpersBefore = s.helpersUs();
      const times: number[] = [];
      for (let n = 0; n < perBlock; n++) {
        const t0 = performance.now();
        await s.ops[t]();
        times.push(performance.now() - t0);
      }
      cpus[i].push(((await s.cpuUs()) - before) / 1000 / perBlock);
      helpers[i] += s.helpersUs() - helpersBefore;
      p50s[i].push(median(times));
    }
  }
  sides.forEach((s, i) =>
    console.log(
      `${t} ${s.name}: p50 ${median(p50s[i]).toFixed(3)} ms, server CPU ${median(cpus[i]).toFixed(3)} ms per call (medians of ${blocks} blocks of ${perBlock} calls); its helper processes ${(helpers[i] / 1000 / (blocks * perBlock)).toFixed(3)} ms per call more (over all blocks)`,
    ),
  );
  const faster = p50s[1].filter((x, b) => x < p50s[0][b]).length;
  const cheaper = cpus[1].filter((x, b) => x < cpus[0][b]).length;
  console.log(`${t}: B faster in ${faster} of ${blocks} blocks, cheaper in ${cheaper}`);
}
for (const s of sides) await s.stop();
