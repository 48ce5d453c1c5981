/**
 * The caller's side of a running process's input (ExecSpec.control): its stdin, its terminal's
 * size and signals to its tree. The caller creates one and passes it with the exec; the provider
 * binds it to the process once it started (`bind`) and ends it when the process ended or its call
 * failed (`end`). Calls made before the binding wait for it; calls after the end fail with
 * PROCESS_NOT_RUNNING. Writes go one at a time, in order: each waits until the sandbox took the
 * bytes before the next is sent, so a process that does not read its stdin holds its writers, not
 * memory.
 */
import { DomainError } from "../core/errors.ts";

/** What a provider offers for one running process. Each call resolves once the sandbox did it. */
export interface ProcessInput {
  /** Writes bytes to the process's stdin (or terminal); resolves when the sandbox took them. */
  write(data: Uint8Array): Promise<void>;
  /** Closes stdin (a terminal gets end-of-file). */
  closeStdin(): Promise<void>;
  /** Sets the terminal's size (NOT_A_TERMINAL without one). */
  resize(rows: number, cols: number): Promise<void>;
  /** Sends `signal` ("SIGTERM") to the process's tree. */
  signal(signal: string): Promise<void>;
}

const notRunning = () => new DomainError("PROCESS_NOT_RUNNING", "The process has ended");

export class ProcessControl implements ProcessInput {
  #input: ProcessInput | undefined;
  #ended = false;
  readonly #ready = Promise.withResolvers<ProcessInput | undefined>();
  /** The end of the write before (writes go in order, one at a time). */
  #writes: Promise<unknown> = Promise.resolve();

  /** The provider: the process runs, and `input` reaches it. */
  bind(input: ProcessInput): void {
    if (this.#ended || this.#input) return;
    this.#input = input;
    this.#ready.resolve(input);
  }

  /** The provider: the process ended (or never started); nothing reaches it any more. */
  end(): void {
    this.#ended = true;
    this.#input = undefined;
    this.#ready.resolve(undefined);
  }

  /** True once the process ended. */
  get ended(): boolean {
    return this.#ended;
  }

  async #target(): Promise<ProcessInput> {
    const input = this.#ended ? undefined : (this.#input ?? (await this.#ready.promise));
    if (!input || this.#ended) throw notRunning();
    return input;
  }

  write(data: Uint8Array): Promise<void> {
    const run = this.#writes.then(async () => (await this.#target()).write(data));
    this.#writes = run.catch(() => undefined);
    return run;
  }

  closeStdin(): Promise<void> {
    // After the writes before it.
    const run = this.#writes.then(async () => (await this.#target()).closeStdin());
    this.#writes = run.catch(() => undefined);
    return run;
  }

  async resize(rows: number, cols: number): Promise<void> {
    return (await this.#target()).resize(rows, cols);
  }

  async signal(signal: string): Promise<void> {
    return (await this.#target()).signal(signal);
  }
}
