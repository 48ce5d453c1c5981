/**
 * Local commands started and supervised by the server itself, through the workspace's launcher
 * (executor/launcher.ts), with no executor in between.
 *
 * The local provider's commands used to cross two processes before their own: the server sent a
 * frame to a resident executor, which asked the workspace's launcher to fork, read the command's
 * pipes, waited for its exit and sent the result back. The executor was there to keep forks off
 * the server's event loop (forking a process the server's size costs milliseconds); the launcher
 * forks now, so the hop bought nothing but its cost: two more wakeups of another process each way
 * (about 1.5 ms of a 5 ms no-op `Bash` on this two-core machine, measured in the bench process).
 *
 * Here the server keeps each workspace's launcher itself and supervises its commands with the one
 * process supervisor every provider uses (executor/process-runner.ts): the same marks, kills,
 * timeouts and output handling. The working directory is opened by the workspace's jail, as the
 * executor opened it; the marker descriptor every process of the command inherits is a pipe's
 * read end the launcher makes (no file to create and delete per command here).
 *
 * Only what a launcher can run comes here: a command with no stdin, no terminal, no process
 * control and no stdout handed on (those go to the executor as before), on a host with Perl and
 * with the launcher mode on. A launcher that cannot fork (the workspace's cgroup at its process
 * limit) hands its command to a spawn of the server, as the executor spawned it.
 */
import path from "node:path";
import { DomainError } from "../core/errors.ts";
import type { ExecRequest } from "./executor/protocol.ts";
import { findPerl, Launcher, wrapCommand } from "./executor/launcher.ts";
import { runProcess } from "./executor/process-runner.ts";
import type { ExecEvent, ExecSpec, ProviderLog } from "./types.ts";

/** A working directory's descriptor for one launch, and what lets it go (nothing for the root's own). */
export interface OpenDirectory {
  fd: number;
  close(): void;
}

/** The local provider's in-server command starter; one per provider. */
export class LocalCommands {
  readonly #perl: string | undefined;
  readonly #log: ProviderLog;

  /** `mode` "spawn" (AGENT_WORKSPACE_LOCAL_LAUNCHER=spawn) leaves every command to the executor. */
  constructor(mode: "launcher" | "spawn", log: ProviderLog, perl: string | undefined = mode === "launcher" ? findPerl() : undefined) {
    this.#perl = mode === "launcher" ? perl : undefined;
    this.#log = log;
  }

  /** True when `spec` can start here rather than in the executor. */
  handles(spec: ExecSpec): boolean {
    return this.#perl !== undefined && !spec.stdin && spec.pty === undefined && spec.control === undefined && !spec.directStdout;
  }

  /** The commands of one open workspace. */
  workspace(root: string, openDirectory: (rel: string) => OpenDirectory, prefix: string[]): WorkspaceCommands {
    return new WorkspaceCommands(this, root, openDirectory, prefix);
  }

  /** Logs a warning about a workspace's command. */
  warn(root: string, line: string): void {
    this.#log.warn("local workspace command", { root: path.basename(root), line });
  }

  /** A new launcher for `prefix` (the workspace's limits command). */
  launcher(root: string, prefix: string[], PATH: string): Launcher {
    return new Launcher(this.#perl as string, prefix, PATH, (line) => this.#log.warn("local workspace launcher", { root: path.basename(root), line }));
  }
}

/** One workspace's commands: its launcher, started on the first command and again after it died. */
export class WorkspaceCommands {
  readonly #owner: LocalCommands;
  readonly #root: string;
  readonly #openDirectory: (rel: string) => OpenDirectory;
  readonly #prefix: string[];
  #launcher: Launcher | undefined;
  #closed = false;

  constructor(owner: LocalCommands, root: string, openDirectory: (rel: string) => OpenDirectory, prefix: string[]) {
    this.#owner = owner;
    this.#root = root;
    this.#openDirectory = openDirectory;
    this.#prefix = prefix;
  }

  /**
   * Runs `request` (as execRequest made it for the executor) and yields its events. Throws a
   * DomainError from the jail when its working directory cannot be opened.
   */
  async *run(request: ExecRequest, signal: AbortSignal): AsyncGenerator<ExecEvent> {
    const PATH = request.env.PATH ?? "/usr/bin:/bin";
    if (this.#closed) throw new DomainError("WORKSPACE_NOT_READY", "The workspace is closing");
    if (!this.#launcher?.alive) this.#launcher = this.#owner.launcher(this.#root, this.#prefix, PATH);
    const launcher = this.#launcher;
    const dir = this.#openDirectory(request.cwd);
    let open = true;
    const release = () => {
      if (!open) return;
      open = false;
      dir.close();
    };
    let events: AsyncGenerator<ExecEvent>;
    let first: IteratorResult<ExecEvent>;
    try {
      events = runProcess({
        argv: request.argv,
        cwd: `/proc/self/fd/${dir.fd}`,
        env: request.env,
        launcherMarker: true,
        onSpawn: release,
        launcher,
        spawnArgv: () => wrapCommand(this.#prefix, request.argv, PATH),
        timeoutMs: request.timeoutMs,
        killGraceMs: request.killGraceMs,
        signal,
        // A caller that keeps only a head of the output (a unary `Bash`) has the launcher read it.
        keepBytes: request.keepBytes,
        warn: (line) => this.#owner.warn(this.#root, line),
      });
      // The generator launches on its first step: take it now so the descriptors close.
      first = await events.next();
    } finally {
      release();
    }
    const quiet = request.started === false;
    try {
      if (!first.done && !(quiet && first.value.type === "started")) yield first.value;
      for await (const ev of events) {
        if (quiet && ev.type === "started") continue;
        yield ev;
      }
    } finally {
      // A caller that stopped early: the supervisor's own finally kills the command's tree.
      await events.return(undefined);
    }
  }

  /** Stops the launcher (the caller has killed what still ran). */
  close(): void {
    this.#closed = true;
    this.#launcher?.close();
    this.#launcher = undefined;
  }
}
