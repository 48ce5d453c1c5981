/**
 * Several Docker engines behind the `docker` and `gvisor` providers: each engine is watched
 * (a ping every few seconds), a new workspace is placed on the engine with the most free
 * capacity that meets its constraints, and every later call goes to the engine its record names
 * (`state.engine`). An engine that stops answering is marked down: its workspaces' calls fail
 * UNAVAILABLE / PROVIDER_UNAVAILABLE naming it (they are never made again elsewhere), and new
 * workspaces go to the others.
 *
 * Capacity is what the engine reports (CPUs, memory) minus what the workspaces on it reserve:
 * their limits, which docker.ts writes into container labels, so every server sharing an engine
 * counts the same containers.
 */
import type Docker from "dockerode";
import { DomainError, hasReason } from "../core/errors.ts";
import { createDockerProvider, engineError, LABELS } from "./docker.ts";
import type { CreateOptions, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** How often engines are pinged, and how long a ping may take. */
const CHECK_EVERY_MS = 2000;
const PING_TIMEOUT_MS = 2000;
/**
 * Pings in a row that may go unanswered in time before an engine that was up counts as down. A
 * refused or broken connection marks it down at once; a slow answer is what a busy engine gives
 * (a local dockerd creating and removing many containers on two cores took more than 2 s), so
 * it takes this many in a row, about 6 s, to call it gone. At the server's start an engine gets
 * as many before it is judged absent: on "auto" an absent engine's providers are left out for
 * the server's life, and a slow one is not an absent one.
 */
const SLOW_PINGS_DOWN = 3;

type ContainerProvider = ReturnType<typeof createDockerProvider>;

/** One engine: its client, what it reports, whether it answers, and its provider per runtime. */
export class Engine {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly docker: Docker;
  /** For log lines: the socket or host:port (never credentials). */
  readonly where: string;
  /** The providers on this engine, by provider name ("docker", "gvisor"). */
  readonly providers = new Map<string, ContainerProvider>();
  #up = false;
  /** Since when it has not answered; undefined before the first check and while it answers. */
  #downSince: Date | undefined;
  #downWhy = "not checked yet";
  #cpus = 0;
  #memoryBytes = 0;
  #runtimes = new Set<string>();
  readonly #log: ProviderLog;

  /** Reached over TCP: every server configured with it reaches its containers alike. */
  readonly remote: boolean;

  constructor(name: string, labels: Record<string, string>, docker: Docker, where: string, log: ProviderLog, remote = false) {
    this.name = name;
    this.remote = remote;
    this.labels = labels;
    this.docker = docker;
    this.where = where;
    this.#log = log;
  }

  get up(): boolean {
    return this.#up;
  }
  get cpus(): number {
    return this.#cpus;
  }
  get memoryBytes(): number {
    return this.#memoryBytes;
  }
  hasRuntime(runtime: string): boolean {
    return this.#runtimes.has(runtime);
  }

  #checking: Promise<boolean> | undefined;
  /** Pings in a row that timed out while the engine counted as up. */
  #slow = 0;
  /** The last check failed because the engine did not answer in time (not a refused connection). */
  #timedOut = false;

  get timedOut(): boolean {
    return this.#timedOut;
  }

  /** Pings the engine and, when it (again) answers, reads what it reports; concurrent callers share one check. */
  check(): Promise<boolean> {
    this.#checking ??= this.#check().finally(() => (this.#checking = undefined));
    return this.#checking;
  }

  /**
   * Resolves when the engine answers, checking again now if it was down (it may be back before the
   * next periodic check); throws the engine's PROVIDER_UNAVAILABLE error otherwise.
   */
  async ensureUp(): Promise<void> {
    if (this.#up) return;
    // A check already under way began before this call came, perhaps before the engine was back:
    // when it fails, this call checks again rather than take that answer as its own.
    const earlier = this.#checking;
    if (earlier && (await earlier)) return;
    if (this.#up) return;
    if (!(await this.check())) throw this.downError();
  }

  async #check(): Promise<boolean> {
    try {
      await withTimeout(this.docker.ping(), PING_TIMEOUT_MS);
      this.#slow = 0;
      this.#timedOut = false;
      if (!this.#up) {
        const info = (await withTimeout(this.docker.info(), PING_TIMEOUT_MS)) as { NCPU?: number; MemTotal?: number; Runtimes?: Record<string, unknown> };
        this.#cpus = info.NCPU ?? 0;
        this.#memoryBytes = info.MemTotal ?? 0;
        this.#runtimes = new Set(Object.keys(info.Runtimes ?? {}));
        const since = this.#downSince;
        this.#up = true;
        this.#downSince = undefined;
        this.#log.info("docker engine up", { engine: this.name, at: this.where, cpus: this.#cpus, memory_bytes: this.#memoryBytes, runtimes: [...this.#runtimes].join(","), down_for_ms: since ? Date.now() - since.getTime() : 0 });
      }
      return true;
    } catch (err) {
      this.#timedOut = (err as { code?: string }).code === "ETIMEDOUT";
      if (this.#up && this.#timedOut && ++this.#slow < SLOW_PINGS_DOWN) {
        this.#log.warn("docker engine slow to answer its ping; still counted as up", { engine: this.name, at: this.where, slow_pings: this.#slow });
        return true;
      }
      this.#slow = 0;
      this.markDown(err);
      return false;
    }
  }

  /** Marks the engine down (a ping failed, or a call found it unreachable). */
  markDown(err: unknown): void {
    const why = String((err as Error)?.message ?? err).slice(0, 200);
    if (this.#up || this.#downSince === undefined) {
      this.#log.warn("docker engine down; its workspaces' calls fail until it answers again", { engine: this.name, at: this.where, error: why });
      this.#downSince = new Date();
    }
    this.#up = false;
    this.#downWhy = why;
  }

  /** The error of a call to a workspace on this engine while it is down. */
  downError(): DomainError {
    return new DomainError(
      "PROVIDER_UNAVAILABLE",
      `The Docker engine '${this.name}' is not answering (since ${this.#downSince?.toISOString() ?? "the server started"}); calls to its workspaces fail until it is back`,
      { metadata: { engine: this.name } },
    );
  }

  /** Why it is down, for the log. */
  get downWhy(): string {
    return this.#downWhy;
  }
}

/** What placement knows of one engine. */
export interface EngineLoad {
  name: string;
  cpus: number;
  memoryBytes: number;
  reservedCpus: number;
  reservedMemoryBytes: number;
  workspaces: number;
}

/**
 * The engine a workspace asking for `want` goes to: the one whose smaller free share (of CPUs
 * and of memory, after this workspace) is largest; on a tie, the one with fewer workspaces, then
 * the earlier one. Shares may go below zero (engines are overcommitted); an engine that reports
 * no CPUs or memory counts that share as fully free.
 */
export function placeWorkspace(candidates: EngineLoad[], want: { cpus: number; memoryBytes: number }): EngineLoad | undefined {
  const share = (total: number, used: number) => (total > 0 ? 1 - used / total : 1);
  const score = (e: EngineLoad) => Math.min(share(e.cpus, e.reservedCpus + want.cpus), share(e.memoryBytes, e.reservedMemoryBytes + want.memoryBytes));
  let best: EngineLoad | undefined;
  let bestScore = Number.NEGATIVE_INFINITY;
  for (const e of candidates) {
    const s = score(e);
    if (s > bestScore + 1e-9 || (Math.abs(s - bestScore) <= 1e-9 && best !== undefined && e.workspaces < best.workspaces)) {
      best = e;
      bestScore = s;
    }
  }
  return best;
}

/** The engines behind the container providers, watched in the background. */
export class Engines {
  readonly list: Engine[];
  readonly #log: ProviderLog;
  #timer: NodeJS.Timeout | undefined;
  /** Reservations of creates in flight on this server, per engine (not yet in a container label). */
  readonly #pending = new Map<string, { cpus: number; memoryBytes: number; workspaces: number }>();

  constructor(list: Engine[], log: ProviderLog) {
    this.list = list;
    this.#log = log;
  }

  /** Checks every engine now, then every CHECK_EVERY_MS. */
  async start(): Promise<void> {
    // An engine that answers too slowly gets the tries a running one gets before it counts as absent.
    await Promise.all(
      this.list.map(async (e) => {
        for (let tries = 1; !(await e.check()) && e.timedOut && tries < SLOW_PINGS_DOWN; tries++) {
          this.#log.warn("docker engine slow to answer its ping at start; trying again", { engine: e.name, at: e.where, tries });
        }
      }),
    );
    const tick = () => {
      this.#timer = setTimeout(() => void Promise.all(this.list.map((e) => e.check())).finally(() => this.#timer && tick()), CHECK_EVERY_MS);
      this.#timer.unref();
    };
    tick();
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The engine a record names; a record made before engines had names belongs to the first. */
  of(record: WorkspaceRecord): Engine {
    const name = record.state.engine;
    const engine = name === undefined ? this.list[0] : this.list.find((e) => e.name === name);
    if (!engine) {
      throw new DomainError("PROVIDER_UNAVAILABLE", `The workspace is on the Docker engine '${String(name).slice(0, 63)}', which this server is not configured with (AGENT_WORKSPACE_DOCKER_ENGINES)`, {
        metadata: { engine: String(name).slice(0, 63) },
      });
    }
    return engine;
  }

  /** What the workspaces on `engine` reserve, counted from its containers' labels. */
  async #load(engine: Engine): Promise<EngineLoad> {
    const containers = await withTimeout(engine.docker.listContainers({ all: true, filters: { label: [`${LABELS.managed}=true`] } }), 10_000);
    let cpus = 0;
    let memory = 0;
    for (const c of containers) {
      cpus += Number(c.Labels?.[LABELS.cpus] ?? 0) || 0;
      memory += Number(c.Labels?.[LABELS.memory] ?? 0) || 0;
    }
    const pending = this.#pending.get(engine.name) ?? { cpus: 0, memoryBytes: 0, workspaces: 0 };
    return {
      name: engine.name,
      cpus: engine.cpus,
      memoryBytes: engine.memoryBytes,
      reservedCpus: cpus + pending.cpus,
      reservedMemoryBytes: memory + pending.memoryBytes,
      workspaces: containers.length + pending.workspaces,
    };
  }

  /**
   * Creates a workspace through `provider` on the engine placement picks among those that answer,
   * have `runtime` (when given) and carry every label in `opts.placement`. An engine found
   * unreachable while creating is marked down and the next best is tried.
   */
  async create(provider: string, runtime: string | undefined, opts: CreateOptions): Promise<WorkspaceRecord> {
    const wanted = opts.placement?.engineLabels ?? {};
    const matching = this.list.filter((e) => e.providers.has(provider) && Object.entries(wanted).every(([k, v]) => e.labels[k] === v));
    const labelText = Object.entries(wanted).map(([k, v]) => `${k}=${v}`).join(",");
    if (matching.length === 0) {
      throw new DomainError("PROVIDER_UNAVAILABLE", `No Docker engine of this server carries the engine labels ${labelText || "(none)"} the workspace asks for`, {
        metadata: { provider, engine_labels: labelText },
      });
    }
    // With none up, those down may be back before the next periodic check: ask them now rather than refuse.
    const fit = (e: Engine) => runtime === undefined || e.hasRuntime(runtime);
    if (!matching.some((e) => e.up && fit(e))) await Promise.all(matching.filter((e) => !e.up).map((e) => e.check()));
    const tried = new Set<string>();
    const want = { cpus: opts.limits.cpus ?? 0, memoryBytes: opts.limits.memoryBytes || 0 };
    for (;;) {
      const candidates = matching.filter((e) => e.up && !tried.has(e.name) && fit(e));
      const loads = (
        await Promise.all(
          candidates.map((e) =>
            this.#load(e).catch((err: unknown) => {
              e.markDown(err);
              return undefined;
            }),
          ),
        )
      ).filter((l): l is EngineLoad => l !== undefined);
      const chosen = placeWorkspace(loads, want);
      if (!chosen) {
        const down = matching.filter((e) => !e.up).map((e) => e.name);
        const why = runtime !== undefined && matching.every((e) => !e.up || !e.hasRuntime(runtime))
          ? `none that answers has the ${runtime} runtime${down.length ? `; down: ${down.join(", ")}` : ""}`
          : `none answers${down.length ? ` (down: ${down.join(", ")})` : ""}`;
        throw new DomainError("PROVIDER_UNAVAILABLE", `No Docker engine can take the workspace: ${why}`, { metadata: { provider, engines_down: down.join(",") } });
      }
      const engine = this.list.find((e) => e.name === chosen.name) as Engine;
      tried.add(engine.name);
      const pending = this.#pending.get(engine.name) ?? { cpus: 0, memoryBytes: 0, workspaces: 0 };
      this.#pending.set(engine.name, { cpus: pending.cpus + want.cpus, memoryBytes: pending.memoryBytes + want.memoryBytes, workspaces: pending.workspaces + 1 });
      try {
        const record = await (engine.providers.get(provider) as ContainerProvider).create(opts);
        this.#log.info("workspace placed", {
          workspace_id: opts.id,
          engine: engine.name,
          provider,
          engine_cpus: chosen.cpus,
          reserved_cpus: chosen.reservedCpus,
          engine_memory_bytes: chosen.memoryBytes,
          reserved_memory_bytes: chosen.reservedMemoryBytes,
          candidates: loads.map((l) => l.name).join(","),
        });
        return record;
      } catch (err) {
        if (!hasReason(err, "PROVIDER_UNAVAILABLE")) throw err;
        engine.markDown(err);
        this.#log.warn("engine failed while creating a workspace; placing it elsewhere", { workspace_id: opts.id, engine: engine.name });
      } finally {
        const p = this.#pending.get(engine.name);
        if (p) this.#pending.set(engine.name, { cpus: p.cpus - want.cpus, memoryBytes: p.memoryBytes - want.memoryBytes, workspaces: p.workspaces - 1 });
      }
    }
  }

  /** Runs `fn` on the engine holding `record`: refused at once while it is down; an unreachable engine is marked down. */
  async on<T>(record: WorkspaceRecord, provider: string, fn: (p: ContainerProvider) => Promise<T>): Promise<T> {
    const engine = this.of(record);
    await engine.ensureUp();
    const p = engine.providers.get(provider);
    if (!p) throw new DomainError("PROVIDER_UNAVAILABLE", `The Docker engine '${engine.name}' has no ${provider} provider on this server`, { metadata: { engine: engine.name } });
    try {
      return await fn(p);
    } catch (err) {
      const e = engineError(err, "reach the workspace's engine", engine.name);
      // Unreachable: let the health check say whether it is down (refused at once from then on).
      if (hasReason(e, "PROVIDER_UNAVAILABLE")) await engine.check();
      throw e;
    }
  }
}

/**
 * The `docker` or `gvisor` provider over every engine: creates by placement, and sends the rest
 * to the engine a record names.
 */
export function createPlacedProvider(name: string, runtime: string | undefined, engines: Engines): Provider & {
  findOrphans(known: Set<string>): Promise<Array<{ containerId: string; workspaceId: string; engine: string }>>;
  removeContainer(containerId: string, workspaceId: string, engine: string): Promise<void>;
} {
  return {
    name,
    create: (opts) => engines.create(name, runtime, opts),
    open: (record: WorkspaceRecord, options?: OpenOptions): Promise<WorkspaceHandle> => engines.on(record, name, (p) => p.open(record, options)),
    destroy: (record) => engines.on(record, name, (p) => p.destroy(record)),
    pause: (record) => engines.on(record, name, (p) => p.pause?.(record) ?? Promise.resolve()),
    resume: (record) => engines.on(record, name, (p) => p.resume?.(record) ?? Promise.resolve()),
    // A container on a remote engine is reached alike from every server with this engine list; one on
    // an engine reached by a socket is on the host of the server that made it.
    portable: (record) => engines.list.some((e) => e.remote && e.name === record.state.engine),
    async dispose() {
      engines.stop();
    },
    async findOrphans(known) {
      const found: Array<{ containerId: string; workspaceId: string; engine: string }> = [];
      for (const e of engines.list) {
        const p = e.providers.get(name);
        if (!p || !e.up) continue;
        for (const o of await p.findOrphans(known)) found.push({ ...o, engine: e.name });
      }
      return found;
    },
    async removeContainer(containerId, workspaceId, engine) {
      await engines.list.find((e) => e.name === engine)?.providers.get(name)?.removeContainer(containerId, workspaceId);
    },
  };
}

/** `promise`, or a rejection with ETIMEDOUT after `ms`. */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`no answer within ${ms} ms`), { code: "ETIMEDOUT" })), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
