/**
 * The `microvm` provider: one virtual machine per workspace under QEMU's `microvm` machine type
 * (no firmware, no PCI, virtio-mmio devices only: Firecracker's shape), booting Debian's cloud
 * kernel with the image scripts/build-vm-image.sh builds. In the guest the executor runs as on the
 * container providers (executor/main.ts with `--sandbox`), so every tool, the jail and the policy
 * behave the same; only the sandbox's boundary is a kernel of its own.
 *
 * Devices: the read-only root filesystem, the read-only executor disk (microvm-guest.ts), the
 * workspace disk (ext4 in a sparse file of exactly the disk limit: the seed's block-device
 * filesystem), one virtio-serial port as the executor's channel (a Unix socket on the host), the
 * settings as an fw_cfg item, and a serial console into a log file. No network device: egress by
 * allowlist rides the channel, as on gVisor.
 *
 * Acceleration: KVM where a probe VM boots under it, TCG (emulation) otherwise; probed once per
 * host, kernel and QEMU (`probeAccel`), said in the log and in every workspace's state.
 *
 * Start: a VM is restored from its shape's template (microvm-templates.ts: a VM booted once and
 * saved with its executor parked), built on first use, with a cold boot when snapshots are off or
 * the template cannot be made or restored. Either way the guest becomes this workspace's at the
 * first connection (`attach`: the time and fresh entropy go with `aw-sync`).
 *
 * QEMU runs detached, so workspaces outlive a server restart as containers do; `open` finds it
 * by its pid file (checked against /proc, so a reused pid is not taken for it) and connects to the
 * channel. A VM that is gone (killed, the host restarted) is reported by `health` and started again
 * with its disk, files kept, by the next call.
 *
 * Files of a workspace: `<data>/microvm/<id>/` with disk.img, settings, qemu.pid, channel.sock,
 * qmp.sock and console.log; `destroy` stops QEMU and removes the directory. Executor disks and
 * templates live in the cache directory (`<data>/microvm` unless configured).
 */
import { createHash, randomBytes } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { access, copyFile, link, mkdir, mkdtemp, readdir, readFile, rm, stat, truncate, writeFile } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { DomainError, errnoCode } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import { PREPARE_VERSION, TOOLS_GID } from "./executor/programs.ts";
import { EGRESS_PROXY_PORT, F, frameHeader } from "./executor/protocol.ts";
import type { ExecutorBuild } from "./executor-build.ts";
import { ExecutorFs } from "./executor-fs.ts";
import { buildExecutorDisk, type ExecutorDisk, GUEST_MOUNT, makeWorkspaceDisk, settingsItem } from "./microvm-guest.ts";
import { findTool, launch, probeAccel, qemuArgs, qmp, runningPid, stopVm, vmFiles, type VmShape } from "./microvm-qemu.ts";
import { buildLock, restore, TemplateRefused, VmTemplates } from "./microvm-templates.ts";
import { proxyUrlFor } from "./proxy-credential.ts";
import { execOver, execRequest, executorDeath, SandboxConnection } from "./sandbox-connection.ts";
import type { CreateOptions, ExecEvent, ExecSpec, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** The files scripts/build-vm-image.sh makes. */
const IMAGE_FILES = ["vmlinuz", "initrd.img", "rootfs.img", "VERSION"] as const;

export interface MicrovmOptions {
  /** The directory scripts/build-vm-image.sh wrote. */
  images: string;
  /** Where workspaces' VM directories live (`<data>/microvm`). */
  dir: string;
  /** Where executor disks and templates live (default `dir`); servers may share it. */
  cache?: string;
  /** Start VMs by restoring a template (on by default); off: every VM boots cold. */
  snapshots?: boolean;
  executor: ExecutorBuild;
  log: ProviderLog;
  /** The sandbox user commands run as. */
  user: { uid: number; gid: number };
  /** "auto" probes KVM once (cached in `dir`), then falls back to TCG. */
  accel: "auto" | "kvm" | "tcg";
  /** The VM's memory when the workspace has no memory limit. */
  defaultMemoryBytes: number;
  /** The workspace disk's size when the workspace has no disk limit. */
  defaultDiskBytes: number;
  /** How long a booting VM may take to answer on its channel. */
  bootTimeoutMs: number;
}

/** What QEMU and the kernel need beyond the workspace's memory limit (kernel, page cache, executor). */
export const GUEST_OVERHEAD_BYTES = 160 * 1024 * 1024;
/** The oldest image (scripts/build-vm-image.sh VM_VERSION) this provider can boot: 3 brought aw-setup. */
const IMAGE_VERSION = 3;

/** Whether this host can run the provider, and why not. */
export async function microvmSupport(images: string): Promise<{ ok: true; qemu: string } | { ok: false; reason: string }> {
  const qemu = await findTool("qemu-system-x86_64");
  if (!qemu) return { ok: false, reason: "qemu-system-x86_64 is not installed (Debian: qemu-system-x86)" };
  for (const f of IMAGE_FILES) {
    try {
      await access(path.join(images, f), fsConstants.R_OK);
    } catch {
      return { ok: false, reason: `${path.join(images, f)} is missing (run scripts/build-vm-image.sh)` };
    }
  }
  const version = Number(/\bvm=(\d+)/.exec(await readFile(path.join(images, "VERSION"), "utf8").catch(() => ""))?.[1] ?? 0);
  if (version < IMAGE_VERSION) return { ok: false, reason: `the image in ${images} is older than this server (vm=${version}, needs ${IMAGE_VERSION}): run scripts/build-vm-image.sh` };
  return { ok: true, qemu };
}

/** How a VM was started: restored from a template, or booted. */
type Start = { how: "restored" | "booted"; ms: number };

export function createMicrovmProvider(options: MicrovmOptions & { qemu: string }): Provider & {
  findOrphans(known: Set<string>): Promise<string[]>;
  removeOrphan(workspaceId: string): Promise<void>;
  readonly accel: Promise<string>;
  /** Makes the template for a workspace of these limits now (a warm-up), unless snapshots are off. */
  prepare(limits: WorkspaceRecord["limits"]): Promise<void>;
} {
  const { log } = options;
  const cache = options.cache ?? options.dir;
  let execDisk: Promise<ExecutorDisk> | undefined;
  const executorDisk = async () => {
    // Made again when it went away (a server of another version sharing the cache removed it).
    if (execDisk && !(await access((await execDisk.catch(() => ({ path: "" }))).path).then(() => true, () => false))) execDisk = undefined;
    execDisk ??= buildExecutorDisk(cache, options.executor).catch((err: unknown) => {
      execDisk = undefined;
      throw err;
    });
    return execDisk;
  };
  let accelProbe: Promise<"kvm" | "tcg"> | undefined;
  const accel = () => {
    accelProbe ??= options.accel !== "auto" ? Promise.resolve(options.accel) : probeAccel(options.qemu, options.images, cache, log);
    return accelProbe;
  };
  /**
   * The root filesystem prepared for command allowlists (executor/prepare-image.ts): a copy of the
   * image's, every program in a group of its own, made once per image and preparation version by a
   * VM that runs the preparation on its writable root filesystem and powers off.
   */
  let prepared: Promise<string> | undefined;
  const preparedRootfs = () => {
    prepared ??= prepareRootfs().catch((err: unknown) => {
      prepared = undefined;
      throw err;
    });
    return prepared;
  };
  const prepareRootfs = async (): Promise<string> => {
    const rootfs = path.join(options.images, "rootfs.img");
    const st = await stat(rootfs);
    const key = createHash("sha256").update(`${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${PREPARE_VERSION}`).digest("hex").slice(0, 16);
    const file = path.join(cache, `rootfs-prepared-${key}.img`);
    const made = () => access(file).then(() => true, () => false);
    if (await made()) return file;
    await mkdir(cache, { recursive: true, mode: 0o700 });
    const lock = await buildLock(`${file}.lock`, made, 20 * 60_000);
    if (lock === undefined) return file;
    const tmp = await mkdtemp(path.join(cache, ".prepare-"));
    const began = Date.now();
    try {
      const f = vmFiles(tmp);
      const copy = path.join(tmp, "rootfs.img");
      await copyFile(rootfs, copy);
      await writeFile(f.settings, settingsItem({ pids: 0, memoryBytes: 0, uid: options.user.uid, gid: options.user.gid, enforce: "", noexec: false, prepare: true }));
      await writeFile(f.disk, "");
      await truncate(f.disk, 1024 * 1024);
      const shape = { ...(await shapeOf({ cpus: 2, memoryBytes: 0, diskBytes: 0, pids: 0 })), memoryMiB: 1024, rootfs: copy };
      const vm = await launch(options.qemu, qemuArgs(`prepare-${key}`, tmp, shape, f.disk, { rootWritable: true }), tmp);
      const ended = await Promise.race([vm.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 15 * 60_000).unref())]);
      if (ended === undefined) vm.kill();
      const said = /^aw-prepare: (ok|failed) (.*)$/m.exec(await readFile(f.console, "utf8").catch(() => ""));
      if (said?.[1] !== "ok") throw new Error(`preparing the root filesystem for allowlists failed: ${said?.[2]?.slice(0, 400) ?? (ended === undefined ? "no result within 15 minutes" : `the VM ended (${ended}) without a result`)}`);
      await link(copy, file).catch((err: unknown) => {
        if (errnoCode(err) !== "EEXIST") throw err;
      });
      log.info("microvm root filesystem prepared for command allowlists", { file, ms: Date.now() - began, result: said[2]?.trim().slice(0, 200) });
      // Those of images or preparations gone by: a VM still running one keeps its open file.
      for (const name of await readdir(cache)) {
        if (/^rootfs-prepared-[0-9a-f]{16}\.img$/.test(name) && name !== path.basename(file)) await rm(path.join(cache, name), { force: true });
      }
      return file;
    } finally {
      await rm(tmp, { recursive: true, force: true });
      await lock.release();
    }
  };
  const templates = options.snapshots === false ? undefined : new VmTemplates({ root: path.join(cache, "templates"), qemu: options.qemu, log, bootTimeoutMs: options.bootTimeoutMs });
  const vmDir = (id: string) => path.join(options.dir, id);
  /** When this server started each VM: one still booting gets the boot timeout to answer. */
  const startedAt = new Map<string, number>();
  /** Workspaces whose VM this server found stopped and started again: what their status says. */
  const revived = new Map<string, string>();
  /**
   * How long a VM has to answer on its channel: the boot timeout while it may still boot, else
   * 30 s (under emulation a guest that has just seen one server go takes seconds to take the next).
   */
  const mayBeBooting = (id: string) => Date.now() - (startedAt.get(id) ?? 0) < options.bootTimeoutMs;
  const answerWithin = (id: string) => (mayBeBooting(id) ? options.bootTimeoutMs : 30_000);

  /** The VM of a workspace with these limits (on the prepared root filesystem under an allowlist). */
  const shapeOf = async (limits: WorkspaceRecord["limits"], allowlist = false): Promise<VmShape> => {
    const [disk, how] = await Promise.all([executorDisk(), accel()]);
    const memory = limits.memoryBytes > 0 ? limits.memoryBytes + GUEST_OVERHEAD_BYTES : options.defaultMemoryBytes;
    return {
      accel: how,
      cpus: Math.max(1, Math.ceil(limits.cpus || 1)),
      memoryMiB: Math.ceil(memory / (1024 * 1024)),
      kernel: path.join(options.images, "vmlinuz"),
      initrd: path.join(options.images, "initrd.img"),
      rootfs: allowlist ? await preparedRootfs() : path.join(options.images, "rootfs.img"),
      executorDisk: disk.path,
    };
  };

  /** Starts the workspace's QEMU: restored from its template where it can be, else booted. */
  const start = async (record: WorkspaceRecord): Promise<Start> => {
    const dir = vmDir(record.id);
    const channel = vmFiles(dir).channel;
    if (Buffer.byteLength(channel) > 100) throw new DomainError("PROVIDER_UNAVAILABLE", "The microvm provider's data directory path is too long for a Unix socket", { metadata: { provider: "microvm" } });
    const shape = await shapeOf(record.limits, record.state.rootfs === "prepared");
    const args = qemuArgs(record.id, dir, shape, vmFiles(dir).disk);
    const began = Date.now();
    let how: Start["how"] = "booted";
    try {
      let restored = false;
      if (templates) {
        const state = await templates.stateFor(shape).catch((err: unknown) => {
          log.error("microvm template could not be made; booting the VM instead", { workspace_id: record.id, error: String((err as Error).message ?? err).slice(0, 400) });
          return undefined;
        });
        if (state !== undefined) {
          try {
            await restore(options.qemu, args, dir, state, options.bootTimeoutMs);
            restored = true;
            how = "restored";
          } catch (err) {
            await stopVm(dir, record.id);
            // Only a refused state condemns the template; a slow load on a busy host does not.
            if (!(err instanceof TemplateRefused)) throw err;
            log.error("microvm template could not be restored; removing it and booting the VM instead", { workspace_id: record.id, error: String(err.message).slice(0, 400) });
            await templates.discard(shape);
          }
        }
      }
      if (!restored) await launch(options.qemu, args, dir);
    } catch (err) {
      log.error("workspace VM did not start", { workspace_id: record.id, why: String((err as Error).message ?? err).slice(0, 400) });
      // QEMU's words name host paths: the log has them, the caller gets what happened.
      throw new DomainError("PROVIDER_UNAVAILABLE", "The workspace's VM did not start; the server's log says why", { cause: err });
    }
    startedAt.set(record.id, Date.now());
    const ms = Date.now() - began;
    log.info("workspace VM started", { workspace_id: record.id, how, ms, accel: shape.accel, cpus: shape.cpus, memory_mib: shape.memoryMiB, executor_disk: path.basename(shape.executorDisk) });
    return { how, ms };
  };

  const stop = (id: string) => stopVm(vmDir(id), id);

  /** Connects to a running VM's channel (the guest is set up at its first connection); logs what the guest said when it could not be. */
  const connectTo = async (id: string, timeoutMs: number): Promise<SandboxConnection> => {
    try {
      return await attach(vmFiles(vmDir(id)).channel, timeoutMs, !mayBeBooting(id));
    } catch (err) {
      if (err instanceof GuestSetupError) {
        const console = (await readFile(vmFiles(vmDir(id)).console, "utf8").catch(() => "")).trim().split("\n").slice(-3).join(" | ");
        log.error("workspace VM could not be set up", { workspace_id: id, console: console.slice(0, 400) });
        throw new DomainError("PROVIDER_UNAVAILABLE", "The workspace's VM could not be set up; the server's log says why", { cause: err });
      }
      throw err;
    }
  };

  const provider: Provider = {
    name: "microvm",

    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      if (opts.network === "egress") {
        throw new DomainError("INVALID_ARGUMENT", "The microvm provider has no network device: open egress is not available (an allowlist's egress goes through the server's proxy)", {
          metadata: { field: "network.mode", provider: "microvm" },
        });
      }
      const dir = vmDir(opts.id);
      await mkdir(dir, { recursive: true, mode: 0o700 });
      // An allowlist is enforced by the guest's kernel as in a container (executor/programs.ts): the
      // prepared root filesystem, the writable filesystems noexec, the server's files for root and
      // the tools group only.
      const programs = opts.enforcement?.programs;
      const fileRules = opts.enforcement?.fileRules;
      const files = fileRules && (fileRules.deny.length > 0 || fileRules.writeProtected.length > 0) ? fileRules : undefined;
      const enforce = programs !== undefined || files !== undefined ? Buffer.from(JSON.stringify({ ...(programs ? { programs } : {}), ...(files ? { files } : {}) })).toString("base64url") : "";
      const record: WorkspaceRecord = {
        id: opts.id,
        provider: "microvm",
        createdAt: new Date(),
        labels: opts.labels,
        limits: opts.limits,
        image: opts.image === "" ? "microvm" : opts.image,
        state: { dir, ...(programs !== undefined ? { rootfs: "prepared" } : {}) },
      };
      try {
        if (programs !== undefined) {
          await preparedRootfs().catch((err: unknown) => {
            log.error("microvm root filesystem could not be prepared for a command allowlist", { workspace_id: opts.id, error: String((err as Error).message ?? err).slice(0, 500) });
            throw new DomainError("PROVIDER_UNAVAILABLE", "The VM's root filesystem could not be prepared for the agent type's command allowlist; the server's log says why", { cause: err, metadata: { provider: "microvm" } });
          });
        }
        await writeFile(vmFiles(dir).settings, settingsItem({ pids: opts.limits.pids, memoryBytes: opts.limits.memoryBytes, uid: options.user.uid, gid: options.user.gid, enforce, noexec: programs !== undefined, tools: TOOLS_GID }));
        await makeWorkspaceDisk(vmFiles(dir).disk, opts.limits.diskBytes > 0 ? opts.limits.diskBytes : options.defaultDiskBytes);
        const started = await start(record);
        record.state.accel = await accel();
        record.state.start = started.how;
      } catch (err) {
        await stop(opts.id).catch(() => undefined);
        await rm(dir, { recursive: true, force: true });
        if (err instanceof DomainError) throw err;
        log.error("workspace VM could not be made", { workspace_id: opts.id, error: String(err).slice(0, 400) });
        throw new DomainError("PROVIDER_UNAVAILABLE", "The workspace's VM could not be made; the server's log says why", { cause: err });
      }
      return record;
    },

    async open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      let connecting: Promise<SandboxConnection> | undefined;
      let conn: SandboxConnection | undefined;
      const connect = async (): Promise<SandboxConnection> => {
        if (conn?.alive) return conn;
        connecting ??= (async () => {
          try {
            if ((await runningPid(vmDir(record.id), record.id)) === undefined) {
              // Killed, crashed, or the host restarted: said in the log and in the workspace's status.
              log.error("workspace VM is not running; starting it again with its disk", { workspace_id: record.id });
              await start(record);
              revived.set(record.id, `The workspace's VM stopped unexpectedly and was started again with its disk at ${new Date().toISOString()}; files that commands wrote in its last second may be lost`);
            }
            const began = Date.now();
            const within = answerWithin(record.id);
            let c: SandboxConnection;
            let running: string;
            for (let attempt = 1; ; attempt++) {
              c = await connectTo(record.id, Math.max(RESYNC_MS, within - (Date.now() - began)));
              const attached = Date.now();
              c.onExecutorExit = (status) => log.warn("workspace VM's executor exited outside a call's end; the next call starts it again", { workspace_id: record.id, status });
              try {
                // A reattached guest may end the executor before it answers (see attach): while the
                // connection lives, the next PING wakes another.
                for (;;) {
                  try {
                    running = await c.ping(options.bootTimeoutMs);
                    break;
                  } catch (err) {
                    if (!c.alive || Date.now() - began >= within) throw err;
                    log.warn("workspace VM's executor ended before its first answer; starting another", { workspace_id: record.id, error: String((err as Error).message ?? err).slice(0, 200) });
                  }
                }
                log.info("workspace VM answered", { workspace_id: record.id, attach_ms: attached - began, ping_ms: Date.now() - attached, attempt });
                break;
              } catch (err) {
                c.close();
                if (attempt === 2 || Date.now() - began >= within) throw err;
                log.warn("workspace VM's channel failed as it was attached; attaching again", { workspace_id: record.id, attempt, error: String((err as Error).message ?? err).slice(0, 200) });
              }
            }
            if (running !== options.executor.version || c.violation !== undefined) {
              // An executor started by an older server: start the VM again with this server's disk.
              log.warn("restarting workspace VM to update its executor", { workspace_id: record.id, running, current: options.executor.version });
              c.close();
              await stop(record.id);
              await start(record);
              c = await connectTo(record.id, options.bootTimeoutMs);
              running = await c.ping(options.bootTimeoutMs);
            }
            // A server before this one (killed) may have left commands running in the guest.
            const orphans = await c.forgetEarlierCalls();
            if (orphans > 0) log.warn("commands an earlier server connection left running in the VM were ended", { workspace_id: record.id, commands: orphans });
            if (openOptions?.egress) {
              const via = await c.listen(EGRESS_PROXY_PORT, (stream) => openOptions.egress?.accept(stream), undefined);
              log.info("workspace egress path", { workspace_id: record.id, via });
            }
            conn = c;
            return c;
          } catch (err) {
            if (err instanceof DomainError) throw err;
            // The detail names host paths: the log has it, the caller gets what it can act on.
            log.error("workspace VM does not answer on its channel", { workspace_id: record.id, error: String((err as Error).message ?? err).slice(0, 300) });
            throw new DomainError("WORKSPACE_NOT_READY", "The workspace's VM does not answer on its channel; retry, or delete the workspace if it persists", { cause: err });
          } finally {
            connecting = undefined;
          }
        })();
        return connecting;
      };
      await connect();
      const proxyUrl = openOptions?.egress ? proxyUrlFor(EGRESS_PROXY_PORT, undefined) : undefined;
      const fs = new ExecutorFs(connect, WORKSPACE_ROOT, openOptions?.fileRules);
      return {
        id: record.id,
        fs,
        ripgrepPath: `${GUEST_MOUNT}/bin/rg`,
        seal: () => fs.seal(),
        dial: async (port, signal) => (await connect()).dial(port, signal),
        exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
          return (async function* () {
            const c = await connect();
            yield* execOver(c, execRequest(spec, WORKSPACE_ROOT, proxyUrl), spec, (err, started) => {
              // The guest gone with the command is not recovered here; the next call starts it again.
              if (!c.alive) throw err;
              // The guest is up and only its executor died.
              return executorDeath(err, started, log, "workspace VM's", record.id);
            });
          })();
        },
        async health() {
          if ((await runningPid(vmDir(record.id), record.id)) !== undefined) return { status: "ready", message: revived.get(record.id) ?? "" };
          return {
            status: "failed",
            message: "The workspace's VM is not running (its QEMU process exited: killed, crashed or the host restarted); the next tool call starts it again with its disk, and files that commands wrote in its last second may be lost",
          };
        },
        async close() {
          conn?.close();
        },
      };
    },

    async destroy(record: WorkspaceRecord): Promise<void> {
      startedAt.delete(record.id);
      revived.delete(record.id);
      await stop(record.id);
      await rm(vmDir(record.id), { recursive: true, force: true });
    },

    async pause(record: WorkspaceRecord): Promise<void> {
      // The VM's vCPUs stop where they are (QMP `stop`); a VM that is not running has none to stop.
      if ((await runningPid(vmDir(record.id), record.id)) === undefined) return;
      await qmp(vmFiles(vmDir(record.id)).qmp, "stop");
    },

    async resume(record: WorkspaceRecord): Promise<void> {
      if ((await runningPid(vmDir(record.id), record.id)) === undefined) return;
      await qmp(vmFiles(vmDir(record.id)).qmp, "cont");
    },

    async dispose(): Promise<void> {},
  };

  return {
    ...provider,
    get accel() {
      return accel();
    },
    async prepare(limits) {
      if (templates) await templates.stateFor(await shapeOf(limits));
    },
    /** Workspace directories under `dir` that no workspace record knows (a create interrupted by a crash, a record deleted meanwhile). */
    async findOrphans(known: Set<string>) {
      const names = await readdir(options.dir).catch(() => [] as string[]);
      return names.filter((n) => /^ws-[0-9a-f]+$/.test(n) && !known.has(n));
    },
    async removeOrphan(workspaceId: string) {
      await stop(workspaceId);
      await rm(vmDir(workspaceId), { recursive: true, force: true });
    },
  };
}

/** The guest answered `aw-error`: its setup (aw-setup) failed, and it powers off. */
class GuestSetupError extends Error {}

/** How long a reattaching server waits for the guest's answer before it asks again; each next wait is twice as long. */
export const RESYNC_MS = 3000;
/** How many times a reattached guest may end the executor it started for the connection before the executor's first answer. */
const START_EXITS = 1;
/**
 * The guest's GONE for an executor that ended on a protocol violation (status 2): before the
 * answer, the sign that the executor took this server's `aw-sync` as a frame, and that the guest
 * now waits for a line.
 */
const GONE_ON_VIOLATION = Buffer.concat([frameHeader(F.GONE, 0, 4), Buffer.from("002")]);

/**
 * Connects to a VM's channel: `aw-sync <nonce> <time> <entropy>` until the guest answers
 * `aw-ready <nonce>` (see microvm-guest.ts); what came before is dropped, what came after is the
 * executor's. The guest takes the time and the entropy at its first connection (a VM restored from
 * a template has its template's clock and random state until then).
 *
 * The guest learns that a server left from the port's host side closing, and its view of that lags
 * the data: when the next server connects at once (QEMU accepts a waiting connection the moment the
 * last one closes) and the guest is emulated on a busy host, the relay of the gone server's
 * executor can take the new server's `aw-sync` as a frame (the executor ends on it and the guest
 * waits for a line already read), or the guest reads the new `aw-sync` and only then the old
 * close, and ends the executor it just started. A reattaching server (`resync`) therefore keeps its
 * one connection (a new one would give the guest another close to see late): unanswered for 3 s,
 * then 6, 12, …, or at once when the guest reports an executor ended on a protocol violation, it
 * writes another `aw-sync`, and takes the answer to any of its nonces; an extra
 * line ends an executor before its first answer, which the connection allows (`START_EXITS`) and
 * answers by waking the next one. While a VM boots, the port is closed on the guest's side and what
 * a connection wrote waits in QEMU's socket, so a booting VM is asked once.
 */
async function attach(socketPath: string, timeoutMs: number, resync: boolean): Promise<SandboxConnection> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.createConnection(socketPath);
      s.once("connect", () => resolve(s));
      s.once("error", reject);
    }).catch((err: unknown) => err as Error);
    if (socket instanceof Error) {
      if (Date.now() > deadline) throw socket;
      await new Promise((r) => setTimeout(r, 20));
      continue;
    }
    // An older guest echoes the whole line after the nonce: the answer is its line, whatever follows the nonce.
    const nonces: string[] = [];
    const rest = await new Promise<Buffer | "failed" | undefined>((resolve) => {
      let seen = Buffer.alloc(0);
      let timer: NodeJS.Timeout;
      /** GONE_ON_VIOLATION frames answered with another `aw-sync`. */
      let asked = 0;
      const done = (v: Buffer | "failed" | undefined) => {
        clearTimeout(timer);
        socket.off("data", onData);
        socket.off("close", onClose);
        socket.pause();
        resolve(v);
      };
      const onData = (chunk: Buffer) => {
        seen = Buffer.concat([seen, chunk]);
        for (const nonce of nonces) {
          const at = seen.indexOf(`aw-ready ${nonce}`);
          const eol = at >= 0 ? seen.indexOf(0x0a, at) : -1;
          if (eol >= 0) return done(seen.subarray(eol + 1));
          if (seen.includes(`aw-error ${nonce}\n`)) return done("failed");
        }
        if (resync) {
          let swallowed = 0;
          for (let at = seen.indexOf(GONE_ON_VIOLATION); at >= 0; at = seen.indexOf(GONE_ON_VIOLATION, at + 1)) swallowed++;
          if (swallowed > asked) {
            asked = swallowed;
            clearTimeout(timer);
            ask();
          }
        }
        // Only the tail can still hold the start of an answer.
        if (seen.length > 1 << 20) seen = seen.subarray(seen.length - 256);
      };
      const onClose = () => done(undefined);
      const ask = () => {
        const nonce = randomBytes(8).toString("hex");
        nonces.push(nonce);
        socket.write(`aw-sync ${nonce} ${Date.now()} ${randomBytes(32).toString("hex")}\n`);
        const left = deadline - Date.now();
        const wait = resync ? Math.min(left, RESYNC_MS * 2 ** (nonces.length - 1)) : left;
        timer = setTimeout(() => (wait < left ? ask() : done(undefined)), Math.max(0, wait));
      };
      socket.on("data", onData);
      socket.once("close", onClose);
      ask();
    });
    if (rest === "failed") {
      socket.destroy();
      throw new GuestSetupError("the guest could not be set up");
    }
    if (rest === undefined) {
      socket.destroy();
      if (Date.now() >= deadline) throw new Error(`no answer on the VM's channel within ${timeoutMs} ms`);
      continue;
    }
    if (rest.length > 0) socket.unshift(rest);
    socket.resume();
    return new SandboxConnection(socket, socket, { sleeps: true, reattached: true, startExits: resync ? START_EXITS : 0 });
  }
}
