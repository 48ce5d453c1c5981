/**
 * The event log behind WatchSession: a late watcher gets what was kept, then live events; a
 * watcher that does not read never makes the server hold more than a bounded amount of output,
 * and never loses a status or stage event.
 */
import test from "ava";
import { MAX_QUEUED_OUTPUT_BYTES, type SessionEvent, SessionEvents } from "../server/sessions/session.ts";

const output = (bytes: number): SessionEvent => ({ time: new Date(), type: "output", stage: "setup_command", index: 0, data: new Uint8Array(bytes), stderr: false });

test("a watcher that does not read holds at most the bound of output, and every other event", async (t) => {
  const events = new SessionEvents();
  events.emit({ time: new Date(), type: "status", status: "provisioning", message: "", workspaceId: "" });
  const stop = new AbortController();
  const stats = { dropped: 0 };
  const watcher = events.watch(stop.signal, stats);
  // Subscribe (the first event is the kept status), then stop reading while 64 MiB are emitted.
  t.is((await watcher.next()).value?.type, "status");
  for (let i = 0; i < 1024; i++) events.emit(output(64 * 1024));
  events.emit({ time: new Date(), type: "stage_ended", stage: "setup_command", index: 0, ok: true, exitCode: 0, timedOut: false, durationMs: 1, message: "" });
  events.emit({ time: new Date(), type: "status", status: "active", message: "", workspaceId: "ws-1" });
  let queued = 0;
  const rest: string[] = [];
  for (;;) {
    const { value } = await watcher.next();
    if (!value) break;
    if (value.type === "output") queued += value.data.byteLength;
    else rest.push(value.type);
    if (value.type === "status") break;
  }
  stop.abort();
  t.true(queued <= MAX_QUEUED_OUTPUT_BYTES, `${queued} bytes were queued`);
  t.true(queued > 0);
  t.is(queued + stats.dropped, 64 * 1024 * 1024, "every byte was either queued or counted as dropped");
  t.deepEqual(rest, ["stage_ended", "status"]);
});

test("a late watcher gets the kept events first, then live ones, and stops when aborted", async (t) => {
  const events = new SessionEvents();
  events.emit({ time: new Date(), type: "status", status: "provisioning", message: "", workspaceId: "" });
  events.emit(output(10));
  const stop = new AbortController();
  const seen: string[] = [];
  const done = (async () => {
    for await (const ev of events.watch(stop.signal)) {
      seen.push(ev.type);
      if (seen.length === 3) stop.abort();
    }
  })();
  events.emit({ time: new Date(), type: "status", status: "active", message: "", workspaceId: "ws-1" });
  await done;
  t.deepEqual(seen, ["status", "output", "status"]);
});
