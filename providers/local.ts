/**
 * The local provider: each workspace is a directory under the server's data directory and
 * commands run as host processes in it. It needs nothing but this host, which makes it the
 * embedded default for development; it isolates paths (the jail) but not processes, so use a
 * container provider for untrusted agents.
 *
 * Commands are started by the workspace's launcher (executor/launcher.ts), a small process kept in
 * the workspace's cgroups: forking it is cheaper than forking Node. A command with no stdin, no
 * terminal, no process control and no stdout handed on is asked of the launcher and supervised by
 * the server itself (local-commands.ts); the others by resident executor child processes (the same
 * executor/ the container providers run; one per CPU, each workspace always on the same one),
 * which keep a launcher of their own for the workspace, or spawn each command where there is no Perl.
 *
 * File operations run in the server process through the executor's jail (local-fs.ts), beneath a
 * descriptor of the workspace directory opened when the workspace is opened; commands start in a
 * directory opened the same way. Commands run with the real directory as their
 * working directory and $HOME; tool paths written as /workspace/... are mapped by the jail, but a
 * command that names "/workspace" literally only finds it on container providers.
 *
 * Resource limits are what a host process can be given (local-limits.ts): a cgroup per open
 * workspace for memory, processes and CPU where the server may make one, which every command
 * joins before it runs, and RLIMIT_FSIZE at the disk limit per file.
 */
import { createHash } from "node:crypto";
import { mkdir, realpath, rm, stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import path from "node:path";
import { rgPath } from "@vscode/ripgrep";
import { LocalFs } from "./local-fs.ts";
import { LocalCommands, type WorkspaceCommands } from "./local-commands.ts";
import { spawn, type ChildProcess } from "node:child_process";
import { type AddressInfo, createServer } from "node:net";
import type { Duplex, Readable } from "node:stream";
import { DomainError } from "../core/errors.ts";
import { openPipeOf, withDirectStdout } from "./direct-stdout.ts";
import type { ExecRequest } from "./executor/protocol.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild, SOURCE_EXECUTOR } from "./executor-build.ts";
import { LocalLimits, type WorkspaceLimits } from "./local-limits.ts";
import { portServedBy } from "./local-ports.ts";
import { newProxyCredential, proxyUrlFor } from "./proxy-credential.ts";
import { execRequest, SandboxConnection } from "./sandbox-connection.ts";
import type { CreateOptions, EgressHook, ExecEvent, ExecSpec, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";
import type { FileRules } from "./executor/sensitive-files.ts";

/** Options of the local provider. */
export interface LocalProviderOptions {
  /** Directory under which workspace directories are created. */
  baseDir: string;
  /** ripgrep binary; defaults to the one shipped by @vscode/ripgrep. Tests point it elsewhere. */
  ripgrepPath?: string;
  /** Receives what the executor writes to stderr. */
  log?: ProviderLog;
  /** The executor to run (default: its sources; the server passes the built JavaScript copy). */
  executor?: ExecutorBuild;
  /**
   * How commands start: "launcher" (default), through a resident launcher per workspace that lives
   * in its cgroups (executor/launcher.ts; a spawn each where the host has no Perl), or "spawn", a
   * spawn of the executor per command.
   */
  launcher?: "launcher" | "spawn";
}


/**
 * The local executor child, started on first use and again after it died. Its environment is
 * minimal, like every command's: nothing of the server's environment reaches it.
 */
class LocalExecutor {
  #child: ChildProcess | undefined;
  #conn: SandboxConnection | undefined;
  readonly #log: ProviderLog;
  readonly #main: string;

  readonly #launcher: "launcher" | "spawn";

  constructor(log: ProviderLog, executor: ExecutorBuild, launcher: "launcher" | "spawn") {
    this.#log = log;
    this.#main = path.join(executor.dir, executor.main);
    this.#launcher = launcher;
  }

  connection(): SandboxConnection {
    if (this.#conn?.alive) return this.#conn;
    // Frames go over stdin/stdout. A command's stdout pipe is opened here through /proc (execDirect).
    // A server profiled with --cpu-prof (bench --profile) profiles its executors too.
    const profiling = process.execArgv.filter((a) => a.startsWith("--cpu-prof"));
    const child = spawn(process.execPath, [...EXECUTOR_NODE_FLAGS, ...profiling, this.#main, `--launcher=${this.#launcher}`], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    });
    child.stderr?.setEncoding("utf8").on("data", (line: string) => this.#log.warn("local executor", { line: line.trimEnd().slice(0, 2000) }));
    child.on("error", (err) => this.#log.warn("local executor failed", { error: String(err) }));
    child.on("exit", (code, signal) => {
      if (this.#child === child) this.#log.warn("local executor exited; the next command starts a new one", { code, signal });
    });
    this.#child = child;
    this.#conn = new SandboxConnection(child.stdout!, child.stdin!);
    return this.#conn;
  }

  /**
   * Runs `request` with its stdout read here straight from the command's pipe (see
   * direct-stdout.ts). The executor names its descriptor of the pipe in STARTED; this process
   * opens its own copy through /proc/<executor>/fd/N (its child, same user) before the executor
   * closes that descriptor (it waits for TAKEN), so the pipe cannot be lost on the way.
   */
  execDirect(request: ExecRequest, signal: AbortSignal): AsyncGenerator<ExecEvent> {
    const kill = new AbortController();
    const conn = this.connection();
    const pid = this.#child?.pid;
    const log = this.#log;
    const stdout = Promise.withResolvers<Readable | undefined>();
    // A pipe that cannot be opened fails the call (the throw ends the executor call, which kills
    // the command): an answer without the command's stdout would look like a command that printed
    // nothing.
    const take = (fd: number | undefined) => {
      if (fd === undefined) return stdout.resolve(undefined);
      try {
        if (pid === undefined) throw new Error("the executor has no pid");
        stdout.resolve(openPipeOf(pid, fd));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? "";
        log.warn("a streamed command's stdout pipe could not be opened; the command is stopped", { error: code || String(err) });
        throw new DomainError("PROVIDER_UNAVAILABLE", `The command's output could not be read from its pipe${code ? ` (${code})` : ""}; the command was stopped`);
      }
    };
    const events = conn.exec({ ...request, passStdout: true }, AbortSignal.any([signal, kill.signal]), undefined, take);
    return (async function* () {
      try {
        yield* withDirectStdout(events, stdout.promise, () => kill.abort());
      } finally {
        // No STARTED came (the executor failed the call or died): there is no pipe.
        stdout.resolve(undefined);
      }
    })();
  }

  /** Tells a running executor to forget `root` (its descriptor of it). */
  async release(root: string): Promise<void> {
    if (!this.#conn?.alive) return;
    await this.#conn.op({ root, op: "release", rel: "" }).catch(() => undefined);
  }

  /** Ends the executor: closing its stdin makes it kill what still runs and exit. */
  close(): void {
    this.#child?.stdin?.end();
    this.#conn = undefined;
    this.#child = undefined;
  }
}

/** Creates the local provider. */
export function createLocalProvider(options: LocalProviderOptions): Provider {
  const baseDir = path.resolve(options.baseDir);
  const rg = options.ripgrepPath ?? rgPath;
  const log = options.log ?? { info: () => undefined, warn: () => undefined, error: () => undefined };
  const build = options.executor ?? SOURCE_EXECUTOR;
  // One executor per CPU: a command's start (a fork) and its supervision take an executor's one
  // thread, so concurrent workspaces spread over all of them. Each workspace stays on one (by a
  // hash of its directory), which keeps its commands and its release on the same process.
  const pool = Array.from({ length: Math.max(1, Math.min(availableParallelism(), 8)) }, () => new LocalExecutor(log, build, options.launcher ?? "launcher"));
  // Commands a launcher can run start from this process, through the workspace's launcher
  // (local-commands.ts); the executors keep the rest (stdin, terminals, process control, handed-on stdout).
  const commands = new LocalCommands(options.launcher ?? "launcher", log);
  const executorFor = (root: string) => pool[createHash("sha1").update(root).digest().readUInt32BE(0) % pool.length];
  // Per-workspace cgroups and rlimits: what this host allows (local-limits.ts), said once.
  const limiter = new LocalLimits(createHash("sha1").update(baseDir).digest("hex").slice(0, 12));
  const { enforcement } = limiter;
  /** Workspaces this provider opened already. */
  const opened = new Set<string>();
  if (enforcement.memory !== "cgroup" || enforcement.pids !== "cgroup") {
    log.warn("local workspaces: memory and process limits are enforced only in part", { ...enforcement });
  }
  return {
    name: "local",
    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      const dir = path.join(baseDir, opts.id);
      await mkdir(dir, { recursive: true, mode: 0o755 });
      return {
        id: opts.id,
        provider: "local",
        createdAt: new Date(),
        labels: opts.labels,
        limits: opts.limits,
        image: "",
        state: { dir },
      };
    },
    async open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      const dir = record.state.dir ?? path.join(baseDir, record.id);
      const root = await realpath(dir);
      // Opened for the first time by this server: whatever still runs in its cgroups was started by
      // a server before it that died (a background process, a command in flight) and ends now.
      if (!opened.has(record.id)) {
        opened.add(record.id);
        await limiter.remove(record.id);
      }
      const limits = await limiter.prepare(record.id, record.limits);
      const proxy = openOptions?.egress ? await hostProxyEndpoint(openOptions.egress) : undefined;
      return openLocalWorkspace(record.id, root, rg, executorFor(root), commands, openOptions?.fileRules, limits, proxy, () => limiter.remove(record.id), () => limiter.processes(record.id));
    },
    async destroy(record: WorkspaceRecord): Promise<void> {
      opened.delete(record.id);
      await limiter.remove(record.id);
      const dir = record.state.dir ?? path.join(baseDir, record.id);
      // Only ever delete inside our own base directory, whatever the record says.
      if (path.dirname(path.resolve(dir)) !== baseDir) return;
      await rm(dir, { recursive: true, force: true });
    },
    async dispose(): Promise<void> {
      for (const executor of pool) executor.close();
      await limiter.dispose();
    },
  };
}

/**
 * The egress proxy's endpoint of a local workspace: a port on the host's loopback whose
 * connections go to `egress`. Commands run on the host, so nothing makes them use it: the
 * allowlist binds only clients that honour the proxy variables.
 *
 * Any user of the host can connect to a loopback port, so the port serves only requests carrying
 * this handle's random credential, which its commands alone get, in the proxy URL's userinfo
 * (`http://aw:<token>@127.0.0.1:<port>`: curl, git, npm and pip send it as Proxy-Authorization).
 * It lives in the commands' environment, which other users cannot read (/proc/<pid>/environ is
 * the owner's), and nowhere else: no log line, error, span or audit record holds it.
 */
async function hostProxyEndpoint(egress: EgressHook): Promise<{ url: string; close(): void }> {
  const credential = newProxyCredential();
  const server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => egress.accept(socket, credential));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: "127.0.0.1", port: 0 }, () => resolve());
  });
  server.on("error", () => undefined);
  const port = (server.address() as AddressInfo).port;
  return { url: proxyUrlFor(port, credential), close: () => server.close() };
}

function openLocalWorkspace(
  id: string,
  root: string,
  rg: string,
  executor: LocalExecutor,
  commands: LocalCommands,
  fileRules: FileRules | undefined,
  limits: WorkspaceLimits,
  proxy: { url: string; close(): void } | undefined,
  releaseLimits: () => Promise<void>,
  processes: () => Promise<number[] | undefined>,
): WorkspaceHandle {
  // Commands still running when the handle closes (the workspace is being deleted) are killed,
  // so nothing keeps running in a directory that is about to disappear.
  const running = new Set<AbortController>();
  const fs = new LocalFs(root, fileRules);
  const own: WorkspaceCommands = commands.workspace(root, (rel) => fs.openDirectory(rel), limits.prefix());
  return {
    id,
    fs,
    ripgrepPath: rg,
    async dial(port: number, signal?: AbortSignal): Promise<Duplex> {
      // The host's loopback is every workspace's: only a port this workspace's own processes
      // serve is reached (local-ports.ts), and without a cgroup there is no telling whose it is.
      const pids = await processes();
      if (pids === undefined) {
        throw new DomainError("ENFORCEMENT_UNAVAILABLE", "This host gives local workspaces no cgroup, so a port cannot be told to be the workspace's own; expose ports of docker or gvisor workspaces", {
          metadata: { port: String(port), enforcement: "port_owner" },
        });
      }
      const whose = await portServedBy(port, pids);
      if (whose !== "theirs") {
        throw new DomainError("PORT_NOT_LISTENING", whose === "none" ? `Nothing accepts connections on port ${port}` : `No process of this workspace listens on port ${port}; another process of the host does`, {
          metadata: { port: String(port) },
        });
      }
      return executor.connection().dial(port, signal);
    },
    exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
      // The command runs in the workspace's cgroups under its rlimits: started by the workspace's
      // launcher, which lives there (executor/launcher.ts), or joining them itself.
      const prefix = limits.prefix();
      const request = { ...execRequest(spec, root, proxy?.url), ...(prefix.length > 0 ? { limits: prefix } : {}) };
      return (async function* () {
        // One controller, aborted by the call's signal or the handle's close (AbortSignal.any costs
        // more than this whole function, per call).
        const closing = new AbortController();
        const onAbort = () => closing.abort(spec.signal?.reason);
        if (spec.signal?.aborted) onAbort();
        spec.signal?.addEventListener("abort", onAbort, { once: true });
        running.add(closing);
        try {
          const signal = closing.signal;
          const events = commands.handles(spec)
            ? own.run(request, signal)
            : spec.directStdout && !spec.control
              ? executor.execDirect(request, signal)
              : executor.connection().exec(request, signal, spec.control);
          // `oomKilled` is set on the exit when the workspace's memory cgroup counted an OOM kill
          // while the command ran (the kernel may kill any process of the tree; bash then reports
          // 137 for it). Here, not in a generator of its own: each layer costs every event.
          const before = limits.oomKills();
          for await (const ev of events) {
            if (ev.type === "exited" && ev.exit.exitCode >= 128 && !ev.exit.timedOut && !ev.exit.oomKilled && limits.oomKills() > before) {
              yield { ...ev, exit: { ...ev.exit, oomKilled: true } };
            } else {
              yield ev;
            }
          }
        } finally {
          spec.signal?.removeEventListener("abort", onAbort);
          running.delete(closing);
        }
      })();
    },
    async health() {
      try {
        const st = await stat(root);
        return st.isDirectory() ? { status: "ready", message: "" } : { status: "failed", message: "workspace directory is not a directory" };
      } catch {
        return { status: "failed", message: "workspace directory is missing" };
      }
    },
    async close(): Promise<void> {
      for (const c of running) c.abort();
      own.close();
      proxy?.close();
      fs.close();
      // The executor closes its descriptor of this root (the workspace may be deleted next).
      await executor.release(root);
      // What still runs in the workspace's cgroups (a command that left its session) ends here.
      await releaseLimits();
    },
  };
}
