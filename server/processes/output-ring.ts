/**
 * One stream of a background process's output, kept in a bounded ring: the last `capacity` bytes,
 * addressed by their offset in the whole stream, with the total written. A reader asks from an
 * offset and learns how much of what it asked for is no longer kept.
 */

/** What a read from an offset found. */
export interface RingRead {
  /** The offset `data` starts at (the offset asked for, or the oldest kept byte when that came later). */
  offset: number;
  data: Buffer;
  /** Bytes between the offset asked for and `offset` that are no longer kept. */
  missed: number;
}

export class OutputRing {
  readonly capacity: number;
  /** Kept chunks, oldest first; each its own copy (a view would keep the frame it came in alive). */
  #chunks: Buffer[] = [];
  #kept = 0;
  #total = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  /** Bytes written in all. */
  get total(): number {
    return this.#total;
  }

  /** Offset of the oldest byte still kept. */
  get start(): number {
    return this.#total - this.#kept;
  }

  /** Bytes written that are no longer kept. */
  get dropped(): number {
    return this.start;
  }

  push(data: Uint8Array): void {
    if (data.length === 0) return;
    this.#total += data.length;
    // Only the tail of a chunk larger than the whole ring is worth a copy.
    const keep = data.length > this.capacity ? data.subarray(data.length - this.capacity) : data;
    this.#chunks.push(Buffer.from(keep));
    this.#kept += keep.length;
    while (this.#kept > this.capacity) {
      const first = this.#chunks[0];
      const over = this.#kept - this.capacity;
      if (first.length <= over) {
        this.#chunks.shift();
        this.#kept -= first.length;
      } else {
        this.#chunks[0] = first.subarray(over);
        this.#kept -= over;
      }
    }
  }

  /** At most `max` bytes from `offset` (clamped to what is kept and written). */
  read(offset: number, max: number): RingRead {
    const start = this.start;
    const from = Math.min(Math.max(offset, start), this.#total);
    const missed = Math.max(0, Math.min(start, this.#total) - offset);
    const end = Math.min(from + max, this.#total);
    if (end <= from) return { offset: from, data: Buffer.alloc(0), missed };
    const parts: Buffer[] = [];
    let at = start;
    for (const chunk of this.#chunks) {
      const chunkEnd = at + chunk.length;
      if (chunkEnd > from && at < end) parts.push(chunk.subarray(Math.max(0, from - at), Math.min(chunk.length, end - at)));
      at = chunkEnd;
      if (at >= end) break;
    }
    return { offset: from, data: parts.length === 1 ? parts[0] : Buffer.concat(parts), missed };
  }
}
