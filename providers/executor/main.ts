/**
 * The executor: runs commands and file operations for the server, reading frames from stdin and
 * writing frames to stdout (protocol.ts), and never anything else to stdout. It is the main
 * process of every container sandbox (under the init that reaps zombies) and the local
 * provider's child process, so supervision and file semantics are identical everywhere.
 *
 * In a sandbox (`--sandbox --uid U --gid G`) it starts as root with only the capabilities to
 * change identity and to fix the workspace's owner, and keeps real uid 0 while running with
 * effective uid U: file operations therefore run with the sandbox user's rights, and since its
 * credentials changed, the kernel marks it non-dumpable and a process of user U can neither
 * signal it (real and saved uid are 0), trace it, nor open its /proc entries (the channel's
 * descriptors, its memory). Commands are spawned with full uid/gid U: the spawn alone briefly
 * regains effective root, and because every file operation here is synchronous on this one
 * thread, none runs during that window.
 *
 * Runs with the server's own Node binary and this directory bind-mounted read-only, so images
 * need nothing but a shell.
 */
import { chownSync, closeSync, mkdtempSync, openSync, readdirSync, readFileSync, readlinkSync, readSync, rmSync, statSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { readdir } from "node:fs/promises";
import type { Readable, Writable } from "node:stream";
import { parseArgs } from "node:util";
import { checkExecRequest, checkOpRequest } from "./check.ts";
import { Fault } from "./fault.ts";
import { Jail, WORKSPACE_ROOT } from "./jail.ts";
import { JailedFs, type PendingWrite } from "./jailed-fs.ts";
import { type FileRules, guardFor } from "./sensitive-files.ts";
import { findPerl, Launcher, wrapCommand } from "./launcher.ts";
import { type LaunchSpec, type RunningProcess, runProcess } from "./process-runner.ts";
import { Sealer } from "./seal.ts";
import { loadManifest, loadPolicyLayer, type ProgramRules, ProgramSet } from "./programs.ts";
import { CONTROL_OP, type ExecRequest, F, FrameReader, FROM_SERVER, LIFETIME_FRAMES, MAX_CHUNK, type OpRequest, PARKED_MARKER, SIGNALS, STDIN_BUFFER, type TerminalSize, TUNNEL_FRAMES, TUNNEL_ID_BASE, WINDOW, writeFrame } from "./protocol.ts";
import { encodeLines } from "./text-channel.ts";
import { Tunnels } from "./tunnels.ts";
import type { ExecEvent } from "./types.ts";
import { executorVersion } from "./version.ts";

const { values: args } = parseArgs({
  options: {
    /** Count cgroup OOM kills: only meaningful with a cgroup of our own (a container). */
    "detect-oom": { type: "boolean" },
    /** Running as a sandbox's main process: one workspace at /workspace, sandbox-wide sweeps. */
    sandbox: { type: "boolean" },
    uid: { type: "string" },
    gid: { type: "string" },
    /**
     * What this sandbox enforces for its workspace's agent type, fixed when the sandbox was made:
     * base64url JSON `{ programs?: ProgramRules, files?: FileRules }` (programs.ts, seal.ts).
     */
    enforce: { type: "string" },
    /** How commands start outside a sandbox: "launcher" (a resident one per workspace, launcher.ts) or "spawn". */
    launcher: { type: "string" },
    /**
     * Ask the server to let this process exit after this many ms with nothing to do (0: never).
     * Only under the sandbox's wrapper (protocol.ts EXECUTOR_WRAPPER), which starts it again on WAKE.
     */
    "idle-exit-ms": { type: "string" },
    /** File tools' writes reach the disk before they are answered (a VM: see JailedFs.durable). */
    "durable-writes": { type: "boolean" },
    /**
     * Load, then wait for the workspace's own arguments (uid, gid, enforce) on stdin before
     * serving (`parkedArguments`): a VM's executor is started ahead of the connection that uses it
     * (providers/microvm-guest.ts), and may be saved in a template snapshot while it waits.
     */
    parked: { type: "boolean" },
    /** Write the frame stream as base64 lines (text-channel.ts): for a channel that carries only text (E2B). */
    "stdout-base64": { type: "boolean" },
  },
  strict: true,
});
/** Where frames go: stdout itself, or its base64 lines. */
const out: Writable = args["stdout-base64"] === true ? encodeLines(process.stdout) : process.stdout;
const SANDBOX = args.sandbox === true;
const VERSION = Buffer.from(executorVersion());

/** What only the workspace decides: its user and its enforcement (the command line's, or a parked executor's line). */
interface WorkspaceArgs {
  uid?: string;
  gid?: string;
  enforce?: string;
  /** No command has run in this sandbox yet (its first executor): there is nothing to sweep. */
  fresh?: boolean;
}

/** Privilege handling: `privileged` runs a spawn with effective root; identity outside a sandbox. */
function makeIdentity(w: WorkspaceArgs): { user: { uid: number; gid: number } | undefined; privileged: (<T>(fn: () => T) => T) | undefined } {
  const uid = Number(w.uid);
  const gid = Number(w.gid);
  // Outside a sandbox, or told to run commands as root (AGENT_WORKSPACE_CONTAINER_UID=0), there is
  // no identity to switch to.
  if (!SANDBOX || process.getuid?.() !== 0 || !(uid > 0) || !(gid >= 0)) return { user: undefined, privileged: undefined };
  // A fresh volume (or an image without /workspace) may leave the root to root: hand it over.
  const st = statSync(WORKSPACE_ROOT);
  if (st.uid !== uid || st.gid !== gid) chownSync(WORKSPACE_ROOT, uid, gid);
  const setgroups = process.setgroups as (groups: number[]) => void;
  const setegid = process.setegid as (id: number) => void;
  const seteuid = process.seteuid as (id: number) => void;
  setgroups([gid]);
  setegid(gid);
  seteuid(uid);
  const privileged = <T>(fn: () => T): T => {
    seteuid(0);
    setegid(0);
    try {
      return fn();
    } finally {
      setegid(gid);
      seteuid(uid);
    }
  };
  return { user: { uid, gid }, privileged };
}

/** The sandbox's enforcement (see the `enforce` argument); empty outside a sandbox. */
function parseEnforcement(enforce: string | undefined): { programs?: ProgramRules; files?: FileRules } {
  if (enforce === undefined) return {};
  const parsed = JSON.parse(Buffer.from(enforce, "base64url").toString("utf8")) as { programs?: ProgramRules; files?: FileRules };
  const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === "string");
  if (parsed.programs !== undefined && !(strings(parsed.programs.allow) && strings(parsed.programs.deny))) throw new Error("--enforce: malformed programs");
  if (parsed.files !== undefined && !(strings(parsed.files.deny) && strings(parsed.files.writeProtected))) throw new Error("--enforce: malformed files");
  return parsed;
}

/**
 * The programs this sandbox's commands may run, when its policy is an allowlist. A sandbox told
 * to enforce one that cannot (no manifest: the image was not prepared) runs no command at all.
 */
function loadPrograms(): { set: ProgramSet } | { error: string } | undefined {
  if (enforcement.programs === undefined) return undefined;
  if (!SANDBOX || identity.user === undefined) return { error: "programs can be enforced only in a sandbox whose commands run as another user" };
  try {
    // A policy layer made for exactly these rules lets commands start without setpriv.
    return { set: new ProgramSet(loadManifest(), enforcement.programs, loadPolicyLayer(enforcement.programs)?.gid) };
  } catch (err) {
    return { error: `the sandbox's image was not prepared for an allowlist (${err instanceof Error ? err.message : String(err)})` };
  }
}

// Set by `configure` (below), before the first frame is read.
let identity: ReturnType<typeof makeIdentity>;
let enforcement: ReturnType<typeof parseEnforcement>;
let programs: ReturnType<typeof loadPrograms>;
/** The sandbox's file rules for sweeps: the server's lists and the agent type's, fixed with the sandbox. */
let sweepGuard: ReturnType<typeof guardFor>;
/**
 * The Perl that workspace launchers run on (launcher.ts): outside a sandbox, where commands run as
 * this process's user, unless told to spawn; undefined where commands are spawned.
 */
let perl: string | undefined;
/** Marker descriptors (a deleted empty file per command) live in a private directory. */
let markerDir: string | undefined;

/** Takes on the workspace's arguments. */
function configure(w: WorkspaceArgs): void {
  identity = makeIdentity(w);
  enforcement = parseEnforcement(w.enforce);
  programs = loadPrograms();
  sweepGuard = guardFor(enforcement.files);
  perl = !SANDBOX && identity.user === undefined && args.launcher !== "spawn" ? findPerl() : undefined;
  try {
    markerDir = mkdtempSync(path.join(tmpdir(), "aw-exec-"));
  } catch {
    markerDir = undefined;
  }
}

/** Jailed file operations per workspace root (one, /workspace, in a sandbox). */
const roots = new Map<string, JailedFs>();
function fsFor(root: string, rules: unknown): JailedFs {
  if (SANDBOX && root !== WORKSPACE_ROOT) throw new Fault("INVALID_ARGUMENT", "this sandbox serves /workspace only");
  const strings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");
  const r = rules as { deny?: unknown; writeProtected?: unknown } | undefined;
  if (r !== undefined && (typeof r !== "object" || r === null || !strings(r.deny) || !strings(r.writeProtected))) {
    throw new Fault("INVALID_ARGUMENT", "malformed sensitive-file rules");
  }
  let fs = roots.get(root);
  if (!fs) {
    try {
      fs = new JailedFs(new Jail(root), undefined, { durable: args["durable-writes"] === true });
    } catch {
      throw new Fault("WORKSPACE_NOT_READY", "The workspace directory is missing");
    }
    roots.set(root, fs);
  }
  // Operations run synchronously from here on: no other request changes the guard meanwhile.
  fs.guard = guardFor(r as FileRules | undefined);
  return fs;
}

/** Sealers per workspace root (seal.ts): only in a sandbox, where the executor can act as root. */
const sealers = new Map<string, Sealer>();
function sealerFor(root: string, fs: JailedFs): Sealer | undefined {
  const privileged = identity.privileged;
  if (!SANDBOX || privileged === undefined) return undefined;
  let s = sealers.get(root);
  if (s === undefined) {
    s = new Sealer(() => fs.jail.rootFd, privileged);
    sealers.set(root, s);
  }
  return s;
}

/** Seals what the command that just ended left behind (in a sandbox); a failure is logged, never the command's. */
function sweepAfter(root: string): void {
  const fs = roots.get(root);
  const sealer = fs && sealerFor(root, fs);
  if (!sealer) return;
  try {
    sealer.seal(sweepGuard, "sweep");
  } catch (err) {
    process.stderr.write(`executor: sweep failed: ${err instanceof Error ? err.message : String(err)}\n`);
  }
}

/** Launchers by workspace root and limits command (a workspace's limits fix its launcher). */
const launchers = new Map<string, Launcher>();
function launcherFor(root: string, limits: string[], path: string): Launcher | undefined {
  if (perl === undefined) return undefined;
  const key = JSON.stringify([root, limits]);
  let l = launchers.get(key);
  if (l?.alive) return l;
  l = new Launcher(perl, limits, path, (line) => process.stderr.write(`executor: launcher of ${root}: ${line}\n`));
  launchers.set(key, l);
  return l;
}

/** Ends the launchers of `root` (its workspace closes). */
function releaseLaunchers(root: string): void {
  for (const [key, l] of launchers) {
    if ((JSON.parse(key) as string[])[0] !== root) continue;
    launchers.delete(key);
    l.close();
  }
}

/** A command or operation in progress. */
interface Call {
  abort: AbortController;
  /** Streamed bytes sent minus bytes acknowledged. */
  inFlight: number;
  wake: (() => void) | undefined;
  /** A write waiting for its content. */
  upload?: PendingWrite;
  isCommand: boolean;
  /** Ended by `forget`: it sends nothing more. */
  forgotten?: boolean;
  /** A running command's input (CONTROL), once it started. */
  running?: RunningProcess & { pty: boolean; root: string; env: Record<string, string> };
}

const calls = new Map<number, Call>();
/** Calls a `forget` ended: nothing of theirs is sent any more (ids of a server connection before this one's). */
const forgotten = new Set<number>();
let stdoutBlocked: Promise<void> | undefined;

function send(type: number, id: number, payload?: Uint8Array): Promise<void> | undefined {
  if (forgotten.has(id)) return stdoutBlocked;
  const ok = writeFrame(out, type, id, payload);
  if (!ok && !stdoutBlocked) {
    stdoutBlocked = new Promise<void>((resolve) =>
      out.once("drain", () => {
        stdoutBlocked = undefined;
        resolve();
      }),
    );
  }
  return stdoutBlocked;
}

const json = (v: unknown) => Buffer.from(JSON.stringify(v));

/** The egress proxy's tunnels out of this sandbox (tunnels.ts). */
const tunnels = new Tunnels(send);

/** LISTEN: the proxy listener on the sandbox's loopback. */
async function listen(id: number, payload: Buffer): Promise<void> {
  calls.set(id, { abort: new AbortController(), inFlight: 0, wake: undefined, isCommand: false });
  try {
    const { port, socket } = JSON.parse(payload.toString("utf8")) as { port?: unknown; socket?: unknown };
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error("LISTEN wants { port } from 1 to 65535");
    if (socket !== undefined && (typeof socket !== "string" || !socket.startsWith("/"))) throw new Error("LISTEN's socket is an absolute path");
    finish(id, F.RESULT, json(await tunnels.listen(port, socket)));
  } catch (err) {
    fail(id, err);
  }
}

/** DIAL: a connection to a port on the sandbox's loopback, carried as a tunnel (tunnels.ts `dial`). */
async function dial(id: number, payload: Buffer): Promise<void> {
  calls.set(id, { abort: new AbortController(), inFlight: 0, wake: undefined, isCommand: false });
  try {
    const { port } = JSON.parse(payload.toString("utf8")) as { port?: unknown };
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error("DIAL wants { port } from 1 to 65535");
    finish(id, F.RESULT, json({ tunnel: await tunnels.dial(port, id) }));
  } catch (err) {
    fail(id, err);
  }
}

/** Sends streamed bytes of `call`, waiting for credit first. False when the call was abandoned. */
async function sendStreamed(call: Call, type: number, id: number, payload: Uint8Array): Promise<boolean> {
  while (call.inFlight >= WINDOW && !call.abort.signal.aborted) await new Promise<void>((r) => (call.wake = r));
  if (call.abort.signal.aborted) return false;
  call.inFlight += payload.length;
  await send(type, id, payload);
  return true;
}

/** Ends a call with its final frame. */
function finish(id: number, type: number, payload: Uint8Array): void {
  if (forgotten.has(id)) return;
  calls.delete(id);
  lastActivity = Date.now();
  void send(type, id, payload);
}

function fail(id: number, err: unknown): void {
  if (err instanceof Fault) finish(id, F.FAULT, json(err.toInfo()));
  else finish(id, F.ERROR, json({ message: err instanceof Error ? err.message : String(err) }));
}

/** Kills every process of the sandbox user when the command `id` ended and no other command runs (in a sandbox only). */
function sweepSandbox(id: number): void {
  if (!SANDBOX) return;
  for (const [other, c] of calls) if (other !== id && c.isCommand && !c.abort.signal.aborted) return;
  // Not the sandbox's main process (started over a platform's exec or process API, beside
  // processes of its own: E2B's envd, a pod's pause): kill(-1) would reach those (this process's
  // real uid is root), so the sandbox user's processes are ended one by one instead.
  if (process.ppid !== 1) {
    sweepUser();
    return;
  }
  // kill(-1) reaches every process this one may signal but itself and init: the commands' user.
  // One pass suffices in Linux (a process with SIGKILL pending cannot finish a fork); a few more
  // cover a fork bomb caught between passes.
  for (let round = 0; round < 5; round++) {
    try {
      process.kill(-1, "SIGKILL");
    } catch {
      return; // ESRCH: nothing left.
    }
    if (!othersLeft()) return;
  }
}

/** Ends every process of the sandbox user (none without one), in a few passes for a fork bomb's late children. */
function sweepUser(): void {
  const uid = identity.user?.uid;
  if (uid === undefined) return;
  for (let round = 0; round < 5; round++) {
    let found = false;
    try {
      for (const e of readdirSync("/proc")) {
        if (!/^\d+$/.test(e) || Number(e) === process.pid || statSync(`/proc/${e}`, { throwIfNoEntry: false })?.uid !== uid) continue;
        found = true;
        try {
          process.kill(Number(e), "SIGKILL");
        } catch {
          // Gone meanwhile.
        }
      }
    } catch {
      return;
    }
    if (!found) return;
  }
}

/**
 * True when a process of the sandbox user (other than init and this one) still exists. Others are
 * not its to end: a VM's kernel threads and its relays (microvm-guest.ts) are in /proc too, and are
 * told apart by their owner without reading their status.
 */
function othersLeft(): boolean {
  const uid = identity.user?.uid;
  try {
    return readdirSync("/proc").some((e) => {
      if (!/^\d+$/.test(e) || e === "1" || Number(e) === process.pid) return false;
      if (uid !== undefined && statSync(`/proc/${e}`, { throwIfNoEntry: false })?.uid !== uid) return false;
      return !isZombie(e);
    });
  } catch {
    return false;
  }
}

function isZombie(pid: string): boolean {
  try {
    return /^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return true;
  }
}

/**
 * How a command of the workspace at `root` is launched: its working directory opened by the jail,
 * a fresh marker descriptor, the sandbox identity. Both descriptors are closed right after the
 * spawn (the child holds its own), or by `release` if nothing was spawned.
 */
function launchSpec(root: string, cwd: string, env: Record<string, string>, extraPrograms: string[] = []): LaunchSpec & { release(): void } {
  if (programs !== undefined && "error" in programs) throw new Fault("WORKSPACE_NOT_READY", `No command can run: ${programs.error}`);
  const how = programs?.set?.launch(extraPrograms);
  const groups = how && "groups" in how && programs?.set ? { setpriv: programs.set.setpriv, env: programs.set.env, gids: how.groups } : undefined;
  // One primary group is the spawn's own identity switch: no setpriv.
  const user = how && "gid" in how && identity.user ? { uid: identity.user.uid, gid: how.gid } : identity.user;
  const dirFd = fsFor(root, undefined).openDirectory(cwd);
  let open = true;
  let marker: { fd: number; link: string } | undefined;
  try {
    if (markerDir !== undefined) {
      const file = path.join(markerDir, `m${++markers}`);
      closeSync(openSync(file, "wx", 0o400));
      marker = { fd: openSync(file, "r"), link: `${file} (deleted)` };
      unlinkSync(file);
    }
  } catch (err) {
    closeSync(dirFd);
    throw err;
  }
  const release = () => {
    if (!open) return;
    open = false;
    closeSync(dirFd);
    if (marker !== undefined) closeSync(marker.fd);
  };
  return { cwd: `/proc/self/fd/${dirFd}`, env, user, privileged: identity.privileged, groups, marker, onSpawn: release, release };
}
let markers = 0;

/**
 * Commands' stdout pipes handed to the server (ExecRequest.passStdout), by call id: this process's
 * descriptor stays open until the server has opened its own (TAKEN, which it sends for every
 * STARTED that names one).
 */
const handedStdout = new Map<number, Readable>();

/** Closes the pipe handed over by the call `id`, if any (TAKEN, or the call never said STARTED). */
function releaseStdout(id: number): void {
  handedStdout.get(id)?.destroy();
  handedStdout.delete(id);
}

async function execute(id: number, req: ExecRequest): Promise<void> {
  const call: Call = { abort: new AbortController(), inFlight: 0, wake: undefined, isCommand: true };
  calls.set(id, call);
  // A stale hand-over under this id (the server never uses an id twice on one connection, and a
  // new connection's server forgets the calls before) is closed.
  releaseStdout(id);
  /** The descriptor of this command's stdout, handed to the server, until STARTED named it. */
  let handed: number | undefined;
  try {
    // A command with input is spawned (a launcher gives its commands no stdin), under a terminal
    // when asked (ptyArgv), with the programs that takes.
    const input = req.stdin === true || req.pty !== undefined;
    const argv = req.pty ? ptyArgv(req.argv, req.pty, req.env.SHELL) : req.argv;
    const env = req.pty ? { ...req.env, SHELL: "/bin/sh" } : req.env;
    const spec = launchSpec(req.root, req.cwd, env, req.pty ? [...(req.programs ?? []), "script", "stty"] : req.programs);
    const limits = req.limits ?? [];
    let events: AsyncGenerator<ExecEvent>;
    try {
      const launcher = input ? undefined : launcherFor(req.root, limits, req.env.PATH ?? "/usr/bin:/bin");
      events = runProcess({
        ...spec,
        launcher,
        stdin: input,
        onStarted: (running) => (call.running = { ...running, pty: req.pty !== undefined, root: req.root, env: req.env }),
        argv: launcher ? argv : wrapCommand(limits, argv, req.env.PATH),
        spawnArgv: () => wrapCommand(limits, argv, req.env.PATH),
        timeoutMs: req.timeoutMs,
        killGraceMs: req.killGraceMs,
        signal: call.abort.signal,
        detectOom: args["detect-oom"] === true,
        sweepAll: () => sweepSandbox(id),
        takeStdout: req.passStdout
          ? (stdout, fd) => {
              handed = fd;
              handedStdout.set(id, stdout);
            }
          : undefined,
      });
      // The generator spawns on its first step: take it now so the spec's descriptors close.
      events = prepend(await events.next(), events);
    } finally {
      spec.release();
    }
    // Only a head of each stream is sent when the server keeps no more (ExecRequest.keepBytes);
    // the rest is still read from the pipes, and counted.
    const keep = Number.isSafeInteger(req.keepBytes) && (req.keepBytes as number) >= 0 ? (req.keepBytes as number) : undefined;
    const totals = { stdout: 0, stderr: 0 };
    for await (const ev of events) {
      switch (ev.type) {
        case "started":
          if (req.started !== false || req.passStdout) {
            await send(F.STARTED, id, json({ startedAt: ev.startedAt.toISOString(), pid: ev.pid, ...(handed === undefined ? {} : { stdoutFd: handed }) }));
            // The server knows of the pipe now: its TAKEN closes it. Not before, not even for a
            // call it killed: the descriptor's number, free again, could name another pipe by the
            // time the server opens it.
            handed = undefined;
          }
          break;
        case "stdout":
        case "stderr": {
          const type = ev.type === "stdout" ? F.STDOUT : F.STDERR;
          if (keep === undefined) {
            await sendStreamed(call, type, id, ev.data);
            break;
          }
          const sent = totals[ev.type];
          totals[ev.type] += ev.data.length;
          if (sent < keep) await sendStreamed(call, type, id, sent + ev.data.length <= keep ? ev.data : ev.data.subarray(0, keep - sent));
          break;
        }
        case "exited":
          // Before the answer: the next command must not find what this one left unsealed.
          if (req.sweep !== false) sweepAfter(req.root);
          // Killed because this executor is stopping (a signal to the server's process group
          // reaches it before the server has ended its calls): that is no answer of the command's.
          if (signalled) fail(id, new Fault("PROVIDER_UNAVAILABLE", "the workspace's executor was stopped by a signal while the command ran; the command was killed"));
          else finish(id, F.EXITED, json(keep === undefined ? ev.exit : { ...ev.exit, outputBytes: totals }));
          break;
      }
    }
  } catch (err) {
    fail(id, err);
  } finally {
    // A pipe the server never heard of (no STARTED went out) is not waited for.
    if (handed !== undefined) releaseStdout(id);
    if (calls.get(id) === call) calls.delete(id);
    if (call.forgotten) forgotten.delete(id);
  }
}

/** `forget`: ends every call but `self`; none of them sends anything more. */
function forgetCalls(self: number): number {
  let ended = 0;
  for (const [id, c] of calls) {
    if (id === self) continue;
    calls.delete(id);
    c.forgotten = true;
    forgotten.add(id);
    c.abort.abort();
    c.wake?.();
    c.upload?.abort();
    ended++;
  }
  // Their server is gone: it opens no pipe of theirs any more.
  for (const id of handedStdout.keys()) if (id !== self) releaseStdout(id);
  return ended;
}

/** A word for sh, single-quoted. */
const shQuote = (word: string) => `'${word.replaceAll("'", "'\\''")}'`;

/**
 * `argv` under a pseudo-terminal of `size`: util-linux `script` (in every Debian image: bsdutils
 * is essential) makes the terminal, runs `$SHELL -c` on its slave in a session of its own and
 * relays between it and its own stdin and stdout; its stdin's end becomes the terminal's
 * end-of-file. `script` runs the line with SHELL=/bin/sh; the command gets the caller's SHELL back.
 */
function ptyArgv(argv: string[], size: TerminalSize, shell: string | undefined): string[] {
  const restore = shell === undefined ? "unset SHELL; " : `SHELL=${shQuote(shell)}; export SHELL; `;
  const line = `stty rows ${size.rows} cols ${size.cols} 2>/dev/null; ${restore}exec ${argv.map(shQuote).join(" ")}`;
  return ["script", "--quiet", "--flush", "--return", "--command", line, "/dev/null"];
}

/**
 * The terminal a `script` process (pid) made: its child's stdin, found among the processes whose
 * parent it is. Undefined while the child has not started yet.
 */
function terminalOf(pid: number): string | undefined {
  let children: string[] = [];
  try {
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean);
  } catch {
    // No children file (some kernels): look at every process's parent.
  }
  if (children.length === 0) {
    try {
      children = readdirSync("/proc").filter((e) => /^\d+$/.test(e) && readFileSync(`/proc/${e}/stat`, "utf8").replace(/^.*\) /s, "").split(" ")[1] === String(pid));
    } catch {
      children = [];
    }
  }
  for (const child of children) {
    try {
      const tty = readlinkSync(`/proc/${child}/fd/0`);
      if (tty.startsWith("/dev/pts/")) return tty;
    } catch {
      // Gone, or not ours.
    }
  }
  return undefined;
}

/** Sets the size of the terminal of a command started with `pty`, with stty as the command's user. */
async function resizeTerminal(running: NonNullable<Call["running"]>, rows: number, cols: number): Promise<void> {
  let tty: string | undefined;
  for (let i = 0; i < 50 && running.pid !== undefined && (tty = terminalOf(running.pid)) === undefined; i++) await new Promise((r) => setTimeout(r, 20));
  if (tty === undefined) throw new Fault("PROCESS_NOT_RUNNING", "The process's terminal is gone");
  const spec = launchSpec(running.root, "", running.env, ["stty"]);
  let exit: { exitCode: number } | undefined;
  let stderr = "";
  try {
    for await (const ev of runProcess({ ...spec, argv: ["stty", "-F", tty, "rows", String(rows), "cols", String(cols)], timeoutMs: 10_000, killGraceMs: 1000 })) {
      if (ev.type === "stderr") stderr += Buffer.from(ev.data).toString("utf8");
      else if (ev.type === "exited") exit = ev.exit;
    }
  } finally {
    spec.release();
  }
  if (exit?.exitCode !== 0) throw new Fault("INTERNAL", "The terminal could not be resized", {}, new Error(stderr.slice(0, 300)));
}

/** CONTROL: input for a running command, answered by ACK in order. */
function control(id: number, payload: Buffer): void {
  if (payload.length < 5) violation("CONTROL without a number and an operation");
  const n = payload.readUInt32BE(0);
  const op = payload[4];
  const operand = payload.subarray(5);
  const ack = (err?: unknown) => {
    const head = Buffer.allocUnsafe(4);
    head.writeUInt32BE(n, 0);
    if (err === undefined) return void send(F.ACK, id, head);
    const fault = err instanceof Fault ? err : new Fault("INTERNAL", "The process's input failed", {}, err);
    void send(F.ACK, id, Buffer.concat([head, json(fault.toInfo())]));
  };
  const running = calls.get(id)?.running;
  if (running === undefined) return ack(new Fault("PROCESS_NOT_RUNNING", "The process has ended"));
  switch (op) {
    case CONTROL_OP.STDIN:
    case CONTROL_OP.CLOSE: {
      const stdin = running.stdin;
      if (stdin === undefined || stdin.writableEnded || stdin.destroyed) return ack(new Fault("STDIN_CLOSED", "The process's stdin is closed"));
      if (op === CONTROL_OP.CLOSE) {
        stdin.end();
        return ack();
      }
      // Answered when the pipe took the bytes, or at once while little waits for it: the writer
      // holds at most STDIN_BUFFER bytes here.
      let answered = false;
      const answer = (err?: unknown) => {
        if (answered) return;
        answered = true;
        ack(err === undefined || err === null ? undefined : new Fault("STDIN_CLOSED", "The process's stdin is closed", {}, err));
      };
      stdin.write(Buffer.from(operand), answer);
      if (stdin.writableLength <= STDIN_BUFFER) answer();
      return;
    }
    case CONTROL_OP.RESIZE:
      if (!running.pty) return ack(new Fault("NOT_A_TERMINAL", "The process has no terminal: start it with a pty"));
      if (operand.length !== 4) violation("RESIZE without rows and columns");
      return void resizeTerminal(running, operand.readUInt16BE(0), operand.readUInt16BE(2)).then(() => ack(), ack);
    case CONTROL_OP.SIGNAL: {
      const name = operand.toString("latin1");
      if (!SIGNALS.has(name)) return ack(new Fault("INVALID_ARGUMENT", `Unknown signal ${name.slice(0, 20)}`));
      running.kill(name as NodeJS.Signals);
      return ack();
    }
    default:
      violation(`CONTROL operation ${op}`);
  }
}

/** `first` (an already taken step of `rest`) followed by the rest. */
async function* prepend<T>(first: IteratorResult<T, void>, rest: AsyncGenerator<T, void>): AsyncGenerator<T, void> {
  if (first.done) return;
  yield first.value;
  yield* rest;
}

/** Entries' JSON sent in one ENTRIES frame, at most (well below the frame limit). */
const ENTRIES_BATCH_BYTES = 128 * 1024;

/**
 * How long a walk runs before it lets other calls' frames in and looks for its own KILL. By time,
 * not by count: under gVisor 2,048 entries took ~120 ms, which a command sent meanwhile waited out,
 * and so did the KILL of a change scan that had stopped reading past its bound.
 */
const WALK_SLICE_MS = 5;

/** Sends a list of entries in batches of bounded JSON size, then the result. */
async function sendEntries(call: Call, id: number, entries: Iterable<unknown>, result: unknown = {}): Promise<void> {
  let batch: string[] = [];
  let bytes = 0;
  let sliceEnds = performance.now() + WALK_SLICE_MS;
  const flush = async () => {
    const ok = await sendStreamed(call, F.ENTRIES, id, Buffer.from(`[${batch.join(",")}]`));
    batch = [];
    bytes = 0;
    return ok;
  };
  for (const e of entries) {
    const text = JSON.stringify(e);
    if (bytes + text.length > ENTRIES_BATCH_BYTES && batch.length > 0 && !(await flush())) return;
    batch.push(text);
    bytes += text.length + 1;
    // A long walk leaves room for other calls' frames between slices.
    if (performance.now() >= sliceEnds) {
      await new Promise((r) => setImmediate(r));
      if (call.abort.signal.aborted) return;
      sliceEnds = performance.now() + WALK_SLICE_MS;
    }
  }
  if (batch.length > 0 && !(await flush())) return;
  finish(id, F.RESULT, json(result));
}

/** Sends bytes in chunks, then the result. */
async function sendBytes(call: Call, id: number, bytes: Uint8Array, result: unknown): Promise<void> {
  for (let at = 0; at < bytes.length; at += MAX_CHUNK) {
    if (!(await sendStreamed(call, F.CHUNK, id, bytes.subarray(at, at + MAX_CHUNK)))) return;
  }
  finish(id, F.RESULT, json(result));
}

async function operate(id: number, req: OpRequest): Promise<void> {
  const call: Call = { abort: new AbortController(), inFlight: 0, wake: undefined, isCommand: false };
  calls.set(id, call);
  try {
    const fs = req.op === "release" || req.op === "forget" ? (undefined as unknown as JailedFs) : fsFor(req.root, req.rules);
    switch (req.op) {
      case "resolve":
        return finish(id, F.RESULT, json({ rel: fs.resolve(req.rel) }));
      case "stat":
        return finish(id, F.RESULT, json(fs.stat(req.rel)));
      case "readFile": {
        const bytes = fs.readFile(req.rel, req.maxBytes);
        return await sendBytes(call, id, bytes, { size: bytes.length });
      }
      case "read": {
        const r = fs.read(req.rel, req.maxBytes);
        const head = { kind: r.kind, rel: r.rel, size: r.size };
        return r.kind === "file" ? await sendBytes(call, id, r.bytes, head) : await sendEntries(call, id, r.entries, head);
      }
      case "readRanges": {
        const parts = fs.readRanges(req.rel, req.ranges);
        return await sendBytes(call, id, Buffer.concat(parts), { lengths: parts.map((p) => p.length) });
      }
      case "list": {
        const { rel, entries } = fs.list(req.rel, req.namesOnly === true);
        return await sendEntries(call, id, entries, { rel });
      }
      case "walk":
        return await sendEntries(call, id, fs.walk(req.rel, { all: req.all === true, prune: req.prune ?? [] }));
      case "remove":
        fs.remove(req.rel);
        return finish(id, F.RESULT, json({}));
      case "release":
        // The workspace is going away: its root descriptor goes first.
        roots.get(req.root)?.jail.close();
        roots.delete(req.root);
        sealers.delete(req.root);
        releaseLaunchers(req.root);
        return finish(id, F.RESULT, json({}));
      case "forget":
        return finish(id, F.RESULT, json({ ended: forgetCalls(id) }));
      case "seal": {
        const sealer = sealerFor(req.root, fs);
        return finish(id, F.RESULT, json({ sealed: sealer ? sealer.seal(fs.guard, "place").sealed : 0 }));
      }
      case "write":
        // The content follows in DATA frames; END commits.
        call.upload = fs.beginWrite(req.rel);
        return;
    }
  } catch (err) {
    fail(id, err);
  }
}

function onData(id: number, payload: Buffer): void {
  const call = calls.get(id);
  if (!call?.upload) return;
  try {
    call.upload.write(payload);
  } catch (err) {
    call.upload = undefined;
    fail(id, err);
  }
}

function onEnd(id: number): void {
  const call = calls.get(id);
  if (!call?.upload) return;
  const upload = call.upload;
  call.upload = undefined;
  try {
    upload.commit();
    finish(id, F.RESULT, json({ created: upload.created }));
  } catch (err) {
    fail(id, err);
  }
}

/**
 * A parked executor's workspace arguments: five decimal digits giving the length of a JSON array
 * of `--uid`, `--gid` and `--enforce` with their values, then the array, read with blocking reads
 * of exactly that much, so not a byte after it is taken before the frame reader below.
 * End-of-file before it ends the process.
 */
function parkedArguments(): WorkspaceArgs {
  /** Exactly `n` bytes of stdin (a blocking read); end-of-file first ends the process. */
  const exactly = (n: number): Buffer => {
    const buf = Buffer.alloc(n);
    for (let at = 0; at < n; ) {
      let got: number;
      try {
        got = readSync(0, buf, at, n - at, null);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "EINTR") continue;
        throw err;
      }
      if (got === 0) process.exit(0);
      at += got;
    }
    return buf;
  };
  const length = Number(exactly(5).toString("latin1"));
  if (!Number.isInteger(length) || length <= 0) throw new Error("parked executor: malformed argument length");
  const line = JSON.parse(exactly(length).toString("utf8")) as unknown;
  if (!Array.isArray(line) || !line.every((a) => typeof a === "string")) throw new Error("parked executor: malformed arguments");
  const { values } = parseArgs({ args: line as string[], options: { uid: { type: "string" }, gid: { type: "string" }, enforce: { type: "string" }, fresh: { type: "boolean" } }, strict: true });
  return values;
}

// Start libuv's thread pool now (it starts lazily on the first asynchronous fs call). Later, a
// command may have used up the sandbox's process limit (a fork bomb), and a thread that cannot be
// created then aborts Node, taking the executor down with the bomb.
await readdir("/");

// Everything above is loaded and evaluated; a parked executor waits here for its workspace, with
// the server's own sensitive-file rules compiled (guardFor keeps them).
if (args.parked === true) {
  guardFor(undefined);
  process.stderr.write(`${PARKED_MARKER}\n`);
}
const workspace: WorkspaceArgs = args.parked === true ? parkedArguments() : args;
configure(workspace);

// A sandbox's executor starts with no command of its own: whatever of the sandbox user still runs
// was left by an executor before it that died (killed, OOM) mid-command. It goes now, before any
// new command meets it.
if (SANDBOX && workspace.fresh !== true) sweepSandbox(0);

const reader = new FrameReader(undefined, { skipWake: true });

/**
 * Exiting when idle (`--idle-exit-ms`): an idle sandbox then costs its wrapper shell, not a Node
 * process. After the idle time with no call, no proxy client and nothing unsent, the executor
 * sends IDLE; the server answers BYE when it has nothing in flight either, and from then on
 * writes nothing until the wrapper says GONE (this process has exited) or this one says STAY.
 * So every later byte waits in the pipe for the wrapper, which starts a new executor on WAKE.
 */
const IDLE_EXIT_MS = SANDBOX && Number(args["idle-exit-ms"]) > 0 ? Number(args["idle-exit-ms"]) : 0;
let lastActivity = Date.now();

function idleNow(): boolean {
  return calls.size === 0 && tunnels.active === 0 && stdoutBlocked === undefined && reader.buffered === 0 && !stopping;
}

function checkIdle(): void {
  const wait = lastActivity + IDLE_EXIT_MS - Date.now();
  if (wait > 0) return void setTimeout(checkIdle, wait).unref();
  // Asked again every idle time while idle: the server ignores IDLE while it has anything in flight.
  if (!idleNow()) lastActivity = Date.now();
  else void send(F.IDLE, 0);
  setTimeout(checkIdle, IDLE_EXIT_MS).unref();
}
if (IDLE_EXIT_MS > 0) setTimeout(checkIdle, IDLE_EXIT_MS).unref();

/** BYE: exit, unless work came meanwhile (then STAY). The wrapper then writes GONE. */
function onBye(last: boolean): void {
  if (!last || !idleNow()) {
    void send(F.STAY, 0);
    return;
  }
  // From here no byte of stdin is read: pause() stops the pipe's reads at once. Bytes already
  // read past BYE (none, unless the server broke its word) keep this process serving.
  process.stdin.pause();
  if (process.stdin.readableLength > 0) {
    process.stdin.resume();
    void send(F.STAY, 0);
    return;
  }
  stopping = true;
  tunnels.close();
  if (markerDir !== undefined) rmSync(markerDir, { recursive: true, force: true });
  // Whatever is still queued for stdout goes first (a pipe's writes are synchronous on Linux).
  out.write(new Uint8Array(0), () => process.exit(0));
}
/** The server sent something this executor cannot make sense of: say so and stop. */
function violation(message: string): never {
  process.stderr.write(`executor: protocol violation: ${message}\n`);
  process.exit(2);
}

process.stdin.on("data", (chunk: Buffer) => {
  lastActivity = Date.now();
  let frames;
  try {
    frames = reader.push(chunk);
  } catch (err) {
    violation(String(err));
  }
  for (const [i, frame] of frames.entries()) {
    if (!FROM_SERVER.has(frame.type)) violation(`frame type ${frame.type}`);
    if (TUNNEL_FRAMES.has(frame.type) !== frame.id >= TUNNEL_ID_BASE) violation(`frame type ${frame.type} for id ${frame.id}`);
    if (LIFETIME_FRAMES.has(frame.type) !== (frame.id === 0)) violation(`frame type ${frame.type} for id ${frame.id}`);
    if (frame.type === F.BYE) {
      onBye(i === frames.length - 1);
      continue;
    }
    if (TUNNEL_FRAMES.has(frame.type)) {
      tunnels.onFrame(frame.type, frame.id, frame.payload);
      continue;
    }
    switch (frame.type) {
      case F.LISTEN:
        if (calls.has(frame.id)) violation(`id ${frame.id} is in use`);
        void listen(frame.id, frame.payload);
        break;
      case F.DIAL:
        if (calls.has(frame.id)) violation(`id ${frame.id} is in use`);
        forgotten.delete(frame.id);
        void dial(frame.id, frame.payload);
        break;
      case F.EXEC:
      case F.OP: {
        if (calls.has(frame.id)) violation(`id ${frame.id} is in use`);
        // An id a forgotten call had is this call's now.
        forgotten.delete(frame.id);
        let parsed: unknown;
        try {
          parsed = JSON.parse(frame.payload.toString("utf8"));
          if (frame.type === F.EXEC) void execute(frame.id, checkExecRequest(parsed));
          else void operate(frame.id, checkOpRequest(parsed));
        } catch (err) {
          void send(F.ERROR, frame.id, json({ message: `bad ${frame.type === F.EXEC ? "EXEC" : "OP"}: ${err instanceof Error ? err.message : String(err)}` }));
        }
        break;
      }
      case F.DATA:
        onData(frame.id, frame.payload);
        break;
      case F.CONTROL:
        control(frame.id, frame.payload);
        break;
      case F.END:
        onEnd(frame.id);
        break;
      case F.TAKEN:
        releaseStdout(frame.id);
        break;
      case F.KILL: {
        const call = calls.get(frame.id);
        if (!call) break;
        call.abort.abort();
        call.wake?.();
        if (call.upload) {
          call.upload.abort();
          calls.delete(frame.id);
        }
        break;
      }
      case F.CREDIT: {
        const call = calls.get(frame.id);
        if (call && frame.payload.length >= 4) {
          call.inFlight = Math.max(0, call.inFlight - frame.payload.readUInt32BE(0));
          const w = call.wake;
          call.wake = undefined;
          w?.();
        }
        break;
      }
      case F.PING:
        void send(F.PONG, frame.id, VERSION);
        break;
    }
  }
});

/**
 * Stops everything and exits: every command's process tree is killed first (the commands live in
 * process groups of their own, so nothing else would end them). Run when the server goes away
 * for good (stdin closed; a container then stops and the server restarts it on next use), and on
 * SIGTERM, SIGINT or SIGHUP: a signal to the server's process group reaches this child too.
 */
let stopping = false;
/** Stopped by a signal, not by the server closing stdin. */
let signalled = false;
function stop(signal?: NodeJS.Signals): void {
  if (typeof signal === "string") signalled = true;
  if (stopping) return;
  stopping = true;
  tunnels.close();
  for (const c of calls.values()) {
    c.abort.abort();
    c.upload?.abort();
  }
  if (markerDir !== undefined) rmSync(markerDir, { recursive: true, force: true });
  setTimeout(() => process.exit(0), 200);
}
process.stdin.on("end", () => stop());
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(sig, stop);
