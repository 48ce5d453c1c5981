/**
 * Section (q): what the sandbox's own enforcement costs (README, "What the sandbox enforces"), per
 * container provider, measured against the same workspace kind without it in the same run:
 *
 * - a no-op Bash in a workspace whose agent type has an allowlist (its policy layer: the allowed
 *   programs share one group, the command's primary group) against one without an agent type;
 * - a no-op Bash in a workspace holding a large tree (20,000 files in 2,000 directories, made once;
 *   the sweep after each command looks at the root and its first level) against an empty one;
 * - the first allowlist CreateWorkspace of the run (it builds the policy layer, and the prepared
 *   image when none exists yet) against a plain one: information only.
 *
 * Goals: the allowlist adds at most 15% to a no-op Bash at p50, the large tree at most 25%.
 */
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { type BenchContext, type SectionResult, timed } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

/** Options of section (q). */
export interface EnforcementOptions {
  providers: string[];
  iterations: number;
  warmup: number;
}

const AGENT_TYPE = "bench-allowlist";

async function samples(ctx: BenchContext, workspaceId: string, n: number): Promise<number[]> {
  const bash = timed(
    () => ctx.clients.grpc.tools.bash({ workspaceId, command: "true" }),
    (r) => {
      if (r.exitCode !== 0) throw new Error(`no-op Bash exited ${r.exitCode}: ${r.stderr}`);
    },
  );
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await bash());
  return out;
}

/** Runs section (q). */
export async function benchEnforcement(ctx: BenchContext, options: EnforcementOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const data: Record<string, unknown> = {};
  const skipped: string[] = [];
  const { workspaces } = ctx.clients.grpc;
  const sessions = new Http2SessionManager(ctx.server.url);
  const config = createClient(ConfigService, createGrpcTransport({ baseUrl: ctx.server.url, sessionManager: sessions }));
  await config.createAgentType({
    agentType: { id: AGENT_TYPE, workspace: { enabled: true, tools: ["bash"], commandPolicy: { defaultAction: "", allow: ["git", "ls", "cat", "grep", "sed", "true"], deny: [] } } },
  });
  for (const provider of options.providers.filter((p) => p === "docker" || p === "gvisor")) {
    const made: string[] = [];
    try {
      const create = async (agentType = "") => {
        const t0 = performance.now();
        const id = (await workspaces.createWorkspace({ provider, agentType })).workspace?.id ?? "";
        made.push(id);
        return { id, ms: performance.now() - t0 };
      };
      const plain = await create();
      // The first allowlist workspace of a base image prepares its image; the second reuses it.
      const firstAllowlist = await create(AGENT_TYPE);
      const allowlist = await create(AGENT_TYPE);
      const tree = await create();
      const planted = await ctx.clients.grpc.tools.bash({
        workspaceId: tree.id,
        command: "for d in $(seq 1 2000); do mkdir -p t/$((d % 40))/d$d && for f in 1 2 3 4 5 6 7 8 9 10; do : > t/$((d % 40))/d$d/f$f; done; done; find t -type f | wc -l",
        timeoutMs: 600_000n,
      });
      if (planted.stdout.trim() !== "20000") throw new Error(`the tree has ${planted.stdout.trim()} files`);
      const kinds = [["plain", plain.id], ["allowlist", allowlist.id], ["tree", tree.id]] as const;
      const runs: Record<string, number[]> = {};
      for (const [, id] of kinds) await samples(ctx, id, options.warmup);
      // Interleaved, so that the host's load falls on all three alike.
      for (let i = 0; i < options.iterations; i++) {
        for (const [name, id] of kinds) (runs[name] ??= []).push(...(await samples(ctx, id, 1)));
      }
      const s = Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, summarize(v)]));
      data[provider] = { ...s, firstAllowlistCreateMs: firstAllowlist.ms, allowlistCreateMs: allowlist.ms, plainCreateMs: plain.ms };
      const row = (metric: string, server: number, baseline: number, limit: number): Row => ({
        section: "q enforcement",
        metric: `${provider}: ${metric}`,
        server: round(server, 2),
        baseline: round(baseline, 2),
        unit: "ms",
        ratio: round(server / baseline, 3),
        goal: `≤ ${limit}×`,
        pass: server / baseline <= limit,
      });
      rows.push(row("no-op Bash p50 under an allowlist (its policy layer, program groups) vs without", s.allowlist.p50, s.plain.p50, 1.15));
      rows.push(row("no-op Bash p50 with 20,000 files in 2,000 directories (the sweep) vs empty", s.tree.p50, s.plain.p50, 1.25));
      rows.push({ section: "q enforcement", metric: `${provider}: the run's first CreateWorkspace under an allowlist (prepares the image if none exists yet) vs a plain one`, server: round(firstAllowlist.ms, 0), baseline: round(plain.ms, 0), unit: "ms", ratio: round(firstAllowlist.ms / plain.ms, 2), goal: "information", pass: undefined });
    } catch (err) {
      skipped.push(`q enforcement on ${provider}: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      for (const id of made) await workspaces.deleteWorkspace({ id }).catch(() => undefined);
    }
  }
  sessions.abort();
  return { rows, data, skipped };
}
