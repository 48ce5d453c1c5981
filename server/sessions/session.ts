/**
 * A session as the server keeps it, and the events WatchSession streams. Plain data: the
 * manager (session-manager.ts) changes sessions, the store persists them as JSON, the service
 * maps them to the API.
 */
import type { CheckoutInfo, ProvisioningWarning, TaskContext } from "../../providers/types.ts";
import type { HostMount } from "../mounts/host-mounts.ts";
import type { StoredDigest } from "./digests.ts";

export type SessionStatus = "provisioning" | "active" | "degraded" | "ended";
export type Stage = ProvisioningWarning["stage"];

/** The variables commands of a session's workspace see. */
export function taskEnv(task: TaskContext | undefined): Record<string, string> {
  if (!task) return {};
  return {
    AGENT_TASK_REPOSITORY_URL: task.repositoryUrl,
    AGENT_TASK_BRANCH: task.branch,
    AGENT_TASK_PULL_REQUEST_NUMBER: task.pullRequestNumber === 0 ? "" : String(task.pullRequestNumber),
    AGENT_TASK_BASE_BRANCH: task.baseBranch,
  };
}

/** One session, as persisted. */
export interface SessionRecord {
  id: string;
  /** The server that serves it, when several share one database (the replicas table's id). */
  server?: string;
  /** The session's own host mounts, kept so that provisioning resumed after a restart copies them too. */
  mounts?: HostMount[];
  agentType: string;
  status: SessionStatus;
  /** SHA-256 of the token, hex; the token itself is never kept. */
  tokenHash: string;
  /** "" while it has none. */
  workspaceId: string;
  workspaceEnabled: boolean;
  task: TaskContext;
  labels: Record<string, string>;
  warnings: ProvisioningWarning[];
  statusMessage: string;
  createdAt: string;
  readyAt?: string;
  endedAt?: string;
  lastActivityAt: string;
  provider: string;
  fromWarmPool: boolean;
  checkout?: CheckoutInfo;
  /** Idle timeout in force for the session (its agent type's, else the server's); 0 for none. */
  idleTimeoutMs: number;
  /** How often provisioning was restarted after the server stopped in the middle of it. */
  resumes: number;
  /** True when the session joined an existing workspace (a shared one) instead of having one made. */
  joined?: boolean;
  /** The latest workspace digest per section key (digests.ts). */
  digests?: Record<string, StoredDigest>;
}

/** One event of a session, in the order it happened. */
export type SessionEvent = { time: Date } & (
  | { type: "status"; status: SessionStatus; message: string; workspaceId: string }
  | { type: "stage_started"; stage: Stage; detail: string; index: number }
  | { type: "output"; stage: Stage; index: number; data: Uint8Array; stderr: boolean }
  | { type: "stage_ended"; stage: Stage; index: number; ok: boolean; exitCode: number; timedOut: boolean; durationMs: number; message: string }
  | { type: "warning"; warning: ProvisioningWarning }
);

/** Events kept for late watchers, per session; output beyond this is streamed live only. */
const MAX_KEPT_EVENTS = 2000;
const MAX_KEPT_OUTPUT_BYTES = 1024 * 1024;
/** Output bytes one watcher may have waiting; more is dropped for that watcher. */
export const MAX_QUEUED_OUTPUT_BYTES = 4 * 1024 * 1024;

/**
 * The events of one session: kept (bounded) for watchers that arrive late, and pushed to every
 * live watcher. A watcher never blocks the session, and a watcher that reads slowly (or not at
 * all) never grows the server's memory past a bound: each has its own queue, where output beyond
 * MAX_QUEUED_OUTPUT_BYTES is dropped (counted in `dropped`) while every other event is kept.
 */
export class SessionEvents {
  readonly #kept: SessionEvent[] = [];
  #keptOutput = 0;
  readonly #watchers = new Set<(ev: SessionEvent) => void>();

  /** Whether no event was kept (none happened since the server started). */
  get empty(): boolean {
    return this.#kept.length === 0;
  }

  /** Records and delivers an event. */
  emit(ev: SessionEvent): void {
    const isOutput = ev.type === "output";
    if (this.#kept.length < MAX_KEPT_EVENTS && (!isOutput || this.#keptOutput + ev.data.byteLength <= MAX_KEPT_OUTPUT_BYTES)) {
      this.#kept.push(ev);
      if (isOutput) this.#keptOutput += ev.data.byteLength;
    }
    for (const w of this.#watchers) w(ev);
  }

  /** The events so far, then every new one, until `signal` aborts or the consumer stops. */
  async *watch(signal: AbortSignal, stats: { dropped: number } = { dropped: 0 }): AsyncGenerator<SessionEvent> {
    const queue: SessionEvent[] = [...this.#kept];
    let queuedOutput = this.#keptOutput;
    let wake: (() => void) | undefined;
    const push = (ev: SessionEvent) => {
      if (ev.type === "output") {
        if (queuedOutput + ev.data.byteLength > MAX_QUEUED_OUTPUT_BYTES) {
          stats.dropped += ev.data.byteLength;
          return;
        }
        queuedOutput += ev.data.byteLength;
      }
      queue.push(ev);
      wake?.();
    };
    const onAbort = () => wake?.();
    this.#watchers.add(push);
    signal.addEventListener("abort", onAbort);
    try {
      while (!signal.aborted) {
        const ev = queue.shift();
        if (ev !== undefined) {
          if (ev.type === "output") queuedOutput -= ev.data.byteLength;
          yield ev;
          continue;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    } finally {
      this.#watchers.delete(push);
      signal.removeEventListener("abort", onAbort);
    }
  }
}
