/**
 * A workspace's launcher: a small resident Perl process that starts the workspace's commands, so
 * that no command pays for a fork of the executor's Node process (a fork copies its page tables:
 * about 1.5 ms more per command than from a process of a few MiB) or for a shell that joins the
 * workspace's cgroups and sets its rlimits before every command. The launcher itself is started
 * once through that shell (`limits`): it lives in the workspace's cgroups under its rlimits, and
 * every command it forks is born there, under the same limits.
 *
 * Per command it does what Node's `spawn` does, and nothing else: fork; in the child a new session
 * (`detached`), the working directory, stdin from /dev/null, stdout and stderr into fresh pipes,
 * the marker descriptor as fd 3, the complete environment of the request (nothing of its own),
 * every signal at its default and none blocked, then exec through PATH. A failure before or at
 * exec comes back as its errno, as `spawn`'s error does. The command's working directory and
 * marker are the executor's own open descriptors, reached as /proc/<executor>/fd/N (same user), so
 * the directory the jail opened is the one the command starts in, whatever happened to its path
 * since. The executor opens the pipes' read ends the same way, through /proc/<launcher>/fd/N.
 *
 * Nothing passes from one command to the next: the launcher never runs user code, each command is
 * a fresh fork of it, and everything a command could change (environment, directory, umask,
 * limits, signal state, descriptors) is set from the request or is the launcher's unchanged own.
 *
 * Exits are reaped in the launcher's main loop, never only in its SIGCHLD handler: Perl runs a
 * handler at its next safe point, so a signal that lands between that check and a blocking read()
 * would leave the exit unreported until the next request (a command hung as a zombie). The handler
 * only interrupts the read, and while commands run the loop also wakes every 50 ms to reap.
 *
 * Only outside a sandbox (the local provider): it needs a Perl (perl-base is on every Debian) and
 * commands that run as the executor's own user. Where either is missing the executor spawns as
 * before. Protocol, over the launcher's stdin and stdout:
 *   request  `<bytes>\n` then `r\0<id>\0<cwd>\0<marker>\0<env count>\0<NAME=value>…\0<argv>…`, or `c\0<id>`
 *            (close the read ends it still holds for command <id>: the executor opened its own; sent
 *            in front of the next request);
 *   answers  `s <id> <pid> <stdout fd> <stderr fd>` started, `f <id> <errno> <pid>` failed,
 *            `x <pid> <code> <signal>` a command exited.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { accessSync, closeSync, constants as fsConstants, openSync } from "node:fs";
import { Socket } from "node:net";
import path from "node:path";
import { constants as osConstants } from "node:os";
import type { Readable } from "node:stream";

/** The launcher, as Perl (core modules only: POSIX, Errno). */
const SCRIPT = String.raw`
use strict; use warnings; use POSIX (); use Errno ();
binmode STDIN; binmode STDOUT;
sub say_ { my $line = shift; my $off = 0; while ($off < length $line) { my $n = syswrite(STDOUT, $line, length($line) - $off, $off); if (!defined $n) { next if $!{EINTR}; POSIX::_exit(0) } $off += $n } }
my $running = 0;
sub reap_ {
  while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0) { $running--; my $st = $?; say_("x $pid " . (($st >> 8) & 255) . " " . ($st & 127) . "\n") }
}
$SIG{CHLD} = sub { };
$SIG{PIPE} = 'DEFAULT';
my %slot;
my $SLOTS = 4;
sub slot_ {
  my $s = shift;
  my ($or, $ow, $er, $ew);
  if (!pipe($or, $ow) || !pipe($er, $ew)) { say_("e " . ($! + 0) . "\n"); return }
  $slot{$s} = [$or, $ow, $er, $ew];
  say_("p $s " . fileno($or) . " " . fileno($er) . "\n");
}
sub run_ {
  my ($id, $s, $cwd, $marker, $nenv, @rest) = @_;
  my @env = splice(@rest, 0, $nenv);
  my @argv = @rest;
  my $pipes = delete $slot{$s};
  if (!$pipes) { say_("f $id 9 0\n"); return }
  my ($or, $ow, $er, $ew) = @$pipes;
  close($or); close($er);
  my ($xr, $xw);
  if (!pipe($xr, $xw)) { say_("f $id " . ($! + 0) . " 0\n"); slot_($s); return }
  my $pid = fork();
  if (!defined $pid) { say_("f $id " . ($! + 0) . " 0\n"); slot_($s); return }
  $running++ if $pid > 0;
  if ($pid == 0) {
    my $die = sub { my $e = ($! + 0) || 5; syswrite($xw, pack("N", $e)); POSIX::_exit(127) };
    $SIG{CHLD} = 'DEFAULT';
    POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new()) or $die->();
    defined(POSIX::setsid()) or $die->();
    chdir($cwd) or $die->();
    open(my $null, '<', '/dev/null') or $die->();
    defined(POSIX::dup2(fileno($null), 0)) or $die->();
    defined(POSIX::dup2(fileno($ow), 1)) or $die->();
    defined(POSIX::dup2(fileno($ew), 2)) or $die->();
    if ($marker ne '') {
      open(my $m, '<', $marker) or $die->();
      if (fileno($m) == 3) { fcntl($m, POSIX::F_SETFD(), 0) or $die->() } else { defined(POSIX::dup2(fileno($m), 3)) or $die->() }
    }
    %ENV = ();
    for my $kv (@env) { my $i = index($kv, '='); $ENV{substr($kv, 0, $i)} = substr($kv, $i + 1) }
    { no warnings 'exec'; exec { $argv[0] } @argv; }
    $die->();
  }
  close($ow); close($ew); close($xw);
  my $got = '';
  while (length($got) < 4) { my $n = sysread($xr, $got, 4 - length($got), length($got)); if (!defined $n) { next if $!{EINTR}; last } last if $n == 0 }
  close($xr);
  if (length($got) == 4) { say_("f $id " . unpack("N", $got) . " $pid\n") } else { say_("s $id $pid\n") }
  slot_($s);
}
slot_($_) for 1 .. $SLOTS;
my $buf = '';
for (;;) {
  reap_();
  if ($running > 0) {
    my $rin = ''; vec($rin, fileno(STDIN), 1) = 1;
    next if select(my $rout = $rin, undef, undef, 0.05) <= 0;
  }
  my $n = sysread(STDIN, $buf, 65536, length($buf));
  if (!defined $n) { next if $!{EINTR}; last }
  last if $n == 0;
  for (;;) {
    my $nl = index($buf, "\n");
    last if $nl < 0;
    my $len = substr($buf, 0, $nl);
    last if length($buf) < $nl + 1 + $len;
    my @f = split(/\0/, substr($buf, $nl + 1, $len), -1);
    substr($buf, 0, $nl + 1 + $len) = '';
    my $op = shift @f;
    run_(@f) if $op eq 'r';
  }
}
POSIX::_exit(0);
`;

/** Where Perl is, or undefined when this host has none. */
export function findPerl(candidates = ["/usr/bin/perl", "/bin/perl"]): string | undefined {
  for (const file of candidates) {
    try {
      accessSync(file, fsConstants.X_OK);
      return file;
    } catch {
      // Next.
    }
  }
  return undefined;
}

/**
 * `argv` behind the limits command `prefix` (executor without a launcher). A program that cannot be
 * found on `searchPath` is left unwrapped, so its spawn fails as it would without limits (ENOENT)
 * and nothing runs.
 */
export function wrapCommand(prefix: readonly string[], argv: string[], searchPath: string | undefined): string[] {
  return prefix.length === 0 || !findable(argv[0], searchPath) ? argv : [...prefix, ...argv];
}

/** True when `program` is a path or a name found as an executable on `searchPath`. */
function findable(program: string | undefined, searchPath: string | undefined): boolean {
  if (program === undefined || program === "") return false;
  // A relative path is resolved against the command's directory, which only the spawn knows:
  // wrap it, and let the shell report it if it is missing.
  if (program.includes("/") && !path.isAbsolute(program)) return true;
  const candidates = program.includes("/") ? [program] : (searchPath ?? "").split(":").filter((d) => d !== "").map((d) => path.join(d, program));
  return candidates.some((file) => {
    try {
      accessSync(file, fsConstants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** What a launch needs: as `spawn`'s options, with the descriptors as /proc paths of this process. */
export interface LaunchRequest {
  argv: string[];
  /** The complete environment. */
  env: Record<string, string>;
  /** A path that opens the working directory (here `/proc/<pid>/fd/<n>`). */
  cwd: string;
  /** A path the command opens as fd 3, or "" for none. */
  marker: string;
}

/**
 * A command started by a launcher: the part of ChildProcess that process-runner.ts uses (`pid`,
 * `stdout`, `stderr`, and `error` or `exit` once).
 */
export class LaunchedChild extends EventEmitter {
  pid: number | undefined;
  stdout!: Readable;
  stderr!: Readable;
}

const errnoNames = new Map(Object.entries(osConstants.errno).map(([name, n]) => [n, name]));
const signalNames = new Map(Object.entries(osConstants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/** One resident launcher (see the module comment). */
export class Launcher {
  readonly #child: ChildProcess;
  readonly #log: (line: string) => void;
  #nextId = 1;
  #out = "";
  /** Pipe pairs whose read ends this process holds, ready for a command, by slot. */
  readonly #ready = new Map<number, { stdout: Socket; stderr: Socket }>();
  /** Launches waiting for a ready slot. */
  readonly #queued: Array<() => void> = [];
  /** Launches waiting for their answer, by request id. */
  readonly #starting = new Map<number, { resolve: (c: LaunchedChild) => void; reject: (e: Error) => void; child: LaunchedChild }>();
  /** Running commands, by pid. */
  readonly #running = new Map<number, LaunchedChild>();
  /** Exits reported before their start was read (a command that ended at once), by pid. */
  readonly #early = new Map<number, [number, number]>();
  /** Pids of failed launches whose child's exit is still to come, to be ignored. */
  readonly #failed = new Set<number>();
  #alive = true;

  /**
   * Starts a launcher with `perl`, through `prefix` (the command that joins the workspace's
   * cgroups and sets its rlimits, then execs its arguments; empty for none).
   */
  constructor(perl: string, prefix: string[], path: string, log: (line: string) => void) {
    this.#log = log;
    const argv = [...prefix, perl, "-e", SCRIPT];
    this.#child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "pipe"], env: { PATH: path } });
    this.#child.stdout!.setEncoding("latin1").on("data", (d: string) => this.#read(d));
    this.#child.stderr!.setEncoding("utf8").on("data", (d: string) => this.#log(d.trimEnd().slice(0, 2000)));
    this.#child.stdin!.on("error", () => undefined);
    this.#child.on("error", (err) => {
      this.#log(`launcher failed: ${err.message}`);
      this.#died();
    });
    this.#child.on("exit", () => this.#died());
  }

  get alive(): boolean {
    return this.#alive;
  }

  /** Starts a command; rejects as `spawn` throws or errs (an Error with `code`). */
  launch(req: LaunchRequest): Promise<LaunchedChild> {
    const env = Object.entries(req.env).map(([k, v]) => `${k}=${v}`);
    // spawn refuses the same: a NUL cannot be passed to exec.
    for (const s of [...req.argv, ...env, req.cwd, req.marker]) {
      if (s.includes("\0")) throw Object.assign(new TypeError("argv, env and cwd may not contain NUL bytes"), { code: "ERR_INVALID_ARG_VALUE" });
    }
    for (const k of Object.keys(req.env)) {
      if (k === "" || k.includes("=")) throw Object.assign(new TypeError(`invalid environment variable name '${k}'`), { code: "ERR_INVALID_ARG_VALUE" });
    }
    return new Promise((resolve, reject) => {
      const go = () => {
        if (!this.#alive) return reject(exitedError());
        // A slot whose read ends this process already holds: whatever the command then does to
        // the launcher, its output reaches this process.
        const [slot, pipes] = this.#ready.entries().next().value as [number, { stdout: Socket; stderr: Socket }];
        this.#ready.delete(slot);
        const id = this.#nextId++;
        const child = new LaunchedChild();
        child.stdout = pipes.stdout;
        child.stderr = pipes.stderr;
        this.#starting.set(id, { resolve, reject, child });
        this.#send(["r", String(id), String(slot), req.cwd, req.marker, String(env.length), ...env, ...req.argv]);
      };
      if (this.#ready.size > 0 && this.#queued.length === 0) go();
      else this.#queued.push(go);
    });
  }

  /** Stops the launcher (commands it started are the caller's to kill). */
  close(): void {
    this.#child.stdin?.end();
    this.#child.kill("SIGKILL");
  }

  #send(fields: string[]): void {
    const body = Buffer.from(fields.join("\0"));
    this.#child.stdin!.write(Buffer.concat([Buffer.from(`${body.length}\n`), body]));
  }

  #read(data: string): void {
    this.#out += data;
    let at: number;
    while ((at = this.#out.indexOf("\n")) >= 0) {
      const [kind, ...rest] = this.#out.slice(0, at).split(" ");
      this.#out = this.#out.slice(at + 1);
      const n = rest.map(Number);
      if (kind === "p") this.#slot(n[0], n[1], n[2]);
      else if (kind === "s") this.#started(n[0], n[1]);
      else if (kind === "f") this.#failedStart(n[0], n[1], n[2]);
      else if (kind === "x") this.#exited(n[0], n[1], n[2]);
      else if (kind === "e") this.#log(`the launcher cannot make pipes: ${errnoNames.get(n[0]) ?? n[0]}`);
    }
  }

  /** A new pipe pair: its read ends are opened here (through /proc) before any command may use it. */
  #slot(slot: number, outFd: number, errFd: number): void {
    let stdout: Socket | undefined;
    try {
      stdout = this.#open(outFd);
      this.#ready.set(slot, { stdout, stderr: this.#open(errFd) });
    } catch (err) {
      stdout?.destroy();
      this.#log(`cannot open a pipe of the launcher: ${(err as Error).message}`);
      return;
    }
    this.#queued.shift()?.();
  }

  #open(fd: number): Socket {
    const own = openSync(`/proc/${this.#child.pid}/fd/${fd}`, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    try {
      // Nothing is read before the command's supervisor takes the pipe (it may hand it on
      // untouched, see process-runner.ts): the first read of the stream starts reading.
      return new Socket({ fd: own, readable: true, writable: false, manualStart: true } as ConstructorParameters<typeof Socket>[0]);
    } catch (err) {
      closeSync(own);
      throw err;
    }
  }

  #started(id: number, pid: number): void {
    const waiter = this.#starting.get(id);
    this.#starting.delete(id);
    if (!waiter) return;
    const child = waiter.child;
    child.pid = pid;
    this.#running.set(pid, child);
    waiter.resolve(child);
    const early = this.#early.get(pid);
    if (early) {
      this.#early.delete(pid);
      this.#exited(pid, early[0], early[1]);
    }
  }

  #failedStart(id: number, errno: number, pid: number): void {
    const waiter = this.#starting.get(id);
    this.#starting.delete(id);
    if (pid > 0 && !this.#early.delete(pid)) this.#failed.add(pid);
    waiter?.child.stdout.destroy();
    waiter?.child.stderr.destroy();
    const code = errnoNames.get(errno) ?? "SPAWN_FAILED";
    waiter?.reject(Object.assign(new Error(`spawn ${code}`), { code, errno: -errno }));
  }

  #exited(pid: number, code: number, signal: number): void {
    if (this.#failed.delete(pid)) return;
    const child = this.#running.get(pid);
    if (!child) {
      if (this.#early.size < 1024) this.#early.set(pid, [code, signal]);
      return;
    }
    this.#running.delete(pid);
    // Not before the launch's caller had its turn to listen (its start and its exit may come in one read).
    setImmediate(() => {
      if (signal !== 0) child.emit("exit", null, signalNames.get(signal) ?? "SIGKILL");
      else child.emit("exit", code, null);
    });
  }

  #died(): void {
    if (!this.#alive) return;
    this.#alive = false;
    for (const go of this.#queued.splice(0)) go();
    for (const { stdout, stderr } of this.#ready.values()) {
      stdout.destroy();
      stderr.destroy();
    }
    this.#ready.clear();
    for (const [id, w] of this.#starting) {
      this.#starting.delete(id);
      w.child.stdout.destroy();
      w.child.stderr.destroy();
      w.reject(exitedError());
    }
    // Commands it started can no longer be waited for: their groups are killed, and they end as
    // killed (their output, in pipes this process holds, is still read to its end).
    for (const [pid, child] of this.#running) {
      this.#running.delete(pid);
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // Gone.
      }
      setImmediate(() => child.emit("exit", null, "SIGKILL"));
    }
  }
}

function exitedError(): Error {
  return Object.assign(new Error("the workspace's launcher exited"), { code: "LAUNCHER_EXITED" });
}
