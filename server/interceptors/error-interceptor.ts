/**
 * Turns every failure into a ConnectError with a typed ErrorDetail, in one place, for unary and
 * streaming calls alike. Domain errors keep their message and reason; anything else becomes
 * INTERNAL with a generic message while the cause is logged on the server, never sent.
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor, type StreamResponse, type UnaryResponse } from "@connectrpc/connect";
import {
  ClosestMatchSchema,
  ErrorDetailSchema,
  ErrorReason,
  PartialOutputSchema,
} from "../../gen/agentworkspace/v1/errors_pb.js";
import { DomainError } from "../../providers/errors.ts";
import { ERROR_TABLE } from "../error-table.ts";
import type { Logger } from "../logger.ts";

/** Converts any thrown value into the ConnectError the client will see. */
export function toConnectError(err: unknown, logger: Logger, procedure: string): ConnectError {
  if (err instanceof DomainError) {
    const mapping = ERROR_TABLE[err.reason];
    const detail = create(ErrorDetailSchema, {
      reason: mapping.reason,
      message: err.message,
      metadata: err.metadata,
      partialOutput: err.partialOutput ? create(PartialOutputSchema, { ...err.partialOutput, stdoutTotalBytes: BigInt(err.partialOutput.stdoutTotalBytes), stderrTotalBytes: BigInt(err.partialOutput.stderrTotalBytes), durationMs: BigInt(err.partialOutput.durationMs) }) : undefined,
      closestMatch: err.closestMatch ? create(ClosestMatchSchema, err.closestMatch) : undefined,
    });
    return new ConnectError(err.message, mapping.code, undefined, [{ desc: ErrorDetailSchema, value: detail }]);
  }
  if (err instanceof ConnectError) {
    // Errors raised by the framework itself (a malformed body, an unknown method, a cancel) keep
    // their code; they get a detail too so clients can always switch on a reason.
    if (err.findDetails(ErrorDetailSchema).length > 0) return err;
    const reason =
      err.code === Code.Canceled ? ErrorReason.CANCELLED : err.code === Code.InvalidArgument ? ErrorReason.INVALID_ARGUMENT : err.code === Code.Internal || err.code === Code.Unknown ? ErrorReason.INTERNAL : ErrorReason.UNSPECIFIED;
    err.details.push({ desc: ErrorDetailSchema, value: create(ErrorDetailSchema, { reason, message: err.rawMessage }) });
    return err;
  }
  logger.error("internal error", { procedure, error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  const detail = create(ErrorDetailSchema, { reason: ErrorReason.INTERNAL, message: "Internal server error" });
  return new ConnectError("Internal server error", Code.Internal, undefined, [{ desc: ErrorDetailSchema, value: detail }]);
}

/** The interceptor; place it innermost so it sees the handlers' own errors first. */
export function createErrorInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const procedure = req.url;
    let res: UnaryResponse | StreamResponse;
    try {
      res = await next(req);
    } catch (err) {
      throw toConnectError(err, logger, procedure);
    }
    if (!res.stream) return res;
    const inner = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* inner;
        } catch (err) {
          // A client that went away makes the next response write fail; connect-node throws that
          // write error into this stream. It is a cancellation, not a server fault to log.
          if (req.signal.aborted && !(err instanceof DomainError) && !(err instanceof ConnectError)) {
            throw toConnectError(new ConnectError("The call was cancelled", Code.Canceled, undefined, undefined, err), logger, procedure);
          }
          throw toConnectError(err, logger, procedure);
        }
      })(),
    };
  };
}
