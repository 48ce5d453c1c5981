/**
 * The server as a separate, real process (`agent-workspace serve`, or `npm start`), for tests
 * that stop it the hard way (SIGTERM, SIGKILL) or read its start log. Each runs in its own
 * process group so a signal can reach everything it started.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { MICROVM_TEST_ENV } from "./microvm.ts";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** A started server process. */
export interface ServerProcess {
  child: ChildProcess;
  url: string;
  /** The server process's pid, from its "listening" log line (npm start runs it under npm). */
  serverPid: number;
  stderr: () => string;
  /** Resolves once the server's stderr has closed: everything it wrote has been read. */
  stderrClosed: Promise<void>;
}

/**
 * Starts `command args` (default: `node bin/agent-workspace.js serve`) with the data directory,
 * no Docker and port 0, plus `env`; resolves once the "listening" line is logged.
 */
export async function startServerProcess(options: { dataDir: string; env?: Record<string, string>; command?: string; args?: string[]; startTimeoutMs?: number }): Promise<ServerProcess> {
  const child = spawn(options.command ?? process.execPath, options.args ?? ["--liftoff-only", "--max-semi-space-size=16", "bin/agent-workspace.js", "serve"], {
    cwd: ROOT,
    env: { ...process.env, AGENT_WORKSPACE_DATA_DIR: options.dataDir, AGENT_WORKSPACE_DOCKER: "off", ...MICROVM_TEST_ENV, PORT: "0", ...options.env },
    stdio: ["ignore", "ignore", "pipe"],
    detached: true,
  });
  let err = "";
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (err += d));
  const stderrClosed = new Promise<void>((resolve) => child.stderr?.on("close", () => resolve()));
  // A hang guard, not a timing: a server loads in 2-4 s on an idle two-core host, and in CI, with
  // other files' sandboxes and VMs running (load average 16 seen), it took over 30 s.
  const deadline = Date.now() + (options.startTimeoutMs ?? 90_000);
  for (;;) {
    const line = err.split("\n").find((l) => l.includes('"agent-workspace listening"'));
    if (line) {
      const { url, pid } = JSON.parse(line) as { url: string; pid: number };
      return { child, url, serverPid: pid, stderr: () => err, stderrClosed };
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      // A server still starting is killed with its group: left running, it would keep the test's
      // process (and the whole run) waiting on its pipe.
      try {
        process.kill(-(child.pid as number), "SIGKILL");
      } catch {
        // Gone already.
      }
      throw new Error(`server did not start:\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runs the server expecting it to refuse to start; resolves to its exit code and stderr. */
export async function refusedStart(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string; ms: number }> {
  const started = Date.now();
  const child = spawn(process.execPath, ["--liftoff-only", "--max-semi-space-size=16", "bin/agent-workspace.js", "serve", ...args], {
    cwd: ROOT,
    env: { ...process.env, AGENT_WORKSPACE_DOCKER: "off", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  // A hang guard only: under a loaded CI a server may take tens of seconds to load before it refuses.
  const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  // "close", not "exit": the process can be gone before its last lines have been read.
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  clearTimeout(timer);
  return { code, stderr, ms: Date.now() - started };
}

/** True while a process with `pid` exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits up to `ms` for every pid to be gone. */
export async function waitDead(pids: number[], ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (pids.every((p) => !alive(p))) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return pids.every((p) => !alive(p));
}
