/**
 * The server's end of the executor protocol (see executor/protocol.ts): multiplexes executions
 * over one plain byte stream pair of an executor (a container's attached main process, or the
 * local provider's child process), with per-execution credit so each execution's output is
 * buffered only up to the protocol window. How the bytes travel (Docker's attach framing, a
 * child's pipes) is the provider's business: this class only ever sees the executor's stdout and
 * stdin.
 */
import type { Readable, Writable } from "node:stream";
import { DomainError } from "../core/errors.ts";
import { sandboxEnv } from "./executor/env.ts";
import type { ExecEvent, ExecExit, ExecSpec } from "./types.ts";
import { CREDIT_BATCH, encodeFrame, type ExecRequest, F, FrameReader } from "./executor/protocol.ts";

interface Pending {
  queue: ExecEvent[];
  /** PONG's payload. */
  answer?: string;
  wake: (() => void) | undefined;
  done: boolean;
  error: Error | undefined;
  unacked: number;
}

/**
 * The EXEC request for `spec` in a workspace whose root the executor sees at `root` (the host
 * directory for the local provider, /workspace in a container): the working directory under it,
 * the minimal environment with home at the root, and the default kill grace.
 */
export function execRequest(spec: ExecSpec, root: string): ExecRequest {
  return {
    argv: spec.argv,
    cwd: spec.cwd === "" ? root : `${root}/${spec.cwd}`,
    env: sandboxEnv(root, spec.env),
    timeoutMs: spec.timeoutMs,
    killGraceMs: spec.killGraceMs ?? 5000,
  };
}

/** One attached connection to a sandbox executor. */
export class SandboxConnection {
  readonly #input: Readable;
  readonly #output: Writable;
  readonly #pending = new Map<number, Pending>();
  readonly #frames = new FrameReader();
  #nextId = 1;
  #closed: Error | undefined;

  /** `input` carries the executor's stdout, `output` its stdin. */
  constructor(input: Readable, output: Writable) {
    this.#input = input;
    this.#output = output;
    input.on("data", (chunk: Buffer) => {
      try {
        this.#onFrames(chunk);
      } catch (err) {
        this.#fail(err instanceof Error ? err : new Error(String(err)));
        input.destroy();
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

  #onFrames(bytes: Buffer): void {
    for (const f of this.#frames.push(bytes)) {
      const p = this.#pending.get(f.id);
      if (!p) continue;
      switch (f.type) {
        case F.STARTED:
          p.queue.push({ type: "started", startedAt: new Date(JSON.parse(f.payload.toString("utf8")).startedAt) });
          break;
        case F.STDOUT:
        case F.STDERR:
          // Copy: the payload is a view into a buffer the reader reuses.
          p.queue.push({ type: f.type === F.STDOUT ? "stdout" : "stderr", data: Buffer.from(f.payload) });
          break;
        case F.EXITED:
          p.queue.push({ type: "exited", exit: JSON.parse(f.payload.toString("utf8")) as ExecExit });
          p.done = true;
          break;
        case F.PONG:
          p.answer = f.payload.toString("utf8");
          p.done = true;
          break;
        case F.ERROR:
          p.error = new Error(`sandbox executor: ${JSON.parse(f.payload.toString("utf8")).message}`);
          p.done = true;
          break;
      }
      const w = p.wake;
      p.wake = undefined;
      w?.();
    }
  }

  #fail(err: Error): void {
    if (this.#closed) return;
    this.#closed = err;
    for (const p of this.#pending.values()) {
      p.error ??= err;
      p.done = true;
      const w = p.wake;
      p.wake = undefined;
      w?.();
    }
  }

  #register(): [number, Pending] {
    const id = this.#nextId++;
    const p: Pending = { queue: [], wake: undefined, done: false, error: undefined, unacked: 0 };
    this.#pending.set(id, p);
    return [id, p];
  }

  #write(type: number, id: number, payload?: Uint8Array): void {
    if (!this.#closed) this.#output.write(encodeFrame(type, id, payload));
  }

  /** Resolves with the executor's version once it answers a PING, or rejects after `timeoutMs`. */
  async ping(timeoutMs: number): Promise<string> {
    const [id, p] = this.#register();
    const timer = setTimeout(() => {
      p.error = new DomainError("WORKSPACE_NOT_READY", `The workspace sandbox did not answer within ${timeoutMs} ms; check its image (bash and glibc are required) and retry`);
      p.done = true;
      p.wake?.();
    }, timeoutMs);
    try {
      this.#write(F.PING, id);
      while (!p.done) await new Promise<void>((r) => (p.wake = r));
      if (p.error) throw p.error instanceof DomainError ? p.error : unavailable(p.error);
      return p.answer ?? "";
    } finally {
      clearTimeout(timer);
      this.#pending.delete(id);
    }
  }

  /** Runs a request in the sandbox; ending the iteration early kills the process tree there. */
  async *exec(req: ExecRequest, signal?: AbortSignal): AsyncGenerator<ExecEvent> {
    if (this.#closed) throw unavailable(this.#closed);
    const [id, p] = this.#register();
    const onAbort = () => this.#write(F.KILL, id);
    signal?.addEventListener("abort", onAbort, { once: true });
    let finished = false;
    try {
      this.#write(F.EXEC, id, Buffer.from(JSON.stringify(req)));
      if (signal?.aborted) onAbort();
      for (;;) {
        const ev = p.queue.shift();
        if (ev) {
          if (ev.type === "stdout" || ev.type === "stderr") {
            p.unacked += ev.data.length;
            if (p.unacked >= CREDIT_BATCH) {
              const credit = Buffer.allocUnsafe(4);
              credit.writeUInt32BE(p.unacked, 0);
              this.#write(F.CREDIT, id, credit);
              p.unacked = 0;
            }
          }
          if (ev.type === "exited") finished = true;
          yield ev;
          if (finished) return;
          continue;
        }
        if (p.done) {
          throw p.error ? unavailable(p.error) : new Error("sandbox execution ended without an exit event");
        }
        await new Promise<void>((r) => (p.wake = r));
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      if (!finished) this.#write(F.KILL, id);
      this.#pending.delete(id);
    }
  }

  /** Detaches without stopping the sandbox. */
  close(): void {
    this.#fail(new Error("sandbox connection closed by the server"));
    this.#input.destroy();
    this.#output.destroy();
  }
}

function unavailable(cause: Error): DomainError {
  return new DomainError("WORKSPACE_NOT_READY", "The workspace sandbox stopped responding; retry the call", { cause });
}
