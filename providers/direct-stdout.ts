/**
 * A command's events with its stdout read straight from the command's pipe, which the server
 * opened through the local executor's descriptor of it (ExecRequest.passStdout): the bulk of a streamed command's
 * output then never crosses the executor (one copy less, no framing, no executor CPU), while
 * `started`, stderr and `exited` still come from the executor as frames.
 *
 * The merged stream keeps the provider boundary's contract: `started` first, output chunks of at
 * most 64 KiB read only as fast as they are consumed, `exited` last and only after stdout ended
 * (or, like the executor's own pipes, once it stayed quiet for PIPE_DRAIN_MS after the exit: a
 * process that escaped every kill must not hold the call open). Stopping early kills the command through `abort`.
 */
import { closeSync, constants as fsConstants, fstatSync, openSync } from "node:fs";
import { Socket } from "node:net";
import type { Readable } from "node:stream";
import { markOwned } from "../core/owned-chunks.ts";
import { giveUpWhenQuiet, OutputQueue, pumpOutput } from "./executor/output-queue.ts";
import { PIPE_DRAIN_CAP_MS, PIPE_DRAIN_MS } from "./executor/process-runner.ts";
import type { ExecEvent } from "./types.ts";

/**
 * This process's own read end of the pipe that process `pid` holds as descriptor `fd` (opened
 * through /proc: the same user, or a child). Throws when it cannot be opened, or when it is not a
 * pipe: nothing else that process holds open is read as a command's output.
 */
export function openPipeOf(pid: number, fd: number): Socket {
  const own = openSync(`/proc/${pid}/fd/${fd}`, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  try {
    if (!fstatSync(own).isFIFO()) throw Object.assign(new Error(`descriptor ${fd} of process ${pid} is not a pipe`), { code: "ENOTFIFO" });
    return new Socket({ fd: own, readable: true, writable: false });
  } catch (err) {
    closeSync(own);
    throw err;
  }
}

/** How long after the exit a pipe still on its way is waited for. */
const PIPE_LATE_MS = 30_000;

/**
 * Merges `events` (the executor's frames for a call whose stdout was passed) with `stdout` (the
 * pipe, once it arrived; undefined when there is none). `abort` kills the command.
 */
export async function* withDirectStdout(events: AsyncGenerator<ExecEvent>, stdout: Promise<Readable | undefined>, abort: () => void): AsyncGenerator<ExecEvent> {
  let pipe: Readable | undefined;
  let closed = false;
  let onClose: () => void = () => undefined;
  const closing = new Promise<undefined>((resolve) => (onClose = () => resolve(undefined)));
  const close = () => {
    closed = true;
    pipe?.destroy();
    onClose();
  };
  const queue = new OutputQueue<ExecEvent>();
  try {
    // `started` first: the pipe may well arrive before it.
    const first = await events.next();
    if (first.done) return;
    yield first.value;

    let exit: ExecEvent | undefined;
    let failure: { error: unknown } | undefined;
    let framesDone = false;
    let stdoutDone = false;
    let lateTimer: NodeJS.Timeout | undefined;
    let stopDrain = () => {};
    let pipeSettled = false;
    // The drain runs from the later of the exit and the pipe's arrival: what it bounds is a pipe
    // held open by an escaped process (giveUpWhenQuiet), not a pipe still on its way. (The local
    // provider settles the pipe before `started`; a `stdout` that settles later is waited for.)
    // A pipe that never comes is given up on after PIPE_LATE_MS, so nothing can hold the call
    // open for ever.
    let drainArmed = false;
    const armDrain = () => {
      if (!exit || drainArmed) return;
      if (!pipeSettled) {
        lateTimer ??= setTimeout(close, PIPE_LATE_MS);
        return;
      }
      drainArmed = true;
      clearTimeout(lateTimer);
      stopDrain = giveUpWhenQuiet(pipe ? [pipe] : [], queue, close, PIPE_DRAIN_MS, PIPE_DRAIN_CAP_MS);
    };
    const frames = (async () => {
      try {
        for (;;) {
          const r = await events.next();
          if (r.done) break;
          if (r.value.type !== "exited") {
            await queue.push(r.value);
            continue;
          }
          exit = r.value;
          armDrain();
        }
      } catch (err) {
        failure = { error: err };
        close();
      } finally {
        framesDone = true;
        queue.notify();
      }
    })();
    const output = (async () => {
      // The pipe (or undefined: none) settles with `started`; one that has not come by the time
      // the call closes is not waited for.
      const received = await Promise.race([stdout, closing]);
      pipeSettled = true;
      if (closed) void stdout.then((late) => late?.destroy());
      else pipe = received;
      armDrain();
      if (pipe) {
        await pumpOutput(pipe, queue, (data): ExecEvent => {
          // Read for this call alone: its response may free it once written (owned-chunks.ts).
          markOwned(data);
          return { type: "stdout", data };
        });
      }
      stdoutDone = true;
      queue.notify();
    })();
    try {
      for (;;) {
        const item = await queue.next(() => framesDone && stdoutDone);
        if (!item) break;
        yield item;
      }
      await Promise.all([frames, output]);
      if (failure) throw failure.error;
      if (exit) yield exit;
    } finally {
      clearTimeout(lateTimer);
      stopDrain();
    }
  } finally {
    // Whatever ended the call (the consumer stopping early, a failure), nothing stays open: the
    // command is killed, and the executor's frames are still read to their end (and dropped).
    close();
    queue.close();
    abort();
  }
}
