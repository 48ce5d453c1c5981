/**
 * Section (u): the `microvm` provider against `gvisor` on the same machine, interleaved
 * round-robin in one run (issue 30's rows):
 * - CreateWorkspace p50 (a VM restored from its shape's template, made the workspace's, its executor
 *   answering; gVisor starts a container), deleted again after each call; goal p50 ≤ 1 s;
 * - the same with snapshots off (AGENT_WORKSPACE_MICROVM_SNAPSHOTS=0, a second server): a cold boot,
 *   the kernel, the guest's init and the executor's Node all under emulation;
 * - no-op `Bash`, 4 KiB `ReadFile` and 1 MiB `WriteFile` p50 in one workspace of each;
 * - `yes | head -c 100M` streamed through `StreamBash` and drained, MB/s;
 * - an idle VM's memory on the host: the QEMU process's RSS after the workspace sat idle, against the
 *   same workspace's gVisor sandbox (the container's memory cgroup), both with the executor up.
 * Which acceleration the VMs ran with (KVM or TCG) is in every row's note: under TCG every guest
 * instruction is emulated, and the rows say what that costs here, not what KVM would.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import Docker from "dockerode";
import { type BenchContext, type BenchWorkspace, createWorkspace, type Measure, type SectionResult, sleep, timed } from "./context.ts";
import type { Row } from "./report.ts";
import { createClients, startServerProcess } from "./server-process.ts";
import { roundSummary, summarize } from "./stats.ts";

/** Options of section (u). */
export interface MicrovmOptions {
  /** Creations per provider (restored VMs against gVisor containers). */
  creations: number;
  /** Cold boots (snapshots off). */
  coldBoots: number;
  /** Calls per series for the small operations. */
  iterations: number;
  /** 100 MB drains per provider. */
  drains: number;
}

const SECTION = "u microvm";
const STREAM_BYTES = 100 * 1024 * 1024;

export async function benchMicrovm(ctx: BenchContext, options: MicrovmOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = { options };
  const vm = await createWorkspace(ctx, "microvm");
  if (!vm.ok) return { rows, data, skipped: [`(u) ${vm.reason}`] };
  const gv = await createWorkspace(ctx, "gvisor");
  if (!gv.ok) {
    await vm.workspace.delete();
    return { rows, data, skipped: [`(u) ${gv.reason}`] };
  }
  const info = await ctx.clients.grpc.workspaces.getWorkspace({ id: vm.workspace.id });
  const accel = info.workspace?.providerDetails.accel ?? "?";
  const note = (extra: string) => `microvm under ${accel.toUpperCase()}; ${extra}`;
  data.accel = accel;
  const tools = ctx.clients.grpc.tools;
  try {
    // Small operations, one workspace each.
    const content = "x".repeat(4096);
    const big = new Uint8Array(1024 * 1024).fill(0x61);
    for (const w of [vm.workspace, gv.workspace]) {
      await tools.writeFile({ workspaceId: w.id, path: "four.txt", content });
      await tools.bash({ workspaceId: w.id, command: "true" });
    }
    const small: Record<string, (w: BenchWorkspace) => Measure> = {
      "Bash no-op": (w) => timed(() => tools.bash({ workspaceId: w.id, command: "true" }), (r) => {
        if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
      }),
      "ReadFile 4 KiB": (w) => timed(() => tools.readFile({ workspaceId: w.id, path: "four.txt" })),
      "WriteFile 1 MiB": (w) => timed(() => tools.writeFile({ workspaceId: w.id, path: "big.bin", content: new TextDecoder().decode(big) })),
    };
    for (const [what, make] of Object.entries(small)) {
      ctx.log(`(u) ${what}: ${options.iterations} calls each, microvm and gvisor interleaved`);
      const samples = await interleaveTwo(make(vm.workspace), make(gv.workspace), 3, options.iterations);
      const a = summarize(samples.a);
      const b = summarize(samples.b);
      rows.push({ section: SECTION, metric: `${what} p50 (microvm vs gvisor)`, server: a.p50, baseline: b.p50, unit: "ms", ratio: a.p50 / b.p50, goal: "info", note: note(`p90 ${a.p90.toFixed(1)} vs ${b.p90.toFixed(1)} ms`) });
      data[what] = { microvm: roundSummary(a), gvisor: roundSummary(b) };
    }

    // Streamed output: 100 MB through StreamBash, drained as fast as it comes.
    const drain = (w: BenchWorkspace): Measure => async () => {
      const t0 = performance.now();
      let bytes = 0;
      for await (const m of tools.streamBash({ workspaceId: w.id, command: `yes | head -c ${STREAM_BYTES}`, timeoutMs: 600_000n })) {
        if (m.event.case === "stdout") bytes += m.event.value.length;
      }
      if (bytes !== STREAM_BYTES) throw new Error(`drained ${bytes} bytes`);
      return performance.now() - t0;
    };
    ctx.log(`(u) yes | head -c 100M: ${options.drains} drains each`);
    const drains = await interleaveTwo(drain(vm.workspace), drain(gv.workspace), 0, options.drains);
    const mbps = (ms: number) => STREAM_BYTES / 1e6 / (ms / 1000);
    const da = mbps(summarize(drains.a).p50);
    const db = mbps(summarize(drains.b).p50);
    rows.push({ section: SECTION, metric: "StreamBash yes | head -c 100M, MB/s (microvm vs gvisor)", server: da, baseline: db, unit: "MB/s", ratio: da / db, goal: "info", note: note(`p50 of ${options.drains}`) });
    data.stream = { microvmMBps: da, gvisorMBps: db };

    // Idle memory: QEMU's RSS against the gVisor container's memory cgroup.
    await sleep(5000);
    const qemuRss = await qemuRssBytes(ctx, vm.workspace.id);
    const gvisorBytes = await containerMemoryBytes(gv.workspace.id);
    if (qemuRss !== undefined && gvisorBytes !== undefined) {
      rows.push({ section: SECTION, metric: "idle workspace memory, MiB (microvm QEMU RSS vs gvisor container)", server: qemuRss / 2 ** 20, baseline: gvisorBytes / 2 ** 20, unit: "MiB", ratio: qemuRss / gvisorBytes, goal: "info", note: note("after 5 s idle, executor up; QEMU's RSS counts guest memory the guest has touched") });
      data.idle = { qemuRssBytes: qemuRss, gvisorBytes };
    } else {
      skipped.push("(u) idle memory: QEMU's RSS or the gVisor container's memory was not readable");
    }
  } finally {
    await vm.workspace.delete();
    await gv.workspace.delete();
  }

  // Creation, deleted again each time: a VM restored from its template (made by the workspaces
  // above) against a gVisor container.
  const create = (provider: string, clients = ctx.clients): Measure => async () => {
    const t0 = performance.now();
    const res = await clients.grpc.workspaces.createWorkspace({ provider, labels: { purpose: "bench" } });
    const ms = performance.now() - t0;
    if (provider === "microvm" && clients === ctx.clients && res.workspace?.providerDetails.start !== "restored") throw new Error(`a VM was ${res.workspace?.providerDetails.start ?? "?"}, not restored`);
    await clients.grpc.workspaces.deleteWorkspace({ id: res.workspace?.id ?? "" });
    return ms;
  };
  ctx.log(`(u) CreateWorkspace: ${options.creations} each, a restored VM against a gVisor container`);
  const creations = await interleaveTwo(create("microvm"), create("gvisor"), 1, options.creations);
  const ca = summarize(creations.a);
  const cb = summarize(creations.b);
  rows.push({ section: SECTION, metric: "CreateWorkspace p50, restored from a template (microvm vs gvisor)", server: ca.p50, baseline: cb.p50, unit: "ms", ratio: ca.p50 / cb.p50, goal: "microvm ≤ 1000 ms", pass: ca.p50 <= 1000, note: note(`p90 ${ca.p90.toFixed(0)} vs ${cb.p90.toFixed(0)} ms, max ${ca.max.toFixed(0)} vs ${cb.max.toFixed(0)} ms over ${options.creations}`) });
  data.create = { microvm: roundSummary(ca), gvisor: roundSummary(cb) };

  // Cold boots: a second server, snapshots off, its own data directory; against the restores above.
  const coldDir = await mkdtemp(path.join(tmpdir(), "aw-bench-cold-"));
  const cold = await startServerProcess({ dataDir: coldDir, env: { AGENT_WORKSPACE_MICROVM_SNAPSHOTS: "0", AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_LOG_LEVEL: "error" } });
  const coldClients = createClients(cold.url);
  try {
    ctx.log(`(u) CreateWorkspace with snapshots off: ${options.coldBoots} cold boots`);
    const boots: number[] = [];
    for (let i = 0; i < options.coldBoots; i++) boots.push(await create("microvm", coldClients)());
    const cs = summarize(boots);
    rows.push({ section: SECTION, metric: "CreateWorkspace p50, cold boot (snapshots off) vs restored", server: cs.p50, baseline: ca.p50, unit: "ms", ratio: cs.p50 / ca.p50, goal: "info", note: note(`max ${cs.max.toFixed(0)} ms over ${options.coldBoots}; the kernel, the guest's init and Node start under emulation`) });
    data.coldBoot = roundSummary(cs);
  } finally {
    coldClients.close();
    await cold.stop();
    await rm(coldDir, { recursive: true, force: true });
  }
  return { rows, data, skipped };
}

/** Two series round-robin, alternating which goes first. */
async function interleaveTwo(a: Measure, b: Measure, warmup: number, iterations: number): Promise<{ a: number[]; b: number[] }> {
  const out = { a: [] as number[], b: [] as number[] };
  for (let i = 0; i < warmup + iterations; i++) {
    const order = i % 2 === 0 ? (["a", "b"] as const) : (["b", "a"] as const);
    for (const k of order) {
      const ms = await (k === "a" ? a : b)();
      if (i >= warmup) out[k].push(ms);
    }
  }
  return out;
}

async function qemuRssBytes(ctx: BenchContext, id: string): Promise<number | undefined> {
  try {
    const pid = Number((await readFile(path.join(ctx.dataDir, "microvm", id, "qemu.pid"), "utf8")).trim());
    const status = await readFile(`/proc/${pid}/status`, "utf8");
    const kb = /^VmRSS:\s+(\d+) kB/m.exec(status)?.[1];
    return kb === undefined ? undefined : Number(kb) * 1024;
  } catch {
    return undefined;
  }
}

/** The gVisor workspace container's memory use as its engine reports it. */
async function containerMemoryBytes(id: string): Promise<number | undefined> {
  try {
    const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });
    const stats = (await docker.getContainer(`aw-${id}`).stats({ stream: false })) as { memory_stats?: { usage?: number } };
    return stats.memory_stats?.usage;
  } catch {
    return undefined;
  }
}
