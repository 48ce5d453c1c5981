/**
 * This server among the others sharing its database (PostgreSQL): it beats in the replicas table
 * every BEAT_MS, and a server that has not beaten for STOPPED_AFTER_MS has stopped. A workspace is
 * served by one server at a time, the one its record names (`server`): another that is asked for
 * it refuses with the URL to ask instead while that server lives, and takes it over (a
 * compare-and-set on the record) once it has stopped. So no two servers ever drive one sandbox's
 * executor at once, and a server's death leaves no workspace stranded. A server restarted on its
 * data directory keeps its id (`replicaId`), so its workspaces stay its own.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Logger } from "./logger.ts";
import type { ReplicaStore } from "./store/store.ts";

const BEAT_MS = 2000;
/** Five missed beats: long enough for a busy event loop or a database restart, short enough to fail over in seconds. */
export const STOPPED_AFTER_MS = 10_000;
/**
 * A server whose last successful beat started this long ago fences itself: it stops driving its
 * sandboxes before the others may take them over (STOPPED_AFTER_MS after that beat committed), so
 * that a server cut off from the database never drives a sandbox another one has taken.
 */
export const FENCE_AFTER_MS = 6000;

/**
 * This server's id, kept in its data directory (`server-id`), so that a server restarted on the
 * same data directory serves its workspaces again at once instead of waiting for its old beats to
 * lapse. Servers sharing a database therefore each need a data directory of their own (as they do
 * for their local workspaces anyway).
 */
export async function replicaId(dataDir: string): Promise<string> {
  const file = path.join(dataDir, "server-id");
  const read = async () => {
    const id = (await readFile(file, "utf8")).trim();
    if (!/^srv-[0-9a-f]{16}$/.test(id)) throw new Error(`${file} does not hold a server id (srv- and 16 hex digits); remove it to make a new one`);
    return id;
  };
  try {
    return await read();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  await mkdir(dataDir, { recursive: true });
  try {
    await writeFile(file, `srv-${randomBytes(8).toString("hex")}\n`, { flag: "wx", mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  return read();
}

export class Replica {
  readonly id: string;
  readonly #store: ReplicaStore;
  readonly #logger: Logger;
  #live = new Map<string, string>();
  #timer: NodeJS.Timeout | undefined;
  #url = "";
  #failing = false;
  /** When the last successful beat was sent (0: none yet). */
  #lastOk = 0;
  #fenced = false;
  #onFence: Array<(fenced: boolean) => void> = [];

  constructor(id: string, store: ReplicaStore, logger: Logger) {
    this.id = id;
    this.#store = store;
    this.#logger = logger;
  }

  /** Starts beating (without a URL until `advertise`). */
  async start(): Promise<void> {
    await this.#beat();
    this.#timer = setInterval(() => {
      // Judged by the clock, not by a beat's answer: a beat may hang as long as the database does.
      if (!this.#fenced && this.#lastOk > 0 && Date.now() - this.#lastOk > FENCE_AFTER_MS) {
        this.#fenced = true;
        this.#logger.error("this server has not beaten in the database for 6 s; it stops driving its workspaces so that another server may take them over", { server: this.id });
        for (const fn of this.#onFence) fn(true);
      }
      void this.#beat();
    }, BEAT_MS);
    this.#timer.unref();
  }

  /**
   * Calls `fn(true)` when this server fences itself (cut off from the database) and `fn(false)`
   * once it beats again.
   */
  onFence(fn: (fenced: boolean) => void): void {
    this.#onFence.push(fn);
  }

  /** Whether this server is fenced: it must drive no sandbox. */
  get fenced(): boolean {
    return this.#fenced;
  }

  /** The URL other servers' refusals send clients to (once this server listens). */
  async advertise(url: string): Promise<void> {
    this.#url = url;
    await this.#beat();
  }

  async #beat(): Promise<void> {
    const sent = Date.now();
    try {
      await this.#store.beat(this.id, this.#url);
      this.#lastOk = Math.max(this.#lastOk, sent);
      if (this.#fenced) {
        this.#fenced = false;
        this.#logger.warn("this server beats in the database again and serves its workspaces that no other server took over", { server: this.id });
        for (const fn of this.#onFence) fn(false);
      }
      this.#live = await this.#store.live(STOPPED_AFTER_MS);
      if (this.#failing) this.#logger.info("this server beats in the database again", { server: this.id });
      this.#failing = false;
    } catch (err) {
      if (!this.#failing) this.#logger.warn("this server cannot beat in the database; others may take its workspaces over", { server: this.id, error: (err as Error).message });
      this.#failing = true;
    }
  }

  /**
   * Whether server `id` is alive, and its URL. A server the last beat saw stopped is asked about
   * again, so a stale view never takes a workspace from a live server.
   */
  async status(id: string): Promise<{ live: boolean; url: string }> {
    let url = this.#live.get(id);
    if (url === undefined) {
      this.#live = await this.#store.live(STOPPED_AFTER_MS);
      url = this.#live.get(id);
    }
    return { live: url !== undefined, url: url ?? "" };
  }

  /** Server `id`'s URL if the last beat saw it alive (no database round trip), else undefined. */
  liveUrl(id: string): string | undefined {
    return this.#live.get(id);
  }

  /** Takes workspace `workspaceId` over from `from` ("" for none); whether this server now serves it. */
  claim(workspaceId: string, from: string): Promise<boolean> {
    return this.#store.claim(workspaceId, from, this.id);
  }

  /** Stops beating and leaves the table, so the others may take this server's workspaces at once. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.#store.leave(this.id).catch(() => undefined);
  }
}
