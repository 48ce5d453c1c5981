/**
 * The bash tool: `bash -c command` in the workspace, written once above the provider's exec
 * primitive. `runBash` collects and truncates; `streamBash` forwards chunks as they come.
 *
 * Two clocks stop a command, with the same sequence (SIGTERM to the tree, SIGKILL after the
 * grace): the request's `timeout_ms`, and the call's protocol deadline when it comes first. Both
 * end as COMMAND_TIMEOUT (DEADLINE_EXCEEDED) carrying the output so far. A deadline also bounds
 * the wait: the call answers shortly after it even if the command is still dying, and the kill
 * sequence finishes in the background. A cancel by the caller kills at once and ends CANCELLED.
 */
import { type CapturedOutput, DomainError, hasReason, type OutputTotals } from "../../core/errors.ts";
import { releaseOwned } from "../../core/owned-chunks.ts";
import { envProblem } from "../../providers/executor/env.ts";
import type { ExecEvent, ExecExit, ExecSpec } from "../../providers/types.ts";
import { remainingMs, type ToolContext } from "./context.ts";
import { jailPath } from "./paths.ts";
import { BoundedBuffer } from "./text.ts";

/** A bash invocation as the API describes it. */
export interface BashInput {
  command: string;
  workdir: string;
  /** 0 for the default. */
  timeoutMs: number;
  env: Record<string, string>;
}

/** StreamBash's input: a command and how much of each stream to forward (0 = all). */
export interface StreamBashInput extends BashInput {
  maxOutputBytes: number;
}

/** The collected result of a finished command. */
export interface BashResult extends CapturedOutput {
  exitCode: number;
  signal: string;
  oomKilled: boolean;
}

/** One event of a streamed command, with truncation already applied. */
export type BashStreamEvent =
  | { type: "started"; startedAt: Date }
  | { type: "stdout" | "stderr"; data: Uint8Array }
  | ({ type: "exited"; exit: ExecExit } & OutputTotals);

/** Longest single argument or environment entry Linux passes to a program (MAX_ARG_STRLEN, NUL included). */
export const MAX_ARG_BYTES = 128 * 1024;

/** How long after a protocol deadline the call still waits for a command dying of SIGTERM. */
const DEADLINE_SETTLE_MS = 250;

function bashMissing(spawnError: string): DomainError {
  // Only a missing program means the image lacks bash; anything else is said as it is.
  const why = spawnError === "ENOENT" ? "; its image needs bash" : "";
  return new DomainError("WORKSPACE_NOT_READY", `bash could not be started in the workspace (${spawnError})${why}`, {
    metadata: { error: spawnError },
  });
}

/** A command's run: its exec spec and which clock stops it. */
interface Plan {
  spec: ExecSpec;
  /** The request's own timeout (what the message reports when it fires). */
  requestedTimeoutMs: number;
  /** True when the protocol deadline comes before the request's timeout. */
  deadlineBound: boolean;
}

/**
 * Checks a command as Bash runs it (its text, its variables, the command policy, the working
 * directory's form) and returns the working directory as the jail will resolve it. StartProcess
 * admits its commands the same way.
 */
export async function admitCommand(ctx: ToolContext, input: Pick<BashInput, "command" | "env" | "workdir">): Promise<string> {
  checkCommandText(input);
  return admitChecked(ctx, input);
}

/** The command policy's decision and the working directory, for a command whose text passed. */
async function admitChecked(ctx: ToolContext, input: Pick<BashInput, "command" | "env" | "workdir">): Promise<string> {
  // The command policy decides on the parsed script before anything runs (COMMAND_NOT_ALLOWED).
  await ctx.commands.enforce(input.command, input.env, input.workdir);
  // Checked lexically here; the executor resolves it beneath the root when it starts the command
  // (no round trip first), and its faults name the field below.
  return jailPath(input.workdir, "workdir", false);
}

function checkCommandText(input: Pick<BashInput, "command" | "env">): void {
  if (input.command.trim() === "") {
    throw new DomainError("INVALID_ARGUMENT", "command is required", { metadata: { field: "command" } });
  }
  if (input.command.includes("\0")) {
    throw new DomainError("INVALID_ARGUMENT", "command contains a NUL byte", { metadata: { field: "command" } });
  }
  if (Buffer.byteLength(input.command) >= MAX_ARG_BYTES) {
    throw new DomainError("INVALID_ARGUMENT", `command is longer than ${MAX_ARG_BYTES - 1} bytes, the most Linux passes to a program in one argument; write a script file and run it`, {
      metadata: { field: "command", max_bytes: String(MAX_ARG_BYTES - 1) },
    });
  }
  let envBytes = 0;
  for (const [name, value] of Object.entries(input.env)) {
    const problem = envProblem(name, value);
    if (problem !== undefined) throw new DomainError("INVALID_ARGUMENT", problem, { metadata: { field: "env", name: name.slice(0, 100) } });
    const entry = Buffer.byteLength(name) + Buffer.byteLength(value) + 2;
    envBytes += entry;
    if (entry >= MAX_ARG_BYTES || envBytes > 4 * MAX_ARG_BYTES) {
      throw new DomainError("INVALID_ARGUMENT", `env is too large (at most ${MAX_ARG_BYTES - 1} bytes per variable, ${4 * MAX_ARG_BYTES} in all)`, {
        metadata: { field: "env", name: name.slice(0, 100) },
      });
    }
  }
}

/**
 * The command's spec. `keep` is how much of each output stream the caller forwards (a unary
 * call's output limit, a stream's max_output_bytes; Infinity for all of it).
 */
async function plan(ctx: ToolContext, input: BashInput, streamed: boolean, keep: number): Promise<Plan> {
  const { limits } = ctx;
  checkCommandText(input);
  if (!Number.isFinite(input.timeoutMs) || input.timeoutMs < 0) {
    throw new DomainError("INVALID_ARGUMENT", "timeout_ms must not be negative", { metadata: { field: "timeout_ms" } });
  }
  if (input.timeoutMs > limits.maxTimeoutMs) {
    throw new DomainError("INVALID_ARGUMENT", `timeout_ms may be at most ${limits.maxTimeoutMs}`, {
      metadata: { field: "timeout_ms", max: String(limits.maxTimeoutMs) },
    });
  }
  const requestedTimeoutMs = input.timeoutMs === 0 ? limits.defaultTimeoutMs : input.timeoutMs;
  const cwd = await admitChecked(ctx, input);
  const left = remainingMs(ctx);
  const deadlineBound = left !== undefined && left < requestedTimeoutMs;
  return {
    spec: {
      argv: ["bash", "-c", input.command],
      cwd,
      env: ctx.env === undefined ? input.env : { ...ctx.env, ...input.env },
      timeoutMs: deadlineBound ? (left as number) : requestedTimeoutMs,
      killGraceMs: limits.killGraceMs,
      signal: ctx.signal,
      directStdout: streamed,
      // A unary call answers once, at the end: the sandbox need not say when the command started.
      ...(streamed ? {} : { started: false as const }),
      // Nor need it send more output than is forwarded: it counts the rest, reported on `exited`.
      // Not under a protocol deadline, which may end the call before `exited` brings the counts.
      ...(deadlineBound || !Number.isSafeInteger(keep) ? {} : { keepBytes: keep }),
    },
    requestedTimeoutMs,
    deadlineBound,
  };
}

function timeoutError(p: Plan, exit: ExecExit | undefined, partial: CapturedOutput): DomainError {
  const how = exit ? `was stopped (${exit.signal || "exited"})` : "is being stopped (SIGTERM, then SIGKILL)";
  const message = p.deadlineBound
    ? `The call's deadline passed after ${p.spec.timeoutMs} ms; the command ${how}`
    : `Command timed out after ${p.requestedTimeoutMs} ms and ${how}`;
  return new DomainError("COMMAND_TIMEOUT", message, {
    metadata: { timeout_ms: String(p.spec.timeoutMs), signal: exit?.signal ?? "", deadline: String(p.deadlineBound) },
    payload: { case: "partialOutput", value: partial },
  });
}

/** The workspace's exec stream, with the working directory's faults naming the `workdir` field. */
export async function* execIn(ctx: ToolContext, spec: ExecSpec): AsyncGenerator<ExecEvent> {
  let started = false;
  try {
    for await (const ev of ctx.workspace.exec(spec)) {
      started = true;
      yield ev;
    }
  } catch (err) {
    if (!started && hasReason(err, "FILE_NOT_FOUND", "NOT_A_DIRECTORY", "PATH_OUTSIDE_WORKSPACE", "INVALID_ARGUMENT")) {
      throw new DomainError(err.reason, err.message, { metadata: { ...err.metadata, field: "workdir" }, cause: err.cause });
    }
    throw err;
  }
}

/**
 * Iterates `events` until `exited`, except that under a protocol deadline it stops waiting
 * DEADLINE_SETTLE_MS after the deadline: then it yields nothing more and the rest of the stream
 * is drained in the background, so the SIGTERM-then-SIGKILL sequence still completes.
 */
async function* untilSettled(events: AsyncIterable<ExecEvent>, p: Plan): AsyncGenerator<ExecEvent> {
  const it = events[Symbol.asyncIterator]();
  const giveUpAt = p.deadlineBound ? Date.now() + p.spec.timeoutMs + DEADLINE_SETTLE_MS : Number.POSITIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  // Whether the exec stream is finished or handed to the background drain; otherwise closing this
  // generator early (a cancelled call) closes the exec stream, which kills the command.
  let released = false;
  try {
    for (;;) {
      let next: IteratorResult<ExecEvent>;
      if (giveUpAt === Number.POSITIVE_INFINITY) {
        next = await it.next();
      } else {
        const pending = it.next();
        const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), Math.max(0, giveUpAt - Date.now()))));
        const first = await Promise.race([pending, late]);
        clearTimeout(timer);
        if (first === "late") {
          released = true;
          // Keep consuming in the background so the runner can finish its kill sequence.
          void pending.then(async (r) => {
            if (r.done) return;
            for (let n = await it.next(); !n.done; n = await it.next());
          }).catch(() => undefined);
          return;
        }
        next = first;
      }
      if (next.done) {
        released = true;
        return;
      }
      yield next.value;
    }
  } finally {
    clearTimeout(timer);
    if (!released) await it.return?.();
  }
}

/**
 * The command's events. Only a call whose protocol deadline comes before its timeout needs
 * `untilSettled`; otherwise it would pass every event through one more generator for nothing
 * (stopping early closes the exec stream either way).
 */
function settledEvents(ctx: ToolContext, p: Plan): AsyncIterable<ExecEvent> {
  const events = execIn(ctx, p.spec);
  return p.deadlineBound ? untilSettled(events, p) : events;
}

/** A byte count the sandbox reported, or 0 when it is none. */
function counted(n: unknown): number {
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

/**
 * Runs a command to completion. A non-zero exit is a normal result; a timeout or deadline throws
 * COMMAND_TIMEOUT carrying the partial output. Output past the limit is counted, not kept.
 */
export async function runBash(ctx: ToolContext, input: BashInput): Promise<BashResult> {
  const p = await plan(ctx, input, false, ctx.limits.maxOutputBytes);
  const out = new BoundedBuffer(ctx.limits.maxOutputBytes);
  const err = new BoundedBuffer(ctx.limits.maxOutputBytes);
  const ended = await ctx.changes?.commandStarting();
  const started = Date.now();
  let exit: ExecExit | undefined;
  try {
    for await (const ev of settledEvents(ctx, p)) {
      if (ev.type === "stdout") out.push(ev.data);
      else if (ev.type === "stderr") err.push(ev.data);
      else if (ev.type === "exited") exit = ev.exit;
    }
  } finally {
    ended?.();
  }
  if (exit?.spawnError) throw bashMissing(exit.spawnError);
  // What the sandbox counted but did not send (ExecSpec.keepBytes).
  out.total = Math.max(out.total, counted(exit?.outputBytes?.stdout));
  err.total = Math.max(err.total, counted(exit?.outputBytes?.stderr));
  if (ctx.signal.aborted) throw new DomainError("CANCELLED", "The call was cancelled and the command killed");
  const partial: CapturedOutput = {
    stdout: out.text(),
    stderr: err.text(),
    stdoutTruncated: out.truncated,
    stderrTruncated: err.truncated,
    stdoutTotalBytes: out.total,
    stderrTotalBytes: err.total,
    durationMs: exit?.durationMs ?? Date.now() - started,
  };
  if (!exit || exit.timedOut) throw timeoutError(p, exit, partial);
  return { ...partial, exitCode: exit.exitCode, signal: exit.signal, oomKilled: exit.oomKilled };
}

/**
 * Runs a command and yields its events as they come. `maxOutputBytes` (0 = unlimited) stops
 * forwarding a stream past that many bytes while its total keeps counting. Ending the iteration
 * early (a cancelled call) kills the command. At a `timeout_ms` the stream ends normally with
 * `exited.timedOut`; at a protocol deadline it sends that `exited` (when the command ended in
 * time) and then fails with COMMAND_TIMEOUT.
 */
export async function* streamBash(ctx: ToolContext, input: StreamBashInput): AsyncGenerator<BashStreamEvent> {
  if (!Number.isFinite(input.maxOutputBytes) || input.maxOutputBytes < 0) {
    throw new DomainError("INVALID_ARGUMENT", "max_output_bytes must not be negative", { metadata: { field: "max_output_bytes" } });
  }
  const cap = input.maxOutputBytes === 0 ? Number.POSITIVE_INFINITY : input.maxOutputBytes;
  const p = await plan(ctx, input, true, cap);
  const ended = await ctx.changes?.commandStarting();
  try {
    yield* streamEvents(ctx, p, cap);
  } finally {
    ended?.();
  }
}

/** StreamBash's events once planned: the command's, each stream forwarded up to `cap` bytes. */
async function* streamEvents(ctx: ToolContext, p: Plan, cap: number): AsyncGenerator<BashStreamEvent> {
  const totals = { stdout: 0, stderr: 0 };
  const started = Date.now();
  let exit: ExecExit | undefined;
  for await (const ev of settledEvents(ctx, p)) {
    if (ev.type === "stdout" || ev.type === "stderr") {
      const before = totals[ev.type];
      totals[ev.type] += ev.data.length;
      if (before >= cap) {
        // Read for this call alone (a pipe's chunk, owned-chunks.ts): its memory goes at once.
        releaseOwned(ev.data);
        continue;
      }
      yield { type: ev.type, data: before + ev.data.length <= cap ? ev.data : ev.data.subarray(0, cap - before) };
    } else if (ev.type === "started") {
      yield ev;
    } else {
      if (ev.exit.spawnError) throw bashMissing(ev.exit.spawnError);
      exit = ev.exit;
      totals.stdout = Math.max(totals.stdout, counted(exit.outputBytes?.stdout));
      totals.stderr = Math.max(totals.stderr, counted(exit.outputBytes?.stderr));
      yield {
        type: "exited",
        exit: ev.exit,
        stdoutTruncated: totals.stdout > cap,
        stderrTruncated: totals.stderr > cap,
        stdoutTotalBytes: totals.stdout,
        stderrTotalBytes: totals.stderr,
      };
    }
  }
  if (p.deadlineBound && (!exit || exit.timedOut)) {
    // The output went out as it came; the error carries only the totals.
    const partial: CapturedOutput = {
      stdout: "",
      stderr: "",
      stdoutTruncated: totals.stdout > 0,
      stderrTruncated: totals.stderr > 0,
      stdoutTotalBytes: totals.stdout,
      stderrTotalBytes: totals.stderr,
      durationMs: exit?.durationMs ?? Date.now() - started,
    };
    throw timeoutError(p, exit, partial);
  }
}
