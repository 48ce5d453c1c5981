/**
 * Background processes (ProcessService): one table per server of every process started in a
 * workspace, running or ended. Each process is the provider's exec stream of a command, consumed
 * by the table as fast as it comes (so the sandbox is never held by a slow reader) into two bounded
 * rings; readers read the rings from offsets and wait for changes. The table enforces the limits
 * (processes running at once, output kept per workspace), ends processes with their workspace,
 * their session, an idle workspace and the server, and records every process in the store so that
 * a restarted server reports the ones that were running as lost.
 */
import { randomBytes } from "node:crypto";
import { DomainError } from "../../core/errors.ts";
import { ProcessControl } from "../../providers/process-control.ts";
import type { ExecEvent, ExecExit } from "../../providers/types.ts";
import type { Logger } from "../logger.ts";
import type { ProcessSettings } from "../settings.ts";
import type { ProcessStore } from "../store/store.ts";
import { OutputRing } from "./output-ring.ts";

export type ProcessState = "running" | "exited" | "lost";

/** What the store keeps of a process (its output is not kept). */
interface ProcessRecord {
  id: string;
  workspaceId: string;
  sessionId: string;
  pid: number;
  command: string;
  workdir: string;
  pty: boolean;
  state: ProcessState;
  exit?: ExecExit;
  startedAt: string;
  endedAt?: string;
  endedBy: string;
  stdoutTotal: number;
  stderrTotal: number;
  stdoutDropped: number;
  stderrDropped: number;
}

/** What starting a process takes. */
export interface ProcessStart {
  workspaceId: string;
  sessionId: string;
  command: string;
  workdir: string;
  pty: boolean;
  stdin: boolean;
  /** Starts the exec with the process's control and kill signal (the caller builds the spec). */
  exec(control: ProcessControl, signal: AbortSignal): AsyncIterable<ExecEvent>;
}

/** One background process. */
export class BackgroundProcess {
  readonly id: string;
  readonly workspaceId: string;
  readonly sessionId: string;
  readonly command: string;
  readonly workdir: string;
  readonly pty: boolean;
  readonly stdout: OutputRing;
  readonly stderr: OutputRing;
  readonly control = new ProcessControl();
  readonly startedAt: Date;
  pid = 0;
  stdinOpen: boolean;
  state: ProcessState = "running";
  exit: ExecExit | undefined;
  endedAt: Date | undefined;
  /** Why the server ended it ("session ended"), or "". */
  endedBy = "";
  /** Aborting kills the tree at once (SIGKILL). */
  readonly #kill = new AbortController();
  #changed = Promise.withResolvers<void>();
  /** Settles when the exec stream is over. */
  readonly done: Promise<void>;
  #resolveDone!: () => void;

  constructor(id: string, start: ProcessStart, ringBytes: number, record?: ProcessRecord) {
    this.id = id;
    this.workspaceId = start.workspaceId;
    this.sessionId = start.sessionId;
    this.command = start.command;
    this.workdir = start.workdir;
    this.pty = start.pty;
    this.stdinOpen = start.stdin || start.pty;
    this.stdout = new OutputRing(ringBytes);
    this.stderr = new OutputRing(ringBytes);
    this.startedAt = record ? new Date(record.startedAt) : new Date();
    this.done = new Promise((resolve) => (this.#resolveDone = resolve));
  }

  /** Resolves at the next change: output, stdin closed, the end. */
  changed(): Promise<void> {
    return this.#changed.promise;
  }

  notify(): void {
    const c = this.#changed;
    this.#changed = Promise.withResolvers<void>();
    c.resolve();
  }

  get running(): boolean {
    return this.state === "running";
  }

  /** Kills the tree at once, saying why. */
  kill(reason: string): void {
    if (!this.running) return;
    if (this.endedBy === "") this.endedBy = reason;
    this.#kill.abort();
  }

  get killSignal(): AbortSignal {
    return this.#kill.signal;
  }

  /** Set when the server stops: the process then ends lost, however its stream reports the kill. */
  lostOnEnd = false;

  ended(state: "exited" | "lost", exit?: ExecExit): void {
    if (!this.running) return;
    this.state = this.lostOnEnd ? "lost" : state;
    this.exit = exit;
    this.endedAt = new Date();
    this.stdinOpen = false;
    this.control.end();
    this.notify();
    this.#resolveDone();
  }

  /** Bytes the rings may hold. */
  get reserved(): number {
    return this.stdout.capacity + this.stderr.capacity;
  }

  record(): ProcessRecord {
    return {
      id: this.id,
      workspaceId: this.workspaceId,
      sessionId: this.sessionId,
      pid: this.pid,
      command: this.command,
      workdir: this.workdir,
      pty: this.pty,
      state: this.state,
      ...(this.exit ? { exit: this.exit } : {}),
      startedAt: this.startedAt.toISOString(),
      ...(this.endedAt ? { endedAt: this.endedAt.toISOString() } : {}),
      endedBy: this.endedBy,
      stdoutTotal: this.stdout.total,
      stderrTotal: this.stderr.total,
      stdoutDropped: this.stdout.dropped,
      stderrDropped: this.stderr.dropped,
    };
  }
}

/** A process as the API reports it (a live one, or one restored from its record). */
export interface ProcessView {
  id: string;
  workspaceId: string;
  pid: number;
  command: string;
  workdir: string;
  pty: boolean;
  stdinOpen: boolean;
  state: ProcessState;
  exit: ExecExit | undefined;
  startedAt: Date;
  endedAt: Date | undefined;
  endedBy: string;
  stdoutTotal: number;
  stderrTotal: number;
  stdoutDropped: number;
  stderrDropped: number;
}

export function viewOf(p: BackgroundProcess | ProcessRecord): ProcessView {
  if (p instanceof BackgroundProcess) {
    return {
      id: p.id, workspaceId: p.workspaceId, pid: p.pid, command: p.command, workdir: p.workdir, pty: p.pty, stdinOpen: p.stdinOpen, state: p.state,
      exit: p.exit, startedAt: p.startedAt, endedAt: p.endedAt, endedBy: p.endedBy,
      stdoutTotal: p.stdout.total, stderrTotal: p.stderr.total, stdoutDropped: p.stdout.dropped, stderrDropped: p.stderr.dropped,
    };
  }
  return {
    id: p.id, workspaceId: p.workspaceId, pid: p.pid, command: p.command, workdir: p.workdir, pty: p.pty, stdinOpen: false, state: p.state,
    exit: p.exit, startedAt: new Date(p.startedAt), endedAt: p.endedAt ? new Date(p.endedAt) : undefined, endedBy: p.endedBy,
    stdoutTotal: p.stdoutTotal, stderrTotal: p.stderrTotal, stdoutDropped: p.stdoutTotal, stderrDropped: p.stderrTotal,
  };
}

/** How long the table waits for killed processes' streams to end when the server stops. */
const CLOSE_WAIT_MS = 5000;

export interface ProcessTableOptions {
  store: ProcessStore;
  settings: ProcessSettings;
  logger: Logger;
  /**
   * Whether another live server serves the workspace (servers sharing a database): its running
   * processes are that server's, not lost.
   */
  servedElsewhere?: (workspaceId: string) => Promise<boolean>;
}

/** Every background process of the server. */
export class ProcessTable {
  readonly #o: ProcessTableOptions;
  /** Live processes by workspace, in start order. */
  readonly #live = new Map<string, Map<string, BackgroundProcess>>();
  /** Records of processes a server before this one ran (lost), by workspace. */
  readonly #past = new Map<string, Map<string, ProcessRecord>>();
  /** Last call in each workspace (epoch ms), for the idle time. */
  readonly #activity = new Map<string, number>();
  /** Calls running in each workspace: one that runs is not idle. */
  readonly #inFlight = new Map<string, number>();
  readonly #began = Date.now();
  #closed = false;

  constructor(options: ProcessTableOptions) {
    this.#o = options;
  }

  get settings(): ProcessSettings {
    return this.#o.settings;
  }

  /**
   * Loads the records of processes an earlier server ran: those it left running were killed with
   * it (their sandbox's executor ends every command of a connection that goes away, and a fresh
   * one sweeps what is left) and are reported lost.
   */
  async init(): Promise<void> {
    for (const row of await this.#o.store.load()) {
      let r: ProcessRecord;
      try {
        r = JSON.parse(row.record) as ProcessRecord;
      } catch {
        await this.#o.store.delete(row.id);
        continue;
      }
      if (r.state === "running" && (await this.#o.servedElsewhere?.(r.workspaceId))) continue;
      await this.#lost(r, "server restarted");
    }
  }

  /** Keeps record `r` as a process of the past, reported lost (`why`) if it was running. */
  async #lost(r: ProcessRecord, why: string): Promise<void> {
    if (r.state === "running") {
      r.state = "lost";
      r.endedBy = why;
      r.endedAt = new Date().toISOString();
      await this.#o.store.put({ id: r.id, workspaceId: r.workspaceId, record: JSON.stringify(r) });
      this.#o.logger.warn("background process lost with the server before this one", { workspace_id: r.workspaceId, process_id: r.id, command_bytes: r.command.length });
    }
    let m = this.#past.get(r.workspaceId);
    if (!m) this.#past.set(r.workspaceId, (m = new Map()));
    m.set(r.id, r);
  }

  /**
   * This server took workspace `workspaceId` over from one that stopped: the processes that server
   * ran there died with its executor connection, and are reported lost.
   */
  async takenOver(workspaceId: string): Promise<void> {
    for (const row of await this.#o.store.load()) {
      if (row.workspaceId !== workspaceId || this.#live.get(workspaceId)?.has(row.id)) continue;
      let r: ProcessRecord;
      try {
        r = JSON.parse(row.record) as ProcessRecord;
      } catch {
        continue;
      }
      await this.#lost(r, "its server stopped");
    }
  }

  /** A call touched the workspace (its processes' idle time starts again). */
  touch(workspaceId: string): void {
    this.#activity.set(workspaceId, Date.now());
  }

  /**
   * How long the workspace has had no tool call, in ms: 0 while one runs; since this server started
   * for one without a call yet.
   */
  idleFor(workspaceId: string): number {
    if ((this.#inFlight.get(workspaceId) ?? 0) > 0) return 0;
    return Date.now() - Math.max(this.#activity.get(workspaceId) ?? 0, this.#began);
  }

  /** A call in the workspace started: it is not idle until the call ends (call what this returns then). */
  callStarted(workspaceId: string): () => void {
    this.touch(workspaceId);
    this.#inFlight.set(workspaceId, (this.#inFlight.get(workspaceId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const n = (this.#inFlight.get(workspaceId) ?? 1) - 1;
      if (n > 0) this.#inFlight.set(workspaceId, n);
      else this.#inFlight.delete(workspaceId);
      this.touch(workspaceId);
    };
  }

  list(workspaceId: string): ProcessView[] {
    return [...(this.#past.get(workspaceId)?.values() ?? [])].map(viewOf).concat([...(this.#live.get(workspaceId)?.values() ?? [])].map(viewOf));
  }

  /** A live process, or PROCESS_NOT_FOUND (also for one a server before this one ran: `view`). */
  get(workspaceId: string, id: string): BackgroundProcess {
    const p = this.#live.get(workspaceId)?.get(id);
    if (p) return p;
    if (this.#past.get(workspaceId)?.has(id)) throw new DomainError("PROCESS_NOT_RUNNING", "The process was lost when the server restarted", { metadata: { process_id: id } });
    throw notFound(id);
  }

  /** A process's view, live or from a server before this one. */
  view(workspaceId: string, id: string): ProcessView {
    const past = this.#past.get(workspaceId)?.get(id);
    if (past) return viewOf(past);
    return viewOf(this.get(workspaceId, id));
  }

  /**
   * Starts a process: admitted under the workspace's limits (the oldest ended processes are
   * forgotten to make room for output), answered once the sandbox started it (its pid known) or
   * refused as the exec failed. `maxRunning` is the agent type's, when it sets one.
   */
  async start(start: ProcessStart, maxRunning = this.#o.settings.maxRunning): Promise<BackgroundProcess> {
    if (this.#closed) throw new DomainError("WORKSPACE_NOT_READY", "The server is stopping");
    const { ringBytes, maxBufferedBytes } = this.#o.settings;
    let live = this.#live.get(start.workspaceId);
    if (!live) this.#live.set(start.workspaceId, (live = new Map()));
    const running = [...live.values()].filter((p) => p.running).length;
    if (running >= maxRunning) {
      throw new DomainError("PROCESS_LIMIT", `The workspace runs ${running} background processes, its most; end one first`, { metadata: { limit: "processes", max: String(maxRunning) } });
    }
    const need = 2 * ringBytes;
    if (need > maxBufferedBytes) {
      throw new DomainError("PROCESS_LIMIT", "The server keeps less output per workspace than one process's rings", { metadata: { limit: "output_bytes", max: String(maxBufferedBytes) } });
    }
    const reserved = () => [...live.values()].reduce((n, p) => n + p.reserved, 0);
    for (const p of [...live.values()]) {
      if (reserved() + need <= maxBufferedBytes) break;
      if (!p.running) await this.#forget(p);
    }
    if (reserved() + need > maxBufferedBytes) {
      throw new DomainError("PROCESS_LIMIT", `The workspace's processes keep ${reserved()} bytes of output, and a new one would pass ${maxBufferedBytes}; end one first`, {
        metadata: { limit: "output_bytes", max: String(maxBufferedBytes) },
      });
    }
    const p = new BackgroundProcess(`proc_${randomBytes(12).toString("base64url")}`, start, ringBytes);
    live.set(p.id, p);
    this.touch(start.workspaceId);
    const started = Promise.withResolvers<void>();
    void this.#consume(p, start.exec(p.control, p.killSignal), started);
    try {
      await started.promise;
    } catch (err) {
      live.delete(p.id);
      throw err;
    }
    await this.#save(p);
    return p;
  }

  /** Reads the exec stream into the rings until it ends. */
  async #consume(p: BackgroundProcess, events: AsyncIterable<ExecEvent>, started: PromiseWithResolvers<void>): Promise<void> {
    let isStarted = false;
    try {
      for await (const ev of events) {
        switch (ev.type) {
          case "started":
            p.pid = ev.pid ?? 0;
            isStarted = true;
            started.resolve();
            break;
          case "stdout":
            p.stdout.push(ev.data);
            p.notify();
            break;
          case "stderr":
            p.stderr.push(ev.data);
            p.notify();
            break;
          case "exited":
            if (!isStarted) {
              // The program could not start at all (a spawn error): the call says so.
              throw new DomainError("WORKSPACE_NOT_READY", `bash could not be started in the workspace (${ev.exit.spawnError ?? "exited"})`, { metadata: { error: ev.exit.spawnError ?? "" } });
            }
            p.ended("exited", ev.exit);
            break;
        }
      }
      if (!isStarted) throw new DomainError("WORKSPACE_NOT_READY", "The workspace's sandbox ended the process before it started");
      if (p.running) p.ended("lost");
    } catch (err) {
      if (!isStarted) {
        p.ended("lost");
        started.reject(err);
        return;
      }
      if (p.endedBy === "") p.endedBy = "sandbox lost";
      this.#o.logger.warn("background process lost with its sandbox's connection", { workspace_id: p.workspaceId, process_id: p.id, error: err instanceof Error ? err.message : String(err) });
      p.ended("lost");
    } finally {
      p.control.end();
    }
    await this.#save(p);
  }

  async #save(p: BackgroundProcess): Promise<void> {
    if (!this.#live.get(p.workspaceId)?.has(p.id)) return;
    try {
      await this.#o.store.put({ id: p.id, workspaceId: p.workspaceId, record: JSON.stringify(p.record()) });
    } catch (err) {
      this.#o.logger.error("a background process's record could not be saved", { process_id: p.id, error: err instanceof Error ? err.message : String(err) });
    }
  }

  async #forget(p: BackgroundProcess): Promise<void> {
    this.#live.get(p.workspaceId)?.delete(p.id);
    await this.#o.store.delete(p.id).catch(() => undefined);
  }

  /** Kills a workspace's processes and forgets them all (it is being deleted). */
  async endWorkspace(workspaceId: string, reason: string): Promise<void> {
    const live = [...(this.#live.get(workspaceId)?.values() ?? [])];
    for (const p of live) p.kill(reason);
    await waitAll(live.map((p) => p.done), CLOSE_WAIT_MS);
    this.#live.delete(workspaceId);
    this.#past.delete(workspaceId);
    this.#activity.delete(workspaceId);
    await this.#o.store.deleteWorkspace(workspaceId).catch(() => undefined);
  }

  /** Sends `signal` to the tree of every running process of a workspace (SIGSTOP, SIGCONT: a pause). */
  async signalWorkspace(workspaceId: string, signal: string): Promise<void> {
    const running = [...(this.#live.get(workspaceId)?.values() ?? [])].filter((p) => p.running);
    await Promise.all(running.map((p) => p.control.signal(signal).catch(() => undefined)));
  }

  /** Kills the processes a session started (it ended); they stay listed. */
  async endSession(sessionId: string, reason: string): Promise<void> {
    const mine = [...this.#live.values()].flatMap((m) => [...m.values()]).filter((p) => p.sessionId === sessionId && p.running);
    for (const p of mine) p.kill(reason);
    await waitAll(mine.map((p) => p.done), CLOSE_WAIT_MS);
  }

  /**
   * Kills the processes of workspaces without a call for their idle time (`idleMs` gives each
   * workspace's, 0 for none). Called on the server's tick.
   */
  endIdle(idleMs: (workspaceId: string) => number): void {
    const now = Date.now();
    for (const [workspaceId, live] of this.#live) {
      const limit = idleMs(workspaceId);
      if (limit <= 0 || (this.#inFlight.get(workspaceId) ?? 0) > 0) continue;
      const last = Math.max(this.#activity.get(workspaceId) ?? 0, ...[...live.values()].map((p) => p.startedAt.getTime()));
      if (now - last < limit) continue;
      for (const p of live.values()) {
        if (!p.running) continue;
        this.#o.logger.info("background process ended: its workspace was idle", { workspace_id: workspaceId, process_id: p.id, idle_ms: limit });
        p.kill("idle");
      }
    }
  }

  /** Kills every process (the server stops); their records say so. */
  async close(): Promise<void> {
    this.#closed = true;
    const all = [...this.#live.values()].flatMap((m) => [...m.values()]).filter((p) => p.running);
    for (const p of all) {
      p.lostOnEnd = true;
      p.kill("server stopped");
    }
    await waitAll(all.map((p) => p.done), CLOSE_WAIT_MS);
    // Whatever did not report its end in time is recorded lost.
    for (const p of all) {
      if (p.running) {
        p.ended("lost");
        await this.#save(p);
      }
    }
  }
}

function notFound(id: string): DomainError {
  return new DomainError("PROCESS_NOT_FOUND", `No process ${id.slice(0, 64)} in this workspace`, { metadata: { process_id: id.slice(0, 64) } });
}

/** Waits for `all`, at most `ms`. */
async function waitAll(all: Array<Promise<unknown>>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.allSettled(all), new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}
