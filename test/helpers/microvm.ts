/**
 * The microvm provider's admin port, as tests use it: a command run in a workspace's guest with
 * every capability, from the host, outside the server and every policy (what `docker exec -u 0` is
 * for a container; providers/microvm-guest.ts STAGE2). The port's socket is in the VM's directory.
 */
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";

/** Where test servers keep microvm executor disks and templates, shared between them and between runs (a template costs a VM's boot). */
export const MICROVM_TEST_CACHE = process.env.AW_TEST_MICROVM_CACHE ?? path.join(tmpdir(), "aw-test-microvm-cache");

/**
 * What every test server gets for microvm: the shared cache, and a boot timeout that is a hang
 * guard only (a CI host at load 60 on 2 cores took over the default 120 s to boot a template's VM,
 * with the guest's RCU stalling for want of CPU).
 */
export const MICROVM_TEST_ENV = { AGENT_WORKSPACE_MICROVM_CACHE: MICROVM_TEST_CACHE, AGENT_WORKSPACE_MICROVM_BOOT_TIMEOUT_MS: "600000" };

/** Runs `command` (bash, at /workspace) in the guest of microvm workspace `id` of the server whose data directory is `dataDir`. */
export function vmAdmin(dataDir: string, id: string, command: string, timeoutMs = 60_000): Promise<{ status: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(path.join(dataDir, "microvm", id, "admin.sock"));
    let seen = "";
    const timer = setTimeout(() => done(new Error(`no answer on ${id}'s admin port within ${timeoutMs} ms`)), timeoutMs);
    const done = (err?: Error, value?: { status: number; stdout: string; stderr: string }) => {
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(value as { status: number; stdout: string; stderr: string });
    };
    socket.on("error", (err) => done(err));
    socket.on("connect", () => socket.write(`aw-admin ${Buffer.from(command).toString("base64")}\n`));
    socket.on("data", (chunk: Buffer) => {
      seen += chunk.toString("latin1");
      const m = /aw-admin-done (\d+) (\S*) (\S*)\n/.exec(seen);
      if (!m) return;
      const decode = (b64: string) => (b64 === "-" ? "" : Buffer.from(b64, "base64").toString("utf8"));
      done(undefined, { status: Number(m[1]), stdout: decode(m[2] as string), stderr: decode(m[3] as string) });
    });
  });
}
