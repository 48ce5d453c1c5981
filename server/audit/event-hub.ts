/**
 * Live events for WatchEvents: published by the audit interceptors, the workspace manager and
 * the session manager; delivered to every watcher whose filter matches. Publishing never waits:
 * each watcher has its own bounded queue, and a watcher whose queue is full loses the event. The
 * loss is not silent: one `dropped` marker, counting every event lost in a row, takes the place
 * of what was lost, so the reader sees exactly where its view has a gap. A slow or stalled
 * watcher therefore costs a tool call one array push at most, whatever it does.
 */

/** What happened, with the workspace and session it concerns for filtering. */
export interface LiveEvent<T = unknown> {
  time: Date;
  workspaceId: string;
  sessionId: string;
  payload: T;
}

/** A watcher's view: an event, or a marker for events it lost. */
export type Delivered<T> = { kind: "event"; event: LiveEvent<T> } | { kind: "dropped"; count: number; time: Date };

/** Which events a watcher wants: empty fields do not filter. */
export interface WatchFilter {
  workspaceId: string;
  sessionId: string;
}

class Watcher<T> {
  readonly #filter: WatchFilter;
  readonly #capacity: number;
  readonly #queue: Delivered<T>[] = [];
  /** Events held (markers excluded). */
  #held = 0;
  #wake: (() => void) | undefined;

  constructor(filter: WatchFilter, capacity: number) {
    this.#filter = filter;
    this.#capacity = capacity;
  }

  get filter(): WatchFilter {
    return this.#filter;
  }

  /** A gap of unknown size (events other servers sent while the feed from them was down): a marker of count 0. */
  gap(time: Date): void {
    const last = this.#queue.at(-1);
    if (last?.kind === "dropped") last.count = 0;
    else this.#queue.push({ kind: "dropped", count: 0, time });
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Whether an event of this workspace and session passes the watcher's filter. */
  wants(workspaceId: string, sessionId: string): boolean {
    return (this.#filter.workspaceId === "" || workspaceId === this.#filter.workspaceId) && (this.#filter.sessionId === "" || sessionId === this.#filter.sessionId);
  }

  offer(event: LiveEvent<T>): void {
    if (!this.wants(event.workspaceId, event.sessionId)) return;
    if (this.#held >= this.#capacity) {
      const last = this.#queue.at(-1);
      if (last?.kind === "dropped") last.count++;
      else this.#queue.push({ kind: "dropped", count: 1, time: event.time });
    } else {
      this.#queue.push({ kind: "event", event });
      this.#held++;
    }
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** The next delivery, waiting for one; undefined once `signal` aborts. */
  async next(signal: AbortSignal): Promise<Delivered<T> | undefined> {
    while (this.#queue.length === 0) {
      if (signal.aborted) return undefined;
      await new Promise<void>((resolve) => {
        const done = () => {
          signal.removeEventListener("abort", done);
          resolve();
        };
        this.#wake = done;
        signal.addEventListener("abort", done, { once: true });
      });
    }
    if (signal.aborted) return undefined;
    const d = this.#queue.shift() as Delivered<T>;
    if (d.kind === "event") this.#held--;
    return d;
  }
}

/**
 * What connects a hub to the other servers sharing a database (event-relay.ts): it receives this
 * server's events, and says whether a watcher elsewhere wants an event.
 */
export interface HubLink<T> {
  sent(event: LiveEvent<T>): void;
  watchedElsewhere(workspaceId: string, sessionId: string): boolean;
  /** The set of this server's watchers changed. */
  watchersChanged(): void;
}

/** The hub. */
export class EventHub<T> {
  readonly #watchers = new Set<Watcher<T>>();
  readonly #capacity: number;
  #link: HubLink<T> | undefined;

  /** `capacity`: events one watcher may hold before it drops. */
  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  /** Watchers right now. */
  get watchers(): number {
    return this.#watchers.size;
  }

  /** Whether a published event goes anywhere: a watcher here, or the other servers through the link. */
  get listened(): boolean {
    return this.#watchers.size > 0 || this.#link !== undefined;
  }

  /**
   * Whether a watcher would receive an event of this workspace and session right now: work that
   * only produces events (a command's change scan) can be skipped when none would.
   */
  watching(workspaceId: string, sessionId: string): boolean {
    for (const w of this.#watchers) if (w.wants(workspaceId, sessionId)) return true;
    return this.#link?.watchedElsewhere(workspaceId, sessionId) ?? false;
  }

  /** An event of this server: to its watchers, and to the other servers' through the link. */
  publish(event: LiveEvent<T>): void {
    for (const w of this.#watchers) w.offer(event);
    this.#link?.sent(event);
  }

  /** An event another server published: to this server's watchers only. */
  deliver(event: LiveEvent<T>): void {
    for (const w of this.#watchers) w.offer(event);
  }

  /** Tells every watcher that events may have been missed (count 0: unknown). */
  gap(): void {
    const now = new Date();
    for (const w of this.#watchers) w.gap(now);
  }

  /** The filters of this server's watchers (one per watcher). */
  filters(): WatchFilter[] {
    return [...this.#watchers].map((w) => w.filter);
  }

  /** Links the hub to the other servers' (one link; replaced by a second call). */
  link(link: HubLink<T>): void {
    this.#link = link;
  }

  /**
   * Deliveries from the moment of the call (the watcher is registered before the generator is
   * first pulled), until `signal` aborts or the consumer stops.
   */
  watch(filter: WatchFilter, signal: AbortSignal): AsyncGenerator<Delivered<T>> {
    const w = new Watcher<T>(filter, this.#capacity);
    this.#watchers.add(w);
    this.#link?.watchersChanged();
    const hub = this;
    return (async function* () {
      try {
        for (;;) {
          const d = await w.next(signal);
          if (d === undefined) return;
          yield d;
        }
      } finally {
        hub.#watchers.delete(w);
        hub.#link?.watchersChanged();
      }
    })();
  }
}
