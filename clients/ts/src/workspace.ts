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
