/**
 * The one error class of the domain. Providers, the jail and tools throw it with a stable
 * reason; the server maps each reason to a Connect code in one table (server/error-table.ts)
 * and sends the reason as a typed error detail. This module imports nothing from gen/ or
 * @connectrpc so that providers stay transport-free.
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
  | "INTERNAL";

/** Output a command produced before it was killed; carried by COMMAND_TIMEOUT errors. */
export interface PartialOutputInfo {
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  stdoutTotalBytes: number;
  stderrTotalBytes: number;
  durationMs: number;
}

/** The region of a file most like a failed search string; carried by FIND_NOT_FOUND errors. */
export interface ClosestMatchInfo {
  startLine: number;
  endLine: number;
  text: string;
  similarity: number;
}

/** Structured extras an error may carry besides its reason and message. */
export interface DomainErrorExtras {
  metadata?: Record<string, string>;
  partialOutput?: PartialOutputInfo;
  closestMatch?: ClosestMatchInfo;
  cause?: unknown;
}

/**
 * A failure the caller can act on. `message` is sent to the client verbatim, so it must never
 * contain secrets or host paths; put machine-readable context in `metadata`.
 */
export class DomainError extends Error {
  readonly reason: Reason;
  readonly metadata: Record<string, string>;
  readonly partialOutput: PartialOutputInfo | undefined;
  readonly closestMatch: ClosestMatchInfo | undefined;

  constructor(reason: Reason, message: string, extras: DomainErrorExtras = {}) {
    super(message, extras.cause === undefined ? undefined : { cause: extras.cause });
    this.name = "DomainError";
    this.reason = reason;
    this.metadata = extras.metadata ?? {};
    this.partialOutput = extras.partialOutput;
    this.closestMatch = extras.closestMatch;
  }
}

/** True when `err` is a DomainError with the given reason. */
export function hasReason(err: unknown, reason: Reason): boolean {
  return err instanceof DomainError && err.reason === reason;
}

/** The errno code of a Node system error ("ENOENT"), or undefined. */
export function errnoCode(err: unknown): string | undefined {
  if (typeof err === "object" && err !== null && "code" in err) {
    const code = (err as { code: unknown }).code;
    return typeof code === "string" ? code : undefined;
  }
  return undefined;
}
