/**
 * `node bench/profile-call.ts [--calls=N] [--transport=grpc|connect|lean] [--tool=bash|read|list|names|health] [--whole]`:
 * profiles one kind of call end to end. It makes N sequential calls in a local workspace with the
 * server's main thread profiled over those calls alone (not the server's start or the warm-up), and
 * prints the profile's self time by function, by package or file, and by owner: our code, the
 * libraries, Node's JavaScript, and native time (V8, the garbage collector, system calls).
 * `--whole` profiles the server's every thread from its start instead (`--cpu-prof`, the audit
 * writer's thread included). bench/results/profiles keeps the .cpuprofile files for a closer look
 * in Chrome's DevTools.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { LeanUnary } from "./lean-client.ts";
import { createClients, startServerProcess } from "./server-process.ts";

const { values } = parseArgs({ options: { calls: { type: "string", default: "3000" }, transport: { type: "string", default: "grpc" }, tool: { type: "string", default: "bash" }, top: { type: "string", default: "30" }, whole: { type: "boolean", default: false } } });
const calls = Number(values.calls);
const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), "results", "profiles", `call-${values.tool}-${values.transport}-${Date.now()}`);
await mkdir(dir, { recursive: true });
const data = await mkdtemp(path.join(os.tmpdir(), "aw-prof-"));
const server = await startServerProcess({ dataDir: data, env: { AGENT_WORKSPACE_DOCKER: "off" }, nodeArgs: values.whole ? ["--cpu-prof", `--cpu-prof-dir=${dir}`] : [] });
console.error("server up");
const clients = createClients(server.url);
const c = values.transport === "connect" ? clients.connect : clients.grpc;
const ws = await clients.grpc.workspaces.createWorkspace({ provider: "local" });
const workspaceId = ws.workspace!.id;
for (let i = 0; i < 200; i++) await c.tools.writeFile({ workspaceId, path: `d/f${i}.txt`, content: "x".repeat(4096) });
// lean: Connect JSON over HTTP/2 with the lean client, the path of the harness and of bench (e).
const lean = values.transport === "lean" ? await LeanUnary.connect(server.url) : undefined;
const leanCall = (path: string, body: object) => lean!.call(path, JSON.stringify(body));
const call = lean
  ? () =>
      values.tool === "read"
        ? leanCall("/agentworkspace.v1.ToolService/ReadFile", { workspaceId, path: "d/f1.txt" })
        : values.tool === "list"
          ? leanCall("/agentworkspace.v1.ToolService/ListFiles", { workspaceId, path: "d" })
          : values.tool === "names"
            ? leanCall("/agentworkspace.v1.ToolService/ListFiles", { workspaceId, path: "d", namesOnly: true })
            : values.tool === "health"
              ? leanCall("/grpc.health.v1.Health/Check", {})
              : leanCall("/agentworkspace.v1.ToolService/Bash", { workspaceId, command: "true" })
  : () =>
  values.tool === "read"
    ? c.tools.readFile({ workspaceId, path: "d/f1.txt" })
    : values.tool === "list"
      ? c.tools.listFiles({ workspaceId, path: "d" })
      : values.tool === "names"
        ? c.tools.listFiles({ workspaceId, path: "d", namesOnly: true })
      : values.tool === "health"
        ? c.health.check({})
        : c.tools.bash({ workspaceId, command: "true" });
console.error("files written");
for (let i = 0; i < 100; i++) await call();
console.error("warm");
if (!values.whole) await server.profileStart();
const before = await server.stats();
const t0 = performance.now();
for (let i = 0; i < calls; i++) await call();
const ms = performance.now() - t0;
const after = await server.stats();
if (!values.whole) await server.profileStop(path.join(dir, "window.cpuprofile"));
console.log(`${calls} ${values.tool} calls over ${values.transport}: ${(ms / calls).toFixed(3)} ms each, server CPU ${(((after.cpuUserUs - before.cpuUserUs) + (after.cpuSystemUs - before.cpuSystemUs)) / 1000 / calls).toFixed(3)} ms per call`);
lean?.close();
await clients.grpc.workspaces.deleteWorkspace({ id: workspaceId });
clients.close();
await server.stop();
await rm(data, { recursive: true, force: true });

/** Whose code a profile node is: ours, a library's, Node's JavaScript, or native (V8, GC, system calls). */
function ownerOf(url: string, functionName: string): string {
  if (functionName === "(idle)") return "(idle)";
  if (/node_modules\//.test(url)) return "libraries (node_modules)";
  if (/\/(server|providers|gen|bench)\//.test(url)) return "ours (server/, providers/, gen/)";
  if (url.startsWith("node:")) return "Node's JavaScript (node:*)";
  if (functionName === "(garbage collector)") return "native: garbage collector";
  if (functionName === "(program)") return "native: V8 and libuv (program)";
  return "native: built-ins and system calls";
}

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[] }
const top = Number(values.top);
for (const file of (await readdir(dir)).filter((f) => f.endsWith(".cpuprofile")).sort()) {
  const p = JSON.parse(await readFile(path.join(dir, file), "utf8")) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  // timeDeltas[i] is the time from sample i-1 to sample i: the time a sample stands for is the one
  // until the next sample (as DevTools counts it), or the first sample after an idle wait would be
  // charged with the wait.
  p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i + 1] ?? 0)));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const fn = new Map<string, number>();
  const where = new Map<string, number>();
  const owner = new Map<string, number>();
  for (const [id, us] of self) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    const short = url.replace(/^file:\/\//, "").replace(/.*node_modules\/(@[^/]+\/[^/]+|[^/]+)\/.*/, "$1").replace(/.*\/work\/[^/]+\//, "");
    fn.set(`${functionName || "(anon)"} ${short}:${lineNumber + 1}`, (fn.get(`${functionName || "(anon)"} ${short}:${lineNumber + 1}`) ?? 0) + us);
    where.set(short || functionName, (where.get(short || functionName) ?? 0) + us);
    const who = ownerOf(url, functionName);
    owner.set(who, (owner.get(who) ?? 0) + us);
  }
  const idle = [...fn].filter(([k]) => k.startsWith("(idle)")).reduce((a, [, v]) => a + v, 0);
  console.log(`\n== ${file}: ${(total / 1000).toFixed(0)} ms sampled, ${((total - idle) / 1000).toFixed(0)} ms busy`);
  const show = (m: Map<string, number>) => [...m].filter(([k]) => !k.startsWith("(idle)")).sort((a, b) => b[1] - a[1]).slice(0, top).forEach(([k, v]) => console.log(`${((100 * v) / (total - idle)).toFixed(1).padStart(5)}%  ${(v / calls).toFixed(1).padStart(6)} µs/call  ${k}`));
  console.log("-- by function"); show(fn);
  console.log("-- by file"); show(where);
  console.log("-- by owner"); show(owner);
}
await writeFile(path.join(dir, "README.txt"), `${calls} ${values.tool} calls over ${values.transport}\n`);
