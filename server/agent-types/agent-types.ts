/**
 * The agent types a server knows: validated on every way in (ConfigService, REST, the
 * agent-types file), stored through the Store, and held in memory so that the per-call
 * permission check never waits on the database. Writes are serialised and compare-and-set on
 * the revision, so a write either lands whole with revision + 1 or not at all.
 */
import { clone, create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type AgentType, AgentTypeSchema, type WorkspaceConfig } from "../../gen/agentworkspace/v1/config_pb.js";
import { DomainError } from "../../core/errors.ts";
import type { Logger } from "../logger.ts";
import type { AgentTypeStore, ChangeFeed, StoredAgentType } from "../store/store.ts";
import { normalizeWorkspaceConfig, validateAgentTypeId, type ValidationContext } from "./validate.ts";

const MAX_TEXT = 4096;

/** What `apply` did with each declared agent type. */
export interface ApplyReport {
  created: string[];
  updated: string[];
  unchanged: string[];
}

function textField(value: string, field: string): string {
  if (value.length > MAX_TEXT) throw new DomainError("INVALID_ARGUMENT", `${field} may be at most ${MAX_TEXT} characters`, { metadata: { field } });
  return value;
}

/** The part of an agent type a caller sets, in canonical form (for comparisons). */
function specOf(t: AgentType): string {
  const spec = clone(AgentTypeSchema, t);
  spec.revision = 0n;
  spec.createdAt = undefined;
  spec.updatedAt = undefined;
  return toJsonString(AgentTypeSchema, spec);
}

export class AgentTypes {
  readonly #store: AgentTypeStore;
  readonly #ctx: ValidationContext;
  readonly #cache = new Map<string, AgentType>();
  #writes: Promise<unknown> = Promise.resolve();

  readonly #changes: ChangeFeed | undefined;
  readonly #logger: Logger | undefined;
  #retry: NodeJS.Timeout | undefined;

  constructor(store: AgentTypeStore, ctx: ValidationContext, changes?: ChangeFeed, logger?: Logger) {
    this.#store = store;
    this.#ctx = ctx;
    this.#changes = changes;
    this.#logger = logger;
  }

  /**
   * Loads the stored agent types; call once before serving. With a change feed (a database
   * shared with other servers) it also follows their changes: each one committed reloads the
   * agent types, in turn with this server's own writes. Subscribed before the load, so a change
   * committed while loading is heard.
   */
  async init(): Promise<void> {
    // A reload that fails (the database unreachable a moment) is tried again every second until
    // one succeeds: a copy left stale would keep allowing what another server took away.
    const reload = () => {
      clearTimeout(this.#retry);
      this.#retry = undefined;
      void this.#serial(() => this.#reload()).catch((err: unknown) => {
        this.#logger?.warn("agent types could not be reloaded after another server changed them; retrying", { error: (err as Error).message });
        this.#retry = setTimeout(reload, 1000);
        this.#retry.unref();
      });
    };
    this.#changes?.subscribe((change) => {
      if (change.table === "agent_types") reload();
    }, reload);
    await this.#reload();
  }

  /** Replaces the cache with what the store holds (another server sharing the database may have changed it). */
  async #reload(): Promise<void> {
    const rows = await this.#store.list();
    this.#cache.clear();
    for (const row of rows) {
      const t = fromJsonString(AgentTypeSchema, row.body, { ignoreUnknownFields: true });
      t.revision = BigInt(row.revision);
      t.createdAt = timestampFromDate(row.createdAt);
      t.updatedAt = timestampFromDate(row.updatedAt);
      this.#cache.set(row.id, t);
    }
  }

  /** Every tool name a configuration may list. */
  get toolNames(): readonly string[] {
    return this.#ctx.tools;
  }

  /** The agent type, or undefined. The returned message must not be modified. */
  find(id: string): AgentType | undefined {
    return this.#cache.get(id);
  }

  /** The agent type, or AGENT_TYPE_NOT_FOUND. */
  get(id: string, field = "id"): AgentType {
    const t = this.#cache.get(id);
    if (t) return t;
    if (id === "") throw new DomainError("INVALID_ARGUMENT", `${field} is required`, { metadata: { field } });
    throw new DomainError("AGENT_TYPE_NOT_FOUND", `Agent type '${id.slice(0, 64)}' not found`, { metadata: { agent_type: id.slice(0, 64) } });
  }

  /** Every agent type, ordered by id. */
  list(): AgentType[] {
    return [...this.#cache.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** Validates an agent type as given by a caller and returns its canonical form (no revision or times). */
  #normalize(input: AgentType | undefined, keepWorkspace?: WorkspaceConfig): AgentType {
    if (!input) throw new DomainError("INVALID_ARGUMENT", "agent_type is required", { metadata: { field: "agent_type" } });
    validateAgentTypeId(input.id, "agent_type.id");
    return create(AgentTypeSchema, {
      id: input.id,
      displayName: textField(input.displayName, "agent_type.display_name"),
      description: textField(input.description, "agent_type.description"),
      workspace: input.workspace || !keepWorkspace ? normalizeWorkspaceConfig(input.workspace, this.#ctx, "agent_type.workspace.") : keepWorkspace,
    });
  }

  /** Runs writes one at a time. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#writes.then(fn, fn);
    this.#writes = run.catch(() => undefined);
    return run;
  }

  #row(t: AgentType): StoredAgentType {
    return {
      id: t.id,
      revision: Number(t.revision),
      createdAt: timestampDate(t.createdAt ?? timestampFromDate(new Date())),
      updatedAt: timestampDate(t.updatedAt ?? timestampFromDate(new Date())),
      body: toJsonString(AgentTypeSchema, t),
    };
  }

  /** Stores a new agent type at revision 1; AGENT_TYPE_EXISTS if the id is taken. */
  create(input: AgentType | undefined): Promise<AgentType> {
    const t = this.#normalize(input);
    return this.#serial(async () => {
      const now = timestampFromDate(new Date());
      const stored = create(AgentTypeSchema, { ...t, revision: 1n, createdAt: now, updatedAt: now });
      if (this.#cache.has(t.id) || !(await this.#store.insert(this.#row(stored)))) {
        throw new DomainError("AGENT_TYPE_EXISTS", `Agent type '${t.id}' already exists`, { metadata: { agent_type: t.id } });
      }
      this.#cache.set(t.id, stored);
      return stored;
    });
  }

  /** Replaces an agent type (its workspace configuration only when given). */
  update(input: AgentType | undefined): Promise<AgentType> {
    if (input) validateAgentTypeId(input.id, "agent_type.id");
    const current = this.get(input?.id ?? "", "agent_type.id");
    const t = this.#normalize(input, current.workspace);
    return this.#serial(() => this.#replace(t));
  }

  /** Replaces an agent type's workspace configuration. */
  updateWorkspaceConfig(id: string, config: WorkspaceConfig | undefined): Promise<WorkspaceConfig> {
    const current = this.get(id, "agent_type_id");
    if (!config) throw new DomainError("INVALID_ARGUMENT", "workspace_config is required", { metadata: { field: "workspace_config" } });
    const workspace = normalizeWorkspaceConfig(config, this.#ctx);
    return this.#serial(async () => (await this.#replace(create(AgentTypeSchema, { ...current, workspace }))).workspace as WorkspaceConfig);
  }

  /** Stores `t` over the cached agent type of its id, unless nothing changed. */
  async #replace(t: AgentType): Promise<AgentType> {
    const current = this.get(t.id, "agent_type.id");
    if (specOf(current) === specOf(t)) return current;
    const next = create(AgentTypeSchema, { ...t, revision: current.revision + 1n, createdAt: current.createdAt, updatedAt: timestampFromDate(new Date()) });
    if (!(await this.#store.update(this.#row(next), Number(current.revision)))) {
      // Another server on the same database changed (or deleted) it first, and its notification has
    // not come yet; nothing was written.
      // This server's copy is refreshed, so the caller's retry works on the current revision.
      await this.#reload();
      throw new DomainError("CONCURRENT_MODIFICATION", `Agent type '${t.id}' was changed by another server since revision ${current.revision}; read it again and retry`, {
        metadata: { agent_type: t.id, revision: String(current.revision) },
      });
    }
    this.#cache.set(t.id, next);
    return next;
  }

  /** Deletes an agent type no workspace belongs to; AGENT_TYPE_IN_USE otherwise. */
  delete(id: string): Promise<void> {
    this.get(id);
    return this.#serial(async () => {
      const result = await this.#store.delete(id);
      if (!result.deleted && result.missing) {
        this.#cache.delete(id);
        throw new DomainError("AGENT_TYPE_NOT_FOUND", `Agent type '${id.slice(0, 64)}' not found`, { metadata: { agent_type: id.slice(0, 64) } });
      }
      if (!result.deleted) {
        throw new DomainError("AGENT_TYPE_IN_USE", `Agent type '${id}' still has ${result.workspaces} workspace(s); delete them first`, {
          metadata: { agent_type: id, workspaces: String(result.workspaces) },
        });
      }
      this.#cache.delete(id);
    });
  }

  /**
   * Creates or updates each declared agent type so that it matches the declaration; an agent
   * type already equal to its declaration is left alone (no new revision), so applying the same
   * declarations again changes nothing. Agent types not declared are kept. Everything is
   * validated before anything is written.
   */
  async apply(declared: AgentType[]): Promise<ApplyReport> {
    const normalized = declared.map((d) => this.#normalize(d));
    const report: ApplyReport = { created: [], updated: [], unchanged: [] };
    for (const t of normalized) {
      const current = this.#cache.get(t.id);
      if (!current) {
        await this.create(t);
        report.created.push(t.id);
      } else if (specOf(current) === specOf(t)) {
        report.unchanged.push(t.id);
      } else {
        await this.#serial(() => this.#replace(t));
        report.updated.push(t.id);
      }
    }
    return report;
  }
}
