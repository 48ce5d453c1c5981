/**
 * The local provider's workspace launcher (providers/executor/launcher.ts): commands started by a
 * resident Perl process in the workspace's cgroups instead of a fork of the executor. Through the
 * real server: nothing a command changes reaches the next one, the limits still apply, a killed
 * launcher ends its command and the next call gets a new one, and the spawn mode still works.
 * Directly: a failed exec reports its errno as spawn does, and output and exits are never lost or
 * crossed when commands end as fast as they start.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { findPerl, Launcher } from "../providers/executor/launcher.ts";
import { runProcess } from "../providers/executor/process-runner.ts";
import { LOCAL_ONLY, newWorkspace, startServer, type TestServer } from "./helpers/server.ts";

const test = anyTest as TestFn<{ server: TestServer; spawnServer: TestServer }>;
const perl = findPerl();

test.before(async (t) => {
  t.context.server = await startServer({ env: LOCAL_ONLY });
  t.context.spawnServer = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_LOCAL_LAUNCHER: "spawn" } });
});
test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.spawnServer?.close();
});

const PROBE = [
  'echo "leak=${LEAK-unset}"',
  "echo \"cwd=$(pwd -P | sed 's|.*/||')\"",
  'echo "umask=$(umask)"',
  'echo "nofile=$(ulimit -S -n)"',
  "echo \"traps=$(trap -p | wc -l)\"",
  // The command's own signal state, as its child sees it: nothing ignored, nothing blocked.
  "grep -E '^Sig(Ign|Blk):' /proc/self/status | tr -s '\\t ' ' '",
  // A session and a process group of its own: fields 1, 5 and 6 of /proc/<pid>/stat are pid, pgrp, session.
  "read -r pid _ _ _ pgrp sid _ < /proc/$$/stat; echo \"own_session=$([ \"$pid\" = \"$pgrp\" ] && [ \"$pid\" = \"$sid\" ] && echo yes || echo no)\"",
  // Every descriptor but the standard three and the marker (fd 3), with where it points.
  // Listed into a file first: in a pipeline the shell holds the pipe it is making while ls runs.
  "ls -l /proc/$$/fd > .fds; awk 'NR > 1 && $9 > 3 { print \"fd\", $9, \"->\", $11 }' .fds",
].join("; ");

test("local: nothing a command changes reaches the next one (environment, directory, umask, limits, traps, signals, descriptors)", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const workspaceId = await newWorkspace(t.context.server.clients.grpc);
  await tools.bash({ workspaceId, command: "mkdir -p sub" });
  const first = await tools.bash({ workspaceId, command: PROBE });
  t.is(first.exitCode, 0, first.stderr);
  // Everything a command can change about itself and what it starts.
  const messy = await tools.bash({
    workspaceId,
    command: "export LEAK=1; cd sub; umask 077; ulimit -S -n 64; trap 'echo x' USR1; trap '' INT TERM HUP; exec 7>/dev/null 8</dev/null; set -m; sleep 0.1 & disown; echo done",
  });
  t.is(messy.exitCode, 0, messy.stderr);
  const second = await tools.bash({ workspaceId, command: PROBE });
  t.is(second.exitCode, 0, second.stderr);
  t.is(second.stdout, first.stdout);
  const lines = second.stdout.split("\n");
  t.true(lines.includes("leak=unset"));
  t.true(lines.includes(`cwd=${workspaceId}`), second.stdout);
  t.true(lines.includes("traps=0"));
  t.true(lines.includes("SigIgn: 0000000000000000"), second.stdout);
  t.true(lines.includes("SigBlk: 0000000000000000"), second.stdout);
  t.true(lines.includes("own_session=yes"));
  // No other descriptor, not even one the server inherited from whatever started it (the test
  // runner's own): the launcher closes those as it starts.
  t.deepEqual(lines.filter((l) => l.startsWith("fd ")), []);
});

test("local: a command's parent is the workspace's launcher, which runs under the workspace's limits", async (t) => {
  const { tools, workspaces } = t.context.server.clients.grpc;
  const { workspace } = await workspaces.createWorkspace({ limits: { disk: "64Mi" } });
  const workspaceId = workspace!.id;
  const res = await tools.bash({ workspaceId, command: 'echo "parent=$(cat /proc/$PPID/comm)"; echo "fsize=$(ulimit -f)"; cat /proc/self/cgroup' });
  t.is(res.exitCode, 0, res.stderr);
  if (perl !== undefined) t.regex(res.stdout, /^parent=perl$/m);
  // RLIMIT_FSIZE at the disk limit, in bash's 1024-byte blocks.
  t.regex(res.stdout, new RegExp(`^fsize=${(64 * 2 ** 20) / 1024}$`, "m"));
  // Where the server may make cgroups (as root here), the command is in the workspace's.
  if (process.getuid?.() === 0) t.true(res.stdout.includes(workspaceId), res.stdout);
});

test("local: a launcher killed under its command ends that command, and the next call gets a new launcher", async (t) => {
  t.not(perl, undefined, "this host has no Perl: commands are spawned, and there is no launcher to kill");
  const { tools } = t.context.server.clients.grpc;
  const workspaceId = await newWorkspace(t.context.server.clients.grpc);
  // Only a launcher is killed: were the command spawned by the executor (the fallback), killing its
  // parent would take down every other test's workspace too.
  const killed = await tools.bash({ workspaceId, command: '[ "$(cat /proc/$PPID/comm)" = perl ] || { echo "parent is $(cat /proc/$PPID/comm)"; exit 3; }; kill -9 $PPID; sleep 30; echo survived' });
  t.not(killed.exitCode, 3, killed.stdout);
  t.is(killed.exitCode, 137);
  t.false(killed.stdout.includes("survived"));
  const next = await tools.bash({ workspaceId, command: "echo again; cat /proc/$PPID/comm" });
  t.is(next.exitCode, 0, next.stderr);
  t.is(next.stdout, "again\nperl\n");
});

test("local: a command that kills its launcher as soon as it runs is run once, never again by a spawn", async (t) => {
  t.not(perl, undefined);
  const { tools } = t.context.server.clients.grpc;
  const workspaceId = await newWorkspace(t.context.server.clients.grpc);
  const { waitDead } = await import("./helpers/process.ts");
  // Each run leaves a line (its pid and its parent's name), then kills its launcher at once: the
  // launcher's word that it started the command may still be in its pipe when its exit is seen.
  for (let i = 0; i < 12; i++) {
    const r = await tools.bash({ workspaceId, command: 'echo "$$ $(cat /proc/$PPID/comm)" >> runs.txt; kill -9 $PPID; sleep 30' });
    t.is(r.exitCode, 137, `run ${i}: ${r.stdout}${r.stderr}`);
  }
  const runs = await tools.readFile({ workspaceId, path: "runs.txt" });
  const lines = runs.content.split("\n").map((l) => /^\d+: (\d+) perl$/.exec(l)).filter((m) => m !== null);
  t.is(lines.length, 12, runs.content);
  t.is(runs.totalLines, 12, runs.content);
  // And none of them lives on (its launcher gone, it was killed all the same).
  t.true(await waitDead(lines.map((m) => Number(m[1])), 5000), runs.content);
});

test("local: AGENT_WORKSPACE_LOCAL_LAUNCHER=spawn starts each command from the executor, with the same results", async (t) => {
  const { tools } = t.context.spawnServer.clients.grpc;
  const workspaceId = await newWorkspace(t.context.spawnServer.clients.grpc);
  const res = await tools.bash({ workspaceId, command: 'echo "parent=$(cat /proc/$PPID/comm)"; echo err >&2; exit 3' });
  t.is(res.exitCode, 3);
  t.is(res.stderr, "err\n");
  t.notRegex(res.stdout, /parent=perl/);
});

test("launcher: a failed exec reports its errno as spawn does, and a NUL is refused before anything runs", async (t) => {
  t.not(perl, undefined);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  const env = { PATH: "/usr/bin:/bin" };
  await t.throwsAsync(l.launch({ argv: ["no-such-program-anywhere"], env, cwd: "/", marker: "" }), { code: "ENOENT" } as never);
  await t.throwsAsync(l.launch({ argv: ["true"], env, cwd: "/no/such/directory", marker: "" }), { code: "ENOENT" } as never);
  const dir = mkdtempSync(path.join(tmpdir(), "aw-launcher-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(path.join(dir, "not-executable"), "#!/bin/sh\necho ran\n", { mode: 0o644 });
  await t.throwsAsync(l.launch({ argv: [path.join(dir, "not-executable")], env, cwd: "/", marker: "" }), { code: "EACCES" } as never);
  t.throws(() => l.launch({ argv: ["echo", "a\0b"], env, cwd: "/", marker: "" }), { code: "ERR_INVALID_ARG_VALUE" } as never);
  // The launcher is still there for the next one.
  const c = await l.launch({ argv: ["sh", "-c", "echo ok"], env, cwd: "/", marker: "" });
  const out: Buffer[] = [];
  c.stdout.on("data", (d: Buffer) => out.push(d));
  const code = await new Promise<number | null>((r) => c.once("exit", (n: number | null) => r(n)));
  await new Promise((r) => c.stdout.once("close", r));
  t.is(code, 0);
  t.is(Buffer.concat(out).toString(), "ok\n");
});

test("launcher: commands that end as fast as they start, many at once, keep their own output and exit status", async (t) => {
  t.not(perl, undefined);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  const run = async (i: number) => {
    const c = await l.launch({ argv: ["sh", "-c", `printf 'out%s' ${i}; printf 'err%s' ${i} >&2; exit ${i % 7}`], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "" });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    c.stdout.on("data", (d: Buffer) => out.push(d));
    c.stderr.on("data", (d: Buffer) => err.push(d));
    const exited = new Promise<[number | null, string | null]>((r) => c.once("exit", (code, sig) => r([code, sig])));
    await Promise.all([new Promise((r) => c.stdout.once("close", r)), new Promise((r) => c.stderr.once("close", r))]);
    return { i, exit: await exited, out: Buffer.concat(out).toString(), err: Buffer.concat(err).toString() };
  };
  const results = await Promise.all(Array.from({ length: 60 }, (_, i) => run(i)));
  for (const r of results) {
    t.deepEqual(r.exit, [r.i % 7, null]);
    t.is(r.out, `out${r.i}`);
    t.is(r.err, `err${r.i}`);
  }
  // A megabyte through the pipe, whole.
  const big = await l.launch({ argv: ["head", "-c", "1048576", "/dev/zero"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "" });
  let bytes = 0;
  big.stdout.on("data", (d: Buffer) => (bytes += d.length));
  await new Promise((r) => big.stdout.once("close", r));
  t.is(bytes, 1048576);
});

test("launcher: one whose limits cannot be applied hands its commands to a spawn, which fails saying why (exit 125), not with an error that says nothing", async (t) => {
  t.not(perl, undefined);
  // The limits command as local-limits.ts writes it, with a step that fails.
  const prefix = ["/bin/sh", "-c", `false && exec "$@"; echo "agent-workspace: the workspace's resource limits could not be applied" >&2; exit 125`, "agent-workspace-limits"];
  const l = new Launcher(perl!, prefix, "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  const events = [];
  for await (const ev of runProcess({ argv: ["sh", "-c", "echo ran"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", launcher: l, spawnArgv: () => [...prefix, "sh", "-c", "echo ran"], timeoutMs: 10_000, killGraceMs: 1000 })) {
    events.push(ev);
  }
  const exit = events.find((e) => e.type === "exited");
  t.is(exit?.type === "exited" ? exit.exit.exitCode : undefined, 125);
  t.is(exit?.type === "exited" ? exit.exit.spawnError : "none", undefined);
  const stderr = Buffer.concat(events.flatMap((e) => (e.type === "stderr" ? [Buffer.from(e.data)] : []))).toString();
  t.regex(stderr, /resource limits could not be applied/);
  t.false(events.some((e) => e.type === "stdout"));
});

test("launcher: a command's exit is reported even when no SIGCHLD reaches the launcher (Perl runs its handler late, and a signal that lands just before a blocking read is missed)", async (t) => {
  t.not(perl, undefined);
  // The launcher starts with SIGCHLD blocked: its handler never runs, which is the race at its worst.
  // Commands are forked with an empty mask, as always.
  const blockChld = [perl!, "-e", "use POSIX (); POSIX::sigprocmask(POSIX::SIG_BLOCK(), POSIX::SigSet->new(POSIX::SIGCHLD())) or die $!; exec { $ARGV[0] } @ARGV or die $!"];
  const l = new Launcher(perl!, blockChld, "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  for (let i = 0; i < 10; i++) {
    const c = await l.launch({ argv: ["sh", "-c", `grep -q '^SigBlk:\\s*0*$' /proc/self/status && exit ${i % 4}; exit 99`], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "" });
    const exited = await Promise.race([
      new Promise<[number | null, string | null]>((r) => c.once("exit", (code, sig) => r([code, sig]))),
      new Promise<"stuck">((r) => setTimeout(() => r("stuck"), 10_000).unref()),
    ]);
    t.deepEqual(exited, [i % 4, null], `command ${i}`);
  }
});

/** A captured command's output and exit: what the launcher sent of each stream, and its exit. */
async function captured(l: Launcher, argv: string[], keep: number, marker = "") {
  const c = await l.launch({ argv, env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker, keep });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  c.stdout.on("data", (d: Buffer) => out.push(d));
  c.stderr.on("data", (d: Buffer) => err.push(d));
  const exited = new Promise<[number | null, string | null]>((r) => c.once("exit", (code, sig) => r([code, sig])));
  await Promise.all([new Promise((r) => c.stdout.once("end", r)), new Promise((r) => c.stderr.once("end", r))]);
  return { child: c, exit: await exited, out: Buffer.concat(out), err: Buffer.concat(err) };
}

test("launcher, captured: at most `keep` bytes of each stream come back, every byte value intact, and all of it is counted", async (t) => {
  t.not(perl, undefined);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  // Every byte value, newlines and NULs among them, on both streams; 300 kB of stdout beyond it.
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  const script = `printf '${[...all].map((b) => `\\${b.toString(8).padStart(3, "0")}`).join("")}'; printf '${[...all].map((b) => `\\${b.toString(8).padStart(3, "0")}`).join("")}' >&2; head -c 300000 /dev/zero; exit 3`;
  const r = await captured(l, ["bash", "-c", script], 1000);
  t.deepEqual(r.exit, [3, null]);
  t.is(r.out.length, 1000);
  t.deepEqual(r.out.subarray(0, 256), all);
  t.true(r.out.subarray(256).every((b) => b === 0));
  t.deepEqual(r.err, all);
  t.deepEqual(r.child.outputBytes, { stdout: 256 + 300000, stderr: 256 });
  // keep 0: nothing sent, all counted.
  const none = await captured(l, ["sh", "-c", "echo out; echo err >&2"], 0);
  t.is(none.out.length + none.err.length, 0);
  t.deepEqual(none.child.outputBytes, { stdout: 4, stderr: 4 });
  // Many at once, each with its own output and status.
  const many = await Promise.all(Array.from({ length: 40 }, (_, i) => captured(l, ["sh", "-c", `printf 'out%s' ${i}; printf 'err%s' ${i} >&2; exit ${i % 5}`], 64)));
  many.forEach((m, i) => {
    t.deepEqual(m.exit, [i % 5, null]);
    t.is(m.out.toString(), `out${i}`);
    t.is(m.err.toString(), `err${i}`);
  });
});

test("launcher: a marker it makes itself is the command's fd 3, and /proc names it as the child says", async (t) => {
  t.not(perl, undefined);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  for (const keep of [100, undefined]) {
    const c = await l.launch({ argv: ["sh", "-c", "readlink /proc/self/fd/3; env -i readlink /proc/self/fd/3"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "+", keep });
    const out: Buffer[] = [];
    c.stdout.on("data", (d: Buffer) => out.push(d));
    await new Promise((r) => c.stdout.once("end", r));
    t.regex(c.markerLink ?? "", /^pipe:\[\d+\]$/);
    t.is(Buffer.concat(out).toString(), `${c.markerLink}\n${c.markerLink}\n`);
  }
});

test("launcher, captured: output given up on (a process kept the pipe) stops being read, and the launcher goes on serving", async (t) => {
  t.not(perl, undefined);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  // Its pid, its launcher's pid, and its stdout pipe as /proc names it; then a writer in a session
  // of its own (out of the group the launcher kills as it reaps the command: the command waits
  // until it is), which says its pid.
  const c = await l.launch({ argv: ["sh", "-c", "echo $$ $PPID $(readlink /proc/$$/fd/1); setsid sh -c 'echo writer $$; while :; do echo more; sleep 0.01; done' & w=$!; while [ \"$(cut -d' ' -f6 /proc/$w/stat)\" != $w ]; do sleep 0.01; done; exit 0"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "", keep: 1 << 20 });
  let first = "";
  await new Promise<void>((r) =>
    c.stdout.on("data", (d: Buffer) => {
      first += d.toString();
      if (first.includes("more")) r();
    }),
  );
  const [, launcher, pipe] = first.split("\n")[0].split(" ");
  const writer = Number(/^writer (\d+)$/m.exec(first)?.[1]);
  const held = () => readdirSync(`/proc/${launcher}/fd`).some((fd) => {
    try {
      return readlinkSync(`/proc/${launcher}/fd/${fd}`) === pipe;
    } catch {
      return false;
    }
  });
  t.true(held(), "the launcher reads the command's stdout");
  // The caller gives up on the streams: the launcher is told and closes its read ends.
  c.stdout.destroy();
  c.stderr.destroy();
  for (let i = 0; i < 100 && held(); i++) await new Promise((r) => setTimeout(r, 20));
  t.false(held(), "the launcher still holds the pipe given up on");
  try {
    process.kill(-writer, "SIGKILL");
  } catch {
    // Gone.
  }
  const next = await captured(l, ["sh", "-c", "echo next"], 100);
  t.is(next.out.toString(), "next\n");
  t.deepEqual(next.exit, [0, null]);
});

test("launcher: as it reaps a command it kills what is left of its process group, before it reports the exit", async (t) => {
  t.not(perl, undefined);
  const { alive, waitDead } = await import("./helpers/process.ts");
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  for (const keep of [100, undefined]) {
    // A background job in the command's group, its output sent elsewhere so the pipes end with the command.
    const c = await l.launch({ argv: ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "", keep });
    let out = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const ended = new Promise((r) => c.stdout.once("end", r));
    await new Promise((r) => c.once("exit", r));
    t.true(c.groupKilled, "the child says its group was killed");
    await ended;
    const job = Number(out.trim());
    t.true(job > 0);
    t.true(await waitDead([job], 5000), `the background job survived its command (keep ${keep})`);
    if (alive(job)) process.kill(job, "SIGKILL");
  }
});

test("launcher: when its stdin ends (its caller died), it kills the commands still running", async (t) => {
  t.not(perl, undefined);
  const { spawn } = await import("node:child_process");
  const { alive, waitDead } = await import("./helpers/process.ts");
  // A caller that dies without a word: the launcher's stdin ends, nothing else happens.
  const caller = spawn(process.execPath, ["-e", `
    const { Launcher, findPerl } = await import(${JSON.stringify(new URL("../providers/executor/launcher.ts", import.meta.url).href)});
    const l = new Launcher(findPerl(), [], "/usr/bin:/bin", () => {});
    for (const keep of [100, undefined]) {
      const c = await l.launch({ argv: ["sleep", "300"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "", keep });
      console.log(c.pid);
    }
  `], { stdio: ["ignore", "pipe", "inherit"] });
  const pids: number[] = [];
  await new Promise<void>((resolve) => caller.stdout.on("data", (d: Buffer) => {
    pids.push(...d.toString().trim().split("\n").map(Number));
    if (pids.length === 2) resolve();
  }));
  t.true(pids.every((p) => alive(p)));
  caller.kill("SIGKILL");
  t.true(await waitDead(pids, 5000), "a command outlived its launcher's caller");
});

/** The launcher's children that are Perl (its spare: forked ahead, not yet a command), by pid. */
function perlChildren(launcher: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "latin1");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(f[1]) === launcher && stat.includes("(perl)")) out.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}

/** What each descriptor of `pid` points at, as `fd -> target`. */
function descriptorsOf(pid: number): Map<number, string> {
  const out = new Map<number, string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      out.set(Number(fd), readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // Closed meanwhile.
    }
  }
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("launcher, spare: a captured command starts from a child forked ahead, which keeps nothing of the launcher's but its own pipes, so a command in a slot still ends when it does", async (t) => {
  t.not(perl, undefined);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  const first = await captured(l, ["sh", "-c", "echo $PPID"], 100);
  const launcher = Number(first.out.toString().trim());
  t.true(launcher > 0);
  // The spare forked after that command: it closes what it inherited (the slots' pipes, the
  // launcher's stdin and stdout) before it waits for a command.
  let spare: number | undefined;
  let fds = new Map<number, string>();
  for (let i = 0; i < 250; i++) {
    [spare] = perlChildren(launcher);
    if (spare !== undefined) {
      fds = descriptorsOf(spare);
      if (fds.size <= 6) break;
    }
    await sleep(20);
  }
  t.not(spare, undefined, "no spare child of the launcher");
  // The launcher names it (the sweep after a command skips that pid).
  t.is(l.spare, spare!);
  const launcherOwn = descriptorsOf(launcher);
  // stdin from /dev/null, stdout, stderr and the marker as pipes; its instruction pipe and the pipe
  // its failed exec would be reported on: six, none the launcher's own stdin or stdout.
  t.is(fds.size, 6, [...fds].map(([fd, to]) => `${fd} -> ${to}`).join(", "));
  t.is(fds.get(0), "/dev/null");
  for (const fd of [1, 2, 3]) t.regex(fds.get(fd) ?? "", /^pipe:/);
  const targets = new Set(fds.values());
  t.false(targets.has(launcherOwn.get(0) ?? "-"), "the spare holds the launcher's stdin");
  t.false(targets.has(launcherOwn.get(1) ?? "-"), "the spare holds the launcher's stdout");
  // A command in a slot (its pipes made before the spare was forked) ends when it does: a spare
  // that kept the slot's write end would hold its stdout open.
  const slotted = await l.launch({ argv: ["sh", "-c", "echo slot"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "" });
  let out = "";
  slotted.stdout.on("data", (d: Buffer) => (out += d.toString()));
  const ended = await Promise.race([new Promise((r) => slotted.stdout.once("end", () => r(true))), sleep(5000).then(() => false)]);
  t.true(ended, "a slot command's stdout did not end");
  t.is(out, "slot\n");
  // The next captured command is that spare.
  // ls in the command's place (same pid, the same descriptors): the shell's own pipes of a
  // pipeline would come and go while it lists them.
  const next = await captured(l, ["sh", "-c", "echo $$; exec ls /proc/self/fd"], 1000, "+");
  const [pid, ...fdNames] = next.out.toString().trim().split("\n");
  const list = fdNames.map(Number).sort((a, b) => a - b).join(" ");
  t.is(Number(pid), spare!);
  t.is(next.child.pid, spare!);
  // Taken for that command: no longer named as the spare.
  t.not(l.spare, spare!);
  t.regex(next.child.markerLink ?? "", /^pipe:\[\d+\]$/);
  // Its own descriptors: the standard three, the marker, and the one ls lists /proc with.
  t.deepEqual(list.trim().split(" ").map(Number).filter((fd) => fd <= 3), [0, 1, 2, 3]);
  t.true(list.trim().split(" ").length <= 5, list);
  t.deepEqual(next.exit, [0, null]);
});

test("launcher, spare: one killed by a command is replaced, and every later command runs once, with its own output and status", async (t) => {
  t.not(perl, undefined);
  const dir = mkdtempSync(path.join(tmpdir(), "aw-spare-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  // Waits for a Perl sibling (the spare forked after this command started) and kills it.
  const killer = [
    "for i in $(seq 1 200); do",
    "  for d in /proc/[0-9]*; do read -r pid comm state ppid rest < $d/stat 2>/dev/null || continue;",
    "    if [ \"$ppid\" = \"$PPID\" ] && [ \"$comm\" = '(perl)' ]; then kill -9 $pid && echo killed $pid && exit 0; fi; done; sleep 0.01; done; exit 9",
  ].join("\n");
  for (let round = 0; round < 3; round++) {
    const k = await captured(l, ["bash", "-c", killer], 100);
    t.deepEqual(k.exit, [0, null], "no spare to kill");
    const [said, killed] = k.out.toString().trim().split(" ");
    t.is(said, "killed");
    // The launcher stops naming a spare that died (before its pid can be handed out again).
    for (let i = 0; i < 250 && l.spare === Number(killed); i++) await sleep(20);
    t.not(l.spare, Number(killed), "the launcher still names a dead spare");
    // Commands right after, one at a time and several at once: each runs once.
    for (let i = 0; i < 3; i++) {
      const r = await captured(l, ["sh", "-c", `echo ${round}.${i} >> ${dir}/runs; echo out${i}; exit ${i}`], 100);
      t.deepEqual(r.exit, [i, null]);
      t.is(r.out.toString(), `out${i}\n`);
    }
    const many = await Promise.all(Array.from({ length: 6 }, (_, i) => captured(l, ["sh", "-c", `echo ${round}.m${i} >> ${dir}/runs; echo m${i}`], 100)));
    many.forEach((m, i) => t.is(m.out.toString(), `m${i}\n`));
  }
  const runs = readFileSync(path.join(dir, "runs"), "utf8").trim().split("\n").sort();
  const expected = [0, 1, 2].flatMap((round) => [...[0, 1, 2].map((i) => `${round}.${i}`), ...[0, 1, 2, 3, 4, 5].map((i) => `${round}.m${i}`)]).sort();
  t.deepEqual(runs, expected);
});

test("launcher, spare: one a command stopped, or killed after it was given its command, never blocks the launcher nor loses the command, which runs once", async (t) => {
  t.not(perl, undefined);
  const dir = mkdtempSync(path.join(tmpdir(), "aw-spare-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  // Stops the spare (SIGSTOP: it reads nothing and says nothing), and with `late` also kills it
  // 0.3 s later from a session of its own (out of the group the launcher kills as it reaps this
  // command): by then the launcher has given it the next command and waits for its word.
  const stopper = (late: boolean) =>
    [
      "for i in $(seq 1 200); do",
      "  for d in /proc/[0-9]*; do read -r pid comm state ppid rest < $d/stat 2>/dev/null || continue;",
      "    if [ \"$ppid\" = \"$PPID\" ] && [ \"$comm\" = '(perl)' ]; then kill -STOP $pid || exit 8;",
      late ? "      setsid sh -c \"sleep 0.3; kill -9 $pid\" </dev/null >/dev/null 2>&1 &" : "",
      "      echo stopped; exit 0; fi; done; sleep 0.01; done; exit 9",
    ].join("\n");
  for (const late of [false, true]) {
    const s = await captured(l, ["bash", "-c", stopper(late)], 100);
    t.deepEqual(s.exit, [0, null], `no spare to stop (late ${late})`);
    t.is(s.out.toString(), "stopped\n");
    const r = await captured(l, ["sh", "-c", `echo ${late} >> ${dir}/runs; echo ran`], 100);
    t.deepEqual(r.exit, [0, null], `late ${late}`);
    t.is(r.out.toString(), "ran\n");
    const after = await captured(l, ["sh", "-c", "echo after"], 100);
    t.is(after.out.toString(), "after\n");
  }
  t.is(readFileSync(path.join(dir, "runs"), "utf8"), "false\ntrue\n");
});

test("launcher, captured: a command's exit is reported after the output it wrote before it exited, even when it exited while the launcher was busy (its caller gives up on pipes that stay quiet after an exit)", async (t) => {
  t.not(perl, undefined);
  const dir = mkdtempSync(path.join(tmpdir(), "aw-order-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const fifo = path.join(dir, "go");
  execFileSync("mkfifo", [fifo]);
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  const first = await captured(l, ["sh", "-c", "echo $PPID"], 100);
  const launcher = Number(first.out.toString().trim());
  // A waits for the test's word, then writes on both streams and exits.
  const a = await l.launch({ argv: ["sh", "-c", `read _ < ${fifo}; printf out-a; printf err-a >&2`], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "", keep: 100 });
  // What had come back of each stream when the exit was reported (nothing is read before: it stays buffered).
  const atExit = new Promise<[string, string]>((r) => a.once("exit", () => r([String(a.stdout.read() ?? ""), String(a.stderr.read() ?? "")])));
  // The launcher is kept busy: the spare forked after A is stopped, so the next command waits on
  // it (2 s) before it is forked instead. A writes and exits meanwhile.
  let spare: number | undefined;
  for (let i = 0; i < 250 && spare === undefined; i++) {
    [spare] = perlChildren(launcher);
    if (spare === undefined) await sleep(20);
  }
  t.not(spare, undefined, "no spare child of the launcher");
  process.kill(spare!, "SIGSTOP");
  const b = captured(l, ["sh", "-c", "echo b"], 100);
  await sleep(300);
  writeFileSync(fifo, "go\n");
  t.deepEqual(await atExit, ["out-a", "err-a"]);
  const rb = await b;
  t.deepEqual(rb.exit, [0, null]);
  t.is(rb.out.toString(), "b\n");
});

test("launcher: a descriptor inherited from whoever started it (not close-on-exec) reaches no command, forked on request or from a spare", async (t) => {
  t.not(perl, undefined);
  // The limits prefix's place: a shell that opens fd 7 without close-on-exec, then execs Perl.
  const l = new Launcher(perl!, ["sh", "-c", 'exec 7</dev/null; exec "$@"', "sh"], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  for (const keep of [100, undefined, 100]) {
    // The shell's own descriptors, listed by its own glob (no child in between).
    const c = await l.launch({ argv: ["sh", "-c", "for f in /proc/$$/fd/*; do echo ${f##*/}; done"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", marker: "", keep });
    let out = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    await new Promise((r) => c.stdout.once("end", r));
    const fds = out.trim().split("\n").map(Number);
    t.deepEqual(fds.slice(0, 3), [0, 1, 2], out);
    t.false(fds.includes(7), `keep ${keep}: the command holds the launcher's inherited fd 7 (${out.trim().split("\n").join(" ")})`);
  }
});

test("launcher, spare: a launcher killed outright (no word to anyone) leaves no spare behind", async (t) => {
  t.not(perl, undefined);
  const { waitDead } = await import("./helpers/process.ts");
  const l = new Launcher(perl!, [], "/usr/bin:/bin", () => undefined);
  t.teardown(() => l.close());
  const first = await captured(l, ["sh", "-c", "echo $PPID"], 100);
  const launcher = Number(first.out.toString().trim());
  let spares: number[] = [];
  for (let i = 0; i < 250 && spares.length === 0; i++) {
    spares = perlChildren(launcher);
    if (spares.length === 0) await sleep(20);
  }
  t.is(spares.length, 1, "no spare child of the launcher");
  // SIGKILL: the launcher kills nothing itself; the spare sees its instruction pipe end and exits.
  process.kill(launcher, "SIGKILL");
  t.true(await waitDead(spares, 5000), `the spare ${spares[0]} outlived its launcher`);
});
