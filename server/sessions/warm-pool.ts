/**
 * Warm pools: per agent type, `warm_pool_size` workspaces made ahead of demand (sandbox started,
 * the repository cloned, setup commands run), so a session takes one at once.
 *
 * A pool is keyed by a fingerprint of everything that shapes a workspace: the agent type, its
 * whole workspace configuration (but the pool size and idle timeout), the repository and branch
 * it clones, and the server's defaults a workspace inherits (provider, image). A configuration
 * change is a new fingerprint: the old pool drains and the new one fills, so a session never gets
 * a workspace made for a configuration it does not have.
 *
 * Pooled workspaces are ordinary workspace records marked with their pool (and whether they are
 * finished), so they survive a restart; one caught half-made by a stop is removed, never handed
 * out. Servers sharing a database share the pools of sandboxes any of them reaches (containers
 * on remote engines): each counts every server's members and fills what the pool lacks, and a
 * member is taken under the database's row lock (ReplicaStore.claimPooled), then served by the
 * server that took it. Fills run in the background, at most `concurrency` at a time (so refills never starve live
 * calls), and a pool whose fills fail backs off instead of spinning.
 */
import { createHash } from "node:crypto";
import { toJsonString } from "@bufbuild/protobuf";
import { type WorkspaceConfig, WorkspaceConfigSchema } from "../../gen/agentworkspace/v1/config_pb.js";
import type { WorkspaceRecord } from "../../providers/types.ts";
import type { AgentTypes } from "../agent-types/agent-types.ts";
import type { Logger } from "../logger.ts";
import type { WorkspaceManager } from "../workspace-manager.ts";
import type { CloneTarget } from "./clone.ts";
import { type BuildSpec, type Provisioner } from "./provision.ts";

/** Dependencies of the pools. */
export interface WarmPoolOptions {
  workspaces: WorkspaceManager;
  agentTypes: AgentTypes;
  provisioner: Provisioner;
  logger: Logger;
  /** Fills running at once, over all pools. */
  concurrency: number;
  /** What a workspace inherits from the server (default provider, default image), for the fingerprint. */
  serverDefaults: string;
  defaultProvider: string;
}

/** The repository a workspace of `cfg` clones for a task, or undefined for none. */
export function cloneTarget(cfg: WorkspaceConfig, task: { repositoryUrl: string; branch: string; baseBranch: string }): CloneTarget | undefined {
  if (!cfg.checkoutOnStart) return undefined;
  const source = cfg.repoSource;
  if (source?.type === "fixed") return { url: source.url, branch: source.branch, baseBranch: "" };
  if (source?.type === "task_context" && task.repositoryUrl !== "") {
    return { url: task.repositoryUrl, branch: task.branch !== "" ? task.branch : (source.branch ?? ""), baseBranch: task.baseBranch };
  }
  return undefined;
}

/** What a pool is for. */
interface Want {
  agentType: string;
  config: WorkspaceConfig;
  target: CloneTarget | undefined;
  size: number;
}

const FAIL_BACKOFF_MS = [1_000, 5_000, 30_000, 60_000];

export class WarmPools {
  readonly #o: WarmPoolOptions;
  /** Workspaces a session has claimed but not yet taken out of the pool on record. */
  readonly #claimed = new Set<string>();
  /** Fills in progress per fingerprint. */
  readonly #filling = new Map<string, number>();
  #running = 0;
  readonly #failures = new Map<string, { count: number; until: number }>();
  readonly #stop = new AbortController();
  readonly #fills = new Set<Promise<void>>();

  constructor(options: WarmPoolOptions) {
    this.#o = options;
  }

  /** The fingerprint of a workspace of agent type `agentType` with `config`, cloning `target`. */
  fingerprint(agentType: string, config: WorkspaceConfig, target: CloneTarget | undefined): string {
    const shape = toJsonString(WorkspaceConfigSchema, { ...config, warmPoolSize: 0, sessionIdleTimeoutMs: 0n });
    return createHash("sha256")
      .update(JSON.stringify([agentType, shape, target ?? null, this.#o.serverDefaults]))
      .digest("hex")
      .slice(0, 32);
  }

  /** Pools the agent types ask for, by fingerprint. */
  #wanted(): Map<string, Want> {
    const wants = new Map<string, Want>();
    for (const type of this.#o.agentTypes.list()) {
      const cfg = type.workspace;
      if (!cfg?.enabled || cfg.warmPoolSize <= 0) continue;
      // A task_context pool is made without a repository: it serves the tasks that name none.
      const target = cloneTarget(cfg, { repositoryUrl: "", branch: "", baseBranch: "" });
      wants.set(this.fingerprint(type.id, cfg, target), { agentType: type.id, config: cfg, target, size: cfg.warmPoolSize });
    }
    return wants;
  }

  /**
   * The pool members this server may hand out: its own, and, where servers share the database,
   * those of the others whose sandboxes it reaches too (containers on remote engines): for those
   * there is one pool for all the servers.
   */
  #members(): WorkspaceRecord[] {
    const w = this.#o.workspaces;
    return w.listRecords("", {}).filter((r) => r.pool !== undefined && !r.pool.claimed && !this.#claimed.has(r.id) && w.canTakePooled(r));
  }

  /** Members in the order they are counted, handed out and drained: oldest first. */
  static #byAge(a: WorkspaceRecord, b: WorkspaceRecord): number {
    return a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  }

  /**
   * Takes a finished workspace of the pool `fingerprint`, if one is ready; the caller must then
   * `release` it with its new owner recorded. Where servers share the database the taking is the
   * database's (a row lock: no two servers take one), this server's own members first.
   */
  async claim(fingerprint: string): Promise<WorkspaceRecord | undefined> {
    const w = this.#o.workspaces;
    const ready = this.#members()
      .filter((m) => m.pool?.fingerprint === fingerprint && m.pool.ready)
      .sort((a, b) => Number(w.servedHere(b)) - Number(w.servedHere(a)) || WarmPools.#byAge(a, b));
    if (!w.sharedPools) {
      const r = ready[0];
      if (r) this.#claimed.add(r.id);
      return r;
    }
    const taken = await w.claimPooled(ready.map((r) => r.id));
    if (taken) this.#claimed.add(taken.id);
    return taken;
  }

  /** Ends a claim once the workspace's record no longer says it is pooled. */
  release(workspaceId: string): void {
    this.#claimed.delete(workspaceId);
    this.tick();
  }

  /** Whether a never-used workspace of `fingerprint` would be welcome back. */
  wants(fingerprint: string): boolean {
    const want = this.#wanted().get(fingerprint);
    if (!want) return false;
    const have = this.#members().filter((m) => m.pool?.fingerprint === fingerprint && m.pool.ready).length;
    return have < want.size;
  }

  /**
   * Removes half-made pool workspaces (a stop caught them), and those taken for a session that
   * was never attached (a stop between the two); call once at start.
   */
  async recover(): Promise<void> {
    const w = this.#o.workspaces;
    for (const r of w.listRecords("", {})) {
      if (!r.pool || !w.servedHere(r) || (r.pool.ready && !(r.pool.claimed && r.session === undefined))) continue;
      this.#o.logger.warn(r.pool.ready ? "removing a warm-pool workspace taken by a session that a stop left unattached" : "removing a warm-pool workspace left half-made by a stop", { workspace_id: r.id });
      await this.#o.provisioner.discard(r.id);
    }
  }

  /** Drains pools no configuration wants and starts the fills pools lack; cheap, call often. */
  tick(): void {
    if (this.#stop.signal.aborted) return;
    const wants = this.#wanted();
    const counts = new Map<string, number>();
    // Oldest first, so that every server sharing a pool counts alike and drains only its own
    // members beyond the pool's size (never one another's, never too many).
    for (const r of this.#members().sort(WarmPools.#byAge)) {
      // A workspace still being made is counted by its fill.
      if (!r.pool?.ready) continue;
      const fp = r.pool.fingerprint;
      const n = counts.get(fp) ?? 0;
      const want = wants.get(fp);
      if (!want || n >= want.size) {
        if (this.#o.workspaces.servedHere(r)) this.#drain(r.id);
        continue;
      }
      counts.set(fp, n + 1);
    }
    for (const [fp, want] of wants) {
      const failure = this.#failures.get(fp);
      if (failure && failure.until > Date.now()) continue;
      while ((counts.get(fp) ?? 0) + (this.#filling.get(fp) ?? 0) < want.size && this.#running < this.#o.concurrency) {
        this.#fill(fp, want);
      }
    }
  }

  #drain(id: string): void {
    this.#claimed.add(id);
    const w = this.#o.workspaces;
    // A shared pool's member is taken first, as a session would take it, so that a session on
    // another server never gets one being removed.
    const p = (async () => {
      if (w.sharedPools && !(await w.claimPooled([id]))) return;
      await this.#o.provisioner.discard(id);
    })()
      .catch((err: unknown) => this.#o.logger.warn("warm-pool workspace not drained", { workspace_id: id, error: (err as Error).message }))
      .finally(() => this.#claimed.delete(id));
    this.#track(p);
  }

  #fill(fp: string, want: Want): void {
    this.#running++;
    this.#filling.set(fp, (this.#filling.get(fp) ?? 0) + 1);
    const spec: BuildSpec = {
      agentType: want.agentType,
      config: want.config,
      provider: want.config.provider !== "" ? want.config.provider : this.#o.defaultProvider,
      fallbackProvider: want.config.fallbackProvider,
      target: want.target,
      labels: {},
      pool: { fingerprint: fp, ready: false, warnings: [] },
      env: {},
    };
    const p = (async () => {
      try {
        const built = await this.#o.provisioner.build(spec, () => undefined, this.#stop.signal);
        const record = this.#o.workspaces.find(built.workspaceId);
        if (!record) return;
        await this.#o.workspaces.annotate(built.workspaceId, {
          labels: record.labels,
          pool: { fingerprint: fp, ready: true, warnings: built.warnings, ...(built.checkout ? { checkout: built.checkout } : {}) },
        });
        this.#failures.delete(fp);
        this.#o.logger.info("warm-pool workspace ready", { agent_type: want.agentType, workspace_id: built.workspaceId, provider: built.provider });
      } catch (err) {
        if (this.#stop.signal.aborted) return;
        const count = (this.#failures.get(fp)?.count ?? 0) + 1;
        const wait = FAIL_BACKOFF_MS[Math.min(count - 1, FAIL_BACKOFF_MS.length - 1)];
        this.#failures.set(fp, { count, until: Date.now() + wait });
        this.#o.logger.warn("warm-pool fill failed; retrying later", { agent_type: want.agentType, error: (err as Error).message, retry_in_ms: wait });
      } finally {
        this.#running--;
        this.#filling.set(fp, (this.#filling.get(fp) ?? 1) - 1);
        this.tick();
      }
    })();
    this.#track(p);
  }

  #track(p: Promise<void>): void {
    this.#fills.add(p);
    void p.finally(() => this.#fills.delete(p));
  }

  /** Stops filling and waits for fills in progress to undo themselves. */
  async close(): Promise<void> {
    this.#stop.abort(new Error("the server is stopping"));
    while (this.#fills.size > 0) await Promise.allSettled([...this.#fills]);
  }
}
