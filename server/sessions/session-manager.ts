/**
 * Agent sessions. StartSession records a session (and the hash of its token) and returns at
 * once; its workspace is then made in the background from the agent type's configuration and
 * the task (provision.ts), or taken from the agent type's warm pool (warm-pool.ts). The session
 * is PROVISIONING until the workspace is ready, then ACTIVE; DEGRADED when provisioning failed on
 * the fallback provider too; ENDED after EndSession or its idle timeout.
 *
 * Durability: every status change is in the database before it is visible. After a restart an
 * ACTIVE session keeps its workspace; one caught PROVISIONING is provisioned again from the start
 * (once; a second stop in the middle leaves it DEGRADED with the reason), and every workspace
 * that belongs to no live session (half-made, or left by an end the stop interrupted) is removed.
 * The idle clock (last tool call) is written in batches, so a restart loses at most a few seconds
 * of it, and the reaper resumes with the rest.
 */
import { randomBytes } from "node:crypto";
import type { HostMount } from "../mounts/host-mounts.ts";
import type { Replica } from "../replicas.ts";
import type { ChangeFeed, ReplicaStore } from "../store/store.ts";
import { DomainError } from "../../core/errors.ts";
import type { TaskContext } from "../../providers/types.ts";
import type { AgentTypes } from "../agent-types/agent-types.ts";
import { validateBranch, validateRepoUrl } from "../agent-types/validate.ts";
import type { SessionPrincipal } from "../auth/principal.ts";
import { newSessionToken, type SessionTokenLookup } from "../auth/session-tokens.ts";
import type { Logger } from "../logger.ts";
import type { SessionStore } from "../store/store.ts";
import { checkDigestText, MAX_DIGESTS_PER_SESSION, placeholder, type ResolvedDigest, sectionKeyOf } from "./digests.ts";
import { validateLabels, type WorkspaceManager } from "../workspace-manager.ts";
import { type BuildSpec, ProvisioningFailed, type Provisioner, type StageSink } from "./provision.ts";
import { type SessionEvent, SessionEvents, type SessionRecord, type SessionStatus, taskEnv } from "./session.ts";
import { cloneTarget, type WarmPools } from "./warm-pool.ts";

/** Options of the session manager. */
export interface SessionManagerOptions {
  store: SessionStore;
  workspaces: WorkspaceManager;
  agentTypes: AgentTypes;
  provisioner: Provisioner;
  pools: WarmPools;
  logger: Logger;
  defaultProvider: string;
  /** Idle timeout of agent types that set none, in milliseconds; 0 for none. */
  idleTimeoutMs: number;
  /** How often the reaper looks (and pools refill), in milliseconds. */
  tickMs: number;
  /** Told of every session status change (live events). */
  onStatus?: (change: SessionStatusChange) => void;
  /**
   * This server among others sharing the database: a session is served by one server at a time,
   * the one that started it until that server stops, and the others leave it alone (no reaping, no
   * recovery, its token refused with that server's URL). A session of a server that has stopped is
   * taken over by the first live server to see it (see #adopt).
   */
  server?: Pick<Replica, "id" | "liveUrl" | "status" | "onFence">;
  /** With `server`: the feed of the others' changes, where to read a session they changed, and how to take one over. */
  shared?: { changes: ChangeFeed; store: Pick<ReplicaStore, "session" | "claimSession"> };
}

/** A session's status change, for watchers. */
export interface SessionStatusChange {
  sessionId: string;
  agentType: string;
  status: SessionStatus;
  message: string;
  workspaceId: string;
}

/** What StartSession asks for. */
export interface StartRequest {
  agentType: string;
  task: TaskContext;
  labels: Record<string, string>;
  /** Host files to copy into the session's workspace; a session with mounts never takes a warm-pool workspace. */
  mounts?: HostMount[];
  /** An existing session workspace to share instead of making one ("" or absent: make one). */
  workspaceId?: string;
}

/** A session in memory: its record, its events, and what only a running server knows. */
interface Live {
  record: SessionRecord;
  events: SessionEvents;
  /** Aborts provisioning in progress. */
  abort?: AbortController;
  provisioning?: Promise<void>;
  /** Tool calls in progress; the reaper never ends a session in the middle of one. */
  inflight: number;
  /** Whether a tool call ever ran in the workspace (an untouched one may go back to its pool). */
  used: boolean;
  /** The warm pool its workspace would belong to. */
  fingerprint: string;
  /** lastActivityAt changed since the record was written. */
  dirty: boolean;
}

const ID = /^sess-[0-9a-f]{16}$/;
/** Ended sessions stay listable this long. */
const KEEP_ENDED_MS = 7 * 24 * 3_600_000;
/** The idle clock is written at most this often. */
const ACTIVITY_FLUSH_MS = 5_000;

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Checks a task context; throws INVALID_ARGUMENT naming the field. */
function validateTask(task: TaskContext): void {
  if (task.repositoryUrl !== "") validateRepoUrl(task.repositoryUrl, "task.repository_url");
  if (task.branch !== "") validateBranch(task.branch, "task.branch");
  if (task.baseBranch !== "") validateBranch(task.baseBranch, "task.base_branch");
  if (!Number.isSafeInteger(task.pullRequestNumber) || task.pullRequestNumber < 0) {
    throw new DomainError("INVALID_ARGUMENT", "task.pull_request_number must not be negative", { metadata: { field: "task.pull_request_number" } });
  }
}

export class SessionManager implements SessionTokenLookup {
  readonly #o: SessionManagerOptions;
  readonly #sessions = new Map<string, Live>();
  readonly #byToken = new Map<string, string>();
  /** The live (not ended) sessions of each workspace: a shared workspace's reference count. */
  readonly #byWorkspace = new Map<string, Set<string>>();
  /** Workspaces whose last session ended: being discarded, never joined again. */
  readonly #releasing = new Set<string>();
  /** Per provisioning session, what to call once it leaves PROVISIONING (tool calls waiting for it). */
  readonly #waiters = new Map<string, Set<() => void>>();
  #timer: NodeJS.Timeout | undefined;
  #lastFlush = Date.now();
  #closed = false;
  /** Resolves once the start-up recovery (cleanup, resumed provisioning) has been started. */
  recovered: Promise<void> = Promise.resolve();

  constructor(options: SessionManagerOptions) {
    this.#o = options;
  }

  /** Reloads from the feed, one after another. */
  #following: Promise<void> = Promise.resolve();

  /**
   * Takes in another server's session as stored now (started, used, ended or taken over there).
   * This server's own sessions are its to change: their copies here are the current ones, unless
   * (`own`) another server took one over while this one was cut off from the database.
   */
  async #reload(id: string, own = false): Promise<void> {
    const shared = this.#o.shared;
    if (!shared) return;
    const known = this.#sessions.get(id);
    if (known && this.#mine(known.record) && !own) return;
    const text = await shared.store.session(id);
    if (text === undefined) return;
    const record = JSON.parse(text) as SessionRecord;
    if (this.#mine(record)) return;
    if (known && this.#mine(known.record)) {
      this.#o.logger.warn("a session was taken over by another server while this one was cut off from the database; it is that server's now", { session_id: id, server: record.server });
      known.abort?.abort(new Error("the session was taken over by another server"));
    }
    this.#replace(known, record);
  }

  /** Puts `record` in place of the copy `known` had (if any), keeping its events. */
  #replace(known: Live | undefined, record: SessionRecord): Live {
    if (known) {
      this.#byToken.delete(known.record.tokenHash);
      if (known.record.workspaceId !== "") this.#detach(known.record.workspaceId, known.record.id);
    }
    const live: Live = { record, events: known?.events ?? new SessionEvents(), inflight: 0, used: true, fingerprint: "", dirty: false };
    this.#remember(live);
    return live;
  }

  /** Reloads every session, this server's own too (after its feed or its beats were interrupted). */
  #reloadAll(): void {
    this.#follow(async () => {
      for (const id of [...this.#sessions.keys()]) await this.#reload(id, true);
    });
  }

  #follow(fn: () => Promise<void>): void {
    this.#following = this.#following.then(fn).catch((err: unknown) => this.#o.logger.warn("a session changed by another server could not be reloaded", { error: messageOf(err) }));
  }

  /** Loads sessions; call once before serving. */
  async init(): Promise<void> {
    const shared = this.#o.shared;
    if (shared) {
      shared.changes.subscribe(
        (change) => {
          if (change.table === "sessions") this.#follow(() => this.#reload(change.id));
        },
        () => this.#reloadAll(),
      );
      // Beating again after a fence: another server may have taken sessions over meanwhile.
      this.#o.server?.onFence((fenced) => {
        if (!fenced) this.#reloadAll();
      });
    }
    const since = new Date(Date.now() - KEEP_ENDED_MS);
    const pruned = await this.#o.store.prune(since);
    if (pruned > 0) this.#o.logger.info("old ended sessions pruned", { sessions: pruned });
    for (const row of await this.#o.store.load(since)) {
      const record = JSON.parse(row.record) as SessionRecord;
      this.#remember({ record, events: new SessionEvents(), inflight: 0, used: true, fingerprint: "", dirty: false });
    }
  }

  #remember(live: Live): void {
    const r = live.record;
    this.#sessions.set(r.id, live);
    if (r.status !== "ended") this.#byToken.set(r.tokenHash, r.id);
    if (r.workspaceId !== "" && r.status !== "ended") this.#attach(r.workspaceId, r.id);
  }

  #attach(workspaceId: string, sessionId: string): void {
    const set = this.#byWorkspace.get(workspaceId) ?? new Set<string>();
    set.add(sessionId);
    this.#byWorkspace.set(workspaceId, set);
  }

  /** Detaches a session from its workspace; true when it was the last one (the workspace is then the caller's to release). */
  #detach(workspaceId: string, sessionId: string): boolean {
    const set = this.#byWorkspace.get(workspaceId);
    if (!set?.delete(sessionId)) return false;
    if (set.size > 0) return false;
    this.#byWorkspace.delete(workspaceId);
    return true;
  }

  /**
   * Starts the reaper and the recovery after a restart: workspaces no live session owns are
   * removed, then sessions a stop caught provisioning are provisioned again.
   */
  begin(): void {
    this.#timer = setInterval(() => this.#tick(), this.#o.tickMs);
    this.#timer.unref();
    this.recovered = this.#recover().catch((err: unknown) => this.#o.logger.error("session recovery failed", { error: messageOf(err) }));
  }

  async #recover(): Promise<void> {
    // The records from before the start, taken before the first await: a session started while
    // recovery runs has a workspace of its own that must never be taken for a leftover.
    const before = this.#o.workspaces.listRecords("", {});
    await this.#o.pools.recover();
    const me = this.#o.server?.id;
    for (const r of before) {
      // Another server's workspace is that server's to keep or remove.
      if (!r.session || (me !== undefined && r.server !== undefined && r.server !== me)) continue;
      // Kept while any of its sessions (a shared workspace has several) is active in it.
      const owners = [...(this.#byWorkspace.get(r.id) ?? [])].map((id) => this.#sessions.get(id)?.record);
      if (owners.some((o) => o?.status === "active" && o.workspaceId === r.id)) continue;
      const owner = this.#sessions.get(r.session.id)?.record;
      this.#o.logger.warn("removing a workspace no live session owns", { workspace_id: r.id, session_id: r.session.id, session_status: owner?.status ?? "unknown" });
      await this.#o.provisioner.discard(r.id);
    }
    // A session whose workspace did not survive the restart (a memory workspace ends with the
    // server process) has nothing left to work in: it is degraded, saying so, not left active.
    for (const live of this.#sessions.values()) {
      const r = live.record;
      if (r.status !== "active" || r.workspaceId === "" || this.#o.workspaces.find(r.workspaceId) || this.#closed || !this.#mine(r)) continue;
      this.#o.logger.warn("a session's workspace did not survive the restart", { session_id: r.id, workspace_id: r.workspaceId, provider: r.provider });
      this.#detach(r.workspaceId, r.id);
      r.workspaceId = "";
      await this.#degrade(live, `Its ${r.provider} workspace ended with the previous server process; start a new session`);
    }
    for (const live of this.#sessions.values()) {
      if (live.record.status !== "provisioning" || this.#closed || !this.#mine(live.record)) continue;
      if (live.record.resumes >= 1) {
        await this.#degrade(live, "The server stopped twice while this session was provisioning; it was not tried again");
        continue;
      }
      live.record.resumes++;
      this.#emit(live, { type: "status", status: "provisioning", message: "", workspaceId: "" });
      const warning = { stage: "sandbox", message: "The server restarted while this session was provisioning; provisioning started again", command: "", exitCode: 0, timedOut: false } as const;
      live.record.warnings.push(warning);
      await this.#persist(live.record);
      this.#emit(live, { type: "warning", warning });
      this.#launch(live);
    }
    this.#o.pools.tick();
  }

  /** Whether this server serves the session (always, unless several servers share the database). */
  #mine(r: SessionRecord): boolean {
    return this.#o.server === undefined || r.server === undefined || r.server === this.#o.server.id;
  }

  /** The refusal of a call for a session another server serves. */
  #elsewhere(r: SessionRecord): DomainError {
    const url = (r.server && this.#o.server?.liveUrl(r.server)) || "";
    const where = url !== "" ? `another server, at ${url}; send its calls there` : "another server, which has stopped; a live server takes its sessions over within seconds, so retry";
    return new DomainError("WORKSPACE_SERVED_ELSEWHERE", `Session '${r.id}' is served by ${where}`, { metadata: { session_id: r.id, server_url: url } });
  }

  /**
   * SessionTokenLookup: the principal of a live session's token. A token of a session another
   * server serves is refused with that server's URL: this server's copy of it may be stale (ended
   * there since), so it is never accepted here.
   */
  principalOf(hash: string): SessionPrincipal | undefined {
    const id = this.#byToken.get(hash);
    const r = id === undefined ? undefined : this.#sessions.get(id)?.record;
    if (r && !this.#mine(r)) throw this.#elsewhere(r);
    return r && r.status !== "ended" ? { kind: "session", sessionId: r.id, agentType: r.agentType } : undefined;
  }

  #live(id: string): Live {
    const live = ID.test(id) ? this.#sessions.get(id) : undefined;
    if (!live) {
      if (id === "") throw new DomainError("INVALID_ARGUMENT", "id is required", { metadata: { field: "id" } });
      throw new DomainError("SESSION_NOT_FOUND", `Session '${id.slice(0, 64)}' not found`, { metadata: { session_id: id.slice(0, 64) } });
    }
    return live;
  }

  /** A session's record; SESSION_NOT_FOUND if there is none. */
  get(id: string): SessionRecord {
    return this.#live(id).record;
  }

  /** A live session of a workspace (the first to have it, for a shared one), if any. */
  ofWorkspace(workspaceId: string): SessionRecord | undefined {
    const [id] = this.#byWorkspace.get(workspaceId) ?? [];
    return id === undefined ? undefined : this.#sessions.get(id)?.record;
  }

  /** The ids of the live sessions sharing a workspace, oldest first. */
  sessionsOf(workspaceId: string): string[] {
    return [...(this.#byWorkspace.get(workspaceId) ?? [])];
  }

  /** Sessions matching the filter, newest first. */
  list(agentType: string, status: SessionStatus | undefined): SessionRecord[] {
    return [...this.#sessions.values()]
      .map((l) => l.record)
      .filter((r) => (agentType === "" || r.agentType === agentType) && (status === undefined || r.status === status))
      .sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id < b.id ? -1 : 1));
  }

  /** Starts a session; returns it with its token (shown only here). */
  async start(req: StartRequest): Promise<{ record: SessionRecord; token: string }> {
    if (this.#closed) throw new DomainError("PROVIDER_UNAVAILABLE", "The server is stopping");
    const type = this.#o.agentTypes.get(req.agentType, "agent_type");
    validateTask(req.task);
    validateLabels(req.labels);
    const mounts = req.mounts ?? [];
    if ((req.workspaceId ?? "") !== "") return this.#join(type.id, req);
    await this.#o.workspaces.checkMounts(mounts, "mounts");
    const cfg = type.workspace;
    const enabled = cfg?.enabled === true;
    const now = new Date().toISOString();
    const { token, hash } = newSessionToken();
    const record: SessionRecord = {
      id: `sess-${randomBytes(8).toString("hex")}`,
      ...(this.#o.server ? { server: this.#o.server.id } : {}),
      agentType: type.id,
      status: enabled ? "provisioning" : "active",
      tokenHash: hash,
      workspaceId: "",
      workspaceEnabled: enabled,
      task: { ...req.task },
      labels: { ...req.labels },
      warnings: [],
      statusMessage: enabled ? "" : `Agent type '${type.id}' has workspaces disabled; tool calls of this session answer NOT_FOUND`,
      createdAt: now,
      ...(enabled ? {} : { readyAt: now }),
      lastActivityAt: now,
      provider: "",
      fromWarmPool: false,
      idleTimeoutMs: this.#idleTimeoutOf(cfg),
      resumes: 0,
      ...(mounts.length > 0 ? { mounts } : {}),
    };
    const live: Live = { record, events: new SessionEvents(), inflight: 0, used: false, fingerprint: "", dirty: false };
    if (enabled && cfg) {
      live.fingerprint = this.#o.pools.fingerprint(type.id, cfg, cloneTarget(cfg, record.task));
      // A pooled workspace was made without this session's mounts.
      const pooled = mounts.length > 0 ? undefined : await this.#o.pools.claim(live.fingerprint);
      if (pooled) {
        try {
          const began = Date.now();
          await this.#o.workspaces.annotate(pooled.id, { labels: record.labels, session: { id: record.id, task: record.task } });
          Object.assign(record, {
            status: "active",
            workspaceId: pooled.id,
            provider: pooled.provider,
            fromWarmPool: true,
            warnings: [...(pooled.pool?.warnings ?? [])],
            readyAt: new Date().toISOString(),
            ...(pooled.pool?.checkout ? { checkout: pooled.pool.checkout } : {}),
          } satisfies Partial<SessionRecord>);
          await this.#persist(record);
          this.#remember(live);
          this.#emit(live, { type: "status", status: "provisioning", message: "", workspaceId: "" });
          this.#emit(live, { type: "stage_started", stage: "warm_pool", detail: pooled.id, index: 0 });
          this.#emit(live, { type: "stage_ended", stage: "warm_pool", index: 0, ok: true, exitCode: 0, timedOut: false, durationMs: Date.now() - began, message: "" });
          for (const warning of record.warnings) this.#emit(live, { type: "warning", warning });
          this.#emit(live, { type: "status", status: "active", message: "", workspaceId: pooled.id });
          this.#o.logger.info("session started from the warm pool", { session_id: record.id, agent_type: type.id, workspace_id: pooled.id });
          return { record, token };
        } catch (err) {
          // Taken from a shared pool (under the database's lock) but not attached: nobody else may
          // take it now, so it goes.
          if (pooled.pool?.claimed) void this.#o.provisioner.discard(pooled.id).catch(() => undefined);
          throw err;
        } finally {
          this.#o.pools.release(pooled.id);
        }
      }
    }
    await this.#persist(record);
    this.#remember(live);
    this.#emit(live, { type: "status", status: record.status, message: record.statusMessage, workspaceId: "" });
    this.#o.logger.info("session started", { session_id: record.id, agent_type: type.id, workspace: enabled });
    if (enabled) this.#launch(live);
    return { record, token };
  }

  /**
   * Starts a session in the workspace of another live session of the same agent type (seed 001's
   * clone(session=...)): ACTIVE at once, with a token, audit trail and digests of its own. The
   * check and the attachment happen in one turn, so a concurrent end of the last session either
   * sees this one (and keeps the workspace) or has already released it (and this is refused).
   */
  async #join(agentType: string, req: StartRequest): Promise<{ record: SessionRecord; token: string }> {
    const workspaceId = req.workspaceId ?? "";
    if (req.task.repositoryUrl !== "" || req.task.branch !== "" || req.task.baseBranch !== "" || req.task.pullRequestNumber !== 0) {
      throw new DomainError("INVALID_ARGUMENT", "A session that joins a workspace takes the workspace's task: leave task empty", { metadata: { field: "task" } });
    }
    if ((req.mounts ?? []).length > 0) {
      throw new DomainError("INVALID_ARGUMENT", "A session that joins a workspace copies no mounts: the workspace was made already", { metadata: { field: "mounts" } });
    }
    const notShareable = (why: string) =>
      new DomainError("WORKSPACE_NOT_SHAREABLE", `Workspace '${workspaceId.slice(0, 64)}' cannot be joined: ${why}`, { metadata: { workspace_id: workspaceId.slice(0, 64), field: "workspace_id" } });
    const record = this.#o.workspaces.find(workspaceId);
    if (!record) {
      throw new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${workspaceId.slice(0, 64)}' not found`, { metadata: { workspace_id: workspaceId.slice(0, 64), field: "workspace_id" } });
    }
    const owner = this.ofWorkspace(workspaceId);
    if (!owner || this.#releasing.has(workspaceId)) throw notShareable("no live session has it (only a session's workspace is shared)");
    if (owner.agentType !== agentType) throw notShareable(`it was made for agent type '${owner.agentType}'`);
    const now = new Date().toISOString();
    const { token, hash } = newSessionToken();
    const r: SessionRecord = {
      id: `sess-${randomBytes(8).toString("hex")}`,
      ...(this.#o.server ? { server: this.#o.server.id } : {}),
      agentType,
      status: "active",
      tokenHash: hash,
      workspaceId,
      workspaceEnabled: true,
      task: { ...owner.task },
      labels: { ...req.labels },
      warnings: [],
      statusMessage: "",
      createdAt: now,
      readyAt: now,
      lastActivityAt: now,
      provider: owner.provider,
      fromWarmPool: false,
      ...(owner.checkout ? { checkout: { ...owner.checkout } } : {}),
      idleTimeoutMs: this.#idleTimeoutOf(this.#o.agentTypes.find(agentType)?.workspace),
      resumes: 0,
      joined: true,
    };
    // A shared workspace is never clean again: none of its sessions may hand it back to a warm
    // pool (the next session would find what the joined one wrote).
    for (const id of this.sessionsOf(workspaceId)) {
      const other = this.#sessions.get(id);
      if (other) other.used = true;
    }
    const live: Live = { record: r, events: new SessionEvents(), inflight: 0, used: true, fingerprint: "", dirty: false };
    // No wait between the check above and this: the workspace now counts this session.
    this.#remember(live);
    try {
      await this.#persist(r);
    } catch (err) {
      this.#sessions.delete(r.id);
      this.#byToken.delete(r.tokenHash);
      if (this.#detach(workspaceId, r.id)) void this.#releaseOrphan(workspaceId);
      throw err;
    }
    this.#emit(live, { type: "status", status: "active", message: "", workspaceId });
    this.#o.logger.info("session joined a shared workspace", { session_id: r.id, agent_type: agentType, workspace_id: workspaceId, sessions: this.#byWorkspace.get(workspaceId)?.size ?? 0 });
    return { record: r, token };
  }

  /** Discards a workspace left with no session (its last one ended while another failed to join). */
  async #releaseOrphan(workspaceId: string): Promise<void> {
    this.#releasing.add(workspaceId);
    try {
      await this.#o.provisioner.discard(workspaceId);
    } catch (err) {
      this.#o.logger.warn("could not remove a workspace left without sessions", { workspace_id: workspaceId, error: messageOf(err) });
    } finally {
      this.#releasing.delete(workspaceId);
    }
  }

  /** The idle timeout of a session of an agent type with this workspace configuration: its own, else the server's. */
  #idleTimeoutOf(cfg: { sessionIdleTimeoutMs: bigint } | undefined): number {
    return Number(cfg?.sessionIdleTimeoutMs ?? 0n) || this.#o.idleTimeoutMs;
  }

  /** Provisions a session's workspace in the background. */
  #launch(live: Live): void {
    const r = live.record;
    const type = this.#o.agentTypes.find(r.agentType);
    const cfg = type?.workspace;
    if (!cfg?.enabled) {
      void this.#degrade(live, `Agent type '${r.agentType}' ${type ? "has workspaces disabled" : "no longer exists"}; no workspace was made`);
      return;
    }
    live.fingerprint = this.#o.pools.fingerprint(r.agentType, cfg, cloneTarget(cfg, r.task));
    const spec: BuildSpec = {
      agentType: r.agentType,
      config: cfg,
      provider: cfg.provider !== "" ? cfg.provider : this.#o.defaultProvider,
      fallbackProvider: cfg.fallbackProvider,
      target: cloneTarget(cfg, r.task),
      labels: r.labels,
      session: { id: r.id, task: r.task },
      env: taskEnv(r.task),
      ...(r.mounts ? { mounts: r.mounts } : {}),
    };
    const abort = new AbortController();
    live.abort = abort;
    const sink: StageSink = (ev) => this.#emit(live, ev);
    live.provisioning = (async () => {
      try {
        const built = await this.#o.provisioner.build(spec, sink, abort.signal);
        // An end that came while the build finished (before it could abort it) wins too.
        if (abort.signal.aborted || r.status === "ended") {
          await this.#o.provisioner.discard(built.workspaceId);
          return;
        }
        r.status = "active";
        r.workspaceId = built.workspaceId;
        r.provider = built.provider;
        r.warnings.push(...built.warnings);
        if (built.checkout) r.checkout = built.checkout;
        r.readyAt = new Date().toISOString();
        // The idle clock starts when the session can first be used.
        r.lastActivityAt = r.readyAt;
        this.#attach(built.workspaceId, r.id);
        await this.#persist(r);
        this.#emit(live, { type: "status", status: "active", message: "", workspaceId: built.workspaceId });
        this.#o.logger.info("session active", { session_id: r.id, agent_type: r.agentType, workspace_id: built.workspaceId, provider: built.provider, warnings: r.warnings.length });
      } catch (err) {
        if (abort.signal.aborted) return;
        const cause = err instanceof ProvisioningFailed ? err.cause : err;
        this.#o.logger.error("session provisioning failed; the session continues without a workspace (degraded)", {
          session_id: r.id,
          agent_type: r.agentType,
          error: messageOf(err),
          cause: messageOf(cause),
        });
        await this.#degrade(live, messageOf(err));
      } finally {
        live.abort = undefined;
      }
    })();
  }

  async #degrade(live: Live, message: string): Promise<void> {
    const r = live.record;
    if (r.status === "ended") return;
    r.status = "degraded";
    r.statusMessage = message;
    r.readyAt = new Date().toISOString();
    r.lastActivityAt = r.readyAt;
    await this.#persist(r).catch((err: unknown) => this.#o.logger.error("cannot record a degraded session", { session_id: r.id, error: messageOf(err) }));
    this.#emit(live, { type: "status", status: "degraded", message, workspaceId: "" });
  }

  /**
   * Ends a session: its token stops working at once (durably), provisioning in progress is
   * stopped, and its workspace is removed, or returned to its pool if no tool ever ran in it and
   * the pool wants it. Ending an ended session returns it unchanged.
   */
  async end(id: string, reason: string): Promise<SessionRecord> {
    const live = this.#live(id);
    const r = live.record;
    if (!this.#mine(r)) throw this.#elsewhere(r);
    if (r.status === "ended") return r;
    r.status = "ended";
    r.statusMessage = reason;
    r.endedAt = new Date().toISOString();
    this.#byToken.delete(r.tokenHash);
    // Decided now, before any wait: the last session of a workspace releases it, and from this
    // moment no session can join it; one that shares it with others just leaves.
    const last = r.workspaceId !== "" && this.#detach(r.workspaceId, r.id);
    if (last) this.#releasing.add(r.workspaceId);
    try {
      await this.#persist(r);
    } catch (err) {
      if (last) this.#releasing.delete(r.workspaceId);
      throw err;
    }
    this.#emit(live, { type: "status", status: "ended", message: reason, workspaceId: r.workspaceId });
    live.abort?.abort(new Error("the session ended"));
    await live.provisioning;
    const workspaceId = r.workspaceId;
    if (last) {
      try {
        const record = this.#o.workspaces.find(workspaceId);
        if (record && !live.used && live.fingerprint !== "" && this.#o.pools.wants(live.fingerprint)) {
          await this.#o.workspaces.annotate(workspaceId, { labels: {}, pool: { fingerprint: live.fingerprint, ready: true, warnings: r.warnings, ...(r.checkout ? { checkout: r.checkout } : {}) } });
          this.#o.logger.info("unused workspace returned to the warm pool", { session_id: r.id, workspace_id: workspaceId });
        } else if (record) {
          await this.#o.provisioner.discard(workspaceId);
        }
      } finally {
        this.#releasing.delete(workspaceId);
      }
    } else if (workspaceId !== "") {
      this.#o.logger.info("session left its shared workspace", { session_id: r.id, workspace_id: workspaceId, sessions_left: this.#byWorkspace.get(workspaceId)?.size ?? 0 });
    }
    this.#o.logger.info("session ended", { session_id: r.id, agent_type: r.agentType, reason });
    return r;
  }

  /**
   * Keeps a session's digest for a section key (replacing the one before), durably. An ended
   * session keeps what it has but takes no new one (SESSION_NOT_READY).
   */
  async setDigest(id: string, key: string, summary: string, body: string): Promise<ResolvedDigest> {
    const r = this.#live(id).record;
    const sectionKey = sectionKeyOf(key, "digest.section_key");
    checkDigestText(summary, body, "digest");
    if (r.status === "ended") {
      throw new DomainError("SESSION_NOT_READY", `Session '${r.id}' has ended; its digests can be read but not changed`, { metadata: { session_id: r.id, status: r.status } });
    }
    const digests = { ...r.digests };
    if (!Object.hasOwn(digests, sectionKey) && Object.keys(digests).length >= MAX_DIGESTS_PER_SESSION) {
      throw new DomainError("RESOURCE_EXHAUSTED", `Session '${r.id}' keeps at most ${MAX_DIGESTS_PER_SESSION} digests`, { metadata: { session_id: r.id, max_digests: String(MAX_DIGESTS_PER_SESSION) } });
    }
    digests[sectionKey] = { summary, body, updatedAt: new Date().toISOString() };
    await this.#persist({ ...r, digests });
    r.digests = digests;
    return { sectionKey, ...digests[sectionKey], source: "session" };
  }

  /** Resolves a section key for a session: its own digest, the agent type's override, a placeholder. */
  digest(id: string, key: string): ResolvedDigest {
    const r = this.#live(id).record;
    const sectionKey = sectionKeyOf(key, "section_key");
    const own = r.digests && Object.hasOwn(r.digests, sectionKey) ? r.digests[sectionKey] : undefined;
    if (own) return { sectionKey, ...own, source: "session" };
    const override = this.#o.agentTypes.find(r.agentType)?.workspace?.digestOverrides.find((d) => d.sectionKey === sectionKey);
    if (override) return { sectionKey, summary: override.summary, body: override.body, source: "agent_type" };
    this.#o.logger.warn("no workspace digest for the section: a placeholder was returned", { session_id: r.id, agent_type: r.agentType, section_key: sectionKey });
    return placeholder(sectionKey);
  }

  /** The session's events: those so far, then live ones, until provisioning is over (or, with `follow`, the end). */
  async *watch(id: string, follow: boolean, signal: AbortSignal): AsyncGenerator<SessionEvent> {
    const live = this.#live(id);
    const done = (s: SessionStatus) => s === "ended" || (!follow && (s === "active" || s === "degraded"));
    if (live.events.empty) {
      // Nothing kept (the server restarted since): open with where the session stands.
      const r = live.record;
      yield { time: new Date(), type: "status", status: r.status, message: r.statusMessage, workspaceId: r.workspaceId };
      if (done(r.status)) return;
    }
    for await (const ev of live.events.watch(signal)) {
      yield ev;
      if (ev.type === "status" && done(ev.status)) return;
    }
  }

  /**
   * Resolves once the session has left PROVISIONING (ACTIVE, DEGRADED or ENDED), at once if it
   * has; rejects with the signal's reason if the signal aborts first (the caller's deadline or
   * cancellation, or the server stopping), and then keeps nothing of the wait. A tool call made
   * while its session's workspace is being made waits here instead of being refused.
   */
  whenSettled(id: string, signal: AbortSignal): Promise<void> {
    const live = this.#live(id);
    if (live.record.status !== "provisioning") return Promise.resolve();
    if (signal.aborted) return Promise.reject(signal.reason);
    this.#o.logger.debug("a tool call waits for its session's workspace", { session_id: id });
    return new Promise<void>((resolve, reject) => {
      const waiters = this.#waiters.get(id) ?? new Set<() => void>();
      this.#waiters.set(id, waiters);
      const settled = () => {
        signal.removeEventListener("abort", aborted);
        resolve();
      };
      const aborted = () => {
        waiters.delete(settled);
        if (waiters.size === 0 && this.#waiters.get(id) === waiters) this.#waiters.delete(id);
        reject(signal.reason);
      };
      waiters.add(settled);
      signal.addEventListener("abort", aborted, { once: true });
    });
  }

  /** Marks the start of a tool call in a session; the returned function marks its end. */
  enter(sessionId: string): () => void {
    const live = this.#sessions.get(sessionId);
    if (!live) return () => undefined;
    live.inflight++;
    live.used = true;
    this.#touch(live);
    let once = false;
    return () => {
      if (once) return;
      once = true;
      live.inflight--;
      this.#touch(live);
    };
  }

  #touch(live: Live): void {
    live.record.lastActivityAt = new Date().toISOString();
    live.dirty = true;
  }

  #emit(live: Live, ev: Parameters<StageSink>[0]): void {
    live.events.emit({ time: new Date(), ...ev } as SessionEvent);
    if (ev.type === "status") {
      const r = live.record;
      // Emitted after the status is recorded, so a woken call finds the session as it now is.
      const waiters = ev.status === "provisioning" ? undefined : this.#waiters.get(r.id);
      if (waiters) {
        this.#waiters.delete(r.id);
        for (const wake of waiters) wake();
      }
      this.#o.onStatus?.({ sessionId: r.id, agentType: r.agentType, status: ev.status, message: ev.message, workspaceId: ev.workspaceId || r.workspaceId });
    }
  }

  async #persist(r: SessionRecord): Promise<void> {
    if (await this.#o.store.put({ id: r.id, agentType: r.agentType, status: r.status, tokenHash: r.tokenHash, createdAt: new Date(r.createdAt), record: JSON.stringify(r) })) return;
    // Another server took it over (this one was cut off from the database a while): its copy
    // there is the session now, and this change was not made.
    await this.#reload(r.id, true);
    const now = this.#sessions.get(r.id)?.record;
    throw this.#elsewhere(now && now !== r ? now : r);
  }

  /** The reaper: ends idle sessions, writes the idle clock, lets pools refill. */
  #tick(): void {
    const now = Date.now();
    for (const live of this.#sessions.values()) {
      const r = live.record;
      if ((r.status !== "active" && r.status !== "degraded") || r.idleTimeoutMs <= 0 || live.inflight > 0 || !this.#mine(r)) continue;
      const idleFor = now - Date.parse(r.lastActivityAt);
      if (idleFor < r.idleTimeoutMs) continue;
      void this.end(r.id, `Ended after ${r.idleTimeoutMs} ms without a tool call (idle timeout)`).catch((err: unknown) =>
        this.#o.logger.error("ending an idle session failed", { session_id: r.id, error: messageOf(err) }),
      );
    }
    if (now - this.#lastFlush >= ACTIVITY_FLUSH_MS) void this.#flush();
    this.#o.pools.tick();
    if (this.#o.shared && !this.#adopting) {
      this.#adopting = true;
      void this.#adopt()
        .catch((err: unknown) => this.#o.logger.warn("sessions of a stopped server could not be taken over; trying again", { error: messageOf(err) }))
        .finally(() => (this.#adopting = false));
    }
  }

  #adopting = false;

  /**
   * Takes over the sessions of servers that have stopped (servers sharing a database): each not
   * ended is claimed by compare-and-set on its stored record, so exactly one live server gets it,
   * and is then served here like one started here: its token accepted, its idle clock kept (as
   * last written), its provisioning started again if the stop caught it provisioning. Its
   * workspace is taken over at its first call (WorkspaceManager).
   */
  async #adopt(): Promise<void> {
    const server = this.#o.server;
    const shared = this.#o.shared;
    if (!server || !shared || this.#closed) return;
    const stopped = new Map<string, boolean>();
    for (const live of [...this.#sessions.values()]) {
      const r = live.record;
      if (r.status === "ended" || r.server === undefined || this.#mine(r) || server.liveUrl(r.server) !== undefined) continue;
      // The last beats did not see it: asked again, so a stale view never takes a live server's session.
      let gone = stopped.get(r.server);
      if (gone === undefined) {
        gone = !(await server.status(r.server)).live;
        stopped.set(r.server, gone);
      }
      if (!gone || this.#closed) continue;
      const from = r.server;
      const text = await shared.store.claimSession(r.id, from, server.id);
      if (text === undefined) {
        await this.#reload(r.id);
        continue;
      }
      const record = JSON.parse(text) as SessionRecord;
      const current = this.#sessions.get(r.id);
      const taken = this.#replace(current, record);
      taken.used = true;
      this.#o.logger.warn("session taken over from a server that stopped", { session_id: record.id, from_server: from, server: server.id, status: record.status });
      if (record.status === "provisioning") await this.#reprovision(taken, from);
      else if (record.status === "active" && record.workspaceId !== "") {
        // Its workspace is taken over now, not at its first call: were the stopped server to come
        // back, it would serve the workspace again while this one serves the session.
        await this.#o.workspaces.handle(record.workspaceId).catch((err: unknown) =>
          this.#o.logger.warn("the workspace of a session taken over could not be opened here", { session_id: record.id, workspace_id: record.workspaceId, error: messageOf(err) }),
        );
      }
    }
  }

  /**
   * Provisions again a session the stop of server `from` caught provisioning (once: a second stop
   * degrades it), after removing the workspace that server had begun for it.
   */
  async #reprovision(live: Live, from: string): Promise<void> {
    const r = live.record;
    for (const w of this.#o.workspaces.listRecords("", {})) {
      if (w.session?.id !== r.id || w.server !== from || w.id === r.workspaceId) continue;
      this.#o.logger.warn("removing the workspace a stopped server was making for a session taken over", { workspace_id: w.id, session_id: r.id });
      await this.#o.provisioner.discard(w.id).catch((err: unknown) => this.#o.logger.warn("could not remove the half-made workspace of a session taken over", { workspace_id: w.id, error: messageOf(err) }));
    }
    if (r.resumes >= 1) {
      await this.#degrade(live, "The servers provisioning this session stopped twice; it was not tried again");
      return;
    }
    r.resumes++;
    const warning = { stage: "sandbox", message: "The server provisioning this session stopped; another server took it over and started provisioning again", command: "", exitCode: 0, timedOut: false } as const;
    r.warnings.push(warning);
    await this.#persist(r);
    this.#emit(live, { type: "warning", warning });
    this.#launch(live);
  }

  async #flush(): Promise<void> {
    this.#lastFlush = Date.now();
    for (const live of this.#sessions.values()) {
      if (!live.dirty || live.record.status === "ended" || !this.#mine(live.record)) continue;
      live.dirty = false;
      await this.#persist(live.record).catch((err: unknown) => this.#o.logger.warn("cannot record session activity", { session_id: live.record.id, error: messageOf(err) }));
    }
  }

  /**
   * Stops the reaper and provisioning in progress (a stopped provisioning starts again at the
   * next start) and writes the idle clock; sessions and their workspaces survive.
   */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    for (const live of this.#sessions.values()) live.abort?.abort(new Error("the server is stopping"));
    await Promise.allSettled([...this.#sessions.values()].map((l) => l.provisioning));
    await this.#o.pools.close();
    await this.#flush();
  }
}
