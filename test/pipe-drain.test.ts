/**
 * Output pipes after a command exited: a pipe held open by a process that escaped every kill is
 * given up on, but output the kernel already holds is never lost to a late timer (a busy event loop
 * runs its timers before the poll that would read that output).
 */
import { spawn } from "node:child_process";
import { stat } from "node:fs/promises";
import type { Readable } from "node:stream";
import test from "ava";
import { withDirectStdout } from "../providers/direct-stdout.ts";
import { PIPE_DRAIN_MS } from "../providers/executor/process-runner.ts";
import type { ExecEvent } from "../providers/executor/types.ts";

/** Blocks the event loop, as a busy server does now and then. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

/** A finished command's stdout as the server receives it: a pipe nobody has read from yet. */
async function unreadPipeOf(script: string, opts: { exit: boolean }): Promise<{ pipe: Readable; kill: () => void }> {
  const child = spawn("sh", ["-c", script], { stdio: ["ignore", "pipe", "ignore"] });
  const pipe = child.stdout;
  const handle = (pipe as unknown as { _handle: { readStop(): number; reading: boolean } })._handle;
  handle.readStop();
  handle.reading = false;
  // Node resumes a finished child's readable pipes; keep it out of that, then hand it on.
  (pipe as { readable: boolean }).readable = false;
  if (opts.exit) await new Promise((resolve) => child.once("exit", resolve));
  await new Promise((resolve) => setTimeout(resolve, 100));
  (pipe as { readable: boolean }).readable = true;
  (pipe as unknown as { _readableState: { reading: boolean } })._readableState.reading = false;
  return { pipe, kill: () => child.kill("SIGKILL") };
}

async function* exitedAtOnce(): AsyncGenerator<ExecEvent> {
  yield { type: "started", startedAt: new Date() };
  yield { type: "exited", exit: { exitCode: 0, signal: "", timedOut: false, oomKilled: false, durationMs: 1 } };
}

async function drain(it: AsyncGenerator<ExecEvent>): Promise<ExecEvent[]> {
  const out: ExecEvent[] = [];
  for (let r = await it.next(); !r.done; r = await it.next()) out.push(r.value);
  return out;
}

const stdoutOf = (events: ExecEvent[]) =>
  events
    .flatMap((e) => (e.type === "stdout" ? [Buffer.from(e.data).toString()] : []))
    .join("");

test("direct stdout: a drain timer that fires after the loop was blocked still takes the output waiting in the pipe", async (t) => {
  const { pipe } = await unreadPipeOf("printf hello", { exit: true });
  // Go on from an I/O callback (the poll phase), where a busy server spends its time: the next turn
  // of the loop then runs its timers, with a fresh clock, before it polls the pipe.
  await stat("/");
  const it = withDirectStdout(exitedAtOnce(), Promise.resolve(pipe), () => undefined);
  t.is((await it.next()).value?.type, "started");
  const rest = drain(it);
  // Let the merge take the exit and the pipe (microtasks only: no poll reads the pipe meanwhile),
  // then hold the loop past the drain time.
  for (let i = 0; i < 100; i++) await Promise.resolve();
  busy(PIPE_DRAIN_MS + 500);
  const events = await rest;
  t.is(stdoutOf(events), "hello");
  t.is(events.at(-1)?.type, "exited");
});

test("direct stdout: a pipe an escaped process keeps open is given up on once it is quiet", async (t) => {
  // The writer lives on (it stands for a process that escaped every kill) but says nothing more.
  const { pipe, kill } = await unreadPipeOf("printf early; exec sleep 30", { exit: false });
  t.teardown(kill);
  const events = await drain(withDirectStdout(exitedAtOnce(), Promise.resolve(pipe), () => undefined));
  t.is(stdoutOf(events), "early");
  t.is(events.at(-1)?.type, "exited");
});
