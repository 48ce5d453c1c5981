/*
 * aw-setup: the per-workspace half of a microVM guest's start (providers/microvm-guest.ts), run
 * once by stage 2 as root when the first server connects, in one small static process: under
 * emulation every program started costs tens of milliseconds, and a VM restored from a template
 * snapshot must be made its workspace's in a fraction of a second.
 *
 *   aw-setup DISK_DEVICE <<< "EPOCH_MS SEED_HEX"
 *
 * It is started ahead of time (a VM saved as a template holds it waiting) and reads its one line
 * from stdin when the first server connects:
 *
 * 1. Sets the clock to EPOCH_MS (a restored VM wakes with its template's time).
 * 2. Mixes SEED_HEX (32 bytes from the host) into the kernel's entropy pool and reseeds its
 *    random number generator at once: every VM restored from one template starts with the same
 *    generator state, and must not hand out the same "random" bytes as its siblings.
 * 3. Reads the workspace's settings from QEMU's fw_cfg (name=value lines).
 * 4. Binds the virtio-blk driver to DISK_DEVICE (the workspace disk's virtio device, unbound
 *    before the template was saved, so the kernel reads this VM's disk afresh: its size, its
 *    blocks), checks the disk's serial, and mounts it for /workspace, /tmp and /var/tmp; with
 *    `noexec=1` (a command allowlist: providers/executor/programs.ts) every writable filesystem is
 *    mounted noexec, and the server's files at /opt/agent-workspace are left to root and the tools
 *    group (`tools=GID`) alone, as a prepared container image has them.
 * 5. Applies the workspace's process and memory limits to the cgroup stage 2 made.
 * 6. Prints the executor's workspace arguments as one JSON line (the executor's --parked).
 *
 * Its stdin and stdout are a FIFO and a file stage 2 opened; the seed is wiped from its memory
 * once the kernel has it.
 *
 * Exits non-zero with one line on stderr when any step fails. Built static by
 * scripts/build-vm-image.sh into the root filesystem (/usr/local/sbin/aw-setup).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SETTINGS "/sys/firmware/qemu_fw_cfg/by_name/opt/agent-workspace/config/raw"
#define CGROUP "/run/cgroup/ws"
#define DISK_SERIAL "aw-disk"

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("aw-setup: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void write_file(const char *path, const char *value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die("open %s: %s", path, strerror(errno));
  size_t n = strlen(value);
  if (write(fd, value, n) != (ssize_t)n) die("write %s: %s", path, strerror(errno));
  close(fd);
}

/* Reads a small file into buf (NUL-terminated, trailing whitespace cut); -1 when it cannot be read. */
static int read_small(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) return -1;
  while (n > 0 && isspace((unsigned char)buf[n - 1])) n--;
  buf[n] = 0;
  return 0;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Only what the settings may hold: digits, letters, '_' and '-' (base64url). */
static int plain(const char *s) {
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
  return 1;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

int main(int argc, char **argv) {
  if (argc != 2) die("usage: aw-setup DISK_DEVICE <<< 'EPOCH_MS SEED_HEX'");
  char line[256], hex[65];
  long long ms;
  if (!fgets(line, sizeof line, stdin)) die("no time and seed on stdin");
  if (sscanf(line, "%lld %64s", &ms, hex) != 2 || ms <= 0) die("bad time or seed");

  /* 1. The clock. */
  struct timespec now = {ms / 1000, (ms % 1000) * 1000000L};
  if (clock_settime(CLOCK_REALTIME, &now) != 0) die("clock_settime: %s", strerror(errno));

  /* 2. Entropy: 32 bytes, credited, then an immediate reseed. */
  if (strlen(hex) != 64) die("bad seed");
  struct {
    int entropy_count;
    int buf_size;
    unsigned char buf[32];
  } pool = {256, 32, {0}};
  for (int i = 0; i < 32; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) die("bad seed");
    pool.buf[i] = (unsigned char)(hi << 4 | lo);
  }
  int rnd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (rnd < 0) die("open /dev/urandom: %s", strerror(errno));
  if (ioctl(rnd, RNDADDENTROPY, &pool) != 0) die("RNDADDENTROPY: %s", strerror(errno));
  if (ioctl(rnd, RNDRESEEDCRNG) != 0) die("RNDRESEEDCRNG: %s", strerror(errno));
  close(rnd);
  memset(&pool, 0, sizeof pool);
  memset(line, 0, sizeof line);
  memset(hex, 0, sizeof hex);

  /* 3. The settings. */
  static char settings[4097];
  if (read_small(SETTINGS, settings, sizeof settings) != 0) die("no settings (fw_cfg): %s", strerror(errno));
  long long pids = 0, memory = 0, uid = 1000, gid = 1000, tools = 0;
  int noexec = 0;
  const char *enforce = "";
  for (char *line = strtok(settings, "\n"); line; line = strtok(NULL, "\n")) {
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = 0;
    const char *k = line, *v = eq + 1;
    if (!plain(v)) die("bad setting %s", k);
    if (!strcmp(k, "pids")) pids = atoll(v);
    else if (!strcmp(k, "memory")) memory = atoll(v);
    else if (!strcmp(k, "uid")) uid = atoll(v);
    else if (!strcmp(k, "gid")) gid = atoll(v);
    else if (!strcmp(k, "noexec")) noexec = !strcmp(v, "1");
    else if (!strcmp(k, "tools")) tools = atoll(v);
    else if (!strcmp(k, "enforce")) enforce = v;
  }
  if (uid <= 0 || gid < 0) die("bad user");
  if (noexec && tools <= 0) die("noexec without a tools group");

  /* 4. The workspace disk. */
  const char *dev = argv[1];
  if (strncmp(dev, "virtio", 6) || !plain(dev)) die("bad disk device");
  write_file("/sys/bus/virtio/drivers/virtio_blk/bind", dev);
  char dir[128], name[64] = "", path[192];
  snprintf(dir, sizeof dir, "/sys/bus/virtio/devices/%s/block", dev);
  for (int i = 0; i < 2000 && !name[0]; i++) {
    DIR *d = opendir(dir);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof name) memcpy(name, e->d_name, strlen(e->d_name) + 1);
      closedir(d);
    }
    if (!name[0]) sleep_ms(5);
  }
  if (!name[0]) die("the workspace disk did not appear");
  char serial[64];
  snprintf(path, sizeof path, "/sys/block/%s/serial", name);
  if (read_small(path, serial, sizeof serial) != 0 || strcmp(serial, DISK_SERIAL)) die("%s is not the workspace disk", name);
  snprintf(path, sizeof path, "/dev/%s", name);
  struct stat st;
  for (int i = 0; i < 2000 && stat(path, &st) != 0; i++) sleep_ms(5);
  unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOATIME | (noexec ? MS_NOEXEC : 0);
  /* noinit_itable: no background zeroing of inode tables (ext4 tracks which are unused), which
     would compete with the workspace's first commands for the emulated CPU. */
  if (mount(path, "/mnt/disk", "ext4", flags, "commit=1,noinit_itable") != 0) die("mount the workspace disk: %s", strerror(errno));
  static const struct {
    const char *dir, *target;
    mode_t mode;
  } binds[] = {{"/mnt/disk/workspace", "/workspace", 0755}, {"/mnt/disk/tmp", "/tmp", 01777}, {"/mnt/disk/var-tmp", "/var/tmp", 01777}};
  for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++) {
    if (mkdir(binds[i].dir, binds[i].mode) == 0) {
      if (chmod(binds[i].dir, binds[i].mode) != 0) die("chmod %s: %s", binds[i].dir, strerror(errno));
    } else if (errno != EEXIST) {
      die("mkdir %s: %s", binds[i].dir, strerror(errno));
    }
    /* A bind mount has the mount options of the mount it comes from (mount(2)): nosuid, nodev, noexec. */
    if (mount(binds[i].dir, binds[i].target, NULL, MS_BIND, NULL) != 0) die("bind %s: %s", binds[i].target, strerror(errno));
  }
  if (mkdir("/dev/shm", 01777) != 0 && errno != EEXIST) die("mkdir /dev/shm: %s", strerror(errno));
  if (mount("tmpfs", "/dev/shm", "tmpfs", flags & ~MS_NOATIME, "mode=1777,size=64m") != 0) die("mount /dev/shm: %s", strerror(errno));

  /* Under an allowlist the executor disk (node, the executor, ripgrep), mounted at
     /opt/agent-workspace for everyone, is covered by a view only root and the tools group may enter:
     a tmpfs of mode 0710 holding binds of the three, moved over it. Running executors keep theirs,
     and the next ones start from the binds. */
  if (noexec) {
    static const char *view = "/run/aw-tools";
    char opts[64];
    snprintf(opts, sizeof opts, "mode=0710,uid=0,gid=%lld,size=64k", tools);
    if (mkdir(view, 0700) != 0 && errno != EEXIST) die("mkdir %s: %s", view, strerror(errno));
    if (mount("tmpfs", view, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) die("mount the tools view: %s", strerror(errno));
    static const char *parts[] = {"node", "executor", "bin"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
      char from[128], to[128];
      snprintf(from, sizeof from, "/opt/agent-workspace/%s", parts[i]);
      snprintf(to, sizeof to, "%s/%s", view, parts[i]);
      struct stat pst;
      if (stat(from, &pst) != 0) die("stat %s: %s", from, strerror(errno));
      if (S_ISDIR(pst.st_mode)) {
        if (mkdir(to, 0755) != 0) die("mkdir %s: %s", to, strerror(errno));
      } else {
        int fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) die("create %s: %s", to, strerror(errno));
        close(fd);
      }
      if (mount(from, to, NULL, MS_BIND, NULL) != 0) die("bind %s: %s", to, strerror(errno));
    }
    if (mount(NULL, view, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, opts) != 0) die("make the tools view read-only: %s", strerror(errno));
    if (mount(view, "/opt/agent-workspace", NULL, MS_MOVE, NULL) != 0) die("move the tools view: %s", strerror(errno));
  }

  /* 5. The workspace's limits. */
  char value[32];
  if (pids > 0) {
    snprintf(value, sizeof value, "%lld", pids);
    write_file(CGROUP "/pids.max", value);
  }
  if (memory > 0) {
    snprintf(value, sizeof value, "%lld", memory);
    write_file(CGROUP "/memory.max", value);
  }

  /* 6. The executor's arguments. */
  printf("[\"--uid\",\"%lld\",\"--gid\",\"%lld\"", uid, gid);
  if (*enforce) printf(",\"--enforce\",\"%s\"", enforce);
  printf("]\n");
  return fflush(stdout) == 0 ? 0 : 1;
}
