/**
 * Live events between the servers that share a database (PostgreSQL): every event a server
 * publishes goes to the others' watchers through the store's feed, so WatchEvents on one replica
 * sees what happens on all of them.
 *
 * - Events go out always, not only when a watcher elsewhere wants them: whether one does is known
 *   only a moment after it starts, and a watcher that has its `started` must miss nothing sent
 *   after it.
 * - Work done only to produce events (a command's file change scan) runs when a watcher anywhere
 *   wants them: each server announces its watchers' filters when they change, every 20 s while it
 *   has any, after a break of the feed, and on hearing from a server new to it (one that has just
 *   started announces itself). An announcement not renewed for 60 s (its server is gone) is
 *   forgotten. So a watcher elsewhere sees file changes from the moment its interest arrives, a
 *   few milliseconds after it starts.
 * - A break of the feed gives every watcher a gap marker (events dropped, count 0: unknown).
 */
import { randomBytes } from "node:crypto";
import type { ChangeFeed } from "../store/store.ts";
import type { EventHub, WatchFilter } from "./event-hub.ts";

const INTEREST_EVERY_MS = 20_000;
const INTEREST_TTL_MS = 60_000;

/** What travels: an event, or a server's watch interest (its watchers' filters, [workspace, session]). */
type Wire = { o: string; k: "event"; t: string; w: string; s: string; p: unknown } | { o: string; k: "interest"; f: Array<[string, string]> };

function isWire(v: unknown): v is Wire {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  if (typeof m.o !== "string") return false;
  if (m.k === "event") return typeof m.t === "string" && typeof m.w === "string" && typeof m.s === "string" && typeof m.p === "object" && m.p !== null;
  return m.k === "interest" && Array.isArray(m.f) && m.f.every((x) => Array.isArray(x) && x.length === 2 && typeof x[0] === "string" && typeof x[1] === "string");
}

const wants = ([fw, fs]: [string, string], workspaceId: string, sessionId: string) => (fw === "" || fw === workspaceId) && (fs === "" || fs === sessionId);

/** Links `hub` to the other servers through `feed`; returns how to stop. */
export function relayEvents<T>(hub: EventHub<T>, feed: ChangeFeed): { close(): void } {
  // Told apart from the others' by this id: the feed brings a server its own messages back too.
  const origin = randomBytes(8).toString("hex");
  const elsewhere = new Map<string, { filters: Array<[string, string]>; until: number }>();
  const known = new Set<string>();
  let announcing = false;
  let closed = false;
  const announce = () => {
    if (announcing || closed) return;
    announcing = true;
    setImmediate(() => {
      announcing = false;
      const seen = new Set<string>();
      const filters: Array<[string, string]> = [];
      for (const f of hub.filters() as WatchFilter[]) {
        const key = `${f.workspaceId}\u0000${f.sessionId}`;
        if (seen.has(key)) continue;
        seen.add(key);
        filters.push([f.workspaceId, f.sessionId]);
      }
      feed.publish([{ o: origin, k: "interest", f: filters } satisfies Wire]);
    });
  };
  hub.link({
    sent(e) {
      if (!closed) feed.publish([{ o: origin, k: "event", t: e.time.toISOString(), w: e.workspaceId, s: e.sessionId, p: e.payload } satisfies Wire]);
    },
    watchedElsewhere(workspaceId, sessionId) {
      const now = Date.now();
      for (const [server, interest] of elsewhere) {
        if (interest.until < now) elsewhere.delete(server);
        else if (interest.filters.some((f) => wants(f, workspaceId, sessionId))) return true;
      }
      return false;
    },
    watchersChanged: announce,
  });
  const renew = setInterval(() => {
    if (hub.watchers > 0) announce();
  }, INTEREST_EVERY_MS);
  renew.unref();
  const stop = feed.listen(
    (messages) => {
      for (const m of messages) {
        if (!isWire(m) || m.o === origin) continue;
        // A server heard from for the first time (one just started) learns this one's interest now.
        if (!known.has(m.o)) {
          known.add(m.o);
          if (hub.watchers > 0) announce();
        }
        if (m.k === "interest") {
          if (m.f.length === 0) elsewhere.delete(m.o);
          else elsewhere.set(m.o, { filters: m.f, until: Date.now() + INTEREST_TTL_MS });
        } else {
          hub.deliver({ time: new Date(m.t), workspaceId: m.w, sessionId: m.s, payload: m.p as T });
        }
      }
    },
    () => {
      hub.gap();
      announce();
    },
  );
  // Heard by the others as a new server: they announce their interest in return.
  announce();
  return {
    close() {
      closed = true;
      clearInterval(renew);
      stop();
    },
  };
}
