/**
 * StreamBash as an async iterator of decoded text chunks, with the exit info at the end.
 */
import type { BashExited, BashStarted, StreamBashResponse } from "../gen/agentworkspace/v1/tool_pb.js";
import type { AgentWorkspaceError } from "./error-base.ts";
import { toAgentWorkspaceError } from "./errors.ts";

/** One chunk of a command's output, as it arrived. */
export interface BashChunk {
  /** Which stream the command wrote it to. */
  stream: "stdout" | "stderr";
  /**
   * The text decoded so far, as UTF-8 with one streaming decoder per stream: a character split
   * across chunks comes out whole with the chunk that completes it (so `text` may be empty while
   * `bytes` is not); bytes that are not UTF-8 become U+FFFD. After the last chunk, an incomplete
   * character left at a stream's end comes as a chunk of its own with empty `bytes`.
   */
  text: string;
  /** The raw bytes of this chunk, exactly as the command wrote them (at most 64 KiB). */
  bytes: Uint8Array;
}

/** What `collect()` returns: the whole output, decoded, and how the command ended. */
export interface BashOutput {
  stdout: string;
  stderr: string;
  exit: BashExited;
}

const EMPTY = new Uint8Array(0);

/**
 * A running `StreamBash`: iterate it (once) with `for await` to get `BashChunk`s as the command
 * writes them; `exit` then resolves to the `BashExited` event (exit code, signal, `timedOut`,
 * `durationMs`, truncation and byte totals). The call starts when iteration starts. Leaving the
 * loop early (`break`, a throw) or `cancel()` cancels the call, which kills the command on the
 * server; `exit` then rejects with `CancelledError`. A failed call throws from the loop and rejects
 * `exit` with the same error, except that an `exited` event received before the failure (a
 * deadline: `timedOut` is true) still resolves `exit`.
 */
export class BashStream implements AsyncIterable<BashChunk> {
  /** How the command ended; settles when the stream does. */
  readonly exit: Promise<BashExited>;
  /** When the command started, once the `started` event arrived. */
  started: BashStarted | undefined;

  readonly #open: (signal: AbortSignal) => AsyncIterable<StreamBashResponse>;
  readonly #abort = new AbortController();
  readonly #userSignal: AbortSignal | undefined;
  #resolveExit!: (e: BashExited) => void;
  #rejectExit!: (e: AgentWorkspaceError) => void;
  #iterated = false;

  constructor(open: (signal: AbortSignal) => AsyncIterable<StreamBashResponse>, signal: AbortSignal | undefined) {
    this.#open = open;
    this.#userSignal = signal;
    this.exit = new Promise<BashExited>((resolve, reject) => {
      this.#resolveExit = resolve;
      this.#rejectExit = reject;
    });
    // Awaited or not, a failed command must not become an unhandled rejection.
    this.exit.catch(() => undefined);
  }

  /** Cancels the call: the server kills the command; the loop and `exit` reject with `CancelledError`. */
  cancel(reason?: unknown): void {
    this.#abort.abort(reason);
  }

  /** Runs the command to its end and returns all of its output, decoded, with its exit. */
  async collect(): Promise<BashOutput> {
    const out = { stdout: "", stderr: "" };
    for await (const chunk of this) out[chunk.stream] += chunk.text;
    return { ...out, exit: await this.exit };
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<BashChunk, void, undefined> {
    if (this.#iterated) throw new TypeError("A BashStream can be iterated only once");
    this.#iterated = true;
    const signal = this.#userSignal ? AbortSignal.any([this.#userSignal, this.#abort.signal]) : this.#abort.signal;
    const decoders = { stdout: new TextDecoder("utf-8"), stderr: new TextDecoder("utf-8") };
    let exited: BashExited | undefined;
    let settled = false;
    try {
      for await (const { event } of this.#open(signal)) {
        switch (event.case) {
          case "stdout":
          case "stderr":
            yield { stream: event.case, text: decoders[event.case].decode(event.value, { stream: true }), bytes: event.value };
            break;
          case "started":
            this.started = event.value;
            break;
          case "exited":
            exited = event.value;
            break;
        }
      }
      for (const stream of ["stdout", "stderr"] as const) {
        const rest = decoders[stream].decode();
        if (rest !== "") yield { stream, text: rest, bytes: EMPTY };
      }
      if (exited === undefined) throw toAgentWorkspaceError(new Error("StreamBash ended without an exited event"));
      settled = true;
      this.#resolveExit(exited);
    } catch (err) {
      const error = toAgentWorkspaceError(err);
      settled = true;
      if (exited !== undefined) this.#resolveExit(exited);
      else this.#rejectExit(error);
      throw error;
    } finally {
      if (!settled) {
        // Left early (break, or the consumer threw): cancel the call so the server kills the command.
        this.#abort.abort();
        this.#rejectExit(toAgentWorkspaceError(Object.assign(new Error("The stream was left before the command ended"), { name: "AbortError" })));
      }
    }
  }
}
