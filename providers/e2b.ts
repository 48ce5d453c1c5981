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
 * server's Node binary, the executor and ripgrep (remote-sandbox.ts SandboxPayload), written with
 * the SDK's file upload and unpacked as root. A template built with them (README, "E2B") skips
 * the copy.
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
import { PassThrough, Writable } from "node:stream";
import { AuthenticationError, NotFoundError, RateLimitError, Sandbox, TimeoutError } from "e2b";
import { DomainError } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import { LineDecoder } from "./executor/text-channel.ts";
import type { ExecutorBuild } from "./executor-build.ts";
import { type RemoteSandbox, remoteHandle, SandboxPayload } from "./remote-sandbox.ts";
import type { CreateOptions, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** Metadata every sandbox of this provider carries. */
const META_INSTANCE = "agent-workspace.instance";
const META_WORKSPACE = "agent-workspace.workspace";

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

/** A sandbox as RemoteSandbox: E2B's process API for commands and the executor's channel, its file upload. */
function remoteOf(sbx: Sandbox, log: ProviderLog, workspaceId: string): RemoteSandbox {
  return {
    async runAsRoot(script) {
      return (await sbx.commands.run(script, { user: "root", timeoutMs: 120_000 })).stdout;
    },
    async upload(file, bytes) {
      await sbx.files.write(file, new Blob([new Uint8Array(bytes)]), { user: "root" });
    },
    async start(argv) {
      const input = new PassThrough();
      const decoder = new LineDecoder();
      let pid = 0;
      const send = (bytes: Buffer, done: (err?: Error | null) => void) => {
        sbx.commands.sendStdin(pid, new Uint8Array(bytes)).then(() => done(), done);
      };
      const output = new Writable({
        write: (chunk: Buffer, _enc, done) => send(chunk, done),
        writev: (chunks, done) => send(Buffer.concat(chunks.map((c) => c.chunk as Buffer)), done),
      });
      // Nothing goes before the process is there to take it.
      output.cork();
      const handle = await sbx.commands.run(`exec ${argv.join(" ")}`, {
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
        onStderr: (line) => log.warn("sandbox executor", { workspace_id: workspaceId, line: line.slice(0, 500) }),
      });
      pid = handle.pid;
      output.uncork();
      handle.wait().then(
        () => input.end(),
        (err: unknown) => input.destroy(new Error(`the executor's process ended: ${String((err as Error)?.message ?? err).slice(0, 200)}`)),
      );
      return { input, output };
    },
  };
}

export function createE2bProvider(options: E2bOptions): Provider & { findOrphans(known: Set<string>): Promise<string[]>; removeOrphan(workspaceId: string): Promise<void> } {
  const { log } = options;
  const conn: Conn = {
    apiKey: options.apiKey,
    ...(options.domain !== "" ? { domain: options.domain } : {}),
    ...(options.apiUrl !== "" ? { apiUrl: options.apiUrl } : {}),
    ...(options.sandboxUrl !== "" ? { sandboxUrl: options.sandboxUrl } : {}),
  };
  const payload = new SandboxPayload(options.executor, options.stageDir);
  /** Sandboxes whose timeout was extended, and when. */
  const extended = new Map<string, number>();

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

  return {
    name: "e2b",

    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      if (opts.enforcement?.programs) {
        throw new DomainError("ENFORCEMENT_UNAVAILABLE", "The e2b provider cannot enforce the agent type's command allowlist: it needs an image prepared by the server, and E2B sandboxes start from their template", {
          metadata: { provider: "e2b" },
        });
      }
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
        const remote = remoteOf(sbx, log, opts.id);
        const began = Date.now();
        const copy = await payload.ensure(remote);
        if (copy.copied) log.info("copied the executor into an E2B sandbox", { workspace_id: opts.id, bytes: copy.bytes, duration_ms: Date.now() - began });
        await payload.prepareWorkspace(remote, options.user);
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

    open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      const sandboxId = record.state.sandboxId;
      return remoteHandle(record, openOptions, {
        what: "E2B sandbox",
        ripgrepPath: `${payload.root}/bin/rg`,
        log,
        touch: () => keepAlive(sandboxId),
        async connect() {
          let sbx: Sandbox;
          try {
            // Resumes a paused sandbox, and extends its life.
            sbx = await Sandbox.connect(sandboxId, { ...conn, timeoutMs: options.timeoutMs });
          } catch (err) {
            throw e2bError(err, "reach the workspace's sandbox", log, { workspace_id: record.id, sandbox_id: sandboxId });
          }
          extended.set(sandboxId, Date.now());
          return payload.attach(remoteOf(sbx, log, record.id), options.user, ["--stdout-base64"], (status) =>
            log.warn("e2b: the sandbox's executor exited outside a call's end; the next call starts it again", { workspace_id: record.id, status }),
          );
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
      });
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
