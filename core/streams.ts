/**
 * Stream helpers both layers use.
 */
import type { EventEmitter } from "node:events";
import type { Writable } from "node:stream";

/**
 * Resolves once `out` drains or `closer` (by default `out` itself) closes, whichever comes first;
 * both listeners are removed then. For writers that stop at a full buffer and must not wait for
 * ever on a peer that went away.
 */
export function drainedOrClosed(out: Writable, closer: EventEmitter = out): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      out.off("drain", done);
      closer.off("close", done);
      resolve();
    };
    out.on("drain", done);
    closer.on("close", done);
  });
}
