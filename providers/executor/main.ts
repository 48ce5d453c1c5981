/**
 * The executor resident in a container sandbox: the container's main process (under the init
 * that reaps zombies). It reads frames from stdin, runs each EXEC with the same process runner the
 * local provider uses, and writes events back on stdout. It never writes anything else to stdout.
 *
 * Runs with the server's own Node binary and this directory bind-mounted read-only, so images
 * need nothing but a shell.
 */
import { checkExecRequest } from "./check.ts";
import { runProcess } from "./process-runner.ts";
import { readdir } from "node:fs/promises";
import { encodeFrame, type ExecRequest, F, FrameReader, WINDOW } from "./protocol.ts";
import { executorVersion } from "./version.ts";

const VERSION = Buffer.from(executorVersion());
/** Count cgroup OOM kills: only meaningful when the executor has a cgroup of its own (a container). */
const DETECT_OOM = process.argv.includes("--detect-oom");

interface Running {
  abort: AbortController;
  /** Bytes sent minus bytes acknowledged. */
  inFlight: number;
  wake: (() => void) | undefined;
}

const running = new Map<number, Running>();
let stdoutBlocked: Promise<void> | undefined;

function send(type: number, id: number, payload?: Uint8Array): Promise<void> | undefined {
  const ok = process.stdout.write(encodeFrame(type, id, payload));
  if (!ok && !stdoutBlocked) {
    stdoutBlocked = new Promise<void>((resolve) => process.stdout.once("drain", () => {
      stdoutBlocked = undefined;
      resolve();
    }));
  }
  return stdoutBlocked;
}

const json = (v: unknown) => Buffer.from(JSON.stringify(v));

async function execute(id: number, req: ExecRequest): Promise<void> {
  const state: Running = { abort: new AbortController(), inFlight: 0, wake: undefined };
  running.set(id, state);
  try {
    for await (const ev of runProcess({ ...req, signal: state.abort.signal, detectOom: DETECT_OOM })) {
      switch (ev.type) {
        case "started":
          await send(F.STARTED, id, json({ startedAt: ev.startedAt.toISOString() }));
          break;
        case "stdout":
        case "stderr":
          while (state.inFlight >= WINDOW && !state.abort.signal.aborted) await new Promise<void>((r) => (state.wake = r));
          state.inFlight += ev.data.length;
          await send(ev.type === "stdout" ? F.STDOUT : F.STDERR, id, ev.data);
          break;
        case "exited":
          await send(F.EXITED, id, json(ev.exit));
          break;
      }
    }
  } catch (err) {
    await send(F.ERROR, id, json({ message: err instanceof Error ? err.message : String(err) }));
  } finally {
    running.delete(id);
  }
}

// Start libuv's thread pool now (it starts lazily on the first asynchronous fs call). Later, a
// command may have used up the sandbox's process limit (a fork bomb), and a thread that cannot be
// created then aborts Node, taking the executor down with the bomb.
await readdir("/");

const reader = new FrameReader();
process.stdin.on("data", (chunk: Buffer) => {
  for (const frame of reader.push(chunk)) {
    switch (frame.type) {
      case F.EXEC: {
        let req: ExecRequest;
        try {
          req = checkExecRequest(JSON.parse(frame.payload.toString("utf8")));
        } catch (err) {
          void send(F.ERROR, frame.id, json({ message: `bad EXEC: ${err instanceof Error ? err.message : String(err)}` }));
          break;
        }
        void execute(frame.id, req);
        break;
      }
      case F.KILL: {
        const r = running.get(frame.id);
        r?.abort.abort();
        r?.wake?.();
        break;
      }
      case F.CREDIT: {
        const r = running.get(frame.id);
        if (r && frame.payload.length >= 4) {
          r.inFlight = Math.max(0, r.inFlight - frame.payload.readUInt32BE(0));
          const w = r.wake;
          r.wake = undefined;
          w?.();
        }
        break;
      }
      case F.PING:
        void send(F.PONG, frame.id, VERSION);
        break;
    }
  }
});
// The server went away for good (stdin closed): kill everything still running, then exit; the
// container stops and the server restarts it on next use.
process.stdin.on("end", () => {
  for (const r of running.values()) r.abort.abort();
  setTimeout(() => process.exit(0), 200);
});
