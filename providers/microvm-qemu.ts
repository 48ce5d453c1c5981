/**
 * QEMU for the `microvm` provider: the command line of a workspace's VM (one function, so a VM
 * restored from a template is made exactly as the template was), starting it detached, its QMP
 * monitor, its pid, and the choice between KVM and TCG.
 */
import { execFile, spawn } from "node:child_process";
import { constants as fsConstants, readFileSync } from "node:fs";
import { access, mkdir, open, readFile, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { ADMIN_PORT, CHANNEL_PORT, FW_CFG_NAME } from "./microvm-guest.ts";
import type { ProviderLog } from "./types.ts";

/** The files of one VM, all in its directory. */
export function vmFiles(dir: string) {
  return {
    pid: path.join(dir, "qemu.pid"),
    console: path.join(dir, "console.log"),
    errors: path.join(dir, "qemu.log"),
    channel: path.join(dir, "channel.sock"),
    /** The admin port's socket (microvm-guest.ts STAGE2): root's commands from the host. */
    admin: path.join(dir, "admin.sock"),
    qmp: path.join(dir, "qmp.sock"),
    settings: path.join(dir, "settings"),
    disk: path.join(dir, "disk.img"),
  };
}

/** What a VM is made of. Two VMs with equal `VmShape`s (and images) can restore each other's state. */
export interface VmShape {
  accel: "kvm" | "tcg";
  cpus: number;
  memoryMiB: number;
  /** The image's files (scripts/build-vm-image.sh) and the executor disk. */
  kernel: string;
  initrd: string;
  rootfs: string;
  executorDisk: string;
}

/**
 * The command line of a VM named `name` with its files in `dir` (vmFiles), and the workspace disk
 * `disk`. `rootWritable`: the root filesystem is attached read-write (a VM that prepares a copy of it).
 */
export function qemuArgs(name: string, dir: string, shape: VmShape, disk: string, options: { rootWritable?: boolean } = {}): string[] {
  const f = vmFiles(dir);
  // aw.jit=0: the guest's executor runs V8's interpreter only (microvm-guest.ts STAGE2).
  const append = ["console=ttyS0", "quiet", "panic=-1", "reboot=t", ...(shape.accel === "tcg" ? [...tcgClockArgs(), "aw.jit=0"] : [])].join(" ");
  return [
    "-name", `aw-${name},process=aw-${name}`,
    "-M", "microvm,isa-serial=on",
    // TCG's translated code lives in a buffer of its own, 1 GiB by default, all of which an idle VM
    // ends up holding: 64 MiB keeps a workspace's footprint small at little cost in speed.
    "-accel", shape.accel === "tcg" ? "tcg,tb-size=64" : "kvm",
    // Under TCG the default CPU's local APIC timer stops in idle states (no ARAT), and with no HPET
    // on this machine type to wake it the kernel keeps a periodic tick: 250 wakeups a second per
    // vCPU, a few percent of a host core per idle VM. With ARAT it goes tickless when idle.
    "-cpu", shape.accel === "kvm" ? "host" : "qemu64,+arat",
    "-m", `${shape.memoryMiB}M`,
    "-smp", String(shape.cpus),
    "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
    "-pidfile", f.pid,
    "-serial", `file:${f.console}`,
    "-kernel", shape.kernel,
    "-initrd", shape.initrd,
    "-append", append,
    "-drive", `id=root,file=${shape.rootfs},format=raw,if=none,${options.rootWritable ? "cache=unsafe" : "readonly=on"}`,
    "-device", "virtio-blk-device,drive=root,serial=aw-root",
    "-drive", `id=exec,file=${shape.executorDisk},format=raw,if=none,readonly=on`,
    "-device", "virtio-blk-device,drive=exec,serial=aw-exec",
    // cache=unsafe: the guest's flushes (the executor's fsyncs) end in the host's page cache, which
    // outlives QEMU, without an fdatasync of the image per flush (a host crash is not covered,
    // as it is not for a container's files).
    "-drive", `id=disk,file=${disk},format=raw,if=none,discard=unmap,cache=unsafe`,
    "-device", "virtio-blk-device,drive=disk,serial=aw-disk",
    // Pages the guest frees go back to the host (free page reporting): its kernel zeroes every page
    // it allocates, so without this an idle VM keeps every page it ever touched.
    "-device", "virtio-balloon-device,free-page-reporting=on",
    "-device", "virtio-serial-device,max_ports=3",
    "-chardev", `socket,id=channel,path=${f.channel},server=on,wait=off`,
    "-device", `virtserialport,chardev=channel,name=${CHANNEL_PORT}`,
    "-chardev", `socket,id=admin,path=${f.admin},server=on,wait=off`,
    "-device", `virtserialport,chardev=admin,name=${ADMIN_PORT}`,
    "-fw_cfg", `name=${FW_CFG_NAME},file=${f.settings}`,
    "-qmp", `unix:${f.qmp},server=on,wait=off`,
    // QEMU itself: no new processes, privileges or obsolete system calls (seccomp).
    "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
  ];
}

/** A started QEMU: its pid, and its exit (the reason) while this process watches it. */
export interface Launched {
  pid: number;
  exited: Promise<string>;
  running(): boolean;
  kill(): void;
}

/** QEMU did not get as far as answering on its monitor; `exited` when it ended (rather than hung). */
export class QemuDidNotStart extends Error {
  readonly exited: boolean;
  constructor(message: string, exited: boolean) {
    super(message);
    this.exited = exited;
  }
}

/**
 * Starts QEMU detached (in a session of its own, so it outlives this process) with `args`, its
 * stderr into `errorsFile`, and `fd` as its descriptor 3 when given; resolves once its monitor
 * answers (its devices are made by then). Not -daemonize: it forks after the seccomp filter that
 * denies forks.
 */
export async function launch(qemu: string, args: string[], dir: string, fd?: number): Promise<Launched> {
  const f = vmFiles(dir);
  await Promise.all([rm(f.channel, { force: true }), rm(f.admin, { force: true }), rm(f.qmp, { force: true }), rm(f.pid, { force: true })]);
  const errors = await open(f.errors, "w");
  try {
    const stdio: Array<"ignore" | number> = ["ignore", "ignore", errors.fd, ...(fd !== undefined ? [fd] : [])];
    const child = spawn(qemu, args, { detached: true, stdio, env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", LANG: "C" } });
    const exited = new Promise<string>((resolve) => {
      child.once("exit", (code, signal) => resolve(signal ?? `exit status ${code}`));
      child.once("error", (err) => resolve(err.message));
    });
    child.unref();
    const running = () => child.exitCode === null && child.signalCode === null && child.pid !== undefined;
    const up = (async () => {
      for (;;) {
        if (await qmp(f.qmp, "query-status").then(() => true, () => false)) return undefined;
        if (!running()) return "exited";
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const failed = await Promise.race([up, exited, new Promise<string>((r) => setTimeout(() => r("no monitor within 30 s"), 30_000).unref())]);
    if (failed !== undefined) {
      if (running()) child.kill("SIGKILL");
      const why = (await readFile(f.errors, "utf8").catch(() => "")).trim().slice(0, 400);
      throw new QemuDidNotStart(`QEMU did not start: ${why || failed}`, !running());
    }
    return { pid: child.pid as number, exited, running, kill: () => void (running() && child.kill("SIGKILL")) };
  } finally {
    await errors.close();
  }
}

/** The pid of the VM named `name` whose pid file is in `dir` while it runs (checked against its command line), else undefined. */
export async function runningPid(dir: string, name: string): Promise<number | undefined> {
  const pid = Number((await readFile(vmFiles(dir).pid, "utf8").catch(() => "")).trim());
  if (!(pid > 0)) return undefined;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
  return cmdline.includes(`aw-${name},process=`) ? pid : undefined;
}

/** Kills the VM named `name` (SIGKILL) and waits until it is gone. */
export async function stopVm(dir: string, name: string): Promise<void> {
  const pid = await runningPid(dir, name);
  if (pid === undefined) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    return;
  }
  for (let i = 0; i < 200 && (await runningPid(dir, name)) !== undefined; i++) await new Promise((r) => setTimeout(r, 25));
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
/** The host's /proc/cpuinfo, read once ("" where it cannot be read). */
export function readCpuinfo(): string {
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
export async function probeAccel(qemu: string, images: string, dir: string, log: ProviderLog): Promise<"kvm" | "tcg"> {
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

/** A system tool's path (root's directories only, never the caller's PATH), or undefined. */
export async function findTool(name: string): Promise<string | undefined> {
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
