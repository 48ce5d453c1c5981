/**
 * Turning what connect-es throws into the client's typed errors: the `ErrorDetail` every server
 * error carries selects the reason's class; an error without one (a transport failure, the
 * client's own deadline or cancellation) gets a class by its code.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { AgentWorkspaceError, DeadlineExceededError, UnavailableError } from "./error-base.ts";
import { CancelledError, ERROR_CLASSES, type ErrorReasonName } from "./error-classes.ts";

/**
 * The client's error for anything a call threw. With an `ErrorDetail`: the class of its reason
 * (an unknown reason, from a newer server, gives the base class with `reason` undefined and the
 * number in `detail.reason`). Without one: `CancelledError` for `Code.Canceled` (the caller's
 * signal; `reason` is then `"CANCELLED"` too), `DeadlineExceededError`, `UnavailableError`, else
 * the base class. The message is the server's (or the transport's) text, without the code prefix.
 */
export function toAgentWorkspaceError(err: unknown): AgentWorkspaceError {
  if (err instanceof AgentWorkspaceError) return err;
  const ce = ConnectError.from(err);
  const detail = ce.findDetails(ErrorDetailSchema)[0];
  if (detail !== undefined && detail.reason !== ErrorReason.UNSPECIFIED) {
    const Class = ERROR_CLASSES[detail.reason] ?? AgentWorkspaceError;
    const reason = Class === AgentWorkspaceError ? undefined : (ErrorReason[detail.reason] as ErrorReasonName);
    return new Class(ce.rawMessage, { code: ce.code, reason, detail, cause: ce });
  }
  switch (ce.code) {
    case Code.Canceled:
      return new CancelledError(ce.rawMessage, { code: ce.code, reason: "CANCELLED", detail, cause: ce });
    case Code.DeadlineExceeded:
      return new DeadlineExceededError(ce.rawMessage, { code: ce.code, detail, cause: ce });
    case Code.Unavailable:
      return new UnavailableError(ce.rawMessage, { code: ce.code, detail, cause: ce });
    default:
      return new AgentWorkspaceError(ce.rawMessage, { code: ce.code, detail, cause: ce });
  }
}
