/**
 * ToolService: a thin adapter over the tool registry. Each RPC is one line: how its request
 * becomes the tool's input, which registry entry runs, and how the result (or each event) becomes
 * the response. The tool context is built in one place: the workspace resolved once, the limits,
 * the caller's cancellation and the protocol deadline.
 */
import type { PortExposures } from "../ports/exposures.ts";
import { create } from "@bufbuild/protobuf";
import { type Timestamp, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  type BashRequest,
  type FileInfo,
  type GrepRequest,
  type StreamBashRequest,
  type StreamGrepRequest,
  BashExitedSchema,
  FileKind,
  FileType,
  StreamBashResponseSchema,
  StreamGrepResponseSchema,
  ToolService,
} from "../../gen/agentworkspace/v1/tool_pb.js";
import { GitChange } from "../../gen/agentworkspace/v1/git_pb.js";
import type { EntryType } from "../../providers/types.ts";
import type { Change } from "../git/porcelain.ts";
import type { GitDiffSet } from "../tools/git.ts";
import type { BashInput, BashStreamEvent } from "../tools/bash.ts";
import type { CommandPolicyOf, GitContext, ToolContext } from "../tools/context.ts";
import type { GrepEvent, GrepInput } from "../tools/grep.ts";
import { TOOL_REGISTRY } from "../tools/registry.ts";
import type { ToolLimits } from "../tools/tool-limits.ts";
import type { WorkspaceManager } from "../workspace-manager.ts";
import { taskEnv } from "../sessions/session.ts";
import { commandPolicyOf } from "../security/command-policy.ts";
import { auditedCall } from "../audit/audit-trail.ts";
import { ANSWER_GONE } from "../direct/common.ts";
import type { FileChanges } from "../audit/file-changes.ts";
import type { ProcessTable } from "../processes/process-table.ts";

const FILE_TYPES: Record<EntryType, FileType> = {
  file: FileType.FILE,
  directory: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  other: FileType.OTHER,
};
const GIT_CHANGES: Record<Change, GitChange> = {
  "": GitChange.UNSPECIFIED,
  modified: GitChange.MODIFIED,
  added: GitChange.ADDED,
  deleted: GitChange.DELETED,
  renamed: GitChange.RENAMED,
  copied: GitChange.COPIED,
  type_changed: GitChange.TYPE_CHANGED,
  unmerged: GitChange.UNMERGED,
};
/**
 * A listing's entry as a finished message: a listing has up to 10,000 of them, and `create`, which
 * connect would otherwise run on each, copies every field again (`test/tool-service-messages.test.ts`
 * holds these to what `create` makes).
 */
export function fileInfo(path: string, size: number, type: EntryType, mtimeMs: number | undefined): FileInfo {
  const info: FileInfo = { $typeName: "agentworkspace.v1.FileInfo", path, size: BigInt(size), type: FILE_TYPES[type] };
  if (mtimeMs !== undefined) info.modified = timestampOfMs(mtimeMs);
  return info;
}

/** A Timestamp of a whole number of milliseconds (as `timestampFromMs`, without `create`). */
export function timestampOfMs(ms: number): Timestamp {
  const seconds = Math.floor(ms / 1000);
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
}
const diffSet = (d: GitDiffSet) => ({ ...d, totalBytes: BigInt(d.totalBytes) });
const FILE_KINDS = { text: FileKind.TEXT, directory: FileKind.DIRECTORY, binary: FileKind.BINARY } as const;

/** Dependencies of the tool service. */
export interface ToolServiceDeps {
  workspaces: WorkspaceManager;
  limits: ToolLimits;
  /** The git tools' context for a workspace (its identity, file rules and push path). */
  git: (workspaceId: string) => GitContext;
  /** The command policy of a workspace's agent type (default: the parser's, commandPolicyOf). */
  commandPolicy?: CommandPolicyOf;
  /** Where calls' file changes are tracked for watchers (absent: commands report none). */
  fileChanges?: FileChanges;
  /** The server's background processes (ProcessService). */
  processes?: ProcessTable;
  /** The ports exposed through the server's proxy (ProcessService). */
  ports?: PortExposures;
}

/**
 * A signal that follows `signal` except for its deadline: the protocol deadline reaches tools as
 * `ToolContext.deadline`, so a command is stopped at it with SIGTERM first, not killed outright.
 */
function cancelOnly(signal: AbortSignal): AbortSignal {
  const isDeadline = (reason: unknown) => reason instanceof ConnectError && reason.code === Code.DeadlineExceeded;
  if (signal.aborted) return isDeadline(signal.reason) ? new AbortController().signal : signal;
  const controller = new AbortController();
  signal.addEventListener("abort", () => {
    if (!isDeadline(signal.reason)) controller.abort(signal.reason);
  }, { once: true });
  return controller.signal;
}

const bashInput = (r: BashRequest | StreamBashRequest): BashInput => ({
  command: r.command,
  workdir: r.workdir,
  timeoutMs: Number(r.timeoutMs),
  env: r.env,
});

const grepInput = (r: GrepRequest | StreamGrepRequest): GrepInput => ({
  pattern: r.pattern,
  path: r.path,
  glob: r.glob,
  caseSensitive: r.caseSensitive ?? true,
  contextLines: r.contextLines,
  maxResults: r.maxResults,
});

function bashEvent(ev: BashStreamEvent) {
  switch (ev.type) {
    case "started":
      return create(StreamBashResponseSchema, { event: { case: "started", value: { startedAt: timestampFromDate(ev.startedAt) } } });
    case "stdout":
    case "stderr":
      return create(StreamBashResponseSchema, { event: { case: ev.type, value: ev.data } });
    case "exited":
      return create(StreamBashResponseSchema, {
        event: {
          case: "exited",
          value: create(BashExitedSchema, {
            exitCode: ev.exit.exitCode,
            durationMs: BigInt(ev.exit.durationMs),
            timedOut: ev.exit.timedOut,
            signal: ev.exit.signal,
            oomKilled: ev.exit.oomKilled,
            stdoutTruncated: ev.stdoutTruncated,
            stderrTruncated: ev.stderrTruncated,
            stdoutTotalBytes: BigInt(ev.stdoutTotalBytes),
            stderrTotalBytes: BigInt(ev.stderrTotalBytes),
          }),
        },
      });
  }
}

function grepEvent(ev: GrepEvent) {
  return ev.type === "match"
    ? create(StreamGrepResponseSchema, { event: { case: "match", value: ev.match } })
    : create(StreamGrepResponseSchema, { event: { case: "done", value: { matchCount: ev.matchCount, truncated: ev.truncated } } });
}

/** How a tool call's context is made: the workspace resolved once, its limits and policy, the caller's signals. */
export type ToolContextOf = (workspaceId: string, hctx: HandlerContext) => Promise<ToolContext>;

/** The context maker of ToolService and ProcessService alike. */
export function toolContextOf({ workspaces, limits, git, commandPolicy = commandPolicyOf, fileChanges, processes, ports }: ToolServiceDeps): ToolContextOf {
  /** The server's tool limits, with the command timeouts of the workspace's agent type. */
  const limitsOf = (workspaceId: string): ToolLimits => {
    const binding = workspaces.find(workspaceId)?.agentType;
    if (!binding || (binding.maxTimeoutMs === 0 && binding.defaultTimeoutMs === 0)) return limits;
    const maxTimeoutMs = binding.maxTimeoutMs === 0 ? limits.maxTimeoutMs : Math.min(binding.maxTimeoutMs, limits.maxTimeoutMs);
    return { ...limits, maxTimeoutMs, defaultTimeoutMs: Math.min(binding.defaultTimeoutMs === 0 ? limits.defaultTimeoutMs : binding.defaultTimeoutMs, maxTimeoutMs) };
  };
  const context = async (workspaceId: string, hctx: HandlerContext): Promise<ToolContext> => {
    const workspace = await workspaces.handleForCall(workspaceId);
    const left = hctx.timeoutMs();
    const record = workspaces.find(workspaceId);
    const task = record?.session?.task;
    const call = auditedCall(hctx.values);
    const source = { workspaceId: workspace.id, sessionId: call?.sessionId ?? record?.session?.id ?? "", spanId: call?.spanId ?? "", ended: call?.ended ?? Promise.resolve(), answerGone: hctx.values.get(ANSWER_GONE) };
    return {
      workspace,
      limits: limitsOf(workspaceId),
      commands: commandPolicy(record?.agentType),
      signal: cancelOnly(hctx.signal),
      deadline: left === undefined ? undefined : Date.now() + left,
      ...(task ? { env: taskEnv(task) } : {}),
      git: git(workspaceId),
      ...(fileChanges ? { changes: fileChanges.forCall(workspace, source) } : {}),
      ...(processes ? { processes, sessionId: source.sessionId, binding: record?.agentType } : {}),
      ...(ports ? { ports } : {}),
    };
  };
  return context;
}

/** Creates the ToolService implementation. */
export function createToolService(deps: ToolServiceDeps): ServiceImpl<typeof ToolService> {
  const context = toolContextOf(deps);
  /** A unary RPC: request → tool input → tool → response. */
  const unary =
    <Req extends { workspaceId: string }, In, Out, Res>(run: (ctx: ToolContext, input: In) => Promise<Out>, input: (req: Req) => In, output: (out: Out) => Res) =>
    async (req: Req, hctx: HandlerContext): Promise<Res> =>
      output(await run(await context(req.workspaceId, hctx), input(req)));
  /** A server-streaming RPC: each event of the tool becomes one response. */
  const streaming = <Req extends { workspaceId: string }, In, Ev, Res>(run: (ctx: ToolContext, input: In) => AsyncIterable<Ev>, input: (req: Req) => In, output: (ev: Ev) => Res) =>
    async function* (req: Req, hctx: HandlerContext): AsyncGenerator<Res> {
      for await (const ev of run(await context(req.workspaceId, hctx), input(req))) yield output(ev);
    };
  const same = <T>(x: T) => x;
  const tools = TOOL_REGISTRY;

  return {
    bash: unary(tools.bash.bash, bashInput, (r) => ({
      ...r,
      durationMs: BigInt(r.durationMs),
      stdoutTotalBytes: BigInt(r.stdoutTotalBytes),
      stderrTotalBytes: BigInt(r.stderrTotalBytes),
    })),
    streamBash: streaming(tools.bash.streamBash, (r) => ({ ...bashInput(r), maxOutputBytes: Number(r.maxOutputBytes) }), bashEvent),
    readFile: unary(tools.read.readFile, (r) => ({ path: r.path, offset: r.offset, limit: r.limit }), (r) => ({ ...r, kind: FILE_KINDS[r.kind], size: BigInt(r.size) })),
    writeFile: unary(tools.write.writeFile, (r) => ({ path: r.path, content: r.content }), (r) => ({ bytesWritten: BigInt(r.bytesWritten), created: r.created })),
    editFile: unary(tools.edit.editFile, (r) => ({ path: r.path, oldString: r.oldString, newString: r.newString, replaceAll: r.replaceAll }), same),
    patchFile: unary(tools.patch.patchFile, (r) => ({ path: r.path, patches: r.patches.map((p) => ({ find: p.find, replace: p.replace })) }), same),
    deleteFile: unary(tools.delete.deleteFile, (r) => ({ path: r.path }), same),
    listFiles: unary(tools.list.listFiles, (r) => ({ path: r.path, pattern: r.pattern, namesOnly: r.namesOnly }), (r) => ({
      files: r.files.map((f) => fileInfo(f.path, f.size, f.type, r.namesOnly ? undefined : Math.floor(f.mtimeMs))),
      truncated: r.truncated,
    })),
    glob: unary(tools.glob.glob, (r) => ({ pattern: r.pattern, path: r.path, limit: r.limit }), same),
    grep: unary(tools.grep.grep, grepInput, same),
    streamGrep: streaming(tools.grep.streamGrep, grepInput, grepEvent),
    gitStatus: unary(tools.git.gitStatus, () => ({}), (r) => ({ ...r, files: r.files.map((f) => ({ ...f, staged: GIT_CHANGES[f.staged], unstaged: GIT_CHANGES[f.unstaged] })) })),
    gitDiff: unary(tools.git.gitDiff, (r) => ({ paths: r.paths, ref: r.ref, contextLines: r.contextLines }), (r) => ({
      ...(r.staged ? { staged: diffSet(r.staged) } : {}),
      ...(r.unstaged ? { unstaged: diffSet(r.unstaged) } : {}),
      ...(r.againstRef ? { againstRef: diffSet(r.againstRef) } : {}),
    })),
    gitCommit: unary(tools.git.gitCommit, (r) => ({ message: r.message, files: r.files, all: r.all }), same),
    gitCheckout: unary(tools.git.gitCheckout, (r) => ({ branch: r.branch, create: r.create }), same),
    gitPush: unary(tools.git.gitPush, (r) => ({ branch: r.branch, force: r.force }), same),
  };
}
