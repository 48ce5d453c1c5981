/**
 * The one place calls go through: credentials, per-call deadline and cancellation, error mapping,
 * and retries of idempotent reads on UNAVAILABLE. Kept thin on purpose: a call without options
 * reuses one prepared options object and adds one `await` over the raw connect-es client.
 */
import { Code, type CallOptions as ConnectCallOptions } from "@connectrpc/connect";
import { CancelledError } from "./error-classes.ts";
import { toAgentWorkspaceError } from "./errors.ts";
import type { AgentWorkspaceError } from "./error-base.ts";

/** Retries of idempotent reads that failed with `UNAVAILABLE`. */
export interface RetryOptions {
  /** Attempts in all, the first included; 1 disables retries. Default 4. */
  maxAttempts?: number;
  /** Backoff before the first retry, in ms, doubled for each next one. Default 50. */
  initialBackoffMs?: number;
  /** Longest backoff, in ms. Default 1000. */
  maxBackoffMs?: number;
}

/** Options every call takes. */
export interface CallOptions {
  /** Cancels the call; a cancelled call rejects with `CancelledError` (a running command is killed). */
  signal?: AbortSignal;
  /**
   * The call's deadline in ms, sent to the server (which stops its work at it) and kept by the
   * client; it covers retries and their backoff. A call past it rejects with `code`
   * `DEADLINE_EXCEEDED` (`DeadlineExceededError`, or `CommandTimeoutError` when the server's
   * answer came first).
   */
  timeoutMs?: number;
  /** Overrides the client's retry policy for this call (reads only); `false` disables retries. */
  retry?: RetryOptions | false;
  /** Extra request headers (e.g. `tool-call-id`, `traceparent`). */
  headers?: Record<string, string>;
}

const DEFAULT_RETRY: Required<RetryOptions> = { maxAttempts: 4, initialBackoffMs: 50, maxBackoffMs: 1000 };

/** Whether a call may be sent again: only reads, which change nothing, ever are. */
export type Idempotency = "idempotent" | "once";

/**
 * The credentials and defaults a set of calls shares: an operator key, a session token, or none.
 * The authorization header is sent per call (not by the transport), so an operator client and the
 * sessions it starts share one connection.
 */
export class Caller {
  readonly #base: ConnectCallOptions;
  readonly #authorization: string | undefined;
  readonly #retry: Required<RetryOptions>;

  constructor(credential: string | undefined, retry: RetryOptions | false | undefined) {
    this.#authorization = credential ? `Bearer ${credential}` : undefined;
    this.#base = this.#authorization ? { headers: { authorization: this.#authorization } } : {};
    this.#retry = retry === false ? { ...DEFAULT_RETRY, maxAttempts: 1 } : { ...DEFAULT_RETRY, ...retry };
  }

  /** A caller with another credential and the same retry policy. */
  with(credential: string | undefined): Caller {
    return new Caller(credential, this.#retry);
  }

  /** connect-es call options for one attempt. */
  options(opts: CallOptions | undefined, timeoutMs?: number, signal?: AbortSignal): ConnectCallOptions {
    if (opts === undefined && timeoutMs === undefined && signal === undefined) return this.#base;
    const headers = opts?.headers || this.#authorization ? { ...opts?.headers, ...(this.#authorization ? { authorization: this.#authorization } : {}) } : undefined;
    return { headers, signal: signal ?? opts?.signal, timeoutMs: timeoutMs ?? opts?.timeoutMs };
  }

  /**
   * One unary call: `fn` with the caller's options; a failure becomes an `AgentWorkspaceError`.
   * An idempotent call that fails with `UNAVAILABLE` is sent again after a backoff (doubling, with
   * jitter), at most `maxAttempts` times in all, never past its deadline, and not once its signal
   * has fired. A call that is not idempotent is sent exactly once.
   */
  async unary<I, O>(fn: (req: I, opts: ConnectCallOptions) => Promise<O>, req: I, opts: CallOptions | undefined, idempotency: Idempotency): Promise<O> {
    const policy = opts?.retry === false ? undefined : opts?.retry ? { ...this.#retry, ...opts.retry } : this.#retry;
    if (idempotency === "once" || policy === undefined || policy.maxAttempts <= 1) {
      try {
        return await fn(req, this.options(opts));
      } catch (err) {
        throw toAgentWorkspaceError(err);
      }
    }
    const deadline = opts?.timeoutMs !== undefined ? performance.now() + opts.timeoutMs : undefined;
    for (let attempt = 1; ; attempt++) {
      const remaining = deadline === undefined ? undefined : Math.max(1, Math.round(deadline - performance.now()));
      let error: AgentWorkspaceError;
      try {
        return await fn(req, this.options(opts, remaining));
      } catch (err) {
        error = toAgentWorkspaceError(err);
      }
      if (error.code !== Code.Unavailable || attempt >= policy.maxAttempts || opts?.signal?.aborted) throw error;
      const backoff = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
      if (deadline !== undefined && performance.now() + backoff >= deadline) throw error;
      await sleep(backoff, opts?.signal);
    }
  }

  /** A server stream with the caller's options; a failure becomes an `AgentWorkspaceError`. Never retried. */
  async *stream<I, O>(fn: (req: I, opts: ConnectCallOptions) => AsyncIterable<O>, req: I, opts: CallOptions | undefined, signal?: AbortSignal): AsyncGenerator<O, void, undefined> {
    try {
      yield* fn(req, this.options(opts, undefined, signal));
    } catch (err) {
      throw toAgentWorkspaceError(err);
    }
  }
}

/** Waits `ms`, or rejects with `CancelledError` as soon as `signal` fires. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(new CancelledError("The call was cancelled while waiting to retry", { code: Code.Canceled, reason: "CANCELLED", cause: signal?.reason }));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
