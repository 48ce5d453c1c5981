/**
 * WorkspaceFs of a workspace whose files live inside its sandbox: every primitive is one file
 * operation of the sandbox's executor, which runs it as the sandbox user through the same jail
 * as the local provider. The server never touches such a workspace's files by a host path, so
 * a provider without a host directory at all (a remote engine, a pod, a microVM) needs nothing
 * but a connection to its executor.
 */
import type { FileRules } from "./executor/sensitive-files.ts";
import type { SandboxConnection } from "./sandbox-connection.ts";
import type { DirEntry, FileStat, FoundFile, ReadOutcome, WalkOptions, WorkspaceFs } from "./types.ts";

/** The WorkspaceFs of the workspace at `root` (as the executor sees it), over `connect()`. */
export class ExecutorFs implements WorkspaceFs {
  readonly #connect: () => Promise<SandboxConnection>;
  readonly #root: string;
  /** Added sensitive-file rules, sent with each operation (the executor compiles them once). */
  readonly #rules: { rules: FileRules } | undefined;

  /** Seals the workspace's sensitive files (executor/seal.ts); see WorkspaceHandle.seal. */
  async seal(): Promise<{ sealed: number }> {
    return (await this.#connect()).op<{ sealed: number }>({ root: this.#root, ...this.#rules, op: "seal", rel: "" });
  }

  constructor(connect: () => Promise<SandboxConnection>, root: string, rules?: FileRules) {
    this.#connect = connect;
    this.#root = root;
    this.#rules = rules && (rules.deny.length > 0 || rules.writeProtected.length > 0) ? { rules } : undefined;
  }

  async resolve(rel: string): Promise<string> {
    const r = await (await this.#connect()).op<{ rel: string }>({ root: this.#root, ...this.#rules, op: "resolve", rel });
    return String(r.rel);
  }

  async stat(rel: string): Promise<FileStat> {
    return (await this.#connect()).op<FileStat>({ root: this.#root, ...this.#rules, op: "stat", rel });
  }

  async readFile(rel: string, maxBytes: number): Promise<Uint8Array> {
    const { bytes } = await (await this.#connect()).opCollect<{ size: number }>({ root: this.#root, ...this.#rules, op: "readFile", rel, maxBytes });
    return bytes;
  }

  async read(rel: string, maxBytes: number): Promise<ReadOutcome> {
    const { bytes, entries, result } = await (await this.#connect()).opCollect<{ kind: "file" | "directory"; rel: string; size: number }>({
      root: this.#root,
      ...this.#rules,
      op: "read",
      rel,
      maxBytes,
    });
    const head = { rel: String(result.rel), size: Number(result.size) };
    return result.kind === "directory" ? { kind: "directory", ...head, entries: entries as Array<{ name: string; directory: boolean }> } : { kind: "file", ...head, bytes };
  }

  async writeFile(rel: string, data: Uint8Array): Promise<{ created: boolean }> {
    const r = await (await this.#connect()).op<{ created: boolean }>({ root: this.#root, ...this.#rules, op: "write", rel }, data);
    return { created: r.created === true };
  }

  async list(rel: string, options?: { namesOnly?: boolean }): Promise<{ rel: string; entries: DirEntry[] }> {
    const { entries, result } = await (await this.#connect()).opCollect<{ rel: string }>({ root: this.#root, ...this.#rules, op: "list", rel, ...(options?.namesOnly ? { namesOnly: true } : {}) });
    return { rel: String(result.rel), entries: entries as DirEntry[] };
  }

  async remove(rel: string): Promise<void> {
    await (await this.#connect()).op({ root: this.#root, ...this.#rules, op: "remove", rel });
  }

  async *walk(base: string, options: WalkOptions = {}): AsyncGenerator<FoundFile> {
    const extra = { ...(options.all ? { all: true } : {}), ...(options.prune?.length ? { prune: [...options.prune] } : {}) };
    for await (const batch of (await this.#connect()).opEntries<FoundFile>({ root: this.#root, ...this.#rules, op: "walk", rel: base, ...extra })) yield* batch;
  }

  async readRanges(rel: string, ranges: Array<[number, number]>): Promise<Uint8Array[]> {
    const { bytes, result } = await (await this.#connect()).opCollect<{ lengths: number[] }>({ root: this.#root, ...this.#rules, op: "readRanges", rel, ranges });
    const out: Uint8Array[] = [];
    let at = 0;
    for (const len of result.lengths) {
      out.push(bytes.subarray(at, at + len));
      at += len;
    }
    return out;
  }
}
