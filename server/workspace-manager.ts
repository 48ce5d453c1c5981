/**
 * Owns the set of workspaces: creates them through a provider, persists their records, opens a
 * handle on first use (also after a restart) and deletes them. Services and tools reach a
 * workspace only through `handle(id)`.
 */
import { randomBytes } from "node:crypto";
import { DomainError, hasReason } from "../core/errors.ts";
import type { Provider, WorkspaceHandle, WorkspaceRecord } from "../providers/types.ts";
import type { Logger } from "./logger.ts";
import { type LimitStrings, resolveLimits } from "./workspace-limits.ts";
import type { WorkspaceStore } from "./workspace-store.ts";

/** What CreateWorkspace asks for. */
export interface CreateRequest {
  provider: string;
  labels: Record<string, string>;
  limits: LimitStrings;
  image: string;
}

/** A workspace as the API shows it. */
export interface WorkspaceView {
  record: WorkspaceRecord;
  status: "creating" | "ready" | "stopped" | "failed";
  statusMessage: string;
}

const ID = /^ws-[0-9a-f]{16}$/;
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._\/-]{0,62}$/;

/** Options of the manager. */
export interface WorkspaceManagerOptions {
  providers: Provider[];
  defaultProvider: string;
  defaultLimits: LimitStrings;
  store: WorkspaceStore;
  logger: Logger;
}

export class WorkspaceManager {
  readonly #providers = new Map<string, Provider>();
  readonly #records = new Map<string, WorkspaceRecord>();
  readonly #handles = new Map<string, Promise<WorkspaceHandle>>();
  readonly #creating = new Set<string>();
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
    for (const r of await this.#options.store.load()) this.#records.set(r.id, r);
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

  async create(req: CreateRequest): Promise<WorkspaceView> {
    const provider = this.#provider(req.provider === "" ? this.#options.defaultProvider : req.provider);
    for (const [k, v] of Object.entries(req.labels)) {
      if (!LABEL_KEY.test(k) || v.length > 256) {
        throw new DomainError("INVALID_ARGUMENT", `Invalid label '${k.slice(0, 64)}': keys are 1-63 characters [A-Za-z0-9._/-], values at most 256`, {
          metadata: { field: "labels" },
        });
      }
    }
    const limits = resolveLimits(req.limits, this.#options.defaultLimits);
    const id = `ws-${randomBytes(8).toString("hex")}`;
    this.#creating.add(id);
    let record: WorkspaceRecord | undefined;
    try {
      record = await provider.create({ id, labels: req.labels, limits, image: req.image });
      await this.#options.store.put(record);
      this.#records.set(id, record);
      await this.handle(id);
      this.#options.logger.info("workspace created", { workspace_id: id, provider: provider.name });
      return { record, status: "ready", statusMessage: "" };
    } catch (err) {
      // A half-made workspace is undone: nothing is left behind for a failed create.
      this.#records.delete(id);
      this.#handles.delete(id);
      if (record) {
        const made = record;
        await provider.destroy(made).catch((e: unknown) => this.#options.logger.warn("cleanup after failed create failed", { workspace_id: id, error: String(e) }));
        await this.#options.store.delete(id).catch(() => undefined);
      }
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

  /** The live handle of a workspace, opened on first use. */
  async handle(id: string): Promise<WorkspaceHandle> {
    const record = this.#record(id);
    let h = this.#handles.get(id);
    if (!h) {
      h = this.#provider(record.provider).open(record);
      this.#handles.set(id, h);
      h.catch(() => this.#handles.delete(id));
    }
    return h;
  }

  async get(id: string): Promise<WorkspaceView> {
    const record = this.#record(id);
    if (this.#creating.has(id)) return { record, status: "creating", statusMessage: "" };
    try {
      const h = await this.handle(id);
      const health = await h.health();
      return { record, status: health.status, statusMessage: health.message };
    } catch (err) {
      if (hasReason(err, "PROVIDER_UNAVAILABLE")) return { record, status: "failed", statusMessage: err.message };
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
    const record = this.#record(id);
    const h = this.#handles.get(id);
    this.#handles.delete(id);
    if (h) await h.then((x) => x.close(), () => undefined);
    await this.#provider(record.provider).destroy(record);
    this.#records.delete(id);
    await this.#options.store.delete(id);
    this.#options.logger.info("workspace deleted", { workspace_id: id });
  }

  /** Closes handles and providers; workspaces themselves survive. */
  async close(): Promise<void> {
    for (const h of this.#handles.values()) await h.then((x) => x.close(), () => undefined);
    this.#handles.clear();
    for (const p of this.#providers.values()) await p.dispose();
  }
}
