/**
 * FileChanged events for commands: after every Bash and StreamBash command a bounded scan of the
 * workspace's tree (tools/tree-scan.ts) is compared with the snapshot the server keeps of it, and
 * each path the command created, modified or deleted is published, right after the command's
 * ToolCallFinished, with the command's span and session and tool "bash". When the scan hits its
 * bound (too many entries, too long a walk, more changes than an event list should carry) one
 * `tree_changed` event says so instead of a partial list.
 *
 * A scan is work that only produces events, so it runs only while a watcher would receive them
 * (EventHub.watching): a command that nobody watches is not scanned, and the snapshot is dropped,
 * since it no longer says what the tree holds. The next watched command takes a fresh one before it
 * starts, so a watcher that arrives later gets correct changes from then on; a command that was
 * already running when its watcher arrived ends with `tree_changed`.
 *
 * Per workspace, scans, first snapshots and the file tools' updates of the snapshot run one at a
 * time (`Track.serial`), and a command starts only after a scan still going has finished: so a
 * scan never sees the next command's half-done work, two scans never diff against the same
 * snapshot, and nothing is reported twice or lost for commands that follow each other. Commands
 * running at once share the snapshot: each scan reports whatever changed since the previous one,
 * so a change is reported once, possibly with the other command's span. The file tools report
 * their own changes; the entry of the path they changed is brought up to date in the snapshot
 * (one listing of its directory) so the next scan does not report it again, unless a command is
 * running (the command's scan may then report it too: a repeat, never a loss).
 */
import type { WorkspaceHandle } from "../../providers/types.ts";
import type { ChangeTracking } from "../tools/context.ts";
import { diffSnapshots, type ScanBounds, scanTree, type Snapshot } from "../tools/tree-scan.ts";
import type { FileChange, LivePayload } from "./audit-trail.ts";
import type { EventHub } from "./event-hub.ts";

/**
 * Changes one scan lists one by one at most; more are one tree_changed event (a watcher's queue
 * holds AGENT_WORKSPACE_WATCH_BUFFER events, 4096 by default, and a viewer reloads a tree faster
 * than it applies thousands of events).
 */
export const MAX_LISTED_CHANGES = 1000;

/** The bounds of a command's change scan. */
export interface ChangeScanSettings extends ScanBounds {
  /** Changes listed one by one at most; more become one tree_changed event. */
  maxChanges: number;
}

/** Who a call's events name. */
export interface ChangeSource {
  workspaceId: string;
  sessionId: string;
  spanId: string;
  /** Settles when the call's ToolCallFinished is out; a command's changes are published after it. */
  ended: Promise<void>;
  /** Settles once the call's answer has gone out whole (ANSWER_GONE), where the call knows it. */
  answerGone?: (() => Promise<void>) | undefined;
}

/**
 * Longest a command's scan waits for its call's answer to go out. An answer goes out within
 * milliseconds unless its client stops reading one larger than its flow-control window: its stream
 * then stays open, and this bounds how long the workspace's queue (its next command, another
 * session's in a shared workspace) waits for that client.
 */
const ANSWER_WAIT_MS = 1000;

/** A snapshot, or what is known instead: "unknown" (a scan hit its bound), undefined (none taken). */
type Baseline = Snapshot | "unknown" | undefined;

const noop = () => undefined;

/** One workspace's snapshot and the queue its scans take turns in. */
class Track {
  baseline: Baseline;
  /** Commands started and not yet ended. */
  running = 0;
  #queue: Promise<void> = Promise.resolve();

  /** Runs `work` after everything queued before it. */
  serial<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(work);
    this.#queue = result.then(noop, noop);
    return result;
  }

  /** Settles once everything queued so far has run. */
  idle(): Promise<void> {
    return this.#queue;
  }
}

const parentOf = (rel: string) => (rel.includes("/") ? rel.slice(0, rel.lastIndexOf("/")) : "");
const nameOf = (rel: string) => rel.slice(rel.lastIndexOf("/") + 1);

/** The server's change tracking: one Track per workspace with a watcher. */
export class FileChanges {
  readonly #hub: EventHub<LivePayload>;
  readonly #settings: ChangeScanSettings;
  readonly #onError: (err: unknown) => void;
  readonly #tracks = new Map<string, Track>();

  /**
   * `onError` hears of a scan that failed for a reason other than the tree itself (a bug, a lost
   * sandbox connection), for the log; the workspace's next scan then says tree_changed.
   */
  constructor(hub: EventHub<LivePayload>, settings: ChangeScanSettings, onError: (err: unknown) => void = noop) {
    this.#hub = hub;
    this.#settings = settings;
    this.#onError = onError;
  }

  /** The change tracking of one call in `ws`, its events attributed to `source`. */
  forCall(ws: WorkspaceHandle, source: ChangeSource): ChangeTracking {
    return {
      commandStarting: () => this.#commandStarting(ws, source),
      fileChange: (rel, change) => this.#fileChange(ws, source, rel, change),
    };
  }

  /** Drops a deleted workspace's snapshot. */
  forget(workspaceId: string): void {
    this.#tracks.delete(workspaceId);
  }

  #watched(source: ChangeSource): boolean {
    return this.#hub.watching(source.workspaceId, source.sessionId);
  }

  #track(workspaceId: string): Track {
    let track = this.#tracks.get(workspaceId);
    if (track === undefined) {
      track = new Track();
      this.#tracks.set(workspaceId, track);
    }
    return track;
  }

  async #commandStarting(ws: WorkspaceHandle, source: ChangeSource): Promise<() => void> {
    // A workspace without processes runs no command.
    if (ws.processes === false) return noop;
    const watched = this.#watched(source);
    const track = this.#track(source.workspaceId);
    if (watched) {
      await track.serial(async () => {
        if (track.baseline === undefined) track.baseline = (await scanTree(ws.fs, this.#settings)) ?? "unknown";
      });
    } else {
      await track.idle();
    }
    track.running++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      track.running--;
      void source.ended
        .then(() => track.serial(() => this.#afterCommand(ws, track, source)))
        .catch((err: unknown) => {
          // Never silent, and never a change lost: the next scan reports the whole tree as changed.
          track.baseline = "unknown";
          this.#onError(err);
        });
    };
  }

  /** Scans after a command and publishes what changed since the snapshot. */
  async #afterCommand(ws: WorkspaceHandle, track: Track, source: ChangeSource): Promise<void> {
    if (!this.#watched(source)) {
      // Nobody sees this command's changes, so the snapshot no longer says what the tree holds.
      track.baseline = undefined;
      return;
    }
    const before = track.baseline;
    // The command's answer goes out first, its gRPC trailers included: a scan started as the answer
    // was handed over (on local it reads the tree in this thread, 512 entries between two turns of
    // the event loop, 5-10 ms here) held those frames behind its first slice, about 10 ms more per
    // watched command in a tree of 10,000 files (bench (t)).
    // The scan still runs in the queue, so the workspace's next command waits for it as before.
    if (source.answerGone) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([source.answerGone(), new Promise<void>((resolve) => (timer = setTimeout(resolve, ANSWER_WAIT_MS)))]);
      clearTimeout(timer);
    }
    const after = await scanTree(ws.fs, this.#settings);
    track.baseline = after ?? "unknown";
    if (after === undefined || !(before instanceof Map)) return this.#publishTreeChanged(source);
    const changes = diffSnapshots(before, after);
    if (changes.length > this.#settings.maxChanges) return this.#publishTreeChanged(source);
    const time = new Date();
    for (const c of changes) this.#publish(time, source, { path: c.path, change: c.change, treeChanged: false });
  }

  async #fileChange<T>(ws: WorkspaceHandle, source: ChangeSource, rel: string, change: () => Promise<T>): Promise<T> {
    const track = this.#tracks.get(source.workspaceId);
    if (track === undefined) return change();
    // A scan still going must not see this change half made, nor report it as a command's.
    await track.idle();
    const result = await change();
    if (track.running === 0 && track.baseline instanceof Map) await track.serial(() => this.#refresh(ws, track, rel));
    return result;
  }

  /** Brings the snapshot's entries of `rel` and its missing parents up to date, each from its directory's listing. */
  async #refresh(ws: WorkspaceHandle, track: Track, rel: string): Promise<void> {
    const snapshot = track.baseline;
    if (!(snapshot instanceof Map) || track.running > 0) return;
    try {
      for (let path = rel; path !== ""; path = parentOf(path)) {
        const listed = await ws.fs.list(parentOf(path));
        const entry = listed.entries.find((e) => e.name === nameOf(path));
        const key = listed.rel === "" ? nameOf(path) : `${listed.rel}/${nameOf(path)}`;
        if (entry === undefined) snapshot.delete(key);
        else snapshot.set(key, { type: entry.type, size: entry.size, mtimeMs: entry.mtimeMs });
        if (listed.rel === "" || snapshot.has(listed.rel)) break;
      }
    } catch {
      // The tree could not be listed as expected: the next scan says tree_changed.
      track.baseline = "unknown";
    }
  }

  #publishTreeChanged(source: ChangeSource): void {
    this.#publish(new Date(), source, { path: "", change: "", treeChanged: true });
  }

  #publish(time: Date, source: ChangeSource, what: Pick<FileChange, "path" | "change" | "treeChanged">): void {
    const value: FileChange = { workspaceId: source.workspaceId, sessionId: source.sessionId, tool: "bash", spanId: source.spanId, ...what };
    this.#hub.publish({ time, workspaceId: source.workspaceId, sessionId: source.sessionId, payload: { case: "fileChanged", value } });
  }
}
