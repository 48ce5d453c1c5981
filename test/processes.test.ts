/**
 * ProcessService through the real server, on local, docker and gvisor: background processes that
 * outlive the call that started them. A dev server started in the background answers a later Bash
 * call in the same workspace and streams its log to AttachProcess while it runs; stdin reaches a
 * REPL; a program under a pseudo-terminal sees a terminal of the size asked for, and of the size
 * ResizeProcess sets; SignalProcess ends the whole process tree; the output ring and the limits
 * (processes at once, output kept per workspace) hold and say so; processes end with their session
 * and their workspace, and are reported LOST after a server restart; the agent type's command
 * policy and tool list apply as they do to Bash; and the audit trail records StartProcess as a
 * `bash` call with its command and never the bytes written to stdin.
 *
 * The shared server runs with a 64 KiB ring per stream and at most 2 processes at once per
 * workspace, so the ring and limit scenarios need no server of their own; every other scenario
 * runs at most 2 processes at once in a workspace of its own. The output budget (output kept per
 * workspace) has a second server, and the restart test servers of its own. Scenarios prove
 * behaviour only: they poll with bounded tries and never assert on time.
 */
import { randomBytes, randomInt } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { ExecutionContext } from "ava";
import Docker from "dockerode";
import { AuditEventSchema, AuditOutcome, type AuditEvent } from "../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import {
  type AttachProcessResponse,
  type Process,
  ProcessState,
  type StartProcessRequestSchema,
} from "../gen/agentworkspace/v1/process_pb.js";
import { SessionStatus, WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { LABELS } from "../providers/docker.ts";
import { qmp } from "../providers/microvm-qemu.ts";
import { gate, microvmGate, probeEngines } from "./helpers/engines.ts";
import { alive, type ServerProcess, startServerProcess, waitDead } from "./helpers/process.ts";
import { type ClientSet, expectError, type ServerCtx, serverTest, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, eventually, watchUntilReady } from "./helpers/sessions.ts";

/** Bytes kept per stream per process on the shared server. */
const RING = 65536;
/** Processes running at once per workspace on the shared server. */
const MAX_PROCESSES = 2;
const SETTINGS = { AGENT_WORKSPACE_PROCESS_OUTPUT_BYTES: String(RING), AGENT_WORKSPACE_MAX_PROCESSES: String(MAX_PROCESSES) };
/** Output kept per workspace on the budget server: two processes' reservations (stdout and stderr rings each). */
const BUDGET = 2 * 2 * RING;
const BUDGET_SETTINGS = { AGENT_WORKSPACE_PROCESS_OUTPUT_BYTES: String(RING), AGENT_WORKSPACE_PROCESS_BUFFER_BYTES: String(BUDGET) };

const engines = await probeEngines();
const test = serverTest({ env: SETTINGS });
const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });

type T = ExecutionContext<ServerCtx>;
type StartInit = MessageInitShape<typeof StartProcessRequestSchema>;

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A sleep duration no other process on this host uses, so `pgrep -x 'sleep N'` finds only ours. */
const marker = () => 100_000 + randomInt(800_000);
const uniqueId = (hint: string) => `${hint}-${randomBytes(4).toString("hex")}`;

/**
 * A dev server: listens on a free port of 127.0.0.1, prints the port, then one line per request,
 * and answers every request with a small body. Perl, as the base image has no python3 or node.
 * It reads the request's headers to their end before answering, so closing the connection never
 * resets it (gVisor reset connections closed with unread bytes).
 */
const DEV_SERVER = String.raw`exec perl -MIO::Socket::INET -e '$| = 1; my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 5, ReuseAddr => 1) or die "listen: $!\n"; print "listening on ", $s->sockport, "\n"; while (my $c = $s->accept) { my $req = <$c>; while (my $h = <$c>) { last if $h =~ /^\r?$/ } print "request: $req"; my $body = "hello from dev server\n"; print $c "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ", length($body), "\r\nConnection: close\r\n\r\n", $body; close $c }'`;

/** A Bash command fetching http://127.0.0.1:port/ with bash's /dev/tcp (the image has no curl guarantee), retrying briefly. */
const fetchCommand = (port: number) =>
  String.raw`for i in $(seq 1 50); do if (exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>/dev/null; then exit 0; fi; sleep 0.2; done; echo "could not connect"; exit 1`;

/** StartProcess, returning the process (which it must carry). */
async function start(c: ClientSet, init: StartInit): Promise<Process> {
  const { process: proc } = await c.processes.startProcess(init);
  if (!proc) throw new Error("StartProcess returned no process");
  return proc;
}

/** GetProcess, returning the process. */
async function get(c: ClientSet, workspaceId: string, processId: string): Promise<Process> {
  const { process: proc } = await c.processes.getProcess({ workspaceId, processId });
  if (!proc) throw new Error("GetProcess returned no process");
  return proc;
}

/**
 * Polls ReadProcessOutput (from offset 0) until `pattern` matches the stream's kept output, for up
 * to `ms`; returns that output. Fails early, with what the process wrote, once it has ended
 * without the match.
 */
async function waitForOutput(c: ClientSet, workspaceId: string, processId: string, pattern: RegExp, stream: "stdout" | "stderr" = "stdout", ms = 20_000): Promise<string> {
  const until = Date.now() + ms;
  for (;;) {
    const r = await c.processes.readProcessOutput({ workspaceId, processId });
    const got = text(r[stream]);
    if (pattern.test(got)) return got;
    if (r.process?.state !== ProcessState.RUNNING || Date.now() > until) {
      // Output may have landed between the read and the state: one last look.
      const last = await c.processes.readProcessOutput({ workspaceId, processId });
      if (pattern.test(text(last[stream]))) return text(last[stream]);
      const state = ProcessState[last.process?.state ?? ProcessState.UNSPECIFIED];
      throw new Error(`${pattern} never appeared in ${stream} (process ${state}): stdout ${JSON.stringify(text(last.stdout).slice(-2000))}, stderr ${JSON.stringify(text(last.stderr).slice(-2000))}`);
    }
    await pause(100);
  }
}

/** WaitProcess for up to 30 s; the process must have ended. */
async function waitEnded(c: ClientSet, workspaceId: string, processId: string): Promise<Process> {
  const r = await c.processes.waitProcess({ workspaceId, processId, timeoutMs: 30_000n });
  if (r.timedOut || !r.process) throw new Error(`process ${processId} had not ended after 30 s`);
  return r.process;
}

/** Sends KILL and waits for the end. */
async function kill(c: ClientSet, workspaceId: string, processId: string): Promise<Process> {
  await c.processes.signalProcess({ workspaceId, processId, signal: "KILL" });
  return waitEnded(c, workspaceId, processId);
}

/** The process's pid in its sandbox, once known (it may be 0 at first). */
function pidOf(c: ClientSet, workspaceId: string, processId: string): Promise<number> {
  return eventually(async () => {
    const p = await get(c, workspaceId, processId);
    return p.pid > 0 ? p.pid : undefined;
  }, 10_000, "the process's pid");
}

/** How many `sleep n` processes run in the workspace, counted by a Bash call there. */
async function sleepers(c: ClientSet, workspaceId: string, n: number): Promise<number> {
  const r = await c.tools.bash({ workspaceId, command: `pgrep -cfx 'sleep ${n}'; true` });
  const count = Number(r.stdout.trim());
  if (!Number.isInteger(count)) throw new Error(`pgrep printed ${JSON.stringify(r.stdout)}, ${JSON.stringify(r.stderr)}`);
  return count;
}

/** Counts `sleep n` processes until there are `want` (at most ~10 s); returns the last count. */
async function sleepersUntil(c: ClientSet, workspaceId: string, n: number, want: number): Promise<number> {
  let count = await sleepers(c, workspaceId, n);
  for (let i = 0; i < 50 && count !== want; i++) {
    await pause(200);
    count = await sleepers(c, workspaceId, n);
  }
  return count;
}

/**
 * How many `sleep n` processes run on this host, read from /proc (a local workspace's processes
 * are host processes; a zombie has an empty command line and is not counted).
 */
async function hostSleepers(n: number): Promise<number> {
  const want = `sleep\0${n}\0`;
  let count = 0;
  for (const pid of await readdir("/proc")) {
    if (/^\d+$/.test(pid) && (await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")) === want) count++;
  }
  return count;
}

/** Reads the host's `sleep n` count until there are `want` (at most ~10 s); returns the last count. */
async function hostSleepersUntil(n: number, want: number): Promise<number> {
  let count = await hostSleepers(n);
  for (let i = 0; i < 100 && count !== want; i++) {
    await pause(100);
    count = await hostSleepers(n);
  }
  return count;
}

/** The containers Docker still has for a workspace. */
const containersOf = (id: string) => docker.listContainers({ all: true, filters: { label: [`${LABELS.workspace}=${id}`] } });

/** Waits up to ~20 s for a workspace's containers to be gone; true when they are. */
async function containersGone(id: string): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if ((await containersOf(id)).length === 0) return true;
    await pause(200);
  }
  return (await containersOf(id)).length === 0;
}

/** A follower of AttachProcess: its events so far, and a promise of the stream's end. */
interface Follower {
  events: AttachProcessResponse[];
  stdout(): string;
  done: Promise<void>;
  abort(): void;
}

function follow(c: ClientSet, workspaceId: string, processId: string, from: { stdoutOffset?: bigint; stderrOffset?: bigint } = {}): Follower {
  const controller = new AbortController();
  const events: AttachProcessResponse[] = [];
  const done = (async () => {
    for await (const ev of c.processes.attachProcess({ workspaceId, processId, ...from }, { signal: controller.signal, timeoutMs: 90_000 })) events.push(ev);
  })();
  // Observed by whoever awaits `done`; a follower abandoned on a failed test must not crash the run.
  done.catch(() => undefined);
  return {
    events,
    stdout: () => events.map((e) => (e.event.case === "stdout" ? text(e.event.value.data) : "")).join(""),
    done,
    abort: () => controller.abort(),
  };
}

/** Waits up to `ms` for `done`, failing instead of hanging. */
async function within(done: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms)));
  try {
    await Promise.race([done, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Asserts that stdout chunks of `events` are contiguous from `from`, each at most 64 KiB. */
function contiguous(t: T, events: AttachProcessResponse[], from: bigint): void {
  let at = from;
  for (const e of events) {
    if (e.event.case !== "stdout") continue;
    t.is(e.event.value.offset, at, "stdout chunks follow each other");
    t.true(e.event.value.data.length > 0 && e.event.value.data.length <= 64 * 1024, `a chunk of ${e.event.value.data.length} bytes`);
    at += BigInt(e.event.value.data.length);
  }
}

/** Creates a workspace on `server`, runs `body` in it, and deletes it whatever happens. */
async function inWorkspace(server: TestServer, init: { provider: string; agentType?: string }, body: (id: string) => Promise<void>): Promise<void> {
  const { workspaces } = server.clients.grpc;
  const { workspace } = await workspaces.createWorkspace(init);
  if (!workspace) throw new Error("CreateWorkspace returned no workspace");
  try {
    await body(workspace.id);
  } finally {
    await workspaces.deleteWorkspace({ id: workspace.id }).catch(() => undefined);
  }
}

/** Every audit record a filter matches, all pages walked. */
async function auditRecords(c: ClientSet, workspaceId: string): Promise<AuditEvent[]> {
  const out: AuditEvent[] = [];
  let pageToken = "";
  do {
    const page = await c.audit.listAuditEvents({ workspaceId, pageToken, pageSize: 100 });
    out.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}

/** The server with a small output budget per workspace, started on first use and closed with the file. */
let budgetServer: Promise<TestServer> | undefined;
const budget = () => (budgetServer ??= startServer({ env: BUDGET_SETTINGS }));
test.after.always(async () => {
  const server = await budgetServer?.catch(() => undefined);
  await server?.close();
});

const PROCEDURE = "/agentworkspace.v1.ProcessService/";
const PROVIDERS = ["local", ...(["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "background processes"))];

for (const provider of PROVIDERS) {
  const container = provider !== "local";
  /** gVisor starts sandboxes and runs processes slower: its scenarios get more time. */
  const slow = (t: T, ms = 180_000) => {
    if (provider === "gvisor") t.timeout(ms);
  };

  test.serial(`${provider}: a dev server started in the background answers a Bash call in the same workspace, streams its log while it runs, and stops on TERM`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const proc = await start(c, { workspaceId: ws, command: DEV_SERVER });
      t.regex(proc.processId, /^proc_/);
      t.is(proc.workspaceId, ws);
      t.is(proc.command, DEV_SERVER);
      t.is(proc.state, ProcessState.RUNNING);
      t.false(proc.pty);
      t.false(proc.stdinOpen, "stdin reads /dev/null unless asked for");
      t.truthy(proc.startedAt);
      t.is(proc.endedAt, undefined);
      const follower = follow(c, ws, proc.processId);
      try {
        const log = await waitForOutput(c, ws, proc.processId, /^listening on \d+$/m);
        const port = Number(/^listening on (\d+)$/m.exec(log)?.[1]);

        const fetched = await c.tools.bash({ workspaceId: ws, command: fetchCommand(port), timeoutMs: 30_000n });
        t.is(fetched.exitCode, 0, fetched.stdout + fetched.stderr);
        t.regex(fetched.stdout, /^HTTP\/1\.1 200 OK\r$/m);
        t.regex(fetched.stdout, /hello from dev server\n$/);

        // The request's log line reaches the follower while the server still runs.
        await eventually(() => (follower.stdout().includes("request: GET / HTTP/1.0") ? true : undefined), 20_000, "the request's log line to be streamed");
        t.is((await get(c, ws, proc.processId)).state, ProcessState.RUNNING, "the log streamed before the process ended");
        t.regex(follower.stdout(), /^listening on \d+\n/);
        t.false(follower.events.some((e) => e.event.case === "ended"));

        await c.processes.signalProcess({ workspaceId: ws, processId: proc.processId, signal: "TERM" });
        const ended = await waitEnded(c, ws, proc.processId);
        t.is(ended.state, ProcessState.EXITED);
        t.is(ended.signal, "SIGTERM");
        t.is(ended.exitCode, 128 + 15);
        t.truthy(ended.endedAt);

        // The stream ends with the final state, after everything the server printed.
        await within(follower.done, 20_000, "the attach stream's end");
        const last = follower.events.at(-1);
        t.is(last?.event.case, "ended");
        if (last?.event.case === "ended") t.like(last.event.value, { processId: proc.processId, state: ProcessState.EXITED, signal: "SIGTERM" });
        t.is(follower.events.filter((e) => e.event.case === "ended").length, 1);
        t.false(follower.events.some((e) => e.event.case === "missed"));
        contiguous(t, follower.events, 0n);
        t.is(follower.stdout(), text((await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId })).stdout));

        const after = await c.tools.bash({ workspaceId: ws, command: `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo connected || echo refused` });
        t.is(after.stdout, "refused\n");

        // Ended processes stay listed.
        const { processes } = await c.processes.listProcesses({ workspaceId: ws });
        t.deepEqual(processes.map((p) => [p.processId, ProcessState[p.state]]), [[proc.processId, "EXITED"]]);
      } finally {
        follower.abort();
      }
    });
  });

  test.serial(`${provider}: stdout and stderr are kept apart and read from any offset; workdir and env apply`, async (t) => {
    const c = t.context.server.clients.connect;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      t.is((await c.tools.bash({ workspaceId: ws, command: "mkdir -p sub && echo made" })).stdout, "made\n");
      const proc = await start(c, { workspaceId: ws, command: 'echo out1; echo err1 >&2; echo "$GREETING"; echo "dir=$(basename "$PWD")"', workdir: "sub", env: { GREETING: "hi there" } });
      t.is(proc.workdir, "sub");
      const ended = await waitEnded(c, ws, proc.processId);
      t.like(ended, { state: ProcessState.EXITED, exitCode: 0, signal: "", stdoutTotalBytes: 22n, stderrTotalBytes: 5n, stdoutDroppedBytes: 0n, stderrDroppedBytes: 0n });

      const all = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId });
      t.is(text(all.stdout), "out1\nhi there\ndir=sub\n");
      t.is(text(all.stderr), "err1\n");
      t.like(all, { stdoutOffset: 0n, stderrOffset: 0n, stdoutMissedBytes: 0n, stderrMissedBytes: 0n, nextStdoutOffset: 22n, nextStderrOffset: 5n });
      t.is(all.process?.state, ProcessState.EXITED);

      const middle = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId, stdoutOffset: 5n, stderrOffset: 5n, maxBytes: 8n });
      t.is(text(middle.stdout), "hi there");
      t.is(text(middle.stderr), "");
      t.like(middle, { stdoutOffset: 5n, stdoutMissedBytes: 0n, nextStdoutOffset: 13n, nextStderrOffset: 5n });

      const end = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId, stdoutOffset: 22n, stderrOffset: 5n });
      t.is(end.stdout.length + end.stderr.length, 0);
      t.like(end, { nextStdoutOffset: 22n, nextStderrOffset: 5n });
    });
  });

  test.serial(`${provider}: stdin reaches a REPL and closing it ends the REPL; a write after close or without stdin is STDIN_CLOSED`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const repl = await start(c, { workspaceId: ws, command: "bash --norc --noprofile -i", stdin: true, env: { HISTFILE: "/dev/null" } });
      t.true(repl.stdinOpen);
      const line = "echo $((6*7))\n";
      const wrote = await c.processes.writeProcessStdin({ workspaceId: ws, processId: repl.processId, data: Buffer.from(line) });
      t.is(wrote.bytesWritten, BigInt(line.length));
      // 42 is only ever the shell's answer: the line itself does not contain it.
      t.regex(await waitForOutput(c, ws, repl.processId, /^42$/m), /^42\n$/);
      t.is((await get(c, ws, repl.processId)).state, ProcessState.RUNNING, "the REPL waits for more input");
      await c.processes.writeProcessStdin({ workspaceId: ws, processId: repl.processId, close: true });
      const ended = await waitEnded(c, ws, repl.processId);
      t.like(ended, { state: ProcessState.EXITED, exitCode: 0, signal: "", stdinOpen: false });
      t.is(text((await c.processes.readProcessOutput({ workspaceId: ws, processId: repl.processId })).stdout), "42\n");

      // Closed stdin, on a process that goes on running after its end of file.
      const reader = await start(c, { workspaceId: ws, command: 'cat; echo "stdin ended"; exec sleep 1000', stdin: true });
      await c.processes.writeProcessStdin({ workspaceId: ws, processId: reader.processId, data: Buffer.from("first line\n"), close: true });
      t.is(await waitForOutput(c, ws, reader.processId, /stdin ended\n/), "first line\nstdin ended\n");
      t.like(await get(c, ws, reader.processId), { state: ProcessState.RUNNING, stdinOpen: false });
      await expectError(t, c.processes.writeProcessStdin({ workspaceId: ws, processId: reader.processId, data: Buffer.from("more\n") }), Code.FailedPrecondition, ErrorReason.STDIN_CLOSED);

      // Started without stdin.
      const deaf = await start(c, { workspaceId: ws, command: "exec sleep 1000" });
      t.false(deaf.stdinOpen);
      await expectError(t, c.processes.writeProcessStdin({ workspaceId: ws, processId: deaf.processId, data: Buffer.from("hello\n") }), Code.FailedPrecondition, ErrorReason.STDIN_CLOSED);
      await expectError(t, c.processes.writeProcessStdin({ workspaceId: ws, processId: deaf.processId, close: true }), Code.FailedPrecondition, ErrorReason.STDIN_CLOSED);
      t.is((await get(c, ws, deaf.processId)).state, ProcessState.RUNNING, "a refused write leaves the process alone");
      await kill(c, ws, reader.processId);
      await kill(c, ws, deaf.processId);
    });
  });

  test.serial(`${provider}: a program under a pty sees a terminal of the size asked for, then of the size ResizeProcess sets; one without a pty is NOT_A_TERMINAL`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const proc = await start(c, { workspaceId: ws, command: 'tty; stty size; echo to-stderr >&2; read -r x; stty size; echo "got:$x"', pty: { rows: 24, cols: 80 } });
      t.true(proc.pty);
      t.true(proc.stdinOpen, "a pty's stdin is always open");
      await waitForOutput(c, ws, proc.processId, /^24 80\r?$/m);
      await expectError(t, c.processes.resizeProcess({ workspaceId: ws, processId: proc.processId, size: { rows: 1001, cols: 80 } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
      await c.processes.resizeProcess({ workspaceId: ws, processId: proc.processId, size: { rows: 40, cols: 120 } });
      await c.processes.writeProcessStdin({ workspaceId: ws, processId: proc.processId, data: Buffer.from("go\n") });
      const ended = await waitEnded(c, ws, proc.processId);
      t.like(ended, { state: ProcessState.EXITED, exitCode: 0, stderrTotalBytes: 0n });

      const r = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId });
      const out = text(r.stdout);
      t.regex(out, /^\/dev\/pts\/\d+\r?$/m);
      t.notRegex(out, /not a tty/);
      const before = out.search(/^24 80\r?$/m);
      const after = out.search(/^40 120\r?$/m);
      t.true(before >= 0 && after > before, `the size before and after the resize, in order: ${JSON.stringify(out)}`);
      t.regex(out, /^got:go\r?$/m);
      t.regex(out, /to-stderr/, "stderr is the terminal too");
      t.is(r.stderr.length, 0, "a pty has one stream, reported as stdout");
      t.is(ended.stdoutTotalBytes, BigInt(r.stdout.length));

      const plain = await start(c, { workspaceId: ws, command: "exec sleep 1000" });
      t.false(plain.pty);
      await expectError(t, c.processes.resizeProcess({ workspaceId: ws, processId: plain.processId, size: { rows: 40, cols: 120 } }), Code.FailedPrecondition, ErrorReason.NOT_A_TERMINAL);
      await kill(c, ws, plain.processId);
      await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "true", pty: { rows: 0, cols: 80 } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    });
  });

  test.serial(`${provider}: SignalProcess KILL ends the whole process tree, a child in a session of its own included`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const n = marker();
      const proc = await start(c, { workspaceId: ws, command: `setsid sleep ${n} & sleep ${n} & wait` });
      t.is(await sleepersUntil(c, ws, n, 2), 2, "both children run");
      await c.processes.signalProcess({ workspaceId: ws, processId: proc.processId, signal: "KILL" });
      const ended = await waitEnded(c, ws, proc.processId);
      t.like(ended, { state: ProcessState.EXITED, signal: "SIGKILL", exitCode: 128 + 9 });
      t.is(await sleepersUntil(c, ws, n, 0), 0, "no child survived");
    });
  });

  test.serial(`${provider}: ending the session kills the processes of its workspace`, async (t) => {
    slow(t, 240_000);
    const { server } = t.context;
    const op = server.clients.grpc;
    const type = uniqueId(`proc-session-${provider}`);
    await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider, tools: ["bash"] } } });
    const started = await op.workspaces.startSession({ agentType: type });
    const { session } = await watchUntilReady(server.clients.connect, started.session?.id ?? "", 120_000);
    t.is(session.status, SessionStatus.ACTIVE);
    const ws = session.workspaceId;
    let ended = false;
    try {
      const agent = clientsWithToken(server.url, started.sessionToken);
      const n = marker();
      const proc = await start(agent, { workspaceId: ws, command: `exec sleep ${n}` });
      let pid = 0;
      if (container) {
        t.is(await sleepersUntil(agent, ws, n, 1), 1, "the process runs");
      } else {
        pid = await pidOf(agent, ws, proc.processId);
        t.true(alive(pid), "the local sandbox's pid is a host pid, running");
        t.is(await hostSleepersUntil(n, 1), 1);
      }
      await op.workspaces.endSession({ id: session.id });
      ended = true;
      await expectError(t, op.workspaces.getWorkspace({ id: ws }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
      await expectError(t, op.processes.getProcess({ workspaceId: ws, processId: proc.processId }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
      if (container) t.true(await containersGone(ws), "the workspace's container is gone, and its processes with it");
      else {
        t.true(await waitDead([pid], 10_000), "the process outlived its session");
        t.is(await hostSleepersUntil(n, 0), 0);
      }
    } finally {
      if (!ended) await op.workspaces.endSession({ id: session.id }).catch(() => undefined);
    }
  });

  test.serial(`${provider}: a chatty process is bounded by its ring: every byte counted, the oldest dropped and reported missed`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const size = 4 * 1024 * 1024;
      const total = BigInt(size + "END\n".length);
      const proc = await start(c, { workspaceId: ws, command: String.raw`head -c ${size} /dev/zero | tr '\0' a; echo END` });
      const ended = await waitEnded(c, ws, proc.processId);
      t.like(ended, { state: ProcessState.EXITED, exitCode: 0, stdoutTotalBytes: total, stderrTotalBytes: 0n, stderrDroppedBytes: 0n });
      const dropped = (await get(c, ws, proc.processId)).stdoutDroppedBytes;
      t.true(dropped >= total - BigInt(RING), `dropped ${dropped} of ${total} with a ring of ${RING}`);

      // From 0: what is kept, from the oldest byte kept, with the gap reported.
      const r = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId });
      const kept = text(r.stdout);
      t.true(r.stdout.length > 0 && r.stdout.length <= RING, `${r.stdout.length} bytes kept`);
      t.is(r.stdoutOffset, dropped);
      t.is(r.stdoutMissedBytes, dropped);
      t.true(r.stdoutMissedBytes > 0n);
      t.is(r.stdoutOffset + BigInt(r.stdout.length), total);
      t.is(r.nextStdoutOffset, total);
      t.regex(kept, /^a+END\n$/);

      // Inside the kept range nothing is missed.
      const tail = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId, stdoutOffset: total - 4n });
      t.is(text(tail.stdout), "END\n");
      t.like(tail, { stdoutOffset: total - 4n, stdoutMissedBytes: 0n, nextStdoutOffset: total });
      const some = await c.processes.readProcessOutput({ workspaceId: ws, processId: proc.processId, stdoutOffset: dropped, maxBytes: 10n });
      t.is(text(some.stdout), "a".repeat(10));
      t.like(some, { stdoutOffset: dropped, stdoutMissedBytes: 0n, nextStdoutOffset: dropped + 10n });

      // AttachProcess from 0 says first what it skipped, then streams what is kept, then the end.
      const follower = follow(c, ws, proc.processId);
      await within(follower.done, 30_000, "the attach stream's end");
      const first = follower.events[0];
      t.is(first?.event.case, "missed");
      if (first?.event.case === "missed") t.like(first.event.value, { stderr: false, bytes: dropped });
      t.is(follower.events.filter((e) => e.event.case === "missed").length, 1);
      contiguous(t, follower.events, dropped);
      t.is(follower.stdout(), kept);
      const last = follower.events.at(-1);
      t.is(last?.event.case, "ended");
      if (last?.event.case === "ended") t.like(last.event.value, { state: ProcessState.EXITED, stdoutTotalBytes: total });
    });
  });

  test.serial(`${provider}: at ${MAX_PROCESSES} running processes the next StartProcess is PROCESS_LIMIT "processes", until one ends`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const a = await start(c, { workspaceId: ws, command: "exec sleep 100" });
      const b = await start(c, { workspaceId: ws, command: "exec sleep 100" });
      const { detail } = await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "exec sleep 100" }), Code.ResourceExhausted, ErrorReason.PROCESS_LIMIT);
      t.is(detail.metadata.limit, "processes");
      t.is(detail.metadata.max, String(MAX_PROCESSES));
      t.is((await c.processes.listProcesses({ workspaceId: ws })).processes.length, 2, "the refused process was never started");
      await kill(c, ws, a.processId);
      const third = await start(c, { workspaceId: ws, command: "exec sleep 100" });
      t.is(third.state, ProcessState.RUNNING);
      const { processes } = await c.processes.listProcesses({ workspaceId: ws });
      t.deepEqual(processes.map((p) => [p.processId, ProcessState[p.state]]), [[a.processId, "EXITED"], [b.processId, "RUNNING"], [third.processId, "RUNNING"]], "oldest first, the ended one still listed");
      await kill(c, ws, b.processId);
      await kill(c, ws, third.processId);
    });
  });

  test.serial(`${provider}: the output budget forgets the oldest ended process first, then refuses with PROCESS_LIMIT "output_bytes"`, async (t) => {
    slow(t);
    const server = await budget();
    const c = server.clients.grpc;
    await inWorkspace(server, { provider }, async (ws) => {
      const a = await start(c, { workspaceId: ws, command: "exec sleep 100" });
      const b = await start(c, { workspaceId: ws, command: "exec sleep 100" });
      const { detail } = await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "exec sleep 100" }), Code.ResourceExhausted, ErrorReason.PROCESS_LIMIT);
      t.is(detail.metadata.limit, "output_bytes");
      t.is(detail.metadata.max, String(BUDGET));
      await kill(c, ws, a.processId);
      t.is((await get(c, ws, a.processId)).state, ProcessState.EXITED, "an ended process is kept while nothing needs its room");
      const third = await start(c, { workspaceId: ws, command: "exec sleep 100" });
      t.is(third.state, ProcessState.RUNNING);
      await expectError(t, c.processes.getProcess({ workspaceId: ws, processId: a.processId }), Code.NotFound, ErrorReason.PROCESS_NOT_FOUND);
      t.deepEqual((await c.processes.listProcesses({ workspaceId: ws })).processes.map((p) => p.processId), [b.processId, third.processId]);
      await kill(c, ws, b.processId);
      await kill(c, ws, third.processId);
    });
  });

  test.serial(`${provider}: unknown and ended processes, bad signals, WaitProcess's timeout and StartProcess's timeout_ms`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const unknown = { workspaceId: ws, processId: "proc_doesnotexist0000" };
      for (const [what, call] of [
        ["GetProcess", () => c.processes.getProcess(unknown)],
        ["ReadProcessOutput", () => c.processes.readProcessOutput(unknown)],
        ["WriteProcessStdin", () => c.processes.writeProcessStdin({ ...unknown, data: Buffer.from("x") })],
        ["ResizeProcess", () => c.processes.resizeProcess({ ...unknown, size: { rows: 10, cols: 10 } })],
        ["SignalProcess", () => c.processes.signalProcess({ ...unknown, signal: "TERM" })],
        ["WaitProcess", () => c.processes.waitProcess({ ...unknown, timeoutMs: 100n })],
        ["AttachProcess", async () => {
          for await (const _ of c.processes.attachProcess(unknown)) void _;
        }],
      ] as const) {
        t.log(what);
        await expectError(t, call(), Code.NotFound, ErrorReason.PROCESS_NOT_FOUND);
      }

      // An ended process: how it ended, and no more signals.
      const done = await start(c, { workspaceId: ws, command: "echo bye; exit 3" });
      const ended = await waitEnded(c, ws, done.processId);
      t.like(ended, { state: ProcessState.EXITED, exitCode: 3, signal: "", endedBy: "" });
      t.truthy(ended.endedAt);
      t.is(text((await c.processes.readProcessOutput({ workspaceId: ws, processId: done.processId })).stdout), "bye\n");
      await expectError(t, c.processes.signalProcess({ workspaceId: ws, processId: done.processId, signal: "TERM" }), Code.FailedPrecondition, ErrorReason.PROCESS_NOT_RUNNING);
      const again = await c.processes.waitProcess({ workspaceId: ws, processId: done.processId, timeoutMs: 30_000n });
      t.false(again.timedOut);
      t.is(again.process?.exitCode, 3);

      // Processes belong to their workspace.
      await inWorkspace(t.context.server, { provider }, async (other) => {
        await expectError(t, c.processes.getProcess({ workspaceId: other, processId: done.processId }), Code.NotFound, ErrorReason.PROCESS_NOT_FOUND);
      });

      // A running one: WaitProcess gives up, a bad signal name is refused, SIGHUP (spelled with SIG) ends it.
      const sleeper = await start(c, { workspaceId: ws, command: "exec sleep 1000" });
      const waited = await c.processes.waitProcess({ workspaceId: ws, processId: sleeper.processId, timeoutMs: 300n });
      t.true(waited.timedOut);
      t.is(waited.process?.state, ProcessState.RUNNING);
      t.is(waited.process?.endedAt, undefined);
      await expectError(t, c.processes.signalProcess({ workspaceId: ws, processId: sleeper.processId, signal: "NOPE" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
      t.is((await get(c, ws, sleeper.processId)).state, ProcessState.RUNNING, "a refused signal leaves the process alone");
      await c.processes.signalProcess({ workspaceId: ws, processId: sleeper.processId, signal: "SIGHUP" });
      t.like(await waitEnded(c, ws, sleeper.processId), { state: ProcessState.EXITED, signal: "SIGHUP", exitCode: 128 + 1 });

      // timeout_ms kills it.
      const limited = await start(c, { workspaceId: ws, command: "exec sleep 1000", timeoutMs: 1000n });
      const killed = await waitEnded(c, ws, limited.processId);
      t.is(killed.state, ProcessState.EXITED);
      t.regex(killed.signal, /^SIG[A-Z]+$/, "a signal ended it");
      t.true(killed.exitCode > 128, `exit code ${killed.exitCode}`);
    });
  });

  test.serial(`${provider}: the agent type's command policy and tool list apply to StartProcess as to Bash`, async (t) => {
    slow(t);
    const { server } = t.context;
    const c = server.clients.grpc;
    const denyRm = uniqueId(`proc-policy-${provider}`);
    await c.config.createAgentType({ agentType: { id: denyRm, workspace: { enabled: true, tools: ["bash"], commandPolicy: { allow: [], deny: ["rm"] } } } });
    await inWorkspace(server, { provider, agentType: denyRm }, async (ws) => {
      t.is((await c.tools.bash({ workspaceId: ws, command: "mkdir x && echo made" })).stdout, "made\n");
      const { detail } = await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "rm -rf x" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
      t.is(detail.metadata.why, "denied_by_agent_type");
      t.is(detail.metadata.rule, "rm");
      t.deepEqual((await c.processes.listProcesses({ workspaceId: ws })).processes, [], "nothing was started");
      t.is((await c.tools.bash({ workspaceId: ws, command: "test -d x && echo kept" })).stdout, "kept\n");
      const allowed = await start(c, { workspaceId: ws, command: "echo allowed" });
      t.like(await waitEnded(c, ws, allowed.processId), { state: ProcessState.EXITED, exitCode: 0 });
      t.is(text((await c.processes.readProcessOutput({ workspaceId: ws, processId: allowed.processId })).stdout), "allowed\n");
    });

    const noBash = uniqueId(`proc-nobash-${provider}`);
    await c.config.createAgentType({ agentType: { id: noBash, workspace: { enabled: true, tools: ["read", "write"] } } });
    await inWorkspace(server, { provider, agentType: noBash }, async (ws) => {
      const { error } = await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "echo hi" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
      t.regex(error.rawMessage, /'bash'/);
      await expectError(t, c.processes.listProcesses({ workspaceId: ws }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
    });
  });

  test.serial(`${provider}: after a server restart, a process that was running is listed LOST and runs no more`, async (t) => {
    slow(t, 240_000);
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-proc-restart-"));
    let server: TestServer | undefined;
    let ws = "";
    try {
      server = await startServer({ dataDir, env: SETTINGS });
      const first = server.clients.grpc;
      const { workspace } = await first.workspaces.createWorkspace({ provider });
      ws = workspace?.id ?? "";
      const n = marker();
      const proc = await start(first, { workspaceId: ws, command: `exec sleep ${n}` });
      let pid = 0;
      if (container) {
        t.is(await sleepersUntil(first, ws, n, 1), 1, "the process runs");
      } else {
        pid = await pidOf(first, ws, proc.processId);
        t.true(alive(pid));
        t.is(await hostSleepersUntil(n, 1), 1);
      }
      await server.close();
      server = undefined;

      server = await startServer({ dataDir, env: SETTINGS });
      const second = server.clients.grpc;
      const { processes } = await second.processes.listProcesses({ workspaceId: ws });
      t.is(processes.length, 1);
      t.like(processes[0], { processId: proc.processId, workspaceId: ws, command: `exec sleep ${n}`, state: ProcessState.LOST });
      const waited = await second.processes.waitProcess({ workspaceId: ws, processId: proc.processId, timeoutMs: 10_000n });
      t.false(waited.timedOut, "a lost process has ended");
      t.is(waited.process?.state, ProcessState.LOST);
      if (container) t.is(await sleepersUntil(second, ws, n, 0), 0, "the process is not running");
      else {
        t.true(await waitDead([pid], 10_000), "the process outlived its server");
        t.is(await hostSleepersUntil(n, 0), 0);
      }
    } finally {
      if (server && ws !== "") await server.clients.grpc.workspaces.deleteWorkspace({ id: ws }).catch(() => undefined);
      await server?.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  test.serial(`${provider}: deleting the workspace kills its processes`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider });
    const ws = workspace?.id ?? "";
    let deleted = false;
    try {
      const n = marker();
      const proc = await start(c, { workspaceId: ws, command: `sleep ${n} & exec sleep ${n}` });
      let pid = 0;
      if (container) {
        t.is(await sleepersUntil(c, ws, n, 2), 2, "the process and its child run");
      } else {
        pid = await pidOf(c, ws, proc.processId);
        t.true(alive(pid));
        t.is(await hostSleepersUntil(n, 2), 2, "the process and its child run");
      }
      await c.workspaces.deleteWorkspace({ id: ws });
      deleted = true;
      await expectError(t, c.processes.listProcesses({ workspaceId: ws }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
      if (container) t.true(await containersGone(ws), "the workspace's container is gone, and its processes with it");
      else {
        t.true(await waitDead([pid], 10_000), "the process outlived its workspace");
        t.is(await hostSleepersUntil(n, 0), 0, "its child outlived the workspace");
      }
    } finally {
      if (!deleted) await c.workspaces.deleteWorkspace({ id: ws }).catch(() => undefined);
    }
  });

  registerPause(provider);

  test.serial(`${provider}: the audit trail records StartProcess as a bash call with its command, and never the bytes written to stdin`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      const secret = `stdin-secret-${randomBytes(12).toString("hex")}`;
      const command = 'cat; echo "stdin ended"';
      const proc = await start(c, { workspaceId: ws, command, stdin: true });
      // Half as bytes, half as text: neither is recorded, both are counted.
      await c.processes.writeProcessStdin({ workspaceId: ws, processId: proc.processId, data: Buffer.from(secret.slice(0, 20)) });
      await c.processes.writeProcessStdin({ workspaceId: ws, processId: proc.processId, text: `${secret.slice(20)}\n`, close: true });
      t.is(await waitForOutput(c, ws, proc.processId, /stdin ended\n/), `${secret}\nstdin ended\n`, "the bytes reached the process");
      await waitEnded(c, ws, proc.processId);
      await c.processes.exposePort({ workspaceId: ws, port: 3999 });

      const records = await eventually(async () => {
        const all = await auditRecords(c, ws);
        const has = (method: string) => all.some((e) => e.procedure === `${PROCEDURE}${method}`);
        return has("StartProcess") && has("WriteProcessStdin") && has("ExposePort") ? all : undefined;
      }, 15_000, "the StartProcess, WriteProcessStdin and ExposePort records");
      const started = records.filter((e) => e.procedure === `${PROCEDURE}StartProcess`);
      t.is(started.length, 1);
      t.like(started[0], { name: "execute_tool bash", tool: "bash", workspaceId: ws, provider, outcome: AuditOutcome.OK, code: "ok", request: { command } });
      const writes = records.filter((e) => e.procedure === `${PROCEDURE}WriteProcessStdin`);
      t.is(writes.length, 2);
      for (const w of writes) t.like(w, { tool: "bash", workspaceId: ws, outcome: AuditOutcome.OK });
      t.deepEqual(writes.map((w) => w.request.data_bytes).sort(), [String(secret.length - 20 + 1), "20"].sort(), "each write's size is counted");
      const exposed = records.filter((e) => e.procedure === `${PROCEDURE}ExposePort`);
      t.like(exposed[0], { tool: "bash", workspaceId: ws, outcome: AuditOutcome.OK, request: { port: "3999" } });
      for (const e of records) t.false(JSON.stringify(toJson(AuditEventSchema, e)).includes(secret), `${e.procedure} records the bytes written (or the output)`);
    });
  });
}

/**
 * A server killed with SIGKILL stops nothing: the next server must. Docker's executor outlives the
 * server (its container runs on) and still runs the old connection's commands; the local provider's
 * background processes are in process groups of their own. The next server lists the process LOST
 * and ends what it left when it first opens the workspace (the executor's `forget`; the local
 * workspace's cgroups).
 */
for (const provider of ["local", ...(gate(test, engines, "docker", "background processes after a crash") ? ["docker" as const] : [])]) {
  test.serial(`${provider}: after the server is killed with SIGKILL, the next one lists the running process LOST and ends it`, async (t) => {
    t.timeout(400_000);
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-proc-crash-"));
    const env = { AGENT_WORKSPACE_DOCKER: provider === "docker" ? "on" : "off" };
    // A server's start is a hang guard's business only: at CI's load (fork bombs in other files) it
    // took over 30 s.
    const startTimeoutMs = 120_000;
    let server: ServerProcess | undefined = await startServerProcess({ dataDir, env, startTimeoutMs });
    let ws = "";
    try {
      const first = clientsWithToken(server.url, "");
      ws = (await first.workspaces.createWorkspace({ provider })).workspace?.id ?? "";
      const n = marker();
      const proc = await start(first, { workspaceId: ws, command: `sleep ${n} & exec sleep ${n}` });
      if (provider === "docker") t.is(await sleepersUntil(first, ws, n, 2), 2, "the process and its child run");
      else t.is(await hostSleepersUntil(n, 2), 2, "the process and its child run");
      process.kill(-(server.child.pid as number), "SIGKILL");
      t.true(await waitDead([server.serverPid], 10_000));
      if (provider === "local") t.is(await hostSleepers(n), 2, "a killed server leaves them running");
      server = undefined;
      server = await startServerProcess({ dataDir, env, startTimeoutMs });
      const second = clientsWithToken(server.url, "");
      const { processes } = await second.processes.listProcesses({ workspaceId: ws });
      t.is(processes.length, 1);
      t.like(processes[0], { processId: proc.processId, state: ProcessState.LOST, endedBy: "server restarted" });
      if (provider === "docker") t.is(await sleepersUntil(second, ws, n, 0), 0, "the executor ended the old connection's commands");
      else t.is(await hostSleepersUntil(n, 0), 0, "the workspace's cgroups were emptied");
      // The executor serves the new connection as before.
      t.is((await second.tools.bash({ workspaceId: ws, command: "echo alive" })).stdout, "alive\n");
    } finally {
      if (server) {
        if (ws !== "") await clientsWithToken(server.url, "").workspaces.deleteWorkspace({ id: ws }).catch(() => undefined);
        process.kill(-(server.child.pid as number), "SIGTERM");
        await waitDead([server.serverPid], 10_000);
      }
      await rm(dataDir, { recursive: true, force: true });
    }
  });
}

test.serial("a workspace without a tool call for the idle time loses its processes (ended_by idle); one of an agent type ends at its own; max_processes lowers the server's", async (t) => {
  const server = await startServer({ env: { AGENT_WORKSPACE_PROCESS_IDLE_TIMEOUT_MS: "1500", AGENT_WORKSPACE_SESSION_TICK_MS: "100" } });
  try {
    const c = server.clients.grpc;
    await inWorkspace(server, { provider: "local" }, async (ws) => {
      const proc = await start(c, { workspaceId: ws, command: `exec sleep ${marker()}` });
      const pid = await pidOf(c, ws, proc.processId);
      // A call running in the workspace keeps it busy: a wait longer than the idle time sees no end.
      const waited = await c.processes.waitProcess({ workspaceId: ws, processId: proc.processId, timeoutMs: 2500n });
      t.true(waited.timedOut, "the process ended while a call ran in its workspace");
      // No call at all from here (a look is a call, and would start the clock again): the host's
      // own view of the pid says when it has ended.
      t.true(await waitDead([pid], 30_000), "the process outlived the idle time");
      t.like(await waitEnded(c, ws, proc.processId), { state: ProcessState.EXITED, signal: "SIGKILL", endedBy: "idle" });
    });

    const typed = uniqueId("proc-idle");
    await c.config.createAgentType({ agentType: { id: typed, workspace: { enabled: true, tools: ["bash"], processIdleTimeoutMs: 600_000n, maxProcesses: 1 } } });
    await inWorkspace(server, { provider: "local", agentType: typed }, async (ws) => {
      const proc = await start(c, { workspaceId: ws, command: `exec sleep ${marker()}` });
      const { detail } = await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "sleep 1" }), Code.ResourceExhausted, ErrorReason.PROCESS_LIMIT);
      t.like(detail.metadata, { limit: "processes", max: "1" });
      await pause(3000);
      t.is((await get(c, ws, proc.processId)).state, ProcessState.RUNNING, "the agent type's idle time, not the server's, applies");
      await kill(c, ws, proc.processId);
    });
    const bad = uniqueId("proc-bad");
    await expectError(t, c.config.createAgentType({ agentType: { id: bad, workspace: { enabled: true, tools: ["bash"], maxProcesses: -1 } } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  } finally {
    await server.close();
  }
});

test.serial("memory: a workspace without processes refuses StartProcess with PROCESSES_UNSUPPORTED and lists none", async (t) => {
  const c = t.context.server.clients.grpc;
  await inWorkspace(t.context.server, { provider: "memory" }, async (ws) => {
    await expectError(t, c.processes.startProcess({ workspaceId: ws, command: "echo hi" }), Code.FailedPrecondition, ErrorReason.PROCESSES_UNSUPPORTED);
    t.deepEqual((await c.processes.listProcesses({ workspaceId: ws })).processes, []);
  });
});

/**
 * Pause and resume, on every provider that runs processes: the engine's freezer (docker, gVisor),
 * the VM's stopped vCPUs (microvm), the processes' SIGSTOP (local).
 */
function registerPause(provider: string): void {
  const container = provider !== "local";
  const slow = (t: T) => {
    if (provider === "gvisor" || provider === "microvm") t.timeout(provider === "microvm" ? 600_000 : 180_000);
  };
  test.serial(`${provider}: PauseWorkspace freezes a running counter with its files; ResumeWorkspace continues it where it stopped, and so does the next tool call`, async (t) => {
    slow(t);
    const c = t.context.server.clients.grpc;
    await inWorkspace(t.context.server, { provider }, async (ws) => {
      await c.tools.writeFile({ workspaceId: ws, path: "kept.txt", content: "written before the pause\n" });
      // Renamed into place: a `cat` between a plain redirect's truncation and its write reads nothing.
      const proc = await start(c, { workspaceId: ws, command: "i=0; while :; do i=$((i+1)); echo $i > counter.new; mv -f counter.new counter; sleep 0.1; done" });
      const counter = async () => Number((await c.tools.bash({ workspaceId: ws, command: "cat counter" })).stdout.trim());
      await eventually(async () => ((await counter()) >= 3 ? true : undefined), 20_000, "the counter counting");
      const pid = await pidOf(c, ws, proc.processId);
      const before = await counter();
      const paused = await c.workspaces.pauseWorkspace({ id: ws });
      t.is(paused.workspace?.status, WorkspaceStatus.PAUSED);
      t.is((await c.workspaces.getWorkspace({ id: ws })).workspace?.status, WorkspaceStatus.PAUSED, "GetWorkspace does not resume it");
      if (provider === "microvm") {
        const status = (await qmp(path.join(t.context.server.dataDir, "microvm", ws, "qmp.sock"), "query-status")) as { status: string; running: boolean };
        t.like(status, { status: "paused", running: false }, "QEMU stopped the VM's vCPUs");
      } else if (container) {
        const [info] = await containersOf(ws);
        t.true((await docker.getContainer(info.Id).inspect()).State.Paused, "the engine froze the container");
      } else {
        // Stopped (T), the whole tree: the loop's shell and its sleep. SIGSTOP lands asynchronously:
        // a process running on the other core at the time stops a moment after the call returned.
        const state = async () => readFile(`/proc/${pid}/stat`, "utf8").then((st) => st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3));
        let seen = await state();
        for (let i = 0; i < 50 && seen !== "T"; i++) {
          await new Promise((r) => setTimeout(r, 20));
          seen = await state();
        }
        t.regex(seen, /^T$/, "the process is stopped");
      }
      await pause(1000);
      const resumed = await c.workspaces.resumeWorkspace({ id: ws });
      t.is(resumed.workspace?.status, WorkspaceStatus.READY);
      // How far it counted across the pause is not asserted: a call that reads it after the resume
      // takes its own time (over a second under gVisor at CI's load, ten counts). What froze it is the
      // engine's state above; that it lives on, the same process, is below.
      const after = await counter();
      t.true(after >= before, `the counter went from ${before} to ${after}`);
      t.like(await get(c, ws, proc.processId), { state: ProcessState.RUNNING, pid });
      await eventually(async () => ((await counter()) > after ? true : undefined), 20_000, "the counter counting again");
      t.is((await c.tools.bash({ workspaceId: ws, command: "cat kept.txt" })).stdout, "written before the pause\n", "the files are intact");

      // Paused again, the next tool call resumes it first.
      await c.workspaces.pauseWorkspace({ id: ws });
      t.is((await c.tools.bash({ workspaceId: ws, command: "echo answered" })).stdout, "answered\n");
      t.is((await c.workspaces.getWorkspace({ id: ws })).workspace?.status, WorkspaceStatus.READY);
      t.is((await get(c, ws, proc.processId)).state, ProcessState.RUNNING);
      await kill(c, ws, proc.processId);
    });
  });

}

if (microvmGate(test, "background processes paused and resumed")) registerPause("microvm");

test.serial("an agent type's time to live: a workspace without a tool call is paused after one idle time and deleted after the longer one, each a workspace event; a call in between resumes it and starts the clock again", async (t) => {
  const server = await startServer({ env: { AGENT_WORKSPACE_SESSION_TICK_MS: "100" } });
  const watch = new AbortController();
  try {
    const c = server.clients.grpc;
    const type = uniqueId("proc-ttl");
    await expectError(t, c.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, tools: ["bash"], pauseAfterIdleMs: 3000n, deleteAfterIdleMs: 3000n } } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    await c.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, tools: ["bash"], pauseAfterIdleMs: 1000n, deleteAfterIdleMs: 4000n } } });
    const ws = (await c.workspaces.createWorkspace({ provider: "local", agentType: type })).workspace?.id ?? "";
    const statuses: string[] = [];
    const watching = (async () => {
      for await (const ev of c.audit.watchEvents({ workspaceId: ws }, { signal: watch.signal })) {
        if (ev.event.case === "workspaceStatus") statuses.push(`${WorkspaceStatus[ev.event.value.status]}${ev.event.value.deleted ? " deleted" : ""}`);
      }
    })().catch(() => undefined);
    const proc = await start(c, { workspaceId: ws, command: `exec sleep ${marker()}` });
    const pid = await pidOf(c, ws, proc.processId);
    // GetWorkspace is no tool call: it watches the clock without resetting it.
    const status = async () => (await c.workspaces.getWorkspace({ id: ws })).workspace?.status;
    await eventually(async () => ((await status()) === WorkspaceStatus.PAUSED ? true : undefined), 20_000, "the pause after the idle time");
    t.true(alive(pid), "a paused workspace keeps its processes");
    // The watch has seen this pause: what it sees from here on is what the call below caused.
    await eventually(async () => (statuses.at(-1) === "PAUSED" ? true : undefined), 10_000, "the pause's event");
    const mark = statuses.length;
    // A call resumes it; the clock starts again, so it is paused again before it is deleted.
    // (Its READY is checked in the events after `mark`: a status read here could come after the
    // next idle time on a loaded host.)
    t.is((await c.tools.bash({ workspaceId: ws, command: "echo back" })).stdout, "back\n");
    await eventually(async () => ((await status()) === WorkspaceStatus.PAUSED ? true : undefined), 20_000, "the second pause");
    await eventually(async () => (await c.workspaces.getWorkspace({ id: ws }).then(() => undefined, (err: unknown) => err)), 20_000, "the deletion after the longer idle time");
    await expectError(t, c.workspaces.getWorkspace({ id: ws }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    t.true(await waitDead([pid], 10_000), "the deletion ended its processes");
    await eventually(async () => (statuses.includes("STOPPED deleted") ? true : undefined), 10_000, "the deletion's event");
    // On a loaded host the first idle time may pass before the watch is registered (or before
    // StartProcess, a tool call, resumes it): the chain then begins with READY (or PAUSED, READY).
    // Before `mark` only pauses and resumes alternate, ending paused; after it, the call's resume,
    // the second pause and the deletion, in that order.
    const dedup = (list: string[]) => list.filter((s, i) => s !== list[i - 1]);
    const before = dedup(statuses.slice(0, mark));
    t.true(before.every((s) => s === "PAUSED" || s === "READY") && before.at(-1) === "PAUSED", statuses.join(", "));
    t.deepEqual(dedup(statuses.slice(mark)), ["READY", "PAUSED", "STOPPED deleted"], statuses.join(", "));
  } finally {
    watch.abort();
    await server.close();
  }
});
