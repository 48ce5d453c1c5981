/**
 * A container workspace's way out to the egress proxy that bypasses the executor's channel
 * (issue 29): a Unix socket the server listens on in a directory of its own, bind-mounted into
 * that one sandbox. The executor's loopback listener joins each proxy client to a connection on
 * it, so a download's bytes cross two sockets in the kernel instead of being framed, credited and
 * multiplexed over the attach stream with every other call.
 *
 * Only one sandbox has the socket: its directory is mounted into that container alone, and on
 * the host it sits under a directory others may pass through but not read (0711), under a random
 * name. That name is no secret on the host, though (/proc/net/unix lists every bound socket's path
 * to every user), and the socket must be open to all (the sandbox's root has no capability to pass
 * the permission checks of a server running as another user). So, as a local workspace's loopback
 * port does, the socket serves only requests that carry the workspace handle's credential, which
 * its commands alone get in their proxy URL; a host user without it gets 407 and reaches nothing.
 * Either way the proxy checks every destination against the workspace's allowlist.
 *
 * Used only with an engine on this host (a Unix socket; a remote engine cannot mount the
 * server's directories), and only where the path fits a socket address.
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, rm, unlink } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import path from "node:path";

/** Where the directory appears inside the sandbox. */
export const SANDBOX_EGRESS_DIR = "/opt/agent-workspace/egress";
const SOCKET_NAME = "proxy.sock";
/** The socket's path in the sandbox. */
export const SANDBOX_EGRESS_SOCKET = `${SANDBOX_EGRESS_DIR}/${SOCKET_NAME}`;
/** The longest path a Unix socket address holds (sun_path less its terminating NUL). */
const MAX_SOCKET_PATH = 107;

export class EgressSockets {
  readonly #root: string;
  /**
   * Whether new workspaces get a socket and open ones are offered theirs; when not, only what
   * workspaces made earlier left behind is removed (AGENT_WORKSPACE_EGRESS_PATH=channel).
   */
  readonly offered: boolean;

  /** `root`: the directory that holds one directory per workspace (created 0711 on first use). */
  constructor(root: string, offered = true) {
    this.#root = path.resolve(root);
    this.offered = offered;
  }

  /**
   * A new directory for a workspace's socket: its name (kept in the workspace's record) and its
   * path on the host (what the container mounts). Undefined when the socket's path would be too long.
   */
  async make(): Promise<{ name: string; hostDir: string } | undefined> {
    const name = randomBytes(16).toString("hex");
    const hostDir = path.join(this.#root, name);
    if (Buffer.byteLength(path.join(hostDir, SOCKET_NAME)) > MAX_SOCKET_PATH) return undefined;
    await mkdir(this.#root, { recursive: true, mode: 0o711 });
    await chmod(this.#root, 0o711);
    await mkdir(hostDir, { mode: 0o711 });
    return { name, hostDir };
  }

  /**
   * Listens on the socket of directory `name`, handing every connection to `accept` (which must
   * ask for the credential: see the module comment); a socket left by an earlier server is replaced.
   */
  async listen(name: string, accept: (socket: Socket) => void): Promise<{ close(): void }> {
    const file = path.join(this.#dir(name), SOCKET_NAME);
    await unlink(file).catch(() => undefined);
    const server: Server = createServer({ allowHalfOpen: true }, accept);
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(file, () => resolve());
    });
    server.on("error", () => undefined);
    await chmod(file, 0o666);
    return { close: () => void server.close() };
  }

  /** Removes directory `name` and its socket. */
  async remove(name: string): Promise<void> {
    await rm(this.#dir(name), { recursive: true, force: true });
  }

  #dir(name: string): string {
    if (!/^[0-9a-f]{32}$/.test(name)) throw new Error(`not an egress socket directory: ${JSON.stringify(name)}`);
    return path.join(this.#root, name);
  }
}
