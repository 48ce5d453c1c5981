/**
 * The `e2b` provider: a workspace is an E2B sandbox (a Firecracker microVM in E2B's cloud), driven
 * through the official `e2b` SDK. Our executor runs inside it (executor/main.ts with `--sandbox`, as
 * in a container or a VM), so every tool, the jail and the command policy behave as on the other
 * providers; E2B's own filesystem and command APIs are used only to start the executor and to carry
 * its channel, never for tool semantics.
 *
 * The channel is one long-lived process started with E2B's process API: its stdin takes our frames
 * as bytes (`sendStdin`), and its stdout, which the SDK hands over as decoded text, carries the
 * executor's frames as base64 lines (`--stdout-base64`, executor/text-channel.ts).
 *
 * What the sandbox runs is copied in once per sandbox unless its template has it already: the
 * server's Node binary, the executor and ripgrep, as one gzipped archive written with the SDK's
 * file upload and unpacked as root into /opt/agent-workspace/<version> (READY last). A template
 * built with them (README, "E2B") skips the copy.
 *
 * Mapping:
 * - limits: CPU and memory are the template's (E2B sizes a sandbox by its template); requested
 *   limits beyond it are logged, not enforced. The process cap is enforced by the executor
 *   (RLIMIT_NPROC), the disk by the template's disk size.
 * - network: none (`allowInternetAccess: false`) unless the workspace asks for egress; an
 *   allowlist's egress rides the channel to the server's proxy, as on gVisor.
 * - lifetime: E2B ends a sandbox at its timeout; the provider sets it at creation and extends it
 *   while the workspace is used (at most every quarter of it).
 * - pause and resume: E2B's (the sandbox's memory is snapshotted); the channel does not survive a
 *   pause, so background processes are ended when the next connection starts the executor again.
 * - delete kills the sandbox; orphans are found by the metadata every sandbox carries
 *   (`agent-workspace.instance`, `agent-workspace.workspace`).
 * - command allowlists (a prepared image) cannot be enforced: refused with ENFORCEMENT_UNAVAILABLE.
 *
 * The API key goes to the SDK only: never into a sandbox, a record, a log line or an error.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, realpath, rename, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { PassThrough, Writable } from "node:stream";
import { rgPath } from "@vscode/ripgrep";
import { AuthenticationError, NotFoundError, RateLimitError, Sandbox, TimeoutError } from "e2b";
import { create as tarCreate } from "tar";
import { DomainError, hasReason } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import { EGRESS_PROXY_PORT } from "./executor/protocol.ts";
import { LineDecoder } from "./executor/text-channel.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild } from "./executor-build.ts";
import { ExecutorFs } from "./executor-fs.ts";
import { proxyUrlFor } from "./proxy-credential.ts";
import { execRequest, oomKillOf, SandboxConnection } from "./sandbox-connection.ts";
import type { CreateOptions, ExecEvent, ExecSpec, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** Where the executor, Node and ripgrep live in a sandbox. */
export const E2B_PAYLOAD_DIR = "/opt/agent-workspace";
/** Metadata every sandbox of this provider carries. */
const META_INSTANCE = "agent-workspace.instance";
const META_WORKSPACE = "agent-workspace.workspace";
/** How long the executor has to answer its first PING. */
const ANSWER_MS = 30_000;

/** How the provider reaches E2B and what its sandboxes are made from (AGENT_WORKSPACE_E2B_*). */
export interface E2bSettings {
  /** The API key (E2B_API_KEY); the provider is off without one. */
  apiKey: string;
  /** E2B's domain; "" for the SDK's default. */
  domain: string;
  /** The control plane's and the sandboxes' URLs, for a self-hosted E2B or a local stand-in; "" for the SDK's. */
  apiUrl: string;
  sandboxUrl: string;
  /** The template sandboxes start from. */
  template: string;
  /** A sandbox's lifetime without use, in ms; extended while it is used. */
  timeoutMs: number;
}

export interface E2bOptions extends E2bSettings {
  executor: ExecutorBuild;
  /** This server's instance id: every sandbox it makes carries it. */
  instance: string;
  /** Where the payload archive is staged (the server's data directory). */
  stageDir: string;
  /** uid/gid commands run as (E2B's `user` is 1000). */
  user: { uid: number; gid: number };
  log: ProviderLog;
}

/**
 * What a sandbox runs the executor from: a gzipped tar of `<version>/{node,executor/,bin/rg}`,
 * unpacked into E2B_PAYLOAD_DIR, after which `<version>/READY` (holding the version) is written. Made once per server and version, and kept in the
 * data directory (`e2b-payload/<version>.tgz`), where an operator finds it to build a template.
 */
export class E2bPayload {
  readonly version: string;
  /** Where the payload lives in a sandbox. */
  readonly root: string;
  readonly #executor: ExecutorBuild;
  readonly #dir: string;
  #staged: Promise<Buffer> | undefined;

  constructor(executor: ExecutorBuild, stageDir: string) {
    this.#executor = executor;
    this.#dir = path.join(stageDir, "e2b-payload");
    this.version = `${executor.version}-node${process.versions.node}`.replace(/[^a-zA-Z0-9._-]/g, "_");
    this.root = `${E2B_PAYLOAD_DIR}/${this.version}`;
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
      await symlink(this.#executor.dir, path.join(links, v, "executor"));
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
}

/** The connection options every SDK call takes (the key included; never logged). */
type Conn = { apiKey: string; domain?: string; apiUrl?: string; sandboxUrl?: string };

/** What an SDK failure means to a caller: a DomainError without the key or E2B's internals. */
export function e2bError(err: unknown, what: string, log: ProviderLog, fields: Record<string, unknown> = {}): DomainError {
  if (err instanceof DomainError) return err;
  const message = String((err as Error)?.message ?? err).slice(0, 300);
  log.error(`e2b: ${what} failed`, { ...fields, error: message, kind: (err as Error)?.name });
  if (err instanceof AuthenticationError) return new DomainError("PROVIDER_UNAVAILABLE", `E2B refused the server's API key while trying to ${what}; the operator must check E2B_API_KEY`, { cause: err, metadata: { provider: "e2b" } });
  if (err instanceof RateLimitError) return new DomainError("RESOURCE_EXHAUSTED", `E2B's rate limit was reached while trying to ${what}; retry later`, { cause: err, metadata: { provider: "e2b" } });
  if (err instanceof NotFoundError) return new DomainError("WORKSPACE_NOT_FOUND", `The E2B sandbox is gone (its timeout passed, or it was killed) while trying to ${what}`, { cause: err, metadata: { provider: "e2b" } });
  if (err instanceof TimeoutError) return new DomainError("PROVIDER_UNAVAILABLE", `E2B did not answer in time while trying to ${what}; retry`, { cause: err, metadata: { provider: "e2b" } });
  return new DomainError("PROVIDER_UNAVAILABLE", `E2B could not ${what}; the server's log says why`, { cause: err, metadata: { provider: "e2b" } });
}

export function createE2bProvider(options: E2bOptions): Provider & { findOrphans(known: Set<string>): Promise<string[]>; removeOrphan(workspaceId: string): Promise<void> } {
  const { log, executor } = options;
  const conn: Conn = {
    apiKey: options.apiKey,
    ...(options.domain !== "" ? { domain: options.domain } : {}),
    ...(options.apiUrl !== "" ? { apiUrl: options.apiUrl } : {}),
    ...(options.sandboxUrl !== "" ? { sandboxUrl: options.sandboxUrl } : {}),
  };
  const payload = new E2bPayload(executor, options.stageDir);
  const { version, root } = payload;
  /** Sandboxes whose timeout was extended, and when. */
  const extended = new Map<string, number>();

  /** Runs a short command as root; its stdout, or a thrown error with its stderr. */
  const asRoot = async (sbx: Sandbox, cmd: string): Promise<string> => {
    const r = await sbx.commands.run(cmd, { user: "root", timeoutMs: 120_000 });
    return r.stdout;
  };

  /** Copies the payload in unless the sandbox (its template) has this version already. */
  const ensurePayload = async (sbx: Sandbox, workspaceId: string): Promise<void> => {
    const ready = await asRoot(sbx, `cat ${root}/READY 2>/dev/null || true`);
    if (ready.trim() === version) return;
    const began = Date.now();
    const bytes = await payload.archive();
    const upload = `/tmp/aw-payload-${randomBytes(6).toString("hex")}.tgz`;
    await sbx.files.write(upload, new Blob([new Uint8Array(bytes)]), { user: "root" });
    await asRoot(
      sbx,
      `set -e; mkdir -p ${E2B_PAYLOAD_DIR}; tar -xzf ${upload} -C ${E2B_PAYLOAD_DIR} --no-same-owner; rm -f ${upload}; chmod -R a+rX,go-w ${root}; echo ${version} > ${root}/READY; ln -sfn ${version} ${E2B_PAYLOAD_DIR}/current`,
    );
    log.info("copied the executor into an E2B sandbox", { workspace_id: workspaceId, bytes: bytes.length, duration_ms: Date.now() - began });
  };

  /** Extends the sandbox's life to `timeoutMs` from now, at most every quarter of it. */
  const keepAlive = (sandboxId: string): void => {
    const last = extended.get(sandboxId) ?? 0;
    if (Date.now() - last < options.timeoutMs / 4) return;
    extended.set(sandboxId, Date.now());
    Sandbox.setTimeout(sandboxId, options.timeoutMs, conn).catch((err: unknown) => {
      extended.delete(sandboxId);
      log.warn("e2b: could not extend a sandbox's timeout", { sandbox_id: sandboxId, error: String((err as Error)?.message ?? err).slice(0, 200) });
    });
  };

  /**
   * Starts the executor in the sandbox and connects to it: whatever an earlier connection left
   * (its executor, the sandbox user's processes) is ended first.
   */
  const attach = async (sbx: Sandbox, record: WorkspaceRecord): Promise<SandboxConnection> => {
    const main = `${root}/executor/${executor.main}`;
    // The pattern's brackets keep it from matching this very command line.
    await asRoot(sbx, `pkill -KILL -f -- '--stdout-[b]ase64' || true; pkill -KILL -u ${options.user.uid} || true`);
    const input = new PassThrough();
    const decoder = new LineDecoder();
    let pid = 0;
    const output = new Writable({
      write(chunk: Buffer, _enc, done) {
        sbx.commands.sendStdin(pid, new Uint8Array(chunk)).then(() => done(), done);
      },
      writev(chunks, done) {
        sbx.commands.sendStdin(pid, new Uint8Array(Buffer.concat(chunks.map((c) => c.chunk as Buffer)))).then(() => done(), done);
      },
    });
    output.cork();
    const cmd = [
      "exec",
      `${root}/node`,
      ...EXECUTOR_NODE_FLAGS,
      main,
      "--sandbox",
      "--stdout-base64",
      "--uid",
      String(options.user.uid),
      "--gid",
      String(options.user.gid),
      "--idle-exit-ms",
      "0",
    ].join(" ");
    const handle = await sbx.commands.run(cmd, {
      background: true,
      stdin: true,
      user: "root",
      cwd: "/",
      envs: { HOME: WORKSPACE_ROOT, NODE_OPTIONS: "" },
      timeoutMs: 0,
      onStdout: (text) => {
        try {
          for (const bytes of decoder.push(text)) input.write(bytes);
        } catch (err) {
          input.destroy(err as Error);
        }
      },
      onStderr: (line) => log.warn("sandbox executor", { workspace_id: record.id, line: line.slice(0, 500) }),
    });
    pid = handle.pid;
    output.uncork();
    handle.wait().then(
      () => input.end(),
      (err: unknown) => input.destroy(new Error(`the executor's process ended: ${String((err as Error)?.message ?? err).slice(0, 200)}`)),
    );
    const c = new SandboxConnection(input, output);
    c.onExecutorExit = (status) => log.warn("e2b: the sandbox's executor exited outside a call's end; the next call starts it again", { workspace_id: record.id, status });
    const running = await c.ping(ANSWER_MS);
    if (running !== executor.version) throw new Error(`the sandbox runs executor ${running}, not ${executor.version}`);
    return c;
  };

  return {
    name: "e2b",

    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      if (opts.enforcement?.programs) {
        throw new DomainError("ENFORCEMENT_UNAVAILABLE", "The e2b provider cannot enforce the agent type's command allowlist: it needs an image prepared by the server, and E2B sandboxes start from their template", {
          metadata: { provider: "e2b" },
        });
      }
      if (opts.image !== "" && opts.image !== options.template) log.info("e2b: the workspace's image names an E2B template", { workspace_id: opts.id, template: opts.image });
      const template = opts.image !== "" ? opts.image : options.template;
      if (opts.limits.cpus > 0 || opts.limits.memoryBytes > 0 || opts.limits.diskBytes > 0) {
        log.warn("e2b: CPU, memory and disk are the template's; the workspace's limits are recorded, not enforced", { workspace_id: opts.id, template });
      }
      let sbx: Sandbox;
      try {
        sbx = await Sandbox.create(template, {
          ...conn,
          timeoutMs: options.timeoutMs,
          metadata: { [META_INSTANCE]: options.instance, [META_WORKSPACE]: opts.id },
          allowInternetAccess: opts.network === "egress",
        });
      } catch (err) {
        throw e2bError(err, "make a sandbox", log, { workspace_id: opts.id, template });
      }
      try {
        await ensurePayload(sbx, opts.id);
        await asRoot(sbx, `mkdir -p ${WORKSPACE_ROOT} && chown ${options.user.uid}:${options.user.gid} ${WORKSPACE_ROOT} && chmod 0755 ${WORKSPACE_ROOT}`);
      } catch (err) {
        await Sandbox.kill(sbx.sandboxId, conn).catch(() => undefined);
        throw e2bError(err, "prepare the sandbox", log, { workspace_id: opts.id, sandbox_id: sbx.sandboxId });
      }
      extended.set(sbx.sandboxId, Date.now());
      log.info("e2b sandbox made", { workspace_id: opts.id, sandbox_id: sbx.sandboxId, template });
      return {
        id: opts.id,
        provider: "e2b",
        createdAt: new Date(),
        labels: opts.labels,
        limits: opts.limits,
        image: template,
        state: { sandboxId: sbx.sandboxId, template },
      };
    },

    async open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      const sandboxId = record.state.sandboxId;
      let connecting: Promise<SandboxConnection> | undefined;
      let conn_: SandboxConnection | undefined;
      const connect = async (): Promise<SandboxConnection> => {
        if (conn_?.alive) return conn_;
        connecting ??= (async () => {
          try {
            // Resumes a paused sandbox, and extends its life.
            const sbx = await Sandbox.connect(sandboxId, { ...conn, timeoutMs: options.timeoutMs });
            extended.set(sandboxId, Date.now());
            const c = await attach(sbx, record);
            if (openOptions?.egress) await c.listen(EGRESS_PROXY_PORT, (stream) => openOptions.egress?.accept(stream), undefined);
            conn_ = c;
            return c;
          } catch (err) {
            if (err instanceof DomainError) throw err;
            if (err instanceof NotFoundError) throw e2bError(err, "reach the workspace's sandbox", log, { workspace_id: record.id, sandbox_id: sandboxId });
            log.error("e2b: the sandbox's executor does not answer", { workspace_id: record.id, sandbox_id: sandboxId, error: String((err as Error)?.message ?? err).slice(0, 300) });
            throw new DomainError("WORKSPACE_NOT_READY", "The workspace's E2B sandbox does not answer on its channel; retry, or delete the workspace if it persists", { cause: err });
          } finally {
            connecting = undefined;
          }
        })();
        return connecting;
      };
      await connect();
      const proxyUrl = openOptions?.egress ? proxyUrlFor(EGRESS_PROXY_PORT, undefined) : undefined;
      const fs = new ExecutorFs(async () => {
        keepAlive(sandboxId);
        return connect();
      }, WORKSPACE_ROOT, openOptions?.fileRules);
      return {
        id: record.id,
        fs,
        ripgrepPath: `${root}/bin/rg`,
        seal: () => fs.seal(),
        dial: async (port, signal) => (await connect()).dial(port, signal),
        exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
          return (async function* () {
            keepAlive(sandboxId);
            const c = await connect();
            const started = Date.now();
            let exited = false;
            try {
              for await (const ev of c.exec(execRequest(spec, WORKSPACE_ROOT, proxyUrl), spec.signal, spec.control)) {
                if (ev.type === "exited") exited = true;
                yield ev;
              }
            } catch (err) {
              if (exited || !hasReason(err, "WORKSPACE_NOT_READY")) throw err;
              const oom = oomKillOf(err, started);
              if (oom) {
                yield oom;
                return;
              }
              log.error("e2b: the sandbox's executor died during a command", { workspace_id: record.id, cause: String((err as Error).cause ?? err).slice(0, 300) });
              throw err;
            }
          })();
        },
        async health() {
          try {
            const info = await Sandbox.getInfo(sandboxId, conn);
            if (info.state === "running") return { status: "ready", message: "" };
            return { status: "stopped", message: `The E2B sandbox is ${info.state}` };
          } catch (err) {
            if (err instanceof NotFoundError) {
              return { status: "failed", message: "The workspace's E2B sandbox is gone (its timeout passed, or it was killed outside the server); delete the workspace" };
            }
            return { status: "failed", message: e2bError(err, "ask for the sandbox's state", log, { workspace_id: record.id }).message };
          }
        },
        async close() {
          conn_?.close();
        },
      };
    },

    async destroy(record: WorkspaceRecord): Promise<void> {
      const sandboxId = record.state.sandboxId;
      extended.delete(sandboxId);
      if (!sandboxId) return;
      try {
        await Sandbox.kill(sandboxId, conn);
      } catch (err) {
        if (err instanceof NotFoundError) return;
        throw e2bError(err, "kill the workspace's sandbox", log, { workspace_id: record.id, sandbox_id: sandboxId });
      }
    },

    async pause(record: WorkspaceRecord): Promise<void> {
      try {
        await Sandbox.betaPause(record.state.sandboxId, conn);
      } catch (err) {
        throw e2bError(err, "pause the workspace's sandbox", log, { workspace_id: record.id });
      }
    },

    async resume(record: WorkspaceRecord): Promise<void> {
      try {
        await Sandbox.connect(record.state.sandboxId, { ...conn, timeoutMs: options.timeoutMs });
      } catch (err) {
        throw e2bError(err, "resume the workspace's sandbox", log, { workspace_id: record.id });
      }
    },

    async findOrphans(known: Set<string>): Promise<string[]> {
      const orphans: string[] = [];
      const pages = Sandbox.list({ ...conn, query: { metadata: { [META_INSTANCE]: options.instance } } });
      while (pages.hasNext) {
        for (const s of await pages.nextItems()) {
          const id = s.metadata[META_WORKSPACE];
          if (id !== undefined && !known.has(id)) orphans.push(id);
        }
      }
      return orphans;
    },

    async removeOrphan(workspaceId: string): Promise<void> {
      const pages = Sandbox.list({ ...conn, query: { metadata: { [META_INSTANCE]: options.instance, [META_WORKSPACE]: workspaceId } } });
      while (pages.hasNext) for (const s of await pages.nextItems()) await Sandbox.kill(s.sandboxId, conn);
    },

    async dispose(): Promise<void> {},
  };
}
