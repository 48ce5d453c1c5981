/**
 * Egress by allowlist, put together (issue 16): one EgressProxy for the server, and per workspace
 * the hook a provider hands its proxy connections to, carrying that workspace's allowlist and
 * what it has used. The server's own endpoints are filled in once it listens.
 *
 * What a workspace has used is kept here by workspace id: every hook of the workspace (a handle
 * reopened) shares it. The byte count is also added to the database every second
 * (EgressUsageStore), and read from it when this server first opens the workspace, so it goes on
 * across a restart and when another server sharing the database takes the workspace over (at most
 * the last second's count is lost with a server that dies). It starts again when a session takes a
 * workspace made for a warm pool (the pool's setup is not the session's), never when one joins a
 * workspace another session has; deleting the workspace forgets it.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import type { EgressHook } from "../../providers/types.ts";
import type { Logger } from "../logger.ts";
import type { EgressUsageStore } from "../store/store.ts";
import { EgressPolicy, type EgressServerPolicy, parseRule } from "./destinations.ts";
import { EgressProxy, type EgressWorkspace, type Lookup } from "./proxy.ts";

/** The operator's egress settings (AGENT_WORKSPACE_EGRESS_*). */
export interface EgressSettings {
  /** Special addresses (CIDR) destinations may resolve to anyway. */
  privateAllow: string[];
  maxConnections: number;
  idleTimeoutMs: number;
  /** Bytes one session's workspace may move through the proxy, both directions together. */
  maxBytes: number;
  /** Names the proxy resolves to fixed addresses instead of asking DNS (name → address). */
  hosts: Map<string, string>;
}

/** How often counted bytes are added to the database. */
const SYNC_MS = 1000;

/** A workspace's usage, with what of it the database has. */
interface Counted {
  usage: EgressWorkspace["usage"];
  /** The count as of the last exchange with the database (what it holds, as far as this server knows). */
  synced: number;
  /** Bumped when the count starts again: an exchange begun before that is not applied. */
  epoch: number;
}

export class Egress {
  readonly #proxy: EgressProxy;
  readonly #server: EgressServerPolicy;
  readonly #usage = new Map<string, Counted>();
  readonly #store: EgressUsageStore | undefined;
  readonly #logger: Logger;
  /** Exchanges with the database, one at a time, in order. */
  #queue: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  #failing = false;

  constructor(settings: EgressSettings, logger: Logger, onRefused?: ConstructorParameters<typeof EgressProxy>[0]["onRefused"], store?: EgressUsageStore) {
    this.#store = store;
    this.#logger = logger;
    if (store) {
      this.#timer = setInterval(() => void this.sync(), SYNC_MS);
      this.#timer.unref();
    }
    const lookup: Lookup = async (host) => {
      const fixed = settings.hosts.get(host.toLowerCase());
      if (fixed !== undefined) return [{ address: fixed, family: isIP(fixed) }];
      return dnsLookup(host, { all: true, verbatim: true });
    };
    this.#proxy = new EgressProxy({ limits: settings, logger, lookup, onRefused });
    this.#server = { privateAllow: settings.privateAllow, ownEndpoints: [] };
  }

  /**
   * The server listens on `host:port`: that endpoint is never a destination. A wildcard address
   * stands for every address of the host's interfaces.
   */
  listening(host: string, port: number): void {
    const bare = host.replace(/^\[|\]$/g, "");
    const addresses =
      bare === "0.0.0.0" || bare === "::" || bare === ""
        ? Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address))
        : isIP(bare) !== 0
          ? [bare]
          : ["127.0.0.1", "::1"];
    // The array is shared with every policy made so far: they see the endpoints too.
    this.#server.ownEndpoints.push(...addresses.map((address) => ({ address, port })));
  }

  /** The hook of workspace `workspaceId`, whose agent type allows `allow` (rules already validated). */
  hook(workspaceId: string, allow: readonly string[]): EgressHook {
    const workspace: EgressWorkspace = {
      workspaceId,
      policy: new EgressPolicy(
        allow.map((r, i) => parseRule(r, `network.allow[${i}]`)),
        this.#server,
      ),
      usage: this.#counted(workspaceId).usage,
    };
    return { accept: (stream, credential) => this.#proxy.accept(stream, workspace, credential) };
  }

  /** A session took workspace `workspaceId` from a warm pool: its byte count starts again. */
  sessionTook(workspaceId: string): void {
    const c = this.#counted(workspaceId);
    c.usage.bytes = 0;
    c.synced = 0;
    c.epoch++;
    this.#enqueue(() => this.#store!.reset(workspaceId));
  }

  /** Workspace `workspaceId` is gone. */
  forget(workspaceId: string): void {
    const c = this.#usage.get(workspaceId);
    if (c) c.epoch++;
    this.#usage.delete(workspaceId);
    this.#enqueue(() => this.#store!.delete(workspaceId));
  }

  /**
   * This server no longer serves workspace `workspaceId` (another took it over): what it counted
   * goes to the database, and its copy of the count is dropped (read again if it serves it again).
   */
  release(workspaceId: string): void {
    const c = this.#usage.get(workspaceId);
    if (!c || c.usage.connections > 0) return;
    const epoch = c.epoch;
    this.#enqueue(async () => {
      await this.#push(workspaceId, c, epoch);
      if (this.#usage.get(workspaceId) === c && c.usage.connections === 0) this.#usage.delete(workspaceId);
    });
  }

  /** Adds what was counted since the last exchange to the database (the timer calls this every second). */
  sync(): Promise<void> {
    for (const [id, c] of this.#usage) {
      const epoch = c.epoch;
      if (c.usage.bytes !== c.synced) this.#enqueue(() => this.#push(id, c, epoch));
    }
    return this.#queue;
  }

  /**
   * Adds workspace `id`'s new bytes to the database and takes in what it holds (another server's
   * count too); nothing if its count started again since `epoch` (when this was queued).
   */
  async #push(id: string, c: Counted, epoch: number): Promise<void> {
    if (c.epoch !== epoch) return;
    const sent = c.usage.bytes;
    const total = await this.#store!.add(id, sent - c.synced);
    if (c.epoch !== epoch) return;
    c.usage.bytes = total + (c.usage.bytes - sent);
    c.synced = total;
  }

  #enqueue(fn: () => Promise<void>): void {
    if (!this.#store) return;
    this.#queue = this.#queue.then(fn).then(
      () => {
        if (this.#failing) this.#logger.info("egress byte counts are written to the database again");
        this.#failing = false;
      },
      (err: unknown) => {
        if (!this.#failing) this.#logger.warn("egress byte counts cannot be written to the database; kept in memory and written once it is back", { error: (err as Error).message });
        this.#failing = true;
      },
    );
  }

  #counted(workspaceId: string): Counted {
    let c = this.#usage.get(workspaceId);
    if (!c) {
      const counted: Counted = { usage: { connections: 0, bytes: 0 }, synced: 0, epoch: 0 };
      c = counted;
      this.#usage.set(workspaceId, c);
      // What the database counted already (before a restart, or on the server this one took it from).
      this.#enqueue(() => this.#push(workspaceId, counted, 0));
    }
    return c;
  }

  /** Stops the proxy, and writes what was counted. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#proxy.close();
    await this.sync();
  }
}
