/**
 * Section (t): what the change scan after each command costs (README, "Audit trail": FileChanged
 * for commands). The scan runs only while someone watches the workspace, so each measurement
 * compares a watched workspace (a live WatchEvents reader) with an unwatched one of the same size,
 * interleaved round-robin, per provider:
 *
 * - a no-op Bash sent right after another in a small workspace (10 files): it also waits for the
 *   previous call's scan, which runs after that call's response;
 * - the same in a workspace of 10,000 files in 1,000 directories;
 * - a no-op Bash in the large workspace once the previous scan is done (an agent's next command
 *   comes after its model's turn, so this is the latency it sees);
 * - the scan itself: from a `touch`'s response to its FileChanged event (information).
 *
 * Goals: back to back in the small workspace at most 1.25× unwatched; in the large one after the
 * scan at most 1.1×. Back to back in the large one is information: it is the scan's cost.
 */
import { randomBytes } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { AuditService } from "../gen/agentworkspace/v1/audit_pb.js";
import { type BenchContext, type BenchWorkspace, createWorkspace, type SectionResult, timed } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

/** Options of section (t). */
export interface ChangesOptions {
  providers: string[];
  iterations: number;
  warmup: number;
}

const SMALL_GOAL = 1.25;
const SPACED_GOAL = 1.1;
const BIG_FILES = 10_000;

/** Runs section (t). */
export async function benchChanges(ctx: BenchContext, options: ChangesOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const data: Record<string, unknown> = {};
  const skipped: string[] = [];
  const tools = ctx.clients.grpc.tools;
  const sessions = new Http2SessionManager(ctx.server.url);
  const audit = createClient(AuditService, createGrpcTransport({ baseUrl: ctx.server.url, sessionManager: sessions }));
  for (const provider of options.providers) {
    const made: BenchWorkspace[] = [];
    const abort = new AbortController();
    try {
      for (let i = 0; i < 4; i++) {
        const m = await createWorkspace(ctx, provider);
        if (!m.ok) throw new Error(m.reason);
        made.push(m.workspace);
      }
      const [smallWatched, smallPlain, bigWatched, bigPlain] = made.map((w) => w.id);
      for (const id of [smallWatched, smallPlain]) await tools.bash({ workspaceId: id, command: "for f in $(seq 1 10); do echo $f > f$f.txt; done" });
      for (const id of [bigWatched, bigPlain]) {
        const planted = await tools.bash({
          workspaceId: id,
          command: `for d in $(seq 1 1000); do mkdir -p t/$((d % 20))/d$d && for f in 0 1 2 3 4 5 6 7 8 9; do : > t/$((d % 20))/d$d/f$f; done; done; find t -type f | wc -l`,
          timeoutMs: 600_000n,
        });
        if (planted.stdout.trim() !== String(BIG_FILES)) throw new Error(`the tree has ${planted.stdout.trim()} files`);
      }
      // Live readers of the watched workspaces: they count each workspace's FileChanged events.
      const changes = new Map<string, number>();
      /** A call's span by its trace id (from ToolCallFinished), and the spans whose commands changed files. */
      const spanOfTrace = new Map<string, string>();
      const changedSpans = new Set<string>();
      let treeChanged = 0;
      let started = 0;
      for (const id of [smallWatched, bigWatched]) {
        void (async () => {
          try {
            for await (const m of audit.watchEvents({ workspaceId: id }, { signal: abort.signal })) {
              if (m.event.case === "started") started++;
              if (m.event.case === "toolCallFinished" && m.event.value.call) spanOfTrace.set(m.event.value.call.traceId, m.event.value.call.spanId);
              if (m.event.case !== "fileChanged") continue;
              if (m.event.value.treeChanged) treeChanged++;
              changes.set(id, (changes.get(id) ?? 0) + 1);
              changedSpans.add(m.event.value.spanId);
            }
          } catch {
            // Aborted at the end.
          }
        })();
      }
      while (started < 2) await new Promise((r) => setTimeout(r, 10));
      const noop = (workspaceId: string) => timed(() => tools.bash({ workspaceId, command: "true" }), (r) => {
        if (r.exitCode !== 0) throw new Error(`no-op Bash exited ${r.exitCode}`);
      });
      /** The second of two no-ops sent back to back: it waits for the first one's scan. */
      const backToBack = async (workspaceId: string) => {
        await noop(workspaceId)();
        return noop(workspaceId)();
      };
      let marks = 0;
      /**
       * A `touch` under a trace of its own, then (watched) the wait for its FileChanged, known by
       * its span: an event of an earlier command's scan may still be on its way (on gVisor every
       * command of the large tree ends in a tree_changed, the scan running past its bound). The
       * touch waits for any scan still going in that workspace, and its event comes once its own
       * scan is done, so the workspace is then idle. Returns the ms from its answer to its event.
       * `name` is a new file by default; a settling touch names a file the tree already holds (it
       * is then modified, to the nanosecond), so the trees keep their sizes.
       */
      const touched = async (workspaceId: string, watched: boolean, name = `mark${marks++}`): Promise<number> => {
        const traceId = randomBytes(16).toString("hex");
        await tools.bash({ workspaceId, command: `touch ${name}` }, { headers: { traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` } });
        const answered = performance.now();
        if (!watched) return 0;
        const done = () => {
          const span = spanOfTrace.get(traceId);
          return span !== undefined && changedSpans.has(span);
        };
        while (!done()) await new Promise((r) => setImmediate(r));
        return performance.now() - answered;
      };
      /** A `touch` whose scan is awaited (watched) before the no-op is timed; returns [no-op ms, scan ms]. */
      const spaced = async (workspaceId: string, watched: boolean): Promise<[number, number]> => {
        const scanMs = await touched(workspaceId, watched);
        return [await noop(workspaceId)(), scanMs];
      };
      const series: Record<string, number[]> = { smallWatched: [], smallPlain: [], bigWatched: [], bigPlain: [], spacedWatched: [], spacedPlain: [], scan: [] };
      for (let i = 0; i < options.warmup + options.iterations; i++) {
        const keep = i >= options.warmup;
        const round: Array<[string, () => Promise<void>]> = [
          ["smallWatched", async () => {
            const ms = await backToBack(smallWatched);
            if (keep) series.smallWatched.push(ms);
            await touched(smallWatched, true, "f1.txt");
          }],
          ["smallPlain", async () => {
            const ms = await backToBack(smallPlain);
            if (keep) series.smallPlain.push(ms);
          }],
          ["bigWatched", async () => {
            const ms = await backToBack(bigWatched);
            if (keep) series.bigWatched.push(ms);
            await touched(bigWatched, true, "t/1/d1/f0");
          }],
          ["bigPlain", async () => {
            const ms = await backToBack(bigPlain);
            if (keep) series.bigPlain.push(ms);
          }],
          ["spacedWatched", async () => {
            const [ms, scan] = await spaced(bigWatched, true);
            if (keep) series.spacedWatched.push(ms), series.scan.push(scan);
            await touched(bigWatched, true, "t/1/d1/f0");
          }],
          ["spacedPlain", async () => {
            const [ms] = await spaced(bigPlain, false);
            if (keep) series.spacedPlain.push(ms);
          }],
        ];
        // Rotated each round, so the host's load falls on every series alike. A watched series ends
        // by waiting for its workspace's last scan (unmeasured): the scan runs after a command's
        // answer, in the server (on local in its very thread), and would otherwise fall on the
        // series after it, another workspace's calls (it did: the small tree's back to back
        // watched calls came after a scan of the large tree, 3.0x unwatched in the full run of
        // 2026-12-01, 1.18x alone; and the large tree's unwatched calls after one, which flattered
        // the watched ones).
        for (let j = 0; j < round.length; j++) await round[(i + j) % round.length][1]();
      }
      const s = Object.fromEntries(Object.entries(series).map(([k, v]) => [k, summarize(v)]));
      data[provider] = { ...s, treeChanged };
      const row = (metric: string, server: number, baseline: number, goal: number | undefined): Row => ({
        section: "t changes",
        metric: `${provider}: ${metric}`,
        server: round(server, 2),
        baseline: round(baseline, 2),
        unit: "ms",
        ratio: round(server / baseline, 3),
        goal: goal === undefined ? "information" : `≤ ${goal}×`,
        pass: goal === undefined ? undefined : server / baseline <= goal,
      });
      rows.push(row("no-op Bash p50 back to back, 10 files, watched (a scan after each) vs unwatched", s.smallWatched.p50, s.smallPlain.p50, SMALL_GOAL));
      rows.push(row(`no-op Bash p50 back to back, ${BIG_FILES.toLocaleString("en")} files, watched vs unwatched (each call waits for the previous scan)`, s.bigWatched.p50, s.bigPlain.p50, undefined));
      rows.push(row(`no-op Bash p50, ${BIG_FILES.toLocaleString("en")} files, watched vs unwatched, called once the previous scan is done`, s.spacedWatched.p50, s.spacedPlain.p50, SPACED_GOAL));
      rows.push({ section: "t changes", metric: `${provider}: the scan of ${BIG_FILES.toLocaleString("en")} files, p50 from a command's response to its FileChanged (vs the no-op Bash)`, server: round(s.scan.p50, 2), baseline: round(s.bigPlain.p50, 2), unit: "ms", ratio: round(s.scan.p50 / s.bigPlain.p50, 2), goal: "information", pass: undefined });
      if (treeChanged > 0) skipped.push(`t changes on ${provider}: ${treeChanged} scans hit their bound (tree_changed)`);
    } catch (err) {
      skipped.push(`t changes on ${provider}: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      abort.abort();
      for (const w of made) await w.delete();
    }
  }
  sessions.abort();
  return { rows, data, skipped };
}
