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
 * Stage 2 (`STAGE2`) runs in two halves. The first makes what any workspace's guest would: /run,
 * a cgroup it joins (bound over /sys/fs/cgroup, where the executor's wrapper reads OOM kills as in
 * a container), the channel (a virtio-serial port), and an executor started ahead of time with
 * its modules loaded (the executor's `--parked`), which prints PARKED_MARKER on the console. A VM saved
 * then is a template (microvm-templates.ts): every workspace of its shape starts by restoring it.
 * The second half runs when the first server connects: aw-setup (scripts/vm-setup.c, in the root
 * filesystem) sets the clock, reseeds the kernel's random generator with the host's entropy, reads
 * the workspace's settings from QEMU's fw_cfg (not the kernel command line, which a restored VM
 * keeps from its template), attaches the workspace disk (label aw-disk, serial aw-disk) for
 * /workspace, /tmp and /var/tmp, and sets the cgroup's limits; then the parked executor gets its
 * workspace's arguments and runs, without new privileges for anything below it.
 *
 * The channel is a character device whose host side comes and goes with the server: a read while
 * no server is connected returns end-of-file at once, and a write blocks until one is. So the loop
 * differs from the containers' in two ways: end-of-file means "wait for the next server", not "the
 * sandbox is over", and every new connection starts with `aw-sync <nonce> <time> <entropy>`,
 * answered by `aw-ready <nonce>` once the guest is ready. The server drops whatever the guest sent
 * before that answer (a GONE, or an executor's last frames to the server that left). The next
 * executor is parked as soon as the last one ends, so a server that reconnects does not wait for
 * Node to start.
 */
import { createHash, randomBytes } from "node:crypto";
import { execFile } from "node:child_process";
import { copyFile, link, mkdir, readdir, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { realpath } from "node:fs/promises";
import { rgPath } from "@vscode/ripgrep";
import { errnoCode } from "../core/errors.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild } from "./executor-build.ts";
import { PARKED_MARKER } from "./executor/protocol.ts";

/** Where the executor disk is mounted in the guest (as the containers' bind mounts are). */
export const GUEST_MOUNT = "/opt/agent-workspace";
/** The virtio-serial port's name: the executor's channel. */
export const CHANNEL_PORT = "aw-executor";
/** The admin port's name (see STAGE2): root's commands from the host. */
export const ADMIN_PORT = "aw-admin";
/** The uid the guest's admin loop runs as (with every capability, out of the executor's reach). */
export const ADMIN_UID = 65533;
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
  /** Every writable filesystem mounted noexec (a command allowlist: executor/programs.ts). */
  noexec: boolean;
  /** With `noexec`: the group that may enter /opt/agent-workspace (executor/programs.ts TOOLS_GID). */
  tools?: number;
  /** This VM prepares its (writable) root filesystem for allowlists, then powers off (`prepareRootfs`). */
  prepare?: boolean;
}

/** The settings item's bytes: `name=value` lines of digits and base64url only, padded with newlines. */
export function settingsItem(s: GuestSettings): Buffer {
  const lines = [`pids=${s.pids}`, `memory=${s.memoryBytes}`, `uid=${s.uid}`, `gid=${s.gid}`, `enforce=${s.enforce}`, `noexec=${s.noexec ? 1 : 0}`, `tools=${s.tools ?? 0}`, `prepare=${s.prepare ? 1 : 0}`];
  for (const l of lines) if (!/^[a-z]+=[A-Za-z0-9_-]*$/.test(l)) throw new Error(`guest setting not encodable: ${l.slice(0, 40)}`);
  const text = `${lines.join("\n")}\n`;
  if (text.length > FW_CFG_SIZE) throw new Error("guest settings too long");
  return Buffer.from(text.padEnd(FW_CFG_SIZE, "\n"));
}

/** Where scripts/build-vm-image.sh installs the guest's setup program (scripts/vm-setup.c). */
export const GUEST_SETUP = "/usr/local/sbin/aw-setup";

/**
 * The stage-2 init (bash, from the root filesystem). Its first half makes what every workspace's
 * guest shares and is saved in a template snapshot: /run, the cgroup, the channel, and an
 * executor parked with its modules loaded. The second half runs at the first server's `aw-sync`,
 * which carries the time and fresh entropy: aw-setup (scripts/vm-setup.c) makes the guest this
 * workspace's (clock, random generator, settings, disk, limits) and the parked executor is given
 * its arguments.
 */
export const STAGE2 = String.raw`#!/bin/bash
# agent-workspace microVM, stage 2 (providers/microvm-guest.ts).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
fail() { echo "aw-init: $*" >/dev/console; echo o >/proc/sysrq-trigger; sleep 10; exit 1; }
mount -t tmpfs -o nosuid,nodev,noexec,mode=0755,size=4m tmpfs /run || fail "mount /run"
[ -x ${GUEST_SETUP} ] || fail "the root filesystem has no ${GUEST_SETUP}: rebuild it (scripts/build-vm-image.sh)"
[ -r /sys/firmware/qemu_fw_cfg/by_name/${FW_CFG_NAME}/raw ] || fail "no settings (fw_cfg ${FW_CFG_NAME})"
cfg=/sys/firmware/qemu_fw_cfg/by_name/${FW_CFG_NAME}/raw
prepare=0
while IFS== read -r k v; do [ "$k" = prepare ] && prepare=$v; done <"$cfg"
if [ "$prepare" = 1 ]; then
  # A VM that prepares a copy of the root filesystem for command allowlists (executor/prepare-image.ts,
  # as a container does for a container image), in a chroot of the root filesystem alone (its
  # /opt/agent-workspace is the directory, not the executor disk over it), then powers off.
  mount -o remount,rw / || fail "remount the root filesystem read-write"
  mkdir /run/prep && mount --bind / /run/prep && mount -t tmpfs -o mode=0755 tmpfs /run/prep/run && mkdir /run/prep/run/tools &&
    mount --bind ${GUEST_MOUNT} /run/prep/run/tools && mount -t proc proc /run/prep/proc && mount --bind /dev /run/prep/dev || fail "prepare: mounts"
  if out=$(chroot /run/prep /run/tools/node ${EXECUTOR_NODE_FLAGS.join(" ")} /run/tools/executor/prepare-image.js 2>&1); then r=ok; else r=failed; fi
  umount /run/prep/dev /run/prep/proc /run/prep/run/tools /run/prep/run /run/prep
  mount -o remount,ro / && sync
  echo "aw-prepare: $r $out" | tr '\n' ' ' >/dev/console; echo >/dev/console
  echo o >/proc/sysrq-trigger; sleep 10; exit 1
fi
# What a container's /dev has and devtmpfs does not: the standard streams (process substitution
# needs /dev/fd) and pseudo-terminals.
ln -sfn /proc/self/fd /dev/fd && ln -sfn /proc/self/fd/0 /dev/stdin && ln -sfn /proc/self/fd/1 /dev/stdout && ln -sfn /proc/self/fd/2 /dev/stderr || fail "/dev links"
mkdir -p /dev/pts && mount -t devpts -o nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /dev/pts && ln -sfn pts/ptmx /dev/ptmx || fail "devpts"
# A killed VM loses what its kernel had not written: tools' writes are synced (--durable-writes),
# commands' reach the disk within about a second (and the disk is mounted with commit=1).
echo 100 >/proc/sys/vm/dirty_expire_centisecs; echo 100 >/proc/sys/vm/dirty_writeback_centisecs

# The workspace disk's virtio device, found by its serial and let go of until aw-setup binds it
# again: the kernel then reads this VM's disk afresh (a VM restored from a template was saved
# with the template's).
disk=
for d in /sys/bus/virtio/drivers/virtio_blk/virtio*; do
  for b in "$d"/block/*; do s=; read -r s <"$b/serial" 2>/dev/null; [ "$s" = aw-disk ] && disk=$\{d##*/}; done
done
[ -n "$disk" ] || fail "no workspace disk"
echo "$disk" >/sys/bus/virtio/drivers/virtio_blk/unbind || fail "unbind the workspace disk"

# The admin port, a second virtio-serial port whose host side only root may open (admin.sock in the
# VM's directory): the host's root runs a command in the guest with every capability, as
# "docker exec -u 0" does in a container ("aw-admin BASE64", answered "aw-admin-done STATUS OUT ERR",
# both base64; the command runs as root). The server never uses it; tests look with it at what the
# sandbox sealed. Its loop runs outside the workspace's cgroup, as uid ${ADMIN_UID} with ambient
# capabilities: neither the executor (real uid root), whose sweeps end every process it may signal,
# nor the sandbox user may signal it.
admin=
for p in /sys/class/virtio-ports/*; do
  n=; read -r n <"$p/name" 2>/dev/null; [ "$n" = ${ADMIN_PORT} ] && admin=/dev/$\{p##*/}
done
[ -n "$admin" ] || fail "no admin port"
mkfifo -m 600 /run/aw-admin-tick || fail "fifos"
AW_ADMIN=$admin setpriv --reuid=${ADMIN_UID} --regid=${ADMIN_UID} --clear-groups --inh-caps=+all --ambient-caps=+all /bin/bash -c '
umask 077
exec 0<>"$AW_ADMIN" 1>&0 2>/dev/null 9<>/run/aw-admin-tick
while :; do
  if IFS= read -r l; then
    case "$l" in
      "aw-admin "*)
        printf %s "$\{l#aw-admin }" | base64 -d >/run/aw-admin.cmd || { printf "aw-admin-done 2 - -\n"; continue; }
        (cd /workspace && umask 022 && exec setpriv --reuid=0 --regid=0 --clear-groups bash /run/aw-admin.cmd) </dev/null >/run/aw-admin.out 2>/run/aw-admin.err; s=$?
        printf "aw-admin-done %d %s %s\n" "$s" "$(base64 -w0 </run/aw-admin.out)" "$(base64 -w0 </run/aw-admin.err)" ;;
    esac
  else
    read -r -t 0.2 -u 9 _
  fi
done' &

# The workspace's cgroup: everything from here on (the executor and its commands) is in it; aw-setup
# gives it the workspace's limits.
mkdir -p /run/cgroup && mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /run/cgroup || fail "mount cgroup2"
echo "+memory +pids" >/run/cgroup/cgroup.subtree_control || fail "cgroup controllers"
mkdir /run/cgroup/ws || fail "cgroup"
echo $$ >/run/cgroup/ws/cgroup.procs || fail "join the cgroup"
mount --bind /run/cgroup/ws /sys/fs/cgroup || fail "bind the cgroup"

port=
for p in /sys/class/virtio-ports/*; do
  n=; read -r n <"$p/name" 2>/dev/null; [ "$n" = ${CHANNEL_PORT} ] && port=/dev/$\{p##*/}
done
[ -n "$port" ] || fail "no channel port"
# One open of the port (it allows one), for reading and writing; fd 3 keeps it for the relays.
exec 0<>"$port" 1>&0 2>/dev/console 3<&0
mkfifo -m 600 /run/aw-tick /run/aw-setup /run/aw-in.0 /run/aw-out.0 /run/aw-in.1 /run/aw-out.1 || fail "fifos"

# Under emulation (TCG: the host says so with aw.jit=0) V8's compilers cost more than they save: the
# code they write is translated again by QEMU. The interpreter alone answers a no-op command in 0.77
# of the time, with two thirds of the CPU, and streams faster.
jit=
read -r cmdline </proc/cmdline
case " $cmdline " in *" aw.jit=0 "*) jit=--jitless ;; esac

# From here on PID 1 is this loop, without new privileges for anything below it (it also reaps
# what commands orphan while it waits for the executor).
# The relays below run cat as nobody: in a root filesystem prepared for allowlists only cat's own
# group may run it (executor/prepare-image.ts), so they get that group.
catgid=$(stat -L -c %g /bin/cat) || fail "stat cat"
if [ "$catgid" = 0 ]; then AW_RELAY_GROUPS=--clear-groups; else AW_RELAY_GROUPS=--groups=$catgid; fi
export AW_DISK=$disk AW_RELAY_GROUPS
exec setpriv --no-new-privs -- /bin/bash -c '
oom() { oomn=0; local k v; [ -r /sys/fs/cgroup/memory.events ] && while read -r k v; do [ "$k" = oom_kill ] && oomn=$v; done </sys/fs/cgroup/memory.events; }
# A FIFO nobody writes: a read of it with a timeout is a sleep without starting a process.
exec 9<>/run/aw-tick
exe=("$@")
# The relays run as nobody: the executor (real uid root, effective uid of the sandbox user, no
# capabilities in effect) kills every process it may signal when a command ends, and the sandbox
# user may signal none of them.
relay=(setpriv --reuid=65534 --regid=65534 "$AW_RELAY_GROUPS")
gen=0 go= configured=
# Starts the next executor: it loads, then waits for its arguments on its stdin (--parked); and
# the relay of its output to the port. Its FIFOs alternate between two pairs, so it never shares one
# with the executor before it, whose every opener has ended by then.
park() {
  in=/run/aw-in.$((gen % 2)) out=/run/aw-out.$((gen % 2)); gen=$((gen + 1))
  "$\{exe[@]}" 0<>"$in" 1<>"$out" 3<&- 9<&- & e=$!
  "$\{relay[@]}" cat <"$out" 3<&- 9<&- & w=$!
}
# The setup, started now and waiting for the first connection time and seed (a template holds it so).
${GUEST_SETUP} "$AW_DISK" 0<>/run/aw-setup >/run/aw-go 3<&- 9<&- & setup=$!
# Waits for a server: an empty line (WAKE, after GONE) or a new connection, "aw-sync NONCE MS SEED"
# (the first of all must be one). Sets nonce (empty for a WAKE), ms and seed.
next() {
  local l
  while :; do
    if IFS= read -r l; then
      case "$l" in
        "") [ -n "$configured" ] || continue; nonce=; return ;;
        "aw-sync "*)
          set -f; set -- $l; set +f
          case "$2" in ""|*[!0-9a-f]*) continue ;; esac
          nonce=$2 ms=$3 seed=$4; return ;;
      esac
    else
      read -r -t 0.02 -u 9 _
    fi
  done
}
park
while :; do
  next
  # The relay from the port first: nothing comes from the server before "aw-ready", which follows
  # the setup. RDWR opens are never blocked, even by a process that died while waiting.
  "$\{relay[@]}" cat <&3 1<>"$in" 9<&- & r=$!
  if [ -z "$configured" ]; then
    # The guest becomes the workspace: clock, entropy, settings, disk, limits (aw-setup).
    printf "%s %s\n" "$ms" "$seed" 1<>/run/aw-setup
    if ! wait "$setup" || ! read -r go </run/aw-go; then
      printf "aw-error %s\n" "$nonce"; echo o >/proc/sysrq-trigger; sleep 10; exit 1
    fi
    configured=1
  fi
  # The first executor since the guest started is told so: no command can have left anything.
  a=$go; [ "$gen" = 1 ] && a="[\"--fresh\",$\{go#[}"
  printf "%05d%s" "$\{#a}" "$a" 1<>"$in"
  [ -n "$nonce" ] && printf "aw-ready %s\n" "$nonce"
  oom; a=$oomn
  # Until the executor exits or the server goes away (the reader relay sees end-of-file): then
  # the executor is told to stop (SIGTERM: it kills every command first).
  wait -n -p ended "$e" "$r"; s=$?
  if [ "$ended" != "$e" ]; then kill -TERM "$e" 2>/dev/null; wait "$e"; s=$?; fi
  kill "$r" 2>/dev/null; wait "$r" 2>/dev/null
  oom; [ "$oomn" = "$a" ]; o=$?
  ow=$w
  park
  wait "$ow"
  printf "\000\000\000\011\032\000\000\000\000%03d%d" "$s" "$o"
done
' aw-executor ${GUEST_MOUNT}/node ${EXECUTOR_NODE_FLAGS.join(" ")} --no-lazy $jit ${GUEST_MOUNT}/executor/main.js --parked --sandbox --detect-oom --idle-exit-ms 0 --durable-writes
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
    // Never over a disk another server made meanwhile (a shared cache): VMs and templates name it.
    await link(tmpImage, file).catch((err: unknown) => {
      if (errnoCode(err) !== "EEXIST") throw err;
    });
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
