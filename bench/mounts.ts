/**
 * Section (p): host mounts. `CreateWorkspace` with one mount of a generated tree (2,000 files,
 * about 20 MB, in nested directories) against `cp -a` of the same tree on the host, for each
 * provider. What a mount adds to a workspace's creation is measured as the creation with the mount
 * minus a creation without one, interleaved so both see the same load; the baseline copies into a
 * fresh directory each time. Goal on local: the mount's share ≤ 2× `cp -a` (it walks the tree
 * through the jail, checks each file against the sensitive-file rules and the globs, and writes
 * each through the workspace's file primitives, atomically). On docker and gvisor every file
 * crosses the executor's channel; reported against the same `cp -a` for information.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { type BenchContext, type Measure, type SectionResult, interleave, run } from "./context.ts";
import type { Row } from "./report.ts";
import { round, roundSummary, summarize, type Summary } from "./stats.ts";
import { generateTree } from "./tree.ts";

/** Options of section (p). */
export interface MountsOptions {
  providers: string[];
  iterations: number;
  files: number;
  totalBytes: number;
}

const LOCAL_GOAL = 2;

/** The directory the bench server may mount from (its AGENT_WORKSPACE_ALLOWED_HOST_ROOTS). */
export const MOUNT_ROOT = path.join(os.tmpdir(), `aw-bench-mounts-${process.pid}`);

/** Runs section (p). */
export async function benchMounts(ctx: BenchContext, options: MountsOptions): Promise<SectionResult> {
  const source = path.join(MOUNT_ROOT, "tree");
  const scratch = await mkdtemp(path.join(os.tmpdir(), "aw-bench-cp-"));
  const skipped: string[] = [];
  try {
    await mkdir(source, { recursive: true });
    const tree = generateTree(source, { files: options.files, totalBytes: options.totalBytes, needles: 0, seed: 7 });
    ctx.log(`(p) tree: ${tree.files} files, ${(tree.bytes / 2 ** 20).toFixed(1)} MiB in ${tree.directories} directories`);
    const workspaces = ctx.clients.grpc.workspaces;
    /** Creates a workspace (with or without the mount), times it, deletes it untimed. */
    const create = (provider: string, mount: boolean): Measure => async () => {
      const t0 = performance.now();
      const res = await workspaces.createWorkspace({ provider, labels: { purpose: "bench" }, mounts: mount ? [{ hostPath: source, mountPath: "tree" }] : [] });
      const ms = performance.now() - t0;
      const copied = res.workspace?.mounts[0]?.filesCopied ?? 0;
      await workspaces.deleteWorkspace({ id: res.workspace?.id ?? "" });
      if (mount && copied !== tree.files) throw new Error(`(p) ${provider}: ${copied} files copied, expected ${tree.files}`);
      return ms;
    };
    let n = 0;
    const copy: Measure = async () => {
      const target = path.join(scratch, String(n++));
      const t0 = performance.now();
      const { code } = await run("cp", ["-a", source, target]);
      const ms = performance.now() - t0;
      if (code !== 0) throw new Error(`cp -a exited ${code}`);
      await rm(target, { recursive: true, force: true });
      return ms;
    };

    const series: Record<string, Measure> = { cp: copy };
    for (const provider of options.providers) {
      try {
        await create(provider, false)();
      } catch (err) {
        skipped.push(`(p) ${provider}: ${err instanceof Error ? err.message : String(err)}`);
        continue;
      }
      series[`${provider}:mount`] = create(provider, true);
      series[`${provider}:plain`] = create(provider, false);
    }
    ctx.log(`(p) ${Object.keys(series).join(", ")}: 1 warmup + ${options.iterations} each`);
    const samples = await interleave(series, 1, options.iterations);
    const s: Record<string, Summary> = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
    const rows: Row[] = [];
    for (const provider of options.providers) {
      if (!s[`${provider}:mount`]) continue;
      const share = s[`${provider}:mount`].p50 - s[`${provider}:plain`].p50;
      const ratio = share / s.cp.p50;
      rows.push({
        section: "p mounts",
        metric: `mount of ${tree.files.toLocaleString("en")} files, ${(tree.bytes / 2 ** 20).toFixed(0)} MiB: its share of CreateWorkspace p50 (${provider})`,
        server: round(share, 1),
        baseline: round(s.cp.p50, 1),
        unit: "ms",
        ratio: round(ratio, 2),
        goal: provider === "local" ? `≤ ${LOCAL_GOAL}× cp -a` : "information: against cp -a on the host",
        ...(provider === "local" ? { pass: ratio <= LOCAL_GOAL } : {}),
        note: `CreateWorkspace ${round(s[`${provider}:mount`].p50, 1)} ms with the mount, ${round(s[`${provider}:plain`].p50, 1)} ms without`,
      });
    }
    return { rows, data: { tree, iterations: options.iterations, stats: Object.fromEntries(Object.entries(s).map(([k, v]) => [k, roundSummary(v)])) }, skipped };
  } finally {
    await rm(MOUNT_ROOT, { recursive: true, force: true });
    await rm(scratch, { recursive: true, force: true });
  }
}
