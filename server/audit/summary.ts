/**
 * What the audit trail records of each call: a summary of the request and of its result, per
 * tool (checked complete against the tool registry at compile time, so a new tool cannot ship
 * unaudited), and per audited administrative RPC. Only fields named here are ever recorded, so a
 * new request field stays out of the trail until someone decides it belongs: file contents, edit
 * strings, patches, environment values and output never do. Every string goes through the
 * redactor (secrets out, length capped).
 */
import type { BashRequest, BashResponse, DeleteFileRequest, EditFileRequest, EditFileResponse, GlobRequest, GlobResponse, GrepRequest, GrepResponse, ListFilesRequest, ListFilesResponse, PatchFileRequest, PatchFileResponse, ReadFileRequest, ReadFileResponse, StreamBashRequest, StreamBashResponse, StreamGrepResponse, WriteFileRequest, WriteFileResponse } from "../../gen/agentworkspace/v1/tool_pb.js";
import { FileKind } from "../../gen/agentworkspace/v1/tool_pb.js";
import type {
  GitCheckoutRequest,
  GitCheckoutResponse,
  GitCommitRequest,
  GitCommitResponse,
  GitDiffRequest,
  GitDiffResponse,
  GitPushRequest,
  GitPushResponse,
  GitStatusRequest,
  GitStatusResponse,
} from "../../gen/agentworkspace/v1/git_pb.js";
import { AgentMessageKind, type PostAgentMessageRequest, type PostAgentMessageResponse } from "../../gen/agentworkspace/v1/audit_pb.js";
import type { CreateAgentTypeRequest, DeleteAgentTypeRequest, UpdateAgentTypeRequest, UpdateWorkspaceConfigRequest } from "../../gen/agentworkspace/v1/config_pb.js";
import type { CreateWorkspaceRequest, CreateWorkspaceResponse, DeleteWorkspaceRequest, EndSessionRequest, StartSessionRequest, StartSessionResponse } from "../../gen/agentworkspace/v1/workspace_pb.js";
import type { ToolName } from "../tools/registry.ts";
import type { AttachProcessResponse } from "../../gen/agentworkspace/v1/process_pb.js";
import type { Redactor } from "./redact.ts";

/** A summary: attribute-ready values under short keys ("path", "exit_code"). */
export type Summary = Record<string, string | number | boolean>;

/** Facts a call establishes about what it concerns (an administrative call's workspace, session). */
export interface Facts {
  workspaceId?: string;
  sessionId?: string;
  agentType?: string;
  provider?: string;
}

/** How one tool is audited. Every function only reads the message. */
export interface ToolAudit {
  request(message: never, redact: Redactor): Summary;
  /** A unary response, into `out`. */
  response?(message: never, out: Summary): void;
  /** One message of a streaming response, into `out`. */
  event?(message: never, out: Summary): void;
}

/** Sets `key` only when `value` says something (not "", 0 or false), so records stay small. */
function put(out: Summary, key: string, value: string | number | boolean | bigint | undefined): void {
  if (value === undefined || value === "" || value === 0 || value === 0n || value === false) return;
  out[key] = typeof value === "bigint" ? Number(value) : value;
}

function pathOnly(r: { path: string }, redact: Redactor): Summary {
  const out: Summary = {};
  put(out, "path", redact.redact(r.path));
  return out;
}

/**
 * The bash tool's requests: Bash and StreamBash, and ProcessService's (a process's command as
 * Bash's; for the others the process, offsets, a signal; stdin's bytes only counted, never kept).
 */
function bashRequest(r: (BashRequest | StreamBashRequest) & Partial<ProcessFields>, redact: Redactor): Summary {
  const out: Summary = {};
  if (typeof r.command === "string") put(out, "command", redact.redact(r.command));
  if (typeof r.workdir === "string") put(out, "workdir", redact.redact(r.workdir));
  put(out, "timeout_ms", r.timeoutMs);
  // Names only: values are where callers put credentials.
  if (r.env !== undefined) put(out, "env", redact.redact(Object.keys(r.env).sort().join(",")));
  if ("maxOutputBytes" in r) put(out, "max_output_bytes", r.maxOutputBytes);
  if (typeof r.processId === "string") put(out, "process_id", r.processId.slice(0, 64));
  if (r.pty) out.pty = `${r.pty.rows}x${r.pty.cols}`;
  if (r.size) out.size = `${r.size.rows}x${r.size.cols}`;
  put(out, "stdin", r.stdin);
  if (r.data instanceof Uint8Array) out.data_bytes = r.data.length;
  // Text for stdin is counted like its bytes, never kept.
  if (typeof r.text === "string" && r.text !== "") out.data_bytes = Buffer.byteLength(r.text, "utf8");
  put(out, "close", r.close);
  if (typeof r.signal === "string") put(out, "signal", redact.redact(r.signal.slice(0, 20)));
  put(out, "stdout_offset", r.stdoutOffset);
  put(out, "stderr_offset", r.stderrOffset);
  put(out, "port", r.port);
  return out;
}

/** Fields of ProcessService's requests besides Bash's. */
interface ProcessFields {
  processId: string;
  pty: { rows: number; cols: number } | undefined;
  size: { rows: number; cols: number } | undefined;
  stdin: boolean;
  data: Uint8Array;
  close: boolean;
  signal: string;
  stdoutOffset: bigint;
  stderrOffset: bigint;
  /** ExposePort's and UnexposePort's. */
  port: number;
  /** WriteProcessStdin's text form of `data`. */
  text: string;
}

/** What ProcessService's responses say about their process. */
function processResponse(
  r: {
    process?: { processId: string; pid: number; state: number; exitCode: number; signal: string };
    processes?: unknown[];
    timedOut?: boolean;
    bytesWritten?: bigint;
    port?: { path: string };
    listening?: boolean;
    closedConnections?: number;
    ports?: unknown[];
  },
  out: Summary,
): void {
  if (r.process) {
    put(out, "process_id", r.process.processId);
    put(out, "pid", r.process.pid);
    out.state = ["unspecified", "running", "exited", "lost"][r.process.state] ?? "unspecified";
    if (r.process.state === 2) out.exit_code = r.process.exitCode;
    put(out, "signal", r.process.signal);
  }
  if (Array.isArray(r.processes)) out.processes = r.processes.length;
  put(out, "timed_out", r.timedOut);
  put(out, "bytes_written", r.bytesWritten);
  if (r.port) put(out, "path", r.port.path);
  put(out, "listening", r.listening);
  put(out, "closed_connections", r.closedConnections);
  if (Array.isArray(r.ports)) out.ports = r.ports.length;
}

function grepRequest(r: GrepRequest, redact: Redactor): Summary {
  const out: Summary = {};
  put(out, "pattern", redact.redact(r.pattern));
  put(out, "path", redact.redact(r.path));
  put(out, "glob", redact.redact(r.glob));
  if (r.caseSensitive !== undefined) out.case_sensitive = r.caseSensitive;
  put(out, "context_lines", r.contextLines);
  put(out, "max_results", r.maxResults);
  return out;
}

/** How a command ended, from Bash's response or StreamBash's `exited` alike. */
function bashExit(e: Pick<BashResponse, "exitCode" | "signal" | "oomKilled" | "stdoutTruncated" | "stderrTruncated" | "stdoutTotalBytes" | "stderrTotalBytes">, out: Summary): void {
  out.exit_code = e.exitCode;
  put(out, "signal", e.signal);
  put(out, "oom_killed", e.oomKilled);
  put(out, "truncated", e.stdoutTruncated || e.stderrTruncated);
  put(out, "stdout_bytes", e.stdoutTotalBytes);
  put(out, "stderr_bytes", e.stderrTotalBytes);
}

/** Per tool: see the module comment. */
export const TOOL_AUDIT = {
  bash: {
    request: bashRequest,
    response(r: BashResponse | Parameters<typeof processResponse>[0], out: Summary) {
      if ("exitCode" in r && "stdoutTruncated" in r) bashExit(r, out);
      else processResponse(r, out);
    },
    event(m: StreamBashResponse | AttachProcessResponse, out: Summary) {
      if (m.event.case === "ended") {
        processResponse({ process: m.event.value }, out);
        return;
      }
      if (m.event.case !== "exited") return;
      bashExit(m.event.value, out);
      put(out, "timed_out", m.event.value.timedOut);
    },
  },
  read: {
    request(r: ReadFileRequest, redact: Redactor) {
      const out = pathOnly(r, redact);
      put(out, "offset", r.offset);
      put(out, "limit", r.limit);
      return out;
    },
    response(r: ReadFileResponse, out: Summary) {
      put(out, "kind", FileKind[r.kind]?.toLowerCase());
      put(out, "size", r.size);
      put(out, "total_lines", r.totalLines);
      put(out, "truncated", r.truncated);
    },
  },
  write: {
    request(r: WriteFileRequest, redact: Redactor) {
      const out = pathOnly(r, redact);
      out.content_bytes = Buffer.byteLength(r.content);
      return out;
    },
    response(r: WriteFileResponse, out: Summary) {
      put(out, "bytes_written", r.bytesWritten);
      put(out, "created", r.created);
    },
  },
  edit: {
    request(r: EditFileRequest, redact: Redactor) {
      const out = pathOnly(r, redact);
      put(out, "replace_all", r.replaceAll);
      return out;
    },
    response(r: EditFileResponse, out: Summary) {
      put(out, "replacements", r.replacements);
      put(out, "lines_changed", r.linesChanged);
    },
  },
  patch: {
    request(r: PatchFileRequest, redact: Redactor) {
      const out = pathOnly(r, redact);
      out.patches = r.patches.length;
      return out;
    },
    response(r: PatchFileResponse, out: Summary) {
      put(out, "patches_applied", r.patchesApplied);
    },
  },
  delete: {
    request: (r: DeleteFileRequest, redact: Redactor) => pathOnly(r, redact),
  },
  list: {
    request(r: ListFilesRequest, redact: Redactor) {
      const out = pathOnly(r, redact);
      put(out, "pattern", redact.redact(r.pattern));
      return out;
    },
    response(r: ListFilesResponse, out: Summary) {
      out.files = r.files.length;
      put(out, "truncated", r.truncated);
    },
  },
  glob: {
    request(r: GlobRequest, redact: Redactor) {
      const out = pathOnly(r, redact);
      put(out, "pattern", redact.redact(r.pattern));
      put(out, "limit", r.limit);
      return out;
    },
    response(r: GlobResponse, out: Summary) {
      out.paths = r.paths.length;
      put(out, "truncated", r.truncated);
    },
  },
  grep: {
    request: grepRequest,
    response(r: GrepResponse, out: Summary) {
      out.matches = r.matches.length;
      put(out, "truncated", r.truncated);
    },
    event(m: StreamGrepResponse, out: Summary) {
      if (m.event.case === "match") out.matches = Number(out.matches ?? 0) + 1;
      else if (m.event.case === "done") {
        out.matches = m.event.value.matchCount;
        put(out, "truncated", m.event.value.truncated);
      }
    },
  },
  git: {
    // One tool, five RPCs: the message's type says which action it is.
    request(r: GitRequest, redact: Redactor) {
      const out: Summary = { action: GIT_ACTIONS[r.$typeName] };
      if (r.$typeName === "agentworkspace.v1.GitDiffRequest") {
        put(out, "paths", redact.redact(r.paths.join(",")));
        put(out, "ref", redact.redact(r.ref));
      } else if (r.$typeName === "agentworkspace.v1.GitCommitRequest") {
        put(out, "files", redact.redact(r.files.join(",")));
        put(out, "all", r.all);
        // The message is the agent's prose: its size, not its text.
        out.message_bytes = Buffer.byteLength(r.message);
      } else if (r.$typeName === "agentworkspace.v1.GitCheckoutRequest") {
        put(out, "branch", redact.redact(r.branch));
        put(out, "create", r.create);
      } else if (r.$typeName === "agentworkspace.v1.GitPushRequest") {
        put(out, "branch", redact.redact(r.branch));
        put(out, "force", r.force);
      }
      return out;
    },
    response(r: GitResponse, out: Summary) {
      switch (r.$typeName) {
        case "agentworkspace.v1.GitStatusResponse":
          put(out, "branch", r.branch);
          out.files = r.files.length;
          put(out, "truncated", r.truncated);
          break;
        case "agentworkspace.v1.GitDiffResponse":
          for (const [key, d] of [["staged", r.staged], ["unstaged", r.unstaged], ["against_ref", r.againstRef]] as const) {
            if (!d) continue;
            out[`${key}_files`] = d.files.length;
            put(out, `${key}_truncated`, d.truncated);
          }
          break;
        case "agentworkspace.v1.GitCommitResponse":
          out.commit = r.commit;
          put(out, "branch", r.branch);
          out.files_changed = r.filesChanged;
          break;
        case "agentworkspace.v1.GitCheckoutResponse":
          put(out, "branch", r.branch);
          put(out, "commit", r.commit);
          put(out, "created", r.created);
          break;
        case "agentworkspace.v1.GitPushResponse":
          put(out, "branch", r.branch);
          put(out, "commit", r.commit);
          put(out, "created", r.created);
          out.commits_pushed = r.commitsPushed;
          break;
      }
    },
  },
} satisfies Record<ToolName, ToolAudit>;

type GitRequest = GitStatusRequest | GitDiffRequest | GitCommitRequest | GitCheckoutRequest | GitPushRequest;
type GitResponse = GitStatusResponse | GitDiffResponse | GitCommitResponse | GitCheckoutResponse | GitPushResponse;
const GIT_ACTIONS: Record<GitRequest["$typeName"], string> = {
  "agentworkspace.v1.GitStatusRequest": "status",
  "agentworkspace.v1.GitDiffRequest": "diff",
  "agentworkspace.v1.GitCommitRequest": "commit",
  "agentworkspace.v1.GitCheckoutRequest": "checkout",
  "agentworkspace.v1.GitPushRequest": "push",
};

/** Tools whose successful calls change the file at the request's path. */
export const FILE_CHANGING_TOOLS: ReadonlySet<string> = new Set(["write", "edit", "patch", "delete"]);

/** The procedure whose records are an agent's own messages (their text is the record's `text`). */
export const POST_AGENT_MESSAGE = "/agentworkspace.v1.AuditService/PostAgentMessage";
/** The longest message text kept (the request itself may hold at most 16 KiB). */
export const AGENT_MESSAGE_MAX_CHARS = 16 * 1024;

/** How one administrative RPC is audited. */
export interface AdminAudit {
  request(message: never, redact: Redactor, facts: Facts): Summary;
  response?(message: never, facts: Facts): void;
}

/**
 * Administrative RPCs in the audit trail: every change of agent types, workspaces and sessions.
 * Reads (Get, List, Watch) are not recorded. Agent type bodies are not summarised: setup
 * commands and repository URLs are configuration, and may hold what an operator typed.
 */
export const ADMIN_AUDIT: Readonly<Record<string, AdminAudit>> = {
  "/agentworkspace.v1.ConfigService/CreateAgentType": {
    request: (r: CreateAgentTypeRequest, _redact: Redactor, facts: Facts) => ((facts.agentType = r.agentType?.id ?? ""), {}),
  },
  "/agentworkspace.v1.ConfigService/UpdateAgentType": {
    request: (r: UpdateAgentTypeRequest, _redact: Redactor, facts: Facts) => ((facts.agentType = r.agentType?.id ?? ""), {}),
  },
  "/agentworkspace.v1.ConfigService/DeleteAgentType": {
    request: (r: DeleteAgentTypeRequest, _redact: Redactor, facts: Facts) => ((facts.agentType = r.id), {}),
  },
  "/agentworkspace.v1.ConfigService/UpdateWorkspaceConfig": {
    request: (r: UpdateWorkspaceConfigRequest, _redact: Redactor, facts: Facts) => ((facts.agentType = r.agentTypeId), {}),
  },
  "/agentworkspace.v1.WorkspaceService/CreateWorkspace": {
    request(r: CreateWorkspaceRequest, redact: Redactor) {
      const out: Summary = {};
      put(out, "provider", r.provider);
      put(out, "image", redact.redact(r.image));
      return out;
    },
    response(r: CreateWorkspaceResponse, facts: Facts) {
      facts.workspaceId = r.workspace?.id ?? "";
      facts.provider = r.workspace?.provider ?? "";
      facts.agentType = r.workspace?.agentType ?? "";
    },
  },
  "/agentworkspace.v1.WorkspaceService/DeleteWorkspace": {
    request: (r: DeleteWorkspaceRequest, _redact: Redactor, facts: Facts) => ((facts.workspaceId = r.id), {}),
  },
  "/agentworkspace.v1.WorkspaceService/PauseWorkspace": {
    request: (r: DeleteWorkspaceRequest, _redact: Redactor, facts: Facts) => ((facts.workspaceId = r.id), {}),
  },
  "/agentworkspace.v1.WorkspaceService/ResumeWorkspace": {
    request: (r: DeleteWorkspaceRequest, _redact: Redactor, facts: Facts) => ((facts.workspaceId = r.id), {}),
  },
  "/agentworkspace.v1.WorkspaceService/StartSession": {
    request: (r: StartSessionRequest, _redact: Redactor, facts: Facts) => ((facts.agentType = r.agentType), {}),
    response(r: StartSessionResponse, facts: Facts) {
      facts.sessionId = r.session?.id ?? "";
      facts.workspaceId = r.session?.workspaceId ?? "";
    },
  },
  [POST_AGENT_MESSAGE]: {
    request(r: PostAgentMessageRequest, redact: Redactor, facts: Facts) {
      facts.sessionId = r.sessionId;
      return { kind: r.kind === AgentMessageKind.SUMMARY ? "summary" : "note", text: redact.redact(r.text, AGENT_MESSAGE_MAX_CHARS) };
    },
    response(r: PostAgentMessageResponse, facts: Facts) {
      facts.sessionId = r.sessionId;
      facts.workspaceId = r.workspaceId;
    },
  },
  "/agentworkspace.v1.WorkspaceService/EndSession": {
    request: (r: EndSessionRequest, _redact: Redactor, facts: Facts) => ((facts.sessionId = r.id), {}),
  },
};
