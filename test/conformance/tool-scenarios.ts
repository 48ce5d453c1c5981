/**
 * The provider conformance suite: every scenario of the tool contract (seed specs 000 and 004,
 * issue #2), written once against the public API and registered per provider and protocol with
 * `registerToolScenarios`. A scenario touches a workspace only through ToolService calls (files
 * are made with WriteFile or Bash), never through host paths, so the same scenarios hold for the
 * local, Docker and gVisor providers. Each test creates its own workspace, because ava runs the
 * tests of a file concurrently.
 */
import { existsSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { ExecutionContext, TestFn } from "ava";
import { ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";
import {
  type BashResponse,
  FileKind,
  FileType,
  type GrepMatch,
  type StreamBashResponse,
  ToolService,
} from "../../gen/agentworkspace/v1/tool_pb.js";
import type { WorkspaceService } from "../../gen/agentworkspace/v1/workspace_pb.js";
import { type ClientSet, expectError, newWorkspace } from "../helpers/server.ts";

/** What a registration gives the scenarios: clients of one server and a way to make workspaces. */
export interface ScenarioEnv {
  tools: Client<typeof ToolService>;
  workspaces: Client<typeof WorkspaceService>;
  /** Creates a fresh, empty, ready workspace and returns its id. */
  createWorkspace(): Promise<string>;
  /**
   * Reads a file's raw content around the tools, for a provider where no command can (memory:
   * straight from the provider's tree). Absent: `cat` in the workspace.
   */
  rawRead?(workspaceId: string, path: string): Promise<string>;
}

/** Scenario clients over one protocol's client set, creating workspaces of `provider`. */
export function providerEnv(clients: ClientSet, provider: string): ScenarioEnv {
  return {
    tools: clients.tools,
    workspaces: clients.workspaces,
    createWorkspace: () => newWorkspace(clients, { provider, labels: { suite: "conformance" } }),
  };
}

/** A value the server process holds in its environment and must never hand to a command. */
export const SERVER_SECRET_NAME = "AW_TEST_SECRET";
const SERVER_SECRET_VALUE = "do-not-leak-4c1d";

const OUTPUT_LIMIT = 50 * 1024;
const MAX_CHUNK = 64 * 1024;
const decoder = new TextDecoder();
const text = (b: Uint8Array) => decoder.decode(b);
const utf8Length = (s: string) => new TextEncoder().encode(s).length;
const unique = () => `${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

/** Optional BashRequest fields. */
type BashInit = { workdir?: string; timeoutMs?: bigint; env?: Record<string, string> };

/** One test's workspace with shorthands over the ToolService client. */
interface Ws {
  id: string;
  tools: Client<typeof ToolService>;
  bash(command: string, init?: BashInit): Promise<BashResponse>;
  /** Runs a setup command that must succeed; returns its stdout. */
  sh(command: string): Promise<string>;
  write(path: string, content: string): Promise<void>;
  /** The raw file content, read by a command (not by the tool under test). */
  cat(path: string): Promise<string>;
}

function workspace(env: ScenarioEnv, id: string): Ws {
  const { tools } = env;
  const ws: Ws = {
    id,
    tools,
    bash: (command, init = {}) => tools.bash({ workspaceId: id, command, ...init }),
    async sh(command) {
      const r = await tools.bash({ workspaceId: id, command, timeoutMs: 30_000n });
      if (r.exitCode !== 0) throw new Error(`setup command failed (${r.exitCode}): ${command}\n${r.stderr}`);
      return r.stdout;
    },
    async write(path, content) {
      await tools.writeFile({ workspaceId: id, path, content });
    },
    cat: (path) => (env.rawRead ? env.rawRead(id, path) : ws.sh(`cat -- '${path}'`)),
  };
  return ws;
}

/**
 * A Bash snippet printing "alive" while the process whose pid is in `pidFile` runs, else "gone".
 * Zombies count as gone, and so does a pid the kernel has since given to an unrelated process
 * (pids wrap quickly on a busy host): a workspace process carries the execution marker variable.
 */
function probe(pidFile: string): string {
  return `pid=$(cat ${pidFile}); [ -n "$pid" ] || { echo nopid; exit 0; }; if kill -0 "$pid" 2>/dev/null && ! grep -qs '^State:[[:space:]]*Z' "/proc/$pid/status" && tr '\\0' '\\n' < "/proc/$pid/environ" 2>/dev/null | grep -q '^AGENT_WORKSPACE_EXEC_ID='; then echo alive; else echo gone; fi`;
}

/**
 * Polls until every process named by the pid files is gone; returns the last observation. Only an
 * observation begun after the deadline ends the wait with a process alive: on a loaded host one
 * begun earlier may have looked just before the kill landed (a cancel reaches the sandbox after
 * the client has moved on) and come back past the deadline (seen under load here: a probe begun
 * 0.5 s before the kill answered 12.6 s later, and the test failed with the command long gone).
 */
async function waitGone(ws: Ws, pidFiles: string[], timeoutMs = 10_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let seen = "";
  for (;;) {
    const last = Date.now() > deadline;
    seen = (await Promise.all(pidFiles.map(async (f) => `${f}=${(await ws.sh(probe(f))).trim()}`))).join(" ");
    if (pidFiles.every((f) => seen.includes(`${f}=gone`)) || last) return seen;
    await sleep(100);
  }
}

async function collect<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of stream) out.push(item);
  return out;
}

const byPathAndLine = (a: GrepMatch, b: GrepMatch) => (a.path < b.path ? -1 : a.path > b.path ? 1 : a.line - b.line);
const located = (ms: GrepMatch[]) => [...ms].sort(byPathAndLine).map((m) => `${m.path}:${m.line}`);

/** At most `n` holders at once: `acquire()` resolves with the release. */
function semaphore(n: number): () => Promise<() => void> {
  let free = n;
  const waiting: Array<() => void> = [];
  return async () => {
    if (free > 0) free--;
    else await new Promise<void>((r) => waiting.push(r));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = waiting.shift();
      if (next) next();
      else free++;
    };
  };
}

/**
 * How many scenarios of one registration run at once unless `slots` says otherwise. Not all of
 * them: each scenario bounds its waits (a 3 s command timeout, a 10 s wait for a process to go),
 * and with all 80 at once on a loaded two-core host each call waited behind the others' until
 * those bounds broke (seen in CI, forks at 5 ms: 22 local scenarios failed; here under 8 CPU hogs
 * a probe came back after its 60 s command had timed out). Six keep both cores busy.
 */
const DEFAULT_SLOTS = 6;

/** Marks a scenario that runs commands (to make or check its files, or as its subject). */
const PROCESSES = Symbol("needs processes");

/**
 * Registers every tool scenario as one ava test named `${name}: <Tool> › <scenario>`. `setup`
 * is called in each test (after the caller's `before` hooks) and returns the clients to use. With
 * `processes: false` only the scenarios that run no command are registered. At most `slots`
 * scenarios run at once (DEFAULT_SLOTS; each has a workspace of its own: a VM's costs memory and CPU).
 */
export function registerToolScenarios<C>(
  test: TestFn<C>,
  name: string,
  setup: (t: ExecutionContext<C>) => ScenarioEnv | Promise<ScenarioEnv>,
  options: { processes?: boolean; slots?: number } = {},
): void {
  const slots = semaphore(options.slots ?? DEFAULT_SLOTS);
  // The server runs in this process; a command must not see this.
  process.env[SERVER_SECRET_NAME] = SERVER_SECRET_VALUE;

  const scenario = (title: string, body: (t: ExecutionContext<C>, ws: Ws) => Promise<void>, needs?: typeof PROCESSES) => {
    // A provider without processes (memory) runs the scenarios that need none.
    if (needs === PROCESSES && options.processes === false) return;
    test(`${name}: ${title}`, async (t) => {
      const release = await slots();
      try {
        const env = await setup(t);
        const id = await env.createWorkspace();
        try {
          await body(t, workspace(env, id));
        } finally {
          await env.workspaces.deleteWorkspace({ id }).catch(() => undefined);
        }
      } finally {
        release();
      }
    });
  };

  // ───────────────────────────── Bash ─────────────────────────────

  scenario("Bash › Successful command execution", async (t, ws) => {
    await ws.write("hello.txt", "hi\n");
    const r = await ws.bash("ls -la .", { workdir: "/workspace" });
    t.is(r.exitCode, 0);
    t.is(r.stderr, "");
    t.regex(r.stdout, /^total /);
    t.regex(r.stdout, / hello\.txt$/m);
    t.true(r.durationMs >= 0n);
    t.false(r.stdoutTruncated);
    t.is(r.stdoutTotalBytes, BigInt(utf8Length(r.stdout)));
    t.is(r.signal, "");
  }, PROCESSES);

  scenario("Bash › Command with non-zero exit code", async (t, ws) => {
    const r = await ws.bash("echo out; echo err >&2; exit 3");
    t.is(r.exitCode, 3);
    t.is(r.stdout, "out\n");
    t.is(r.stderr, "err\n");
    t.is(r.signal, "");
    const missing = await ws.bash("no-such-command-aw");
    t.is(missing.exitCode, 127);
    t.regex(missing.stderr, /not found/);
  }, PROCESSES);

  scenario("Bash › Command timeout", async (t, ws) => {
    const { error, detail } = await expectError(
      t,
      // Both streams are written first, with room to spare: on a loaded CI host the SIGTERM once
      // landed between the two echoes, after the background fork and the pid file had taken ~2 s.
      ws.bash("echo partial; echo warn >&2; sleep 30 & echo $! > child.pid; sleep 30", { timeoutMs: 3000n }),
      Code.DeadlineExceeded,
      ErrorReason.COMMAND_TIMEOUT,
    );
    // SIGTERM ended it (a command that does not trap TERM needs no SIGKILL after the grace).
    t.regex(error.rawMessage, /timed out/);
    t.is(detail.metadata.timeout_ms, "3000");
    t.is(detail.metadata.signal, "SIGTERM");
    t.is(detail.partialOutput?.stdout, "partial\n");
    t.is(detail.partialOutput?.stderr, "warn\n");
    t.is(detail.partialOutput?.stdoutTotalBytes, 8n);
    t.false(detail.partialOutput?.stdoutTruncated);
    t.true((detail.partialOutput?.durationMs ?? 0n) >= 3000n);
    // The whole process group got the signal, the background sleep included.
    t.regex(await waitGone(ws, ["child.pid"]), /child\.pid=gone/);
  }, PROCESSES);

  scenario("Bash › Command timeout › a command ignoring SIGTERM is killed after the 5 s grace", async (t, ws) => {
    const started = Date.now();
    const { detail } = await expectError(
      t,
      ws.bash(`trap "" TERM; echo $$ > shell.pid; echo still-here; sleep 30`, { timeoutMs: 3000n }),
      Code.DeadlineExceeded,
      ErrorReason.COMMAND_TIMEOUT,
    );
    // The grace period was honoured before SIGKILL. (The timeout leaves a slow sandbox time to
    // install the trap first; otherwise SIGTERM would rightly end the shell at once.)
    t.true(Date.now() - started >= 8000);
    t.is(detail.metadata.signal, "SIGKILL");
    t.is(detail.partialOutput?.stdout, "still-here\n");
    t.true((detail.partialOutput?.durationMs ?? 0n) >= 8000n);
    t.regex(await waitGone(ws, ["shell.pid"]), /shell\.pid=gone/);
  }, PROCESSES);

  // The group signal and the sweep of the command's marked processes must not both deliver
  // SIGTERM to the same process: a shell's TERM trap would run twice.
  scenario("Bash › Command timeout › a command's TERM trap runs once", async (t, ws) => {
    await expectError(
      t,
      // 3 s: a loaded host can hold a starting bash for a good part of a short timeout, and a
      // SIGTERM before the trap is set would end it without running the trap at all.
      ws.bash("trap 'echo term >> terms.log' TERM; echo $$ > victim.pid; echo started; while :; do sleep 0.1; done", { timeoutMs: 3000n }),
      Code.DeadlineExceeded,
      ErrorReason.COMMAND_TIMEOUT,
    );
    t.regex(await waitGone(ws, ["victim.pid"], 15_000), /victim\.pid=gone/);
    t.is(await ws.cat("terms.log"), "term\n");
  }, PROCESSES);

  scenario("Bash › Command timeout › StreamBash ends with one exited event marked timed_out", async (t, ws) => {
    const events = await collect(ws.tools.streamBash({ workspaceId: ws.id, command: "echo partial; sleep 30", timeoutMs: 3000n }));
    t.is(events[0]?.event.case, "started");
    const exits = events.filter((e) => e.event.case === "exited");
    t.is(exits.length, 1);
    t.is(events.at(-1)?.event.case, "exited");
    const exited = exits[0].event.case === "exited" ? exits[0].event.value : undefined;
    t.true(exited?.timedOut);
    t.is(exited?.signal, "SIGTERM");
    t.is(exited?.exitCode, 128 + 15);
    const stdout = events.flatMap((e) => (e.event.case === "stdout" ? [text(e.event.value)] : [])).join("");
    t.is(stdout, "partial\n");
  }, PROCESSES);

  scenario("Bash › Command with custom working directory", async (t, ws) => {
    await ws.write("src/marker.txt", "in src\n");
    const abs = await ws.bash("ls; cat marker.txt", { workdir: "/workspace/src" });
    t.is(abs.exitCode, 0);
    t.is(abs.stdout, "marker.txt\nin src\n");
    const rel = await ws.bash("cat marker.txt", { workdir: "src" });
    t.is(rel.stdout, "in src\n");
    const root = await ws.bash("cat src/marker.txt", { workdir: "" });
    t.is(root.stdout, "in src\n");
  }, PROCESSES);

  scenario("Bash › Command with custom working directory › outside the workspace is refused", async (t, ws) => {
    await ws.sh("ln -s /tmp tmp-link");
    for (const workdir of ["/etc", "..", "src/../..", "/workspace/../etc", "tmp-link"]) {
      await expectError(t, ws.bash("pwd", { workdir }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
    }
  }, PROCESSES);

  scenario("Bash › Command with custom working directory › a file is not a directory", async (t, ws) => {
    await ws.write("file.txt", "x");
    await expectError(t, ws.bash("pwd", { workdir: "file.txt" }), Code.FailedPrecondition, ErrorReason.NOT_A_DIRECTORY);
    await expectError(t, ws.bash("pwd", { workdir: "missing-dir" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  }, PROCESSES);

  scenario("Bash › Long-running command output", async (t, ws) => {
    const out = await ws.bash("head -c 200000 /dev/zero | tr '\\0' a");
    t.is(out.exitCode, 0);
    t.is(out.stdout.length, OUTPUT_LIMIT);
    t.is(out.stdout, "a".repeat(OUTPUT_LIMIT));
    t.true(out.stdoutTruncated);
    t.is(out.stdoutTotalBytes, 200_000n);
    t.false(out.stderrTruncated);

    const err = await ws.bash("head -c 60000 /dev/zero | tr '\\0' e >&2; echo done");
    t.is(err.stdout, "done\n");
    t.is(err.stderr, "e".repeat(OUTPUT_LIMIT));
    t.true(err.stderrTruncated);
    t.is(err.stderrTotalBytes, 60_000n);
    t.false(err.stdoutTruncated);

    const exact = await ws.bash(`head -c ${OUTPUT_LIMIT} /dev/zero | tr '\\0' x`);
    t.false(exact.stdoutTruncated);
    t.is(exact.stdoutTotalBytes, BigInt(OUTPUT_LIMIT));

    // One byte over, on both streams at once: the head is kept whole and every byte counted.
    const over = await ws.bash(`head -c ${OUTPUT_LIMIT + 1} /dev/zero | tr '\\0' y; head -c ${OUTPUT_LIMIT + 1} /dev/zero | tr '\\0' z >&2`);
    t.true(over.stdout === "y".repeat(OUTPUT_LIMIT), "stdout is the head");
    t.true(over.stderr === "z".repeat(OUTPUT_LIMIT), "stderr is the head");
    t.true(over.stdoutTruncated && over.stderrTruncated);
    t.is(over.stdoutTotalBytes, BigInt(OUTPUT_LIMIT + 1));
    t.is(over.stderrTotalBytes, BigInt(OUTPUT_LIMIT + 1));
  }, PROCESSES);

  scenario("Bash › stdin is /dev/null", async (t, ws) => {
    // With any other stdin, cat would block until the timeout and the call would fail.
    const r = await ws.bash("cat; read -r line; echo \"read=$?\"", { timeoutMs: 30_000n });
    t.is(r.exitCode, 0);
    t.is(r.stdout, "read=1\n");
  }, PROCESSES);

  scenario("Bash › the environment is minimal and holds no server secrets", async (t, ws) => {
    t.is(process.env[SERVER_SECRET_NAME], SERVER_SECRET_VALUE);
    const r = await ws.bash("env");
    t.is(r.exitCode, 0);
    t.false(r.stdout.includes(SERVER_SECRET_NAME));
    t.false(r.stdout.includes(SERVER_SECRET_VALUE));
    t.regex(r.stdout, /^PATH=/m);
    t.regex(r.stdout, /^HOME=/m);
  }, PROCESSES);

  scenario("Bash › env request field sets variables", async (t, ws) => {
    const r = await ws.bash(`printf '%s|%s' "$GREETING" "$EMPTY_ONE"`, { env: { GREETING: "hello world", EMPTY_ONE: "" } });
    t.is(r.stdout, "hello world|");
    await expectError(t, ws.bash("true", { env: { "BAD NAME": "x" } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  }, PROCESSES);

  for (const [label, launch] of [
    ["background children", "sleep 100 &"],
    ["setsid children", "setsid sleep 100 &"],
    ["nohup children", "nohup sleep 100 &"],
  ] as const) {
    scenario(`Bash › ${label} neither hold the call open nor outlive it`, async (t, ws) => {
      // A child holding the call open would run into the timeout and fail the call.
      const r = await ws.bash(`${launch} echo $! > bg.pid; echo launched`, { timeoutMs: 60_000n });
      t.is(r.exitCode, 0);
      t.is(r.stdout, "launched\n");
      t.regex((await ws.cat("bg.pid")).trim(), /^\d+$/);
      t.is(await waitGone(ws, ["bg.pid"]), "bg.pid=gone");
    }, PROCESSES);
  }

  // Children that shed every mark a sweep could find by process group or environment. They are
  // found by the marker descriptor they inherit (local) and by the sandbox-wide sweep (containers).
  const escapes: Array<[string, (sleep: string) => string, boolean]> = [
    ["a setsid child that clears its environment (env -i)", (sleep) => `setsid env -i ${sleep} >/dev/null 2>&1 &`, true],
    ["a child that execs with an empty environment (exec -c)", (sleep) => `setsid bash -c 'exec -c ${sleep}' >/dev/null 2>&1 &`, true],
    ["a double-forked child without environment or session", (sleep) => `( setsid env -i ${sleep} >/dev/null 2>&1 & ) &`, true],
    // After a dozen processes that are gone: a window of pids too wide to probe one by one at once.
    ["a double-forked child after a dozen short-lived ones", (sleep) => `for i in 1 2 3 4 5 6 7 8 9 10 11 12; do /bin/true; done; ( setsid env -i ${sleep} >/dev/null 2>&1 & ) &`, true],
    // Closing the inherited marker too escapes the local sweep (documented); sandboxes still end it.
    ["a child that also closes every inherited descriptor", (sleep) => `setsid env -i bash -c 'exec 3<&- 4<&- 5<&-; exec ${sleep}' >/dev/null 2>&1 &`, false],
  ];
  for (const [label, launch, everywhere] of escapes) {
    if (!everywhere && name.startsWith("local")) continue;
    scenario(`Bash › ${label} does not outlive the call`, async (t, ws) => {
      // A duration no other process has, so the probe finds this very process by its command line.
      const duration = `6${Math.floor(Math.random() * 1e6)}.${process.pid}`;
      // Builtins only: a process per /proc entry costs seconds in a VM under emulation, whose /proc
      // lists its kernel's threads as well.
      const probe = `for f in /proc/[0-9]*/cmdline; do a= b=; { IFS= read -r -d '' a; IFS= read -r -d '' b; } < "$f" 2>/dev/null; [ "$a $b" = 'sleep ${duration}' ] && echo alive; done; echo checked`;
      // The command ends once the child runs as that sleep (not before it got there: a probe after
      // the call could then find nothing and pass for a child that did escape).
      const wait = `seen=no; for i in $(seq 1 500); do case "$(${probe})" in *alive*) seen=yes; break;; esac; sleep 0.01; done`;
      const r = await ws.bash(`${launch(`sleep ${duration}`)} ${wait}; echo launched $seen`, { timeoutMs: 60_000n });
      t.is(r.stdout, "launched yes\n");
      let seen = "";
      for (let i = 0; i < 100; i++) {
        seen = await ws.sh(probe);
        if (seen === "checked\n") break;
        await sleep(100);
      }
      t.is(seen, "checked\n", "the child still runs after the call returned");
    }, PROCESSES);
  }

  scenario("Bash › StreamBash › a cancelled call kills the command", async (t, ws) => {
    const abort = new AbortController();
    const stream = ws.tools.streamBash(
      { workspaceId: ws.id, command: "echo $$ > shell.pid; sleep 100 & echo $! > child.pid; echo ready; wait", timeoutMs: 60_000n },
      { signal: abort.signal },
    );
    let caught: unknown;
    let aliveBefore = "";
    // What the stream brought, for the message if "ready" never came (CI saw that once).
    const seen: string[] = [];
    try {
      for await (const ev of stream) {
        seen.push(ev.event.case === "stdout" || ev.event.case === "stderr" ? `${ev.event.case}:${JSON.stringify(text(ev.event.value))}` : String(ev.event.case));
        if (ev.event.case === "stdout" && text(ev.event.value).includes("ready")) {
          // The probe sees the running command, so "gone" later means the cancel killed it.
          aliveBefore = (await Promise.all(["shell.pid", "child.pid"].map((f) => ws.sh(probe(f))))).join("");
          abort.abort();
        }
      }
    } catch (err) {
      caught = err;
    }
    t.is(aliveBefore, "alive\nalive\n", `events: ${seen.join(", ")}; ended by: ${caught === undefined ? "the stream's end" : String(caught)}`);
    t.true(caught instanceof ConnectError);
    t.is(ConnectError.from(caught).code, Code.Canceled);
    t.is(await waitGone(ws, ["shell.pid", "child.pid"]), "shell.pid=gone child.pid=gone");
  }, PROCESSES);

  scenario("Bash › StreamBash › events: started, byte chunks of at most 64 KiB, exactly one exited last", async (t, ws) => {
    const events: StreamBashResponse[] = await collect(
      ws.tools.streamBash({ workspaceId: ws.id, command: "head -c 300000 /dev/zero | tr '\\0' b; echo oops >&2; exit 4" }),
    );
    t.is(events[0].event.case, "started");
    t.true(events[0].event.case === "started" && events[0].event.value.startedAt !== undefined);
    t.is(events.filter((e) => e.event.case === "started").length, 1);
    t.is(events.filter((e) => e.event.case === "exited").length, 1);
    t.is(events.at(-1)?.event.case, "exited");
    let stdoutBytes = 0;
    let stderr = "";
    for (const e of events) {
      if (e.event.case === "stdout" || e.event.case === "stderr") {
        t.true(e.event.value instanceof Uint8Array);
        t.true(e.event.value.length > 0 && e.event.value.length <= MAX_CHUNK, `chunk of ${e.event.value.length}`);
      }
      if (e.event.case === "stdout") stdoutBytes += e.event.value.length;
      if (e.event.case === "stderr") stderr += text(e.event.value);
    }
    t.is(stdoutBytes, 300_000);
    t.is(stderr, "oops\n");
    const last = events.at(-1);
    const exited = last?.event.case === "exited" ? last.event.value : undefined;
    t.is(exited?.exitCode, 4);
    t.false(exited?.timedOut);
    t.is(exited?.signal, "");
    t.is(exited?.stdoutTotalBytes, 300_000n);
    t.is(exited?.stderrTotalBytes, 5n);
    t.false(exited?.stdoutTruncated);
  }, PROCESSES);

  scenario("Bash › StreamBash › output printed the instant a command starts is never lost (40 quick commands)", async (t, ws) => {
    // Locally stdout is handed from the executor to the server right after the spawn: a command
    // that prints and exits at once races that hand-over.
    const outputs = await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const events = await collect(ws.tools.streamBash({ workspaceId: ws.id, command: `printf 'run-${i}'; printf 'err-${i}' >&2` }));
        const textOf = (kind: "stdout" | "stderr") => events.flatMap((e) => (e.event.case === kind ? [text(e.event.value)] : [])).join("");
        return `${textOf("stdout")}|${textOf("stderr")}|${events.at(-1)?.event.case}`;
      }),
    );
    t.deepEqual(outputs, Array.from({ length: 40 }, (_, i) => `run-${i}|err-${i}|exited`));
  }, PROCESSES);

  scenario("Bash › StreamBash › max_output_bytes caps what is forwarded", async (t, ws) => {
    const events = await collect(
      ws.tools.streamBash({ workspaceId: ws.id, command: "head -c 100000 /dev/zero | tr '\\0' c; echo small >&2", maxOutputBytes: 1000n }),
    );
    const stdout = events.flatMap((e) => (e.event.case === "stdout" ? [text(e.event.value)] : [])).join("");
    const stderr = events.flatMap((e) => (e.event.case === "stderr" ? [text(e.event.value)] : [])).join("");
    t.is(stdout, "c".repeat(1000));
    t.is(stderr, "small\n");
    const last = events.at(-1);
    const exited = last?.event.case === "exited" ? last.event.value : undefined;
    t.is(exited?.exitCode, 0);
    t.true(exited?.stdoutTruncated);
    t.false(exited?.stderrTruncated);
    t.is(exited?.stdoutTotalBytes, 100_000n);
    t.is(exited?.stderrTotalBytes, 6n);
  }, PROCESSES);

  // ──────────────────────── Provider-agnostic interface ────────────────────────

  scenario("Provider-agnostic › Same tool behavior across providers", async (t, ws) => {
    const r = await ws.bash('echo "hello"');
    t.is(r.stdout, "hello\n");
    t.is(r.stderr, "");
    t.is(r.exitCode, 0);
    t.false(r.stdoutTruncated);
    t.false(r.stderrTruncated);
    t.is(r.signal, "");
    t.false(r.oomKilled);
  }, PROCESSES);

  scenario("Provider-agnostic › Provider abstraction for file operations", async (t, ws) => {
    // Written by a command inside the sandbox, read by the file tool: same numbered format.
    await ws.sh("printf '# README\\n\\nContent...\\n' > README.md");
    const r = await ws.tools.readFile({ workspaceId: ws.id, path: "/workspace/README.md" });
    t.is(r.content, "1: # README\n2: \n3: Content...");
  }, PROCESSES);

  // ───────────────────────────── ReadFile ─────────────────────────────

  scenario("ReadFile › Read entire small file", async (t, ws) => {
    await ws.write("README.md", "# README\n\nContent...\n");
    const r = await ws.tools.readFile({ workspaceId: ws.id, path: "/workspace/README.md" });
    t.is(r.content, "1: # README\n2: \n3: Content...");
    t.is(r.totalLines, 3);
    t.false(r.truncated);
    t.is(r.kind, FileKind.TEXT);
    t.is(r.size, BigInt(utf8Length("# README\n\nContent...\n")));
    t.is(r.mimeType, "text/markdown");
    t.is(r.path, "README.md");
  });

  scenario("ReadFile › Read file with offset and limit", async (t, ws) => {
    const lines = Array.from({ length: 200 }, (_, i) => `line ${i + 1}`);
    await ws.write("big.txt", `${lines.join("\n")}\n`);
    const r = await ws.tools.readFile({ workspaceId: ws.id, path: "big.txt", offset: 100, limit: 50 });
    const expected = Array.from({ length: 50 }, (_, i) => `${100 + i}: line ${100 + i}`).join("\n");
    t.is(r.content, expected);
    t.is(r.content.split("\n")[0], "100: line 100");
    t.is(r.content.split("\n").at(-1), "149: line 149");
    t.is(r.totalLines, 200);
    t.true(r.truncated);

    const tail = await ws.tools.readFile({ workspaceId: ws.id, path: "big.txt", offset: 190 });
    t.is(tail.content.split("\n").length, 11);
    t.is(tail.content.split("\n").at(-1), "200: line 200");
    t.false(tail.truncated);
  });

  scenario("ReadFile › Read non-existent file", async (t, ws) => {
    const { error, detail } = await expectError(
      t,
      ws.tools.readFile({ workspaceId: ws.id, path: "nope/missing.txt" }),
      Code.NotFound,
      ErrorReason.FILE_NOT_FOUND,
    );
    t.regex(error.rawMessage, /missing\.txt/);
    t.is(detail.metadata.path, "nope/missing.txt");
  });

  scenario("ReadFile › Read directory listing", async (t, ws) => {
    await ws.write("dir/a.txt", "a");
    await ws.write("dir/sub/x.txt", "x");
    await ws.sh("mkdir -p dir/empty");
    const r = await ws.tools.readFile({ workspaceId: ws.id, path: "dir" });
    t.is(r.kind, FileKind.DIRECTORY);
    t.is(r.content, "a.txt\nempty/\nsub/");
    t.is(r.totalLines, 3);
    t.is(r.mimeType, "inode/directory");
  }, PROCESSES);

  scenario("ReadFile › Read binary file", async (t, ws) => {
    await ws.sh("printf '\\x89PNG\\r\\n\\x1a\\n\\x00\\x00' > img.png");
    const r = await ws.tools.readFile({ workspaceId: ws.id, path: "img.png" });
    t.is(r.kind, FileKind.BINARY);
    t.is(r.size, 10n);
    t.is(r.mimeType, "image/png");
    t.is(r.content, "");
    t.is(r.totalLines, 0);
  }, PROCESSES);

  // gVisor keeps FIFOs made inside the sandbox in its own kernel; they never reach the shared
  // storage the file tools read, so there the FIFO simply is not a file.
  scenario("ReadFile › a FIFO is refused without blocking", async (t, ws) => {
    await ws.sh("mkfifo f");
    await expectError(t, ws.tools.readFile({ workspaceId: ws.id, path: "f" }), Code.FailedPrecondition, ErrorReason.UNSUPPORTED_FILE_TYPE);
  }, PROCESSES);

  // ───────────────────────────── WriteFile ─────────────────────────────

  scenario("WriteFile › Write new file", async (t, ws) => {
    const r = await ws.tools.writeFile({ workspaceId: ws.id, path: "/workspace/new-file.ts", content: "export const x = 1;" });
    t.true(r.created);
    t.is(r.bytesWritten, 19n);
    t.is(await ws.cat("new-file.ts"), "export const x = 1;");
    const read = await ws.tools.readFile({ workspaceId: ws.id, path: "new-file.ts" });
    t.is(read.content, "1: export const x = 1;");
  });

  scenario("WriteFile › Overwrite existing file", async (t, ws) => {
    await ws.write("f.txt", "a much longer original content\nwith two lines\n");
    const r = await ws.tools.writeFile({ workspaceId: ws.id, path: "f.txt", content: "short\n" });
    t.false(r.created);
    t.is(r.bytesWritten, 6n);
    t.is(await ws.cat("f.txt"), "short\n");
  });

  scenario("WriteFile › Write with auto-create directories", async (t, ws) => {
    const r = await ws.tools.writeFile({ workspaceId: ws.id, path: "/workspace/src/new/deep/file.ts", content: "export {};\n" });
    t.true(r.created);
    t.is(await ws.cat("src/new/deep/file.ts"), "export {};\n");
    t.is(await ws.sh("test -d src/new/deep && echo dir"), "dir\n");
  }, PROCESSES);

  // The directories a write makes on its way are its own doing, not a path changing under it:
  // however many there are, the write lands (only a real concurrent swap may use up the retries).
  // The memory provider allows 16 segments and answers PATH_TOO_DEEP (test/memory.test.ts).
  scenario("WriteFile › a path 300 new directories deep is made whole, and every tool reaches it", async (t, ws) => {
    const dirs = Array.from({ length: 300 }, (_, i) => `d${i}`).join("/");
    const leaf = `${dirs}/leaf.txt`;
    const r = await ws.tools.writeFile({ workspaceId: ws.id, path: leaf, content: "at the bottom\n" });
    t.true(r.created);
    t.is((await ws.tools.readFile({ workspaceId: ws.id, path: `/workspace/${leaf}` })).content, "1: at the bottom");
    // A second branch from half-way down makes 150 more.
    const half = Array.from({ length: 150 }, (_, i) => `d${i}`).join("/");
    const other = `${half}/${Array.from({ length: 150 }, (_, i) => `e${i}`).join("/")}/other.txt`;
    t.true((await ws.tools.writeFile({ workspaceId: ws.id, path: other, content: "other\n" })).created);
    await ws.tools.editFile({ workspaceId: ws.id, path: leaf, oldString: "bottom", newString: "very bottom" });
    t.is(await ws.cat(leaf), "at the very bottom\n");
    t.deepEqual((await ws.tools.listFiles({ workspaceId: ws.id, path: dirs })).files.map((f) => f.path), [leaf]);
    t.deepEqual((await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.txt" })).paths.sort(), [other, leaf].sort());
    t.is((await ws.sh(`find d0 -type d | wc -l`)).trim(), "450");
    await ws.tools.deleteFile({ workspaceId: ws.id, path: leaf });
    t.is((await ws.sh(`test -e '${leaf}' || echo gone`)).trim(), "gone");
  }, PROCESSES);

  scenario("WriteFile › bytes_written counts UTF-8 bytes", async (t, ws) => {
    const content = "héllo ✓ 🚀 日本\n";
    const r = await ws.tools.writeFile({ workspaceId: ws.id, path: "utf8.txt", content });
    t.is(r.bytesWritten, BigInt(Buffer.byteLength(content)));
    t.not(r.bytesWritten, BigInt(content.length));
    t.is((await ws.sh("wc -c < utf8.txt")).trim(), String(Buffer.byteLength(content)));
    t.is(await ws.cat("utf8.txt"), content);
  }, PROCESSES);

  scenario("WriteFile › a directory path is refused with IS_DIRECTORY", async (t, ws) => {
    await ws.write("d/inner.txt", "x");
    await expectError(t, ws.tools.writeFile({ workspaceId: ws.id, path: "d", content: "y" }), Code.FailedPrecondition, ErrorReason.IS_DIRECTORY);
    await expectError(t, ws.tools.writeFile({ workspaceId: ws.id, path: "/workspace", content: "y" }), Code.FailedPrecondition, ErrorReason.IS_DIRECTORY);
    t.is(await ws.cat("d/inner.txt"), "x");
  });

  // Every provider names the same thing the same way: the file that stands where a directory is
  // needed, with the same code, reason, message and metadata (memory included).
  scenario("WriteFile › below a regular file is NOT_A_DIRECTORY naming that file, the same for every tool", async (t, ws) => {
    await ws.write("src/file.txt", "kept\n");
    const expectNotDir = async (call: Promise<unknown>, metadata: Record<string, string> = {}) => {
      const { error, detail } = await expectError(t, call, Code.FailedPrecondition, ErrorReason.NOT_A_DIRECTORY);
      t.is(error.rawMessage, "'src/file.txt' is not a directory");
      t.is(detail.message, "'src/file.txt' is not a directory");
      t.deepEqual({ ...detail.metadata }, { path: "src/file.txt", ...metadata });
    };
    const id = ws.id;
    await expectNotDir(ws.tools.writeFile({ workspaceId: id, path: "src/file.txt/child.txt", content: "x" }));
    await expectNotDir(ws.tools.writeFile({ workspaceId: id, path: "/workspace/src/file.txt/a/b/c.txt", content: "x" }));
    await expectNotDir(ws.tools.readFile({ workspaceId: id, path: "src/file.txt/child.txt" }));
    await expectNotDir(ws.tools.editFile({ workspaceId: id, path: "src/file.txt/child.txt", oldString: "a", newString: "b" }));
    await expectNotDir(ws.tools.deleteFile({ workspaceId: id, path: "src/file.txt/child.txt" }));
    // ListFiles names the request field too, as for a file given as its directory.
    await expectNotDir(ws.tools.listFiles({ workspaceId: id, path: "src/file.txt/sub" }), { field: "path" });
    t.is(await ws.cat("src/file.txt"), "kept\n");
    t.deepEqual((await ws.tools.listFiles({ workspaceId: id, path: "src" })).files.map((f) => f.path), ["src/file.txt"]);
  });

  scenario("WriteFile › writes are atomic: readers never see partial content, failures keep the old file", async (t, ws) => {
    t.timeout(300_000); // a hang guard above the reader's own (below)
    const size = 4 * 1024 * 1024;
    const a = "A".repeat(size);
    const b = "B".repeat(size);
    await ws.write("a.txt", a);
    await ws.write("b.txt", b);
    const sums = new Set((await ws.sh("cksum < a.txt; cksum < b.txt")).trim().split("\n"));
    await ws.write("big.txt", a);
    // A reader loops over the file while it is replaced again and again. It stops at the `stop`
    // file or after 2,000 reads, whichever comes first, so the test never waits on a loaded
    // machine's speed; the timeout is only a hang guard (gVisor under CI load took over 60 s).
    const reader = ws.bash("n=0; while [ ! -e stop ] && [ $n -lt 2000 ]; do cksum < big.txt; n=$((n+1)); done | sort -u", { timeoutMs: 240_000n });
    await sleep(100);
    for (let i = 0; i < 6; i++) await ws.write("big.txt", i % 2 === 0 ? b : a);
    await ws.write("stop", "");
    const seen = (await reader).stdout.trim().split("\n");
    for (const line of seen) t.true(sums.has(line), `a reader saw '${line}', neither the old nor the new content`);

    // A failed write leaves the old content; no temporary file remains either way.
    await ws.write("keep.txt", "old content\n");
    await expectError(t, ws.tools.writeFile({ workspaceId: ws.id, path: "keep.txt/child", content: "x" }), Code.FailedPrecondition, ErrorReason.NOT_A_DIRECTORY);
    t.is(await ws.cat("keep.txt"), "old content\n");
    t.is(await ws.sh("ls -A"), "a.txt\nb.txt\nbig.txt\nkeep.txt\nstop\n");
  }, PROCESSES);

  scenario("WriteFile › a FIFO is refused without blocking", async (t, ws) => {
    await ws.sh("mkfifo pipe");
    await expectError(t, ws.tools.writeFile({ workspaceId: ws.id, path: "pipe", content: "x" }), Code.FailedPrecondition, ErrorReason.UNSUPPORTED_FILE_TYPE);
    await expectError(t, ws.tools.editFile({ workspaceId: ws.id, path: "pipe", oldString: "a", newString: "b" }), Code.FailedPrecondition, ErrorReason.UNSUPPORTED_FILE_TYPE);
    t.is(await ws.sh("test -p pipe && echo fifo"), "fifo\n");
  }, PROCESSES);

  // ───────────────────────────── EditFile ─────────────────────────────

  const serverTs = 'import http from "node:http";\n\nconst host = "localhost";\nconst port = 3000;\nhttp.createServer().listen(port, host);\n';

  scenario("EditFile › Successful string replacement", async (t, ws) => {
    await ws.write("src/server.ts", serverTs);
    const r = await ws.tools.editFile({ workspaceId: ws.id, path: "src/server.ts", oldString: "const port = 3000", newString: "const port = 8080" });
    t.is(r.replacements, 1);
    t.is(r.linesChanged, 1);
    t.is(await ws.cat("src/server.ts"), serverTs.replace("3000", "8080"));

    const multi = await ws.tools.editFile({
      workspaceId: ws.id,
      path: "/workspace/src/server.ts",
      oldString: 'const host = "localhost";\nconst port = 8080;',
      newString: 'const host = "0.0.0.0";\nconst port = 9090;',
    });
    t.is(multi.replacements, 1);
    t.is(multi.linesChanged, 2);
  });

  scenario("EditFile › Old string not found", async (t, ws) => {
    await ws.write("src/server.ts", serverTs);
    const { error, detail } = await expectError(
      t,
      ws.tools.editFile({ workspaceId: ws.id, path: "src/server.ts", oldString: "const port = 4000;", newString: "const port = 8080;" }),
      Code.FailedPrecondition,
      ErrorReason.FIND_NOT_FOUND,
    );
    t.is(error.rawMessage, "oldString not found in content");
    t.is(detail.message, "oldString not found in content");
    t.is(detail.closestMatch?.startLine, 4);
    t.is(detail.closestMatch?.endLine, 4);
    t.is(detail.closestMatch?.text, "const port = 3000;");
    t.true((detail.closestMatch?.similarity ?? 0) > 0.5);
    t.is(await ws.cat("src/server.ts"), serverTs);
  });

  scenario("EditFile › Multiple matches for old string", async (t, ws) => {
    const content = "let a = 1;\nlet b = 1;\nlet c = 1;\n";
    await ws.write("m.ts", content);
    const { error } = await expectError(
      t,
      ws.tools.editFile({ workspaceId: ws.id, path: "m.ts", oldString: " = 1;", newString: " = 2;" }),
      Code.FailedPrecondition,
      ErrorReason.FIND_NOT_UNIQUE,
    );
    t.true(error.rawMessage.startsWith("Found multiple matches for oldString"), error.rawMessage);
    t.regex(error.rawMessage, /replace_all/);
    t.is(await ws.cat("m.ts"), content);
  });

  scenario("EditFile › Replace all occurrences", async (t, ws) => {
    await ws.write("m.ts", "let a = 1;\nlet b = 1;\nconst keep = 11;\nlet c = 1;\n");
    const r = await ws.tools.editFile({ workspaceId: ws.id, path: "m.ts", oldString: " = 1;", newString: " = 2;", replaceAll: true });
    t.is(r.replacements, 3);
    t.is(r.linesChanged, 4);
    t.is(await ws.cat("m.ts"), "let a = 2;\nlet b = 2;\nconst keep = 11;\nlet c = 2;\n");
  });

  scenario("EditFile › edits and patches of one file at once all land: none is lost to another's write", async (t, ws) => {
    const n = 40;
    const line = (i: number, state: string) => `line ${String(i).padStart(2, "0")}: ${state}\n`;
    const all = (state: (i: number) => string) => Array.from({ length: n }, (_, i) => line(i, state(i))).join("");
    await ws.write("queue.txt", all(() => "todo"));
    // Each call changes its own line and succeeds; every one reads the file, changes it and writes
    // it back, so any two that overlapped would leave one line at "todo". Two paths name the file.
    const calls = Array.from({ length: n }, (_, i) => {
      const path = i % 3 === 0 ? "/workspace/sub/../queue.txt" : "queue.txt";
      return i % 2 === 0
        ? ws.tools.editFile({ workspaceId: ws.id, path, oldString: line(i, "todo"), newString: line(i, "edited") })
        : ws.tools.patchFile({ workspaceId: ws.id, path, patches: [{ find: line(i, "todo"), replace: line(i, "patched") }] });
    });
    const results = await Promise.allSettled(calls);
    t.deepEqual(results.filter((r) => r.status === "rejected"), []);
    t.is(await ws.cat("queue.txt"), all((i) => (i % 2 === 0 ? "edited" : "patched")));
  });

  // ───────────────────────────── PatchFile ─────────────────────────────

  const configPy = 'DEBUG = True\nLOG_LEVEL = "info"\n\n\ndef connect():\n    return db.connect(timeout=30)\n';
  const seedPatches = [
    { find: "DEBUG = True", replace: "DEBUG = False" },
    { find: "def connect():\n    return db.connect(timeout=30)", replace: "def connect():\n    return db.connect(timeout=60, retry=3)" },
  ];

  scenario("PatchFile › applies the seed example's patches in order", async (t, ws) => {
    await ws.write("src/config.py", configPy);
    const r = await ws.tools.patchFile({ workspaceId: ws.id, path: "src/config.py", patches: seedPatches });
    t.is(r.patchesApplied, 2);
    t.is(await ws.cat("src/config.py"), 'DEBUG = False\nLOG_LEVEL = "info"\n\n\ndef connect():\n    return db.connect(timeout=60, retry=3)\n');
  });

  scenario("PatchFile › all or nothing: a failing patch changes nothing", async (t, ws) => {
    await ws.write("src/config.py", configPy);
    const { detail } = await expectError(
      t,
      ws.tools.patchFile({ workspaceId: ws.id, path: "src/config.py", patches: [seedPatches[0], { find: "def disconnect():", replace: "x" }] }),
      Code.FailedPrecondition,
      ErrorReason.FIND_NOT_FOUND,
    );
    t.is(detail.metadata.patch_index, "1");
    t.is(await ws.cat("src/config.py"), configPy);
  });

  scenario("PatchFile › a find text matching several places is refused", async (t, ws) => {
    await ws.write("dup.py", "x = 1\nx = 1\n");
    const { detail } = await expectError(
      t,
      ws.tools.patchFile({ workspaceId: ws.id, path: "dup.py", patches: [{ find: "x = 1", replace: "x = 2" }] }),
      Code.FailedPrecondition,
      ErrorReason.FIND_NOT_UNIQUE,
    );
    t.is(detail.metadata.patch_index, "0");
    t.is(await ws.cat("dup.py"), "x = 1\nx = 1\n");
  });

  scenario("PatchFile › missing file and paths outside the workspace", async (t, ws) => {
    await expectError(t, ws.tools.patchFile({ workspaceId: ws.id, path: "nope.py", patches: seedPatches }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
    await expectError(
      t,
      ws.tools.patchFile({ workspaceId: ws.id, path: "../config.py", patches: seedPatches }),
      Code.PermissionDenied,
      ErrorReason.PATH_OUTSIDE_WORKSPACE,
    );
  });

  // ───────────────────────────── DeleteFile ─────────────────────────────

  scenario("DeleteFile › deletes a file", async (t, ws) => {
    await ws.write("gone.txt", "bye");
    await ws.write("stays.txt", "hi");
    await ws.tools.deleteFile({ workspaceId: ws.id, path: "/workspace/gone.txt" });
    await expectError(t, ws.tools.readFile({ workspaceId: ws.id, path: "gone.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
    t.is(await ws.sh("ls -A"), "stays.txt\n");
  }, PROCESSES);

  scenario("DeleteFile › a directory is refused with IS_DIRECTORY", async (t, ws) => {
    await ws.write("d/f.txt", "x");
    await expectError(t, ws.tools.deleteFile({ workspaceId: ws.id, path: "d" }), Code.FailedPrecondition, ErrorReason.IS_DIRECTORY);
    await expectError(t, ws.tools.deleteFile({ workspaceId: ws.id, path: "/workspace" }), Code.FailedPrecondition, ErrorReason.IS_DIRECTORY);
    t.is(await ws.cat("d/f.txt"), "x");
  });

  scenario("DeleteFile › a missing file is FILE_NOT_FOUND", async (t, ws) => {
    await expectError(t, ws.tools.deleteFile({ workspaceId: ws.id, path: "missing.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  });

  scenario("DeleteFile › a symlink is removed, its target stays", async (t, ws) => {
    await ws.write("target.txt", "still here\n");
    await ws.sh("ln -s target.txt link.txt && ln -s /etc/passwd etc-link");
    await ws.tools.deleteFile({ workspaceId: ws.id, path: "link.txt" });
    await ws.tools.deleteFile({ workspaceId: ws.id, path: "etc-link" });
    t.is(await ws.sh("ls -A"), "target.txt\n");
    t.is(await ws.cat("target.txt"), "still here\n");
    t.regex(await ws.sh("head -c 5 /etc/passwd"), /^root:/);
  }, PROCESSES);

  // ───────────────────────────── ListFiles ─────────────────────────────

  scenario("ListFiles › lists the root directory", async (t, ws) => {
    await ws.write("a.txt", "hello");
    await ws.write("src/x.ts", "export {};\n");
    await ws.sh("ln -s a.txt link");
    const before = Date.now();
    const r = await ws.tools.listFiles({ workspaceId: ws.id });
    t.deepEqual(
      r.files.map((f) => [f.path, f.type]),
      [
        ["a.txt", FileType.FILE],
        ["link", FileType.SYMLINK],
        ["src", FileType.DIRECTORY],
      ],
    );
    t.is(r.files[0].size, 5n);
    const modifiedMs = Number(r.files[0].modified?.seconds ?? 0n) * 1000;
    t.true(Math.abs(before - modifiedMs) < 10 * 60_000, "modified is a recent timestamp");
    t.false(r.truncated);
  }, PROCESSES);

  scenario("ListFiles › names_only: the same entries with their types, no size or time; not with a pattern", async (t, ws) => {
    await ws.write("a.txt", "hello");
    await ws.write("src/x.ts", "export {};\n");
    await ws.sh("ln -s a.txt link && ln -s missing dangling");
    const full = await ws.tools.listFiles({ workspaceId: ws.id });
    const names = await ws.tools.listFiles({ workspaceId: ws.id, namesOnly: true });
    t.deepEqual(
      names.files.map((f) => [f.path, f.type]),
      full.files.map((f) => [f.path, f.type]),
    );
    t.deepEqual(names.files.map((f) => f.path), ["a.txt", "dangling", "link", "src"]);
    t.true(names.files.every((f) => f.size === 0n && f.modified === undefined));
    t.deepEqual((await ws.tools.listFiles({ workspaceId: ws.id, path: "/workspace/src", namesOnly: true })).files.map((f) => [f.path, f.type]), [["src/x.ts", FileType.FILE]]);
    await expectError(t, ws.tools.listFiles({ workspaceId: ws.id, pattern: "*.txt", namesOnly: true }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    await expectError(t, ws.tools.listFiles({ workspaceId: ws.id, path: "a.txt", namesOnly: true }), Code.FailedPrecondition, ErrorReason.NOT_A_DIRECTORY);
  }, PROCESSES);

  scenario("ListFiles › glob patterns **/*.ts and *.py", async (t, ws) => {
    for (const p of ["setup.py", "src/a.ts", "src/b.py", "src/lib/c.ts", "src/lib/d.tsx", "root.ts"]) await ws.write(p, "x\n");
    const ts = await ws.tools.listFiles({ workspaceId: ws.id, pattern: "**/*.ts" });
    t.deepEqual(ts.files.map((f) => f.path), ["root.ts", "src/a.ts", "src/lib/c.ts"]);
    t.true(ts.files.every((f) => f.type === FileType.FILE));
    const py = await ws.tools.listFiles({ workspaceId: ws.id, path: "/workspace", pattern: "*.py" });
    t.deepEqual(py.files.map((f) => f.path), ["setup.py"]);
  });

  scenario("ListFiles › results are relative to the workspace", async (t, ws) => {
    await ws.write("src/lib/c.ts", "x\n");
    await ws.write("src/a.ts", "x\n");
    const dir = await ws.tools.listFiles({ workspaceId: ws.id, path: "src" });
    t.deepEqual(dir.files.map((f) => f.path), ["src/a.ts", "src/lib"]);
    const deep = await ws.tools.listFiles({ workspaceId: ws.id, path: "/workspace/src", pattern: "**/*.ts" });
    t.deepEqual(deep.files.map((f) => f.path), ["src/a.ts", "src/lib/c.ts"]);
  });

  scenario("ListFiles › a file path is NOT_A_DIRECTORY", async (t, ws) => {
    await ws.write("f.txt", "x");
    await expectError(t, ws.tools.listFiles({ workspaceId: ws.id, path: "f.txt" }), Code.FailedPrecondition, ErrorReason.NOT_A_DIRECTORY);
    await expectError(t, ws.tools.listFiles({ workspaceId: ws.id, path: "missing" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  });

  // ───────────────────────────── Glob ─────────────────────────────

  const globTree = async (ws: Ws) => {
    if (options.processes === false) {
      // No command can set a modification time here: the files are written oldest first instead.
      for (const p of ["tests/t.test.ts", "src/a.ts", "src/d.ts", "src/b/c.ts", "tests/unit/u.test.ts", "src/e.js", "top.ts"]) {
        await ws.write(p, "x\n");
        await sleep(5);
      }
      return;
    }
    for (const p of ["src/a.ts", "src/b/c.ts", "src/d.ts", "src/e.js", "tests/t.test.ts", "tests/unit/u.test.ts", "top.ts"]) await ws.write(p, "x\n");
    await ws.sh(
      [
        "touch -d '2021-01-01 00:00:00' src/a.ts",
        "touch -d '2023-01-01 00:00:00' src/b/c.ts",
        "touch -d '2022-01-01 00:00:00' src/d.ts",
        "touch -d '2020-01-01 00:00:00' tests/t.test.ts",
        "touch -d '2024-01-01 00:00:00' tests/unit/u.test.ts",
      ].join(" && "),
    );
  };

  scenario("Glob › Find files by extension", async (t, ws) => {
    await globTree(ws);
    const r = await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.ts", path: "/workspace/src" });
    t.deepEqual(r.paths, ["src/b/c.ts", "src/d.ts", "src/a.ts"]);
    t.false(r.truncated);
    const limited = await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.ts", path: "src", limit: 2 });
    t.deepEqual(limited.paths, ["src/b/c.ts", "src/d.ts"]);
    t.true(limited.truncated);
  });

  scenario("Glob › No matches found", async (t, ws) => {
    await globTree(ws);
    const r = await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.rs" });
    t.deepEqual(r.paths, []);
    t.false(r.truncated);
  });

  scenario("Glob › Glob with specific directory", async (t, ws) => {
    await globTree(ws);
    const r = await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.ts", path: "/workspace/tests" });
    t.deepEqual(r.paths, ["tests/unit/u.test.ts", "tests/t.test.ts"]);
    const all = await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.ts" });
    t.is(all.paths.length, 6);
    t.true(all.paths.every((p) => !p.startsWith("/")));
    await expectError(t, ws.tools.glob({ workspaceId: ws.id, pattern: "../*" }), Code.InvalidArgument, ErrorReason.INVALID_PATTERN);
  });

  // ───────────────────────────── Grep ─────────────────────────────

  const grepTree = async (ws: Ws) => {
    await ws.write("src/app.ts", 'import { a } from "./a";\n// TODO: wire up\nfunction main() {}\nexport function  helper(x) {}\n');
    await ws.write("src/a.ts", "export const a = 1; // todo lowercase\n");
    await ws.write("src/util.py", "import os\n# TODO: python\ndef function_name():\n    pass\n");
    await ws.write("docs/readme.md", "import nothing\nTODO outside src\n");
  };

  scenario("Grep › a FIFO as the search path is refused without blocking", async (t, ws) => {
    await ws.sh("mkfifo pipe");
    const { detail } = await expectError(t, ws.tools.grep({ workspaceId: ws.id, pattern: "x", path: "pipe" }), Code.FailedPrecondition, ErrorReason.UNSUPPORTED_FILE_TYPE);
    t.is(detail.metadata.path, "pipe");
    const stream = async () => {
      for await (const _ of ws.tools.streamGrep({ workspaceId: ws.id, pattern: "x", path: "pipe" })) void _;
    };
    await expectError(t, stream(), Code.FailedPrecondition, ErrorReason.UNSUPPORTED_FILE_TYPE);
  }, PROCESSES);

  scenario("Glob › hundreds of files with 3 KB paths are all found", async (t, ws) => {
    // 14 nested directories of 200-byte names: each path is about 2,900 bytes; 600 of them are
    // far more than one message of the executor protocol carries, so the walk must stream.
    const dir = Array.from({ length: 14 }, (_, i) => `${String(i).padStart(2, "0")}${"d".repeat(198)}`).join("/");
    await ws.sh(`mkdir -p '${dir}' && cd '${dir}' && for i in $(seq 1 600); do : > f$i.txt; done`);
    const r = await ws.tools.glob({ workspaceId: ws.id, pattern: "**/*.txt", limit: 1000 });
    t.is(r.paths.length, 600);
    t.true(r.paths.every((p) => p.startsWith(`${dir}/f`)));
    const listed = await ws.tools.listFiles({ workspaceId: ws.id, pattern: "**/*.txt" });
    t.is(listed.files.length, 600);
  }, PROCESSES);

  scenario("Grep › Search for pattern across files", async (t, ws) => {
    await grepTree(ws);
    const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "TODO", path: "/workspace/src" });
    t.deepEqual(located(r.matches), ["src/app.ts:2", "src/util.py:2"]);
    const app = r.matches.find((m) => m.path === "src/app.ts");
    t.is(app?.content, "// TODO: wire up");
    t.false(r.truncated);
  });

  scenario("Grep › Search with file type filter", async (t, ws) => {
    await grepTree(ws);
    const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "import", path: "/workspace", glob: "*.ts" });
    t.deepEqual(located(r.matches), ["src/app.ts:1"]);
  });

  scenario("Grep › Regex pattern search", async (t, ws) => {
    await grepTree(ws);
    const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "function\\s+\\w+" });
    t.deepEqual(located(r.matches), ["src/app.ts:3", "src/app.ts:4"]);
    t.deepEqual(
      [...r.matches].sort(byPathAndLine).map((m) => m.content),
      ["function main() {}", "export function  helper(x) {}"],
    );
  });

  scenario("Grep › case_sensitive=false matches any case", async (t, ws) => {
    await grepTree(ws);
    const sensitive = await ws.tools.grep({ workspaceId: ws.id, pattern: "todo", path: "src" });
    t.deepEqual(located(sensitive.matches), ["src/a.ts:1"]);
    const insensitive = await ws.tools.grep({ workspaceId: ws.id, pattern: "todo", path: "src", caseSensitive: false });
    t.deepEqual(located(insensitive.matches), ["src/a.ts:1", "src/app.ts:2", "src/util.py:2"]);
  });

  scenario("Grep › context lines (seed 004 example)", async (t, ws) => {
    const block = "# Establish database connection\ndef connect(host, port):\n    return Client(host, port)\n";
    await ws.write("src/db/connection.py", block);
    const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "def\\s+connect", glob: "**/*.py", contextLines: 2 });
    t.deepEqual(
      r.matches.map((m) => ({ path: m.path, line: m.line, content: m.content })),
      [{ path: "src/db/connection.py", line: 2, content: "    # Establish database connection\n--> def connect(host, port):\n        return Client(host, port)" }],
    );
    t.false(r.truncated);

    // The same block at line 42 of a longer file.
    const filler = Array.from({ length: 40 }, (_, i) => `x${i + 1} = ${i + 1}`).join("\n");
    await ws.write("src/db/connection.py", `${filler}\n${block}y = 0\nz = 0\n`);
    const one = await ws.tools.grep({ workspaceId: ws.id, pattern: "def\\s+connect", glob: "**/*.py", contextLines: 1 });
    t.is(one.matches.length, 1);
    t.is(one.matches[0].line, 42);
    t.is(one.matches[0].content, "    # Establish database connection\n--> def connect(host, port):\n        return Client(host, port)");
    const two = await ws.tools.grep({ workspaceId: ws.id, pattern: "def\\s+connect", glob: "**/*.py", contextLines: 2 });
    t.is(two.matches[0].content, "    x40 = 40\n    # Establish database connection\n--> def connect(host, port):\n        return Client(host, port)\n    y = 0");
  });

  scenario("Grep › max_results truncates", async (t, ws) => {
    await ws.write("many.txt", Array.from({ length: 10 }, (_, i) => `hit ${i + 1}`).join("\n"));
    const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "hit", maxResults: 3 });
    t.is(r.matches.length, 3);
    t.true(r.truncated);
    const all = await ws.tools.grep({ workspaceId: ws.id, pattern: "hit", maxResults: 10 });
    t.is(all.matches.length, 10);
    t.false(all.truncated);
  });

  scenario("Grep › hundreds of matches over several files: none lost or repeated at any max_results, with context", async (t, ws) => {
    // Matches are checked in batches that grow; the limit can fall anywhere in one.
    for (const f of ["a", "b", "c"]) await ws.write(`many/${f}.txt`, Array.from({ length: 120 }, (_, i) => (i % 3 === 2 ? `gap ${i}` : `hit ${f}${i}`)).join("\n"));
    const full = await ws.tools.grep({ workspaceId: ws.id, pattern: "hit", path: "many", contextLines: 1, maxResults: 1000 });
    t.is(full.matches.length, 240);
    t.false(full.truncated);
    t.is(new Set(located(full.matches)).size, 240);
    // ripgrep searches files in parallel, so which files come first varies: compare as sets.
    const key = (m: GrepMatch) => `${m.path}:${m.line}:${m.content}`;
    const all = new Set(full.matches.map(key));
    for (const max of [1, 5, 21, 85, 239, 240]) {
      const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "hit", path: "many", contextLines: 1, maxResults: max });
      const got = r.matches.map(key);
      t.is(new Set(got).size, max, `max_results ${max}: ${max} distinct matches`);
      t.true(got.every((k) => all.has(k)), `max_results ${max}: each match and its context as in the full search`);
      t.is(r.truncated, max < 240, `max_results ${max}`);
    }
  });

  scenario("Grep › an invalid regex is INVALID_PATTERN", async (t, ws) => {
    await ws.write("a.txt", "x\n");
    await expectError(t, ws.tools.grep({ workspaceId: ws.id, pattern: "foo(bar" }), Code.InvalidArgument, ErrorReason.INVALID_PATTERN);
    await expectError(t, ws.tools.grep({ workspaceId: ws.id, pattern: "[z-a]" }), Code.InvalidArgument, ErrorReason.INVALID_PATTERN);
  });

  scenario("Grep › a pattern starting with '-' is a pattern, not a flag", async (t, ws) => {
    await ws.write("flags.txt", "run with --files here\n");
    await ws.write("other.txt", "nothing\n");
    const r = await ws.tools.grep({ workspaceId: ws.id, pattern: "--files" });
    t.deepEqual(located(r.matches), ["flags.txt:1"]);
    t.is(r.matches[0].content, "run with --files here");
    const none = await ws.tools.grep({ workspaceId: ws.id, pattern: "--version" });
    t.deepEqual(none.matches, []);
  });

  scenario("Grep › StreamGrep sends matches, then one done event", async (t, ws) => {
    await ws.write("many.txt", Array.from({ length: 10 }, (_, i) => `hit ${i + 1}`).join("\n"));
    const events = await collect(ws.tools.streamGrep({ workspaceId: ws.id, pattern: "hit", maxResults: 4 }));
    t.deepEqual(events.map((e) => e.event.case), ["match", "match", "match", "match", "done"]);
    const done = events.at(-1);
    t.true(done?.event.case === "done" && done.event.value.truncated);
    t.is(done?.event.case === "done" ? done.event.value.matchCount : -1, 4);
    t.deepEqual(
      events.flatMap((e) => (e.event.case === "match" ? [`${e.event.value.path}:${e.event.value.line}`] : [])),
      ["many.txt:1", "many.txt:2", "many.txt:3", "many.txt:4"],
    );
    const all = await collect(ws.tools.streamGrep({ workspaceId: ws.id, pattern: "hit 1\\b" }));
    t.deepEqual(all.map((e) => e.event.case), ["match", "done"]);
    const last = all.at(-1);
    t.true(last?.event.case === "done" && !last.event.value.truncated);
  });

  // ───────────────────────────── Paths and the jail ─────────────────────────────

  scenario("Paths › relative and /workspace paths name the same file", async (t, ws) => {
    await ws.write("/workspace/a/b.txt", "same\n");
    for (const path of ["a/b.txt", "./a/b.txt", "/workspace/a/b.txt", "a/./c/../b.txt", "/workspace/a//b.txt"]) {
      const r = await ws.tools.readFile({ workspaceId: ws.id, path });
      t.is(r.content, "1: same", path);
      t.is(r.path, "a/b.txt");
    }
    await ws.write("a/b.txt", "changed\n");
    t.is(await ws.cat("a/b.txt"), "changed\n");
  });

  const outsidePaths = ["..", "../x.txt", "a/../../x.txt", "/workspace/../x.txt", "/etc/passwd", "/workspacex/a.txt", "/tmp", "a\0b.txt"];

  scenario("Paths › '..', absolute paths elsewhere and NUL bytes are PATH_OUTSIDE_WORKSPACE", async (t, ws) => {
    await ws.write("a/keep.txt", "x\n");
    const id = ws.id;
    const deny = (p: Promise<unknown>) => expectError(t, p, Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
    for (const path of outsidePaths) {
      await deny(ws.tools.readFile({ workspaceId: id, path }));
      await deny(ws.tools.writeFile({ workspaceId: id, path: path === ".." ? "../evil.txt" : path === "/tmp" ? "/tmp/evil.txt" : path, content: "evil" }));
      await deny(ws.tools.editFile({ workspaceId: id, path, oldString: "root", newString: "toor" }));
      await deny(ws.tools.patchFile({ workspaceId: id, path, patches: [{ find: "root", replace: "toor" }] }));
      await deny(ws.tools.deleteFile({ workspaceId: id, path }));
      await deny(ws.tools.listFiles({ workspaceId: id, path }));
      await deny(ws.tools.glob({ workspaceId: id, pattern: "*", path }));
      await deny(ws.tools.grep({ workspaceId: id, pattern: "root", path }));
    }
    t.is(await ws.sh("test -e ../evil.txt || test -e ../x.txt || echo clean"), "clean\n");
    t.false(existsSync("/tmp/evil.txt"));
    t.regex(readFileSync("/etc/passwd", "utf8"), /^root:/);
  }, PROCESSES);

  scenario("Paths › a path component longer than 255 bytes is INVALID_ARGUMENT for every tool", async (t, ws) => {
    const long = `dir/${"a".repeat(300)}`;
    const invalid = (p: Promise<unknown>) => expectError(t, p, Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    await invalid(ws.tools.readFile({ workspaceId: ws.id, path: long }));
    await invalid(ws.tools.writeFile({ workspaceId: ws.id, path: long, content: "x" }));
    await invalid(ws.tools.editFile({ workspaceId: ws.id, path: long, oldString: "a", newString: "b" }));
    await invalid(ws.tools.deleteFile({ workspaceId: ws.id, path: long }));
    await invalid(ws.tools.listFiles({ workspaceId: ws.id, path: long }));
    await invalid(ws.tools.grep({ workspaceId: ws.id, pattern: "x", path: long }));
    await invalid(ws.bash("true", { workdir: long }));
    // 255 bytes is still a valid name, also in multi-byte characters.
    const longest = `${"é".repeat(127)}x`;
    await ws.write(longest, "fits\n");
    t.is((await ws.tools.readFile({ workspaceId: ws.id, path: longest })).content, "1: fits");
    t.is(await ws.cat(longest), "fits\n");
  }, PROCESSES);

  scenario("Paths › a symlink to /etc/passwd is refused", async (t, ws) => {
    await ws.sh("ln -s /etc/passwd link");
    const id = ws.id;
    const deny = (p: Promise<unknown>) => expectError(t, p, Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
    await deny(ws.tools.readFile({ workspaceId: id, path: "link" }));
    await deny(ws.tools.readFile({ workspaceId: id, path: "/workspace/link" }));
    await deny(ws.tools.grep({ workspaceId: id, pattern: "root", path: "link" }));
    await deny(ws.tools.listFiles({ workspaceId: id, path: "link" }));
    // Writing through a link to an outside file: use a file of our own, never /etc/passwd.
    const victim = `/tmp/aw-victim-${unique()}`;
    await ws.sh(`echo original > ${victim} && ln -s ${victim} victim-link`);
    try {
      await deny(ws.tools.writeFile({ workspaceId: id, path: "victim-link", content: "overwritten" }));
      await deny(ws.tools.editFile({ workspaceId: id, path: "victim-link", oldString: "original", newString: "edited" }));
      await deny(ws.tools.patchFile({ workspaceId: id, path: "victim-link", patches: [{ find: "original", replace: "patched" }] }));
      t.is(await ws.sh(`cat ${victim}`), "original\n");
      // Grep over the whole workspace does not follow the link out either.
      const r = await ws.tools.grep({ workspaceId: id, pattern: "root|original" });
      t.deepEqual(r.matches, []);
    } finally {
      await ws.sh(`rm -f ${victim}`);
    }
  }, PROCESSES);

  scenario("Paths › a dangling symlink pointing outside is refused and creates nothing", async (t, ws) => {
    const target = `/nonexistent-aw-${unique()}`;
    await ws.sh(`ln -s ${target}/x dl && ln -s /nonexistent/x dl2`);
    const deny = (p: Promise<unknown>) => expectError(t, p, Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
    await deny(ws.tools.writeFile({ workspaceId: ws.id, path: "dl", content: "escape" }));
    await deny(ws.tools.writeFile({ workspaceId: ws.id, path: "dl2", content: "escape" }));
    await deny(ws.tools.readFile({ workspaceId: ws.id, path: "dl" }));
    t.is(await ws.sh(`test -e ${target} || test -e /nonexistent || echo absent`), "absent\n");
    t.false(existsSync(target));
    t.false(existsSync("/nonexistent"));
  }, PROCESSES);

  scenario("Paths › a symlinked parent directory pointing outside is refused", async (t, ws) => {
    await ws.sh("ln -s /tmp tdir");
    const name = `aw-escape-${unique()}.txt`;
    const deny = (p: Promise<unknown>) => expectError(t, p, Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
    await deny(ws.tools.writeFile({ workspaceId: ws.id, path: `tdir/${name}`, content: "escape" }));
    await deny(ws.tools.writeFile({ workspaceId: ws.id, path: `tdir/deeper/${name}`, content: "escape" }));
    await deny(ws.tools.readFile({ workspaceId: ws.id, path: "tdir" }));
    await deny(ws.tools.listFiles({ workspaceId: ws.id, path: "tdir" }));
    await deny(ws.tools.glob({ workspaceId: ws.id, pattern: "*", path: "tdir" }));
    await deny(ws.tools.deleteFile({ workspaceId: ws.id, path: `tdir/${name}` }));
    await deny(ws.bash("true", { workdir: "tdir" }));
    t.is(await ws.sh(`test -e /tmp/${name} || test -e /tmp/deeper || echo absent`), "absent\n");
    t.false(existsSync(`/tmp/${name}`));
  }, PROCESSES);

  scenario("Paths › symlinks that stay inside the workspace work", async (t, ws) => {
    await ws.write("real.txt", "real\n");
    await ws.write("dir/inner.txt", "inner\n");
    await ws.sh("ln -s /workspace/real.txt abs-link && ln -s real.txt rel-link && mkdir -p sub && ln -s ../real.txt sub/up-link && ln -s dir dir-link");
    for (const path of ["abs-link", "rel-link", "sub/up-link", "/workspace/rel-link"]) {
      const r = await ws.tools.readFile({ workspaceId: ws.id, path });
      t.is(r.content, "1: real", path);
      t.is(r.kind, FileKind.TEXT);
    }
    const inner = await ws.tools.readFile({ workspaceId: ws.id, path: "dir-link/inner.txt" });
    t.is(inner.content, "1: inner");
    await ws.tools.writeFile({ workspaceId: ws.id, path: "rel-link", content: "through the link\n" });
    t.is(await ws.cat("real.txt"), "through the link\n");
    const listed = await ws.tools.listFiles({ workspaceId: ws.id, path: "dir-link" });
    t.deepEqual(listed.files.map((f) => f.path), ["dir/inner.txt"]);
  }, PROCESSES);
}
