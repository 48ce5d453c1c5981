/**
 * Section (j): cold workspace creation. `CreateWorkspace` through the API (it returns once the
 * workspace is ready: for containers, the container runs and its executor answers), deleted again
 * after each call, against the cheapest raw way to make the same thing, interleaved round-robin:
 * - local: `mkdir` of a directory;
 * - docker, gvisor: dockerode createVolume + createContainer + start of a container of the same
 *   image and runtime with the providers' essentials (no network, the volume on /workspace)
 *   running `sleep infinity`, removed again after each call;
 * - microvm: QEMU alone restoring the template the server's workspaces are made from (started with
 *   the same command line and the state as its incoming migration, until it runs), killed again:
 *   what a restore costs before the guest is made the workspace's and its executor answers.
 * There are no warm pools yet, so every creation is cold (after one unmeasured creation of each
 * series). Reported: p50 over 8 creations (3 with --quick), for information (no fixed goal).
 * With a container provider, also the part of a creation and a deletion that a container
 * workspace's disk image costs (providers/disk-image.ts: a sparse image of the default disk limit,
 * mkfs.ext4, mount; unmount, delete), p50 over 20 (5 with --quick), for information.
 */
import { mkdir, readdir, readFile, rm, stat, truncate, writeFile } from "node:fs/promises";
import path from "node:path";
import { DiskImages } from "../providers/disk-image.ts";
import { settingsItem } from "../providers/microvm-guest.ts";
import { qemuArgs, vmFiles, type VmShape } from "../providers/microvm-qemu.ts";
import { restore } from "../providers/microvm-templates.ts";
import { DEFAULT_LIMITS, parseSize } from "../server/workspace-limits.ts";
import { type BenchContext, type Measure, type SectionResult, createWorkspace, interleave } from "./context.ts";
import { dockerClient, providerContainerSpec, startRawContainer } from "./docker.ts";
import type { Row } from "./report.ts";
import { roundSummary, summarize } from "./stats.ts";

/** Options of section (j). */
export interface CreateOptions {
  /** Providers to measure, in order. */
  providers: string[];
  /** Measured creations per series. */
  iterations: number;
}

/** Creates a workspace through the API and times it; deletes it afterwards, untimed. */
function createThroughApi(ctx: BenchContext, provider: string): Measure {
  return async () => {
    const t0 = performance.now();
    const created = await createWorkspace(ctx, provider);
    const ms = performance.now() - t0;
    if (!created.ok) throw new Error(created.reason);
    await created.workspace.delete();
    return ms;
  };
}

/** The raw baseline of `provider`, with its name (also section (k)'s). */
export function rawCreate(ctx: BenchContext, provider: string): { name: string; measure: Measure } {
  if (provider === "microvm") return rawRestore(ctx);
  if (provider === "local") {
    let n = 0;
    return {
      name: "mkdir",
      measure: async () => {
        const dir = path.join(ctx.dataDir, "bench-mkdir", `d${n++}`);
        await mkdir(path.dirname(dir), { recursive: true });
        const t0 = performance.now();
        await mkdir(dir);
        const ms = performance.now() - t0;
        await rm(dir, { recursive: true });
        return ms;
      },
    };
  }
  const docker = dockerClient();
  const spec = providerContainerSpec(provider);
  return {
    name: "docker create+start",
    measure: async () => {
      const t0 = performance.now();
      const raw = await startRawContainer(docker, spec);
      const ms = performance.now() - t0;
      await raw.remove();
      return ms;
    },
  };
}

/**
 * QEMU restoring the server's most recently used template (the server made it for the workspaces
 * it created before this measure's first call) in a directory of its own, with a sparse disk of its
 * own, until it runs; then killed. The template's files are the server's cache (its data directory).
 */
function rawRestore(ctx: BenchContext): { name: string; measure: Measure } {
  let n = 0;
  return {
    name: "QEMU restore of the template",
    measure: async () => {
      const root = path.join(ctx.dataDir, "microvm", "templates");
      const names = (await readdir(root)).filter((d) => /^[0-9a-f]{24}$/.test(d));
      const newest = (await Promise.all(names.map(async (d) => ({ d, t: (await stat(path.join(root, d))).mtimeMs })))).sort((a, b) => b.t - a.t)[0];
      if (newest === undefined) throw new Error(`no template in ${root}`);
      const shape = (JSON.parse(await readFile(path.join(root, newest.d, "meta.json"), "utf8")) as { shape: VmShape }).shape;
      const dir = path.join(ctx.dataDir, "bench-raw-vm", `v${n++}`);
      await mkdir(dir, { recursive: true });
      const f = vmFiles(dir);
      await writeFile(f.settings, settingsItem({ pids: 0, memoryBytes: 0, uid: 1000, gid: 1000, enforce: "", noexec: false }));
      await writeFile(f.disk, "");
      await truncate(f.disk, 64 * 1024 * 1024);
      const qemu = "/usr/bin/qemu-system-x86_64";
      const t0 = performance.now();
      const vm = await restore(qemu, qemuArgs(`bench-raw-${n}`, dir, shape, f.disk), dir, path.join(root, newest.d, "state"), 120_000);
      const ms = performance.now() - t0;
      vm.kill();
      await vm.exited;
      await rm(dir, { recursive: true, force: true });
      return ms;
    },
  };
}

/** Runs section (j) for each requested provider. */
export async function benchCreate(ctx: BenchContext, options: CreateOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = { iterations: options.iterations, warmup: 1 };
  for (const provider of options.providers) {
    // A provider the server lacks fails its first creation: skip it rather than fail the section.
    const probe = await createWorkspace(ctx, provider);
    if (!probe.ok) {
      skipped.push(`(j) ${provider}: ${probe.reason}`);
      ctx.log(`(j) skipping ${provider}: ${probe.reason}`);
      continue;
    }
    await probe.workspace.delete();
    const raw = rawCreate(ctx, provider);
    ctx.log(`(j) ${provider}: 1 warmup + ${options.iterations} creations each of CreateWorkspace and ${raw.name}`);
    const samples = await interleave({ api: createThroughApi(ctx, provider), raw: raw.measure }, 1, options.iterations);
    const ours = summarize(samples.api);
    const base = summarize(samples.raw);
    rows.push({
      section: "j create",
      metric: `CreateWorkspace p50, cold (${provider})`,
      server: ours.p50,
      baseline: base.p50,
      unit: "ms",
      ratio: ours.p50 / base.p50,
      goal: `info, vs ${raw.name}`,
      note: `max ${ours.max.toFixed(1)} ms (${raw.name}: ${base.max.toFixed(1)} ms) over ${options.iterations}; no warm pool`,
    });
    data[provider] = { baseline: raw.name, api: roundSummary(ours), raw: roundSummary(base) };
  }
  if (options.providers.some((p) => p !== "local")) await benchDiskImages(ctx, options.iterations <= 3 ? 5 : 20, rows, skipped, data);
  return { rows, data, skipped };
}

/** What a container workspace's disk image adds to its creation and its deletion, measured alone. */
async function benchDiskImages(ctx: BenchContext, iterations: number, rows: Row[], skipped: string[], data: Record<string, unknown>): Promise<void> {
  const disks = new DiskImages(path.join(ctx.dataDir, "bench-disks"));
  const support = await disks.probe();
  if (!support.ok) {
    skipped.push(`(j) disk images: ${support.reason}`);
    return;
  }
  const bytes = parseSize(DEFAULT_LIMITS.disk, "disk");
  const make: number[] = [];
  const remove: number[] = [];
  for (let i = 0; i <= iterations; i++) {
    const id = `bench-disk-${i}`;
    const t0 = performance.now();
    await disks.create(id, bytes, { uid: 1000, gid: 1000 });
    const t1 = performance.now();
    await disks.remove(id);
    const t2 = performance.now();
    // The first of each is a warm-up.
    if (i > 0) {
      make.push(t1 - t0);
      remove.push(t2 - t1);
    }
  }
  for (const [what, samples] of [["make + mount", make], ["unmount + delete", remove]] as const) {
    const s = summarize(samples);
    rows.push({
      section: "j create",
      metric: `disk image ${what} p50 (${DEFAULT_LIMITS.disk}, docker and gvisor)`,
      server: s.p50,
      baseline: Number.NaN,
      unit: "ms",
      ratio: Number.NaN,
      goal: "info, part of the rows above",
      note: `max ${s.max.toFixed(1)} ms over ${iterations}`,
    });
  }
  data.diskImage = { bytes, make: roundSummary(summarize(make)), remove: roundSummary(summarize(remove)) };
}
