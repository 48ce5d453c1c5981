/**
 * What a `microvm` workspace's guest runs on top of the image scripts/build-vm-image.sh builds
 * (kernel, stage-1 initramfs, read-only root filesystem): the executor disk, and on it the
 * guest's stage-2 init.
 *
 * The executor disk is a read-only ext4 image (label aw-exec) the server makes from its own files
 * whenever their version changes: the server's Node binary, the built executor, ripgrep and
 * `init`. Stage 1 mounts it at /opt/agent-workspace, where the container providers bind-mount the
 * same files, and runs its `init` as PID 1.
 *
 * Stage 2 (`STAGE2`) reads the workspace's settings from QEMU's fw_cfg (not the kernel command
 * line: a VM restored from a snapshot keeps the command line it was saved with, while fw_cfg is
 * the new process's), mounts the workspace disk (label aw-disk) for /workspace, /tmp and /var/tmp,
 * puts itself into a cgroup with the workspace's process and memory limits (bound over
 * /sys/fs/cgroup, where the executor's wrapper reads OOM kills as in a container), and runs the
 * executor under the container providers' wrapper loop with the channel, a virtio-serial port, as
 * its stdin and stdout, without new privileges for anything below it.
 *
 * The channel is a character device whose host side comes and goes with the server: a read while
 * no server is connected returns end-of-file at once, and a write blocks until one is. So the loop
 * differs from the containers' in two ways: end-of-file means "wait for the next server", not "the
 * sandbox is over", and every new connection starts with `aw-sync <nonce>`, answered by
 * `aw-ready <nonce>` just before a fresh executor starts. The server drops whatever the guest sent
 * before that answer (a GONE, or an executor's last frames to the server that left).
 */
import { createHash, randomBytes } from "node:crypto";
import { execFile } from "node:child_process";
import { copyFile, link, mkdir, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { realpath } from "node:fs/promises";
import { rgPath } from "@vscode/ripgrep";
import { errnoCode } from "../core/errors.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild } from "./executor-build.ts";

/** Where the executor disk is mounted in the guest (as the containers' bind mounts are). */
export const GUEST_MOUNT = "/opt/agent-workspace";
/** The virtio-serial port's name: the executor's channel. */
export const CHANNEL_PORT = "aw-executor";
/** The fw_cfg item holding the workspace's settings (`name=value` lines, padded to FW_CFG_SIZE). */
export const FW_CFG_NAME = "opt/agent-workspace/config";
/**
 * Every settings item has this size: the guest's fw_cfg driver sizes its items once, at probe, so
 * a VM restored from a snapshot must see an item of the size its template saw.
 */
export const FW_CFG_SIZE = 4096;

/** The workspace's settings, as stage 2 reads them. */
export interface GuestSettings {
  /** Process limit of the workspace's cgroup (0: none). */
  pids: number;
  /** Memory limit of the workspace's cgroup, bytes (0: none beyond the VM's). */
  memoryBytes: number;
  uid: number;
  gid: number;
  /** The executor's `--enforce` argument (base64url JSON), or "". */
  enforce: string;
}

/** The settings item's bytes: `name=value` lines of digits and base64url only, padded with newlines. */
export function settingsItem(s: GuestSettings): Buffer {
  const lines = [`pids=${s.pids}`, `memory=${s.memoryBytes}`, `uid=${s.uid}`, `gid=${s.gid}`, `enforce=${s.enforce}`];
  for (const l of lines) if (!/^[a-z]+=[A-Za-z0-9_-]*$/.test(l)) throw new Error(`guest setting not encodable: ${l.slice(0, 40)}`);
  const text = `${lines.join("\n")}\n`;
  if (text.length > FW_CFG_SIZE) throw new Error("guest settings too long");
  return Buffer.from(text.padEnd(FW_CFG_SIZE, "\n"));
}

/** The stage-2 init (POSIX sh, the root filesystem's dash). */
export const STAGE2 = String.raw`#!/bin/sh
# agent-workspace microVM, stage 2 (providers/microvm-guest.ts).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
fail() { echo "aw-init: $*" >/dev/console; echo o >/proc/sysrq-trigger; sleep 10; exit 1; }
mount -t tmpfs -o nosuid,nodev,noexec,mode=0755,size=4m tmpfs /run || fail "mount /run"
cfg=/sys/firmware/qemu_fw_cfg/by_name/${FW_CFG_NAME}/raw
[ -r "$cfg" ] || fail "no settings (fw_cfg ${FW_CFG_NAME})"
pids=0 memory=0 uid=1000 gid=1000 enforce=
while IFS== read -r k v; do
  case "$v" in *[!A-Za-z0-9_-]*) fail "bad setting $k" ;; esac
  case "$k" in
    pids) pids=$v ;; memory) memory=$v ;; uid) uid=$v ;; gid) gid=$v ;; enforce) enforce=$v ;;
  esac
done <"$cfg"

# The workspace disk: /workspace, /tmp and /var/tmp are directories of its one filesystem.
disk=$(blkid -L aw-disk) || fail "no workspace disk"
# A killed VM loses what its kernel had not written: tools' writes are synced (--durable-writes),
# commands' reach the disk within about a second.
mount -t ext4 -o nosuid,nodev,noatime,commit=1 "$disk" /mnt/disk || fail "mount the workspace disk"
echo 100 >/proc/sys/vm/dirty_expire_centisecs; echo 100 >/proc/sys/vm/dirty_writeback_centisecs
mkdir -p /mnt/disk/workspace /mnt/disk/tmp /mnt/disk/var-tmp || fail "workspace disk layout"
chmod 1777 /mnt/disk/tmp /mnt/disk/var-tmp
mount --bind /mnt/disk/workspace /workspace && mount --bind /mnt/disk/tmp /tmp && mount --bind /mnt/disk/var-tmp /var/tmp || fail "bind the workspace disk"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m tmpfs /dev/shm 2>/dev/null

# The workspace's cgroup: everything from here on (the executor and its commands) is in it.
mkdir -p /run/cgroup && mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /run/cgroup || fail "mount cgroup2"
echo "+memory +pids" >/run/cgroup/cgroup.subtree_control || fail "cgroup controllers"
mkdir /run/cgroup/ws || fail "cgroup"
[ "$pids" -gt 0 ] && { echo "$pids" >/run/cgroup/ws/pids.max || fail "pids.max"; }
[ "$memory" -gt 0 ] && { echo "$memory" >/run/cgroup/ws/memory.max || fail "memory.max"; }
echo $$ >/run/cgroup/ws/cgroup.procs || fail "join the cgroup"
mount --bind /run/cgroup/ws /sys/fs/cgroup || fail "bind the cgroup"

port=
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = ${CHANNEL_PORT} ] && port=/dev/$(basename "$p")
done
[ -n "$port" ] || fail "no channel port"
# One open of the port (it allows one), for reading and writing.
exec 0<>"$port" 1>&0 2>/dev/console

set -- ${GUEST_MOUNT}/node ${EXECUTOR_NODE_FLAGS.join(" ")} ${GUEST_MOUNT}/executor/main.js --sandbox --detect-oom --uid "$uid" --gid "$gid" --idle-exit-ms 0 --durable-writes
[ -n "$enforce" ] && set -- "$@" --enforce "$enforce"
# PID 1 from here on is this loop (it reaps what commands orphan while it waits for the executor).
# The executor talks to the port through two cat processes and FIFOs only root can open: the
# reader is always blocked in read(), so a server going away is seen as end-of-file at once, and
# never a byte of the next server's is taken by an executor that is on its way out; the writer
# takes the blocking writes of a port with no server behind it off the executor's event loop.
exec 3<&0
exec setpriv --no-new-privs -- /bin/sh -c '
oom() { n=0; [ -r /sys/fs/cgroup/memory.events ] && while read -r k v; do [ "$k" = oom_kill ] && n=$v; done </sys/fs/cgroup/memory.events; echo "$n"; }
# Waits for a server: an empty line (WAKE) or a new connection (aw-sync), answered at once.
next() { while :; do if IFS= read -r l; then case "$l" in "") return ;; "aw-sync "*) printf "aw-ready %s\n" "$\{l#aw-sync }"; return ;; esac; else sleep 0.05; fi; done; }
mkfifo -m 600 /run/aw-in /run/aw-out || exit 1
# The relays run as nobody: the executor (real uid root, effective uid of the sandbox user, no
# capabilities in effect) kills every process it may signal when a command ends, and the
# sandbox user may signal none of them.
relay="setpriv --reuid=65534 --regid=65534 --clear-groups"
next
while :; do
  $relay cat </run/aw-out & w=$!
  $relay cat <&3 >/run/aw-in & r=$!
  a=$(oom); "$@" </run/aw-in >/run/aw-out 3<&-; s=$?
  kill $r 2>/dev/null; wait $w; wait $r 2>/dev/null
  [ "$(oom)" = "$a" ]; o=$?
  printf "\000\000\000\011\032\000\000\000\000%03d%d" "$s" "$o"
  next
done
' aw-executor "$@"
`.replaceAll("$\\{", "${");

/** A built executor disk. */
export interface ExecutorDisk {
  path: string;
  version: string;
}

/**
 * Makes (or reuses) the executor disk under `dir` for this server's files: named by a hash of the
 * executor's version, the Node binary, ripgrep and stage 2, so a VM booted with an older one keeps
 * it until it is restarted, and images nobody uses any more are removed.
 */
export async function buildExecutorDisk(dir: string, executor: ExecutorBuild): Promise<ExecutorDisk> {
  const node = await realpath(process.execPath);
  const rg = await realpath(rgPath);
  const [nodeStat, rgStat] = await Promise.all([stat(node), stat(rg)]);
  const version = createHash("sha256")
    .update([executor.version, node, nodeStat.size, nodeStat.mtimeMs, rg, rgStat.size, STAGE2].join("\0"))
    .digest("hex")
    .slice(0, 16);
  const file = path.join(dir, `exec-${version}.img`);
  if (await exists(file)) return { path: file, version };
  await mkdir(dir, { recursive: true });
  const staging = path.join(dir, `.exec-${randomBytes(6).toString("hex")}.tmp`);
  const tmpImage = `${staging}.img`;
  try {
    await mkdir(path.join(staging, "bin"), { recursive: true });
    // A hard link where the data directory shares the binary's filesystem, a copy otherwise.
    await link(node, path.join(staging, "node")).catch(() => copyFile(node, path.join(staging, "node")));
    await copyFile(rg, path.join(staging, "bin", "rg"));
    await mkdir(path.join(staging, "executor"));
    for (const name of await readdir(executor.dir)) await copyFile(path.join(executor.dir, name), path.join(staging, "executor", name));
    await writeFile(path.join(staging, "init"), STAGE2, { mode: 0o755 });
    const bytes = nodeStat.size + rgStat.size + 64 * 1024 * 1024;
    await run("mke2fs", ["-q", "-F", "-t", "ext4", "-O", "^has_journal", "-L", "aw-exec", "-E", "root_owner=0:0", "-d", staging, tmpImage, `${Math.ceil(bytes / 1024)}k`]);
    await rename(tmpImage, file);
  } finally {
    await rm(staging, { recursive: true, force: true });
    await rm(tmpImage, { force: true });
  }
  // Older disks: a VM still running one keeps its open file (unlinked, not gone).
  for (const name of await readdir(dir)) {
    if (/^exec-[0-9a-f]{16}\.img$/.test(name) && name !== path.basename(file)) await rm(path.join(dir, name), { force: true });
  }
  return { path: file, version };
}

/** Makes an empty workspace disk: a sparse file of `bytes` with ext4 (label aw-disk), inode tables initialised lazily. */
export async function makeWorkspaceDisk(file: string, bytes: number): Promise<void> {
  await writeFile(file, "", { flag: "wx" });
  const { truncate } = await import("node:fs/promises");
  await truncate(file, bytes);
  await run("mke2fs", ["-q", "-F", "-t", "ext4", "-m", "0", "-L", "aw-disk", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", file]);
}

async function exists(file: string): Promise<boolean> {
  try {
    await stat(file);
    return true;
  } catch (err) {
    if (errnoCode(err) === "ENOENT") return false;
    throw err;
  }
}

/** Runs a system tool (found in root's directories, never the caller's PATH). */
export function run(file: string, args: string[], timeoutMs = 120_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { env: { PATH: "/usr/sbin:/sbin:/usr/bin:/bin", LANG: "C" }, timeout: timeoutMs, maxBuffer: 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${file} failed: ${String(stderr).trim().slice(0, 500) || err.message}`));
      else resolve(String(stdout));
    });
  });
}
