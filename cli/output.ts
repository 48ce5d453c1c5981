/**
 * What the command line prints: aligned tables and short lines for people, JSON for scripts
 * (`--json`: one JSON document per result, the API's JSON mapping; streams print one JSON object per
 * line), and every failure as one line on stderr naming the error's reason and what to do about it.
 */
import { AgentWorkspaceError, Code, ErrorReason, type ErrorReasonName, UnavailableError } from "@agent-workspace/client";
import { type DescMessage, type MessageShape, toJson } from "@bufbuild/protobuf";
import { type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";

/** A mistake in the command line itself: printed with a pointer to `--help`, exit status 2. */
export class UsageError extends Error {}

/** Exit status of a failed call (the command's own status when a command ran). */
export const EXIT_FAILURE = 1;
/** Exit status of a usage mistake. */
export const EXIT_USAGE = 2;

/** Where output goes; tests and the bin pass the process's streams. */
export interface Io {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  stdin: NodeJS.ReadableStream;
}

/** Writes `text` to `stream`, waiting while the stream is full (output is never buffered without bound). */
export async function write(stream: NodeJS.WritableStream, text: string | Uint8Array): Promise<void> {
  if (!stream.write(text)) await new Promise<void>((resolve) => stream.once("drain", resolve));
}

/** Prints a message as JSON (the API's JSON mapping, proto field names) followed by a newline. */
export function jsonLine<D extends DescMessage>(schema: D, message: MessageShape<D>): string {
  return `${JSON.stringify(toJson(schema, message, { useProtoFieldName: true }))}\n`;
}

/** Rows as columns padded to their widest cell; the first row is the header. */
export function table(rows: string[][]): string {
  if (rows.length === 0) return "";
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join("  ").trimEnd()).join("\n") + "\n";
}

/** A timestamp as local ISO-like text, or "-". */
export function when(ts: Timestamp | undefined): string {
  if (!ts) return "-";
  const d = timestampDate(ts);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Labels as `k=v,k=v`, or "-". */
export function labelsText(labels: Record<string, string>): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
  return parts.length > 0 ? parts.join(",") : "-";
}

/** The name of an enum value without its type prefix, lower-cased for people ("ACTIVE" → "active"). */
export function enumName(names: Record<number, string>, value: number): string {
  return (names[value] ?? String(value)).toLowerCase();
}

/** A reason's name as the API spells it, without the ERROR_REASON_ prefix ("FILE_NOT_FOUND"). */
export function reasonName(reason: ErrorReason): string {
  return ErrorReason[reason] ?? String(reason);
}

/** What to do about an error, by its reason (first) or its code: one short imperative clause. */
const HINTS: Partial<Record<ErrorReasonName, string>> = {
  WORKSPACE_NOT_FOUND: "list workspaces with 'agent-workspace ws ls'",
  SESSION_NOT_FOUND: "list sessions with 'agent-workspace session ls'",
  AGENT_TYPE_NOT_FOUND: "list agent types with 'agent-workspace config agent-types ls'",
  FILE_NOT_FOUND: "check the path; 'agent-workspace read WS DIR' lists a directory",
  PATH_OUTSIDE_WORKSPACE: "give a path inside the workspace (relative, or under /workspace)",
  FIND_NOT_FOUND: "copy --old exactly from the file ('agent-workspace read WS PATH' shows it)",
  FIND_NOT_UNIQUE: "add surrounding lines to --old so it matches once, or pass --all",
  COMMAND_TIMEOUT: "raise --timeout, or run the work in smaller steps",
  TOOL_NOT_ENABLED: "the workspace's agent type does not enable this tool; see 'agent-workspace config agent-types get TYPE'",
  COMMAND_NOT_ALLOWED: "the agent type's command policy refuses this command; see 'agent-workspace config agent-types get TYPE'",
  SENSITIVE_FILE: "the file matches the sensitive-file rules and is never read or written through the tools",
  UNAUTHENTICATED: "set AGENT_WORKSPACE_API_KEY to an operator key (or AGENT_WORKSPACE_SESSION_TOKEN to a session token)",
  CALLER_NOT_PERMITTED: "this call needs an operator key in AGENT_WORKSPACE_API_KEY, not a session token",
  OUTSIDE_SESSION: "a session token reaches only its own session's workspace",
  SESSION_NOT_READY: "wait for the session to be active ('agent-workspace session ls')",
  WORKSPACE_NOT_READY: "wait a moment and retry",
  PATH_CHANGED: "a command changed the path while the call went through it; retry",
  AGENT_TYPE_EXISTS: "use 'agent-workspace config agent-types apply FILE', which updates existing agent types",
  AGENT_TYPE_IN_USE: "end its sessions and delete its workspaces first",
  PROVIDER_UNAVAILABLE: "start the provider's engine on the server's host, or choose another --provider",
  UNKNOWN_PROVIDER: "choose a provider the server offers (local, docker, gvisor, memory)",
  NOT_A_GIT_REPOSITORY: "the workspace has no git repository",
};

const CODE_HINTS: Partial<Record<Code, string>> = {
  [Code.InvalidArgument]: "check the arguments ('agent-workspace COMMAND --help')",
  [Code.NotFound]: "check the name or id",
  [Code.Unauthenticated]: "set AGENT_WORKSPACE_API_KEY to an operator key",
  [Code.PermissionDenied]: "the credential does not allow this call",
  [Code.DeadlineExceeded]: "raise --timeout",
  [Code.ResourceExhausted]: "send less at once",
};

/** The code's name as gRPC spells it ("NOT_FOUND"). */
function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/**
 * One line describing `err` (then, for a failed edit, the closest lines indented below it):
 * `agent-workspace: FILE_NOT_FOUND: <message> (path: a.txt); <what to do>`. An error that never
 * reached the server names the URL and how to start one.
 */
export function describeError(err: unknown, url: string): string {
  if (err instanceof UsageError) return `agent-workspace: ${err.message} (see --help)\n`;
  if (!(err instanceof AgentWorkspaceError)) return `agent-workspace: ${err instanceof Error ? err.message : String(err)}\n`;
  if (err instanceof UnavailableError && err.detail === undefined) {
    return `agent-workspace: UNAVAILABLE: cannot reach the server at ${url} (${err.message}); start one with 'npx agent-workspace serve', or set --server / AGENT_WORKSPACE_URL\n`;
  }
  const metadata = Object.entries(err.metadata).map(([k, v]) => `${k}: ${v}`);
  const hint = (err.reason && HINTS[err.reason]) ?? CODE_HINTS[err.code];
  let line = `agent-workspace: ${err.reason ?? codeName(err.code)}: ${err.message}${metadata.length > 0 ? ` (${metadata.join(", ")})` : ""}${hint ? `; ${hint}` : ""}\n`;
  const closest = err.closestMatch;
  if (closest && closest.text !== "") {
    line += `  closest match, lines ${closest.startLine}-${closest.endLine}:\n${closest.text.replace(/^/gm, "    ")}${closest.text.endsWith("\n") ? "" : "\n"}`;
  }
  return line;
}

/** The error as JSON for `--json`: code, reason, message and metadata. */
export function errorJson(err: unknown): string {
  if (err instanceof AgentWorkspaceError) {
    return `${JSON.stringify({ error: { code: Code[err.code], reason: err.reason ?? "", message: err.message, metadata: err.metadata } })}\n`;
  }
  return `${JSON.stringify({ error: { code: err instanceof UsageError ? "Usage" : "Unknown", reason: "", message: err instanceof Error ? err.message : String(err), metadata: {} } })}\n`;
}
