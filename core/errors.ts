/**
 * The one error class of the domain, imported by providers, tools and services alike. Code below
 * the server throws it with a stable reason; the server maps each reason to a Connect code in one
 * table (server/error-table.ts) and sends the reason as a typed error detail. This module imports
 * nothing from gen/ or @connectrpc, so providers stay transport-free.
 */

/** Every stable failure reason. Adding one fails the compile until the error table maps it. */
export type Reason =
  | "FILE_NOT_FOUND"
  | "PATH_OUTSIDE_WORKSPACE"
  | "IS_DIRECTORY"
  | "NOT_A_DIRECTORY"
  | "WRITE_FAILED"
  | "FIND_NOT_FOUND"
  | "FIND_NOT_UNIQUE"
  | "INVALID_PATTERN"
  | "RIPGREP_NOT_FOUND"
  | "COMMAND_TIMEOUT"
  | "WORKSPACE_NOT_FOUND"
  | "INVALID_ARGUMENT"
  | "UNSUPPORTED_FILE_TYPE"
  | "FILE_TOO_LARGE"
  | "WORKSPACE_NOT_READY"
  | "PROVIDER_UNAVAILABLE"
  | "UNKNOWN_PROVIDER"
  | "ACCESS_DENIED"
  | "TOOL_NOT_ENABLED"
  | "RESOURCE_EXHAUSTED"
  | "CANCELLED"
  | "INTERNAL"
  | "UNKNOWN_TOOL"
  | "AGENT_TYPE_NOT_FOUND"
  | "AGENT_TYPE_EXISTS"
  | "AGENT_TYPE_IN_USE"
  | "WORKSPACE_DISABLED"
  | "AGENT_TYPE_WORKSPACE_DISABLED"
  | "UNAUTHENTICATED"
  | "CALLER_NOT_PERMITTED"
  | "SESSION_NOT_FOUND"
  | "SESSION_NOT_READY"
  | "WORKSPACE_NOT_PROVISIONED"
  | "OUTSIDE_SESSION"
  | "COMMAND_NOT_ALLOWED"
  | "SENSITIVE_FILE"
  | "NOT_A_GIT_REPOSITORY"
  | "NOTHING_TO_COMMIT"
  | "REVISION_NOT_FOUND"
  | "BRANCH_EXISTS"
  | "CHECKOUT_CONFLICT"
  | "NO_REPOSITORY"
  | "FORCE_PUSH_DENIED"
  | "PROTECTED_BRANCH"
  | "GIT_REMOTE_FAILED"
  | "GIT_CREDENTIAL_UNAVAILABLE"
  | "GIT_FAILED"
  | "HOST_PATH_NOT_ALLOWED"
  | "MOUNT_TOO_LARGE"
  | "PROCESSES_UNSUPPORTED"
  | "CONTENT_TOO_LONG"
  | "PATH_TOO_DEEP"
  | "PATH_SEGMENT_TOO_LONG"
  | "PATH_NOT_ASCII"
  | "BINARY_CONTENT"
  | "WORKSPACE_NOT_SHAREABLE"
  | "EGRESS_DENIED"
  | "ENFORCEMENT_UNAVAILABLE"
  | "PATH_CHANGED"
  | "PROCESS_NOT_FOUND"
  | "PROCESS_LIMIT"
  | "PROCESS_NOT_RUNNING"
  | "STDIN_CLOSED"
  | "NOT_A_TERMINAL"
  | "PORT_NOT_LISTENING"
  | "PORT_NOT_EXPOSED"
  | "CONCURRENT_MODIFICATION"
  | "DATABASE_UNAVAILABLE"
  | "WORKSPACE_SERVED_ELSEWHERE";

/** How much of a command's output was kept, and how much it wrote in total. */
export interface OutputTotals {
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  stdoutTotalBytes: number;
  stderrTotalBytes: number;
}

/** A command's captured output: the kept text plus its totals. */
export interface CapturedOutput extends OutputTotals {
  stdout: string;
  stderr: string;
  durationMs: number;
}

/** The region of a file most like a failed search string. */
export interface ClosestMatchInfo {
  startLine: number;
  endLine: number;
  text: string;
  similarity: number;
}

/**
 * The structured extra an error may carry besides its reason and metadata, one kind at a time:
 * the output of a command killed at its timeout (COMMAND_TIMEOUT), or the closest region of a
 * file to a failed search string (FIND_NOT_FOUND).
 */
export type ErrorPayload = { case: "partialOutput"; value: CapturedOutput } | { case: "closestMatch"; value: ClosestMatchInfo };

/** Options of a DomainError besides its reason and message. */
export interface DomainErrorOptions {
  /** Machine-readable context sent to the client ("path", "field", …). Never secrets or host paths. */
  metadata?: Record<string, string>;
  payload?: ErrorPayload;
  /** What went wrong underneath (an errno, a child's stderr). Logged on the server, never sent. */
  cause?: unknown;
}

/**
 * A failure the caller can act on. `message` is sent to the client verbatim, so it must never
 * contain secrets or host paths; put machine-readable context in `metadata`.
 */
export class DomainError extends Error {
  readonly reason: Reason;
  readonly metadata: Record<string, string>;
  readonly payload: ErrorPayload | undefined;

  constructor(reason: Reason, message: string, options: DomainErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "DomainError";
    this.reason = reason;
    this.metadata = options.metadata ?? {};
    this.payload = options.payload;
  }
}

/** True when `err` is a DomainError with one of the given reasons. */
export function hasReason(err: unknown, ...reasons: Reason[]): err is DomainError {
  return err instanceof DomainError && reasons.includes(err.reason);
}

/** The errno code of a Node system error ("ENOENT"), or undefined. */
export function errnoCode(err: unknown): string | undefined {
  if (typeof err === "object" && err !== null && "code" in err) {
    const code = (err as { code: unknown }).code;
    return typeof code === "string" ? code : undefined;
  }
  return undefined;
}
