/**
 * A failure of a workspace operation with a stable reason, raised by the executor's file
 * operations wherever they run (inside a sandbox, or in the server for the local provider). It
 * crosses the executor protocol as JSON and becomes a DomainError on the server side; the
 * reasons are a subset of the server's (checked at compile time in providers/executor-fs.ts).
 */

/** Reasons a workspace operation can fail with. */
export type FaultReason =
  | "FILE_NOT_FOUND"
  | "PATH_OUTSIDE_WORKSPACE"
  | "IS_DIRECTORY"
  | "NOT_A_DIRECTORY"
  | "WRITE_FAILED"
  | "INVALID_ARGUMENT"
  | "UNSUPPORTED_FILE_TYPE"
  | "FILE_TOO_LARGE"
  | "ACCESS_DENIED"
  | "RESOURCE_EXHAUSTED"
  | "WORKSPACE_NOT_READY"
  | "SENSITIVE_FILE"
  | "PATH_CHANGED"
  | "PROCESS_NOT_RUNNING"
  | "STDIN_CLOSED"
  | "NOT_A_TERMINAL"
  | "PORT_NOT_LISTENING"
  | "PROVIDER_UNAVAILABLE"
  | "INTERNAL";

/** The wire form of a fault. */
export interface FaultInfo {
  reason: FaultReason;
  message: string;
  metadata: Record<string, string>;
  /** What caused it (an errno and the call that met it), for the server's log only. */
  cause?: string;
}

/** A workspace operation's failure; `message` is client-safe (no host paths). */
export class Fault extends Error {
  readonly reason: FaultReason;
  readonly metadata: Record<string, string>;
  /**
   * Where a path's resolution was refused by the kernel (ACCESS_DENIED), workspace-relative with
   * what was left of the path: the jail's callers judge it against the sensitive-file rules. Not
   * sent over the protocol.
   */
  at?: string;

  constructor(reason: FaultReason, message: string, metadata: Record<string, string> = {}, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "Fault";
    this.reason = reason;
    this.metadata = metadata;
  }

  /** The JSON form sent over the protocol. */
  toInfo(): FaultInfo {
    const c = this.cause as { code?: unknown; syscall?: unknown; message?: unknown } | undefined;
    const cause = c === undefined ? undefined : [c.code, c.syscall, c.message].filter((x) => typeof x === "string").join(" ").slice(0, 500);
    return { reason: this.reason, message: this.message, metadata: this.metadata, cause };
  }
}
