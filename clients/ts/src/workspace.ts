/**
 * A workspace handle: the tools of one workspace (or of a session token's own workspace), each a
 * typed call taking the request's init shape without `workspace_id`.
 */
import type { Client } from "@connectrpc/connect";
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import type {
  GitCheckoutRequestSchema,
  GitCheckoutResponse,
  GitCommitRequestSchema,
  GitCommitResponse,
  GitDiffRequestSchema,
  GitDiffResponse,
  GitPushRequestSchema,
  GitPushResponse,
  GitStatusResponse,
} from "../gen/agentworkspace/v1/git_pb.js";
import type {
  BashRequestSchema,
  BashResponse,
  DeleteFileRequestSchema,
  DeleteFileResponse,
  EditFileRequestSchema,
  EditFileResponse,
  GlobRequestSchema,
  GlobResponse,
  GrepMatch,
  GrepRequestSchema,
  GrepResponse,
  ListFilesRequestSchema,
  ListFilesResponse,
  PatchFileRequestSchema,
  PatchFileResponse,
  ReadFileRequestSchema,
  ReadFileResponse,
  StreamBashRequestSchema,
  StreamGrepRequestSchema,
  StreamGrepResponse,
  ToolService,
  WriteFileRequestSchema,
  WriteFileResponse,
} from "../gen/agentworkspace/v1/tool_pb.js";
import type { AuditService, WatchEventsResponse } from "../gen/agentworkspace/v1/audit_pb.js";
import type {
  AttachProcessRequestSchema,
  AttachProcessResponse,
  ExposePortResponse,
  ExposedPort,
  Process,
  ProcessService,
  ReadProcessOutputRequestSchema,
  ReadProcessOutputResponse,
  StartProcessRequestSchema,
  WaitProcessResponse,
} from "../gen/agentworkspace/v1/process_pb.js";
import { BashStream } from "./bash-stream.ts";
import type { CallOptions, Caller } from "./call.ts";

/** A request's init shape without the workspace id the handle fills in. */
export type ToolInput<S extends DescMessage> = Omit<MessageInitShape<S>, "workspaceId" | "$typeName">;

/** Init shapes of each tool's request, without `workspaceId`. */
export type BashInput = ToolInput<typeof BashRequestSchema>;
export type StreamBashInput = ToolInput<typeof StreamBashRequestSchema>;
export type ReadInput = ToolInput<typeof ReadFileRequestSchema>;
export type WriteInput = ToolInput<typeof WriteFileRequestSchema>;
export type EditInput = ToolInput<typeof EditFileRequestSchema>;
export type PatchInput = ToolInput<typeof PatchFileRequestSchema>;
export type DeleteInput = ToolInput<typeof DeleteFileRequestSchema>;
export type ListInput = ToolInput<typeof ListFilesRequestSchema>;
export type GlobInput = ToolInput<typeof GlobRequestSchema>;
export type GrepInput = ToolInput<typeof GrepRequestSchema>;
export type StreamGrepInput = ToolInput<typeof StreamGrepRequestSchema>;
export type GitDiffInput = ToolInput<typeof GitDiffRequestSchema>;
export type GitCommitInput = ToolInput<typeof GitCommitRequestSchema>;
export type GitCheckoutInput = ToolInput<typeof GitCheckoutRequestSchema>;
export type GitPushInput = ToolInput<typeof GitPushRequestSchema>;

export type StartProcessInput = ToolInput<typeof StartProcessRequestSchema>;
export type ReadProcessOutputInput = Omit<ToolInput<typeof ReadProcessOutputRequestSchema>, "processId">;
export type AttachProcessInput = Omit<ToolInput<typeof AttachProcessRequestSchema>, "processId">;

/**
 * A workspace's background processes and exposed ports (ProcessService; the `bash` tool). Reads
 * (`list`, `get`, `read`, `wait`, `listExposedPorts`, and `exposePort`, which may be repeated) are
 * retried on UNAVAILABLE; `start`, stdin, resizes and signals are never sent twice.
 */
export interface ProcessTools {
  /** Starts `bash -c command` in the background; answers at once with the running process. */
  start(input: StartProcessInput | string, opts?: CallOptions): Promise<Process>;
  /** The workspace's processes, running and ended, oldest first. */
  list(opts?: CallOptions): Promise<Process[]>;
  /** One process: running, or how it ended. */
  get(processId: string, opts?: CallOptions): Promise<Process>;
  /** Kept output from the offsets (both 0 by default), without waiting. */
  read(processId: string, input?: ReadProcessOutputInput, opts?: CallOptions): Promise<ReadProcessOutputResponse>;
  /** Output from the offsets, then live output, then `ended`. Leaving the loop leaves the process running. */
  attach(processId: string, input?: AttachProcessInput, opts?: CallOptions): AsyncIterable<AttachProcessResponse>;
  /** Writes to its stdin (or terminal); text is sent as UTF-8. `close` ends stdin after the bytes. */
  write(processId: string, data: string | Uint8Array, options?: { close?: boolean }, opts?: CallOptions): Promise<bigint>;
  /** Ends its stdin (a terminal gets end-of-file). */
  closeStdin(processId: string, opts?: CallOptions): Promise<void>;
  /** Sets its terminal's size. */
  resize(processId: string, rows: number, cols: number, opts?: CallOptions): Promise<void>;
  /** Sends a signal ("TERM", "KILL", …) to its whole tree. */
  signal(processId: string, signal: string, opts?: CallOptions): Promise<void>;
  /** Waits until it ends or `timeoutMs` passes; `timedOut` says which. */
  wait(processId: string, timeoutMs?: number, opts?: CallOptions): Promise<WaitProcessResponse>;
  /** Exposes a port the workspace listens on at `/ports/{workspace}/{port}/` on the server. */
  exposePort(port: number, opts?: CallOptions): Promise<ExposePortResponse>;
  /** Takes a port off the proxy; how many connections through it were closed. */
  unexposePort(port: number, opts?: CallOptions): Promise<number>;
  /** The exposed ports. */
  listExposedPorts(opts?: CallOptions): Promise<ExposedPort[]>;
}

/** The end of a `streamGrep`: matches sent, and whether `max_results` stopped the search. */
export interface GrepSummary {
  matchCount: number;
  truncated: boolean;
}

/** The git tools of a workspace. */
export interface GitTools {
  /** Branch, upstream, ahead/behind and each changed file. Retried on UNAVAILABLE. */
  status(opts?: CallOptions): Promise<GitStatusResponse>;
  /** Staged and unstaged diffs (or against a ref). Retried on UNAVAILABLE. */
  diff(input?: GitDiffInput, opts?: CallOptions): Promise<GitDiffResponse>;
  /** Stages exactly `files` (or every tracked change with `all`) and commits as the server's bot. */
  commit(input: GitCommitInput, opts?: CallOptions): Promise<GitCommitResponse>;
  /** Switches to `branch`, creating it at HEAD first with `create`. */
  checkout(input: GitCheckoutInput | string, opts?: CallOptions): Promise<GitCheckoutResponse>;
  /** Pushes the checked-out (or named) branch to the workspace's repository. */
  push(input?: GitPushInput, opts?: CallOptions): Promise<GitPushResponse>;
}

/** The services a handle calls. */
export interface HandleClients {
  tools: Client<typeof ToolService>;
  processes: Client<typeof ProcessService>;
  audit: Client<typeof AuditService>;
}

/**
 * The tools of one workspace. Made by `AgentWorkspace.workspace(id)`, or `session.workspace`
 * (bound to the session token; its id is empty and the server uses the session's workspace).
 * Reads (`read`, `list`, `glob`, `grep`, `git.status`, `git.diff`) are retried on UNAVAILABLE;
 * nothing that runs or changes anything is ever sent twice.
 */
export class Workspace {
  /** The workspace id; empty for a session token's own workspace. */
  readonly id: string;
  /** The git tools. */
  readonly git: GitTools;
  /** Background processes and exposed ports. */
  readonly processes: ProcessTools;
  readonly #clients: HandleClients;
  readonly #caller: Caller;

  constructor(id: string, clients: HandleClients, caller: Caller) {
    this.id = id;
    this.#clients = clients;
    this.#caller = caller;
    const tools = clients.tools;
    const workspaceId = id;
    this.git = {
      status: (opts) => caller.unary(tools.gitStatus, { workspaceId }, opts, "idempotent"),
      diff: (input = {}, opts) => caller.unary(tools.gitDiff, { ...input, workspaceId }, opts, "idempotent"),
      commit: (input, opts) => caller.unary(tools.gitCommit, { ...input, workspaceId }, opts, "once"),
      checkout: (input, opts) => caller.unary(tools.gitCheckout, { ...(typeof input === "string" ? { branch: input } : input), workspaceId }, opts, "once"),
      push: (input = {}, opts) => caller.unary(tools.gitPush, { ...input, workspaceId }, opts, "once"),
    };
    const procs = clients.processes;
    const must = <T>(value: T | undefined): T => {
      if (value === undefined) throw new TypeError("The server's answer has no process");
      return value;
    };
    this.processes = {
      start: async (input, opts) => must((await caller.unary(procs.startProcess, { ...(typeof input === "string" ? { command: input } : input), workspaceId }, opts, "once")).process),
      list: async (opts) => (await caller.unary(procs.listProcesses, { workspaceId }, opts, "idempotent")).processes,
      get: async (processId, opts) => must((await caller.unary(procs.getProcess, { workspaceId, processId }, opts, "idempotent")).process),
      read: (processId, input = {}, opts) => caller.unary(procs.readProcessOutput, { ...input, workspaceId, processId }, opts, "idempotent"),
      attach: (processId, input = {}, opts) => caller.stream(procs.attachProcess, { ...input, workspaceId, processId }, opts),
      write: async (processId, data, options = {}, opts) =>
        (await caller.unary(procs.writeProcessStdin, { workspaceId, processId, data: typeof data === "string" ? new TextEncoder().encode(data) : data, close: options.close ?? false }, opts, "once")).bytesWritten,
      closeStdin: async (processId, opts) => void (await caller.unary(procs.writeProcessStdin, { workspaceId, processId, close: true }, opts, "once")),
      resize: async (processId, rows, cols, opts) => void (await caller.unary(procs.resizeProcess, { workspaceId, processId, size: { rows, cols } }, opts, "once")),
      signal: async (processId, signal, opts) => void (await caller.unary(procs.signalProcess, { workspaceId, processId, signal }, opts, "once")),
      wait: (processId, timeoutMs = 0, opts) => caller.unary(procs.waitProcess, { workspaceId, processId, timeoutMs: BigInt(timeoutMs) }, opts, "idempotent"),
      exposePort: (port, opts) => caller.unary(procs.exposePort, { workspaceId, port }, opts, "idempotent"),
      unexposePort: async (port, opts) => (await caller.unary(procs.unexposePort, { workspaceId, port }, opts, "once")).closedConnections,
      listExposedPorts: async (opts) => (await caller.unary(procs.listExposedPorts, { workspaceId }, opts, "idempotent")).ports,
    };
  }

  /** Runs `bash -c command` and returns its collected output and exit code (a non-zero exit is not an error). */
  bash(input: BashInput | string, opts?: CallOptions): Promise<BashResponse> {
    return this.#caller.unary(this.#clients.tools.bash, { ...(typeof input === "string" ? { command: input } : input), workspaceId: this.id }, opts, "once");
  }

  /**
   * Runs a command and streams its output: iterate the result for decoded chunks, then read
   * `exit`. Cancelling (`opts.signal`, `cancel()`, leaving the loop) kills the command. See
   * `BashStream`.
   */
  streamBash(input: StreamBashInput | string, opts?: CallOptions): BashStream {
    const req = { ...(typeof input === "string" ? { command: input } : input), workspaceId: this.id };
    return new BashStream((signal) => this.#caller.stream(this.#clients.tools.streamBash, req, opts, signal), opts?.signal);
  }

  /** Reads a text file (numbered lines), a directory's entries, or a binary file's size and type. */
  read(input: ReadInput | string, opts?: CallOptions): Promise<ReadFileResponse> {
    return this.#caller.unary(this.#clients.tools.readFile, { ...(typeof input === "string" ? { path: input } : input), workspaceId: this.id }, opts, "idempotent");
  }

  /** The same as `read`. */
  readFile(input: ReadInput | string, opts?: CallOptions): Promise<ReadFileResponse> {
    return this.read(input, opts);
  }

  /** Creates or atomically replaces a file, with its parents. */
  write(input: WriteInput, opts?: CallOptions): Promise<WriteFileResponse> {
    return this.#caller.unary(this.#clients.tools.writeFile, { ...input, workspaceId: this.id }, opts, "once");
  }

  /** Replaces an exact string, once (it must be unique) or everywhere with `replaceAll`. */
  edit(input: EditInput, opts?: CallOptions): Promise<EditFileResponse> {
    return this.#caller.unary(this.#clients.tools.editFile, { ...input, workspaceId: this.id }, opts, "once");
  }

  /** Applies find/replace patches in order, all or nothing. */
  patch(input: PatchInput, opts?: CallOptions): Promise<PatchFileResponse> {
    return this.#caller.unary(this.#clients.tools.patchFile, { ...input, workspaceId: this.id }, opts, "once");
  }

  /** Deletes one file or symlink. */
  delete(input: DeleteInput | string, opts?: CallOptions): Promise<DeleteFileResponse> {
    return this.#caller.unary(this.#clients.tools.deleteFile, { ...(typeof input === "string" ? { path: input } : input), workspaceId: this.id }, opts, "once");
  }

  /** A directory's entries, or the files under it matching `pattern`. */
  list(input: ListInput | string = {}, opts?: CallOptions): Promise<ListFilesResponse> {
    return this.#caller.unary(this.#clients.tools.listFiles, { ...(typeof input === "string" ? { path: input } : input), workspaceId: this.id }, opts, "idempotent");
  }

  /** Paths matching a glob pattern, newest first. */
  glob(input: GlobInput | string, opts?: CallOptions): Promise<GlobResponse> {
    return this.#caller.unary(this.#clients.tools.glob, { ...(typeof input === "string" ? { pattern: input } : input), workspaceId: this.id }, opts, "idempotent");
  }

  /** A ripgrep search; the matches and whether `maxResults` cut them. */
  grep(input: GrepInput | string, opts?: CallOptions): Promise<GrepResponse> {
    return this.#caller.unary(this.#clients.tools.grep, { ...(typeof input === "string" ? { pattern: input } : input), workspaceId: this.id }, opts, "idempotent");
  }

  /**
   * A ripgrep search whose matches come as ripgrep finds them; the generator's return value (what
   * `for await` drops; use `next()` or `streamGrepEvents`) is the summary. Leaving the loop stops ripgrep.
   */
  async *streamGrep(input: StreamGrepInput | string, opts?: CallOptions): AsyncGenerator<GrepMatch, GrepSummary, undefined> {
    let summary: GrepSummary = { matchCount: 0, truncated: false };
    for await (const { event } of this.streamGrepEvents(input, opts)) {
      if (event.case === "match") yield event.value;
      else if (event.case === "done") summary = { matchCount: event.value.matchCount, truncated: event.value.truncated };
    }
    return summary;
  }

  /** `StreamGrep`'s events as sent: each `match`, then `done`. */
  streamGrepEvents(input: StreamGrepInput | string, opts?: CallOptions): AsyncIterable<StreamGrepResponse> {
    return this.#caller.stream(this.#clients.tools.streamGrep, { ...(typeof input === "string" ? { pattern: input } : input), workspaceId: this.id }, opts);
  }

  /**
   * This workspace's live events (tool calls starting and finishing, files changed, status
   * changes), opening with `started`. For a session token's own workspace, its session's events.
   */
  watchEvents(opts?: CallOptions): AsyncIterable<WatchEventsResponse> {
    return this.#caller.stream(this.#clients.audit.watchEvents, { workspaceId: this.id }, opts);
  }
}
