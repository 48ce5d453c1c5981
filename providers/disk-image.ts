/**
 * Disk limits for container workspaces: each workspace's writable storage is an ext4 filesystem
 * in a sparse image file of exactly its `disk` limit, loop-mounted on the host and handed to the
 * container (its /workspace, /tmp and /var/tmp are directories of that one filesystem). A write
 * past the limit therefore fails inside the sandbox with ENOSPC, whatever wrote it (a command, a
 * `fallocate`, the file tools), and the host loses at most the limit, because nothing else of the
 * container is writable (its root filesystem is mounted read-only; see docker.ts).
 *
 * Why an image: the host's storage here is ext4 without project quotas, so neither Docker's
 * `--storage-opt size` nor a volume quota exists; a loop-mounted image works on any filesystem
 * that holds sparse files, costs only the blocks written, and goes away whole.
 *
 * Creation stays fast (about 30 ms): the image is sparse (`truncate`), mkfs initialises inode
 * tables and the journal lazily and discards nothing, and the mount skips the background zeroing
 * of inode tables (`noinit_itable`; the holes of a sparse file already read as zeros). The mount
 * uses `mount -o loop`, whose loop device is released by the kernel when the filesystem is
 * unmounted (autoclear), so removal leaves no loop device behind.
 *
 * Mounting needs root and loop devices; `probe` says whether this host has them. The images and
 * their mount points live in one directory of the server's data directory:
 * `<dir>/<workspace-id>.img` and `<dir>/<workspace-id>/` (the mount point).
 */
import { execFile } from "node:child_process";
import { access, chmod, chown, mkdir, open, readdir, readFile, rmdir, stat, unlink } from "node:fs/promises";
import { constants as fsConstants } from "node:fs";
import path from "node:path";
import { DomainError, errnoCode } from "../core/errors.ts";

/** Directories searched for mkfs.ext4, mount and umount (root's, never the caller's PATH). */
const SYSTEM_DIRS = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/** A mounted workspace filesystem: its directories as the host sees them. */
export interface DiskMount {
  /** The mount point. */
  dir: string;
  /** What the container sees as /workspace (owned by the sandbox user). */
  workspace: string;
  /** What the container sees as /tmp (mode 1777). */
  tmp: string;
  /** What the container sees as /var/tmp (mode 1777). */
  varTmp: string;
  /** What the container sees as /dev/shm under an enforced allowlist (mode 1777; made only then). */
  shm: string;
}

/** How a workspace's filesystem is mounted. */
export interface DiskOptions {
  /**
   * Nothing on it may be executed: the kernel refuses an `execve` of its files and an executable
   * mapping of them (a dynamic loader told to run one, a preloaded library), for the container
   * (runc) and for the host side of gVisor's file access alike. For workspaces whose agent type
   * has a command allowlist (executor/programs.ts).
   */
  noexec?: boolean;
}

/** Whether this host can give workspaces disk images, and why not. */
export type DiskSupport = { ok: true } | { ok: false; reason: string };

/** Creates, mounts and removes the disk images of one directory. */
export class DiskImages {
  readonly #dir: string;
  #support: Promise<DiskSupport> | undefined;
  #tools: { mkfs: string; mount: string; umount: string } | undefined;

  /** `dir` holds the images and their mount points (created on first use). */
  constructor(dir: string) {
    this.#dir = path.resolve(dir);
  }

  /**
   * Whether images can be made here: the server runs as root, the kernel offers loop devices
   * (/dev/loop-control) and mkfs.ext4, mount and umount are installed. Probed once.
   */
  probe(): Promise<DiskSupport> {
    this.#support ??= (async (): Promise<DiskSupport> => {
      if (process.getuid?.() !== 0) return { ok: false, reason: "the server does not run as root, which mounting a disk image needs" };
      if (!(await exists("/dev/loop-control"))) return { ok: false, reason: "the kernel offers no loop devices (/dev/loop-control is missing)" };
      const [mkfs, mount, umount] = await Promise.all(["mkfs.ext4", "mount", "umount"].map(findTool));
      if (!mkfs || !mount || !umount) return { ok: false, reason: "mkfs.ext4, mount or umount is not installed (Debian: e2fsprogs, mount)" };
      this.#tools = { mkfs, mount, umount };
      return { ok: true };
    })();
    return this.#support;
  }

  /** The image file and mount point of workspace `id`. */
  paths(id: string): { image: string; mount: DiskMount } {
    if (!/^[A-Za-z0-9_.-]+$/.test(id) || id.startsWith(".")) throw new Error(`not a workspace id: ${id}`);
    const dir = path.join(this.#dir, id);
    return { image: `${dir}.img`, mount: { dir, workspace: path.join(dir, "workspace"), tmp: path.join(dir, "tmp"), varTmp: path.join(dir, "var-tmp"), shm: path.join(dir, "shm") } };
  }

  /**
   * Makes workspace `id`'s filesystem of `bytes` and mounts it, its workspace directory owned by
   * `owner`. Only after `probe` said ok. A failure leaves nothing behind.
   */
  async create(id: string, bytes: number, owner: { uid: number; gid: number }, options: DiskOptions = {}): Promise<DiskMount> {
    const tools = await this.#ready();
    const { image, mount } = this.paths(id);
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    try {
      // Sparse: the host pays for what is written, up to `bytes`.
      const file = await open(image, "wx", 0o600);
      try {
        await file.truncate(bytes);
      } finally {
        await file.close();
      }
      // -m 0: the whole limit is usable (no blocks reserved for root); lazy inode table and journal
      // initialisation and no discard keep mkfs at a few milliseconds for any size.
      await run(tools.mkfs, ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", image]);
      await this.#mount(image, mount.dir, options);
      await mkdir(mount.workspace, { mode: 0o755 });
      await chown(mount.workspace, owner.uid, owner.gid);
      for (const tmp of options.noexec ? [mount.tmp, mount.varTmp, mount.shm] : [mount.tmp, mount.varTmp]) {
        await mkdir(tmp);
        await chmod(tmp, 0o1777);
      }
      return mount;
    } catch (err) {
      await this.remove(id).catch(() => undefined);
      throw new DomainError("WORKSPACE_NOT_READY", "The workspace's disk could not be created", { cause: err });
    }
  }

  /**
   * Mounts workspace `id`'s filesystem again if it is not mounted (the host restarted, or it was
   * unmounted by hand); a mounted one is left alone. Idempotent.
   */
  async ensure(id: string, options: DiskOptions = {}): Promise<DiskMount> {
    const { image, mount } = this.paths(id);
    if (await isMountPoint(mount.dir)) return mount;
    try {
      await access(image);
    } catch (err) {
      throw new DomainError("WORKSPACE_NOT_READY", "The workspace's disk image is missing; delete the workspace and create a new one", { cause: err });
    }
    try {
      // Still attached to a loop device (mounted elsewhere, say by Docker, but no longer here):
      // mount that device, never the image a second time (two devices on one ext4 corrupt it).
      await this.#mount((await loopDeviceOf(image)) ?? image, mount.dir, options);
    } catch (err) {
      throw new DomainError("WORKSPACE_NOT_READY", "The workspace's disk could not be mounted", { cause: err });
    }
    return mount;
  }

  /**
   * Unmounts and deletes workspace `id`'s filesystem: afterwards no mount, no loop device (the
   * kernel frees it with the last unmount) and no image file remain. A filesystem still busy is
   * detached lazily (the kernel finishes when its last user goes). Idempotent.
   */
  async remove(id: string): Promise<void> {
    const { image, mount } = this.paths(id);
    if (await isMountPoint(mount.dir)) {
      const { umount } = await this.#ready();
      try {
        await run(umount, [mount.dir]);
      } catch {
        await run(umount, ["-l", mount.dir]);
      }
    }
    await rmdir(mount.dir).catch((err: unknown) => {
      if (errnoCode(err) !== "ENOENT") throw err;
    });
    await unlink(image).catch((err: unknown) => {
      if (errnoCode(err) !== "ENOENT") throw err;
    });
  }

  /** Workspace ids that have an image or a mount point here. */
  async list(): Promise<string[]> {
    const names = await readdir(this.#dir).catch(() => [] as string[]);
    return [...new Set(names.map((n) => n.replace(/\.img$/, "")))];
  }

  async #ready(): Promise<{ mkfs: string; mount: string; umount: string }> {
    const support = await this.probe();
    if (!support.ok || !this.#tools) throw new DomainError("WORKSPACE_NOT_READY", `Disk images are not available here: ${support.ok ? "not probed" : support.reason}`);
    return this.#tools;
  }

  /** Mounts an image file (through a new loop device) or a loop device at `dir`. */
  async #mount(source: string, dir: string, options: DiskOptions): Promise<void> {
    const tools = await this.#ready();
    await mkdir(dir, { recursive: true, mode: 0o755 });
    // nodev, nosuid: nothing on a workspace's disk is a device or gains privileges. Bind mounts of
    // its directories (the container's /workspace, /tmp, …) keep these flags.
    const loop = source.startsWith("/dev/") ? "" : "loop,";
    await run(tools.mount, ["-t", "ext4", "-o", `${loop}nodev,nosuid,${options.noexec ? "noexec," : ""}noinit_itable`, source, dir]);
  }
}

/** The loop device backed by `image`, if one is attached. */
async function loopDeviceOf(image: string): Promise<string | undefined> {
  for (const dev of await readdir("/sys/block").catch(() => [] as string[])) {
    if (!dev.startsWith("loop")) continue;
    const backing = await readFile(`/sys/block/${dev}/loop/backing_file`, "utf8").catch(() => "");
    if (backing.trim() === image) return `/dev/${dev}`;
  }
  return undefined;
}

/** True when `dir` is the root of a mounted filesystem (a different device than its parent). */
async function isMountPoint(dir: string): Promise<boolean> {
  try {
    const [own, parent] = await Promise.all([stat(dir), stat(path.dirname(dir))]);
    return own.dev !== parent.dev;
  } catch {
    return false;
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await access(file);
    return true;
  } catch {
    return false;
  }
}

async function findTool(name: string): Promise<string | undefined> {
  for (const dir of SYSTEM_DIRS) {
    const file = path.join(dir, name);
    try {
      await access(file, fsConstants.X_OK);
      return file;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** Runs a system tool with an empty environment; rejects with its stderr when it fails. */
function run(file: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { env: { PATH: SYSTEM_DIRS.join(":"), LANG: "C" }, timeout: 60_000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`${path.basename(file)} ${args.join(" ")} failed: ${String(stderr).trim().slice(0, 500) || err.message}`, { cause: err }));
      else resolve();
    });
  });
}
