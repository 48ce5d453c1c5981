/**
 * The server's end of the executor protocol (executor/protocol.ts): commands and file operations
 * multiplexed over one plain byte stream pair of an executor (a container's attached main
 * process, or the local provider's child process). How the bytes travel (Docker's attach
 * framing, a child's pipes) is the provider's business: this class only sees the executor's
 * stdout and stdin.
 *
 * Nothing from the executor is trusted: every frame is checked for its size, its type and that
 * its id belongs to a call this connection started; a frame that fails ends the connection
 * (`violated`), so a broken or hostile executor can cost its own workspace a restart and never
 * the server a stall. Frames are parsed incrementally with bounded sizes, so one workspace's
 * channel never holds up the event loop for others.
 */
import { randomInt } from "node:crypto";
import type { Duplex, Readable, Writable } from "node:stream";
import { DomainError, hasReason } from "../core/errors.ts";
import { drainedOrClosed } from "../core/streams.ts";
import { proxyEnv, sandboxEnv } from "./executor/env.ts";
import type { FaultInfo } from "./executor/fault.ts";
import {
  CONTROL_OP,
  CREDIT_BATCH,
  type ExecRequest,
  encodeFrame,
  F,
  FINAL,
  type Frame,
  FrameReader,
  FROM_EXECUTOR,
  LIFETIME_FRAMES,
  MAX_CHUNK,
  MAX_TUNNELS,
  type OpRequest,
  TUNNEL_FRAMES,
  TUNNEL_ID_BASE,
  WAKE,
  writeFrame,
} from "./executor/protocol.ts";
import { faultFromWire } from "./faults.ts";
import { TunnelStream } from "./tunnel-stream.ts";
import type { ProcessControl, ProcessInput } from "./process-control.ts";
import type { ExecEvent, ExecExit, ExecSpec } from "./types.ts";

/**
 * The EXEC request for `spec` in a workspace whose root the executor sees at `root` (the host
 * directory for the local provider, /workspace in a container): the working directory, resolved
 * by the executor's jail, the minimal environment with home at the root (with the proxy variables
 * when the workspace's egress goes through `proxyUrl`; the caller's variables may override them),
 * and the default grace.
 */
export function execRequest(spec: ExecSpec, root: string, proxyUrl?: string): ExecRequest {
  return {
    argv: spec.argv,
    root,
    cwd: spec.cwd,
    env: sandboxEnv(root, proxyUrl === undefined ? spec.env : { ...proxyEnv(proxyUrl), ...spec.env }),
    timeoutMs: spec.timeoutMs,
    killGraceMs: spec.killGraceMs ?? 5000,
    ...(spec.programs?.length ? { programs: spec.programs } : {}),
    ...(spec.sweep === false ? { sweep: false as const } : {}),
    ...(spec.started === false && !spec.directStdout ? { started: false as const } : {}),
    ...(spec.stdin || spec.pty ? { stdin: true as const } : {}),
    ...(spec.pty ? { pty: { rows: spec.pty.rows, cols: spec.pty.cols } } : {}),
    ...(spec.keepBytes !== undefined && Number.isSafeInteger(spec.keepBytes) && spec.keepBytes >= 0 && !spec.control ? { keepBytes: spec.keepBytes } : {}),
  };
}

/** Frame types whose payload is streamed under credit. */
const STREAMED = new Set<number>([F.STDOUT, F.STDERR, F.CHUNK, F.ENTRIES]);

interface Pending {
  frames: Frame[];
  wake: (() => void) | undefined;
  done: boolean;
  error: Error | undefined;
  unacked: number;
  /** CONTROL frames sent and not yet acknowledged, by number. */
  acks?: Map<number, PromiseWithResolvers<void>>;
  /** A DIAL call's connection, once its TOPEN came. */
  dialed?: TunnelStream;
  /** True for a DIAL call: a TOPEN may name it. */
  dials?: boolean;
}

/** Fails every CONTROL of `p` still waiting for its ACK: the call is over. */
function endAcks(p: Pending): void {
  if (!p.acks) return;
  for (const waiter of p.acks.values()) waiter.reject(new DomainError("PROCESS_NOT_RUNNING", "The process has ended"));
  p.acks.clear();
}

function unavailable(cause: Error): DomainError {
  return new DomainError("WORKSPACE_NOT_READY", "The workspace sandbox stopped responding; retry the call", { cause });
}

/**
 * Where an executor that may exit when idle (`sleeps`) stands: running; told BYE and not yet
 * answered (nothing is written meanwhile); exited (the next call wakes it); being woken.
 */
type Lifetime = "awake" | "leaving" | "asleep" | "waking";

/** How long a woken executor has to answer its first PING. */
const WAKE_TIMEOUT_MS = 30_000;
/** How long an executor told BYE has to exit (the wrapper's GONE) or STAY. */
const BYE_TIMEOUT_MS = 15_000;

/**
 * A command's end when the sandbox's executor died under it (a call failed with the wrapper's
 * GONE as its cause): SIGKILLed while the sandbox's cgroup counted an OOM kill, the OOM killer took
 * the executor with or instead of the command's processes, so this is the command's OOM kill (the
 * next call starts a new executor, which first kills what the command left). Undefined otherwise.
 */
export function oomKillOf(err: unknown, startedAt: number): ExecEvent | undefined {
  const died = (err as Error).cause as { executorStatus?: number; oomKilled?: boolean } | undefined;
  if (died?.executorStatus !== 137 || died.oomKilled !== true) return undefined;
  return { type: "exited", exit: { exitCode: 137, signal: "SIGKILL", timedOut: false, oomKilled: true, durationMs: Date.now() - startedAt } };
}

/**
 * Runs a command over `connection`, as every sandbox provider does. When the connection fails
 * before the command's exit (WORKSPACE_NOT_READY: the executor, or the sandbox under it, is gone),
 * `lost(err, startedAt)` says what became of the command: the exit to report (an OOM kill), or it
 * throws. Any other failure is thrown as it is.
 */
export async function* execOver(
  connection: SandboxConnection,
  request: ExecRequest,
  spec: ExecSpec,
  lost: (err: unknown, startedAt: number) => ExecEvent | Promise<ExecEvent>,
): AsyncGenerator<ExecEvent> {
  const started = Date.now();
  let exited = false;
  try {
    for await (const ev of connection.exec(request, spec.signal, spec.control)) {
      if (ev.type === "exited") exited = true;
      yield ev;
    }
  } catch (err) {
    if (exited || !hasReason(err, "WORKSPACE_NOT_READY")) throw err;
    yield await lost(err, started);
  }
}

/**
 * The command's end when only its sandbox's executor died (its wrapper said how): its OOM kill
 * (`oomKillOf`), logged as a warning; otherwise `err` is logged and thrown. `what` names the
 * sandbox in the log line ("sandbox", "workspace VM").
 */
export function executorDeath(err: unknown, startedAt: number, log: { warn(msg: string, fields?: Record<string, unknown>): void; error(msg: string, fields?: Record<string, unknown>): void }, what: string, workspaceId: string): ExecEvent {
  const oom = oomKillOf(err, startedAt);
  if (oom) {
    log.warn(`${what} executor OOM-killed during a command; reported as the command's OOM kill`, { workspace_id: workspaceId });
    return oom;
  }
  log.error(`${what} executor died during a command`, { workspace_id: workspaceId, cause: String((err as Error).cause ?? err).slice(0, 300) });
  throw err;
}

/** One attached connection to an executor. */
export class SandboxConnection {
  readonly #input: Readable;
  readonly #output: Writable;
  readonly #pending = new Map<number, Pending>();
  readonly #frames = new FrameReader();
  /**
   * Call ids start at 1, or for a connection reattached to a running executor at a random point:
   * it may still run calls of the connection before it (a server that died), whose ids must not
   * meet this one's.
   */
  readonly #firstId: number;
  #nextId: number;
  /**
   * False while frames of an earlier connection's calls may still come (reattached, not yet
   * `forgetEarlierCalls`): a frame for an id this connection never used is dropped, not a violation.
   */
  #strict: boolean;
  #closed: Error | undefined;
  #violation: string | undefined;
  /** Open egress tunnels by the executor's id; the highest id it opened; who takes new ones. */
  readonly #tunnels = new Map<number, TunnelStream>();
  #tunnelHigh = TUNNEL_ID_BASE;
  #onTunnel: ((stream: Duplex) => void) | undefined;
  /** What the last LISTEN asked for (its socket only if taken), asked again of a woken executor. */
  #listening: { port: number; socket?: string } | undefined;
  readonly #sleeps: boolean;
  #lifetime: Lifetime = "awake";
  /** Resolved at every change of `#lifetime` (and when the connection ends). */
  #changed = Promise.withResolvers<void>();
  /** Frames written while the executor may not be reading, sent once it is again. */
  #held: Buffer[] = [];
  /** Times the executor exited when idle, and was woken. */
  idleExits = 0;
  wakes = 0;
  /** Told when the executor died outside BYE, with its exit status. */
  onExecutorExit: ((status: string) => void) | undefined;
  /** A PONG came: the executor this connection started with did start. */
  #answered = false;
  /** GONE frames still taken as "start a new one" before the first PONG (see the constructor). */
  #startExits: number;

  /**
   * `input` carries the executor's stdout, `output` its stdin. With `sleeps`, the executor runs
   * under the sandbox's wrapper (protocol.ts EXECUTOR_WRAPPER) and may exit when idle: the
   * connection starts with WAKE (the wrapper may be waiting), answers IDLE with BYE when nothing
   * is in flight, and wakes the executor again for the next call. `startExits`: how many times the
   * executor the connection starts with may end before its first answer, failing the call in
   * flight, with the next call waking another (a guest that ended it on a stale view of the
   * channel, microvm.ts); beyond that, and for an executor being woken, it is a violation.
   */
  constructor(input: Readable, output: Writable, options: { sleeps?: boolean; reattached?: boolean; startExits?: number } = {}) {
    this.#startExits = options.startExits ?? 0;
    this.#input = input;
    this.#output = output;
    this.#strict = options.reattached !== true;
    this.#firstId = options.reattached === true ? 1 + randomInt(0x4000_0000) : 1;
    this.#nextId = this.#firstId;
    this.#sleeps = options.sleeps === true;
    if (this.#sleeps) output.write(Buffer.of(WAKE));
    input.on("data", (chunk: Buffer) => {
      try {
        for (const f of this.#frames.push(chunk)) this.#onFrame(f);
      } catch (err) {
        this.#violate(err instanceof Error ? err.message : String(err));
      }
    });
    const lost = () => this.#fail(new Error("sandbox connection closed"));
    for (const s of new Set<Readable | Writable>([input, output])) {
      s.on("close", lost);
      s.on("error", (err: Error) => this.#fail(err));
    }
    input.on("end", lost);
  }

  /** True until the stream ends. */
  get alive(): boolean {
    return this.#closed === undefined;
  }

  /** True while the executor has exited when idle (or is doing so): the next call wakes it. */
  get asleep(): boolean {
    return this.#lifetime === "asleep" || this.#lifetime === "leaving";
  }

  /** Wakes the executor if it sleeps; rejects as a call would when that fails. */
  wake(): Promise<void> {
    return this.#ready();
  }

  /** What the executor did wrong, when the connection ended over a protocol violation. */
  get violation(): string | undefined {
    return this.#violation;
  }

  #violate(message: string): void {
    if (this.#closed) return;
    this.#violation = message;
    this.#fail(new Error(`executor protocol violation: ${message}`));
    this.#input.destroy();
    this.#output.destroy();
  }

  #onFrame(f: Frame): void {
    if (!FROM_EXECUTOR.has(f.type)) throw new Error(`frame type ${f.type} from the executor`);
    if (LIFETIME_FRAMES.has(f.type)) return this.#onLifetimeFrame(f);
    if (TUNNEL_FRAMES.has(f.type) || f.id >= TUNNEL_ID_BASE) return this.#onTunnelFrame(f);
    if (f.id < this.#firstId || f.id >= this.#nextId) {
      if (!this.#strict) return;
      throw new Error(`frame for id ${f.id}, which no call has`);
    }
    if (STREAMED.has(f.type) && f.type !== F.ENTRIES && f.payload.length > MAX_CHUNK) throw new Error(`bulk frame of ${f.payload.length} bytes`);
    const p = this.#pending.get(f.id);
    // A late frame of a call that already ended (killed, abandoned) is dropped; a STARTED that
    // names a passed stdout is answered first (see #passedStdout).
    if (!p || p.done) {
      if (f.type === F.STARTED) this.#passedStdout(f);
      return;
    }
    if (f.type === F.ACK) return this.#onAck(p, f);
    p.frames.push(f);
    if (FINAL.has(f.type)) p.done = true;
    const w = p.wake;
    p.wake = undefined;
    w?.();
  }

  /**
   * A frame of an egress tunnel: TOPEN takes a new id above every earlier one; the other frames
   * name an open tunnel, or are dropped (a tunnel closed meanwhile, or one of the executor's
   * connection to an earlier server process, which LISTEN ends).
   */
  #onTunnelFrame(f: Frame): void {
    if (!TUNNEL_FRAMES.has(f.type) || f.id < TUNNEL_ID_BASE) throw new Error(`frame type ${f.type} for id ${f.id}`);
    if (f.type === F.TOPEN) {
      if (f.id <= this.#tunnelHigh) throw new Error(`TOPEN reuses id ${f.id}`);
      if (f.payload.length !== 0 && f.payload.length !== 4) throw new Error(`TOPEN with ${f.payload.length} payload bytes`);
      // The executor holds at most MAX_TUNNELS: more is a flood, not clients.
      if (this.#tunnels.size >= MAX_TUNNELS) throw new Error(`more than ${MAX_TUNNELS} tunnels open`);
      this.#tunnelHigh = f.id;
      const id = f.id;
      const stream = new TunnelStream({
        write: (type, payload) => this.#write(type, id, payload),
        drained: () => (this.#closed ? Promise.resolve() : drainedOrClosed(this.#output)),
        release: () => this.#tunnels.delete(id),
      });
      this.#tunnels.set(id, stream);
      if (f.payload.length === 4) {
        // A DIAL's connection: it goes to that call, or is closed when the call is gone (given up,
        // or of an earlier connection).
        const p = this.#pending.get(f.payload.readUInt32BE(0));
        if (p?.dials === true && !p.done && p.dialed === undefined) p.dialed = stream;
        else stream.destroy();
        return;
      }
      // A connection nobody listens for (a LISTEN of an earlier server connection) is closed.
      if (this.#onTunnel) this.#onTunnel(stream);
      else stream.destroy();
      return;
    }
    const t = this.#tunnels.get(f.id);
    if (!t) return;
    switch (f.type) {
      case F.TDATA:
        if (f.payload.length > MAX_CHUNK) throw new Error(`tunnel frame of ${f.payload.length} bytes`);
        t.received(f.payload);
        break;
      case F.TEND:
        t.ended();
        break;
      case F.TCLOSE:
        t.peerClosed();
        break;
      case F.TCREDIT:
        if (f.payload.length !== 4) throw new Error("TCREDIT without a count");
        t.credited(f.payload.readUInt32BE(0));
        break;
    }
  }

  /** ACK: a CONTROL of the call `p` was done, or failed with a fault. */
  #onAck(p: Pending, f: Frame): void {
    if (f.payload.length < 4) throw new Error("ACK without a number");
    const n = f.payload.readUInt32BE(0);
    const waiter = p.acks?.get(n);
    if (!waiter) throw new Error(`ACK ${n}, which no CONTROL asked for`);
    p.acks?.delete(n);
    if (f.payload.length === 4) return waiter.resolve();
    let info: FaultInfo;
    try {
      info = JSON.parse(f.payload.toString("utf8", 4)) as FaultInfo;
    } catch {
      throw new Error("ACK with a malformed fault");
    }
    waiter.reject(faultFromWire(info, typeof info.cause === "string" ? `executor: ${info.cause}` : undefined));
  }

  /** What reaches the running command of the call `id` (`p`): CONTROL frames, each awaiting its ACK. */
  #inputOf(id: number, p: Pending): ProcessInput {
    let next = 1;
    const ask = (op: number, operand?: Uint8Array): Promise<void> => {
      if (p.done || this.#closed) return Promise.reject(new DomainError("PROCESS_NOT_RUNNING", "The process has ended"));
      const n = next++;
      const waiter = Promise.withResolvers<void>();
      (p.acks ??= new Map()).set(n, waiter);
      const head = Buffer.allocUnsafe(5);
      head.writeUInt32BE(n, 0);
      head.writeUInt8(op, 4);
      this.#write(F.CONTROL, id, operand === undefined || operand.length === 0 ? head : Buffer.concat([head, operand]));
      return waiter.promise;
    };
    return {
      async write(data) {
        for (let at = 0; at < data.length; at += MAX_CHUNK) await ask(CONTROL_OP.STDIN, data.subarray(at, at + MAX_CHUNK));
      },
      closeStdin: () => ask(CONTROL_OP.CLOSE),
      resize(rows, cols) {
        const size = Buffer.allocUnsafe(4);
        size.writeUInt16BE(rows, 0);
        size.writeUInt16BE(cols, 2);
        return ask(CONTROL_OP.RESIZE, size);
      },
      signal: (name) => ask(CONTROL_OP.SIGNAL, Buffer.from(name, "latin1")),
    };
  }

  /** IDLE, GONE, STAY: see `Lifetime`. */
  #onLifetimeFrame(f: Frame): void {
    if (f.id !== 0 || f.payload.length !== (f.type === F.GONE ? 4 : 0)) throw new Error(`frame type ${f.type} with id ${f.id} and ${f.payload.length} payload bytes`);
    if (!this.#sleeps) throw new Error(`frame type ${f.type} from an executor that does not sleep`);
    if (f.type === F.GONE && this.#lifetime === "awake" && !this.#answered && this.#startExits > 0) {
      // Allowed a few times (`startExits`): the call in flight fails, the next one wakes a new executor.
      this.#startExits--;
      this.#endInFlight(new Error(`the sandbox's executor exited before its first answer (status ${f.payload.toString("latin1", 0, 3)})`));
      this.#setLifetime("asleep");
      return;
    }
    if (f.type === F.GONE && (this.#lifetime === "waking" || !this.#answered)) {
      // It exited as it started (its files are gone, the sandbox cannot start a process): waking it
      // again would only fail again, so the provider restarts the sandbox (see `violation`).
      return this.#violate(`the executor exited as it started (status ${f.payload.toString("latin1", 0, 3)})`);
    }
    if (f.type === F.GONE && this.#lifetime !== "leaving") {
      // The executor died on its own (killed, crashed): what it was doing is lost; the next call
      // starts a new one. The connection stays: the sandbox is still there.
      const status = f.payload.toString("latin1", 0, 3);
      const oom = f.payload[3] === 0x31;
      const err = Object.assign(new Error(`the sandbox's executor exited (status ${status}${oom ? ", OOM kill counted" : ""})`), { executorStatus: Number(status), oomKilled: oom });
      this.onExecutorExit?.(status);
      this.#endInFlight(err);
      this.#setLifetime("asleep");
      return;
    }
    if (f.type === F.IDLE) {
      // Ignored when anything is in flight: the executor asks again after its next idle time.
      if (this.#lifetime !== "awake" || this.#pending.size > 0 || this.#tunnels.size > 0) return;
      this.#setLifetime("leaving");
      writeFrame(this.#output, F.BYE, 0);
      // An executor that neither exits nor stays holds every call: treat it as broken (the
      // provider then restarts the sandbox).
      const leaving = this.#changed.promise;
      const timer = setTimeout(() => {
        if (this.#lifetime === "leaving") this.#violate(`no answer to BYE within ${BYE_TIMEOUT_MS} ms`);
      }, BYE_TIMEOUT_MS);
      timer.unref();
      void leaving.then(() => clearTimeout(timer));
      return;
    }
    if (this.#lifetime !== "leaving") throw new Error(`frame type ${f.type} without BYE`);
    if (f.type === F.STAY) {
      this.#setLifetime("awake");
      this.#flushHeld();
      return;
    }
    // GONE: the executor reads no more; whatever comes next starts a new one. Frames held meanwhile
    // were for it (late credit, a tunnel's close) and go with it; calls wait in `#ready`, which wakes.
    this.idleExits++;
    this.#held = [];
    this.#setLifetime("asleep");
  }

  #setLifetime(to: Lifetime): void {
    this.#lifetime = to;
    const changed = this.#changed;
    this.#changed = Promise.withResolvers<void>();
    changed.resolve();
  }

  #flushHeld(): void {
    const held = this.#held;
    this.#held = [];
    for (const b of held) this.#output.write(b);
  }

  /** Resolves once the executor reads what is written: at once while awake, else after waking it. */
  async #ready(): Promise<void> {
    while (this.#lifetime !== "awake" && this.#lifetime !== "waking" && !this.#closed) {
      const changed = this.#changed.promise;
      if (this.#lifetime === "asleep") void this.#wake();
      await changed;
    }
    if (this.#lifetime === "waking") await this.#waking;
    if (this.#closed) throw unavailable(this.#closed);
  }

  #waking: Promise<void> | undefined;

  /**
   * Starts the executor again: WAKE for the wrapper, then PING (the first answer) and the LISTEN
   * of the executor before it; calls wait meanwhile. A failure ends the connection (the provider
   * then reconnects as after any loss).
   */
  #wake(): Promise<void> {
    this.#waking ??= (async () => {
      this.#setLifetime("waking");
      this.#output.write(Buffer.of(WAKE));
      try {
        await this.#ping(WAKE_TIMEOUT_MS, true);
        const listening = this.#listening;
        if (listening && this.#onTunnel) await this.#listen(listening.port, listening.socket, true);
        this.wakes++;
        this.#setLifetime("awake");
        this.#flushHeld();
      } catch (err) {
        this.#fail(err instanceof Error ? err : new Error(String(err)));
      } finally {
        this.#waking = undefined;
      }
    })();
    return this.#waking;
  }

  #fail(err: Error): void {
    if (this.#closed) return;
    this.#closed = err;
    this.#changed.resolve();
    this.#endInFlight(err);
  }

  /** Ends every tunnel and call in flight with `err`, and drops what was held for the executor. */
  #endInFlight(err: Error): void {
    this.#held = [];
    for (const t of this.#tunnels.values()) t.peerClosed();
    for (const p of this.#pending.values()) {
      p.error ??= err;
      p.done = true;
      endAcks(p);
      const w = p.wake;
      p.wake = undefined;
      w?.();
    }
  }

  #write(type: number, id: number, payload?: Uint8Array): boolean {
    if (this.#closed) return true;
    // Between BYE and the executor's answer nothing may reach the pipe (see Lifetime); after GONE
    // it waits for the next executor. Only tunnel frames and late credit or kills come here then:
    // calls wait in `#ready`.
    if (this.#lifetime === "leaving" || this.#lifetime === "asleep") {
      this.#held.push(encodeFrame(type, id, payload));
      return true;
    }
    return writeFrame(this.#output, type, id, payload);
  }

  /** Writes a frame, waiting while the stream is full (bulk uploads). */
  async #send(type: number, id: number, payload?: Uint8Array): Promise<void> {
    if (this.#write(type, id, payload) || this.#closed) return;
    await drainedOrClosed(this.#output);
  }

  /**
   * Starts a call with `type` (EXEC, OP, PING) and yields its frames up to and including the
   * final one, returning credit for streamed bytes as they are consumed. `upload` bytes follow as
   * DATA frames and an END. Ending the iteration early (or `signal` aborting) sends KILL.
   */
  async *#call(type: number, request: unknown, options: { signal?: AbortSignal; upload?: Uint8Array; waking?: boolean; control?: ProcessControl; onDialed?: (stream: Duplex) => void } = {}): AsyncGenerator<Frame> {
    // The wake's own PING and LISTEN go out while it is waking; every other call waits for it.
    // Synchronous while awake: the request goes out in the caller's turn, as before.
    if (!options.waking && this.#lifetime !== "awake") await this.#ready();
    if (this.#closed) throw unavailable(this.#closed);
    const id = this.#nextId++;
    const p: Pending = { frames: [], wake: undefined, done: false, error: undefined, unacked: 0, ...(type === F.DIAL ? { dials: true } : {}) };
    this.#pending.set(id, p);
    const kill = () => this.#write(F.KILL, id);
    options.signal?.addEventListener("abort", kill, { once: true });
    let ended = false;
    try {
      this.#write(type, id, request === undefined ? undefined : Buffer.from(JSON.stringify(request)));
      if (options.signal?.aborted) kill();
      if (options.upload) {
        for (let at = 0; at < options.upload.length && !p.done; at += MAX_CHUNK) await this.#send(F.DATA, id, options.upload.subarray(at, at + MAX_CHUNK));
        this.#write(F.END, id);
      }
      for (;;) {
        const f = p.frames.shift();
        if (f) {
          if (STREAMED.has(f.type)) {
            p.unacked += f.payload.length;
            if (p.unacked >= CREDIT_BATCH) {
              const credit = Buffer.allocUnsafe(4);
              credit.writeUInt32BE(p.unacked, 0);
              this.#write(F.CREDIT, id, credit);
              p.unacked = 0;
            }
          }
          if (FINAL.has(f.type)) ended = true;
          // A DIAL's answer hands its connection over (its TOPEN came first).
          if (ended && f.type === F.RESULT && p.dialed !== undefined) {
            options.onDialed?.(p.dialed);
            p.dialed = undefined;
          }
          // The command runs from STARTED on (the executor took its input then), until its end.
          if (f.type === F.STARTED) options.control?.bind(this.#inputOf(id, p));
          yield f;
          if (ended) return;
          continue;
        }
        if (p.done) throw p.error ? unavailable(p.error) : new Error("executor call ended without a final frame");
        await new Promise<void>((r) => (p.wake = r));
      }
    } finally {
      options.signal?.removeEventListener("abort", kill);
      // A STARTED never read (the caller stopped first) may name a passed stdout.
      for (const f of p.frames) if (f.type === F.STARTED) this.#passedStdout(f);
      if (!ended) kill();
      this.#pending.delete(id);
      p.done = true;
      endAcks(p);
      options.control?.end();
      // A connection whose DIAL was given up before its answer is not left open.
      if (p.dialed && !ended) p.dialed.destroy();
    }
  }

  /** The parsed JSON payload of `f`; a payload that is not JSON is a protocol violation. */
  #json<T>(f: Frame): T {
    try {
      return JSON.parse(f.payload.toString("utf8")) as T;
    } catch {
      this.#violate(`frame type ${f.type} carries no JSON`);
      throw unavailable(new Error("executor sent malformed JSON"));
    }
  }

  /** Throws what a FAULT or ERROR frame reports. */
  #raise(f: Frame): never {
    if (f.type === F.FAULT) {
      const info = this.#json<FaultInfo>(f);
      throw faultFromWire(info, typeof info.cause === "string" ? `executor: ${info.cause}` : undefined);
    }
    if (f.type === F.ERROR) throw new Error(`sandbox executor: ${this.#json<{ message: string }>(f).message}`);
    this.#violate(`unexpected frame type ${f.type}`);
    throw unavailable(new Error(`unexpected frame type ${f.type}`));
  }

  /** Resolves with the executor's version once it answers a PING, or rejects after `timeoutMs`. */
  ping(timeoutMs: number): Promise<string> {
    return this.#ping(timeoutMs, false);
  }

  async #ping(timeoutMs: number, waking: boolean): Promise<string> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    const answer = (async () => {
      for await (const f of this.#call(F.PING, undefined, { signal: abort.signal, waking })) {
        if (f.type === F.PONG) {
          this.#answered = true;
          return f.payload.toString("utf8");
        }
        this.#raise(f);
      }
      throw new Error("no PONG");
    })();
    const timedOut = new Promise<never>((_, reject) =>
      abort.signal.addEventListener("abort", () =>
        reject(new DomainError("WORKSPACE_NOT_READY", `The workspace sandbox did not answer within ${timeoutMs} ms; check its image (bash and glibc are required) and retry`)),
      ),
    );
    try {
      return await Promise.race([answer, timedOut]);
    } finally {
      clearTimeout(timer);
      answer.catch(() => undefined);
    }
  }

  /**
   * Has the executor accept proxy clients on the sandbox's loopback `port`; each connection is
   * handed to `onTunnel` as a stream. Replaces the tunnels of an earlier connection. With
   * `socket` (a path in the sandbox to a Unix socket the server listens on), connections go there
   * instead when the executor can reach it; the answer says which way they take.
   */
  async listen(port: number, onTunnel: (stream: Duplex) => void, socket?: string): Promise<"socket" | "channel"> {
    this.#onTunnel = onTunnel;
    const via = await this.#listen(port, socket, false);
    // A woken executor is offered the socket only if this one could reach it: a sandbox that cannot
    // (gVisor without host sockets) is not made to try again on every wake.
    this.#listening = { port, ...(socket !== undefined && via === "socket" ? { socket } : {}) };
    return via;
  }

  async #listen(port: number, socket: string | undefined, waking: boolean): Promise<"socket" | "channel"> {
    for await (const f of this.#call(F.LISTEN, { port, ...(socket === undefined ? {} : { socket }) }, { waking })) {
      if (f.type === F.RESULT) return this.#json<{ via?: string }>(f).via === "socket" ? "socket" : "channel";
      this.#raise(f);
    }
    throw new Error("executor call ended without a result");
  }

  /**
   * Connects to `port` on the sandbox's loopback, from inside the sandbox (ExposePort's proxy):
   * the connection is a tunnel of this channel, under the same credit as egress. A port nothing
   * listens on is PORT_NOT_LISTENING.
   */
  async dial(port: number, signal?: AbortSignal): Promise<Duplex> {
    let stream: Duplex | undefined;
    for await (const f of this.#call(F.DIAL, { port }, { signal, onDialed: (s) => (stream = s) })) {
      if (f.type !== F.RESULT) this.#raise(f);
      if (stream === undefined) {
        this.#violate("DIAL answered before its connection's TOPEN");
        throw unavailable(new Error("DIAL answered without a connection"));
      }
      return stream;
    }
    throw new Error("executor call ended without a result");
  }

  /**
   * TAKEN for a STARTED that names a passed stdout (ExecRequest.passStdout) nobody will open: the
   * executor keeps its descriptor until told, for its number, once free, could name another pipe.
   */
  #passedStdout(f: Frame): void {
    try {
      if (typeof (JSON.parse(f.payload.toString("utf8")) as { stdoutFd?: unknown }).stdoutFd === "number") this.#write(F.TAKEN, f.id);
    } catch {
      // Not JSON: no descriptor named.
    }
  }

  /**
   * Runs a command in the sandbox; ending the iteration early kills the process tree there.
   * `takeStdout` (with `req.passStdout`) gets the executor's descriptor of the command's stdout, or
   * undefined when it has none, as STARTED comes and before it is yielded; it must open its own
   * copy then, for the executor closes its descriptor once told (TAKEN, sent right after).
   */
  async *exec(req: ExecRequest, signal?: AbortSignal, control?: ProcessControl, takeStdout?: (fd: number | undefined) => void): AsyncGenerator<ExecEvent> {
    for await (const f of this.#call(F.EXEC, req, { signal, control })) {
      switch (f.type) {
        case F.STARTED: {
          const started = this.#json<{ startedAt: string; pid?: unknown; stdoutFd?: unknown }>(f);
          const pid = typeof started.pid === "number" && Number.isSafeInteger(started.pid) && started.pid > 0 ? started.pid : undefined;
          if (req.passStdout) {
            const fd = typeof started.stdoutFd === "number" && Number.isSafeInteger(started.stdoutFd) && started.stdoutFd >= 0 ? started.stdoutFd : undefined;
            try {
              takeStdout?.(fd);
            } finally {
              if (fd !== undefined) this.#write(F.TAKEN, f.id);
            }
          }
          yield { type: "started", startedAt: new Date(started.startedAt), ...(pid === undefined ? {} : { pid }) };
          break;
        }
        case F.STDOUT:
          yield { type: "stdout", data: f.payload };
          break;
        case F.STDERR:
          yield { type: "stderr", data: f.payload };
          break;
        case F.EXITED:
          yield { type: "exited", exit: this.#json<ExecExit>(f) };
          break;
        default:
          this.#raise(f);
      }
    }
  }

  /** A file operation answered by one RESULT. */
  async op<T>(req: OpRequest, upload?: Uint8Array): Promise<T> {
    for await (const f of this.#call(F.OP, req, { upload })) {
      if (f.type === F.RESULT) return this.#json<T>(f);
      this.#raise(f);
    }
    throw new Error("executor call ended without a result");
  }

  /** A file operation answering with bytes (CHUNK frames) or entries (ENTRIES frames), then a RESULT. */
  async opCollect<T>(req: OpRequest): Promise<{ bytes: Buffer; entries: unknown[]; result: T }> {
    const chunks: Buffer[] = [];
    const entries: unknown[] = [];
    for await (const f of this.#call(F.OP, req)) {
      if (f.type === F.CHUNK) chunks.push(f.payload);
      else if (f.type === F.ENTRIES) entries.push(...this.#batch(f));
      else if (f.type === F.RESULT) return { bytes: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks), entries, result: this.#json<T>(f) };
      else this.#raise(f);
    }
    throw new Error("executor call ended without a result");
  }

  /** The entries an ENTRIES frame carries; anything but a JSON array is a protocol violation. */
  #batch(f: Frame): unknown[] {
    const batch = this.#json<unknown>(f);
    if (!Array.isArray(batch)) {
      this.#violate("ENTRIES is not an array");
      throw unavailable(new Error("executor sent malformed entries"));
    }
    return batch;
  }

  /** A file operation answering with batches of entries; stopping early abandons it in the executor. */
  async *opEntries<T>(req: OpRequest): AsyncGenerator<T[]> {
    for await (const f of this.#call(F.OP, req)) {
      if (f.type === F.ENTRIES) yield this.#batch(f) as T[];
      else if (f.type === F.RESULT) return;
      else this.#raise(f);
    }
  }

  /**
   * Ends the calls an earlier connection left running in the executor (their process trees are
   * killed; nothing of theirs comes after the answer) and checks frames strictly from then on.
   * Resolves to how many there were.
   */
  async forgetEarlierCalls(): Promise<number> {
    const { ended } = await this.op<{ ended?: unknown }>({ root: "/", op: "forget", rel: "" });
    this.#strict = true;
    return typeof ended === "number" ? ended : 0;
  }

  /** Detaches without stopping the sandbox. */
  close(): void {
    this.#fail(new Error("sandbox connection closed by the server"));
    this.#input.destroy();
    this.#output.destroy();
  }
}
