/**
 * Which ports of which workspaces the proxy serves (ExposePort), and the connections open
 * through each. Held in memory, as the processes that listen are: a server restart ends both
 * (processes are then LOST), and a deleted workspace takes its exposures and their connections
 * with it.
 */
import { DomainError } from "../../core/errors.ts";

/** How many ports one workspace may expose at once. */
export const MAX_EXPOSED_PORTS = 32;
/**
 * Connections open through the proxy per workspace: each is a tunnel of the executor's channel,
 * which holds at most 128 (egress included).
 */
export const MAX_PROXY_CONNECTIONS = 64;

/** Something open through the proxy: closed when its port is unexposed or its workspace goes. */
export interface ProxiedConnection {
  destroy(): void;
}

/** One exposed port. */
export interface Exposure {
  readonly workspaceId: string;
  readonly port: number;
  readonly exposedAt: Date;
  readonly connections: Set<ProxiedConnection>;
}

/** The path the proxy serves a port at. */
export const portPath = (workspaceId: string, port: number) => `/ports/${workspaceId}/${port}/`;

export class PortExposures {
  readonly #byWorkspace = new Map<string, Map<number, Exposure>>();

  /** Exposes `port` (again: the existing exposure is kept). */
  expose(workspaceId: string, port: number): Exposure {
    checkPort(port);
    let ports = this.#byWorkspace.get(workspaceId);
    const existing = ports?.get(port);
    if (existing) return existing;
    if ((ports?.size ?? 0) >= MAX_EXPOSED_PORTS) {
      throw new DomainError("RESOURCE_EXHAUSTED", `The workspace exposes ${MAX_EXPOSED_PORTS} ports already; unexpose one first`, {
        metadata: { workspace_id: workspaceId, limit: "exposed_ports", max: String(MAX_EXPOSED_PORTS) },
      });
    }
    if (!ports) this.#byWorkspace.set(workspaceId, (ports = new Map()));
    const exposure: Exposure = { workspaceId, port, exposedAt: new Date(), connections: new Set() };
    ports.set(port, exposure);
    return exposure;
  }

  /** Takes `port` off the proxy, closing its connections; how many were open (0 when it was not exposed). */
  unexpose(workspaceId: string, port: number): number {
    checkPort(port);
    const ports = this.#byWorkspace.get(workspaceId);
    const exposure = ports?.get(port);
    if (!ports || !exposure) return 0;
    ports.delete(port);
    if (ports.size === 0) this.#byWorkspace.delete(workspaceId);
    return closeAll(exposure);
  }

  /** The exposure the proxy serves `port` by, or PORT_NOT_EXPOSED. */
  get(workspaceId: string, port: number): Exposure {
    const exposure = this.#byWorkspace.get(workspaceId)?.get(port);
    if (!exposure) {
      throw new DomainError("PORT_NOT_EXPOSED", `Port ${port} of workspace '${workspaceId}' is not exposed: call ExposePort first`, {
        metadata: { workspace_id: workspaceId, port: String(port) },
      });
    }
    return exposure;
  }

  /** The workspace's exposures, lowest port first. */
  list(workspaceId: string): Exposure[] {
    return [...(this.#byWorkspace.get(workspaceId)?.values() ?? [])].sort((a, b) => a.port - b.port);
  }

  /**
   * Counts `conn` as open through `exposure` until the returned function is called; refuses one
   * past the workspace's limit, or for an exposure taken away meanwhile.
   */
  track(exposure: Exposure, conn: ProxiedConnection): () => void {
    if (this.#byWorkspace.get(exposure.workspaceId)?.get(exposure.port) !== exposure) {
      conn.destroy();
      throw new DomainError("PORT_NOT_EXPOSED", `Port ${exposure.port} of workspace '${exposure.workspaceId}' is no longer exposed`, {
        metadata: { workspace_id: exposure.workspaceId, port: String(exposure.port) },
      });
    }
    let open = 0;
    for (const e of this.#byWorkspace.get(exposure.workspaceId)?.values() ?? []) open += e.connections.size;
    if (open >= MAX_PROXY_CONNECTIONS) {
      conn.destroy();
      throw new DomainError("RESOURCE_EXHAUSTED", `The workspace has ${MAX_PROXY_CONNECTIONS} connections open through the port proxy; close some first`, {
        metadata: { workspace_id: exposure.workspaceId, limit: "proxy_connections", max: String(MAX_PROXY_CONNECTIONS) },
      });
    }
    exposure.connections.add(conn);
    return () => exposure.connections.delete(conn);
  }

  /** The workspace is going: its exposures end and their connections close. */
  endWorkspace(workspaceId: string): void {
    const ports = this.#byWorkspace.get(workspaceId);
    this.#byWorkspace.delete(workspaceId);
    for (const e of ports?.values() ?? []) closeAll(e);
  }

  /** The server stops: every connection closes. */
  close(): void {
    for (const id of [...this.#byWorkspace.keys()]) this.endWorkspace(id);
  }
}

function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new DomainError("INVALID_ARGUMENT", `port must be from 1 to 65535, not ${port}`, { metadata: { field: "port" } });
  }
}

function closeAll(exposure: Exposure): number {
  const n = exposure.connections.size;
  for (const c of [...exposure.connections]) c.destroy();
  exposure.connections.clear();
  return n;
}
