/**
 * The wire protocol between the server and the executor resident in a container sandbox
 * (main.ts in this folder). The executor is the container's main process; the server
 * talks to it over the container's attached stdin/stdout, so starting a command costs one frame
 * instead of a Docker exec round trip, and it works the same under runc and gVisor.
 *
 * A frame is `u32 length | u8 type | u32 exec id | payload` (big-endian; length counts type, id
 * and payload). Output flows under per-execution credit: the executor sends at most WINDOW
 * bytes of output beyond what the server has acknowledged as consumed, so a slow consumer of
 * one execution bounds memory without stalling the others.
 *
 * Imports only node: modules: it runs inside sandboxes too.
 */

/** Frame types. */
export const F = {
  /** server → executor: start an execution; JSON ExecRequest. */
  EXEC: 1,
  /** server → executor: kill an execution's process tree now. */
  KILL: 2,
  /** server → executor: a liveness check; answered by PONG carrying the executor's version. */
  PING: 3,
  /** server → executor: u32 bytes of output the server has consumed. */
  CREDIT: 4,
  /** executor → server: the process started; JSON { startedAt }. */
  STARTED: 10,
  /** executor → server: stdout bytes. */
  STDOUT: 11,
  /** executor → server: stderr bytes. */
  STDERR: 12,
  /** executor → server: how the process ended; JSON ExecExit. */
  EXITED: 13,
  /** executor → server: PING's answer. */
  PONG: 14,
  /** executor → server: the request was malformed; JSON { message }. */
  ERROR: 15,
} as const;

/** Output bytes in flight per execution before the executor waits for credit. */
export const WINDOW = 4 * 1024 * 1024;
/** The server returns credit once this many bytes of an execution have been consumed. */
export const CREDIT_BATCH = 512 * 1024;

/** What EXEC carries. */
export interface ExecRequest {
  argv: string[];
  /** Absolute working directory inside the sandbox. */
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  killGraceMs: number;
}

/** Encodes one frame. */
export function encodeFrame(type: number, id: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const head = Buffer.allocUnsafe(9);
  head.writeUInt32BE(5 + payload.length, 0);
  head.writeUInt8(type, 4);
  head.writeUInt32BE(id, 5);
  return Buffer.concat([head, payload]);
}

/** Incrementally splits a byte stream into frames. */
export class FrameReader {
  #buf: Buffer = Buffer.alloc(0);

  /** Feeds bytes; returns the complete frames they finish. */
  push(chunk: Buffer): Array<{ type: number; id: number; payload: Buffer }> {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    const out: Array<{ type: number; id: number; payload: Buffer }> = [];
    let at = 0;
    while (this.#buf.length - at >= 4) {
      const len = this.#buf.readUInt32BE(at);
      if (len < 5 || len > 64 * 1024 * 1024) throw new Error(`corrupt frame length ${len}`);
      if (this.#buf.length - at < 4 + len) break;
      out.push({ type: this.#buf.readUInt8(at + 4), id: this.#buf.readUInt32BE(at + 5), payload: this.#buf.subarray(at + 9, at + 4 + len) });
      at += 4 + len;
    }
    this.#buf = at === this.#buf.length ? Buffer.alloc(0) : this.#buf.subarray(at);
    return out;
  }
}
