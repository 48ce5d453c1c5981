/**
 * What the providers of sandboxes reached only through their platform's API (E2B's process API,
 * Kubernetes' exec) share. Such a platform can run a short command as root, write a file, and
 * start one long-lived process whose stdin and stdout the server holds (`RemoteSandbox`); on
 * that, this module puts the rest once:
 * - the payload (the server's Node binary, the executor and ripgrep: SandboxPayload), copied in as
 *   one gzipped archive unless the sandbox's image has this version already;
 * - the executor, started as root with `--sandbox` after whatever an earlier connection left (its
 *   executor, the sandbox user's processes) was ended, and connected (SandboxConnection);
 * - the workspace handle over that connection (`remoteHandle`), reconnecting when it drops.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, realpath, rename, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Readable, Writable } from "node:stream";
import { rgPath } from "@vscode/ripgrep";
import { create as tarCreate } from "tar";
import { DomainError } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import { EGRESS_PROXY_PORT } from "./executor/protocol.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild } from "./executor-build.ts";
import { ExecutorFs } from "./executor-fs.ts";
import { proxyUrlFor } from "./proxy-credential.ts";
import { execOver, execRequest, executorDeath, SandboxConnection } from "./sandbox-connection.ts";
import type { ExecEvent, ExecSpec, OpenOptions, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** Where the executor, Node and ripgrep live in a remote sandbox. */
export const PAYLOAD_DIR = "/opt/agent-workspace";
/** How long a new executor has to answer its first PING. */
const ANSWER_MS = 30_000;

/** What a platform offers to reach one sandbox. */
export interface RemoteSandbox {
  /** Runs `script` with `sh -c` as root; resolves with its stdout, rejects when it fails. */
  runAsRoot(script: string): Promise<string>;
  /** Writes `bytes` to the file `file` (as root). */
  upload(file: string, bytes: Buffer): Promise<void>;
  /**
   * Starts `argv` as root and hands over its channel: `input` carries the process's stdout as the
   * bytes it wrote (decoded, for a platform that passes it as text), `output` feeds its stdin.
   * `input` ends when the process does.
   */
  start(argv: string[]): Promise<{ input: Readable; output: Writable }>;
}

/**
 * The payload: a gzipped tar of `<version>/{node,executor/,bin/rg}`, unpacked into PAYLOAD_DIR,
 * after which `<version>/READY` (holding the version) is written. Made once per server and
 * version and kept in the data directory (`sandbox-payload/<version>.tgz`), where an operator
 * finds it to build an image or template that has it already.
 */
export class SandboxPayload {
  readonly version: string;
  /** Where the payload lives in a sandbox. */
  readonly root: string;
  readonly executor: ExecutorBuild;
  readonly #dir: string;
  #staged: Promise<Buffer> | undefined;

  constructor(executor: ExecutorBuild, stageDir: string) {
    this.executor = executor;
    this.#dir = path.join(stageDir, "sandbox-payload");
    this.version = `${executor.version}-node${process.versions.node}`.replace(/[^a-zA-Z0-9._-]/g, "_");
    this.root = `${PAYLOAD_DIR}/${this.version}`;
  }

  /** The archive's bytes (made on first use). */
  archive(): Promise<Buffer> {
    this.#staged ??= this.#make().catch((err: unknown) => {
      this.#staged = undefined;
      throw err;
    });
    return this.#staged;
  }

  async #make(): Promise<Buffer> {
    const v = this.version;
    const file = path.join(this.#dir, `${v}.tgz`);
    try {
      return await readFile(file);
    } catch {
      // Made below.
    }
    const links = path.join(this.#dir, `links-${randomBytes(6).toString("hex")}`);
    await mkdir(path.join(links, v, "bin"), { recursive: true });
    try {
      await symlink(await realpath(process.execPath), path.join(links, v, "node"));
      await symlink(this.executor.dir, path.join(links, v, "executor"));
      await symlink(await realpath(rgPath), path.join(links, v, "bin", "rg"));
      const chunks: Buffer[] = [];
      // Links followed: the archive carries the files. No READY: it is written once all is unpacked.
      for await (const chunk of tarCreate({ cwd: links, follow: true, portable: true, gzip: true }, [`${v}/bin`, `${v}/executor`, `${v}/node`]) as AsyncIterable<Buffer>) chunks.push(chunk);
      const bytes = Buffer.concat(chunks);
      const tmp = `${file}.${randomBytes(6).toString("hex")}.tmp`;
      await writeFile(tmp, bytes);
      await rename(tmp, file);
      return bytes;
    } finally {
      await rm(links, { recursive: true, force: true });
    }
  }

  /** Copies the payload into `sandbox` unless it has this version already; whether it copied. */
  async ensure(sandbox: RemoteSandbox): Promise<{ copied: boolean; bytes: number }> {
    const ready = await sandbox.runAsRoot(`cat ${this.root}/READY 2>/dev/null || true`);
    if (ready.trim() === this.version) return { copied: false, bytes: 0 };
    const bytes = await this.archive();
    const upload = `/tmp/aw-payload-${randomBytes(6).toString("hex")}.tgz`;
    await sandbox.upload(upload, bytes);
    await sandbox.runAsRoot(
      `set -e; mkdir -p ${PAYLOAD_DIR}; tar -xzf ${upload} -C ${PAYLOAD_DIR} --no-same-owner; rm -f ${upload}; chmod -R a+rX,go-w ${this.root}; echo ${this.version} > ${this.root}/READY; ln -sfn ${this.version} ${PAYLOAD_DIR}/current`,
    );
    return { copied: true, bytes: bytes.length };
  }

  /** Hands the workspace directory to the sandbox user. */
  async prepareWorkspace(sandbox: RemoteSandbox, user: { uid: number; gid: number }): Promise<void> {
    // chmod first: once the directory is the user's, root without CAP_FOWNER (a pod) may not.
    await sandbox.runAsRoot(`mkdir -p ${WORKSPACE_ROOT} && chmod 0755 ${WORKSPACE_ROOT} && chown ${user.uid}:${user.gid} ${WORKSPACE_ROOT}`);
  }

  /**
   * Starts the executor in `sandbox` and connects to it, after ending what an earlier connection
   * left there (its executor, every process of the sandbox user), so no two executors ever serve
   * one workspace. `extraArgs`: the platform's own (`--stdout-base64` for a text channel).
   */
  async attach(sandbox: RemoteSandbox, user: { uid: number; gid: number }, extraArgs: string[], onExit: (status: string) => void): Promise<SandboxConnection> {
    // The pattern's brackets keep it from matching this very command line.
    await sandbox.runAsRoot(`pkill -KILL -f -- '/executor/[m]ain\\.js --sandbox' || true; pkill -KILL -u ${user.uid} || true`);
    const { input, output } = await sandbox.start([
      `${this.root}/node`,
      ...EXECUTOR_NODE_FLAGS,
      `${this.root}/executor/${this.executor.main}`,
      "--sandbox",
      ...extraArgs,
      "--uid",
      String(user.uid),
      "--gid",
      String(user.gid),
      "--idle-exit-ms",
      "0",
    ]);
    const c = new SandboxConnection(input, output);
    c.onExecutorExit = onExit;
    const running = await c.ping(ANSWER_MS);
    if (running !== this.executor.version) {
      c.close();
      throw new Error(`the sandbox runs executor ${running}, not ${this.executor.version}`);
    }
    return c;
  }
}

/** How `remoteHandle` reaches the sandbox and names it in its messages. */
export interface RemoteHandleOptions {
  /** Connects afresh (a new executor); DomainErrors pass through, others become WORKSPACE_NOT_READY. */
  connect(): Promise<SandboxConnection>;
  /** Called before each call (a platform may extend the sandbox's life). */
  touch?(): void;
  /** The sandbox's state, for GetWorkspace. */
  health(): Promise<{ status: "ready" | "stopped" | "failed"; message: string }>;
  /** "E2B sandbox", "pod": for messages. */
  what: string;
  ripgrepPath: string;
  log: ProviderLog;
}

/** The workspace handle of a remote sandbox: its executor's connection, made again when it drops. */
export async function remoteHandle(record: WorkspaceRecord, openOptions: OpenOptions | undefined, o: RemoteHandleOptions): Promise<WorkspaceHandle> {
  let connecting: Promise<SandboxConnection> | undefined;
  let conn: SandboxConnection | undefined;
  const connect = async (): Promise<SandboxConnection> => {
    o.touch?.();
    if (conn?.alive) return conn;
    connecting ??= (async () => {
      try {
        const c = await o.connect();
        if (openOptions?.egress) await c.listen(EGRESS_PROXY_PORT, (stream) => openOptions.egress?.accept(stream), undefined);
        conn = c;
        return c;
      } catch (err) {
        if (err instanceof DomainError) throw err;
        o.log.error(`the ${o.what}'s executor does not answer`, { workspace_id: record.id, error: String((err as Error)?.message ?? err).slice(0, 300) });
        throw new DomainError("WORKSPACE_NOT_READY", `The workspace's ${o.what} does not answer on its channel; retry, or delete the workspace if it persists`, { cause: err });
      } finally {
        connecting = undefined;
      }
    })();
    return connecting;
  };
  await connect();
  const proxyUrl = openOptions?.egress ? proxyUrlFor(EGRESS_PROXY_PORT, undefined) : undefined;
  const fs = new ExecutorFs(connect, WORKSPACE_ROOT, openOptions?.fileRules);
  return {
    id: record.id,
    fs,
    ripgrepPath: o.ripgrepPath,
    seal: () => fs.seal(),
    dial: async (port, signal) => (await connect()).dial(port, signal),
    exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
      return (async function* () {
        const c = await connect();
        yield* execOver(c, execRequest(spec, WORKSPACE_ROOT, proxyUrl), spec, (err, started) => executorDeath(err, started, o.log, `the ${o.what}'s`, record.id));
      })();
    },
    health: () => o.health(),
    async close() {
      conn?.close();
    },
  };
}
