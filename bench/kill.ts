/**
 * Section (i): how fast a timed-out command tree dies. A `Bash` call with `timeout_ms` 1000 whose
 * command starts `setsid sleep 1000 &` (leaves the process group and session), `nohup sleep 1001 &`
 * and a child that ignores SIGTERM (`bash -c 'trap "" TERM; while :; do sleep 0.1; done' &`),
 * records their pids and the time it started in a file, then ignores SIGTERM itself and `wait`s.
 * (Were the waiting shell to die of the SIGTERM, the server would SIGKILL everything it left at
 * once, and the grace would never be tested.) At the deadline the server sends SIGTERM to the
 * tree, SIGKILL after the 5 s grace.
 *
 * A second Bash call in the same workspace watches the pids (`/proc/<pid>/stat`, a zombie counts
 * as gone) every ~5 ms in a loop and reports when each group was gone, in the sandbox's own clock,
 * like the start time, so no clocks are compared. The deadline is taken as the command's first
 * statement + timeout_ms; the executor starts its timer at the spawn, a little earlier, so the
 * times below are understated by bash's start-up (a few ms).
 *
 * Measured per provider over 10 runs (3 with --quick), with no raw baseline (the goals are
 * absolute): (1) deadline → both sleeps gone; (2) deadline + grace → the TERM-ignoring child and
 * the shell gone; goal for both ≤ 50 ms local, ≤ 200 ms in containers, at p50 (max in the note);
 * (3) processes still alive 3 s after deadline + grace, goal 0.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { DEFAULT_TOOL_LIMITS } from "../server/tools/tool-limits.ts";
import { type BenchContext, type BenchWorkspace, type SectionResult, createWorkspace } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

/** Options of section (i). */
export interface KillOptions {
  /** Providers to measure, in order. */
  providers: string[];
  /** Timed-out commands per provider. */
  runs: number;
}

const TIMEOUT_MS = 1000;
const GRACE_MS = DEFAULT_TOOL_LIMITS.killGraceMs;
/** How long after deadline + grace the watcher waits before it calls a process a survivor. */
const WATCH_AFTER_MS = 3000;
const goalMs = (provider: string) => (provider === "local" ? 50 : 200);

/** The timed-out command: writes "start-µs shell-pid setsid-pid nohup-pid term-ignoring-pid" to `file`. */
const target = (file: string) => `t0=\${EPOCHREALTIME/[.,]/}
setsid sleep 1000 & p1=$!
nohup sleep 1001 >/dev/null 2>&1 & p2=$!
bash -c 'trap "" TERM; while :; do sleep 0.1; done' & p3=$!
trap "" TERM
echo "$t0 $$ $p1 $p2 $p3" > ${file}.tmp && mv ${file}.tmp ${file}
wait`;

/**
 * The watcher: prints "start-µs sleeps-gone-µs rest-gone-µs [survivor pids…]" ("-" for never). A
 * process is the one it watches only while its start time (field 22 of /proc/<pid>/stat) is the one
 * read first: the watcher's own `sleep`s come and go by the thousand, and a freed pid can be handed
 * out again, so a pid alone could make a later process count as a survivor. A process whose start
 * time could not be read is watched by its pid alone, so a failed first read never hides a survivor.
 */
const watcher = (file: string) => `started() { local f; { read -r -a f < /proc/$1/stat; } 2>/dev/null && echo "\${f[21]}"; }
alive() { local f; { read -r -a f < /proc/$1/stat; } 2>/dev/null || return 1; [ "\${f[2]}" != Z ] && { [ -z "$2" ] || [ "\${f[21]}" = "$2" ]; }; }
until [ -s ${file} ]; do sleep 0.005; done
read -r t0 main p1 p2 p3 < ${file}
s0=$(started $main) s1=$(started $p1) s2=$(started $p2) s3=$(started $p3)
limit=$(( t0 + ${(TIMEOUT_MS + GRACE_MS + WATCH_AFTER_MS) * 1000} ))
term= kill=
while :; do
  t=\${EPOCHREALTIME/[.,]/}
  [ -z "$term" ] && ! alive $p1 "$s1" && ! alive $p2 "$s2" && term=$t
  [ -z "$kill" ] && ! alive $p3 "$s3" && ! alive $main "$s0" && kill=$t
  { [ -n "$term" ] && [ -n "$kill" ]; } || [ "$t" -gt "$limit" ] && break
  sleep 0.005
done
left=; alive $main "$s0" && left="$left $main"; alive $p1 "$s1" && left="$left $p1"; alive $p2 "$s2" && left="$left $p2"; alive $p3 "$s3" && left="$left $p3"
echo "$t0 \${term:--} \${kill:--}$left"`;

interface KillRun {
  /** Deadline → both sleeps gone, ms (NaN: not seen gone). */
  termMs: number;
  /** Deadline + grace → TERM-ignoring child and shell gone, ms (NaN: not seen gone). */
  killMs: number;
  survivors: number[];
  /** How the timed-out call ended, when not as COMMAND_TIMEOUT (DEADLINE_EXCEEDED). */
  callError?: string;
}

/** One timed-out command and its watcher; survivors are SIGKILLed afterwards. */
async function killRun(ctx: BenchContext, ws: BenchWorkspace, run: number): Promise<KillRun> {
  const tools = ctx.clients.grpc.tools;
  const file = `kill-${run}.pids`;
  const timedOut = tools.bash({ workspaceId: ws.id, command: target(file), timeoutMs: BigInt(TIMEOUT_MS) }).then(
    (r) => `the call returned exit ${r.exitCode} instead of timing out`,
    (err: unknown) => {
      const ce = ConnectError.from(err);
      return ce.code === Code.DeadlineExceeded ? undefined : `the call failed with ${Code[ce.code]}: ${ce.rawMessage}`;
    },
  );
  const watched = await tools.bash({ workspaceId: ws.id, command: watcher(file), timeoutMs: BigInt(TIMEOUT_MS + GRACE_MS + WATCH_AFTER_MS + 10_000) });
  const callError = await timedOut;
  const [t0, term, kill, ...left] = watched.stdout.trim().split(/\s+/);
  if (watched.exitCode !== 0 || t0 === undefined || kill === undefined) throw new Error(`(i) the watcher failed (exit ${watched.exitCode}): ${watched.stdout} ${watched.stderr}`);
  const survivors = left.map(Number);
  if (survivors.length > 0) await tools.bash({ workspaceId: ws.id, command: `kill -9 ${survivors.join(" ")}` });
  const deadline = Number(t0) + TIMEOUT_MS * 1000;
  const after = (t: string, from: number) => (t === "-" ? Number.NaN : (Number(t) - from) / 1000);
  return { termMs: after(term, deadline), killMs: after(kill, deadline + GRACE_MS * 1000), survivors, callError };
}

/** The p50 row of one kill phase (max and misses in the note). */
function phaseRow(provider: string, metric: string, samples: number[]): Row {
  const seen = samples.filter((x) => Number.isFinite(x));
  const s = summarize(seen);
  const goal = goalMs(provider);
  const missing = samples.length - seen.length;
  return {
    section: "i kill",
    metric: `${metric} p50 (${provider})`,
    server: seen.length === samples.length ? s.p50 : Number.NaN,
    baseline: Number.NaN,
    unit: "ms",
    ratio: Number.NaN,
    goal: `≤ ${goal} ms`,
    pass: missing === 0 && s.p50 <= goal,
    note: `max ${s.max.toFixed(1)} ms over ${samples.length} runs${missing > 0 ? `; ${missing} runs never saw them gone` : ""}`,
  };
}

/** Runs section (i): one workspace per provider, `runs` timed-out commands each. */
export async function benchKill(ctx: BenchContext, options: KillOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = { timeoutMs: TIMEOUT_MS, graceMs: GRACE_MS, runs: options.runs };
  for (const provider of options.providers) {
    const created = await createWorkspace(ctx, provider);
    if (!created.ok) {
      skipped.push(`(i) ${provider}: ${created.reason}`);
      ctx.log(`(i) skipping ${provider}: ${created.reason}`);
      continue;
    }
    try {
      ctx.log(`(i) ${provider}: ${options.runs} commands timing out after ${TIMEOUT_MS} ms (+${GRACE_MS} ms grace)`);
      const runs: KillRun[] = [];
      for (let i = 0; i < options.runs; i++) runs.push(await killRun(ctx, created.workspace, i));
      const survivors = runs.reduce((n, r) => n + r.survivors.length, 0);
      const callErrors = runs.flatMap((r) => (r.callError ? [r.callError] : []));
      rows.push(
        phaseRow(provider, "timeout: deadline → setsid/nohup sleeps gone", runs.map((r) => r.termMs)),
        phaseRow(provider, `timeout: deadline + ${GRACE_MS / 1000} s → TERM-ignoring gone`, runs.map((r) => r.killMs)),
        {
          section: "i kill",
          metric: `timeout: survivors after ${options.runs} runs (${provider})`,
          server: survivors,
          baseline: Number.NaN,
          unit: "processes",
          ratio: Number.NaN,
          goal: "0",
          pass: survivors === 0 && callErrors.length === 0,
          note: callErrors.length > 0 ? `${callErrors.length} calls did not end as COMMAND_TIMEOUT: ${callErrors.slice(0, 2).join(" | ")}` : undefined,
        },
      );
      data[provider] = runs.map((r) => ({ ...r, termMs: round(r.termMs, 1), killMs: round(r.killMs, 1) }));
    } finally {
      await created.workspace.delete();
    }
  }
  return { rows, data, skipped };
}
