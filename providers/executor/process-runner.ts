/**
 * Runs one process and turns it into the ExecEvent stream of the provider boundary. This is the
 * one implementation of process supervision: the local provider calls it in the server process,
 * and container providers run it inside the sandbox (executor/main.ts), so timeouts,
 * kills and output handling are identical everywhere.
 *
 * Guarantees:
 * - the child leads its own process group and carries a marker variable; a kill signals the
 *   group and every process that still carries the marker, so `cmd &`, `setsid` and `nohup`
 *   children are found even after they left the group;
 * - when the main process exits, everything it left running is killed, so background children
 *   neither keep the call open nor outlive it;
 * - timeout: SIGTERM to the tree, then SIGKILL after the grace period; abort: SIGKILL at once;
 * - output is read only as fast as the consumer drains the iterator (bounded memory) and is
 *   delivered in chunks of at most 64 KiB; `exited` comes last, exactly once.
 *
 * Imports only node: modules and types, because it also runs inside sandboxes.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { PassThrough } from "node:stream";
import { randomUUID } from "node:crypto";
import { closeSync, fstatSync, openSync, readFileSync, readlinkSync, readSync } from "node:fs";
import { readdir, readFile, readlink } from "node:fs/promises";
import { constants as osConstants } from "node:os";
import type { Readable } from "node:stream";
import { giveUpWhenQuiet, OutputQueue, pumpOutput } from "./output-queue.ts";
import { LaunchedChild, type Launcher } from "./launcher.ts";
import type { ExecRequest } from "./protocol.ts";
import type { ExecEvent, ExecExit } from "./types.ts";

/** Name of the environment variable that marks every process of one execution. */
export const EXEC_MARKER_VAR = "AGENT_WORKSPACE_EXEC_ID";
/**
 * How long output pipes may stay quiet after the process exited before they are given up on (a
 * process that escaped every kill holding them), and how long they may keep going at most.
 */
export const PIPE_DRAIN_MS = 2000;
export const PIPE_DRAIN_CAP_MS = 10_000;

/**
 * Variables glibc and its dynamic loader obey, and ignore for a set-id program (glibc's list of
 * "unsecure" ones, besides every LD_*): a program started as root with them could load modules or
 * write files of the caller's choosing.
 */
const ROOT_UNSAFE_ENV = new Set([
  "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "NIS_PATH",
  "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR", "MALLOC_ARENA_MAX", "MALLOC_CHECK_", "MALLOC_PERTURB_",
]);

/** Where and as whom a process is launched. */
export interface LaunchSpec {
  /** Absolute working directory (`/proc/self/fd/<fd>` of a directory the jail opened). */
  cwd: string;
  /** The complete environment (nothing is inherited); the marker variable is added. */
  env: Record<string, string>;
  /** The user the process runs as (the sandbox user), set by the spawn inside `privileged`. */
  user?: { uid: number; gid: number };
  /** Runs the spawn with the privilege to change identity (see main.ts); identity otherwise. */
  privileged?: <T>(fn: () => T) => T;
  /**
   * Starts the process through setpriv (at this path) as `user` with these supplementary groups,
   * which decide the programs it may run (programs.ts). Without it the spawn itself switches to
   * `user`, with no supplementary groups. `env` is env(1)'s path, which puts back after the switch
   * the variables setpriv must not see as root (ROOT_UNSAFE_ENV).
   */
  groups?: { setpriv: string; env: string; gids: number[] };
  /** Called right after the spawn, when the working directory's descriptor may be closed. */
  onSpawn?: () => void;
  /**
   * A descriptor the command's processes inherit as fd 3, and what `/proc/<pid>/fd/3` reads for
   * it: it marks them even after they clear their environment or leave their session.
   */
  marker?: { fd: number; link: string };
  /**
   * Starts the process through this workspace launcher (launcher.ts) instead of a fork of this
   * process. Not with `user` (the launcher runs commands as its own user).
   */
  launcher?: Launcher;
  /**
   * What to spawn instead when the launcher cannot start the command for a reason of its own:
   * it cannot fork (EAGAIN: the workspace's cgroup is at its process limit, say just after a fork
   * bomb, while its processes are still being killed; a spawned process may still join a cgroup at
   * its limit, and a command that then forks nothing runs), or it exited (say, its limits could not
   * be applied: the spawned command then fails the same way, exit 125 with the reason on its
   * stderr, instead of an error that says nothing).
   */
  spawnArgv?: () => string[];
  /** Give the process a pipe for its stdin (otherwise /dev/null). Not through a launcher, which has none. */
  stdin?: boolean;
  /**
   * Through a launcher, without `marker`: the launcher makes the marker descriptor (a pipe's read
   * end; launcher.ts). A spawn instead (`spawnArgv`) then has no marker descriptor, only the variable.
   */
  launcherMarker?: boolean;
  /**
   * Through a launcher: it reads the output itself and passes on at most this many bytes of each
   * stream (launcher.ts, "captured"); the exit then carries `outputBytes`.
   */
  keepBytes?: number;
}

/** A running process, as its supervisor offers it to whoever feeds it (executor/main.ts). */
export interface RunningProcess {
  pid: number | undefined;
  /** Its stdin pipe, when it was given one. */
  stdin: import("node:stream").Writable | undefined;
  /** Signals its tree: the group, then every process carrying its marks. */
  kill(signal: NodeJS.Signals): void;
}

/** How a running process is supervised. */
export interface SuperviseSpec {
  timeoutMs: number;
  killGraceMs: number;
  signal?: AbortSignal;
  /** Count cgroup OOM kills around the run (only meaningful inside a sandbox with its own cgroup). */
  detectOom?: boolean;
  /**
   * Called after the command ended and its own processes were killed: kills whatever else of the
   * sandbox user is left, when nothing else runs (the sandbox's pid namespace is the command's).
   */
  sweepAll?: () => void;
  /**
   * Takes the command's stdout right after the spawn, when it is a pipe (`fd` its descriptor here;
   * the launcher's commands): its bytes are then not read here and no `stdout` event is emitted;
   * the taker reads them (the local provider's server, which opens the pipe through /proc). Not
   * called for a stdout another process cannot open that way (a spawn's socket pair): that one is
   * read here as usual.
   */
  takeStdout?: (stdout: Readable, fd: number) => void;
  /** Told once the process was spawned, with what reaches it while it runs. */
  onStarted?: (running: RunningProcess) => void;
  /** The precise monotonic clock in milliseconds (`performance.now`; a test's own clock). */
  now?: () => number;
  /** Where a warning about the run goes (a line on stderr by default: the executor's log). */
  warn?: (line: string) => void;
}

/** A fully resolved process to run. */
export interface RunSpec extends LaunchSpec, SuperviseSpec {
  argv: string[];
}

type Child = ChildProcess & { stdout: Readable; stderr: Readable };

/** A process started in its own group, with its marks. */
interface Launched {
  child: Child;
  /** Its marker variable's value. */
  marker: string;
  markerLink: string | undefined;
  /** A pid that carries no command's marks (its launcher's waiting spare), 0 for none: the sweep skips it. */
  unmarked?: () => number;
}

/** Spawns `argv` as described, stdin /dev/null, in a process group of its own. */
function launch(argv: string[], spec: LaunchSpec): Launched {
  const marker = randomUUID();
  // The spawn's own identity switch clears supplementary groups, so groups go through setpriv: the
  // child starts as root in the privileged window and setpriv leaves it as the user, its groups
  // set, no capability left, before it runs the command (same pid, same marks).
  // setpriv itself runs as root: variables the dynamic loader or glibc would obey for it (a path of
  // modules to load, a file to write) are kept from it and handed to the command by `env`, which
  // runs after the switch, as the user.
  const via = spec.user && spec.groups ? spec.groups : undefined;
  const env: Record<string, string> = { ...spec.env, [EXEC_MARKER_VAR]: marker };
  const later: string[] = [];
  if (via) {
    for (const name of Object.keys(env)) {
      if (!(name.startsWith("LD_") || ROOT_UNSAFE_ENV.has(name))) continue;
      later.push(`${name}=${env[name]}`);
      delete env[name];
    }
  }
  const file = via ? via.setpriv : argv[0];
  const args = via && spec.user
    ? ["--reuid", String(spec.user.uid), "--regid", String(spec.user.gid), "--groups", [spec.user.gid, ...via.gids].join(","), "--inh-caps=-all", "--", ...(later.length > 0 ? [via.env, ...later] : []), ...argv]
    : argv.slice(1);
  const go = () =>
    spawn(file, args, {
      cwd: spec.cwd,
      env,
      detached: true,
      stdio: [spec.stdin ? "pipe" : "ignore", "pipe", "pipe", ...(spec.marker ? [spec.marker.fd] : [])],
      uid: via ? undefined : spec.user?.uid,
      gid: via ? undefined : spec.user?.gid,
    });
  try {
    return { child: (spec.privileged ? spec.privileged(go) : go()) as Child, marker, markerLink: spec.marker?.link };
  } finally {
    spec.onSpawn?.();
  }
}

type Item = { type: "stdout" | "stderr"; data: Uint8Array };

/**
 * Starts `argv` through the workspace's launcher, as `launch` does with a spawn: the same
 * environment and marks, the descriptors reached through this process's /proc entry. A launch that
 * fails gives a child that reports the error, as a failed spawn's does.
 */
async function launchVia(launcher: Launcher, argv: string[], spec: LaunchSpec): Promise<Launched> {
  const marker = randomUUID();
  const self = `/proc/${process.pid}/fd/`;
  const cwd = spec.cwd.startsWith("/proc/self/fd/") ? self + spec.cwd.slice("/proc/self/fd/".length) : spec.cwd;
  try {
    const child = await launcher.launch({
      argv,
      env: { ...spec.env, [EXEC_MARKER_VAR]: marker },
      cwd,
      marker: spec.marker ? self + spec.marker.fd : spec.launcherMarker ? "+" : "",
      keep: spec.keepBytes,
    });
    return { child: child as unknown as Child, marker, markerLink: spec.marker?.link ?? child.markerLink, unmarked: () => launcher.spare };
  } catch (err) {
    if (err instanceof TypeError) throw err;
    const code = (err as { code?: unknown }).code;
    if ((code === "EAGAIN" || code === "EWOULDBLOCK" || code === "LAUNCHER_EXITED") && spec.spawnArgv) {
      // Said on stderr (the server logs it): the command's parent is then the executor, not a launcher.
      process.stderr.write(`executor: the workspace's launcher could not start a command (${String(code)}); it is spawned instead\n`);
      return launch(spec.spawnArgv(), spec);
    }
    const child = new LaunchedChild();
    child.stdout = new PassThrough().end();
    child.stderr = new PassThrough().end();
    // The launcher died with the command in its hands (maybe started, never to be started twice):
    // it ends as killed, as the launcher's running commands do; the sweep by its marker variable
    // ends it if it did start.
    if (code === "LAUNCHER_DIED") process.nextTick(() => child.emit("exit", null, "SIGKILL"));
    else process.nextTick(() => child.emit("error", err));
    return { child: child as unknown as Child, marker, markerLink: undefined };
  } finally {
    spec.onSpawn?.();
  }
}

/** Runs `spec` and yields its events; returning early from the iterator kills the process tree. */
export async function* runProcess(spec: RunSpec): AsyncGenerator<ExecEvent, void, undefined> {
  yield* supervise(spec.launcher && !spec.user && !spec.stdin ? await launchVia(spec.launcher, spec.argv, spec) : launch(spec.argv, spec), spec);
}

/** Supervises a launched process from now on: its event stream, its timeout, its kills. */
async function* supervise(launched: Launched, spec: SuperviseSpec): AsyncGenerator<ExecEvent, void, undefined> {
  const { child, marker } = launched;
  const now = spec.now ?? (() => performance.now());
  const started = now();
  const oomBefore = spec.detectOom ? readOomKills() : 0;

  let spawnError: string | undefined;
  let exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let timedOut = false;
  let aborted = false;
  const timers: NodeJS.Timeout[] = [];

  /**
   * Signals the command's process group at once, then every process carrying its marks. `later`
   * starts that /proc scan one turn of the loop later, after I/O already queued (the pipes'
   * ends of a command that just exited), so it does not stand between an exit and its answer.
   */
  const killTree = (sig: NodeJS.Signals, later = false, groupDone = false) => {
    // ESRCH (the group is already gone) is the usual answer once the command exited.
    if (child.pid !== undefined && !groupDone) quietly(() => process.kill(-(child.pid as number), sig));
    // A catchable signal reaches the group's members once, from the group signal above: a second
    // copy from the sweep would run a shell's trap twice. SIGKILL goes to every marked process.
    const skipGroup = sig === "SIGKILL" ? undefined : child.pid;
    // A command its launcher reaped is gone itself: the window starts after it.
    const since = (child.pid ?? 0) + (groupDone ? 1 : 0);
    const sweep = () => void killMarked({ env: marker, link: launched.markerLink }, sig, since, skipGroup, launched.unmarked?.() ?? 0);
    if (later) setImmediate(sweep);
    else sweep();
  };

  // One bounded queue for both pipes (output-queue.ts).
  const queue = new OutputQueue<Item>();
  const pumps: Array<Promise<void>> = [pumpOutput(child.stderr, queue, (data) => ({ type: "stderr", data }))];
  // The pipes this function reads and closes: a taken stdout is the taker's alone from now on
  // (closing it here could close it before it was handed over).
  const pipes: Readable[] = [child.stderr];
  const handOver = spec.takeStdout === undefined ? undefined : pipeDescriptor(child.stdout);
  if (spec.takeStdout && handOver !== undefined) {
    spec.takeStdout(untouched(child.stdout), handOver);
  } else {
    pipes.push(child.stdout);
    pumps.push(pumpOutput(child.stdout, queue, (data) => ({ type: "stdout", data })));
  }
  let pumpsDone = false;
  void Promise.all(pumps).then(() => {
    pumpsDone = true;
    queue.notify();
  });

  const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
    exitInfo = { code, signal };
    // Whatever the command left behind (background jobs, setsid/nohup children) dies with it. A
    // launcher killed its group as it reaped it (executor/launcher.ts), before it said so.
    killTree("SIGKILL", true, (child as { groupKilled?: boolean }).groupKilled === true);
    spec.sweepAll?.();
  };
  const exited = new Promise<void>((resolve) => {
    child.once("error", (err: NodeJS.ErrnoException) => {
      spawnError = err.code ?? "SPAWN_FAILED";
      resolve();
    });
    child.once("exit", (code, signal) => {
      onExit(code, signal);
      resolve();
    });
  });
  let exitedDone = false;
  let stopDrain = () => {};
  let over = false;
  void exited.then(() => {
    exitedDone = true;
    // Pipes held open by a process that escaped every kill must not keep the call open forever
    // (pipes that ended already need no watch).
    if (!over && !pumpsDone) stopDrain = giveUpWhenQuiet(pipes, queue, () => pipes.forEach((pipe) => pipe.destroy()), PIPE_DRAIN_MS, PIPE_DRAIN_CAP_MS);
    queue.notify();
  });

  const onAbort = () => {
    aborted = true;
    killTree("SIGKILL");
  };
  if (spec.signal?.aborted) onAbort();
  spec.signal?.addEventListener("abort", onAbort, { once: true });
  // The timeout is decided by the precise monotonic clock, not by the event loop's: a timer is
  // due by the loop's clock, which libuv reads from CLOCK_MONOTONIC_COARSE wherever that clock's
  // resolution is 1 ms or finer. Under gVisor it is (1 ns, measured inside runsc; 4 ms on the host),
  // while `performance.now` reads CLOCK_MONOTONIC, and gVisor computes the two apart (inside runsc
  // on the AMD host of 2026-12-03 a read of CLOCK_MONOTONIC took 38 µs, `performance.now` 39 µs,
  // the coarse clock 0.02 µs).
  // A gVisor command with a 600 s timeout was once stopped as timed out within 3 minutes (a CI run
  // under load); which clock ran ahead is not known. A timer that fires before the precise clock
  // reached its deadline is armed again for the rest, and says so once (`warn`): a timeout then
  // needs both clocks to agree that it passed. (The precise clock is the one trusted: one that
  // stood still would put the timeout off for as long, with a warning in the log.)
  // (The loop's clock is read once per turn, so a timer may be due a turn's length before the
  // precise clock agrees: that much is not early.)
  const deadline = started + spec.timeoutMs;
  let early = false;
  const due = () => {
    const left = deadline - now();
    if (left > EARLY_TIMER_SLACK_MS) {
      if (!early) {
        early = true;
        const line = `a command's ${spec.timeoutMs} ms timeout timer fired ${Math.round(left)} ms before the monotonic clock reached its deadline; armed again`;
        if (spec.warn) spec.warn(line);
        else process.stderr.write(`executor: ${line}\n`);
      }
      timers.push(setTimeout(due, Math.ceil(left)));
      return;
    }
    timedOut = true;
    killTree("SIGTERM");
    timers.push(setTimeout(() => killTree("SIGKILL"), spec.killGraceMs));
  };
  timers.push(setTimeout(due, spec.timeoutMs));

  if (child.stdin) {
    // A command that exits or closes its stdin makes writes fail (EPIPE): the writer hears of it
    // through its callback, never as an error that would end this process.
    child.stdin.on("error", () => undefined);
  }
  spec.onStarted?.({ pid: child.pid, stdin: child.stdin ?? undefined, kill: (sig) => killTree(sig) });

  let finished = false;
  try {
    yield { type: "started", startedAt: new Date(), ...(child.pid === undefined ? {} : { pid: child.pid }) };
    for (;;) {
      const item = await queue.next(() => pumpsDone && exitedDone);
      if (!item) break;
      yield item;
    }
    await exited;
    const exit = buildExit(exitInfo, spawnError, timedOut, now() - started);
    // A launcher that captured the output counted all of it (only a head came here).
    const counted = (child as { outputBytes?: ExecExit["outputBytes"] }).outputBytes;
    if (counted !== undefined) exit.outputBytes = counted;
    // The kernel's OOM killer may hit any process of the tree (bash then reports 137 for a killed
    // pipeline stage), so any OOM kill in the sandbox's cgroup during the run counts.
    if (spec.detectOom && !timedOut && !aborted && exit.exitCode >= 128) {
      exit.oomKilled = readOomKills() > oomBefore;
    }
    finished = true;
    yield { type: "exited", exit };
  } finally {
    for (const t of timers) clearTimeout(t);
    over = true;
    stopDrain();
    spec.signal?.removeEventListener("abort", onAbort);
    if (!finished || !exitedDone) killTree("SIGKILL");
    for (const pipe of pipes) pipe.destroy();
    child.stdin?.destroy();
  }
}

/** The descriptor of `stream` when it is a socket over a pipe (not a socket pair), else undefined. */
function pipeDescriptor(stream: Readable | null | undefined): number | undefined {
  const fd = (stream as { _handle?: { fd?: unknown } } | null | undefined)?._handle?.fd;
  if (typeof fd !== "number" || fd < 0) return undefined;
  try {
    return fstatSync(fd).isFIFO() ? fd : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A child's pipe that this process must never read from, because it is handed to another one:
 * Node starts reading a pipe the moment it creates its socket (stopped here before the event loop
 * polls it, so in the spawn's own turn nothing has been read), and resumes every still readable
 * pipe of a child when the child exits (marking it not readable keeps it out of that). Whatever it
 * read would be lost to the process the pipe was given to.
 */
function untouched(pipe: Readable): Readable {
  (pipe as { _handle?: { readStop?: () => number } })._handle?.readStop?.();
  (pipe as { readable: boolean }).readable = false;
  return pipe;
}

function buildExit(
  info: { code: number | null; signal: NodeJS.Signals | null } | undefined,
  spawnError: string | undefined,
  timedOut: boolean,
  durationMs: number,
): ExecExit {
  const base = { timedOut, oomKilled: false, durationMs: Math.round(durationMs) };
  if (spawnError !== undefined || info === undefined) {
    return { ...base, exitCode: 127, signal: "", spawnError: spawnError ?? "SPAWN_FAILED" };
  }
  if (info.signal) {
    return { ...base, exitCode: 128 + (osConstants.signals[info.signal] ?? 0), signal: info.signal };
  }
  return { ...base, exitCode: info.code ?? 0, signal: "" };
}

/**
 * Signals every process that carries the execution's marks: the marker variable in its
 * environment, or the marker descriptor at fd 3. This catches children that left the process
 * group (setsid, a double fork) and, through the descriptor, those that also cleared their
 * environment (`env -i`, `exec -c`). A process that does all of that and closes fd 3 as well
 * escapes this sweep; in a container the sandbox-wide sweep (`sweepAll`) still ends it. The caller
 * does not wait for the sweep (a child still holding the output pipes keeps the call open until
 * the sweep reaches it). With `skipGroup`, members of that process group are left out: the group
 * signal has reached them already. One that moved into the group after that signal misses this
 * one; the SIGKILL that follows the grace never skips. `unmarked` (0 for none) is a pid known to
 * carry no marks (the launcher's waiting spare, forked after the command): the probes skip it,
 * unless the pid counter wrapped around since the command started (a pid may then be anything).
 */
async function killMarked(
  marks: { env: string; link: string | undefined },
  sig: NodeJS.Signals,
  since: number,
  skipGroup?: number,
  unmarked = 0,
): Promise<void> {
  const needle = Buffer.from(`${EXEC_MARKER_VAR}=${marks.env}\0`);
  const last = lastPid();
  // No pid was handed out since `since` was (a window that starts after the command itself).
  if (last === since - 1) return;
  // The usual case: the command forked nothing that outlived it, and the window holds a few pids,
  // most of them gone. Checked at once: a failed system call costs a few microseconds, and the
  // error an asynchronous one builds (with its stack) far more.
  if (last >= since && last - since < SYNC_PROBE_LIMIT) {
    quietly(() => {
      for (let pid = since; pid <= last; pid++) {
        if (pid === process.pid || pid === unmarked || !markedNow(pid, marks.link, needle)) continue;
        if (skipGroup !== undefined && processGroupNow(pid) === skipGroup) continue;
        try {
          process.kill(pid, sig);
        } catch {
          // Gone, or not ours to signal.
        }
      }
    });
    return;
  }
  const isMarked = async (pid: number): Promise<boolean> => {
    // The descriptor first (one readlink); the environment only when that does not tell.
    if (marks.link !== undefined && (await readlink(`/proc/${pid}/fd/3`).catch(() => "")) === marks.link) return true;
    return (await readFile(`/proc/${pid}/environ`).catch(() => Buffer.alloc(0))).includes(needle);
  };
  // Linux hands out pids in increasing order, so every descendant of the command has a pid from
  // the command's own on, unless the pid counter wrapped around since. Only the processes that
  // live are probed: /proc lists them in one read, where probing a window by number costs two
  // reads of the thread pool for every pid in it that is gone, and on a busy host (other
  // workspaces' commands) most of a window of hundreds is.
  let entries: string[];
  try {
    entries = await readdir("/proc");
  } catch {
    return;
  }
  const wrapped = !(last >= since);
  const pids = entries.filter((e) => /^\d+$/.test(e)).map(Number).filter((pid) => pid !== process.pid && (wrapped || (pid >= since && pid !== unmarked)));
  // Asynchronous reads in small batches: the sweep never blocks the event loop, however many
  // processes the host runs.
  for (let i = 0; i < pids.length; i += 32) {
    await Promise.all(
      pids.slice(i, i + 32).map(async (pid) => {
        try {
          if (!(await isMarked(pid))) return;
          if (skipGroup !== undefined && (await processGroup(pid)) === skipGroup) return;
          process.kill(pid, sig);
        } catch {
          // Gone, or not ours to signal.
        }
      }),
    );
  }
}

/** The process group of `pid` (field 5 of /proc/<pid>/stat, after the command name), NaN if unknown. */
async function processGroup(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
}

/** How much before its deadline by the precise clock a timeout timer may fire and still count. */
const EARLY_TIMER_SLACK_MS = 250;

/** A pid window smaller than this is probed synchronously, pid by pid (see killMarked). */
const SYNC_PROBE_LIMIT = 8;

/**
 * Runs `fn` with errors built without a stack trace: for system calls whose failure is an
 * expected answer (ESRCH, ENOENT), where capturing the stack is most of their cost.
 */
function quietly(fn: () => void): void {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    fn();
  } catch {
    // The expected failure.
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/** `isMarked` at once: the descriptor, then the environment; false for a process that is gone. */
function markedNow(pid: number, link: string | undefined, needle: Buffer): boolean {
  if (link !== undefined) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/3`) === link) return true;
    } catch {
      // No fd 3, or no such process: the environment tells.
    }
  }
  try {
    return readFileSync(`/proc/${pid}/environ`).includes(needle);
  } catch {
    return false;
  }
}

/** `processGroup` at once. */
function processGroupNow(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
  } catch {
    return Number.NaN;
  }
}

/**
 * The most recently allocated pid of this pid namespace (the last field of /proc/loadavg), NaN if
 * unknown. The file stays open and is read again from its start: one system call, not four.
 */
function lastPid(): number {
  try {
    loadavgFd ??= openSync("/proc/loadavg", "r");
    const n = readSync(loadavgFd, loadavgBuffer, 0, loadavgBuffer.length, 0);
    const text = loadavgBuffer.toString("latin1", 0, n).trimEnd();
    return Number(text.slice(text.lastIndexOf(" ") + 1));
  } catch {
    if (loadavgFd !== undefined) closeSync(loadavgFd);
    loadavgFd = undefined;
    return Number.NaN;
  }
}
let loadavgFd: number | undefined;
const loadavgBuffer = Buffer.alloc(256);

/** The cgroup's cumulative OOM-kill count, 0 when unknown. */
function readOomKills(): number {
  // cgroup v2 (memory.events), then cgroup v1 (memory.oom_control).
  for (const file of ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]) {
    try {
      const m = /^oom_kill (\d+)$/m.exec(readFileSync(file, "utf8"));
      if (m) return Number(m[1]);
    } catch {
      // Not this cgroup version.
    }
  }
  return 0;
}
