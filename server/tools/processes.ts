/**
 * Background processes: the `bash` tool's long-lived form (ProcessService), written once above the
 * provider's exec primitive and the server's process table (processes/process-table.ts). A process
 * is admitted as Bash admits a command (its text, variables, the command policy, the working
 * directory), then kept running after the call answers; the other calls read its output, follow
 * it, feed its stdin or terminal, signal it and wait for it.
 */
import { DomainError } from "../../core/errors.ts";
import type { TerminalSize } from "../../providers/types.ts";
import { SIGNALS } from "../../providers/executor/protocol.ts";
import type { BackgroundProcess, ProcessTable, ProcessView } from "../processes/process-table.ts";
import type { RingRead } from "../processes/output-ring.ts";
import { admitCommand, execIn } from "./bash.ts";
import { remainingMs, type ToolContext } from "./context.ts";

export interface StartProcessInput {
  command: string;
  workdir: string;
  env: Record<string, string>;
  pty: TerminalSize | undefined;
  stdin: boolean;
  timeoutMs: number;
}

/** Most bytes of each stream one ReadProcessOutput returns. */
export const MAX_READ_BYTES = 1024 * 1024;
/** Most bytes one WriteProcessStdin carries. */
export const MAX_STDIN_BYTES = 1024 * 1024;
/** Bytes per AttachProcess message. */
const ATTACH_CHUNK = 64 * 1024;
/** The longest timer Node keeps (about 24.8 days): a process without a timeout of its own runs this long at most. */
const NO_TIMEOUT_MS = 2 ** 31 - 1;

function tableOf(ctx: ToolContext): ProcessTable {
  if (!ctx.processes) throw new DomainError("PROCESSES_UNSUPPORTED", "Background processes are not available here");
  return ctx.processes;
}

function checkSize(size: TerminalSize, field: string): void {
  for (const [name, v] of [["rows", size.rows], ["cols", size.cols]] as const) {
    if (!Number.isInteger(v) || v < 1 || v > 1000) throw new DomainError("INVALID_ARGUMENT", `${field}.${name} must be from 1 to 1000`, { metadata: { field: `${field}.${name}` } });
  }
}

function checkOffset(v: number, field: string): void {
  if (!Number.isSafeInteger(v) || v < 0) throw new DomainError("INVALID_ARGUMENT", `${field} must not be negative`, { metadata: { field } });
}

export async function startProcess(ctx: ToolContext, input: StartProcessInput): Promise<ProcessView> {
  const table = tableOf(ctx);
  if (ctx.workspace.processes === false) throw new DomainError("PROCESSES_UNSUPPORTED", "This workspace's provider runs no processes");
  if (input.pty) checkSize(input.pty, "pty");
  if (!Number.isSafeInteger(input.timeoutMs) || input.timeoutMs < 0) throw new DomainError("INVALID_ARGUMENT", "timeout_ms must not be negative", { metadata: { field: "timeout_ms" } });
  const cwd = await admitCommand(ctx, input);
  // A terminal program expects a terminal type; the caller's own TERM wins.
  const env = { ...(input.pty ? { TERM: "xterm-256color" } : {}), ...ctx.env, ...input.env };
  const workspace = ctx.workspace;
  const p = await table.start(
    {
      workspaceId: workspace.id,
      sessionId: ctx.sessionId ?? "",
      command: input.command,
      workdir: input.workdir,
      pty: input.pty !== undefined,
      stdin: input.stdin,
      exec: (control, signal) =>
        execIn({ ...ctx, signal }, {
          argv: ["bash", "-c", input.command],
          cwd,
          env,
          timeoutMs: input.timeoutMs === 0 ? NO_TIMEOUT_MS : Math.min(input.timeoutMs, NO_TIMEOUT_MS),
          killGraceMs: ctx.limits.killGraceMs,
          signal,
          control,
          ...(input.stdin ? { stdin: true } : {}),
          ...(input.pty ? { pty: input.pty } : {}),
        }),
    },
    ctx.binding?.maxProcesses === undefined ? undefined : Math.min(ctx.binding.maxProcesses, table.settings.maxRunning),
  );
  return table.view(workspace.id, p.id);
}

export async function listProcesses(ctx: ToolContext): Promise<ProcessView[]> {
  return tableOf(ctx).list(ctx.workspace.id);
}

export async function getProcess(ctx: ToolContext, input: { processId: string }): Promise<ProcessView> {
  return tableOf(ctx).view(ctx.workspace.id, input.processId);
}

export interface ProcessOutputRead {
  stdout: RingRead;
  stderr: RingRead;
  process: ProcessView;
}

export async function readProcessOutput(ctx: ToolContext, input: { processId: string; stdoutOffset: number; stderrOffset: number; maxBytes: number }): Promise<ProcessOutputRead> {
  checkOffset(input.stdoutOffset, "stdout_offset");
  checkOffset(input.stderrOffset, "stderr_offset");
  checkOffset(input.maxBytes, "max_bytes");
  const table = tableOf(ctx);
  const view = table.view(ctx.workspace.id, input.processId);
  const p = live(table, ctx, input.processId);
  const max = input.maxBytes === 0 ? MAX_READ_BYTES : Math.min(input.maxBytes, MAX_READ_BYTES);
  if (!p) {
    // A process of a server before this one: its output went with it.
    const gone = (offset: number, total: number): RingRead => ({ offset: Math.max(offset, total), data: Buffer.alloc(0), missed: Math.max(0, total - offset) });
    return { stdout: gone(input.stdoutOffset, view.stdoutTotal), stderr: gone(input.stderrOffset, view.stderrTotal), process: view };
  }
  // The state first: output read after it is at least what that state had written.
  const process = table.view(ctx.workspace.id, p.id);
  return { stdout: p.stdout.read(input.stdoutOffset, max), stderr: p.stderr.read(input.stderrOffset, max), process };
}

/** The live process `id`, or undefined for one a server before this one ran. */
function live(table: ProcessTable, ctx: ToolContext, id: string): BackgroundProcess | undefined {
  try {
    return table.get(ctx.workspace.id, id);
  } catch (err) {
    if (err instanceof DomainError && err.reason === "PROCESS_NOT_RUNNING") return undefined;
    throw err;
  }
}

export type AttachEvent =
  | { type: "stdout" | "stderr"; offset: number; data: Buffer }
  | { type: "missed"; stderr: boolean; bytes: number }
  | { type: "ended"; process: ProcessView };

/**
 * Output from the offsets, then live output until the process ends; the last event is its final
 * state. Ending the iteration (the caller goes away) leaves the process running.
 */
export async function* attachProcess(ctx: ToolContext, input: { processId: string; stdoutOffset: number; stderrOffset: number }): AsyncGenerator<AttachEvent> {
  checkOffset(input.stdoutOffset, "stdout_offset");
  checkOffset(input.stderrOffset, "stderr_offset");
  const table = tableOf(ctx);
  const p = live(table, ctx, input.processId);
  if (!p) {
    yield { type: "ended", process: table.view(ctx.workspace.id, input.processId) };
    return;
  }
  const at = { stdout: input.stdoutOffset, stderr: input.stderrOffset };
  const aborted = new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
  for (;;) {
    // Whatever ended the process was noted before its last output was read (the state first).
    const wasRunning = p.running;
    const changed = p.changed();
    let sent = false;
    for (const name of ["stdout", "stderr"] as const) {
      for (;;) {
        const r = p[name].read(at[name], ATTACH_CHUNK);
        if (r.missed > 0) yield { type: "missed", stderr: name === "stderr", bytes: r.missed };
        if (r.data.length === 0) {
          at[name] = r.offset;
          break;
        }
        yield { type: name, offset: r.offset, data: r.data };
        at[name] = r.offset + r.data.length;
        sent = true;
      }
    }
    if (!wasRunning) {
      yield { type: "ended", process: table.view(ctx.workspace.id, p.id) };
      return;
    }
    if (ctx.signal.aborted) return;
    if (!sent) await Promise.race([changed, aborted]);
  }
}

export async function writeProcessStdin(ctx: ToolContext, input: { processId: string; data: Uint8Array; text?: string; close: boolean }): Promise<{ bytesWritten: number }> {
  if (input.text !== undefined && input.text !== "") {
    if (input.data.length > 0) throw new DomainError("INVALID_ARGUMENT", "Give data or text, not both", { metadata: { field: "text" } });
    return writeProcessStdin(ctx, { processId: input.processId, data: Buffer.from(input.text, "utf8"), close: input.close });
  }
  if (input.data.length > MAX_STDIN_BYTES) {
    throw new DomainError("INVALID_ARGUMENT", `data may be at most ${MAX_STDIN_BYTES} bytes per call`, { metadata: { field: "data", max_bytes: String(MAX_STDIN_BYTES) } });
  }
  const p = tableOf(ctx).get(ctx.workspace.id, input.processId);
  if (!p.running) throw new DomainError("PROCESS_NOT_RUNNING", "The process has ended", { metadata: { process_id: p.id } });
  if (!p.stdinOpen) throw new DomainError("STDIN_CLOSED", "The process's stdin is closed, or it was started without stdin", { metadata: { process_id: p.id } });
  const work = (async () => {
    if (input.data.length > 0) await p.control.write(input.data);
    if (input.close) {
      p.stdinOpen = false;
      await p.control.closeStdin();
      p.notify();
    }
  })();
  await untilDeadline(ctx, work, "The process has not read its stdin yet; the bytes stay queued for it");
  return { bytesWritten: input.data.length };
}

export async function resizeProcess(ctx: ToolContext, input: { processId: string; size: TerminalSize | undefined }): Promise<void> {
  if (!input.size) throw new DomainError("INVALID_ARGUMENT", "size is required", { metadata: { field: "size" } });
  checkSize(input.size, "size");
  const p = tableOf(ctx).get(ctx.workspace.id, input.processId);
  if (!p.running) throw new DomainError("PROCESS_NOT_RUNNING", "The process has ended", { metadata: { process_id: p.id } });
  if (!p.pty) throw new DomainError("NOT_A_TERMINAL", "The process has no terminal: start it with pty", { metadata: { process_id: p.id } });
  await p.control.resize(input.size.rows, input.size.cols);
}

/** A signal's canonical name ("TERM", "sigterm" → "SIGTERM"), or INVALID_ARGUMENT. */
export function signalName(name: string): string {
  const upper = name.trim().toUpperCase();
  const full = upper.startsWith("SIG") ? upper : `SIG${upper}`;
  if (!SIGNALS.has(full)) {
    throw new DomainError("INVALID_ARGUMENT", `signal must be one of ${[...SIGNALS].map((s) => s.slice(3)).join(", ")}`, { metadata: { field: "signal" } });
  }
  return full;
}

export async function signalProcess(ctx: ToolContext, input: { processId: string; signal: string }): Promise<void> {
  const sig = signalName(input.signal);
  const p = tableOf(ctx).get(ctx.workspace.id, input.processId);
  if (!p.running) throw new DomainError("PROCESS_NOT_RUNNING", "The process has ended", { metadata: { process_id: p.id } });
  await p.control.signal(sig);
}

export async function waitProcess(ctx: ToolContext, input: { processId: string; timeoutMs: number }): Promise<{ process: ProcessView; timedOut: boolean }> {
  if (!Number.isSafeInteger(input.timeoutMs) || input.timeoutMs < 0) throw new DomainError("INVALID_ARGUMENT", "timeout_ms must not be negative", { metadata: { field: "timeout_ms" } });
  const table = tableOf(ctx);
  const p = live(table, ctx, input.processId);
  if (!p) return { process: table.view(ctx.workspace.id, input.processId), timedOut: false };
  // Up to the request's timeout, the call's deadline (less a moment to answer) and the server's longest command.
  const left = remainingMs(ctx);
  const limits = [input.timeoutMs === 0 ? ctx.limits.maxTimeoutMs : input.timeoutMs, ctx.limits.maxTimeoutMs, ...(left === undefined ? [] : [Math.max(0, left - 50)])];
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.min(...limits))));
  const aborted = new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
  try {
    await Promise.race([p.done, timeout, aborted]);
  } finally {
    clearTimeout(timer);
  }
  if (ctx.signal.aborted && p.running) throw new DomainError("CANCELLED", "The call was cancelled; the process runs on");
  return { process: table.view(ctx.workspace.id, p.id), timedOut: p.running };
}

/** Waits for `work` up to the call's deadline (then DEADLINE_EXCEEDED saying `late`; the work goes on). */
async function untilDeadline(ctx: ToolContext, work: Promise<void>, late: string): Promise<void> {
  const left = remainingMs(ctx);
  if (left === undefined) return work;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), Math.max(0, left - 50))));
  work.catch(() => undefined);
  try {
    if ((await Promise.race([work, deadline])) === "late") throw new DomainError("COMMAND_TIMEOUT", late);
  } finally {
    clearTimeout(timer);
  }
}
