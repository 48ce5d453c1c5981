/**
 * Section (j): cold workspace creation. `CreateWorkspace` through the API (it returns once the
 * workspace is ready: for containers, the container runs and its executor answers), deleted again
 * after each call, against the cheapest raw way to make the same thing, interleaved round-robin:
 * - local: `mkdir` of a directory;
 * - docker, gvisor: dockerode createVolume + createContainer + start of a container of the same
 *   image and runtime with the providers' essentials (no network, the volume on /workspace)
 *   running `sleep infinity`, removed again after each call.
 * There are no warm pools yet, so every creation is cold (after one unmeasured creation of each
 * series). Reported: p50 over 8 creations (3 with --quick), for information (no fixed goal).
 */
import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
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
  return { rows, data, skipped };
}
