/**
 * Turns every failure into a ConnectError with a typed ErrorDetail, in one place, for unary and
 * streaming calls alike, and logs each failed call once (procedure, code, reason, duration; never
 * contents). Domain errors keep their message and reason; anything else becomes INTERNAL with a
 * generic message. Causes stay on the server: they are attached as the ConnectError's `cause`
 * and logged for internal and unavailable errors, and never sent to the client.
 */
import { inspect } from "node:util";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor, type StreamResponse, type UnaryResponse } from "@connectrpc/connect";
import { ClosestMatchSchema, ErrorDetailSchema, ErrorReason, PartialOutputSchema } from "../../gen/agentworkspace/v1/errors_pb.js";
import { DomainError, type ErrorPayload } from "../../core/errors.ts";
import { ERROR_TABLE } from "../error-table.ts";
import type { Logger } from "../logger.ts";
import { StoreError } from "../store/store.ts";

type DetailInit = Parameters<typeof create<typeof ErrorDetailSchema>>[1];

/**
 * Most bytes of text one field of an error detail carries. Over gRPC the detail travels base64 in
 * a trailer: Node's HTTP/2 refuses header blocks past 64 KiB and breaks the whole connection, and
 * gRPC C-core clients (Python, Ruby, C++…) refuse metadata past 8 KiB by default and lose the
 * error. So a timed-out command's partial output, or a closest match, is cut to its head here
 * (the `*_truncated` flags say so; the totals keep counting): two fields of 2 KiB stay under
 * C-core's limit with the message beside them.
 */
export const MAX_DETAIL_TEXT_BYTES = 2 * 1024;

/** `text` cut to at most `max` UTF-8 bytes at a character boundary, and whether it was cut. */
function head(text: string, max = MAX_DETAIL_TEXT_BYTES): [string, boolean] {
  if (Buffer.byteLength(text) <= max) return [text, false];
  const bytes = Buffer.from(text).subarray(0, max);
  let end = bytes.length;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return [bytes.subarray(0, end).toString("utf8"), true];
}

function payloadFields(payload: ErrorPayload | undefined): Pick<NonNullable<DetailInit>, "partialOutput" | "closestMatch"> {
  switch (payload?.case) {
    case undefined:
      return {};
    case "partialOutput": {
      const p = payload.value;
      const [stdout, stdoutCut] = head(p.stdout);
      const [stderr, stderrCut] = head(p.stderr);
      return {
        partialOutput: create(PartialOutputSchema, {
          ...p,
          stdout,
          stderr,
          stdoutTruncated: p.stdoutTruncated || stdoutCut,
          stderrTruncated: p.stderrTruncated || stderrCut,
          stdoutTotalBytes: BigInt(p.stdoutTotalBytes),
          stderrTotalBytes: BigInt(p.stderrTotalBytes),
          durationMs: BigInt(p.durationMs),
        }),
      };
    }
    case "closestMatch":
      return { closestMatch: create(ClosestMatchSchema, { ...payload.value, text: head(payload.value.text)[0] }) };
  }
}

/** The reason a framework error (a malformed body, an unknown method, a cancel) is reported with. */
function frameworkReason(code: Code): ErrorReason {
  switch (code) {
    case Code.Canceled:
      return ErrorReason.CANCELLED;
    case Code.InvalidArgument:
      return ErrorReason.INVALID_ARGUMENT;
    case Code.DeadlineExceeded:
      return ErrorReason.COMMAND_TIMEOUT;
    case Code.ResourceExhausted:
      return ErrorReason.RESOURCE_EXHAUSTED;
    case Code.Internal:
    case Code.Unknown:
      return ErrorReason.INTERNAL;
    default:
      return ErrorReason.UNSPECIFIED;
  }
}

/** Converts any thrown value into the ConnectError the client will see; the original is its `cause`. */
export function toConnectError(err: unknown): ConnectError {
  // The stores raise StoreError only when the database cannot serve (unreachable, restarting,
  // closed); what it says is for the log (it names the database), not for the caller.
  if (err instanceof StoreError) err = new DomainError("DATABASE_UNAVAILABLE", "The server's database is unavailable at the moment; nothing was changed. Retry", { cause: err });
  if (err instanceof DomainError) {
    const mapping = ERROR_TABLE[err.reason];
    const detail = create(ErrorDetailSchema, { reason: mapping.reason, message: err.message, metadata: err.metadata, ...payloadFields(err.payload) });
    return new ConnectError(err.message, mapping.code, undefined, [{ desc: ErrorDetailSchema, value: detail }], err);
  }
  if (err instanceof ConnectError) {
    // Framework errors keep their code; they get a detail too so clients can always switch on a reason.
    if (err.findDetails(ErrorDetailSchema).length === 0) {
      // A JSON body with a field the message does not have: name the field, so the caller can fix it.
      const unknownField = err.code === Code.InvalidArgument ? /key "([^"]{1,100})" is unknown/.exec(err.rawMessage)?.[1] : undefined;
      const metadata: Record<string, string> = unknownField === undefined ? {} : { field: unknownField };
      err.details.push({ desc: ErrorDetailSchema, value: create(ErrorDetailSchema, { reason: frameworkReason(err.code), message: err.rawMessage, metadata }) });
    }
    return err;
  }
  const detail = create(ErrorDetailSchema, { reason: ErrorReason.INTERNAL, message: "Internal server error" });
  return new ConnectError("Internal server error", Code.Internal, undefined, [{ desc: ErrorDetailSchema, value: detail }], err);
}

/** A cause as a log field: a stack for errors (with their own causes), text otherwise. */
export function describeCause(cause: unknown): string {
  if (cause instanceof Error) return inspect(cause, { depth: 4, breakLength: Number.POSITIVE_INFINITY }).slice(0, 8000);
  return (typeof cause === "string" ? cause : inspect(cause, { depth: 4 })).slice(0, 8000);
}

/** Codes that mean the server, not the caller, has a problem: their causes are logged. */
const SERVER_FAULTS = new Set([Code.Internal, Code.Unknown, Code.Unavailable, Code.DataLoss, Code.Unimplemented]);

/** Logs one failed call (procedure, code, reason, duration; the cause for server faults). */
export function logFailure(logger: Logger, procedure: string, error: ConnectError, startedAt: number): void {
  const detail = error.findDetails(ErrorDetailSchema)[0];
  const fields: Record<string, unknown> = {
    procedure,
    code: Code[error.code],
    reason: `ERROR_REASON_${ErrorReason[detail?.reason ?? ErrorReason.UNSPECIFIED]}`,
    duration_ms: Math.round(performance.now() - startedAt),
  };
  if (!SERVER_FAULTS.has(error.code)) {
    logger.info("call failed", fields);
    return;
  }
  // The DomainError (or unknown value) the ConnectError was made from, and what caused that.
  const original = error.cause;
  const underlying = original instanceof DomainError ? original.cause : original;
  if (underlying !== undefined) fields.cause = describeCause(underlying);
  (error.code === Code.Unavailable ? logger.warn : logger.error)("call failed", fields);
}

/** The interceptor; place it inside audit/tracing and outside authentication and permissions. */
export function createErrorInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const procedure = `${req.service.typeName}/${req.method.name}`;
    const startedAt = performance.now();
    const fail = (err: unknown): ConnectError => {
      const error = toConnectError(err);
      logFailure(logger, procedure, error, startedAt);
      return error;
    };
    let res: UnaryResponse | StreamResponse;
    try {
      res = await next(req);
    } catch (err) {
      throw fail(err);
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
          // write error into this stream. It is a cancellation, not a server fault.
          if (req.signal.aborted && !(err instanceof DomainError) && !(err instanceof ConnectError)) {
            throw fail(new ConnectError("The call was cancelled", Code.Canceled, undefined, undefined, err));
          }
          throw fail(err);
        }
      })(),
    };
  };
}
