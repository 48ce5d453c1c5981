/**
 * Where the executor's faults become the domain's errors: in-process for the local provider, and
 * for faults that crossed the executor protocol as JSON.
 */
import { DomainError, type Reason } from "../core/errors.ts";
import { Fault, type FaultInfo, type FaultReason } from "./executor/fault.ts";

/** Every fault reason is a domain reason (a compile error here otherwise). */
const FAULT_REASONS: Record<FaultReason, Reason> = {
  FILE_NOT_FOUND: "FILE_NOT_FOUND",
  PATH_OUTSIDE_WORKSPACE: "PATH_OUTSIDE_WORKSPACE",
  IS_DIRECTORY: "IS_DIRECTORY",
  NOT_A_DIRECTORY: "NOT_A_DIRECTORY",
  WRITE_FAILED: "WRITE_FAILED",
  INVALID_ARGUMENT: "INVALID_ARGUMENT",
  UNSUPPORTED_FILE_TYPE: "UNSUPPORTED_FILE_TYPE",
  FILE_TOO_LARGE: "FILE_TOO_LARGE",
  ACCESS_DENIED: "ACCESS_DENIED",
  RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
  WORKSPACE_NOT_READY: "WORKSPACE_NOT_READY",
  SENSITIVE_FILE: "SENSITIVE_FILE",
  PATH_CHANGED: "PATH_CHANGED",
  PROCESS_NOT_RUNNING: "PROCESS_NOT_RUNNING",
  STDIN_CLOSED: "STDIN_CLOSED",
  NOT_A_TERMINAL: "NOT_A_TERMINAL",
  PORT_NOT_LISTENING: "PORT_NOT_LISTENING",
  PROVIDER_UNAVAILABLE: "PROVIDER_UNAVAILABLE",
  INTERNAL: "INTERNAL",
};

/** The DomainError for a fault raised in this process (its cause kept for the server log). */
export function toDomainError(err: unknown): unknown {
  if (!(err instanceof Fault)) return err;
  return new DomainError(FAULT_REASONS[err.reason], err.message, { metadata: err.metadata, cause: err.cause });
}

/** The DomainError for a fault that arrived over the executor protocol; an unknown reason is INTERNAL. */
export function faultFromWire(info: FaultInfo, cause?: unknown): DomainError {
  const reason = Object.hasOwn(FAULT_REASONS, info.reason) ? FAULT_REASONS[info.reason] : "INTERNAL";
  const metadata = typeof info.metadata === "object" && info.metadata !== null ? info.metadata : {};
  return new DomainError(reason, String(info.message), { metadata, cause });
}

/** Runs `fn`, turning a Fault it throws into a DomainError. */
export function domain<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw toDomainError(err);
  }
}
