/**
 * Docker's framing of an attached container's output, kept on the Docker side so the generic
 * executor connection only ever sees a plain byte stream. Without a TTY, the engine multiplexes
 * stdout and stderr on one stream: each block is an 8-byte header (stream type, three zero bytes,
 * u32 big-endian size) and its payload. Stdin travels unframed on the same hijacked socket.
 */
import { Transform, type TransformCallback } from "node:stream";

/** Largest block accepted; the engine sends its own buffer sizes (32 KiB), far below this. */
const MAX_BLOCK = 16 * 1024 * 1024;

/**
 * A stream of the container's stdout payload, read from Docker's multiplexed attach output;
 * stderr blocks go to `onStderr`. A malformed header destroys the stream with an error.
 */
export class DockerAttachDemux extends Transform {
  readonly #onStderr: (chunk: Buffer) => void;
  /** Unparsed bytes: at most one header plus the part of a block received so far. */
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** Bytes still to pass through of the current block, and its stream type. */
  #remaining = 0;
  #stream = 1;

  constructor(onStderr: (chunk: Buffer) => void) {
    super();
    this.#onStderr = onStderr;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.#remaining > 0) {
        // Inside a block: pass its bytes through without copying.
        const take = Math.min(this.#remaining, chunk.length - at);
        const part = chunk.subarray(at, at + take);
        if (this.#stream === 2) this.#onStderr(part);
        else this.push(part);
        this.#remaining -= take;
        at += take;
        continue;
      }
      // Collect the 8-byte header, which may arrive split across chunks.
      const need = 8 - this.#pendingBytes;
      const part = chunk.subarray(at, at + need);
      this.#pending.push(part);
      this.#pendingBytes += part.length;
      at += part.length;
      if (this.#pendingBytes < 8) break;
      const header = Buffer.concat(this.#pending, 8);
      this.#pending = [];
      this.#pendingBytes = 0;
      const type = header[0];
      const size = header.readUInt32BE(4);
      if (type > 2 || header[1] !== 0 || header[2] !== 0 || header[3] !== 0 || size > MAX_BLOCK) {
        done(new Error(`malformed Docker attach header (type ${type}, size ${size})`));
        return;
      }
      this.#stream = type;
      this.#remaining = size;
    }
    done();
  }
}
