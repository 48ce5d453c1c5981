/**
 * WorkspaceFs of the local provider: the executor's jailed file operations, run in the server
 * process on the workspace's host directory (no round trip: the host is the sandbox here). The
 * root directory is opened once, when the workspace is opened, and every path is resolved beneath
 * that descriptor.
 */
import { closeSync } from "node:fs";
import { setImmediate as yieldToLoop } from "node:timers/promises";
import { Jail } from "./executor/jail.ts";
import { JailedFs } from "./executor/jailed-fs.ts";
import { type FileRules, guardFor } from "./executor/sensitive-files.ts";
import { domain, toDomainError } from "./faults.ts";
import type { DirEntry, FileStat, FoundFile, ReadOutcome, WalkOptions, WorkspaceFs } from "./types.ts";

/** Files a walk hands over between two turns of the event loop, so a large tree never stalls other calls. */
const WALK_SLICE = 512;

/** The local provider's WorkspaceFs over the host directory `root`. */
export class LocalFs implements WorkspaceFs {
  readonly #fs: JailedFs;

  /** Opens `root`; the descriptor stays open until `close`. Sensitive files: the server's and `rules`. */
  constructor(root: string, rules?: FileRules) {
    this.#fs = new JailedFs(new Jail(root), guardFor(rules));
  }

  close(): void {
    this.#fs.jail.close();
  }

  /**
   * Opens the directory `rel` for a command to start in (the caller closes the descriptor): the
   * one the jail resolved, whatever happens to its path afterwards. Checked against the server's
   * own sensitive-file lists only, as the executor checks a command's directory.
   */
  openDirectory(rel: string): { fd: number; close(): void } {
    this.#dirs ??= new JailedFs(this.#fs.jail, guardFor(undefined));
    const dirs = this.#dirs;
    // The root (the usual working directory) is the jail's own descriptor: nothing to open or close.
    const fd = domain(() => dirs.openDirectoryOrRoot(rel));
    return { fd, close: fd === dirs.rootFd ? () => undefined : () => closeSync(fd) };
  }
  #dirs: JailedFs | undefined;

  async resolve(rel: string): Promise<string> {
    return domain(() => this.#fs.resolve(rel));
  }

  async stat(rel: string): Promise<FileStat> {
    return domain(() => this.#fs.stat(rel));
  }

  async readFile(rel: string, maxBytes: number): Promise<Uint8Array> {
    return domain(() => this.#fs.readFile(rel, maxBytes));
  }

  async writeFile(rel: string, data: Uint8Array): Promise<{ created: boolean }> {
    return domain(() => this.#fs.writeFile(rel, data));
  }

  async read(rel: string, maxBytes: number): Promise<ReadOutcome> {
    return domain(() => this.#fs.read(rel, maxBytes));
  }

  async list(rel: string, options?: { namesOnly?: boolean }): Promise<{ rel: string; entries: DirEntry[] }> {
    return domain(() => this.#fs.list(rel, options?.namesOnly === true));
  }

  async remove(rel: string): Promise<void> {
    domain(() => this.#fs.remove(rel));
  }

  async *walk(base: string, options?: WalkOptions): AsyncGenerator<FoundFile> {
    const files = domain(() => this.#fs.walk(base, options));
    let n = 0;
    try {
      for (;;) {
        const next = domain(() => files.next());
        if (next.done) return;
        yield next.value;
        if (++n % WALK_SLICE === 0) await yieldToLoop();
      }
    } finally {
      try {
        files.return(undefined);
      } catch (err) {
        // Closing the walk only closes descriptors; nothing to report.
        void toDomainError(err);
      }
    }
  }

  async readRanges(rel: string, ranges: Array<[number, number]>): Promise<Uint8Array[]> {
    return domain(() => this.#fs.readRanges(rel, ranges));
  }
}
