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
 * A captured command starts from a spare: a child the launcher forked ahead, right after the
 * previous captured command started (while that one runs), with its pipes already made and its
 * stdin, stdout, stderr and fd 3 already in place. It closes every other descriptor it inherited
 * (the slots' pipes, the launcher's own stdin and stdout, so no pipe's end is held open by it),
 * then waits on a pipe of its own for one command: the request's directory, marker, environment
 * and argv, after which it does what a fresh fork does. So the fork (about 0.2 ms of a Perl
 * process here) and the pipes leave the command's path, at the price of the launcher's pages the
 * two share while the spare waits (copied when the launcher writes them: about 0.15 ms of the
 * launcher's CPU per command). The launcher names its spare (`n`), so the sweep after a command
 * need not probe that pid (process-runner.ts). A spare that died (a command may kill it: same user)
 * is reaped and replaced, and the launcher says at once that it has none; a spare that cannot take its command (its pipe is closed) is
 * killed and the command forked as before, and so is a command whose spare died before its exec
 * (it says so just before it execs: nothing ran). Commands through a slot are forked on request.
 *
 * Answers are written once per turn of the main loop, and a turn whose answers hold no exit
 * waits up to 1 ms before writing them: a command that ends within it is reported (started,
 * output, ended) in one write, which the caller reads in one wakeup instead of two or three.
 * Nothing is held before the first request is read: the slots are announced at once (see `#heard`).
 * A captured command's exit is said after what it wrote before it exited: as the launcher reaps
 * it, it reads what its pipes hold first. Its caller gives up on pipes that stay quiet for 2 s
 * after an exit (process-runner.ts); a launcher that said the exit and then was slow to read the
 * pipes (a busy launcher, a workspace starved by its CPU limit) made the output look held by a
 * process that escaped, and it was lost.
 *
 * When its stdin ends (whoever started it is gone: the server or executor died without stopping
 * its commands) it kills the process group of every command still running, then exits.
 *
 * Exits are reaped in the launcher's main loop, never only in its SIGCHLD handler: Perl runs a
 * handler at its next safe point, so a signal that lands between that check and a blocking read()
 * would leave the exit unreported until the next request (a command hung as a zombie). The handler
 * only interrupts the read, and while commands run the loop also wakes every 50 ms to reap.
 *
 * A command's output reaches its caller one of two ways. Through a slot: a pipe pair the launcher
 * made ahead and whose read ends the caller opened through /proc before the command was asked
 * for, so the caller reads the command's pipes itself (any amount, at its own pace). Or captured,
 * for a caller that keeps only a head of each stream (a unary `Bash`): the launcher reads the
 * command's pipes in its own loop, sends at most `keep` bytes of each, counts the rest, and says
 * when both pipes ended. Opening, polling and closing two pipes in Node costs the caller more
 * than the command's start itself; a captured command costs it three short messages.
 *
 * Only outside a sandbox (the local provider): it needs a Perl (perl-base is on every Debian) and
 * commands that run as the caller's own user. Where either is missing commands are spawned.
 * Protocol, over the launcher's stdin and stdout:
 *   request  `<bytes>\n` then `r\0<id>\0<slot>\0<cwd>\0<marker>\0<env count>\0<NAME=value>…\0<argv>…`
 *            (through a slot), `k\0<id>\0<keep>\0<cwd>\0…` (captured), or `c\0<id>` (stop reading
 *            a captured command's pipes: its caller gave up on them);
 *   answers  `p <slot> <stdout fd> <stderr fd>` a slot is ready, `s <id> <pid> [<marker link>]` started,
 *            `f <id> <errno> <pid>` failed, `o <id> <1|2> <bytes>\n<raw bytes>` captured output
 *            (stdout 1, stderr 2), `d <id> <stdout total> <stderr total>` both its pipes ended,
 *            `x <pid> <code> <signal>` a command exited, `n <pid>` the spare that waits now (`n 0`
 *            none: said as it is taken for a command or reaped, before its pid can be handed out again).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { accessSync, closeSync, constants as fsConstants, openSync } from "node:fs";
import { Socket } from "node:net";
import path from "node:path";
import { constants as osConstants } from "node:os";
import { Readable } from "node:stream";

/** The launcher, as Perl (core modules only: POSIX, Errno). */
const SCRIPT = String.raw`
use strict; use warnings; use POSIX (); use Errno ();
binmode STDIN; binmode STDOUT;
my $said = '';
my $held = 0;
sub say_ { $said .= shift }
sub flush_ { my $off = 0; while ($off < length $said) { my $n = syswrite(STDOUT, $said, length($said) - $off, $off); if (!defined $n) { next if $!{EINTR}; POSIX::_exit(0) } $off += $n } $said = ''; $held = 0 }
my $running = 0;
my %kids;
# Nothing but its stdin, stdout and stderr from whoever started the server (a supervisor's pipe, a
# socket handed down without close-on-exec) reaches a command, forked on request or from a spare.
{ opendir(my $d, '/proc/self/fd') or die "launcher: /proc/self/fd: $!\n"; my @fds = grep { /^\d+$/ && $_ > 2 } readdir($d); closedir($d); POSIX::close($_) for @fds }
open(my $NULL, '<', '/dev/null') or die "launcher: /dev/null: $!\n";
my $spare;
sub reap_ {
  while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0) {
    my $st = $?;
    my $id = delete $kids{$pid};
    if (!defined $id) { if ($spare && $spare->[0] == $pid) { unspare_(); say_("n 0\n") } next }
    $running--; kill('-KILL', $pid); drain_($id); say_("x $pid " . (($st >> 8) & 255) . " " . ($st & 127) . "\n");
  }
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
my %cap;
my %cmd;
sub cap_ {
  my $fd = shift;
  my ($fh, $id, $st) = @{$cap{$fd}};
  my $m = $cmd{$id};
  my $n = sysread($fh, my $b, 65536);
  if (!defined $n) { return if $!{EINTR} || $!{EAGAIN}; $n = 0 }
  if ($n > 0) {
    $m->[2 * $st] += $n;
    my $room = $m->[0] - $m->[2 * $st - 1];
    if ($room > 0) { my $part = $n <= $room ? $b : substr($b, 0, $room); $m->[2 * $st - 1] += length($part); say_("o $id $st " . length($part) . "\n" . $part) }
    return;
  }
  close($fh); delete $cap{$fd};
  if (--$m->[5] == 0) { delete $cmd{$id}; say_("d $id $m->[2] $m->[4]\n") }
}
# What an exited captured command wrote is in its pipes: it is read and said before its exit.
# (Its caller gives up on output that stays quiet for a while after an exit: a launcher slow to
# read it after saying the exit would lose it.) Bounded: a process that escaped the command may
# still be writing; what it writes later is read in the main loop.
sub drain_ {
  my $id = shift;
  for (1 .. 64) {
    my @fds = grep { $cap{$_}[1] == $id } keys %cap;
    return unless @fds;
    my $rin = ''; vec($rin, $_, 1) = 1 for @fds;
    return if select(my $rout = $rin, undef, undef, 0) <= 0;
    vec($rout, $_, 1) && cap_($_) for @fds;
  }
}
sub drop_ {
  my $id = shift;
  return unless delete $cmd{$id};
  for my $fd (keys %cap) { if ($cap{$fd}[1] == $id) { close($cap{$fd}[0]); delete $cap{$fd} } }
}
sub unspare_ { close($_) for @{$spare}[1 .. 4]; $spare = undef }
sub spare_ {
  return if $spare;
  my @p;
  for (1 .. 5) { my ($r, $w); if (!pipe($r, $w)) { close($_) for @p; return } push @p, $r, $w }
  my ($ir, $iw, $xr, $xw, $or, $ow, $er, $ew, $mr, $mw) = @p;
  my $pid = fork();
  if (!defined $pid) { close($_) for @p; return }
  if ($pid == 0) {
    $SIG{CHLD} = 'DEFAULT';
    defined(POSIX::dup2(fileno($NULL), 0)) && defined(POSIX::dup2(fileno($ow), 1)) && defined(POSIX::dup2(fileno($ew), 2)) && defined(POSIX::dup2(fileno($mr), 3)) or POSIX::_exit(127);
    my %keep = (0 => 1, 1 => 1, 2 => 1, 3 => 1, fileno($ir) => 1, fileno($xw) => 1);
    opendir(my $d, '/proc/self/fd') or POSIX::_exit(127);
    my @fds = grep { /^\d+$/ && !$keep{$_} } readdir($d);
    closedir($d);
    POSIX::close($_) for @fds;
    my $msg = '';
    for (;;) {
      my $nl = index($msg, "\n");
      last if $nl > 0 && length($msg) >= $nl + 1 + substr($msg, 0, $nl);
      my $n = sysread($ir, $msg, 65536, length $msg);
      if (!defined $n) { next if $!{EINTR}; POSIX::_exit(0) }
      POSIX::_exit(0) if $n == 0;
    }
    close($ir);
    my $nl = index($msg, "\n");
    my ($cwd, $marker, $nenv, @rest) = split(/\0/, substr($msg, $nl + 1, substr($msg, 0, $nl)), -1);
    my @env = splice(@rest, 0, $nenv);
    my $die = sub { my $e = ($! + 0) || 5; syswrite($xw, pack("N", $e)); POSIX::_exit(127) };
    POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new()) or $die->();
    defined(POSIX::setsid()) or $die->();
    chdir($cwd) or $die->();
    if ($marker eq '') { POSIX::close(3) }
    elsif ($marker ne '+') { open(my $m, '<', $marker) or $die->(); defined(POSIX::dup2(fileno($m), 3)) or $die->() }
    %ENV = ();
    for my $kv (@env) { my $i = index($kv, '='); $ENV{substr($kv, 0, $i)} = substr($kv, $i + 1) }
    syswrite($xw, 'R');
    { no warnings 'exec'; exec { $rest[0] } @rest; }
    $die->();
  }
  close($_) for ($ir, $xw, $ow, $ew, $mw);
  my $mlink = ' pipe:[' . (stat($mr))[1] . ']';
  close($mr);
  $spare = [$pid, $iw, $xr, $or, $er, $mlink];
  say_("n $pid\n");
}
sub spared_ {
  my ($id, $keep, $cwd, $marker, @fields) = @_;
  my ($pid, $iw, $xr, $or, $er, $mlink) = @$spare;
  my $body = join("\0", $cwd, $marker, @fields);
  my $line = length($body) . "\n" . $body;
  # Written at once into the spare's empty pipe (64 KiB), so a spare that does not read (stopped)
  # cannot block the launcher here; a longer request is forked as before.
  return 0 if length($line) > 60000;
  $spare = undef;
  say_("n 0\n");
  my $off = 0;
  {
    local $SIG{PIPE} = 'IGNORE';
    while ($off < length $line) { my $n = syswrite($iw, $line, length($line) - $off, $off); if (!defined $n) { next if $!{EINTR}; last } $off += $n }
  }
  close($iw);
  if ($off < length $line) { close($_) for ($xr, $or, $er); kill('KILL', $pid); return 0 }
  # 'R' right before its exec, then an errno if the exec failed; an errno alone if a step before it
  # failed; nothing if it died before its exec (killed while it waited): nothing ran, fork instead.
  # A spare that says nothing for 2 s (stopped by a command) is killed: what it said by then counts.
  # One that said 'R' is past every step that could fail but the exec itself, and may be the command
  # already (a starved workspace can take that long): it is left to run, not killed as it starts.
  my $got = '';
  my $left = 2;
  my $in = ''; vec($in, fileno($xr), 1) = 1;
  while (length($got) < 5) {
    my ($ready, $rest) = select(my $r = $in, undef, undef, $left);
    $left = $rest;
    if ($ready <= 0) { next if $ready < 0 && $!{EINTR} && $left > 0; last if $got ne ''; kill('KILL', $pid); $left = undef; next }
    my $n = sysread($xr, $got, 5 - length($got), length($got));
    if (!defined $n) { next if $!{EINTR}; last }
    last if $n == 0;
  }
  close($xr);
  my $execd = $got =~ s/^R//;
  if (!$execd && length($got) != 4) { close($or); close($er); kill('KILL', $pid); return 0 }
  $running++; $kids{$pid} = $id;
  if (length($got) == 4) { say_("f $id " . unpack("N", $got) . " $pid\n"); close($or); close($er); return 1 }
  say_("s $id $pid" . ($marker eq '+' ? $mlink : '') . "\n");
  $cap{fileno($or)} = [$or, $id, 1]; $cap{fileno($er)} = [$er, $id, 2]; $cmd{$id} = [$keep, 0, 0, 0, 0, 2];
  return 1;
}
sub run_ {
  my ($keep, $id, $s, $cwd, $marker, $nenv, @rest) = @_;
  return if $keep && $spare && spared_($id, $s, $cwd, $marker, $nenv, @rest);
  my @env = splice(@rest, 0, $nenv);
  my @argv = @rest;
  my ($or, $ow, $er, $ew, $mr, $mw);
  my $mlink = '';
  my $again = sub { close($_) for grep { defined } ($mr, $mw); if ($keep) { close($_) for grep { defined } ($or, $ow, $er, $ew) } else { slot_($s) } };
  if ($marker eq '+') {
    if (!pipe($mr, $mw)) { say_("f $id " . ($! + 0) . " 0\n"); $again->(); return }
    $mlink = ' pipe:[' . (stat($mr))[1] . ']';
  }
  if ($keep) {
    if (!pipe($or, $ow) || !pipe($er, $ew)) { say_("f $id " . ($! + 0) . " 0\n"); $again->(); return }
  } else {
    my $pipes = delete $slot{$s};
    if (!$pipes) { say_("f $id 9 0\n"); return }
    ($or, $ow, $er, $ew) = @$pipes;
    close($or); close($er);
  }
  my ($xr, $xw);
  if (!pipe($xr, $xw)) { say_("f $id " . ($! + 0) . " 0\n"); $again->(); return }
  my $pid = fork();
  if (!defined $pid) { say_("f $id " . ($! + 0) . " 0\n"); $again->(); return }
  if ($pid > 0) { $running++; $kids{$pid} = $id }
  if ($pid == 0) {
    my $die = sub { my $e = ($! + 0) || 5; syswrite($xw, pack("N", $e)); POSIX::_exit(127) };
    $SIG{CHLD} = 'DEFAULT';
    POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new()) or $die->();
    defined(POSIX::setsid()) or $die->();
    chdir($cwd) or $die->();
    defined(POSIX::dup2(fileno($NULL), 0)) or $die->();
    defined(POSIX::dup2(fileno($ow), 1)) or $die->();
    defined(POSIX::dup2(fileno($ew), 2)) or $die->();
    if ($marker ne '') {
      my $m = $mr;
      if ($marker ne '+') { open($m, '<', $marker) or $die->() }
      if (fileno($m) == 3) { fcntl($m, POSIX::F_SETFD(), 0) or $die->() } else { defined(POSIX::dup2(fileno($m), 3)) or $die->() }
    }
    %ENV = ();
    for my $kv (@env) { my $i = index($kv, '='); $ENV{substr($kv, 0, $i)} = substr($kv, $i + 1) }
    { no warnings 'exec'; exec { $argv[0] } @argv; }
    $die->();
  }
  close($ow); close($ew); close($xw);
  close($mr), close($mw) if defined $mr;
  my $got = '';
  while (length($got) < 4) { my $n = sysread($xr, $got, 4 - length($got), length($got)); if (!defined $n) { next if $!{EINTR}; last } last if $n == 0 }
  close($xr);
  if (length($got) == 4) { say_("f $id " . unpack("N", $got) . " $pid\n"); if ($keep) { close($or); close($er) } }
  else {
    say_("s $id $pid$mlink\n");
    if ($keep) { $cap{fileno($or)} = [$or, $id, 1]; $cap{fileno($er)} = [$er, $id, 2]; $cmd{$id} = [$s, 0, 0, 0, 0, 2] }
  }
  slot_($s) unless $keep;
}
slot_($_) for 1 .. $SLOTS;
flush_();
spare_();
my $buf = '';
for (;;) {
  reap_();
  my $wait = $running > 0 ? 0.05 : undef;
  if ($said ne '') { if ($held || $said =~ /^x /m) { flush_() } else { $held = 1; $wait = 0.001 } }
  my $rin = ''; vec($rin, fileno(STDIN), 1) = 1; vec($rin, $_, 1) = 1 for keys %cap;
  my $rout;
  next if select($rout = $rin, undef, undef, $wait) <= 0;
  vec($rout, $_, 1) && cap_($_) for keys %cap;
  next unless vec($rout, fileno(STDIN), 1);
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
    if ($op eq 'r') { run_(0, @f) } elsif ($op eq 'k') { run_(1, @f); spare_() } elsif ($op eq 'c') { drop_($f[0]) }
  }
}
flush_();
kill('KILL', $spare->[0]) if $spare;
kill('-KILL', $_) for keys %kids;
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
  /**
   * A path the command opens as fd 3, "" for none, or "+": the launcher gives it the read end of a
   * pipe of its own, and the child's `markerLink` says what /proc shows for it (`pipe:[<inode>]`).
   */
  marker: string;
  /**
   * Captured: the launcher reads the command's output and sends at most this many bytes of each
   * stream; the child's `outputBytes` then counts all of it. Otherwise the output comes through a slot.
   */
  keep?: number;
}

/**
 * A command started by a launcher: the part of ChildProcess that process-runner.ts uses (`pid`,
 * `stdout`, `stderr`, and `error` or `exit` once).
 */
export class LaunchedChild extends EventEmitter {
  pid: number | undefined;
  stdout!: Readable;
  stderr!: Readable;
  /** A captured command's byte counts of each stream, set when both its pipes ended. */
  outputBytes?: { stdout: number; stderr: number };
  /** What /proc shows for its marker descriptor when the launcher made it (marker "+"). */
  markerLink?: string;
  /** True once it exited: the launcher killed what was left of its process group as it reaped it. */
  groupKilled?: boolean;
}

/** A stream fed by the launcher's messages (a captured command's stdout or stderr). */
function fed(): Readable {
  return new Readable({ read() {} });
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
  /** Captured commands whose pipes have not both ended yet, by request id. */
  readonly #captured = new Map<number, LaunchedChild>();
  #alive = true;
  /** The pid of the spare that waits (0: none, or not known yet). */
  #spare = 0;
  /** True once it said anything: it had begun serving (its slots come before it reads a request). */
  #heard = false;

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
    // Once its output is read to the end, not at its exit: a launcher killed just after it started a
    // command (by that command, say) may have said so in a message still in the pipe. Taken at the
    // exit, that launch would fail as never started and be spawned again: the command run twice.
    this.#child.on("close", () => this.#died());
  }

  get alive(): boolean {
    return this.#alive;
  }

  /**
   * The pid of the spare that waits for the next captured command, 0 for none. The spare is a fork
   * of the launcher that carries no command's marks; the launcher says when it is taken or reaped
   * before its pid can be handed out again, so this never names a process of a command.
   */
  get spare(): number {
    return this.#alive ? this.#spare : 0;
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
    const keep = req.keep;
    if (keep !== undefined) {
      if (!Number.isSafeInteger(keep) || keep < 0) throw Object.assign(new TypeError("keep must be a byte count"), { code: "ERR_INVALID_ARG_VALUE" });
      return new Promise((resolve, reject) => {
        if (!this.#alive) return reject(exitedError());
        const id = this.#nextId++;
        const child = new LaunchedChild();
        child.stdout = fed();
        child.stderr = fed();
        // Given up on before both ended (the caller destroyed a stream): the launcher stops reading them.
        const drop = () => {
          if (this.#captured.delete(id) && this.#alive) this.#send(["c", String(id)]);
        };
        child.stdout.once("close", drop);
        child.stderr.once("close", drop);
        this.#captured.set(id, child);
        this.#starting.set(id, { resolve, reject, child });
        this.#send(["k", String(id), String(keep), req.cwd, req.marker, String(env.length), ...env, ...req.argv]);
      });
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
    const body = fields.join("\0");
    this.#child.stdin!.write(`${Buffer.byteLength(body)}\n${body}`);
  }

  /** The launcher's answers, read as latin1 (one character per byte, so output bytes survive). */
  #read(data: string): void {
    this.#heard = true;
    const buf = this.#out === "" ? data : this.#out + data;
    let pos = 0;
    let at: number;
    while ((at = buf.indexOf("\n", pos)) >= 0) {
      const [kind, ...rest] = buf.slice(pos, at).split(" ");
      const n = rest.map(Number);
      if (kind === "o") {
        // Output: its bytes follow the line.
        if (buf.length < at + 1 + n[2]) break;
        this.#output(n[0], n[1], buf.slice(at + 1, at + 1 + n[2]));
        pos = at + 1 + n[2];
        continue;
      }
      pos = at + 1;
      if (kind === "p") this.#slot(n[0], n[1], n[2]);
      else if (kind === "s") this.#started(n[0], n[1], rest[2]);
      else if (kind === "f") this.#failedStart(n[0], n[1], n[2]);
      else if (kind === "x") this.#exited(n[0], n[1], n[2]);
      else if (kind === "d") this.#drained(n[0], n[1], n[2]);
      else if (kind === "n") this.#spare = n[0];
      else if (kind === "e") this.#log(`the launcher cannot make pipes: ${errnoNames.get(n[0]) ?? n[0]}`);
    }
    this.#out = pos === buf.length ? "" : buf.slice(pos);
  }

  #output(id: number, stream: number, bytes: string): void {
    const child = this.#captured.get(id);
    const to = stream === 1 ? child?.stdout : child?.stderr;
    if (to !== undefined && !to.destroyed) to.push(Buffer.from(bytes, "latin1"));
  }

  #drained(id: number, stdout: number, stderr: number): void {
    const child = this.#captured.get(id);
    if (child === undefined) return;
    this.#captured.delete(id);
    child.outputBytes = { stdout, stderr };
    child.stdout.push(null);
    child.stderr.push(null);
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

  #started(id: number, pid: number, markerLink: string | undefined): void {
    const waiter = this.#starting.get(id);
    this.#starting.delete(id);
    if (!waiter) return;
    const child = waiter.child;
    child.pid = pid;
    if (markerLink !== undefined) child.markerLink = markerLink;
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
    this.#captured.delete(id);
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
    child.groupKilled = true;
    const emit = () => {
      if (signal !== 0) child.emit("exit", null, signalNames.get(signal) ?? "SIGKILL");
      else child.emit("exit", code, null);
    };
    // At once when the launch's caller listens already (the usual case: its start came in an
    // earlier read); otherwise not before it had its turn to (its start and its exit may come in
    // one read).
    if (child.listenerCount("exit") > 0) emit();
    else setImmediate(emit);
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
    // Captured output ends with the launcher that read it.
    for (const [id, child] of this.#captured) {
      this.#captured.delete(id);
      if (this.#starting.has(id)) continue;
      child.stdout.push(null);
      child.stderr.push(null);
    }
    // A launch it may have read and started (it had begun serving: it announces its slots before it
    // reads a request) must not be started again elsewhere: it ends as killed, like its running
    // commands. One it never began serving can be spawned instead.
    for (const [id, w] of this.#starting) {
      this.#starting.delete(id);
      w.child.stdout.destroy();
      w.child.stderr.destroy();
      w.reject(this.#heard ? diedError() : exitedError());
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

/** The launcher died with the launch in its hands: the command may have started, and is not started again. */
function diedError(): Error {
  return Object.assign(new Error("the workspace's launcher died while starting the command"), { code: "LAUNCHER_DIED" });
}
