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
 * QEMU runs daemonized, so workspaces outlive a server restart as containers do; `open` finds it
 * by its pid file (checked against /proc, so a reused pid is not taken for it) and connects to the
 * channel. A VM that is gone (killed, the host restarted) is reported by `health` and booted again
 * from its disk, files kept, by the next call.
 *
 * Files of a workspace: `<data>/microvm/<id>/` with disk.img, settings, qemu.pid, channel.sock,
 * qmp.sock and console.log; `destroy` stops QEMU and removes the directory.
 */
import { randomBytes } from "node:crypto";
import { execFile, spawn } from "node:child_process";
import { access, mkdir, open, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { constants as fsConstants, readFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { DomainError, hasReason } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import { EGRESS_PROXY_PORT } from "./executor/protocol.ts";
import type { ExecutorBuild } from "./executor-build.ts";
import { ExecutorFs } from "./executor-fs.ts";
import { buildExecutorDisk, CHANNEL_PORT, type ExecutorDisk, FW_CFG_NAME, GUEST_MOUNT, makeWorkspaceDisk, settingsItem } from "./microvm-guest.ts";
import { proxyUrlFor } from "./proxy-credential.ts";
import { execRequest, oomKillOf, SandboxConnection } from "./sandbox-connection.ts";
import type { CreateOptions, ExecEvent, ExecSpec, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** The files scripts/build-vm-image.sh makes. */
const IMAGE_FILES = ["vmlinuz", "initrd.img", "rootfs.img", "VERSION"] as const;

export interface MicrovmOptions {
  /** The directory scripts/build-vm-image.sh wrote. */
  images: string;
  /** Where workspaces' VM directories and executor disks live (`<data>/microvm`). */
  dir: string;
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
  return { ok: true, qemu };
}

export function createMicrovmProvider(options: MicrovmOptions & { qemu: string }): Provider & {
  findOrphans(known: Set<string>): Promise<string[]>;
  removeOrphan(workspaceId: string): Promise<void>;
  readonly accel: Promise<string>;
} {
  const { log } = options;
  let execDisk: Promise<ExecutorDisk> | undefined;
  const executorDisk = () => {
    execDisk ??= buildExecutorDisk(options.dir, options.executor).catch((err: unknown) => {
      execDisk = undefined;
      throw err;
    });
    return execDisk;
  };
  let accelProbe: Promise<"kvm" | "tcg"> | undefined;
  const accel = () => {
    accelProbe ??= options.accel !== "auto" ? Promise.resolve(options.accel) : probeAccel(options.qemu, options.images, options.dir, log);
    return accelProbe;
  };
  const vmDir = (id: string) => path.join(options.dir, id);
  /** When this server booted each VM: one still booting gets the boot timeout to answer. */
  const bootedAt = new Map<string, number>();
  /** Workspaces whose VM this server found stopped and booted again: what their status says. */
  const revived = new Map<string, string>();
  const answerWithin = (id: string) => (Date.now() - (bootedAt.get(id) ?? 0) < options.bootTimeoutMs ? options.bootTimeoutMs : 15_000);

  /** Starts the workspace's QEMU (daemonized); resolves once it runs. */
  const boot = async (record: WorkspaceRecord): Promise<void> => {
    const dir = vmDir(record.id);
    const [disk, how] = await Promise.all([executorDisk(), accel()]);
    const cpus = Math.max(1, Math.ceil(record.limits.cpus || 1));
    const memory = record.limits.memoryBytes > 0 ? record.limits.memoryBytes + GUEST_OVERHEAD_BYTES : options.defaultMemoryBytes;
    const channel = path.join(dir, "channel.sock");
    if (Buffer.byteLength(channel) > 100) throw new DomainError("PROVIDER_UNAVAILABLE", `The microvm provider's data directory path is too long for a Unix socket (${channel})`);
    await rm(channel, { force: true });
    await rm(path.join(dir, "qmp.sock"), { force: true });
    await rm(path.join(dir, "qemu.pid"), { force: true });
    const append = ["console=ttyS0", "quiet", "panic=-1", "reboot=t", ...(how === "tcg" ? tcgClockArgs() : [])].join(" ");
    const args = [
      "-name", `aw-${record.id},process=aw-${record.id}`,
      "-M", "microvm,isa-serial=on",
      // TCG's translated code lives in a buffer of its own, 1 GiB by default, all of which an idle VM
      // ends up holding: 64 MiB keeps a workspace's footprint small at little cost in speed.
      "-accel", how === "tcg" ? "tcg,tb-size=64" : "kvm",
      ...(how === "kvm" ? ["-cpu", "host"] : []),
      "-m", `${Math.ceil(memory / (1024 * 1024))}M`,
      "-smp", String(cpus),
      "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
      "-pidfile", path.join(dir, "qemu.pid"),
      "-serial", `file:${path.join(dir, "console.log")}`,
      "-kernel", path.join(options.images, "vmlinuz"),
      "-initrd", path.join(options.images, "initrd.img"),
      "-append", append,
      "-drive", `id=root,file=${path.join(options.images, "rootfs.img")},format=raw,if=none,readonly=on`,
      "-device", "virtio-blk-device,drive=root",
      "-drive", `id=exec,file=${disk.path},format=raw,if=none,readonly=on`,
      "-device", "virtio-blk-device,drive=exec",
      // cache=unsafe: the guest's flushes (the executor's fsyncs) end in the host's page cache, which
      // outlives QEMU, without an fdatasync of the image per flush (a host crash is not covered,
      // as it is not for a container's files).
      "-drive", `id=disk,file=${path.join(dir, "disk.img")},format=raw,if=none,discard=unmap,cache=unsafe`,
      "-device", "virtio-blk-device,drive=disk",
      // Pages the guest frees go back to the host (free page reporting): its kernel zeroes every page
      // it allocates, so without this an idle VM keeps every page it ever touched.
      "-device", "virtio-balloon-device,free-page-reporting=on",
      "-device", "virtio-serial-device,max_ports=2",
      "-chardev", `socket,id=channel,path=${channel},server=on,wait=off`,
      "-device", `virtserialport,chardev=channel,name=${CHANNEL_PORT}`,
      "-fw_cfg", `name=${FW_CFG_NAME},file=${path.join(dir, "settings")}`,
      "-qmp", `unix:${path.join(dir, "qmp.sock")},server=on,wait=off`,
      // QEMU itself: no new processes, privileges or obsolete system calls (seccomp).
      "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
    ];
    // Not -daemonize: it forks after the seccomp filter that denies forks. A detached child in a
    // session of its own outlives the server all the same.
    const errors = await open(path.join(dir, "qemu.log"), "w");
    try {
      const child = spawn(options.qemu, args, { detached: true, stdio: ["ignore", "ignore", errors.fd], env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", LANG: "C" } });
      const exited = new Promise<string>((resolve) => {
        child.once("exit", (code, signal) => resolve(signal ?? `exit status ${code}`));
        child.once("error", (err) => resolve(err.message));
      });
      child.unref();
      // Up once QEMU answers on its monitor: its devices are made by then.
      const up = (async () => {
        for (;;) {
          const status = await qmp(path.join(dir, "qmp.sock"), "query-status").catch(() => undefined);
          if (status !== undefined) return undefined;
          if (child.exitCode !== null || child.signalCode !== null) return "exited";
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      const failed = await Promise.race([up, exited, new Promise<string>((r) => setTimeout(() => r("no channel socket within 30 s"), 30_000).unref())]);
      if (failed !== undefined) {
        if (child.exitCode === null) child.kill("SIGKILL");
        const why = (await readFile(path.join(dir, "qemu.log"), "utf8").catch(() => "")).trim().slice(0, 400);
        log.error("workspace VM did not start", { workspace_id: record.id, why: why || failed });
        // QEMU's words name host paths: the log has them, the caller gets what happened.
        throw new DomainError("PROVIDER_UNAVAILABLE", "The workspace's VM did not start; the server's log says why");
      }
    } finally {
      await errors.close();
    }
    bootedAt.set(record.id, Date.now());
    log.info("workspace VM started", { workspace_id: record.id, accel: how, cpus, memory_mib: Math.ceil(memory / (1024 * 1024)), executor_disk: disk.version });
  };

  /** The pid of the workspace's QEMU while it runs (checked against its command line), else undefined. */
  const runningPid = async (id: string): Promise<number | undefined> => {
    const pid = Number((await readFile(path.join(vmDir(id), "qemu.pid"), "utf8").catch(() => "")).trim());
    if (!(pid > 0)) return undefined;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    return cmdline.includes(`aw-${id},process=`) ? pid : undefined;
  };

  const stop = async (id: string): Promise<void> => {
    const pid = await runningPid(id);
    if (pid === undefined) return;
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      return;
    }
    for (let i = 0; i < 200 && (await runningPid(id)) !== undefined; i++) await new Promise((r) => setTimeout(r, 25));
  };

  const provider: Provider = {
    name: "microvm",

    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      if (opts.enforcement?.programs !== undefined) {
        throw new DomainError("ENFORCEMENT_UNAVAILABLE", "The microvm provider cannot enforce an agent type's command allowlist yet; use docker or gvisor for such agent types", {
          metadata: { provider: "microvm", why: "not implemented for microvm" },
        });
      }
      if (opts.network === "egress") {
        throw new DomainError("INVALID_ARGUMENT", "The microvm provider has no network device: open egress is not available (an allowlist's egress goes through the server's proxy)", {
          metadata: { field: "network.mode", provider: "microvm" },
        });
      }
      const dir = vmDir(opts.id);
      await mkdir(dir, { recursive: true, mode: 0o700 });
      const fileRules = opts.enforcement?.fileRules;
      const enforce = fileRules && (fileRules.deny.length > 0 || fileRules.writeProtected.length > 0) ? Buffer.from(JSON.stringify({ files: fileRules })).toString("base64url") : "";
      const record: WorkspaceRecord = {
        id: opts.id,
        provider: "microvm",
        createdAt: new Date(),
        labels: opts.labels,
        limits: opts.limits,
        image: opts.image === "" ? "microvm" : opts.image,
        state: { dir },
      };
      try {
        await writeFile(path.join(dir, "settings"), settingsItem({ pids: opts.limits.pids, memoryBytes: opts.limits.memoryBytes, uid: options.user.uid, gid: options.user.gid, enforce }));
        await makeWorkspaceDisk(path.join(dir, "disk.img"), opts.limits.diskBytes > 0 ? opts.limits.diskBytes : options.defaultDiskBytes);
        await boot(record);
        record.state.accel = await accel();
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
            if ((await runningPid(record.id)) === undefined) {
              // Killed, crashed, or the host restarted: said in the log and in the workspace's status.
              log.error("workspace VM is not running; booting it again from its disk", { workspace_id: record.id });
              await boot(record);
              revived.set(record.id, `The workspace's VM stopped unexpectedly and was booted again from its disk at ${new Date().toISOString()}; files that commands wrote in its last second may be lost`);
            }
            let c = await attach(path.join(vmDir(record.id), "channel.sock"), answerWithin(record.id));
            c.onExecutorExit = (status) => log.warn("workspace VM's executor exited outside a call's end; the next call starts it again", { workspace_id: record.id, status });
            let running = await c.ping(options.bootTimeoutMs);
            if (running !== options.executor.version || c.violation !== undefined) {
              // An executor started by an older server: boot the VM again with this server's disk.
              log.warn("restarting workspace VM to update its executor", { workspace_id: record.id, running, current: options.executor.version });
              c.close();
              await stop(record.id);
              await boot(record);
              c = await attach(path.join(vmDir(record.id), "channel.sock"), options.bootTimeoutMs);
              running = await c.ping(options.bootTimeoutMs);
            }
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
        exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
          return (async function* () {
            const c = await connect();
            const started = Date.now();
            let exited = false;
            try {
              for await (const ev of c.exec(execRequest(spec, WORKSPACE_ROOT, proxyUrl), spec.signal)) {
                if (ev.type === "exited") exited = true;
                yield ev;
              }
            } catch (err) {
              if (exited || !hasReason(err, "WORKSPACE_NOT_READY") || !c.alive) throw err;
              // The guest is up and only its executor died.
              const oom = oomKillOf(err, started);
              if (oom) {
                log.warn("workspace VM's executor OOM-killed during a command; reported as the command's OOM kill", { workspace_id: record.id });
                yield oom;
                return;
              }
              log.error("workspace VM's executor died during a command", { workspace_id: record.id, cause: String((err as Error).cause ?? err) });
              throw err;
            }
          })();
        },
        async health() {
          if ((await runningPid(record.id)) !== undefined) return { status: "ready", message: revived.get(record.id) ?? "" };
          return {
            status: "failed",
            message: "The workspace's VM is not running (its QEMU process exited: killed, crashed or the host restarted); the next tool call boots it again from its disk, and files that commands wrote in its last second may be lost",
          };
        },
        async close() {
          conn?.close();
        },
      };
    },

    async destroy(record: WorkspaceRecord): Promise<void> {
      bootedAt.delete(record.id);
      revived.delete(record.id);
      await stop(record.id);
      await rm(vmDir(record.id), { recursive: true, force: true });
    },

    async dispose(): Promise<void> {},
  };

  return {
    ...provider,
    get accel() {
      return accel();
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

/**
 * Connects to a VM's channel: `aw-sync <nonce>` until the guest answers `aw-ready <nonce>` (see
 * microvm-guest.ts); what came before is dropped, what came after is the executor's.
 */
async function attach(socketPath: string, timeoutMs: number): Promise<SandboxConnection> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.createConnection(socketPath);
      s.once("connect", () => resolve(s));
      s.once("error", reject);
    }).catch((err: unknown) => err as Error);
    if (socket instanceof Error) {
      if (Date.now() > deadline) throw socket;
      await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    const nonce = randomBytes(8).toString("hex");
    const ready = Buffer.from(`aw-ready ${nonce}\n`);
    const rest = await new Promise<Buffer | undefined>((resolve) => {
      let seen = Buffer.alloc(0);
      const timer = setTimeout(() => done(undefined), Math.max(0, deadline - Date.now()));
      const done = (v: Buffer | undefined) => {
        clearTimeout(timer);
        socket.off("data", onData);
        socket.off("close", onClose);
        socket.pause();
        resolve(v);
      };
      const onData = (chunk: Buffer) => {
        seen = Buffer.concat([seen, chunk]);
        const at = seen.indexOf(ready);
        if (at >= 0) done(seen.subarray(at + ready.length));
        // Only the tail can still hold the start of the answer.
        else if (seen.length > 1 << 20) seen = seen.subarray(seen.length - ready.length);
      };
      const onClose = () => done(undefined);
      socket.on("data", onData);
      socket.once("close", onClose);
      socket.write(`aw-sync ${nonce}\n`);
    });
    if (rest === undefined) {
      socket.destroy();
      if (Date.now() > deadline) throw new Error(`no answer on the VM's channel within ${timeoutMs} ms`);
      continue;
    }
    if (rest.length > 0) socket.unshift(rest);
    socket.resume();
    return new SandboxConnection(socket, socket, { sleeps: true });
  }
}

/**
 * One command on a VM's QMP monitor: the greeting, capabilities, then `command`; its `return`.
 */
export function qmp(socketPath: string, command: string, args?: Record<string, unknown>, timeoutMs = 5000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const s = net.createConnection(socketPath);
    let buf = "";
    let step = 0;
    const timer = setTimeout(() => finish(new Error(`QMP ${command}: no answer within ${timeoutMs} ms`)), timeoutMs);
    const finish = (err: Error | undefined, value?: unknown) => {
      clearTimeout(timer);
      s.destroy();
      if (err) reject(err);
      else resolve(value);
    };
    s.on("error", (err) => finish(err));
    s.on("close", () => finish(new Error(`QMP ${command}: the monitor closed`)));
    s.on("data", (chunk) => {
      buf += chunk.toString("utf8");
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line === "") continue;
        const msg = JSON.parse(line) as { QMP?: unknown; return?: unknown; error?: { desc?: string }; event?: string };
        if (msg.event !== undefined) continue;
        if (msg.error) return finish(new Error(`QMP ${command}: ${msg.error.desc ?? "error"}`));
        if (step === 0 && msg.QMP !== undefined) {
          step = 1;
          s.write(`${JSON.stringify({ execute: "qmp_capabilities" })}\n`);
        } else if (step === 1 && "return" in msg) {
          step = 2;
          s.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}) })}\n`);
        } else if (step === 2 && "return" in msg) {
          return finish(undefined, msg.return);
        }
      }
    });
  });
}

/** Kernel arguments for TCG: the TSC's rate given, since the kernel cannot calibrate it against an emulated PIT. */
function tcgClockArgs(): string[] {
  const mhz = /^cpu MHz\s*:\s*([0-9.]+)/m.exec(readCpuinfo())?.[1];
  return mhz ? [`tsc_early_khz=${Math.round(Number(mhz) * 1000)}`, "tsc=reliable", "no_timer_check"] : ["tsc=reliable", "no_timer_check"];
}

let cpuinfo: string | undefined;
function readCpuinfo(): string {
  if (cpuinfo === undefined) {
    try {
      cpuinfo = readFileSync("/proc/cpuinfo", "utf8");
    } catch {
      cpuinfo = "";
    }
  }
  return cpuinfo;
}

/**
 * KVM or TCG: a VM with KVM must boot the image's check (`aw.check=1`) within 20 s, else TCG is
 * used (nested virtualisation may offer /dev/kvm whose guests then hang). Cached per kernel image
 * and QEMU binary in `dir`.
 */
async function probeAccel(qemu: string, images: string, dir: string, log: ProviderLog): Promise<"kvm" | "tcg"> {
  const version = (await readFile(path.join(images, "VERSION"), "utf8").catch(() => "")).trim();
  const key = `${version} qemu=${qemu} host=${os.release()}`;
  // Beside the image (one probe per host) where the server may write there, else in its data directory.
  const caches = [path.join(images, "accel-probe.json"), path.join(dir, "accel-probe.json")];
  for (const cache of caches) {
    const cached = JSON.parse(await readFile(cache, "utf8").catch(() => "{}")) as { key?: string; accel?: "kvm" | "tcg"; why?: string };
    if (cached.key === key && cached.accel) {
      log.info("microvm acceleration (probed before)", { accel: cached.accel, why: cached.why });
      return cached.accel;
    }
  }
  let accel: "kvm" | "tcg" = "tcg";
  let why = "";
  try {
    await access("/dev/kvm", fsConstants.R_OK | fsConstants.W_OK);
    const out = await new Promise<string>((resolve) => {
      execFile(
        qemu,
        ["-M", "microvm,accel=kvm", "-cpu", "host", "-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
          "-kernel", path.join(images, "vmlinuz"), "-initrd", path.join(images, "initrd.img"), "-append", "console=ttyS0 quiet panic=-1 aw.check=1",
          "-drive", `id=root,file=${path.join(images, "rootfs.img")},format=raw,if=none,readonly=on`, "-device", "virtio-blk-device,drive=root"],
        { timeout: 20_000, killSignal: "SIGKILL", maxBuffer: 1024 * 1024 },
        (err, stdout, stderr) => resolve(`${stdout}${stderr}${err ? `\n(exit: ${err.killed ? "timed out after 20 s" : err.message})` : ""}`),
      );
    });
    if (/^aw-check: ok/m.test(out)) accel = "kvm";
    else why = `a KVM guest did not boot: ${out.trim().split("\n").slice(-2).join(" ").slice(0, 300)}`;
  } catch {
    why = "/dev/kvm is not usable";
  }
  log.info("microvm acceleration probed", { accel, why });
  for (const cache of caches) {
    const written = await mkdir(path.dirname(cache), { recursive: true })
      .then(() => writeFile(cache, JSON.stringify({ key, accel, why })))
      .then(() => true, () => false);
    if (written) break;
  }
  return accel;
}

async function findTool(name: string): Promise<string | undefined> {
  for (const d of ["/usr/bin", "/usr/local/bin", "/bin"]) {
    try {
      await access(path.join(d, name), fsConstants.X_OK);
      return path.join(d, name);
    } catch {
      // next
    }
  }
  return undefined;
}
