#!/usr/bin/env bash
# build-base-image.sh [IMAGE] — build the workspace base image without any
# image registry (this machine reaches only Debian's apt mirrors and npm).
#
# The image (default agent-workspace-base:bookworm) is a debootstrap'ed
# Debian bookworm "minbase" plus bash, coreutils, git, ripgrep,
# ca-certificates and procps, with:
#   - user `agent` (uid 1000, gid 1000, home /home/agent, shell bash),
#   - /workspace owned by 1000:1000 (the image's WORKDIR),
#   - PATH set, apt caches, package lists and docs removed,
#   - /usr/local/lib/aw-statx-compat.so in /etc/ld.so.preload (see below),
#   - /usr/local/lib/aw-git-harden.so in /etc/ld.so.preload: git's hooks and
#     command-running configuration off for every git in the workspace, by
#     configuration nothing in the sandbox can undo (scripts/git-harden.c).
#
# Why the statx shim: Debian bookworm's gVisor (runsc 0.0~20221219) answers
# statx(2) with EINVAL whenever AT_NO_AUTOMOUNT is in the flags, and
# coreutils 9.1 passes exactly that, so `ls`, `ls -l` and `stat` fail inside
# runsc with "Invalid argument" (git, rg, find, cp and node are unaffected).
# The shim wraps glibc's statx() and retries once without AT_NO_AUTOMOUNT on
# EINVAL; that flag only matters for automount points, which a container
# does not have. Under runc the retry never fires. It is compiled with the
# host's gcc (same glibc 2.36 as the image).
#
# The image carries LABEL org.agent-workspace.base-version; an existing image
# with another version (built by an older copy of this script) is rebuilt.
# It is imported with `docker import` (no Dockerfile, no `docker pull`).
# The packages come from the apt mirror this machine is configured with
# (read from /etc/apt/sources.list{,.d/*}), never from a hard-coded host.
#
# If the image already exists the build is skipped. Either way the image is
# then checked under runc and under gVisor (runsc, --network=none): git, rg and
# `id agent` must work in both. Set SKIP_VERIFY=1 to skip that check.
# Needs root, debootstrap and a running dockerd (scripts/setup-engines.sh).
set -euo pipefail

IMAGE=${1:-agent-workspace-base:bookworm}
SUITE=bookworm
INCLUDE=bash,coreutils,git,ripgrep,ca-certificates,procps,curl
IMG_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Bump when the image's contents change, so existing images get rebuilt.
BASE_VERSION=4
VERSION_LABEL=org.agent-workspace.base-version

say() { printf 'build-base-image: %s\n' "$*"; }
die() { printf 'build-base-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
timeout 10 "$DOCKER" info >/dev/null 2>&1 || die "docker is not answering; run scripts/setup-engines.sh first"

# First http(s) URI of a configured Debian source that serves $SUITE itself
# (not -security/-updates), from deb822 *.sources or one-line *.list files.
find_mirror() {
  local f files=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ "${#files[@]}" -gt 0 ] || return 0
  awk -v suite="$SUITE" '
    function flush() {
      if (uris != "" && (" " suites " ") ~ (" " suite " ") && types ~ /(^| )deb( |$)/) {
        n = split(uris, u, " ")
        for (i = 1; i <= n; i++) if (u[i] ~ /^https?:\/\//) { print u[i]; found = 1; exit }
      }
      uris = ""; suites = ""; types = ""
    }
    FNR == 1 { flush(); deb822 = (FILENAME ~ /\.sources$/) }
    deb822 {
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      if ($0 ~ /^[ \t]*#/) next
      if (tolower($1) == "uris:")   { $1 = ""; uris = $0 }
      if (tolower($1) == "suites:") { $1 = ""; suites = $0 }
      if (tolower($1) == "types:")  { $1 = ""; types = $0 }
      next
    }
    /^[ \t]*deb[ \t]/ {
      # deb [opts] URI SUITE COMPONENTS...
      line = $0; sub(/\[[^]]*\][ \t]*/, "", line); split(line, w, /[ \t]+/)
      k = (w[1] == "") ? 2 : 1
      if (w[k+2] == suite && w[k+1] ~ /^https?:\/\//) { print w[k+1]; found = 1; exit }
    }
    END { if (!found) flush() }
  ' "${files[@]}"
}

verify() {
  local rt out t0 t1
  for rt in runc runsc; do
    local args=(--rm --runtime="$rt")
    [ "$rt" = runsc ] && args+=(--network=none)
    t0=$(date +%s.%N)
    if ! out=$(timeout 120 "$DOCKER" run "${args[@]}" "$IMAGE" \
        bash -c 'git --version && rg --version | sed -n 1p && id agent && stat -c "%u:%g %n" /workspace && ls -la / >/dev/null' 2>&1); then
      printf '%s\n' "$out" >&2
      die "verification under $rt failed"
    fi
    t1=$(date +%s.%N)
    grep -q 'uid=1000(agent) gid=1000(agent)' <<<"$out" || { printf '%s\n' "$out" >&2; die "user agent wrong under $rt"; }
    grep -q '^1000:1000 /workspace$' <<<"$out" || { printf '%s\n' "$out" >&2; die "/workspace ownership wrong under $rt"; }
    say "verify $rt: ok ($(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s): $(head -n2 <<<"$out" | tr '\n' ' ')"
  done
}

image_current() {
  local v
  v=$("$DOCKER" image inspect --format "{{index .Config.Labels \"$VERSION_LABEL\"}}" "$IMAGE" 2>/dev/null) || return 1
  [ "$v" = "$BASE_VERSION" ] && return 0
  [ "${1:-}" = quiet ] || say "$IMAGE has base-version '${v:-none}', want $BASE_VERSION: rebuilding"
  return 1
}

if image_current; then
  say "$IMAGE exists (base-version $BASE_VERSION); not rebuilding"
  [ "${SKIP_VERIFY:-0}" = 1 ] || verify
  exit 0
fi

command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing; run scripts/setup-engines.sh first"
command -v gcc >/dev/null 2>&1 || die "gcc missing; run scripts/setup-engines.sh first"
MIRROR=$(find_mirror)
[ -n "$MIRROR" ] || die "no apt mirror for $SUITE found in /etc/apt/sources.list{,.d/*}"

# One build at a time (CI and a developer may run this concurrently).
exec 9>/var/lock/agent-workspace-base-image.lock
flock 9
if image_current quiet; then
  say "$IMAGE was built by a concurrent run"
  [ "${SKIP_VERIFY:-0}" = 1 ] || verify
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/aw-rootfs.XXXXXX")
ROOT=$WORK/rootfs
cleanup() {
  # debootstrap may leave proc/sys mounted inside the rootfs when it fails:
  # unmount (deepest first) before deleting, and never cross filesystems.
  local m
  for m in $(awk -v p="$WORK/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

start=$(date +%s)
say "debootstrap $SUITE from $MIRROR into $ROOT"
if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
  tail -n 40 "$WORK/debootstrap.log" >&2
  [ -f "$ROOT/debootstrap/debootstrap.log" ] && tail -n 40 "$ROOT/debootstrap/debootstrap.log" >&2
  die "debootstrap failed"
fi
say "debootstrap done in $(( $(date +%s) - start ))s"

chroot "$ROOT" groupadd -g 1000 agent
chroot "$ROOT" useradd -m -u 1000 -g 1000 -d /home/agent -s /bin/bash agent
install -d -o 1000 -g 1000 -m 0755 "$ROOT/workspace"
mkdir -p "$ROOT/usr/local/lib"

# statx compatibility shim for gVisor (see the header).
cat >"$WORK/aw-statx-compat.c" <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
/* gVisor 20221219 rejects AT_NO_AUTOMOUNT in statx with EINVAL: retry without. */
int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
  long r = syscall(SYS_statx, dirfd, path, flags, mask, buf);
  if (r == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
    r = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
  return (int)r;
}
C
gcc -shared -fPIC -O2 -Wall -Werror -o "$ROOT/usr/local/lib/aw-statx-compat.so" "$WORK/aw-statx-compat.c"
chmod 0644 "$ROOT/usr/local/lib/aw-statx-compat.so"
gcc -shared -fPIC -O2 -Wall -Werror -o "$ROOT/usr/local/lib/aw-git-harden.so" "$(dirname "${BASH_SOURCE[0]}")/git-harden.c"
chmod 0644 "$ROOT/usr/local/lib/aw-git-harden.so"
printf '%s\n' /usr/local/lib/aw-statx-compat.so /usr/local/lib/aw-git-harden.so >"$ROOT/etc/ld.so.preload"
chroot "$ROOT" /bin/true || die "rootfs broken after installing the preloaded libraries"
# git must run hardened: a hook in a fresh repository does not run.
chroot "$ROOT" /bin/bash -c 'cd /tmp && git init -q h && printf "#!/bin/sh\ntouch /tmp/HOOKED\n" > h/.git/hooks/pre-commit && chmod +x h/.git/hooks/pre-commit && cd h && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && ! test -e /tmp/HOOKED && rm -rf /tmp/h' || die "git is not hardened in the rootfs"
chroot "$ROOT" /bin/bash -c 'cd /tmp && git init -q h2 && cd h2 && [ "$(git config core.hooksPath)" = /dev/null ] && rm -rf /tmp/h2' || die "git does not see the forced configuration"

# Clean caches and host-specific leftovers.
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/debootstrap
rm -rf "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/* "$ROOT"/tmp/* "$ROOT"/var/tmp/*
rm -rf "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/*
: >"$ROOT/etc/resolv.conf" 2>/dev/null || true
printf 'agent-workspace\n' >"$ROOT/etc/hostname"

say "importing $IMAGE"
old_id=$("$DOCKER" image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
tar --numeric-owner -C "$ROOT" -c . |
  "$DOCKER" import \
    --change "ENV PATH=$IMG_PATH" \
    --change 'WORKDIR /workspace' \
    --change "LABEL $VERSION_LABEL=$BASE_VERSION" \
    --message "agent-workspace base: debootstrap $SUITE minbase + $INCLUDE" \
    - "$IMAGE" >/dev/null
size=$("$DOCKER" image inspect --format '{{.Size}}' "$IMAGE")
# Drop the outdated image this one replaces (kept if a container still uses it).
if [ -n "$old_id" ]; then "$DOCKER" rmi "$old_id" >/dev/null 2>&1 || true; fi
say "built $IMAGE ($((size / 1024 / 1024)) MiB) in $(( $(date +%s) - start ))s"

[ "${SKIP_VERIFY:-0}" = 1 ] || verify
