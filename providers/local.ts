/**
 * The local provider: each workspace is a directory under the server's data directory and
 * commands run as host processes in it. It needs nothing but this host, which makes it the
 * embedded default for development; it isolates paths (the jail) but not processes, so use a
 * container provider for untrusted agents.
 *
 * On this provider commands run with the real directory as their working directory and $HOME;
 * tool paths written as /workspace/... are mapped by the jail, but a command that names
 * "/workspace" literally only finds it on container providers.
 */
import { mkdir, realpath, rm, stat } from "node:fs/promises";
import path from "node:path";
import { rgPath } from "@vscode/ripgrep";
import { HostDirectoryFs } from "./host-fs.ts";
import { runProcess } from "./process-runner.ts";
import { sandboxEnv } from "./sandbox-env.ts";
import type { CreateOptions, ExecEvent, ExecSpec, Provider, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** Options of the local provider. */
export interface LocalProviderOptions {
  /** Directory under which workspace directories are created. */
  baseDir: string;
  /** ripgrep binary; defaults to the one shipped by @vscode/ripgrep. Tests point it elsewhere. */
  ripgrepPath?: string;
}

/** Creates the local provider. */
export function createLocalProvider(options: LocalProviderOptions): Provider {
  const baseDir = path.resolve(options.baseDir);
  const rg = options.ripgrepPath ?? rgPath;
  return {
    name: "local",
    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      const dir = path.join(baseDir, opts.id);
      await mkdir(dir, { recursive: true, mode: 0o755 });
      return {
        id: opts.id,
        provider: "local",
        createdAt: new Date(),
        labels: opts.labels,
        limits: opts.limits,
        image: "",
        state: { dir },
      };
    },
    async open(record: WorkspaceRecord): Promise<WorkspaceHandle> {
      const dir = record.state.dir ?? path.join(baseDir, record.id);
      const root = await realpath(dir);
      return openLocalWorkspace(record.id, root, rg);
    },
    async destroy(record: WorkspaceRecord): Promise<void> {
      const dir = record.state.dir ?? path.join(baseDir, record.id);
      // Only ever delete inside our own base directory, whatever the record says.
      if (path.dirname(path.resolve(dir)) !== baseDir) return;
      await rm(dir, { recursive: true, force: true });
    },
    async dispose(): Promise<void> {},
  };
}

function openLocalWorkspace(id: string, root: string, rg: string): WorkspaceHandle {
  return {
    id,
    fs: new HostDirectoryFs(root),
    ripgrepPath: rg,
    exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
      return runProcess({
        argv: spec.argv,
        cwd: spec.cwd === "" ? root : path.join(root, spec.cwd),
        env: sandboxEnv(root, spec.env),
        timeoutMs: spec.timeoutMs,
        killGraceMs: spec.killGraceMs ?? 5000,
        signal: spec.signal,
      });
    },
    async health() {
      try {
        const st = await stat(root);
        return st.isDirectory() ? { status: "ready", message: "" } : { status: "failed", message: "workspace directory is not a directory" };
      } catch {
        return { status: "failed", message: "workspace directory is missing" };
      }
    },
    async close(): Promise<void> {},
  };
}
