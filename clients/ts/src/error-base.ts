/**
 * The base class of every error the client throws. It carries the server's `ErrorDetail` decoded
 * (reason, metadata, closest match, partial output), never only a message to parse.
 */
import type { Code } from "@connectrpc/connect";
import type { ClosestMatch, ErrorDetail, PartialOutput } from "../gen/agentworkspace/v1/errors_pb.js";
import type { ErrorReasonName } from "./error-classes.ts";

/** What an `AgentWorkspaceError` is made from. */
export interface AgentWorkspaceErrorInit {
  code: Code;
  reason?: ErrorReasonName;
  detail?: ErrorDetail;
  cause?: unknown;
}

/**
 * A failed call. `code` is the Connect code (the same on every protocol); `reason` the stable name
 * of the server's `ErrorReason` (`"FILE_NOT_FOUND"`), undefined when the error carries no
 * `ErrorDetail` (a transport failure, a client-side deadline). Each reason has its own subclass
 * (`FileNotFoundError`, …), so `instanceof` narrows. `cause` is the underlying `ConnectError`.
 */
export class AgentWorkspaceError extends Error {
  /** The Connect code, e.g. `Code.NotFound`. */
  readonly code: Code;
  /** The stable reason, or undefined for an error without an `ErrorDetail`. */
  readonly reason: ErrorReasonName | undefined;
  /** Context that names what failed (`path`, `patch_index`, `workspace_id`, …); empty when none. */
  readonly metadata: Readonly<Record<string, string>>;
  /** For a failed edit or patch (`FIND_NOT_FOUND`): the lines that most resemble the text searched for. */
  readonly closestMatch: ClosestMatch | undefined;
  /** For a command that timed out (`COMMAND_TIMEOUT`): what it wrote before it was killed. */
  readonly partialOutput: PartialOutput | undefined;
  /** The decoded `agentworkspace.v1.ErrorDetail`, as sent (its `reason` is the enum number). */
  readonly detail: ErrorDetail | undefined;

  constructor(message: string, init: AgentWorkspaceErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.reason = init.reason;
    this.detail = init.detail;
    this.metadata = init.detail?.metadata ?? {};
    this.closestMatch = init.detail?.closestMatch;
    this.partialOutput = init.detail?.partialOutput;
  }
}

/** A call whose deadline (`timeoutMs`) passed, told by the client or by the server without a detail. */
export class DeadlineExceededError extends AgentWorkspaceError {}

/** The server could not be reached, or the connection failed: the only code the client retries (reads only). */
export class UnavailableError extends AgentWorkspaceError {}
