/**
 * The memory provider: workspaces that are a tree of text files in the server's memory
 * (memory-fs.ts), for tests and evaluations. The file tools work on them as on any other
 * provider; nothing runs processes, so `exec` refuses with PROCESSES_UNSUPPORTED (FAILED_PRECONDITION,
 * naming the provider) and Bash, StreamBash and the git tools answer that. Grep searches in the
 * server instead of with ripgrep (server/tools/grep-memory.ts).
 *
 * Nothing is written to disk: a workspace dies with its deletion (its session's end), and all of
 * them with the server process. The provider is `ephemeral`: the server drops the records of its
 * workspaces at start rather than pretend they still hold anything.
 */
import { DomainError } from "../core/errors.ts";
import { MemoryFs, MemoryTree } from "./memory-fs.ts";
import type { CreateOptions, ExecEvent, ExecSpec, OpenOptions, Provider, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** The most a memory workspace holds (its disk limit when lower): it is the server's own memory. */
export const MEMORY_MAX_CAPACITY_BYTES = 64 * 1024 * 1024;

/** The refusal of everything that needs a process. */
export function processesUnsupported(provider: string): DomainError {
  return new DomainError(
    "PROCESSES_UNSUPPORTED",
    `The '${provider}' provider runs no processes: Bash, StreamBash and the git tools need a workspace of a provider that does (local, docker, gvisor)`,
    { metadata: { provider } },
  );
}

/** The memory provider, and a look into its workspaces around the tools (for tests). */
export interface MemoryProvider extends Provider {
  /** A file's bytes in workspace `id`, read straight from its tree; undefined when there is none. */
  peek(id: string, rel: string): Uint8Array | undefined;
}

export function createMemoryProvider(): MemoryProvider {
  const trees = new Map<string, MemoryTree>();
  return {
    peek: (id, rel) => trees.get(id)?.peek(rel),
    name: "memory",
    ephemeral: true,
    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      trees.set(opts.id, new MemoryTree(opts.limits.diskBytes > 0 ? Math.min(opts.limits.diskBytes, MEMORY_MAX_CAPACITY_BYTES) : MEMORY_MAX_CAPACITY_BYTES));
      return { id: opts.id, provider: "memory", createdAt: new Date(), labels: opts.labels, limits: opts.limits, image: "", state: {} };
    },
    async open(record: WorkspaceRecord, options?: OpenOptions): Promise<WorkspaceHandle> {
      const tree = trees.get(record.id);
      if (!tree) {
        throw new DomainError("WORKSPACE_NOT_FOUND", `Memory workspace '${record.id}' is gone (memory workspaces end with the server process)`, {
          metadata: { workspace_id: record.id },
        });
      }
      return {
        id: record.id,
        fs: new MemoryFs(tree, options?.fileRules),
        ripgrepPath: undefined,
        processes: false,
        exec(_spec: ExecSpec): AsyncIterable<ExecEvent> {
          return (async function* (): AsyncGenerator<ExecEvent> {
            throw processesUnsupported("memory");
          })();
        },
        async health() {
          return trees.get(record.id) === tree ? { status: "ready", message: "" } : { status: "stopped", message: "the memory workspace was deleted" };
        },
        async close() {},
      };
    },
    async destroy(record: WorkspaceRecord): Promise<void> {
      trees.delete(record.id);
    },
    async dispose(): Promise<void> {
      trees.clear();
    },
  };
}
