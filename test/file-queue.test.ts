/**
 * The file tools' queue (server/tools/file-queue.ts) on its own, where the order of turns can be
 * driven exactly: changes of one path run one at a time in call order, other paths and workspaces
 * do not wait, a failed change does not hold up the next, and a call cancelled while it waited
 * never runs. (The conformance scenario "edits and patches of one file at once all land" covers
 * the queue through the real server on every provider.)
 */
import test from "ava";
import fc from "fast-check";
import { DomainError } from "../core/errors.ts";
import type { WorkspaceHandle } from "../providers/types.ts";
import { inTurn } from "../server/tools/file-queue.ts";

/** A change whose end the test decides. */
function gate() {
  let open!: () => void;
  let fail!: () => void;
  const done = new Promise<void>((resolve, reject) => {
    open = resolve;
    fail = () => reject(new Error("change failed"));
  });
  // A cancelled call never awaits its gate: its failure is nobody's to handle.
  done.catch(() => undefined);
  return { done, open, fail };
}

const workspace = () => ({}) as WorkspaceHandle;

test("changes of one path run one at a time in call order; a cancelled waiter never runs; a failure does not block", async (t) => {
  await fc.assert(
    fc.asyncProperty(
      // Per call: which of two paths, whether its caller cancels while it waits, whether it fails.
      fc.array(fc.record({ path: fc.constantFrom("a.txt", "b.txt"), cancel: fc.boolean(), fails: fc.boolean() }), { minLength: 1, maxLength: 12 }),
      async (calls) => {
        const ws = workspace();
        const ran: number[] = [];
        const running = new Set<string>();
        const gates = calls.map(() => gate());
        const controllers = calls.map(() => new AbortController());
        const results = calls.map((c, i) =>
          inTurn({ workspace: ws, signal: controllers[i].signal }, c.path, async () => {
            if (running.has(c.path)) throw new Error(`two changes of ${c.path} at once`);
            running.add(c.path);
            ran.push(i);
            try {
              await gates[i].done;
            } finally {
              running.delete(c.path);
            }
            return i;
          }).then(
            (v) => ({ ok: true as const, v }),
            (err: unknown) => ({ ok: false as const, err }),
          ),
        );
        // Callers that cancel do so while every call still waits for the first of its path.
        const first = new Map<string, number>();
        calls.forEach((c, i) => first.has(c.path) || first.set(c.path, i));
        calls.forEach((c, i) => c.cancel && first.get(c.path) !== i && controllers[i].abort());
        // Let the changes end one by one, in call order.
        for (let i = 0; i < calls.length; i++) {
          await new Promise((r) => setImmediate(r));
          if (calls[i].fails) gates[i].fail();
          else gates[i].open();
        }
        const settled = await Promise.all(results);
        const expectedRan = calls.map((_, i) => i).filter((i) => !(calls[i].cancel && first.get(calls[i].path) !== i));
        // Every call not cancelled ran, and those of each path in call order.
        for (const path of ["a.txt", "b.txt"]) {
          const of = (list: number[]) => JSON.stringify(list.filter((i) => calls[i].path === path));
          if (of(ran) !== of(expectedRan)) return false;
        }
        for (const [i, c] of calls.entries()) {
          const r = settled[i];
          if (!expectedRan.includes(i)) {
            // Cancelled before its turn: CANCELLED, and its change never ran.
            if (r.ok || !(r.err instanceof DomainError) || r.err.reason !== "CANCELLED" || ran.includes(i)) return false;
          } else if (c.fails ? r.ok : !r.ok || r.v !== i) {
            return false;
          }
        }
        return true;
      },
    ),
    { numRuns: 200 },
  );
  t.pass();
});

test("other paths and other workspaces do not wait for a held turn", async (t) => {
  const ws = workspace();
  const signal = new AbortController().signal;
  const held = gate();
  const holding = inTurn({ workspace: ws, signal }, "a.txt", () => held.done);
  t.is(await inTurn({ workspace: ws, signal }, "b.txt", async () => "b"), "b");
  t.is(await inTurn({ workspace: workspace(), signal }, "a.txt", async () => "other"), "other");
  held.open();
  await holding;
});
