/**
 * An idle sandbox's executor exits, and the next call starts it again (issue 29: an idle workspace
 * should cost little more than its sandbox). Through the real server and real docker and gVisor
 * sandboxes, with an idle time short enough to cross many times (AGENT_WORKSPACE_EXECUTOR_IDLE_MS).
 *
 * What must hold across a sleep: every tool works as before (commands, file operations, a stream,
 * egress through the proxy, whose listener the woken executor opens again); calls that arrive
 * while the executor is deciding to exit are neither lost nor stuck (providers/sandbox-connection.ts
 * Lifetime); a command longer than the idle time is never cut short; a server restarted while the
 * executor sleeps finds the workspace; an executor killed outside a call is started again.
 */
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { PassThrough } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import anyTest, { type TestFn } from "ava";
import { encodeFrame, EXECUTOR_WRAPPER, F, FrameReader, WAKE } from "../providers/executor/protocol.ts";
import { SandboxConnection } from "../providers/sandbox-connection.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import { type ClientSet, startServer, type TestServer } from "./helpers/server.ts";
import { eventually } from "./helpers/sessions.ts";

interface Ctx {
  http: Server;
  httpPort: number;
  server: TestServer;
  dataDir: string;
}
const test = anyTest as TestFn<Ctx>;

const engines = await probeEngines();
const CONTAINERS = (["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "an executor that exits when idle"));

const IDLE_MS = 400;
const DEST = "127.0.0.2";
const env = () => ({
  AGENT_WORKSPACE_EXECUTOR_IDLE_MS: String(IDLE_MS),
  AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: `${DEST}/32`,
  AGENT_WORKSPACE_EGRESS_HOSTS: `pkg.test=${DEST}`,
});

test.before(async (t) => {
  const http = createServer((req, res) => res.end(`hello ${req.url}\n`));
  const httpPort = await new Promise<number>((resolve) => http.listen(0, DEST, () => resolve((http.address() as AddressInfo).port)));
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-idle-"));
  const server = await startServer({ dataDir, env: env() });
  t.context = { http, httpPort, server, dataDir };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  t.context.http?.close();
  if (t.context.dataDir) await rm(t.context.dataDir, { recursive: true, force: true });
});

/**
 * The command lines of the processes in the workspace's sandbox, read from its own /proc (the same
 * under runc and runsc; `docker top` cannot list a gVisor sandbox's processes), minus the reader.
 */
function processes(workspaceId: string): string[] {
  const script = 'for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] || { tr "\\0" " " < $p/cmdline; echo; } 2>/dev/null; done';
  return execFileSync("docker", ["exec", `aw-${workspaceId}`, "sh", "-c", script], { encoding: "utf8" })
    .split("\n")
    .filter((l) => l.trim() !== "" && !l.startsWith("tr "));
}
const EXECUTOR = /^\/opt\/agent-workspace\/node /;
const executorRunning = (workspaceId: string) => processes(workspaceId).some((l) => EXECUTOR.test(l));
const asleep = (workspaceId: string, what: string) => eventually(() => (executorRunning(workspaceId) ? undefined : true), 30_000, what);

async function bash(clients: ClientSet, workspaceId: string, command: string) {
  const r = await clients.tools.bash({ workspaceId, command, timeoutMs: 60_000n });
  return { exit: r.exitCode, out: r.stdout, err: r.stderr };
}

async function workspaceFor(c: Ctx, provider: string, name: string): Promise<string> {
  const op = c.server.clients.grpc;
  const id = `idle-${name}-${provider}`;
  await op.config.createAgentType({
    agentType: { id, workspace: { enabled: true, provider, tools: ["bash", "read", "write", "edit", "list", "glob", "grep"], network: { mode: "allowlist", allow: [`pkg.test:${c.httpPort}`] } } },
  });
  return (await op.workspaces.createWorkspace({ agentType: id })).workspace!.id;
}

for (const provider of CONTAINERS) {
  test.serial(`${provider}: an idle executor exits; the next calls start it again, and commands, file operations, a stream, grep and egress work as before`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = await workspaceFor(c, provider, "tools");
    try {
      t.is((await bash(op, id, "echo first")).out, "first\n");
      await asleep(id, "the executor to exit when idle");
      t.deepEqual(
        processes(id).map((l) => l.startsWith(`/bin/sh -c ${EXECUTOR_WRAPPER} aw-executor `)),
        [true],
        "the wrapper alone stays, as the sandbox's main process",
      );

      // A file operation wakes it.
      await op.tools.writeFile({ workspaceId: id, path: "notes.txt", content: "alpha\nbeta\n" });
      t.true(executorRunning(id));
      await asleep(id, "the executor to exit again");
      t.is((await op.tools.readFile({ workspaceId: id, path: "notes.txt" })).content, "1: alpha\n2: beta");
      await asleep(id, "the executor to exit again");
      const grep = await op.tools.grep({ workspaceId: id, pattern: "beta" });
      t.deepEqual(grep.matches.map((m) => `${m.path}:${m.line}`), ["notes.txt:2"]);
      await asleep(id, "the executor to exit again");

      // A stream, then egress through the proxy: the woken executor listens again.
      const chunks: string[] = [];
      for await (const r of op.tools.streamBash({ workspaceId: id, command: "for i in 1 2 3; do echo $i; done" })) {
        if (r.event.case === "stdout") chunks.push(new TextDecoder().decode(r.event.value));
      }
      t.is(chunks.join(""), "1\n2\n3\n");
      await asleep(id, "the executor to exit again");
      t.is((await bash(op, id, `curl -sS http://pkg.test:${c.httpPort}/after-sleep`)).out, "hello /after-sleep\n");
      // Nothing of the commands outlives them, and the wrapper is not taken for one of them.
      await asleep(id, "the executor to exit again");
      t.is((await bash(op, id, "cat notes.txt | wc -l")).out.trim(), "2");
    } finally {
      await op.workspaces.deleteWorkspace({ id }).catch(() => undefined);
    }
  });

  test.serial(`${provider}: calls arriving around the idle moment, alone or in pairs, are all answered`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = await workspaceFor(c, provider, "race");
    try {
      // Gaps spread over the idle time and the BYE/GONE exchange after it, so calls land before
      // IDLE, between IDLE and BYE, between BYE and GONE, and after GONE.
      for (let i = 0; i < 24; i++) {
        await sleep(IDLE_MS - 60 + ((i * 37) % 180));
        if (i % 3 === 2) {
          const [a, b] = await Promise.all([bash(op, id, `echo a${i}`), op.tools.readFile({ workspaceId: id, path: `f${i - 1}.txt` })]);
          t.is(a.out, `a${i}\n`);
          t.is(b.content, `1: ${i - 1}`);
        } else {
          await op.tools.writeFile({ workspaceId: id, path: `f${i}.txt`, content: `${i}\n` });
        }
      }
      t.is((await bash(op, id, "cat f0.txt f22.txt")).out, "0\n22\n");
    } finally {
      await op.workspaces.deleteWorkspace({ id }).catch(() => undefined);
    }
  });

  test.serial(`${provider}: a command longer than the idle time runs to its end, its output streamed throughout`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = await workspaceFor(c, provider, "long");
    try {
      const r = await bash(op, id, `for i in 1 2 3 4; do echo $i; sleep ${(IDLE_MS / 1000) * 0.8}; done; echo done`);
      t.is(r.exit, 0);
      t.is(r.out, "1\n2\n3\n4\ndone\n");
      // Quiet for longer than the idle time, with nothing written: still not cut short.
      const quiet = await bash(op, id, `sleep ${(IDLE_MS * 3) / 1000}; echo still here`);
      t.is(quiet.out, "still here\n");
    } finally {
      await op.workspaces.deleteWorkspace({ id }).catch(() => undefined);
    }
  });
}

if (CONTAINERS.includes("docker")) {
  test.serial("docker: a server restarted while the executor sleeps finds the workspace; an executor killed outside a call is started again by the next one", async (t) => {
    const c = t.context;
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-idle-restart-"));
    const servers: TestServer[] = [];
    let workspaceId = "";
    try {
      const first = await startServer({ dataDir, env: env() });
      servers.push(first);
      await first.clients.grpc.config.createAgentType({ agentType: { id: "idle-restart", workspace: { enabled: true, provider: "docker", tools: ["bash", "read", "write"] } } });
      workspaceId = (await first.clients.grpc.workspaces.createWorkspace({ agentType: "idle-restart" })).workspace!.id;
      await first.clients.grpc.tools.writeFile({ workspaceId, path: "kept.txt", content: "kept\n" });
      await asleep(workspaceId, "the executor to exit when idle");
      await first.close();

      const second = await startServer({ dataDir, env: env() });
      servers.push(second);
      t.is((await bash(second.clients.grpc, workspaceId, "cat kept.txt")).out, "kept\n");

      // Killed from outside while idle (the host's root can): the next call starts a new one.
      // docker top: host pids (runc); the executor's line has its command right after the TIME column.
      const pid = execFileSync("docker", ["top", `aw-${workspaceId}`], { encoding: "utf8" })
        .split("\n")
        .find((l) => /\d\d:\d\d:\d\d\s+\/opt\/agent-workspace\/node /.test(l))
        ?.trim()
        .split(/\s+/)[1];
      t.truthy(pid, "the executor is running after the call");
      process.kill(Number(pid), "SIGKILL");
      const after = await eventually(async () => {
        try {
          return await bash(second.clients.grpc, workspaceId, "cat kept.txt");
        } catch {
          return undefined;
        }
      }, 60_000, "a call to succeed after the executor was killed");
      t.is(after.out, "kept\n", JSON.stringify(after));
      t.is(JSON.parse(execFileSync("docker", ["inspect", "--format", "{{json .RestartCount}}", `aw-${workspaceId}`], { encoding: "utf8" })), 0, "the container was not restarted");

      // Killed during a command by someone else (no OOM): the call fails, saying the sandbox
      // stopped responding, and the next executor first kills what the command left.
      const executorDuring = async (marker: string) =>
        eventually(() => {
          const top = execFileSync("docker", ["top", `aw-${workspaceId}`], { encoding: "utf8" });
          return top.includes(marker) ? top.split("\n").find((l) => /\d\d:\d\d:\d\d\s+\/opt\/agent-workspace\/node /.test(l))?.trim().split(/\s+/)[1] : undefined;
        }, 30_000, "the command to start");
      // `sleep 302` starts only once left.pid is written: the executor is killed after that, never
      // between the fork and the write (which left an empty pid file, read as a survivor, in one CI run).
      const killed = bash(second.clients.grpc, workspaceId, "sleep 301 & echo $! > left.pid; sleep 302; wait");
      process.kill(Number(await executorDuring("sleep 302")), "SIGKILL");
      await t.throwsAsync(killed, { message: /stopped responding/ });
      const left = await bash(second.clients.grpc, workspaceId, 'p=$(cat left.pid); if [ -z "$p" ]; then echo "no pid"; elif [ -e /proc/$p ]; then echo "still there"; else echo gone; fi');
      t.is(left.out, "gone\n", "the orphaned sleep was killed by the next executor");
    } finally {
      const last = servers.at(-1);
      if (workspaceId !== "" && last) await last.clients.grpc.workspaces.deleteWorkspace({ id: workspaceId }).catch(() => undefined);
      for (const s of servers) await s.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  test.serial("docker: an executor the OOM killer takes during a command reports that command as OOM-killed, and the workspace stays usable", async (t) => {
    const op = t.context.server.clients.grpc;
    const { workspace } = await op.workspaces.createWorkspace({ provider: "docker", limits: { memory: "128M" } });
    const workspaceId = workspace!.id;
    try {
      // The executor is made the OOM killer's first choice once the command runs (the command
      // keeps its own score): then a memory bomb takes the executor, as it can on a loaded host.
      const bomb = op.tools.bash({ workspaceId, command: "sleep 1; head -c 600m /dev/zero | tail", timeoutMs: 60_000n });
      const pid = await eventually(() => {
        const top = execFileSync("docker", ["top", `aw-${workspaceId}`], { encoding: "utf8" });
        return top.includes("sleep 1") ? top.split("\n").find((l) => /\d\d:\d\d:\d\d\s+\/opt\/agent-workspace\/node /.test(l))?.trim().split(/\s+/)[1] : undefined;
      }, 30_000, "the command to start");
      writeFileSync(`/proc/${pid}/oom_score_adj`, "1000");
      const r = await bomb;
      t.is(r.exitCode, 137);
      t.true(r.oomKilled);
      const info = await op.tools.bash({ workspaceId, command: "echo alive" });
      t.is(info.stdout, "alive\n");
      const now = execFileSync("docker", ["top", `aw-${workspaceId}`], { encoding: "utf8" });
      t.false(now.split("\n").some((l) => l.includes(` ${pid} `)), "the OOM killer took the executor, and a new one runs");
    } finally {
      await op.workspaces.deleteWorkspace({ id: workspaceId }).catch(() => undefined);
    }
  });
}

// ───────────── The exchange itself, without a sandbox: the server's end against a scripted executor ─────────────

test("the executor's frame reader skips WAKE bytes between frames however the bytes are split, and a frame's own bytes are never taken for one", (t) => {
  const frames = [encodeFrame(F.PING, 1), encodeFrame(F.OP, 2, Buffer.from("\n\n{}\n")), encodeFrame(F.KILL, 10)];
  const stream = Buffer.concat([Buffer.of(WAKE), frames[0], Buffer.of(WAKE, WAKE), frames[1], Buffer.of(WAKE), frames[2]]);
  for (let cut = 0; cut <= stream.length; cut++) {
    const reader = new FrameReader(undefined, { skipWake: true });
    const got = [...reader.push(stream.subarray(0, cut)), ...reader.push(stream.subarray(cut))];
    t.deepEqual(
      got.map((f) => [f.type, f.id, f.payload.toString()]),
      [[F.PING, 1, ""], [F.OP, 2, "\n\n{}\n"], [F.KILL, 10, ""]],
      `cut at ${cut}`,
    );
  }
  // The server's reader takes no such liberty: a stray byte there is a malformed length.
  t.throws(() => new FrameReader().push(Buffer.concat([Buffer.of(WAKE), frames[0], Buffer.alloc(3)])), { message: /frame length/ });
});

test("the server's end: the executor the connection starts with may end before its first answer when the connection allows it (startExits): that call fails, the next wakes another; without it, or ending again while woken, it is a violation", async (t) => {
  const tick = () => new Promise((r) => setImmediate(r));
  const open = (startExits: number) => {
    const fromExecutor = new PassThrough();
    const toExecutor = new PassThrough();
    const written: Buffer[] = [];
    toExecutor.on("data", (b: Buffer) => written.push(b));
    const conn = new SandboxConnection(fromExecutor, toExecutor, { sleeps: true, startExits });
    return { conn, written, send: (type: number, id: number, payload?: string) => fromExecutor.write(encodeFrame(type, id, payload === undefined ? undefined : Buffer.from(payload))) };
  };
  const wakes = (written: Buffer[]) => Buffer.concat(written).filter((b) => b === WAKE).length;
  /** A connection whose first executor ends (GONE) before it answers its first PING, which fails. */
  const endedFirst = async (startExits: number) => {
    const opened = open(startExits);
    const ping = opened.conn.ping(5000);
    await tick();
    opened.send(F.GONE, 0, "1430");
    await t.throwsAsync(ping);
    return opened;
  };

  // Not allowed: a violation.
  {
    const { conn } = await endedFirst(0);
    t.false(conn.alive);
    t.regex(conn.violation ?? "", /exited as it started/);
  }
  // Allowed once: the call fails, the connection stays; the next call wakes another (WAKE, its
  // PING with id 2, then the call's own with id 3).
  {
    const { conn, written, send } = await endedFirst(1);
    t.true(conn.alive);
    t.is(conn.violation, undefined);
    const next = conn.ping(5000);
    await tick();
    send(F.PONG, 2, "v1");
    await tick();
    send(F.PONG, 3, "v1");
    t.is(await next, "v1");
    t.true(conn.alive);
    t.is(wakes(written), 2, "the connection's own WAKE and the one that woke the second executor");
  }
  // Allowed once, ending again while woken: a violation.
  {
    const { conn, send } = await endedFirst(1);
    const next = conn.ping(5000);
    await tick();
    send(F.GONE, 0, "1430");
    await t.throwsAsync(next);
    t.false(conn.alive);
    t.regex(conn.violation ?? "", /exited as it started/);
  }
});

test("the server's end: IDLE is ignored while a call is in flight; after BYE nothing is written until GONE; the next call sends WAKE, PING and LISTEN first; an executor that dies is reported and woken again", async (t) => {
  const fromExecutor = new PassThrough();
  const toExecutor = new PassThrough();
  const written: Buffer[] = [];
  toExecutor.on("data", (b: Buffer) => written.push(b));
  const conn = new SandboxConnection(fromExecutor, toExecutor, { sleeps: true });
  const exits: string[] = [];
  conn.onExecutorExit = (s) => exits.push(s);
  const sent = () => {
    const all = Buffer.concat(written.splice(0));
    const out: Array<number | string> = [];
    let at = 0;
    while (at < all.length) {
      if (all[at] === WAKE) {
        out.push("WAKE");
        at++;
        continue;
      }
      const len = all.readUInt32BE(at);
      const type = all.readUInt8(at + 4);
      // LISTEN with what it asks for: a woken executor is offered the socket only if it was taken.
      out.push(type === F.LISTEN ? `LISTEN ${all.subarray(at + 9, at + 4 + len).toString()}` : type);
      at += 4 + len;
    }
    return out;
  };
  const answer = (type: number, id: number, payload?: Buffer) => fromExecutor.write(encodeFrame(type, id, payload));
  const gone = (status: string) => fromExecutor.write(Buffer.concat([encodeFrame(F.GONE, 0, Buffer.from(status))]));
  const tick = () => new Promise((r) => setImmediate(r));

  // The connection opens with WAKE (the wrapper may be waiting), then the provider's PING and LISTEN.
  const ping = conn.ping(5000);
  await tick();
  answer(F.PONG, 1, Buffer.from("v1"));
  t.is(await ping, "v1");
  const listening = conn.listen(3128, () => undefined, "/opt/agent-workspace/egress/proxy.sock");
  await tick();
  answer(F.RESULT, 2, Buffer.from('{"via":"channel"}'));
  t.is(await listening, "channel");
  t.deepEqual(sent(), ["WAKE", F.PING, 'LISTEN {"port":3128,"socket":"/opt/agent-workspace/egress/proxy.sock"}']);

  // IDLE while a call is in flight: ignored.
  const op = conn.op({ root: "/workspace", op: "stat", rel: "a" });
  await tick();
  answer(F.IDLE, 0);
  await tick();
  t.deepEqual(sent(), [F.OP]);
  answer(F.RESULT, 3, Buffer.from("{}"));
  await op;

  // IDLE with nothing in flight: BYE, and a call made now waits, writing nothing.
  answer(F.IDLE, 0);
  await tick();
  t.deepEqual(sent(), [F.BYE]);
  t.true(conn.asleep);
  const late = conn.op({ root: "/workspace", op: "stat", rel: "b" });
  await tick();
  t.deepEqual(sent(), [], "nothing reaches the pipe between BYE and GONE");
  gone("0000");
  await tick();
  // GONE: the call wakes a new executor: WAKE, its PING, its LISTEN again, then the call.
  t.deepEqual(sent(), ["WAKE", F.PING]);
  answer(F.PONG, 4, Buffer.from("v1"));
  await tick();
  t.deepEqual(sent(), ['LISTEN {"port":3128}'], "the socket it could not reach is not offered again");
  answer(F.RESULT, 5, Buffer.from('{"via":"channel"}'));
  await tick();
  t.deepEqual(sent(), [F.OP]);
  answer(F.RESULT, 6, Buffer.from('{"size":1}'));
  t.deepEqual(await late, { size: 1 });
  t.is(conn.idleExits, 1);
  t.is(conn.wakes, 1);

  // STAY after BYE: back to work, with what was held meanwhile.
  answer(F.IDLE, 0);
  await tick();
  t.deepEqual(sent(), [F.BYE]);
  answer(F.STAY, 0);
  const after = conn.op({ root: "/workspace", op: "stat", rel: "c" });
  await tick();
  t.deepEqual(sent(), [F.OP], "no WAKE after STAY: the executor never left");
  answer(F.RESULT, 7, Buffer.from("{}"));
  await after;

  // The executor dies during a call: the call fails at once, the connection stays, the next call wakes one.
  const doomed = conn.op({ root: "/workspace", op: "stat", rel: "d" });
  await tick();
  sent();
  gone("1370");
  await t.throwsAsync(doomed, { message: /stopped responding/ });
  t.deepEqual(exits, ["137"]);
  t.true(conn.alive);
  const next = conn.op({ root: "/workspace", op: "stat", rel: "e" });
  await tick();
  t.deepEqual(sent(), ["WAKE", F.PING]);
  // ... and one that exits as it starts is a violation: the provider restarts the sandbox.
  gone("0010");
  await t.throwsAsync(next, { message: /stopped responding/ });
  t.false(conn.alive);
  t.regex(conn.violation ?? "", /exited as it started \(status 001\)/);

  // Lifetime frames from an executor that does not sleep (no wrapper) break the protocol.
  const plainIn = new PassThrough();
  const plain = new SandboxConnection(plainIn, new PassThrough());
  plainIn.write(encodeFrame(F.IDLE, 0));
  await tick();
  t.false(plain.alive);
  t.regex(plain.violation ?? "", /does not sleep/);
});
