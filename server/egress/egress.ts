/**
 * Egress by allowlist, put together (issue 16): one EgressProxy for the server, and per workspace
 * the hook a provider hands its proxy connections to, carrying that workspace's allowlist and
 * what it has used. The server's own endpoints are filled in once it listens.
 *
 * What a workspace has used is kept here by workspace id, in memory: every hook of the workspace
 * (a handle reopened) shares it. The byte count starts again when a session takes a workspace
 * made for a warm pool (the pool's setup is not the session's), never when one joins a workspace
 * another session has; deleting the workspace forgets it.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import type { EgressHook } from "../../providers/types.ts";
import type { Logger } from "../logger.ts";
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

export class Egress {
  readonly #proxy: EgressProxy;
  readonly #server: EgressServerPolicy;
  readonly #usage = new Map<string, EgressWorkspace["usage"]>();

  constructor(settings: EgressSettings, logger: Logger, onRefused?: ConstructorParameters<typeof EgressProxy>[0]["onRefused"]) {
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
      usage: this.#usageOf(workspaceId),
    };
    return { accept: (stream, credential) => this.#proxy.accept(stream, workspace, credential) };
  }

  /** A session took workspace `workspaceId` from a warm pool: its byte count starts again. */
  sessionTook(workspaceId: string): void {
    this.#usageOf(workspaceId).bytes = 0;
  }

  /** Workspace `workspaceId` is gone. */
  forget(workspaceId: string): void {
    this.#usage.delete(workspaceId);
  }

  #usageOf(workspaceId: string): EgressWorkspace["usage"] {
    let usage = this.#usage.get(workspaceId);
    if (!usage) {
      usage = { connections: 0, bytes: 0 };
      this.#usage.set(workspaceId, usage);
    }
    return usage;
  }

  close(): void {
    this.#proxy.close();
  }
}
