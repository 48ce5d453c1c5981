#!/usr/bin/env bash
# setup-engines.sh — make the sandbox engines available on this machine.
#
# What it does (idempotent; safe to re-run while dockerd is already running):
#   1. apt-installs docker.io, runsc (gVisor), ripgrep, debootstrap, git, curl and
#      python3-grpcio (an independent gRPC client for the interop tests)
#      (plus gcc and libc6-dev, which build-base-image.sh needs for its small
#      statx shim), and what the Python client (clients/python) is generated,
#      built and tested with: protobuf-compiler (protoc 3.21; not python3-grpc-tools,
#      whose protoc 3.5 rejects proto3 `optional`) with libprotobuf-dev (the
#      well-known .proto files), protobuf-compiler-grpc (grpc_python_plugin),
#      python3-protobuf, python3-venv, python3-setuptools and python3-wheel (an
#      offline `pip install --no-build-isolation` into a venv), and chromium (the
#      browser the web UI's tests drive with playwright-core, which downloads
#      none), and for the microvm provider qemu-system-x86, Debian's cloud kernel
#      (linux-image-cloud-amd64), busybox-static and cpio (scripts/build-vm-image.sh),
#      and postgresql (the binaries the PostgreSQL store's tests start a private cluster
#      with; no system cluster is started or used), and iproute2, openssl and util-linux
#      (nsenter, unshare) with which test/helpers/remote-engine.ts starts the remote
#      engines of test/engines.test.ts (a dockerd each in a network namespace, mutual TLS),
#      only when one of them is missing (one `apt-get update`).
#   2. Registers gVisor with Docker in /etc/docker/daemon.json as the runtime
#      "runsc" (merged into an existing file, other keys kept), through the
#      wrapper scripts/runsc-noexec installed as /usr/local/sbin/agent-workspace-runsc
#      (it keeps a bind mount's noexec inside the sandbox; see the script). runtimeArgs:
#        --network=none  gVisor's own netstack is not wanted: workspaces have no
#                        network, and with it runsc does not need to touch the
#                        host network at all.
#      No --platform is given: the default platform works here, while
#      --platform=kvm hangs on these (nested-virtualisation) machines.
#      If the file changed and dockerd runs, dockerd reloads it (SIGHUP, which
#      reloads "runtimes"), or is restarted if the reload did not take.
#   3. Starts dockerd in the background (there is no systemd on these
#      machines) unless /var/run/docker.sock already answers; log goes to
#      /var/log/dockerd.log. Waits up to 60 s for `docker info`.
#   4. Checks that `docker info` lists the runsc runtime.
#   5. Checks that workspace disk images work: loop devices (/dev/loop-control,
#      `modprobe loop` if it is missing), mkfs.ext4 (e2fsprogs) and mount -o loop,
#      by making, mounting and removing a 16 MiB image. Container workspaces get
#      their disk limit from such an image (providers/disk-image.ts).
#   6. Raises kernel.pid_max to 4194304 (what systemd sets on 64-bit hosts) when it
#      is lower: every thread takes a pid, and gVisor's ptrace platform runs host
#      threads for its guests' tasks, so a dozen gVisor sandboxes beside a fork-bombed
#      one reached the kernel's default 32768 here (30,706 threads in runsc alone),
#      and dockerd's next fork failed with EAGAIN.
#
# The container-level check (`docker run --runtime=runsc ...`) needs an image;
# it lives in scripts/build-base-image.sh, which CI runs right after this.
#
# Usage: scripts/setup-engines.sh        (as root)
set -euo pipefail

DAEMON_JSON=/etc/docker/daemon.json
DOCKER_SOCK=/var/run/docker.sock
DOCKERD_LOG=/var/log/dockerd.log
DOCKERD_PIDFILE=/var/run/docker.pid
RUNSC_BIN=/usr/bin/runsc
# Docker's "runsc" runtime is runsc behind agent-workspace's wrapper (scripts/runsc-noexec): it
# keeps a bind mount's noexec inside the sandbox, which workspaces under an allowlist rely on.
RUNSC_PATH=/usr/local/sbin/agent-workspace-runsc
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WAIT_SECS=60

say() { printf 'setup-engines: %s\n' "$*"; }
die() { printf 'setup-engines: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

# Prefer the Debian docker client (same version as the daemon); fall back to
# whatever `docker` is on PATH.
if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi

# --- 1. Debian packages ------------------------------------------------------
pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

install_packages() {
  local want=(docker.io runsc ripgrep debootstrap git gcc libc6-dev curl python3-grpcio e2fsprogs mount
    protobuf-compiler libprotobuf-dev protobuf-compiler-grpc python3-protobuf python3-venv python3-setuptools python3-wheel chromium
    qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio postgresql iproute2 openssl util-linux) missing=() p
  for p in "${want[@]}"; do
    pkg_installed "$p" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    say "packages: all present (${want[*]})"
    return
  fi
  say "packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${want[@]}" >/dev/null
  for p in "${missing[@]}"; do
    pkg_installed "$p" || die "package $p failed to install"
  done
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; fi
  say "packages: installed ${missing[*]}"
}

# --- 2. daemon.json ----------------------------------------------------------
# Prints "changed" or "unchanged". Uses python3 (any), else node.
merge_daemon_json() {
  mkdir -p "$(dirname "$DAEMON_JSON")"
  local py=""
  if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3
  elif command -v python3 >/dev/null 2>&1; then py=python3
  fi
  if [ -n "$py" ]; then
    "$py" - "$DAEMON_JSON" "$RUNSC_PATH" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
cfg = {}
if os.path.exists(path):
    with open(path) as f:
        text = f.read()
    if text.strip():
        cfg = json.loads(text)
before = json.dumps(cfg, sort_keys=True)
cfg.setdefault("runtimes", {})["runsc"] = {
    "path": runsc,
    "runtimeArgs": ["--network=none"],
}
if json.dumps(cfg, sort_keys=True) == before:
    print("unchanged")
else:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print("changed")
PY
  elif command -v node >/dev/null 2>&1; then
    node - "$DAEMON_JSON" "$RUNSC_PATH" <<'JS'
const fs = require("fs");
const [path, runsc] = process.argv.slice(2);
let cfg = {};
if (fs.existsSync(path)) {
  const t = fs.readFileSync(path, "utf8");
  if (t.trim()) cfg = JSON.parse(t);
}
const before = JSON.stringify(cfg);
cfg.runtimes = cfg.runtimes || {};
cfg.runtimes.runsc = { path: runsc, runtimeArgs: ["--network=none"] };
if (before === JSON.stringify(cfg)) {
  console.log("unchanged");
} else {
  fs.writeFileSync(path + ".tmp", JSON.stringify(cfg, null, 2) + "\n");
  fs.renameSync(path + ".tmp", path);
  console.log("changed");
}
JS
  else
    die "need python3 or node to edit $DAEMON_JSON"
  fi
}

# --- 3. dockerd --------------------------------------------------------------
docker_ok() { timeout 10 "$DOCKER" info >/dev/null 2>&1; }

dockerd_pid() {
  local pid
  if [ -s "$DOCKERD_PIDFILE" ]; then
    pid=$(cat "$DOCKERD_PIDFILE")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; return; fi
  fi
  pgrep -x dockerd | head -n1 || true
}

wait_docker() {
  local i
  for ((i = 0; i < WAIT_SECS; i++)); do
    docker_ok && return 0
    sleep 1
  done
  return 1
}

start_dockerd() {
  say "dockerd: starting (log: $DOCKERD_LOG)"
  # A stale pid file from a killed dockerd makes the new one refuse to start.
  if [ -e "$DOCKERD_PIDFILE" ] && [ -z "$(dockerd_pid)" ]; then rm -f "$DOCKERD_PIDFILE"; fi
  nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  disown || true
  if ! wait_docker; then
    tail -n 30 "$DOCKERD_LOG" >&2 || true
    die "dockerd did not answer 'docker info' within ${WAIT_SECS}s (see $DOCKERD_LOG)"
  fi
  say "dockerd: up"
}

stop_dockerd() {
  local pid i
  pid=$(dockerd_pid)
  [ -n "$pid" ] || return 0
  say "dockerd: stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 1
  done
  die "dockerd (pid $pid) did not stop within 30s"
}

# True when the running daemon has the runsc runtime exactly as configured.
runsc_listed() {
  timeout 10 "$DOCKER" info --format '{{json .Runtimes.runsc}}' 2>/dev/null |
    grep -q "\"path\":\"$RUNSC_PATH\",\"runtimeArgs\":\[\"--network=none\"\]"
}

# --- 5. disk images ------------------------------------------------------------
# Makes, mounts and removes a small ext4 image the way the server does; fails
# with the reason when this host cannot.
check_disk_images() {
  if [ ! -e /dev/loop-control ]; then
    modprobe loop 2>/dev/null || true
    [ -e /dev/loop-control ] || die "no loop devices (/dev/loop-control missing, modprobe loop failed): container disk limits cannot be enforced"
  fi
  command -v mkfs.ext4 >/dev/null 2>&1 || die "mkfs.ext4 is missing (e2fsprogs)"
  local dir
  dir=$(mktemp -d /tmp/aw-disk-check.XXXXXX)
  truncate -s 16M "$dir/disk.img"
  mkdir "$dir/mnt"
  if ! mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$dir/disk.img" ||
    ! mount -t ext4 -o loop,nodev,nosuid,noinit_itable "$dir/disk.img" "$dir/mnt"; then
    rm -rf "$dir"
    die "could not make and loop-mount an ext4 image: container disk limits cannot be enforced"
  fi
  umount "$dir/mnt"
  rm -rf "$dir"
  say "disk images: ok (loop devices, mkfs.ext4, mount -o loop)"
}

# --- 2b. the runsc wrapper -----------------------------------------------------
install_runsc_wrapper() {
  [ -x "$RUNSC_BIN" ] || die "$RUNSC_BIN is missing (Debian package runsc)"
  if ! cmp -s "$HERE/runsc-noexec" "$RUNSC_PATH"; then
    install -m 0755 "$HERE/runsc-noexec" "$RUNSC_PATH.tmp"
    mv -f "$RUNSC_PATH.tmp" "$RUNSC_PATH"
    say "runsc wrapper: installed $RUNSC_PATH"
  else
    say "runsc wrapper: current ($RUNSC_PATH)"
  fi
}

# --- 6. room for threads -------------------------------------------------------
raise_pid_max() {
  local want=4194304 cur
  cur=$(cat /proc/sys/kernel/pid_max)
  if [ "$cur" -ge "$want" ]; then
    say "kernel.pid_max: $cur"
  elif echo "$want" > /proc/sys/kernel/pid_max 2>/dev/null; then
    say "kernel.pid_max: raised from $cur to $want"
  else
    say "kernel.pid_max: $cur, and it cannot be raised here; many gVisor sandboxes at once may exhaust it"
  fi
}

# --- main --------------------------------------------------------------------
install_packages
install_runsc_wrapper
raise_pid_max

json_state=$(merge_daemon_json)
say "daemon.json: $json_state ($DAEMON_JSON)"

if docker_ok; then
  if [ "$json_state" = changed ]; then
    pid=$(dockerd_pid)
    if [ -n "$pid" ]; then
      # dockerd reloads "runtimes" on SIGHUP without stopping containers.
      say "dockerd: reloading config (SIGHUP pid $pid)"
      kill -HUP "$pid" || true
      sleep 2
    fi
    if ! runsc_listed; then
      stop_dockerd
      start_dockerd
    fi
  else
    say "dockerd: already running"
  fi
else
  if [ -n "$(dockerd_pid)" ]; then
    # A dockerd that does not answer: give it the usual time, then replace it.
    say "dockerd: process present but not answering; waiting"
    if ! wait_docker; then stop_dockerd; start_dockerd; fi
  else
    start_dockerd
  fi
fi

runsc_listed || die "docker info does not list the runsc runtime (check $DAEMON_JSON and $DOCKERD_LOG)"
check_disk_images

driver=$(timeout 10 "$DOCKER" info --format '{{.Driver}}' 2>/dev/null || echo '?')
cgroup=$(timeout 10 "$DOCKER" info --format '{{.CgroupDriver}} v{{.CgroupVersion}}' 2>/dev/null || echo '?')
server=$(timeout 10 "$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?')
say "docker: server $server, storage driver $driver, cgroup $cgroup"
say "runtimes: $(timeout 10 "$DOCKER" info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null)"
say "runsc: $("$RUNSC_BIN" --version 2>/dev/null | sed -n 1p) (through $RUNSC_PATH)"
say "ripgrep: $(rg --version 2>/dev/null | sed -n 1p)"
say "ok"
