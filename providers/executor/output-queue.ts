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
  #taken = 0;

  /** Items the consumer has taken so far (a measure of its progress). */
  get taken(): number {
    return this.#taken;
  }

  /** Whether a producer is waiting for room (the consumer, not the producer, is behind). */
  get full(): boolean {
    return this.#room.length > 0;
  }

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
        this.#taken++;
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

/**
 * Gives up on pipes that a process which has exited still holds open (one that escaped every kill
 * must not keep the call open for ever): `giveUp` runs once the pipes and their consumer made no
 * progress for `quietMs` (nothing read from a pipe, nothing taken from `queue`, no producer waiting
 * for room), or `capMs` after the start whatever happens. Each check runs one poll of the event
 * loop after its timer: a timer that fires late because the loop was busy must not beat output the
 * kernel already holds (timers run before the poll that would read it). Returns a cancel function.
 */
export function giveUpWhenQuiet(pipes: readonly Readable[], queue: { readonly taken: number; readonly full: boolean }, giveUp: () => void, quietMs: number, capMs: number): () => void {
  const progress = () => `${queue.taken} ${pipes.map((p) => `${(p as { bytesRead?: number }).bytesRead ?? 0}/${p.readableLength}`).join(" ")}`;
  const deadline = performance.now() + capMs;
  let last = progress();
  let timer: NodeJS.Timeout | undefined;
  let immediate: NodeJS.Immediate | undefined;
  const arm = () => {
    timer = setTimeout(() => (immediate = setImmediate(check)), Math.max(0, Math.min(quietMs, deadline - performance.now())));
  };
  const check = () => {
    const now = progress();
    if (performance.now() >= deadline || (now === last && !queue.full)) giveUp();
    else {
      last = now;
      arm();
    }
  };
  arm();
  return () => {
    clearTimeout(timer);
    clearImmediate(immediate);
  };
}
