/**
 * Templates for `microvm` workspaces: a VM booted once per shape (vCPUs, memory, acceleration, the
 * image's files and the executor disk) until its executor is parked (microvm-guest.ts), then saved
 * with QEMU's migration to a state file. A workspace's VM starts by restoring that state in a new
 * QEMU with its own workspace disk, channel and settings attached, the technique Firecracker-based
 * services use to start sandboxes in a fraction of a second. Only the guest's half that every
 * workspace shares is in the template: the clock, the random generator's seed, the settings, the
 * disk and the limits are the new VM's own (aw-setup, at the first connection).
 *
 * A template is a directory `<root>/<key>/` (the key is a hash of the shape, the identity of every
 * file the VM opens read-only and the QEMU binary, so a rebuilt image or executor disk never
 * restores an old template) holding `state` and `meta.json`. It is built into a directory of its own
 * and renamed into place; one server builds a given template at a time (a lock file naming the
 * builder's pid), and servers sharing the root (AGENT_WORKSPACE_MICROVM_CACHE) share templates.
 */
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, stat, truncate, utimes, writeFile } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { errnoCode } from "../core/errors.ts";
import { PARKED_MARKER } from "./executor/protocol.ts";
import { settingsItem } from "./microvm-guest.ts";
import { launch, QemuDidNotStart, qemuArgs, qmp, readCpuinfo, vmFiles, type VmShape } from "./microvm-qemu.ts";
import type { ProviderLog } from "./types.ts";

/** Bumped whenever what a template holds changes in a way its key cannot see (stage 2's protocol, say). */
const TEMPLATE_FORMAT = 1;

export interface TemplateOptions {
  /** Where templates live. */
  root: string;
  qemu: string;
  log: ProviderLog;
  /** How long a template's VM may take to park its executor. */
  bootTimeoutMs: number;
}

/** What a template records about itself. */
interface TemplateMeta {
  key: string;
  shape: VmShape;
  /** File identities the key was made of: a template whose files changed since is removed. */
  files: Record<string, string>;
  builtAt: string;
  bootMs: number;
  saveMs: number;
  stateBytes: number;
}

export class VmTemplates {
  readonly #o: TemplateOptions;
  readonly #building = new Map<string, Promise<string>>();

  constructor(options: TemplateOptions) {
    this.#o = options;
  }

  /** The state file of the template for `shape`, built now when there is none. */
  async stateFor(shape: VmShape): Promise<string> {
    const { key, files } = await this.#key(shape);
    const state = path.join(this.#o.root, key, "state");
    if (await exists(state)) {
      // Used: the pruning below keeps what is used.
      await utimes(path.join(this.#o.root, key), new Date(), new Date()).catch(() => undefined);
      return state;
    }
    let building = this.#building.get(key);
    if (!building) {
      building = this.#build(key, shape, files).finally(() => this.#building.delete(key));
      this.#building.set(key, building);
    }
    return building;
  }

  /** Removes the template for `shape` (its state failed to restore). */
  async discard(shape: VmShape): Promise<void> {
    const { key } = await this.#key(shape);
    await rm(path.join(this.#o.root, key), { recursive: true, force: true });
  }

  /** The template's key, and the identities of the files it was made of. */
  async #key(shape: VmShape): Promise<{ key: string; files: Record<string, string> }> {
    const files: Record<string, string> = {};
    for (const f of [shape.kernel, shape.initrd, shape.rootfs, shape.executorDisk, this.#o.qemu]) files[f] = await identity(f);
    // Under KVM the guest sees the host's CPU (-cpu host): a template is for one CPU model.
    const cpu = shape.accel === "kvm" ? hostCpu() : "";
    const key = createHash("sha256")
      .update(JSON.stringify({ format: TEMPLATE_FORMAT, shape, files, cpu, args: qemuArgs("template", "/", shape, "/disk") }))
      .digest("hex")
      .slice(0, 24);
    return { key, files };
  }

  async #build(key: string, shape: VmShape, files: Record<string, string>): Promise<string> {
    const { root, log } = this.#o;
    await mkdir(root, { recursive: true, mode: 0o700 });
    const final = path.join(root, key);
    const lock = await buildLock(path.join(root, `${key}.lock`), () => exists(path.join(final, "state")), 2 * this.#o.bootTimeoutMs);
    if (lock === undefined) return path.join(final, "state");
    const tmp = path.join(root, `.build-${randomBytes(6).toString("hex")}`);
    let vm: Awaited<ReturnType<typeof launch>> | undefined;
    try {
      await mkdir(tmp, { mode: 0o700 });
      const f = vmFiles(tmp);
      const sock = path.join(tmp, "migrate.sock");
      if (Buffer.byteLength(sock) > 100) throw new Error(`the template directory's path is too long for a Unix socket (${sock})`);
      // Placeholders: the template's guest reads neither (its disk is let go of before it parks).
      await writeFile(f.settings, settingsItem({ pids: 0, memoryBytes: 0, uid: 1000, gid: 1000, enforce: "", noexec: false }));
      await writeFile(f.disk, "");
      await truncate(f.disk, 1024 * 1024);
      const began = Date.now();
      vm = await launch(this.#o.qemu, qemuArgs(`tpl-${key.slice(0, 12)}`, tmp, shape, f.disk), tmp);
      await waitForMarker(f.console, vm, this.#o.bootTimeoutMs);
      const bootMs = Date.now() - began;

      // Saved while stopped: a consistent image, restored paused (the restorer continues it).
      const saved = Date.now();
      const received = receiveInto(sock, path.join(tmp, "state"));
      await qmp(f.qmp, "stop");
      // Migration's default bandwidth limit (32 MiB/s) is for networks; this goes to a local file.
      await qmp(f.qmp, "migrate-set-parameters", { "max-bandwidth": 64 * 1024 ** 3 });
      await qmp(f.qmp, "migrate", { uri: `unix:${sock}` });
      for (;;) {
        const st = (await qmp(f.qmp, "query-migrate")) as { status?: string; "error-desc"?: string };
        if (st.status === "completed") break;
        if (st.status === "failed" || st.status === "cancelled") throw new Error(`saving the template failed: ${st["error-desc"] ?? st.status}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      const stateBytes = await received;
      vm.kill();
      await vm.exited;
      vm = undefined;
      const meta: TemplateMeta = { key, shape, files, builtAt: new Date().toISOString(), bootMs, saveMs: Date.now() - saved, stateBytes };
      await writeFile(path.join(tmp, "meta.json"), JSON.stringify(meta, null, 2));
      for (const extra of [f.disk, f.settings, f.qmp, f.channel, f.admin, f.pid, sock]) await rm(extra, { force: true });
      await rename(tmp, final).catch(async (err) => {
        // Made meanwhile by a server that took an abandoned lock: keep that one.
        if (!(await exists(path.join(final, "state")))) throw err;
      });
      log.info("microvm template saved", { template: key, cpus: shape.cpus, memory_mib: shape.memoryMiB, accel: shape.accel, boot_ms: bootMs, save_ms: meta.saveMs, state_mib: Math.round(stateBytes / 1048576) });
      await this.#prune(key);
      return path.join(final, "state");
    } finally {
      vm?.kill();
      await rm(tmp, { recursive: true, force: true });
      await lock.release();
    }
  }

  /** Removes templates whose files changed since they were built (they can never be restored again). */
  async #prune(keep: string): Promise<void> {
    for (const name of await readdir(this.#o.root).catch(() => [] as string[])) {
      if (name === keep || !/^[0-9a-f]{24}$/.test(name)) continue;
      const meta = JSON.parse(await readFile(path.join(this.#o.root, name, "meta.json"), "utf8").catch(() => "{}")) as Partial<TemplateMeta>;
      let stale = meta.files === undefined;
      for (const [file, id] of Object.entries(meta.files ?? {})) if ((await identity(file)) !== id) stale = true;
      if (stale) {
        await rm(path.join(this.#o.root, name), { recursive: true, force: true });
        this.#o.log.info("microvm template removed: the files it was made of changed", { template: name });
      }
    }
  }
}

/** The host CPU's model and flags, as /proc/cpuinfo gives them for its first CPU. */
function hostCpu(): string {
  const first = readCpuinfo().split("\n\n")[0] ?? "";
  return first.split("\n").filter((l) => /^(vendor_id|cpu family|model|model name|stepping|flags)\s*:/.test(l)).join("\n");
}

/**
 * One builder at a time across servers sharing a cache: takes the lock file `lock` (holding the
 * builder's pid), or, while another live process holds it, waits until `done()` (the other built
 * it: resolves undefined) or the lock is abandoned (its process gone, or `timeoutMs` passed).
 */
export async function buildLock(lock: string, done: () => Promise<boolean>, timeoutMs: number): Promise<{ release(): Promise<void> } | undefined> {
  for (const deadline = Date.now() + timeoutMs; ; ) {
    try {
      await writeFile(lock, String(process.pid), { flag: "wx" });
      break;
    } catch (err) {
      if (errnoCode(err) !== "EEXIST") throw err;
    }
    if (await done()) return undefined;
    const owner = Number((await readFile(lock, "utf8").catch(() => "")).trim());
    if (!(owner > 0) || !alive(owner) || Date.now() > deadline) await rm(lock, { force: true });
    else await new Promise((r) => setTimeout(r, 200));
  }
  if (await done()) {
    await rm(lock, { force: true });
    return undefined;
  }
  return { release: () => rm(lock, { force: true }) };
}

/** A file's identity: device, inode, size and modification time ("missing" when it is gone). */
async function identity(file: string): Promise<string> {
  const st = await stat(file).catch(() => undefined);
  return st ? `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}` : "missing";
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(() => true, () => false);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errnoCode(err) === "EPERM";
  }
}

/** Waits until the VM's console shows the parked executor's line; fails when QEMU exits or time runs out. */
async function waitForMarker(consoleFile: string, vm: { running(): boolean }, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = await readFile(consoleFile, "utf8").catch(() => "");
    if (text.includes(PARKED_MARKER)) return;
    if (!vm.running()) throw new Error(`the template VM stopped before its executor was ready: ${tail(text)}`);
    if (Date.now() > deadline) throw new Error(`the template VM's executor was not ready within ${timeoutMs} ms: ${tail(text)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const tail = (text: string) => text.trim().split("\n").slice(-3).join(" | ").slice(0, 300);

/** Accepts one connection on a new Unix socket at `sock` and writes what it sends to `file`; resolves with the byte count. */
function receiveInto(sock: string, file: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((conn) => {
      server.close();
      const out = createWriteStream(file, { mode: 0o600 });
      let bytes = 0;
      conn.on("data", (b: Buffer) => {
        bytes += b.length;
      });
      conn.pipe(out);
      out.on("finish", () => resolve(bytes));
      out.on("error", reject);
      conn.on("error", reject);
    });
    server.on("error", reject);
    server.listen(sock);
  });
}

/** QEMU refused a template's state (it failed to load, or QEMU ended while loading it): the template is no good. */
export class TemplateRefused extends Error {}

/**
 * Restores a template: a QEMU started with `args` reads `state` as its incoming migration (fd 3)
 * and runs once it is loaded. Throws TemplateRefused when QEMU refuses the state, and a plain
 * Error when it has not loaded it within `timeoutMs` (a loaded host: QEMU's monitor does not
 * answer while the state loads, so one slow answer is waited out, not taken for a refusal).
 */
export async function restore(qemu: string, args: string[], dir: string, state: string, timeoutMs: number): Promise<Awaited<ReturnType<typeof launch>>> {
  const fh = await open(state, "r");
  let vm: Awaited<ReturnType<typeof launch>>;
  try {
    vm = await launch(qemu, [...args, "-incoming", "fd:3"], dir, fh.fd);
  } catch (err) {
    // QEMU ends at once on a state it cannot load (before its monitor answers).
    throw err instanceof QemuDidNotStart && err.exited ? new TemplateRefused(err.message) : err;
  } finally {
    await fh.close();
  }
  const f = vmFiles(dir);
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const st = (await qmp(f.qmp, "query-migrate").catch((err: unknown) => {
        if (!vm.running()) return { status: "failed", "error-desc": "QEMU ended while loading the state" };
        if (Date.now() > deadline) throw new Error(`the template's state was not loaded within ${timeoutMs} ms: ${(err as Error).message}`);
        return {};
      })) as { status?: string; "error-desc"?: string };
      if (st.status === "completed") break;
      if (st.status === "failed" || st.status === "cancelled") throw new TemplateRefused(`the template's state was refused: ${st["error-desc"] ?? st.status}`);
      if (Date.now() > deadline) throw new Error(`the template's state was not loaded within ${timeoutMs} ms (${st.status ?? "no status"})`);
      await new Promise((r) => setTimeout(r, 5));
    }
    await qmp(f.qmp, "cont", undefined, Math.max(5000, deadline - Date.now()));
    return vm;
  } catch (err) {
    const why = (await readFile(f.errors, "utf8").catch(() => "")).trim().slice(0, 300);
    vm.kill();
    const message = `${(err as Error).message}${why ? `: ${why}` : ""}`;
    throw err instanceof TemplateRefused ? new TemplateRefused(message) : new Error(message);
  }
}
