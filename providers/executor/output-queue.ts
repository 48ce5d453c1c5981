/**
 * A bounded queue between output producers (a command's pipes) and one consumer (the event
 * iterator). Producers wait while it is full, which stops reading the pipe and, through the pipe's
 * buffer, blocks the command: memory stays bounded however much a command prints and however
 * slowly its output is taken. Used by the executor's process supervision and by the local
 * provider for a command's stdout handed to the server directly.
 *
 * Imports only node: modules and types, because it also runs inside sandboxes.
 */
import type { Readable } from "node:stream";

/** Largest output chunk emitted, in bytes. */
export const MAX_CHUNK_BYTES = 64 * 1024;
/** Items buffered before producers wait. */
const HIGH_WATER = 8;

export class OutputQueue<T> {
  readonly #items: T[] = [];
  #wake: (() => void) | undefined;
  // Several producers may wait for room at once: keep every waiter (a single slot would lose one
  // forever and deadlock the command on a full pipe).
  readonly #room: Array<() => void> = [];
  #closed = false;

  /** Adds an item; resolves once there is room for another. */
  async push(item: T): Promise<void> {
    if (this.#closed) return;
    this.#items.push(item);
    this.notify();
    while (this.#items.length >= HIGH_WATER && !this.#closed) await new Promise<void>((r) => this.#room.push(r));
  }

  /** The consumer is gone: waiting producers go on, and whatever they push is dropped. */
  close(): void {
    this.#closed = true;
    this.#items.length = 0;
    for (const w of this.#room.splice(0)) w();
    this.notify();
  }

  /** Wakes the consumer to look again (an item came, or a producer finished). */
  notify(): void {
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }

  /** The next item, or undefined once the queue is empty and `finished()` says nothing more comes. */
  async next(finished: () => boolean): Promise<T | undefined> {
    for (;;) {
      const item = this.#items.shift();
      if (item !== undefined) {
        for (const w of this.#room.splice(0)) w();
        return item;
      }
      if (finished()) return undefined;
      await new Promise<void>((r) => (this.#wake = r));
    }
  }
}

/**
 * Reads `stream` into `queue` as chunks of at most MAX_CHUNK_BYTES, pausing while the queue is
 * full. Resolves at the stream's end; a destroyed or failed stream simply ends it.
 */
export async function pumpOutput<T>(stream: Readable, queue: OutputQueue<T>, item: (data: Uint8Array) => T): Promise<void> {
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      for (let at = 0; at < chunk.length; at += MAX_CHUNK_BYTES) await queue.push(item(chunk.subarray(at, at + MAX_CHUNK_BYTES)));
    }
  } catch {
    // A destroyed pipe ends its pump; the exit event still follows.
  }
}
