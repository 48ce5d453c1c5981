/**
 * Section (o): the structured git tools (local provider) against the git commands an agent would
 * otherwise run through Bash, spawned straight in the same work tree.
 *
 * One workspace holds a repository of 2,000 text files in 20 directories, one commit, then 20
 * files changed in the work tree and 5 staged. Interleaved round-robin, each with its baseline:
 * - GitStatus against `git status --porcelain=v2 --branch -z --untracked-files=all` (the tool runs
 *   exactly that one process, then parses it). Goal ≤ 1.3×, the no-op Bash goal. Also against the
 *   same git status run through the Bash tool: what the structured answer costs over Bash's text.
 * - GitDiff (staged and unstaged) against `git diff` and `git diff --cached`. The tool runs four
 *   git processes (per side the counts, then the patch); goal ≤ 2.2× the two raw ones.
 * - GitCommit of one named file against `git add` and `git commit` of it. The tool runs about
 *   eight (it commits only the named files, leaves the rest of the index alone, signs as the bot
 *   and reports what changed); reported, with the number, for information.
 */
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { type BenchContext, type Measure, type SectionResult, createWorkspace, interleave, localWorkspaceDir, run, timed } from "./context.ts";
import type { Row } from "./report.ts";
import { round, roundSummary, summarize } from "./stats.ts";

/** Options of section (o). */
export interface GitOptions {
  iterations: number;
  warmup: number;
  /** Commits per series (each one adds to the history). */
  commits: number;
}

const STATUS_GOAL = 1.3;
const DIFF_GOAL = 2.2;
const FILES = 2000;
const DIRS = 20;
const CHANGED = 20;
const STAGED = 5;

/** Runs git in `dir` as the baseline does: its own process, the output read to the end. */
async function git(dir: string, ...args: string[]): Promise<string> {
  const { code, stdout } = await run("git", ["-C", dir, ...args]);
  if (code !== 0) throw new Error(`git ${args.join(" ")} exited ${code}`);
  return stdout;
}

/** Runs section (o). */
export async function benchGit(ctx: BenchContext, options: GitOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(o) ${created.reason}`] };
  const ws = created.workspace;
  try {
    const tools = ctx.clients.grpc.tools;
    const dir = localWorkspaceDir(ctx, ws.id);
    const perDir = FILES / DIRS;
    const setup = [
      "set -e",
      "git init -q -b main .",
      `for d in $(seq -w 1 ${DIRS}); do mkdir -p src/d$d; for i in $(seq -f %03g 1 ${perDir}); do seq 1 40 | sed "s/^/line $d $i /" > src/d$d/f$i.txt; done; done`,
      "git add -A",
      "git -c user.name=bench -c user.email=bench@example.org commit -q -m init",
      `for i in $(seq -f %03g 1 ${CHANGED}); do echo changed >> src/d01/f$i.txt; done`,
      `for i in $(seq -f %03g 1 ${STAGED}); do echo staged >> src/d02/f$i.txt; git add src/d02/f$i.txt; done`,
      // Every change is to a tracked file: nothing untracked.
      `test -z "$(git ls-files --others)"`,
    ].join("\n");
    const made = await tools.bash({ workspaceId: ws.id, command: setup });
    if (made.exitCode !== 0) throw new Error(`(o) setting up the repository failed (exit ${made.exitCode}): ${made.stderr}`);

    ctx.log(`(o) GitStatus and GitDiff: ${options.warmup} warmup + ${options.iterations} calls each, against raw git`);
    const reads = await interleave(
      {
        status: timed(
          () => tools.gitStatus({ workspaceId: ws.id }),
          (r) => {
            if (r.files.length !== CHANGED + STAGED) throw new Error(`GitStatus: ${r.files.length} files, expected ${CHANGED + STAGED}`);
          },
        ),
        rawStatus: timed(() => git(dir, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all")),
        bashStatus: timed(
          () => tools.bash({ workspaceId: ws.id, command: "git status --porcelain=v2 --branch -z --untracked-files=all" }),
          (r) => {
            if (r.exitCode !== 0) throw new Error(`git status through Bash exited ${r.exitCode}`);
          },
        ),
        diff: timed(
          () => tools.gitDiff({ workspaceId: ws.id }),
          (r) => {
            if (r.unstaged?.files.length !== CHANGED || r.staged?.files.length !== STAGED) throw new Error(`GitDiff: ${r.unstaged?.files.length} unstaged and ${r.staged?.files.length} staged files, expected ${CHANGED} and ${STAGED}`);
          },
        ),
        rawDiff: timed(async () => [await git(dir, "diff"), await git(dir, "diff", "--cached")]),
      },
      options.warmup,
      options.iterations,
    );

    // Commits: each call writes one new file first (not timed), then commits just that file.
    let n = 0;
    const commitOne = (commit: (name: string) => Promise<unknown>): Measure => async () => {
      const name = `new/c${n++}.txt`;
      await writeFile(path.join(dir, name), `commit ${n}\n`);
      const t0 = performance.now();
      await commit(name);
      return performance.now() - t0;
    };
    await git(dir, "reset", "-q");
    await tools.bash({ workspaceId: ws.id, command: "mkdir -p new" });
    ctx.log(`(o) GitCommit: ${options.commits} commits each, against git add + git commit`);
    const commits = await interleave(
      {
        commit: commitOne((name) => tools.gitCommit({ workspaceId: ws.id, message: `add ${name}`, files: [name] })),
        rawCommit: commitOne(async (name) => {
          await git(dir, "add", "--", name);
          await git(dir, "-c", "user.name=bench", "-c", "user.email=bench@example.org", "commit", "-q", "-m", `add ${name}`, "--", name);
        }),
      },
      2,
      options.commits,
    );

    const s = Object.fromEntries(Object.entries({ ...reads, ...commits }).map(([k, v]) => [k, summarize(v)]));
    const row = (metric: string, server: number, baseline: number, goal: string, limit?: number): Row => ({
      section: "o git",
      metric,
      server: round(server, 2),
      baseline: round(baseline, 2),
      unit: "ms",
      ratio: round(server / baseline, 2),
      goal,
      ...(limit === undefined ? {} : { pass: server / baseline <= limit }),
    });
    const rows: Row[] = [
      row(`GitStatus p50, ${FILES.toLocaleString("en")} files, ${CHANGED + STAGED} changed (local)`, s.status.p50, s.rawStatus.p50, `≤ ${STATUS_GOAL}× git status`, STATUS_GOAL),
      row("GitStatus p50 against the same git status through Bash (local)", s.status.p50, s.bashStatus.p50, "information: the structured answer against Bash's text"),
      row("GitDiff p50, staged and unstaged (local)", s.diff.p50, s.rawDiff.p50, `≤ ${DIFF_GOAL}× git diff + git diff --cached`, DIFF_GOAL),
      row("GitCommit p50 of one named file (local)", s.commit.p50, s.rawCommit.p50, "information: git add + git commit"),
    ];
    return {
      rows,
      data: { files: FILES, changed: CHANGED, staged: STAGED, iterations: options.iterations, commits: options.commits, stats: Object.fromEntries(Object.entries(s).map(([k, v]) => [k, roundSummary(v)])) },
      skipped: [],
    };
  } finally {
    await ws.delete();
  }
}
