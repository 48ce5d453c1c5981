/**
 * Owns the set of workspaces: creates them through a provider, persists their records, opens a
 * handle on first use (also after a restart) and deletes them. Services and tools reach a
 * workspace only through `handle(id)`.
 */
import { randomBytes } from "node:crypto";
import { DomainError, hasReason } from "../core/errors.ts";
import type { AgentTypeBinding, CreateOptions, PoolMembership, Provider, WorkspaceHandle, WorkspaceRecord, WorkspaceSession } from "../providers/types.ts";
import type { AgentTypes } from "./agent-types/agent-types.ts";
import type { Egress } from "./egress/egress.ts";
import type { Logger } from "./logger.ts";
import type { ChangeFeed, ReplicaStore, WorkspaceStore } from "./store/store.ts";
import type { Replica } from "./replicas.ts";
import { type LimitStrings, resolveLimits } from "./workspace-limits.ts";
import { programRules } from "./security/program-rules.ts";
import { copyMounts, type HostMount, type MountSettings, mountFromProto, planMounts } from "./mounts/host-mounts.ts";

/** What CreateWorkspace asks for. Empty fields take the agent type's values, then the server's. */
export interface CreateRequest {
  provider: string;
  labels: Record<string, string>;
  limits: LimitStrings;
  image: string;
  /** The agent type the workspace is for; "" for none. */
  agentType?: string;
  /** The session the workspace is made for. */
  session?: WorkspaceSession;
  /** The warm pool the workspace is made for. */
  pool?: PoolMembership;
  /** Host files to copy in, after the agent type's own mounts. */
  mounts?: HostMount[];
}

/** A workspace as the API shows it. */
export interface WorkspaceView {
  record: WorkspaceRecord;
  status: "creating" | "ready" | "stopped" | "failed" | "paused";
  statusMessage: string;
}

const ID = /^ws-[0-9a-f]{16}$/;
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._\/-]{0,62}$/;

/** Checks labels of a workspace or a session; throws INVALID_ARGUMENT naming the bad key. */
export function validateLabels(labels: Record<string, string>): void {
  for (const [k, v] of Object.entries(labels)) {
    if (!LABEL_KEY.test(k) || v.length > 256) {
      throw new DomainError("INVALID_ARGUMENT", `Invalid label '${k.slice(0, 64)}': keys are 1-63 characters [A-Za-z0-9._/-], values at most 256`, {
        metadata: { field: "labels" },
      });
    }
  }
}

/** Options of the manager. */
export interface WorkspaceManagerOptions {
  providers: Provider[];
  defaultProvider: string;
  defaultLimits: LimitStrings;
  store: WorkspaceStore;
  agentTypes: AgentTypes;
  logger: Logger;
  /** Egress through the server's proxy, for workspaces of agent types with an allowlist. */
  egress?: Pick<Egress, "hook" | "sessionTook" | "forget" | "release">;
  /** Where host mounts may come from, and how much one may copy. */
  mounts: MountSettings;
  /** Told when a workspace starts being made, is ready, fails to be made or is deleted (live events). */
  onStatus?: (change: WorkspaceStatusChange) => void;
  /** Called before a workspace is deleted (its background processes end). */
  beforeDelete?: (workspaceId: string) => Promise<void>;
  /**
   * Stops (true) or continues (false) a workspace's background processes, for a provider that
   * freezes no sandbox of its own (local) when it is paused or resumed.
   */
  stopProcesses?: (workspaceId: string, stop: boolean) => Promise<void>;
  /**
   * This server among others sharing the database (replicas.ts), with the feed of their changes:
   * a workspace is served by the server its record names, and followed by the others.
   */
  shared?: { replica: Replica; store: ReplicaStore; changes: ChangeFeed };
  /** This server took a workspace over from one that stopped (its background processes are lost). */
  onTakeover?: (workspaceId: string) => Promise<void>;
}

/** A workspace's status change, for watchers. */
export interface WorkspaceStatusChange {
  workspaceId: string;
  status: WorkspaceView["status"];
  message: string;
  deleted: boolean;
  provider: string;
  agentType: string;
  sessionId: string;
}

export class WorkspaceManager {
  readonly #providers = new Map<string, Provider>();
  readonly #records = new Map<string, WorkspaceRecord>();
  readonly #handles = new Map<string, Promise<WorkspaceHandle>>();
  readonly #creating = new Set<string>();
  /** Workspaces being deleted: never reopened (that would restart a container being removed). */
  readonly #deleting = new Set<string>();
  readonly #options: WorkspaceManagerOptions;

  constructor(options: WorkspaceManagerOptions) {
    this.#options = options;
    for (const p of options.providers) this.#providers.set(p.name, p);
  }

  /** Names of the configured providers. */
  get providerNames(): string[] {
    return [...this.#providers.keys()];
  }

  /** Loads persisted records; call once before serving. */
  async init(): Promise<void> {
    const shared = this.#options.shared;
    if (shared) {
      // Cut off from the database: every handle goes at once (the others may take the workspaces
      // over soon), and none opens until the records were read again (some may have been taken).
      shared.replica.onFence((fenced) => {
        if (fenced) {
          this.#fenced = true;
          for (const id of [...this.#handles.keys()]) void this.#drop(id);
        } else {
          this.#follow(async () => {
            await this.#reloadAll();
            this.#fenced = false;
          });
        }
      });
      // Subscribed before the load, so nothing committed after it goes unheard.
      shared.changes.subscribe(
        (change) => {
          if (change.table === "workspaces") this.#follow(() => this.#reload(change.id));
        },
        () => this.#follow(() => this.#reloadAll()),
      );
      for (const r of await this.#options.store.load()) this.#records.set(r.id, r);
      return;
    }
    for (const r of await this.#options.store.load()) {
      // A workspace of a provider whose workspaces end with the process (memory) is gone now.
      if (this.#providers.get(r.provider)?.ephemeral) {
        await this.#options.store.delete(r.id);
        this.#options.logger.info("workspace ended with the previous server process", { workspace_id: r.id, provider: r.provider, session_id: r.session?.id });
        continue;
      }
      this.#records.set(r.id, r);
    }
  }

  /** Cut off from the shared database (replicas.ts): no sandbox is driven. */
  #fenced = false;

  /** Reloads from the feed run one after another, so an older read never lands after a newer one. */
  #following: Promise<void> = Promise.resolve();
  #follow(fn: () => Promise<void>): void {
    this.#following = this.#following.then(fn).catch((err: unknown) =>
      this.#options.logger.warn("a workspace changed by another server could not be reloaded", { error: (err as Error).message }),
    );
  }

  /** Takes in a workspace record as stored now (another server made, changed, took or deleted it). */
  async #reload(id: string): Promise<void> {
    const shared = this.#options.shared as NonNullable<WorkspaceManagerOptions["shared"]>;
    if (this.#creating.has(id) || this.#deleting.has(id)) return;
    const stored = await shared.store.workspace(id);
    if (stored === undefined) {
      if (!this.#records.has(id)) return;
      this.#records.delete(id);
      await this.#drop(id);
      return;
    }
    this.#records.set(id, stored);
    // Taken over by another server (this one stopped beating a while): its handle here goes.
    if (stored.server !== shared.replica.id) await this.#drop(id);
  }

  async #reloadAll(): Promise<void> {
    const stored = new Map((await this.#options.store.load()).map((r) => [r.id, r]));
    for (const id of [...this.#records.keys()]) if (!stored.has(id) && !this.#creating.has(id)) await this.#reload(id);
    for (const id of stored.keys()) await this.#reload(id);
  }

  /** Closes this server's handle of a workspace it no longer serves. */
  async #drop(id: string): Promise<void> {
    const h = this.#handles.get(id);
    if (!h) return;
    this.#handles.delete(id);
    await h.then((x) => x.close(), () => undefined);
    this.#options.egress?.release(id);
  }

  /**
   * Makes sure this server serves workspace `id` (servers sharing a database): it does when its
   * record names it; a workspace of a live server is refused with that server's URL; one whose
   * server has stopped is taken over (compare-and-set on the stored record). Returns the server it
   * was taken over from, if it was.
   */
  async #serveHere(id: string): Promise<string | undefined> {
    const shared = this.#options.shared;
    if (!shared) return undefined;
    for (let attempt = 0; ; attempt++) {
      const record = this.#record(id);
      const server = record.server ?? "";
      if (server === shared.replica.id) return undefined;
      if (server !== "") {
        const { live, url } = await shared.replica.status(server);
        if (live) {
          throw new DomainError("WORKSPACE_SERVED_ELSEWHERE", `Workspace '${id}' is served by another server, at ${url}; send its calls there`, {
            metadata: { workspace_id: id, server_url: url },
          });
        }
      }
      if (this.#providers.get(record.provider)?.ephemeral) {
        throw new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${id}' ended with the server that served it (provider ${record.provider} keeps nothing)`, { metadata: { workspace_id: id } });
      }
      if (await shared.replica.claim(id, server)) {
        this.#records.set(id, { ...record, server: shared.replica.id });
        this.#options.logger.warn("workspace taken over from a server that stopped", { workspace_id: id, from_server: server, server: shared.replica.id });
        await this.#options.onTakeover?.(id);
        return server;
      }
      // Another server claimed it first, or it is gone: look again.
      const stored = await shared.store.workspace(id);
      if (stored === undefined) {
        this.#records.delete(id);
        this.#record(id);
      } else this.#records.set(id, stored);
      if (attempt >= 3) throw new DomainError("WORKSPACE_NOT_READY", `Workspace '${id}' is being taken over by another server; retry`, { metadata: { workspace_id: id } });
    }
  }

  #provider(name: string): Provider {
    const p = this.#providers.get(name);
    if (!p) {
      throw new DomainError("UNKNOWN_PROVIDER", `Provider '${name.slice(0, 50)}' is not configured; available: ${this.providerNames.join(", ")}`, {
        metadata: { provider: name.slice(0, 50), available: this.providerNames.join(",") },
      });
    }
    return p;
  }

  /**
   * What a workspace for `req` is made with: the request's fields, else the agent type's, else
   * the server's defaults; and the agent type binding that governs its tool calls.
   */
  #plan(req: CreateRequest): {
    providers: string[];
    limits: LimitStrings;
    image: string;
    network: CreateOptions["network"];
    placement?: CreateOptions["placement"];
    runtimeClass?: string;
    binding?: AgentTypeBinding;
  } {
    const name = req.agentType ?? "";
    if (name === "") {
      return { providers: [req.provider === "" ? this.#options.defaultProvider : req.provider], limits: req.limits, image: req.image, network: undefined };
    }
    const type = this.#options.agentTypes.get(name, "agent_type");
    const cfg = type.workspace;
    if (!cfg?.enabled) {
      throw new DomainError("AGENT_TYPE_WORKSPACE_DISABLED", `Agent type '${name}' has workspaces disabled (its workspace configuration has enabled = false)`, {
        metadata: { agent_type: name },
      });
    }
    const typeLimits = cfg.resourceLimits;
    const pick = (a: string, b: string | undefined) => (a.trim() !== "" ? a : (b ?? ""));
    const primary = req.provider !== "" ? req.provider : cfg.provider !== "" ? cfg.provider : this.#options.defaultProvider;
    return {
      // The fallback is tried only for the agent type's own choice, never past an explicit request.
      providers: req.provider === "" && cfg.fallbackProvider !== "" ? [primary, cfg.fallbackProvider] : [primary],
      limits: {
        cpu: pick(req.limits.cpu, typeLimits?.cpu),
        memory: pick(req.limits.memory, typeLimits?.memory),
        disk: pick(req.limits.disk, typeLimits?.disk),
        pids: req.limits.pids > 0 ? req.limits.pids : Number(typeLimits?.pids ?? 0n),
      },
      image: pick(req.image, cfg.baseImage),
      network: cfg.network?.mode === "open" || cfg.network?.mode === "egress" ? "egress" : "none",
      ...(Object.keys(cfg.engineLabels).length > 0 ? { placement: { engineLabels: { ...cfg.engineLabels } } } : {}),
      ...(cfg.runtimeClass !== "" ? { runtimeClass: cfg.runtimeClass } : {}),
      binding: {
        id: name,
        tools: [...cfg.tools],
        defaultTimeoutMs: Number(cfg.defaultCommandTimeoutMs),
        maxTimeoutMs: Number(cfg.maxCommandTimeoutMs),
        ...(cfg.maxProcesses > 0 ? { maxProcesses: cfg.maxProcesses } : {}),
        ...(cfg.processIdleTimeoutMs > 0n ? { processIdleTimeoutMs: Number(cfg.processIdleTimeoutMs) } : {}),
        ...(cfg.pauseAfterIdleMs > 0n ? { pauseAfterIdleMs: Number(cfg.pauseAfterIdleMs) } : {}),
        ...(cfg.deleteAfterIdleMs > 0n ? { deleteAfterIdleMs: Number(cfg.deleteAfterIdleMs) } : {}),
        commandPolicy: { defaultAction: cfg.commandPolicy?.defaultAction ?? "", allow: [...(cfg.commandPolicy?.allow ?? [])], deny: [...(cfg.commandPolicy?.deny ?? [])] },
        sensitiveFiles: { deny: [...(cfg.sensitiveFiles?.deny ?? [])], writeProtected: [...(cfg.sensitiveFiles?.writeProtected ?? [])] },
        protectedBranches: [...(cfg.git?.protectedBranches ?? [])],
        ...(cfg.network?.mode === "allowlist" ? { egressAllow: [...cfg.network.allow] } : {}),
      },
    };
  }

  /** Creates through the first provider, and through the fallback when the first is unavailable. */
  async #provision(names: string[], options: CreateOptions): Promise<WorkspaceRecord> {
    for (let i = 0; ; i++) {
      try {
        return await this.#provider(names[i]).create(options);
      } catch (err) {
        if (i + 1 >= names.length || !hasReason(err, "PROVIDER_UNAVAILABLE", "UNKNOWN_PROVIDER")) throw err;
        this.#options.logger.warn("provider failed; trying the agent type's fallback provider", {
          workspace_id: options.id,
          provider: names[i],
          fallback_provider: names[i + 1],
          error: (err as Error).message,
        });
      }
    }
  }

  /**
   * Checks mounts a request names as a workspace's creation would (allowed roots, links, sizes),
   * so that a session is refused at once rather than degraded later.
   */
  async checkMounts(mounts: HostMount[], field: string): Promise<void> {
    if (mounts.length > 0) await planMounts(mounts, this.#options.mounts, undefined, field);
  }

  async create(req: CreateRequest): Promise<WorkspaceView> {
    const plan = this.#plan(req);
    // An unknown provider is refused before anything is made, unless a fallback may stand in.
    if (plan.providers.length === 1) this.#provider(plan.providers[0]);
    validateLabels(req.labels);
    const limits = resolveLimits(plan.limits, this.#options.defaultLimits);
    // Mounts are checked and walked on the host first: a refused or oversized one makes nothing.
    const typeMounts = plan.binding ? (this.#options.agentTypes.find(plan.binding.id)?.workspace?.mounts ?? []).map(mountFromProto) : [];
    const mountPlans = await planMounts([...typeMounts, ...(req.mounts ?? [])], this.#options.mounts, plan.binding?.sensitiveFiles);
    const id = `ws-${randomBytes(8).toString("hex")}`;
    this.#creating.add(id);
    const status = (status: WorkspaceView["status"], provider: string, message = "", deleted = false) =>
      this.#options.onStatus?.({ workspaceId: id, status, message, deleted, provider, agentType: plan.binding?.id ?? "", sessionId: req.session?.id ?? "" });
    status("creating", plan.providers[0] ?? "");
    let record: WorkspaceRecord | undefined;
    try {
      const enforcement = plan.binding ? { programs: programRules(plan.binding.commandPolicy), fileRules: plan.binding.sensitiveFiles } : undefined;
      const made = await this.#provision(plan.providers, { id, labels: req.labels, limits, image: plan.image, network: plan.network, ...(plan.placement ? { placement: plan.placement } : {}), ...(plan.runtimeClass ? { runtimeClass: plan.runtimeClass } : {}), ...(enforcement ? { enforcement } : {}) });
      record = {
        ...made,
        ...(plan.binding ? { agentType: plan.binding } : {}),
        ...(req.session ? { session: req.session } : {}),
        ...(req.pool ? { pool: req.pool } : {}),
        ...(this.#options.shared ? { server: this.#options.shared.replica.id } : {}),
      };
      await this.#options.store.put(record);
      // The agent type may have been deleted while the sandbox was being made (its delete found
      // no workspace on record then): a workspace is never left bound to an agent type that is gone.
      if (plan.binding && !this.#options.agentTypes.find(plan.binding.id)) this.#options.agentTypes.get(plan.binding.id, "agent_type");
      this.#records.set(id, record);
      const handle = await this.handle(id);
      if (mountPlans.length > 0) {
        record = { ...record, mounts: await copyMounts(handle, mountPlans, plan.binding?.sensitiveFiles) };
        await handle.seal?.();
        await this.#options.store.put(record);
        this.#records.set(id, record);
      }
      this.#options.logger.info("workspace created", { workspace_id: id, provider: record.provider, agent_type: plan.binding?.id });
      status("ready", record.provider);
      return { record, status: "ready", statusMessage: "" };
    } catch (err) {
      // A half-made workspace is undone: nothing is left behind for a failed create.
      this.#records.delete(id);
      this.#handles.delete(id);
      if (record) {
        const made = record;
        await this.#provider(made.provider).destroy(made).catch((e: unknown) => this.#options.logger.warn("cleanup after failed create failed", { workspace_id: id, error: String(e) }));
        await this.#options.store.delete(id).catch(() => undefined);
      }
      status("failed", record?.provider ?? plan.providers[0] ?? "", err instanceof DomainError ? err.message.slice(0, 500) : "the workspace could not be made", true);
      throw err;
    } finally {
      this.#creating.delete(id);
    }
  }

  #record(id: string): WorkspaceRecord {
    const r = ID.test(id) ? this.#records.get(id) : undefined;
    if (!r) {
      if (id === "") throw new DomainError("INVALID_ARGUMENT", "workspace_id is required", { metadata: { field: "workspace_id" } });
      throw new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${id.slice(0, 64)}' not found`, { metadata: { workspace_id: id.slice(0, 64) } });
    }
    return r;
  }

  /**
   * Replaces what the server keeps beside a workspace (its session, its pool membership, its
   * labels), durably; the provider's part of the record never changes.
   */
  async annotate(id: string, patch: Pick<WorkspaceRecord, "session" | "pool" | "labels">): Promise<WorkspaceRecord> {
    const current = this.#record(id);
    const next: WorkspaceRecord = { ...current, labels: patch.labels, session: patch.session, pool: patch.pool };
    if (next.session === undefined) delete next.session;
    if (next.pool === undefined) delete next.pool;
    await this.#options.store.put(next);
    this.#records.set(id, next);
    // A warm pool's workspace taken by its first session: what the pool's setup moved is not the session's.
    if (current.pool !== undefined && current.session === undefined && next.session !== undefined) this.#options.egress?.sessionTook(id);
    return next;
  }

  /** Pauses and resumes in progress, by workspace: one at a time. */
  readonly #transitions = new Map<string, Promise<unknown>>();

  /** Runs `fn` after the workspace's pause or resume in progress. */
  #serial<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.#transitions.get(id) ?? Promise.resolve()).then(fn, fn);
    const settled = run.catch(() => undefined);
    this.#transitions.set(id, settled);
    void settled.then(() => {
      if (this.#transitions.get(id) === settled) this.#transitions.delete(id);
    });
    return run;
  }

  /**
   * Pauses a workspace: its provider freezes the sandbox (or, without one, its background processes
   * are stopped); the record says so, durably, and the next tool call resumes it. Idempotent.
   */
  pause(id: string): Promise<WorkspaceView> {
    return this.#serial(id, async () => {
      await this.#serveHere(id);
      const record = this.#record(id);
      if (this.#creating.has(id) || this.#deleting.has(id)) throw new DomainError("WORKSPACE_NOT_READY", `Workspace '${id}' is being ${this.#creating.has(id) ? "made" : "deleted"}`, { metadata: { workspace_id: id } });
      if (!record.paused) {
        const provider = this.#provider(record.provider);
        if (provider.pause) await provider.pause(record);
        else await this.#options.stopProcesses?.(id, true);
        await this.#setPaused(id, true);
        this.#options.logger.info("workspace paused", { workspace_id: id });
        this.#options.onStatus?.({ workspaceId: id, status: "paused", message: "paused", deleted: false, provider: record.provider, agentType: record.agentType?.id ?? "", sessionId: record.session?.id ?? "" });
      }
      return { record: this.#record(id), status: "paused" as const, statusMessage: "" };
    });
  }

  /** Resumes a paused workspace where it stopped (`why` for the log: "call", "request"). Idempotent. */
  resume(id: string, why = "request"): Promise<WorkspaceView> {
    return this.#serial(id, async () => {
      await this.#serveHere(id);
      const record = this.#record(id);
      if (record.paused) {
        const provider = this.#provider(record.provider);
        if (provider.resume) await provider.resume(record);
        else await this.#options.stopProcesses?.(id, false);
        await this.#setPaused(id, false);
        this.#options.logger.info("workspace resumed", { workspace_id: id, by: why });
        this.#options.onStatus?.({ workspaceId: id, status: "ready", message: why === "call" ? "resumed by a tool call" : "resumed", deleted: false, provider: record.provider, agentType: record.agentType?.id ?? "", sessionId: record.session?.id ?? "" });
      }
      return this.get(id);
    });
  }

  async #setPaused(id: string, paused: boolean): Promise<void> {
    const next: WorkspaceRecord = { ...this.#record(id), paused };
    if (!paused) delete next.paused;
    await this.#options.store.put(next);
    this.#records.set(id, next);
  }

  /** The handle a tool call uses: a paused workspace is resumed first. */
  async handleForCall(id: string): Promise<WorkspaceHandle> {
    if (this.#record(id).paused || this.#transitions.has(id)) await this.resume(id, "call");
    return this.handle(id);
  }

  /**
   * Whether this server serves the workspace by its record (always, unless several servers share
   * the database; a workspace of a stopped server is this one's only once taken over).
   */
  servedHere(record: WorkspaceRecord): boolean {
    const shared = this.#options.shared;
    return shared === undefined || record.server === undefined || record.server === shared.replica.id;
  }

  /** Whether warm pools are one for all the servers sharing the database (sessions.warm-pool.ts). */
  get sharedPools(): boolean {
    return this.#options.shared !== undefined;
  }

  /**
   * Whether this server could take `record` from a warm pool: one it serves, or one of another
   * server whose sandbox any server reaches (a container on a remote engine).
   */
  canTakePooled(record: WorkspaceRecord): boolean {
    return this.servedHere(record) || this.#providers.get(record.provider)?.portable?.(record) === true;
  }

  /**
   * Takes the first of `ids` still free in a warm pool, under the database's row lock, for this
   * server (servers sharing a database; see ReplicaStore.claimPooled). The record then names this
   * server; the one that made it follows the change and closes its handle.
   */
  async claimPooled(ids: string[]): Promise<WorkspaceRecord | undefined> {
    const shared = this.#options.shared;
    if (!shared || this.#fenced || ids.length === 0) return undefined;
    // Read before the claim: this server's own change may come back through the feed meanwhile.
    const servers = new Map(ids.map((id) => [id, this.#records.get(id)?.server]));
    const taken = await shared.store.claimPooled(ids, shared.replica.id);
    if (taken === undefined) return undefined;
    const from = servers.get(taken.id);
    this.#records.set(taken.id, taken);
    if (from !== undefined && from !== shared.replica.id) {
      this.#options.logger.info("warm-pool workspace taken from another server's pool", { workspace_id: taken.id, from_server: from });
    }
    return taken;
  }

  /** The record of a workspace, or undefined; never throws. */
  find(id: string): WorkspaceRecord | undefined {
    return this.#records.get(id);
  }

  /** The live handle of a workspace, opened on first use. */
  async handle(id: string): Promise<WorkspaceHandle> {
    let record = this.#record(id);
    if (this.#fenced) {
      throw new DomainError("DATABASE_UNAVAILABLE", "This server has lost its database for more than a few seconds, so it drives no sandbox until it is back (another server may take the workspace over meanwhile). Retry", {
        metadata: { workspace_id: id },
      });
    }
    if (this.#deleting.has(id)) throw new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${id}' is being deleted`, { metadata: { workspace_id: id } });
    let h = this.#handles.get(id);
    let takenFrom: string | undefined;
    if (!h && this.#options.shared && record.server !== this.#options.shared.replica.id) {
      takenFrom = await this.#serveHere(id);
      record = this.#record(id);
      h = this.#handles.get(id);
    }
    if (!h) {
      const allow = record.agentType?.egressAllow;
      const egress = allow !== undefined && this.#options.egress ? this.#options.egress.hook(id, allow) : undefined;
      h = this.#provider(record.provider).open(record, { fileRules: record.agentType?.sensitiveFiles, ...(egress ? { egress } : {}) });
      this.#handles.set(id, h);
      h.catch((err: unknown) => {
        this.#handles.delete(id);
        // Taken over but out of this server's reach (a sandbox on another host): given back, so
        // that its own server serves it again when it returns.
        const shared = this.#options.shared;
        if (takenFrom === undefined || !shared) return;
        this.#options.logger.warn("a workspace taken over could not be opened here; it goes back to its server", { workspace_id: id, to_server: takenFrom, error: (err as Error).message });
        void shared.store.claim(id, shared.replica.id, takenFrom).then(
          (back) => {
            if (back && this.#records.has(id)) this.#records.set(id, { ...this.#record(id), server: takenFrom });
          },
          () => undefined,
        );
      });
    }
    return h;
  }

  async get(id: string): Promise<WorkspaceView> {
    const record = this.#record(id);
    if (this.#creating.has(id)) return { record, status: "creating", statusMessage: "" };
    if (this.#deleting.has(id)) return { record, status: "stopped", statusMessage: "The workspace is being deleted" };
    // Not opened to ask: a frozen sandbox answers nothing.
    if (record.paused) return { record, status: "paused", statusMessage: "" };
    try {
      const h = await this.handle(id);
      const health = await h.health();
      return { record, status: health.status, statusMessage: health.message };
    } catch (err) {
      if (hasReason(err, "PROVIDER_UNAVAILABLE")) return { record, status: "failed", statusMessage: err.message };
      // Another server serves it: its record says how it is, as far as this server knows.
      if (hasReason(err, "WORKSPACE_SERVED_ELSEWHERE")) return { record, status: "ready", statusMessage: err.message };
      throw err;
    }
  }

  /** Records matching the filter, newest first. */
  listRecords(provider: string, labels: Record<string, string>): WorkspaceRecord[] {
    return [...this.#records.values()]
      .filter((r) => (provider === "" || r.provider === provider) && Object.entries(labels).every(([k, v]) => r.labels[k] === v))
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? -1 : 1));
  }

  async delete(id: string): Promise<void> {
    await this.#serveHere(id);
    const record = this.#record(id);
    if (this.#deleting.has(id)) throw new DomainError("WORKSPACE_NOT_FOUND", `Workspace '${id}' is being deleted`, { metadata: { workspace_id: id } });
    this.#deleting.add(id);
    try {
      // What runs in it ends first, while its sandbox is still there to say how (thawed: a frozen
      // sandbox answers nothing).
      if (record.paused) await this.#provider(record.provider).resume?.(record).catch(() => undefined);
      await this.#options.beforeDelete?.(id);
      const h = this.#handles.get(id);
      this.#handles.delete(id);
      if (h) await h.then((x) => x.close(), () => undefined);
      await this.#provider(record.provider).destroy(record);
      this.#records.delete(id);
      this.#options.egress?.forget(id);
      await this.#options.store.delete(id);
    } finally {
      this.#deleting.delete(id);
    }
    this.#options.logger.info("workspace deleted", { workspace_id: id });
    this.#options.onStatus?.({ workspaceId: id, status: "stopped", message: "deleted", deleted: true, provider: record.provider, agentType: record.agentType?.id ?? "", sessionId: record.session?.id ?? "" });
  }

  /** Closes handles and providers; workspaces themselves survive. */
  async close(): Promise<void> {
    for (const h of this.#handles.values()) await h.then((x) => x.close(), () => undefined);
    this.#handles.clear();
    for (const p of this.#providers.values()) await p.dispose();
  }
}
