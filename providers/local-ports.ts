/**
 * Whose is a port on the host's loopback? Local workspaces share the host's network, so before
 * ExposePort's proxy connects to a port for a local workspace it checks that every socket
 * listening there, where a connection to 127.0.0.1 can land, belongs to a process of that
 * workspace (its cgroup): never another workspace's server, the agent-workspace server itself or
 * some other service of the host.
 *
 * Sockets come from /proc/net/tcp and tcp6 (state 0A, LISTEN), owners from the `socket:[inode]`
 * links in /proc/<pid>/fd of the workspace's processes.
 */
import { readdir, readFile, readlink } from "node:fs/promises";

const LISTEN = "0A";
/** Local addresses a connection to 127.0.0.1 reaches: 127.0.0.1, 0.0.0.0, ::, ::ffff:127.0.0.1. */
const REACHABLE = new Set(["0100007F", "00000000", "00000000000000000000000000000000", "0000000000000000FFFF00000100007F"]);

/** The inodes of sockets listening on `port` where a connection to 127.0.0.1 may land. */
export async function listenersOn(port: number): Promise<Set<string>> {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = await readFile(table, "utf8");
    } catch {
      continue; // No IPv6 here.
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== LISTEN) continue;
      const [addr, hexPort] = f[1].split(":");
      if (Number.parseInt(hexPort, 16) !== port || !REACHABLE.has(addr)) continue;
      inodes.add(f[9]);
    }
  }
  return inodes;
}

/** The socket inodes the processes `pids` hold open. */
export async function socketsOf(pids: readonly number[]): Promise<Set<string>> {
  const held = new Set<string>();
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = await readdir(`/proc/${pid}/fd`);
    } catch {
      continue; // Exited meanwhile.
    }
    for (const fd of fds) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => "");
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m) held.add(m[1]);
    }
  }
  return held;
}

/**
 * Whether `port` is served by the processes `pids` alone: something listens there, and every
 * listener a connection to 127.0.0.1 may reach is theirs.
 */
export async function portServedBy(port: number, pids: readonly number[]): Promise<"theirs" | "none" | "other"> {
  const listeners = await listenersOn(port);
  if (listeners.size === 0) return "none";
  const held = await socketsOf(pids);
  for (const inode of listeners) if (!held.has(inode)) return "other";
  return "theirs";
}
