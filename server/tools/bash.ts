/**
 * The bash tool: `bash -c command` in the workspace, written once above the provider's exec
 * primitive. `runBash` collects and truncates; `streamBash` forwards chunks as they come.
 */
import { DomainError } from "../../core/errors.ts";
import { envProblem } from "../../providers/executor/env.ts";
import type { ExecExit, WorkspaceHandle } from "../../providers/types.ts";
import type { ToolLimits } from "./tool-limits.ts";
import { jailDirectory } from "./paths.ts";
import { BoundedBuffer } from "./text.ts";

/** A bash invocation as the API describes it. */
export interface BashInput {
  command: string;
  workdir: string;
  timeoutMs: number;
  env: Record<string, string>;
}

/** The collected result of a finished command. */
export interface BashResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  durationMs: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  stdoutTotalBytes: number;
  stderrTotalBytes: number;
  signal: string;
  oomKilled: boolean;
}

/** One event of a streamed command, with truncation already applied. */
export type BashStreamEvent =
  | { type: "started"; startedAt: Date }
  | { type: "stdout" | "stderr"; data: Uint8Array }
  | {
      type: "exited";
      exit: ExecExit;
      stdoutTruncated: boolean;
      stderrTruncated: boolean;
      stdoutTotalBytes: number;
      stderrTotalBytes: number;
    };

function bashMissing(spawnError: string): DomainError {
  return new DomainError("WORKSPACE_NOT_READY", `bash could not be started in the workspace (${spawnError}); its image needs bash`, {
    metadata: { error: spawnError },
  });
}

function resolveTimeout(requested: number, limits: ToolLimits): number {
  if (!Number.isFinite(requested) || requested < 0) {
    throw new DomainError("INVALID_ARGUMENT", "timeout_ms must not be negative", { metadata: { field: "timeout_ms" } });
  }
  if (requested > limits.maxTimeoutMs) {
    throw new DomainError("INVALID_ARGUMENT", `timeout_ms may be at most ${limits.maxTimeoutMs}`, {
      metadata: { field: "timeout_ms", max: String(limits.maxTimeoutMs) },
    });
  }
  return requested === 0 ? limits.defaultTimeoutMs : requested;
}

async function prepare(ws: WorkspaceHandle, input: BashInput, limits: ToolLimits) {
  if (input.command.trim() === "") {
    throw new DomainError("INVALID_ARGUMENT", "command is required", { metadata: { field: "command" } });
  }
  if (input.command.includes("\0")) {
    throw new DomainError("INVALID_ARGUMENT", "command contains a NUL byte", { metadata: { field: "command" } });
  }
  for (const [name, value] of Object.entries(input.env)) {
    const problem = envProblem(name, value);
    if (problem !== undefined) throw new DomainError("INVALID_ARGUMENT", problem, { metadata: { field: "env", name: name.slice(0, 100) } });
  }
  const timeoutMs = resolveTimeout(input.timeoutMs, limits);
  const cwd = await jailDirectory(ws, input.workdir, "workdir");
  return { argv: ["bash", "-c", input.command], cwd, env: input.env, timeoutMs, killGraceMs: limits.killGraceMs };
}

/**
 * Runs a command to completion. A non-zero exit is a normal result; a timeout throws
 * COMMAND_TIMEOUT carrying the partial output. Output past the limit is counted, not kept.
 */
export async function runBash(ws: WorkspaceHandle, input: BashInput, limits: ToolLimits, signal?: AbortSignal): Promise<BashResult> {
  const spec = await prepare(ws, input, limits);
  const out = new BoundedBuffer(limits.maxOutputBytes);
  const err = new BoundedBuffer(limits.maxOutputBytes);
  let exit: ExecExit | undefined;
  for await (const ev of ws.exec({ ...spec, signal })) {
    if (ev.type === "stdout") out.push(ev.data);
    else if (ev.type === "stderr") err.push(ev.data);
    else if (ev.type === "exited") exit = ev.exit;
  }
  if (!exit) throw new Error("exec stream ended without an exit event");
  if (exit.spawnError) throw bashMissing(exit.spawnError);
  if (signal?.aborted) throw new DomainError("CANCELLED", "The call was cancelled and the command killed");
  const partial = {
    stdout: out.text(),
    stderr: err.text(),
    stdoutTruncated: out.truncated,
    stderrTruncated: err.truncated,
    stdoutTotalBytes: out.total,
    stderrTotalBytes: err.total,
    durationMs: exit.durationMs,
  };
  if (exit.timedOut) {
    throw new DomainError("COMMAND_TIMEOUT", `Command timed out after ${spec.timeoutMs} ms and was killed (${exit.signal || "exited"})`, {
      metadata: { timeout_ms: String(spec.timeoutMs), signal: exit.signal },
      payload: { case: "partialOutput", value: partial },
    });
  }
  return { ...partial, exitCode: exit.exitCode, signal: exit.signal, oomKilled: exit.oomKilled };
}

/**
 * Runs a command and yields its events as they come. `maxOutputBytes` (0 = unlimited) stops
 * forwarding a stream past that many bytes while its total keeps counting. Ending the iteration
 * early (a cancelled call) kills the command.
 */
export async function* streamBash(
  ws: WorkspaceHandle,
  input: BashInput,
  maxOutputBytes: number,
  limits: ToolLimits,
  signal?: AbortSignal,
): AsyncGenerator<BashStreamEvent> {
  if (!Number.isFinite(maxOutputBytes) || maxOutputBytes < 0) {
    throw new DomainError("INVALID_ARGUMENT", "max_output_bytes must not be negative", { metadata: { field: "max_output_bytes" } });
  }
  const spec = await prepare(ws, input, limits);
  const cap = maxOutputBytes === 0 ? Number.POSITIVE_INFINITY : maxOutputBytes;
  const totals = { stdout: 0, stderr: 0 };
  for await (const ev of ws.exec({ ...spec, signal })) {
    if (ev.type === "stdout" || ev.type === "stderr") {
      const before = totals[ev.type];
      totals[ev.type] += ev.data.length;
      if (before >= cap) continue;
      yield { type: ev.type, data: before + ev.data.length <= cap ? ev.data : ev.data.subarray(0, cap - before) };
    } else if (ev.type === "started") {
      yield ev;
    } else {
      if (ev.exit.spawnError) throw bashMissing(ev.exit.spawnError);
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
}
