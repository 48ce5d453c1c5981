/**
 * The executor's output over a channel that carries only text: E2B's process API hands a
 * process's stdout to its client as decoded UTF-8 text, so raw frames would not survive it. With
 * `--stdout-base64` the executor writes every chunk of its frame stream as one line of base64
 * (`encodeLines`), and the server turns the lines back into the same bytes (`LineDecoder`), so
 * SandboxConnection sees exactly what it would on a binary channel. Stdin stays binary (the API
 * takes bytes). A third more bytes on the way out, and nothing else changes.
 *
 * The lines start after a marker line (CHANNEL_MARKER): whatever a shell printed before the
 * executor started (a login profile's greeting) is not taken for frames.
 */
import { Writable } from "node:stream";

/** The line the executor writes before its first frame. */
export const CHANNEL_MARKER = "aw-channel-base64";

/**
 * A Writable that writes each chunk to `out` as a base64 line, passing `out`'s backpressure on:
 * a write is done only once `out` took the line (or drained).
 */
export function encodeLines(out: NodeJS.WritableStream): Writable {
  out.write(`${CHANNEL_MARKER}\n`);
  const line = (bytes: Buffer, done: () => void) => {
    if (out.write(`${bytes.toString("base64")}\n`)) done();
    else out.once("drain", () => done());
  };
  return new Writable({
    highWaterMark: 64 * 1024,
    write(chunk: Buffer, _encoding, done) {
      line(chunk, done);
    },
    // Corked writes (a frame's header and payload) go as one line.
    writev(chunks, done) {
      line(Buffer.concat(chunks.map((c) => c.chunk as Buffer)), done);
    },
    final(done) {
      done();
    },
  });
}

/** Largest line accepted: a frame chunk of at most a few MiB, in base64. */
const MAX_LINE = 16 * 1024 * 1024;

/**
 * Turns text chunks (cut anywhere) of base64 lines back into bytes, one Buffer per complete line.
 * Throws on a line that is not base64 or is longer than any frame could make.
 */
export class LineDecoder {
  #partial = "";
  #begun = false;

  push(text: string): Buffer[] {
    const lines = (this.#partial + text).split("\n");
    this.#partial = lines.pop() ?? "";
    if (this.#partial.length > MAX_LINE) throw new Error("the executor's output line is too long");
    const out: Buffer[] = [];
    for (const line of lines) {
      if (!this.#begun) {
        this.#begun = line === CHANNEL_MARKER;
        continue;
      }
      if (line === "") continue;
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(line) || line.length % 4 !== 0) throw new Error("the executor's output is not base64 lines");
      out.push(Buffer.from(line, "base64"));
    }
    return out;
  }
}
