/**
 * The output ring of a background process (server/processes/output-ring.ts) against a model: the
 * whole stream kept in full. Whatever is written in whatever chunks, a read from any offset returns
 * exactly the model's bytes from max(offset, start), at most `max` of them, and says how many bytes
 * it skipped because they were no longer kept; the ring never holds more than its capacity.
 */
import test from "ava";
import fc from "fast-check";
import { OutputRing } from "../server/processes/output-ring.ts";

test("a ring read from any offset is the stream's bytes from the oldest kept on, and says what it missed", (t) => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 64 }),
      fc.array(fc.uint8Array({ minLength: 0, maxLength: 100 }), { maxLength: 30 }),
      fc.array(fc.tuple(fc.nat(3000), fc.integer({ min: 1, max: 200 })), { minLength: 1, maxLength: 10 }),
      (capacity, chunks, reads) => {
        const ring = new OutputRing(capacity);
        const all: number[] = [];
        for (const c of chunks) {
          ring.push(c);
          all.push(...c);
        }
        const start = Math.max(0, all.length - capacity);
        if (ring.total !== all.length || ring.start !== start || ring.dropped !== start) return false;
        for (const [offset, max] of reads) {
          const r = ring.read(offset, max);
          const from = Math.min(Math.max(offset, start), all.length);
          const want = all.slice(from, Math.min(from + max, all.length));
          if (r.offset !== from || r.missed !== Math.max(0, start - offset) || !Buffer.from(want).equals(r.data)) return false;
        }
        return true;
      },
    ),
    { numRuns: 500 },
  );
  t.pass();
});

test("a chunk larger than the ring keeps only its tail, and a read past the end returns nothing", (t) => {
  const ring = new OutputRing(4);
  ring.push(Buffer.from("abcdefgh"));
  t.is(ring.total, 8);
  t.deepEqual(ring.read(0, 100), { offset: 4, data: Buffer.from("efgh"), missed: 4 });
  t.deepEqual(ring.read(9, 10), { offset: 8, data: Buffer.alloc(0), missed: 0 });
  ring.push(Buffer.from("ij"));
  t.deepEqual(ring.read(6, 3), { offset: 6, data: Buffer.from("ghi"), missed: 0 });
});
