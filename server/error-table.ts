/**
 * The one table from domain reasons to Connect codes and proto ErrorReason values. It is a
 * Record over the Reason union, so a new reason fails the compile until it is mapped here.
 */
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import type { Reason } from "../core/errors.ts";

/** How one reason goes on the wire. */
export interface ReasonMapping {
  code: Code;
  reason: ErrorReason;
}

/** Reason → Connect code and proto reason. Over the Connect protocol the code fixes the HTTP status. */
export const ERROR_TABLE: Record<Reason, ReasonMapping> = {
  FILE_NOT_FOUND: { code: Code.NotFound, reason: ErrorReason.FILE_NOT_FOUND },
  PATH_OUTSIDE_WORKSPACE: { code: Code.PermissionDenied, reason: ErrorReason.PATH_OUTSIDE_WORKSPACE },
  IS_DIRECTORY: { code: Code.FailedPrecondition, reason: ErrorReason.IS_DIRECTORY },
  NOT_A_DIRECTORY: { code: Code.FailedPrecondition, reason: ErrorReason.NOT_A_DIRECTORY },
  WRITE_FAILED: { code: Code.Internal, reason: ErrorReason.WRITE_FAILED },
  FIND_NOT_FOUND: { code: Code.FailedPrecondition, reason: ErrorReason.FIND_NOT_FOUND },
  FIND_NOT_UNIQUE: { code: Code.FailedPrecondition, reason: ErrorReason.FIND_NOT_UNIQUE },
  INVALID_PATTERN: { code: Code.InvalidArgument, reason: ErrorReason.INVALID_PATTERN },
  RIPGREP_NOT_FOUND: { code: Code.FailedPrecondition, reason: ErrorReason.RIPGREP_NOT_FOUND },
  COMMAND_TIMEOUT: { code: Code.DeadlineExceeded, reason: ErrorReason.COMMAND_TIMEOUT },
  WORKSPACE_NOT_FOUND: { code: Code.NotFound, reason: ErrorReason.WORKSPACE_NOT_FOUND },
  INVALID_ARGUMENT: { code: Code.InvalidArgument, reason: ErrorReason.INVALID_ARGUMENT },
  UNSUPPORTED_FILE_TYPE: { code: Code.FailedPrecondition, reason: ErrorReason.UNSUPPORTED_FILE_TYPE },
  FILE_TOO_LARGE: { code: Code.FailedPrecondition, reason: ErrorReason.FILE_TOO_LARGE },
  WORKSPACE_NOT_READY: { code: Code.FailedPrecondition, reason: ErrorReason.WORKSPACE_NOT_READY },
  PROVIDER_UNAVAILABLE: { code: Code.Unavailable, reason: ErrorReason.PROVIDER_UNAVAILABLE },
  UNKNOWN_PROVIDER: { code: Code.InvalidArgument, reason: ErrorReason.UNKNOWN_PROVIDER },
  ACCESS_DENIED: { code: Code.PermissionDenied, reason: ErrorReason.ACCESS_DENIED },
  TOOL_NOT_ENABLED: { code: Code.PermissionDenied, reason: ErrorReason.TOOL_NOT_ENABLED },
  RESOURCE_EXHAUSTED: { code: Code.ResourceExhausted, reason: ErrorReason.RESOURCE_EXHAUSTED },
  CANCELLED: { code: Code.Canceled, reason: ErrorReason.CANCELLED },
  INTERNAL: { code: Code.Internal, reason: ErrorReason.INTERNAL },
  UNKNOWN_TOOL: { code: Code.InvalidArgument, reason: ErrorReason.UNKNOWN_TOOL },
  AGENT_TYPE_NOT_FOUND: { code: Code.NotFound, reason: ErrorReason.AGENT_TYPE_NOT_FOUND },
  AGENT_TYPE_EXISTS: { code: Code.AlreadyExists, reason: ErrorReason.AGENT_TYPE_EXISTS },
  AGENT_TYPE_IN_USE: { code: Code.FailedPrecondition, reason: ErrorReason.AGENT_TYPE_IN_USE },
  WORKSPACE_DISABLED: { code: Code.NotFound, reason: ErrorReason.WORKSPACE_DISABLED },
  AGENT_TYPE_WORKSPACE_DISABLED: { code: Code.FailedPrecondition, reason: ErrorReason.AGENT_TYPE_WORKSPACE_DISABLED },
  UNAUTHENTICATED: { code: Code.Unauthenticated, reason: ErrorReason.UNAUTHENTICATED },
  CALLER_NOT_PERMITTED: { code: Code.PermissionDenied, reason: ErrorReason.CALLER_NOT_PERMITTED },
  SESSION_NOT_FOUND: { code: Code.NotFound, reason: ErrorReason.SESSION_NOT_FOUND },
  SESSION_NOT_READY: { code: Code.FailedPrecondition, reason: ErrorReason.SESSION_NOT_READY },
  WORKSPACE_NOT_PROVISIONED: { code: Code.FailedPrecondition, reason: ErrorReason.WORKSPACE_NOT_PROVISIONED },
  OUTSIDE_SESSION: { code: Code.PermissionDenied, reason: ErrorReason.OUTSIDE_SESSION },
  COMMAND_NOT_ALLOWED: { code: Code.PermissionDenied, reason: ErrorReason.COMMAND_NOT_ALLOWED },
  SENSITIVE_FILE: { code: Code.PermissionDenied, reason: ErrorReason.SENSITIVE_FILE },
  NOT_A_GIT_REPOSITORY: { code: Code.FailedPrecondition, reason: ErrorReason.NOT_A_GIT_REPOSITORY },
  NOTHING_TO_COMMIT: { code: Code.FailedPrecondition, reason: ErrorReason.NOTHING_TO_COMMIT },
  REVISION_NOT_FOUND: { code: Code.NotFound, reason: ErrorReason.REVISION_NOT_FOUND },
  BRANCH_EXISTS: { code: Code.AlreadyExists, reason: ErrorReason.BRANCH_EXISTS },
  CHECKOUT_CONFLICT: { code: Code.FailedPrecondition, reason: ErrorReason.CHECKOUT_CONFLICT },
  NO_REPOSITORY: { code: Code.FailedPrecondition, reason: ErrorReason.NO_REPOSITORY },
  FORCE_PUSH_DENIED: { code: Code.PermissionDenied, reason: ErrorReason.FORCE_PUSH_DENIED },
  PROTECTED_BRANCH: { code: Code.PermissionDenied, reason: ErrorReason.PROTECTED_BRANCH },
  GIT_REMOTE_FAILED: { code: Code.Unavailable, reason: ErrorReason.GIT_REMOTE_FAILED },
  GIT_CREDENTIAL_UNAVAILABLE: { code: Code.Unavailable, reason: ErrorReason.GIT_CREDENTIAL_UNAVAILABLE },
  GIT_FAILED: { code: Code.FailedPrecondition, reason: ErrorReason.GIT_FAILED },
  HOST_PATH_NOT_ALLOWED: { code: Code.PermissionDenied, reason: ErrorReason.HOST_PATH_NOT_ALLOWED },
  MOUNT_TOO_LARGE: { code: Code.ResourceExhausted, reason: ErrorReason.MOUNT_TOO_LARGE },
  PROCESSES_UNSUPPORTED: { code: Code.FailedPrecondition, reason: ErrorReason.PROCESSES_UNSUPPORTED },
  CONTENT_TOO_LONG: { code: Code.InvalidArgument, reason: ErrorReason.CONTENT_TOO_LONG },
  PATH_TOO_DEEP: { code: Code.InvalidArgument, reason: ErrorReason.PATH_TOO_DEEP },
  PATH_SEGMENT_TOO_LONG: { code: Code.InvalidArgument, reason: ErrorReason.PATH_SEGMENT_TOO_LONG },
  PATH_NOT_ASCII: { code: Code.InvalidArgument, reason: ErrorReason.PATH_NOT_ASCII },
  BINARY_CONTENT: { code: Code.InvalidArgument, reason: ErrorReason.BINARY_CONTENT },
  WORKSPACE_NOT_SHAREABLE: { code: Code.FailedPrecondition, reason: ErrorReason.WORKSPACE_NOT_SHAREABLE },
  EGRESS_DENIED: { code: Code.PermissionDenied, reason: ErrorReason.EGRESS_DENIED },
  ENFORCEMENT_UNAVAILABLE: { code: Code.FailedPrecondition, reason: ErrorReason.ENFORCEMENT_UNAVAILABLE },
  // ABORTED, gRPC's code for a concurrency conflict the caller retries (a directory swapped by a
  // command while a tool went through it). Not UNAVAILABLE: the workspace and its provider are fine,
  // and clients treat UNAVAILABLE as a backend to fail over from.
  PATH_CHANGED: { code: Code.Aborted, reason: ErrorReason.PATH_CHANGED },
  PROCESS_NOT_FOUND: { code: Code.NotFound, reason: ErrorReason.PROCESS_NOT_FOUND },
  PROCESS_LIMIT: { code: Code.ResourceExhausted, reason: ErrorReason.PROCESS_LIMIT },
  PROCESS_NOT_RUNNING: { code: Code.FailedPrecondition, reason: ErrorReason.PROCESS_NOT_RUNNING },
  STDIN_CLOSED: { code: Code.FailedPrecondition, reason: ErrorReason.STDIN_CLOSED },
  NOT_A_TERMINAL: { code: Code.FailedPrecondition, reason: ErrorReason.NOT_A_TERMINAL },
  PORT_NOT_LISTENING: { code: Code.Unavailable, reason: ErrorReason.PORT_NOT_LISTENING },
  PORT_NOT_EXPOSED: { code: Code.NotFound, reason: ErrorReason.PORT_NOT_EXPOSED },
  // ABORTED like PATH_CHANGED: a conflict the caller resolves by reading again and retrying.
  CONCURRENT_MODIFICATION: { code: Code.Aborted, reason: ErrorReason.CONCURRENT_MODIFICATION },
  DATABASE_UNAVAILABLE: { code: Code.Unavailable, reason: ErrorReason.DATABASE_UNAVAILABLE },
  WORKSPACE_SERVED_ELSEWHERE: { code: Code.Unavailable, reason: ErrorReason.WORKSPACE_SERVED_ELSEWHERE },
};
