#!/usr/bin/env bash
# build-vm-image.sh [DIR] — build what the `microvm` provider boots (providers/microvm.ts), from
# this machine's own packages and the container base image; nothing is downloaded.
#
# DIR (default /var/lib/agent-workspace/microvm, or AGENT_WORKSPACE_MICROVM_IMAGES) receives:
#   vmlinuz      Debian's cloud kernel (linux-image-cloud-amd64), as installed in /boot;
#   initrd.img   a stage-1 initramfs: busybox (busybox-static), the kernel's modules for
#                virtio-mmio, virtio-blk, virtio-console (virtio-serial), virtio-balloon (free page
#                reporting) and qemu_fw_cfg, and
#                /init, which loads them, mounts the root filesystem and the executor's disk by
#                label, read-only, and hands over to the executor disk's `init` (stage 2, written
#                by the server with the executor: providers/microvm-guest.ts);
#   rootfs.img   the root filesystem, ext4 (label aw-root), made with `mke2fs -d` from the same
#                debootstrap tree as the container image (agent-workspace-base:bookworm, exported
#                from Docker), with mount points for the executor (/opt/agent-workspace) and the
#                workspace disk (/mnt/disk), and /usr/local/sbin/aw-setup (scripts/vm-setup.c,
#                built static here: the guest's per-workspace setup, see providers/microvm-guest.ts);
#                the guest mounts it read-only;
#   VERSION      what the files were built from; an image whose VERSION differs is rebuilt.
#
# The kernel has no virtio drivers built in (they are modules), hence the initramfs. The guest is
# Firecracker-shaped: a bzImage/vmlinux kernel booted directly, virtio-mmio block and console
# devices, no firmware, no PCI, no network device.
#
# Then the image is checked: a VM boots it under TCG with no executor disk and must print the
# versions of git and rg from the root filesystem (SKIP_VERIFY=1 skips that).
# Needs root, Docker with the base image (scripts/build-base-image.sh), busybox-static, cpio,
# e2fsprogs, qemu-system-x86 and linux-image-cloud-amd64 (scripts/setup-engines.sh).
set -euo pipefail

OUT=${1:-${AGENT_WORKSPACE_MICROVM_IMAGES:-/var/lib/agent-workspace/microvm}}
BASE_IMAGE=${BASE_IMAGE:-agent-workspace-base:bookworm}
# Bump when what this script puts into the files changes.
VM_VERSION=3
MODULES="virtio_ring virtio virtio_mmio virtio_blk virtio_console virtio_balloon qemu_fw_cfg"

say() { printf 'build-vm-image: %s\n' "$*"; }
die() { printf 'build-vm-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
for tool in busybox cpio mke2fs qemu-system-x86_64 gcc; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool missing; run scripts/setup-engines.sh first"
done
# busybox must be static: it runs in the initramfs before any library is there.
if ldd "$(command -v busybox)" >/dev/null 2>&1; then die "busybox is not static (install busybox-static)"; fi

# The newest installed cloud kernel.
KERNEL=$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1)
[ -n "$KERNEL" ] || die "no /boot/vmlinuz-*-cloud-amd64 (install linux-image-cloud-amd64)"
KVER=${KERNEL#/boot/vmlinuz-}
[ -d "/lib/modules/$KVER" ] || die "no modules for $KVER"

timeout 10 "$DOCKER" info >/dev/null 2>&1 || die "docker is not answering; run scripts/setup-engines.sh first"
BASE_ID=$("$DOCKER" image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null) || die "no $BASE_IMAGE; run scripts/build-base-image.sh first"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SETUP_SRC=$HERE/vm-setup.c
[ -f "$SETUP_SRC" ] || die "$SETUP_SRC is missing"
WANT="vm=$VM_VERSION kernel=$KVER base=$BASE_ID setup=$(sha256sum "$SETUP_SRC" | cut -c1-16)"

# Under TCG the guest's TSC runs at the host's rate, but the kernel cannot calibrate it against
# an emulated PIT (it then marks the TSC unstable and hangs without a clocksource): tell it the
# rate, as the provider does (the host's cpu MHz, which is the TSC's where the CPU has
# constant_tsc).
tsc_khz() { awk '/^cpu MHz/ { printf "%d", $4 * 1000; exit }' /proc/cpuinfo; }

verify() {
  local dir=$1 out
  # No executor disk: stage 1 then runs the check below instead of stage 2 (aw.check).
  if ! out=$(timeout 180 qemu-system-x86_64 -M microvm,accel=tcg -m 256 -smp 1 -nodefaults -no-user-config \
      -display none -no-reboot -serial stdio \
      -kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" -append "console=ttyS0 quiet panic=-1 tsc_early_khz=$(tsc_khz) tsc=reliable no_timer_check aw.check=1" \
      -drive id=root,file="$dir/rootfs.img",format=raw,if=none,readonly=on -device virtio-blk-device,drive=root 2>&1); then
    printf '%s\n' "$out" | tail -n 30 >&2
    die "the check VM failed"
  fi
  grep -q '^aw-check: ok' <<<"$out" || { printf '%s\n' "$out" | tail -n 30 >&2; die "the check VM did not report ok"; }
  say "verify: $(grep '^aw-check:' <<<"$out" | tr '\n' ' ')"
}

if [ "$(cat "$OUT/VERSION" 2>/dev/null)" = "$WANT" ]; then
  say "$OUT is current ($WANT); not rebuilding"
  [ "${SKIP_VERIFY:-0}" = 1 ] || verify "$OUT"
  exit 0
fi

exec 9>/var/lock/agent-workspace-vm-image.lock
flock 9
if [ "$(cat "$OUT/VERSION" 2>/dev/null)" = "$WANT" ]; then
  say "$OUT was built by a concurrent run"
  exit 0
fi

mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d "$(dirname "$OUT")/.vm-build.XXXXXX")
trap 'rm -rf --one-file-system "$WORK"' EXIT
start=$(date +%s)

# --- the initramfs (stage 1) --------------------------------------------------
IR=$WORK/initramfs
mkdir -p "$IR"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$(command -v busybox)" "$IR/bin/busybox"
for m in $MODULES; do
  f=$(find "/lib/modules/$KVER/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n 1)
  [ -n "$f" ] || die "module $m not found for $KVER"
  case "$f" in
    *.xz) xz -dc "$f" >"$IR/lib/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" >"$IR/lib/modules/$m.ko" ;;
    *) cp "$f" "$IR/lib/modules/$m.ko" ;;
  esac
done
cat >"$IR/init" <<EOF
#!/bin/busybox sh
# agent-workspace microVM, stage 1 (scripts/build-vm-image.sh): drivers, root filesystem, stage 2.
export PATH=/bin
/bin/busybox --install -s /bin
fail() { echo "aw-init: \$*" >/dev/console; echo o >/proc/sysrq-trigger; sleep 5; exit 1; }
mount -t devtmpfs -o nosuid,noexec devtmpfs /dev
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
for m in $MODULES; do insmod /lib/modules/\$m.ko || fail "module \$m"; done
# The block devices appear as their drivers probe; look for them by label.
label() { findfs "LABEL=\$1" 2>/dev/null; }
i=0; while ! root=\$(label aw-root); do i=\$((i + 1)); [ \$i -lt 500 ] || fail "no root filesystem"; usleep 10000; done
mount -t ext4 -o ro,noatime "\$root" /newroot || fail "mount root"
if grep -q 'aw.check=1' /proc/cmdline; then
  mount --move /dev /newroot/dev; mount --move /proc /newroot/proc; mount --move /sys /newroot/sys
  exec switch_root /newroot /bin/sh -c 'echo "aw-check: ok \$(git --version) \$(rg --version | head -n 1) \$(id agent)"; echo o >/proc/sysrq-trigger; sleep 5'
fi
# No network device, but loopback: the executor's egress proxy listens there (issue 16).
ip link set lo up || fail "loopback"
tools=\$(label aw-exec) || fail "no executor disk"
mount -t ext4 -o ro,nodev,noatime "\$tools" /newroot/opt/agent-workspace || fail "mount executor disk"
mount --move /dev /newroot/dev; mount --move /proc /newroot/proc; mount --move /sys /newroot/sys
exec switch_root /newroot /opt/agent-workspace/init
EOF
chmod 0755 "$IR/init"
(cd "$IR" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.img"

# --- the root filesystem --------------------------------------------------------
TREE=$WORK/tree
mkdir -p "$TREE"
cid=$("$DOCKER" create "$BASE_IMAGE" /bin/true)
"$DOCKER" export "$cid" | tar -C "$TREE" --numeric-owner -xf -
"$DOCKER" rm "$cid" >/dev/null
mkdir -p "$TREE/opt/agent-workspace" "$TREE/mnt/disk"
# Docker's export leaves the files its engine manages empty; the guest's own.
printf 'agent-workspace\n' >"$TREE/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost\n127.0.1.1 agent-workspace\n' >"$TREE/etc/hosts"
: >"$TREE/etc/resolv.conf"
rm -f "$TREE/.dockerenv"
# The guest's per-workspace setup: static, so it starts in a few milliseconds even under emulation.
gcc -static -Os -Wall -Werror -o "$TREE/usr/local/sbin/aw-setup" "$SETUP_SRC" || die "building aw-setup failed (gcc and libc6-dev: scripts/setup-engines.sh)"
strip "$TREE/usr/local/sbin/aw-setup"
chmod 0755 "$TREE/usr/local/sbin/aw-setup"
# Room for the tree plus a fifth (the guest never writes to it).
kib=$(du -sk --apparent-size "$TREE" | cut -f1)
mke2fs -q -F -t ext4 -O ^has_journal -L aw-root -d "$TREE" "$WORK/rootfs.img" "$(( kib + kib / 5 + 65536 ))k" >/dev/null
rm -rf --one-file-system "$TREE"

cp "$KERNEL" "$WORK/vmlinuz"
printf '%s\n' "$WANT" >"$WORK/VERSION"
[ "${SKIP_VERIFY:-0}" = 1 ] || verify "$WORK"

# Swap whole, as the executor build does: running VMs keep the files they opened.
mkdir -p "$OUT"
for f in vmlinuz initrd.img rootfs.img; do mv -f "$WORK/$f" "$OUT/$f.new" && mv -f "$OUT/$f.new" "$OUT/$f"; done
mv -f "$WORK/VERSION" "$OUT/VERSION"
say "built $OUT in $(( $(date +%s) - start ))s ($WANT)"
