/**
 * A streamed command's stdout on `local` is read by the server straight from the command's pipe
 * (ExecRequest.passStdout): the executor names its descriptor of the pipe in STARTED, the server
 * opens its own copy through /proc and answers TAKEN, and only then does the executor close its
 * descriptor. Tested on a real executor process and its channel, as the local provider starts it
 * (with its launcher, whose commands write into pipes, and without, where a spawned command's
 * stdout is a socket pair that cannot be opened through /proc and comes in frames); the output a client sees is tested through the server by the
 * conformance suite ("StreamBash", 40 quick commands at once among them).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import anyTest, { type TestFn } from "ava";
import { openPipeOf, withDirectStdout } from "../providers/direct-stdout.ts";
import { EXECUTOR_NODE_FLAGS } from "../providers/executor-build.ts";
import { sandboxEnv } from "../providers/executor/env.ts";
import type { ExecRequest } from "../providers/executor/protocol.ts";
import type { ExecEvent } from "../providers/executor/types.ts";
import { SandboxConnection } from "../providers/sandbox-connection.ts";

interface Executor {
  child: ChildProcess;
  conn: SandboxConnection;
}
const test = anyTest as TestFn<{ root: string; executors: Record<"launcher" | "spawn", Executor> }>;

test.before((t) => {
  const root = mkdtempSync(path.join(tmpdir(), "aw-handover-"));
  const main = path.join(import.meta.dirname, "..", "providers", "executor", "main.ts");
  const start = (launcher: string): Executor => {
    const child = spawn(process.execPath, [...EXECUTOR_NODE_FLAGS, main, `--launcher=${launcher}`], { stdio: ["pipe", "pipe", "inherit"], env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
    return { child, conn: new SandboxConnection(child.stdout!, child.stdin!) };
  };
  t.context = { root, executors: { launcher: start("launcher"), spawn: start("spawn") } };
});

test.after.always((t) => {
  for (const e of Object.values(t.context.executors ?? {})) e.child.kill("SIGKILL");
  if (t.context.root) rmSync(t.context.root, { recursive: true, force: true });
});

const request = (root: string, command: string): ExecRequest => ({ argv: ["bash", "-c", command], root, cwd: "", env: sandboxEnv(root, {}), timeoutMs: 60_000, killGraceMs: 1000, passStdout: true });

/** Blocks this thread (its event loop included) for `ms`. */
const block = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Descriptors the process holds open now. */
const openDescriptors = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

/** Waits until `pid` holds `count` descriptors or fewer (the executor closes handed pipes on TAKEN or KILL, asynchronously). */
async function settlesAt(pid: number, count: number): Promise<number> {
  const until = Date.now() + 10_000;
  let now = openDescriptors(pid);
  while (now > count && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 20));
    now = openDescriptors(pid);
  }
  return now;
}

/** The events of a direct-stdout run, with the pipe opened as the local provider does. */
function direct(e: Executor, req: ExecRequest, signal?: AbortSignal): { events: AsyncGenerator<ExecEvent>; took: Promise<number | undefined> } {
  const stdout = Promise.withResolvers<Readable | undefined>();
  const took = Promise.withResolvers<number | undefined>();
  const take = (fd: number | undefined) => {
    took.resolve(fd);
    stdout.resolve(fd === undefined ? undefined : openPipeOf(e.child.pid as number, fd));
  };
  const inner = e.conn.exec(req, signal, undefined, take);
  const events = (async function* () {
    try {
      yield* withDirectStdout(inner, stdout.promise, () => undefined);
    } finally {
      stdout.resolve(undefined);
      took.resolve(undefined);
    }
  })();
  return { events, took: took.promise };
}

for (const kind of ["launcher", "spawn"] as const) {
  test.serial(`${kind}: the pipe outlives the command until the server took it (STARTED read long after the exit)`, async (t) => {
    const e = t.context.executors[kind];
    const { events, took } = direct(e, request(t.context.root, "printf 'early-%s' out; printf e >&2"));
    const first = events.next();
    // Nothing of this process runs for 700 ms: the command prints, exits and is reported meanwhile.
    // An executor that closed its copy at the exit would leave nothing to open here.
    block(700);
    const all: ExecEvent[] = [];
    for (let r = await first; !r.done; r = await events.next()) all.push(r.value);
    // A launcher's command writes into a pipe, handed over; a spawned one into a socket pair, which
    // /proc cannot open: that stdout is read by the executor and comes in frames.
    if (kind === "launcher") t.not(await took, undefined);
    else t.is(await took, undefined);
    const text = (kind: string) => Buffer.concat(all.flatMap((ev) => (ev.type === kind && "data" in ev ? [Buffer.from(ev.data)] : []))).toString();
    t.is(text("stdout"), "early-out");
    t.is(text("stderr"), "e");
    t.is(all.at(-1)?.type, "exited");
  });

  test.serial(`${kind}: 100 quick commands at once keep every byte of stdout, and the executor keeps no descriptor of theirs`, async (t) => {
    const e = t.context.executors[kind];
    // One command first: the launcher and its slots exist before the baseline is counted.
    for await (const _ of direct(e, request(t.context.root, "true")).events) void _;
    const before = await settlesAt(e.child.pid as number, openDescriptors(e.child.pid as number));
    const outputs = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        let out = "";
        for await (const ev of direct(e, request(t.context.root, `printf 'run-${i}'`)).events) if (ev.type === "stdout") out += Buffer.from(ev.data).toString();
        return out;
      }),
    );
    t.deepEqual(outputs, Array.from({ length: 100 }, (_, i) => `run-${i}`));
    t.true((await settlesAt(e.child.pid as number, before)) <= before);
  });

  test.serial(`${kind}: calls killed as they start (KILL right behind EXEC) leave no descriptor open in the executor`, async (t) => {
    const e = t.context.executors[kind];
    for await (const _ of direct(e, request(t.context.root, "true")).events) void _;
    const before = await settlesAt(e.child.pid as number, openDescriptors(e.child.pid as number));
    await Promise.all(
      Array.from({ length: 20 }, async () => {
        const stop = new AbortController();
        const { events } = direct(e, request(t.context.root, "sleep 30"), stop.signal);
        const first = events.next();
        // Killed at once: the KILL is written right behind the EXEC.
        stop.abort();
        await first.catch(() => undefined);
        await events.return(undefined);
      }),
    );
    t.true((await settlesAt(e.child.pid as number, before)) <= before);
  });

  test.serial(`${kind}: a pipe the server cannot open fails the call, stops the command and frees the executor's descriptor`, async (t) => {
    const e = t.context.executors[kind];
    for await (const _ of direct(e, request(t.context.root, "true")).events) void _;
    const pid = e.child.pid as number;
    const before = await settlesAt(pid, openDescriptors(pid));
    const marker = path.join(t.context.root, `survived-${kind}`);
    const take = () => {
      throw new Error("cannot open");
    };
    const run = async () => {
      for await (const _ of e.conn.exec(request(t.context.root, `sleep 1; touch ${marker}`), undefined, undefined, take)) void _;
    };
    await t.throwsAsync(run, { message: "cannot open" });
    // Whether or not there was a pipe to hand over, nothing of the call stays open in the executor.
    t.true((await settlesAt(pid, before)) <= before);
    await new Promise((r) => setTimeout(r, 1500));
    t.false(existsSync(marker), "the command was stopped when the call failed");
  });
}
