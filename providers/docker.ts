/**
 * Container providers through dockerode: `docker` (runc) and `gvisor` (the runsc runtime). Each
 * workspace is a long-lived container whose /workspace is a Docker volume of its own, and whose
 * main process is the resident executor (executor/main.ts) started with the server's own Node
 * binary, mounted read-only with the executor folder (and nothing else of the server) and
 * ripgrep. So:
 * - commands start with one frame on an attached stream, not a Docker exec round trip, and get
 *   the same supervision as on the local provider (executor/process-runner.ts);
 * - file tools run inside the sandbox, in the executor, as the sandbox user, through the same jail
 *   as the local provider (executor-fs.ts): the server never touches a workspace's files by a
 *   host path, so a race inside the sandbox reaches at most what that user reaches with bash;
 * - images need nothing but bash.
 *
 * Security defaults: no network, an init that reaps zombies, a process limit, memory and CPU
 * limits, no-new-privileges, and no capabilities but the three the executor needs to hand the
 * volume to the sandbox user and switch to it (it keeps real uid 0, so commands running as the
 * sandbox user can neither signal it nor open its channel; see executor/main.ts). The disk limit
 * is a filesystem of that size (disk-image.ts) holding /workspace, /tmp and /var/tmp, with the
 * root filesystem read-only, where the host can mount one.
 */
import { realpath } from "node:fs/promises";
import path from "node:path";
import type { Duplex } from "node:stream";
import Docker from "dockerode";
import { DomainError, errnoCode, hasReason } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import { EGRESS_PROXY_PORT, EXECUTOR_WRAPPER } from "./executor/protocol.ts";
import { newProxyCredential, proxyUrlFor } from "./proxy-credential.ts";
import { ExecutorFs } from "./executor-fs.ts";
import { execOver, execRequest, executorDeath, SandboxConnection } from "./sandbox-connection.ts";
import { DiskImages, type DiskMount, type DiskOptions } from "./disk-image.ts";
import { PreparedImages } from "./prepared-images.ts";
import { DockerAttachDemux } from "./docker-attach.ts";
import { type EgressSockets, SANDBOX_EGRESS_DIR, SANDBOX_EGRESS_SOCKET } from "./egress-socket.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild } from "./executor-build.ts";
import { type EnginePayload, PAYLOAD_VOLUME } from "./engine-payload.ts";
import type { CreateOptions, ExecEvent, ExecSpec, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** Label keys the server puts on its containers. */
export const LABELS = {
  managed: "agent-workspace.managed",
  workspace: "agent-workspace.workspace-id",
  provider: "agent-workspace.provider",
  /** The server instance (one data directory) that owns the container. */
  instance: "agent-workspace.instance",
  /** How the container is laid out; containers of an older layout cannot be reopened. */
  layout: "agent-workspace.layout",
  /**
   * "1": the executor runs under the wrapper and may exit when idle (protocol.ts EXECUTOR_WRAPPER);
   * the server starts every connection with WAKE. Absent on containers made before.
   */
  sleeps: "agent-workspace.sleeps",
  /** What the workspace reserves of its engine (its limits), counted by placement (docker-engines.ts). */
  cpus: "agent-workspace.cpus",
  memory: "agent-workspace.memory",
} as const;

/** The current container layout: the workspace in a volume, the executor started as root with --sandbox. */
const LAYOUT = "2";

/** The Docker volume holding a workspace's files. */
export const volumeName = (workspaceId: string) => `aw-${workspaceId}`;

const MOUNT = "/opt/agent-workspace";

/** Options of a container provider. */
export interface DockerProviderOptions {
  /** "docker" or "gvisor". */
  name: string;
  /**
   * Identifies the server instance (its data directory) that owns the containers, so servers
   * sharing one engine never take each other's containers for orphans.
   */
  instance: string;
  docker: Docker;
  /** OCI runtime; "runsc" for gVisor, undefined for the engine default. */
  runtime?: string;
  /** Default image. */
  image: string;
  /**
   * The engine's name (docker-engines.ts), kept in every record as `state.engine`; absent for a
   * provider built on one engine alone.
   */
  engine?: string;
  /**
   * For an engine that shares no filesystem with the server (reached over TCP): the executor,
   * Node and ripgrep come from a volume this copies them into (engine-payload.ts) instead of bind
   * mounts, and nothing else of the server's host is mounted (no disk images, no egress sockets).
   */
  payload?: EnginePayload;
  /** Rejects when calls to the engine are to be refused at once (docker-engines.ts: it is down and still does not answer). */
  gate?: () => Promise<void>;
  /** Docker network for workspaces; "none" (default) means no network at all. */
  network: string;
  /** Docker network of workspaces that ask for egress; "" when the operator allows none. */
  egressNetwork: string;
  /** uid:gid commands and file operations run as. */
  user: { uid: number; gid: number };
  /** Receives lines the executors write to stderr, and lifecycle events. */
  log: ProviderLog;
  /** The executor mounted into every sandbox (the built JavaScript copy). */
  executor: ExecutorBuild;
  /**
   * Where workspaces' disk images and their mount points live (disk-image.ts); each provider
   * keeps its own subdirectory. Without it, or where the host cannot mount images, the `disk`
   * limit is recorded but not enforced (logged once).
   */
  diskDir?: string;
  /**
   * Directories of egress sockets (egress-socket.ts), for an engine on this host: a workspace's
   * proxy connections then bypass the attach stream. Without it they go over the stream.
   */
  egressSockets?: EgressSockets;
  /**
   * For an engine on this host: the directory holding Node, the executor and ripgrep
   * (sandbox-dir.ts), bind-mounted read-only at /opt/agent-workspace. A remote engine has `payload`.
   */
  sandboxDir?: string;
  /**
   * The executor exits after this many ms with nothing to do and its wrapper starts it again on
   * the next call (protocol.ts EXECUTOR_WRAPPER); 0 or absent: it never exits.
   */
  executorIdleMs?: number;
}

/**
 * The most processes (threads included) a gVisor workspace gets, whatever its limit says. Under
 * runsc's ptrace platform every guest task costs the sandbox many host threads (measured: a fork
 * bomb held to 256 guest tasks peaks at about 7,600 host threads, one held to 512 takes the
 * sandbox's Go runtime past its 10,000-thread limit and the sandbox dies), so a larger cap would
 * let a fork bomb kill the sandbox instead of failing its forks.
 */
export const GVISOR_MAX_PIDS = 256;

/** Error codes of an engine that cannot be reached (a local socket, or TCP and TLS to a remote one). */
const UNREACHABLE = new Set(["ECONNREFUSED", "ENOENT", "EACCES", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "ECONNABORTED", "EPROTO", "ENOTFOUND", "EAI_AGAIN"]);

/** Translates dockerode failures into domain errors: an unreachable engine is UNAVAILABLE. */
export function engineError(err: unknown, what: string, engine?: string): unknown {
  if (err instanceof DomainError) return err;
  const code = errnoCode(err);
  if (code !== undefined && (UNREACHABLE.has(code) || /^(ERR_SSL_|ERR_TLS_|UNABLE_TO_|SELF_SIGNED_|DEPTH_ZERO_|CERT_)/.test(code))) {
    const which = engine === undefined ? "The Docker engine" : `The Docker engine '${engine}'`;
    return new DomainError("PROVIDER_UNAVAILABLE", `${which} is unavailable (${code}) while trying to ${what}; retry once it is back`, {
      cause: err,
      ...(engine !== undefined ? { metadata: { engine } } : {}),
    });
  }
  const status = (err as { statusCode?: number }).statusCode;
  if (status === 404 && /image/i.test(String((err as Error).message))) {
    return new DomainError("INVALID_ARGUMENT", `Image not found while trying to ${what}; build it with scripts/build-base-image.sh or name an existing image`, {
      cause: err,
      metadata: { field: "image" },
    });
  }
  return err;
}

/** Creates a container provider. */
export function createDockerProvider(options: DockerProviderOptions): Provider & {
  /** Containers this instance created whose workspace the server no longer knows. */
  findOrphans(known: Set<string>): Promise<Array<{ containerId: string; workspaceId: string }>>;
  /** Removes an orphaned container and its workspace volume. */
  removeContainer(containerId: string, workspaceId: string): Promise<void>;
} {
  const { docker } = options;
  const isGvisor = options.runtime === "runsc";
  const localSandboxDir = options.payload ? "" : options.sandboxDir;
  if (localSandboxDir === undefined) throw new Error("a docker provider needs a payload (a remote engine) or a sandbox directory (an engine on this host)");
  /** engineError naming this provider's engine. */
  const unreachable = (err: unknown, what: string) => engineError(err, what, options.engine);
  const disks = options.diskDir === undefined ? undefined : new DiskImages(path.join(options.diskDir, options.name));
  let diskWarned = false;
  /** The image-backed filesystem of a new workspace, or undefined when disk limits cannot be enforced here. */
  const diskSupport = async () =>
    disks
      ? await disks.probe()
      : { ok: false as const, reason: options.payload ? "the engine is remote, and a disk image can only be mounted on the server's host" : "no directory for disk images was configured" };
  /** Where the sandbox finds Node, the executor and ripgrep. */
  const root = options.payload ? `${MOUNT}/current` : MOUNT;
  const makeDisk = async (id: string, bytes: number, diskOptions: DiskOptions): Promise<DiskMount | undefined> => {
    const support = await diskSupport();
    if (!support.ok || !disks) {
      if (!diskWarned) options.log.warn("disk limits are not enforced on this provider", { provider: options.name, reason: support.ok ? "" : support.reason });
      diskWarned = true;
      return undefined;
    }
    return disks.create(id, bytes, options.user, diskOptions);
  };
  /** The engine's entry for this provider's runtime (asked once). */
  let runtimeInfo: Promise<{ path?: string; runtimeArgs?: string[] }> | undefined;
  const runtime = () =>
    (runtimeInfo ??= docker.info().then(
      (info: { Runtimes?: Record<string, { path?: string; runtimeArgs?: string[] }> }) => info.Runtimes?.[options.runtime ?? ""] ?? {},
      (err: unknown) => {
        runtimeInfo = undefined;
        throw unreachable(err, "ask the engine for its runtimes");
      },
    ));
  /** Whether the runtime keeps bind mounts' noexec in the sandbox (gVisor needs the wrapper scripts/runsc-noexec). */
  const runtimeKeepsNoexec = async (): Promise<boolean> => path.basename((await runtime()).path ?? "") === "agent-workspace-runsc";
  /**
   * Whether the sandbox can reach a Unix socket bind-mounted into it: always under runc; under
   * gVisor only with `--host-uds=open` (or `all`) among the runtime's arguments. Where it cannot,
   * a workspace gets no egress directory: its proxy connections take the channel anyway, and under
   * gVisor every mount costs the sandbox's kernel memory for as long as it lives.
   */
  const reachesHostSockets = async (): Promise<boolean> => !isGvisor || (await runtime()).runtimeArgs?.some((a) => /^--?host-uds=(open|all)$/.test(a)) === true;
  const prepared = new PreparedImages(docker, options.executor, () => realpath(process.execPath), options.log);
  /**
   * The CPU limit given to Docker: at most the engine's CPU count, which Docker refuses to exceed
   * (so the default of 2 cores also works on a 1-core host). The count is asked once it is known.
   */
  let engineCpus: Promise<number> | undefined;
  const cpusOf = async (wanted: number): Promise<number> => {
    engineCpus ??= docker.info().then((i: { NCPU?: number }) => i.NCPU ?? 0);
    const n = await engineCpus.catch((err: unknown) => {
      engineCpus = undefined;
      throw unreachable(err, "ask the engine for its CPU count");
    });
    return n > 0 ? Math.min(wanted, n) : wanted;
  };

  const provider = {
    name: options.name,

    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      const baseImage = opts.image === "" ? options.image : opts.image;
      // An allowlist is enforced by the sandbox (executor/programs.ts): a prepared image, and
      // writable filesystems the kernel will not execute from, which only a disk image gives.
      const programs = opts.enforcement?.programs;
      if (programs !== undefined) {
        const support = await diskSupport();
        const why = !support.ok
          ? support.reason
          : opts.limits.diskBytes <= 0
            ? "the workspace has no disk limit, and only a workspace disk can be mounted noexec"
            : isGvisor && !(await runtimeKeepsNoexec())
              ? `the engine's ${options.runtime} runtime is not agent-workspace-runsc (scripts/setup-engines.sh), without which gVisor executes files from noexec mounts`
              : "";
        if (why !== "") {
          throw new DomainError("ENFORCEMENT_UNAVAILABLE", `The ${options.name} provider cannot enforce the agent type's command allowlist here: ${why}`, {
            metadata: { provider: options.name, why },
          });
        }
      }
      let image = baseImage;
      if (programs !== undefined) {
        try {
          image = await prepared.imageFor(baseImage, programs);
        } catch (err) {
          throw unreachable(err, "prepare the workspace image for an allowlist");
        }
      }
      const network = opts.network === undefined ? options.network : opts.network === "none" ? "none" : options.egressNetwork;
      if (network === "") {
        throw new DomainError("INVALID_ARGUMENT", `The ${options.name} provider has no egress network on this server (AGENT_WORKSPACE_EGRESS_NETWORK)`, {
          metadata: { field: "network.mode", provider: options.name },
        });
      }
      if (options.payload) {
        await options.payload.ensure(docker, image).catch((err: unknown) => {
          throw unreachable(err, "copy the executor to the engine");
        });
      }
      // gVisor's process cap (see GVISOR_MAX_PIDS); the record shows the limit in force.
      const limits = isGvisor ? { ...opts.limits, pids: Math.min(opts.limits.pids || GVISOR_MAX_PIDS, GVISOR_MAX_PIDS) } : opts.limits;
      const labels = { [LABELS.managed]: "true", [LABELS.workspace]: opts.id, [LABELS.provider]: options.name, [LABELS.instance]: options.instance };
      const reserves = { [LABELS.cpus]: String(limits.cpus ?? 0), [LABELS.memory]: String(limits.memoryBytes || 0) };
      const volume = volumeName(opts.id);
      const nanoCpus = limits.cpus ? Math.round((await cpusOf(limits.cpus)) * 1e9) : undefined;
      const disk = limits.diskBytes > 0 ? await makeDisk(opts.id, limits.diskBytes, { noexec: programs !== undefined }) : undefined;
      // Made for every workspace: an agent type may allow egress after its workspaces were created.
      const egressDir = !options.egressSockets?.offered || !(await reachesHostSockets()) ? undefined : await options.egressSockets.make().catch((err: unknown) => {
        options.log.warn("egress socket directory not made; proxy connections go over the attach stream", { workspace_id: opts.id, error: String(err) });
        return undefined;
      });
      // What the executor enforces, fixed for the sandbox's life (executor/main.ts `--enforce`).
      const fileRules = opts.enforcement?.fileRules;
      const enforce = programs !== undefined || (fileRules && (fileRules.deny.length > 0 || fileRules.writeProtected.length > 0))
        ? ["--enforce", Buffer.from(JSON.stringify({ ...(programs ? { programs } : {}), ...(fileRules ? { files: fileRules } : {}) })).toString("base64url")]
        : [];
      const hostConfig: Docker.HostConfig = {
        // With a disk image, /workspace (the volume, bound to the image's directory), /tmp and
        // /var/tmp are that one filesystem, and nothing else is writable: the root filesystem is
        // read-only, so the container's writable layer (on the host's disk) cannot grow.
        Mounts: [
          { Type: "volume", Source: volume, Target: WORKSPACE_ROOT },
          ...(disk
            ? [
                { Type: "bind" as const, Source: disk.tmp, Target: "/tmp" },
                { Type: "bind" as const, Source: disk.varTmp, Target: "/var/tmp" },
                // gVisor's own /dev/shm is memory in the sandbox, which maps executable whatever its
                // mount says: under an allowlist it is the disk's, as noexec as the rest.
                ...(programs !== undefined ? [{ Type: "bind" as const, Source: disk.shm, Target: "/dev/shm" }] : []),
              ]
            : []),
          ...(egressDir ? [{ Type: "bind" as const, Source: egressDir.hostDir, Target: SANDBOX_EGRESS_DIR, ReadOnly: true }] : []),
          ...(options.payload ? [{ Type: "volume" as const, Source: PAYLOAD_VOLUME, Target: MOUNT, ReadOnly: true }] : []),
        ],
        ReadonlyRootfs: disk !== undefined,
        // One mount of <data-dir>/sandbox where the engine is on this host (sandbox-dir.ts). Under an
        // allowlist, its three files are bound one by one instead, into the prepared image's
        // /opt/agent-workspace, which only the grep tool's group may enter (prepare-image.ts): a
        // mount over the whole directory would hide that, and the agent could run the server's Node.
        Binds: options.payload
          ? []
          : programs === undefined
            ? [`${localSandboxDir}:${MOUNT}:ro`]
            : [`${localSandboxDir}/node:${MOUNT}/node:ro`, `${localSandboxDir}/executor:${MOUNT}/executor:ro`, `${localSandboxDir}/bin/rg:${MOUNT}/bin/rg:ro`],
        Init: false,
        // No engine-side logging: the executor's stdout is the protocol stream (file contents and
        // command output), which must not land in a log file on the host, and the json-file
        // driver's per-line processing caps it at about 1 MiB/s. Its stderr reaches the server
        // through the attach stream.
        LogConfig: { Type: "none", Config: {} },
        NetworkMode: network,
        CapDrop: ["ALL"],
        // Only what the executor needs: hand a fresh volume to the sandbox user, and switch to it.
        CapAdd: ["CHOWN", "SETUID", "SETGID"],
        SecurityOpt: ["no-new-privileges"],
        Memory: limits.memoryBytes || undefined,
        MemorySwap: limits.memoryBytes ? limits.memoryBytes : undefined,
        NanoCpus: nanoCpus,
        // Under runsc the pids cgroup counts the sandbox's own host threads (many per guest task)
        // and the sandbox dies when it hits the limit, so gVisor gets its process cap from
        // RLIMIT_NPROC inside the sandbox instead, which fails the guest's forks.
        PidsLimit: !isGvisor && limits.pids ? limits.pids : undefined,
        Ulimits: isGvisor && limits.pids ? [{ Name: "nproc", Soft: limits.pids, Hard: limits.pids }] : undefined,
        Runtime: options.runtime,
      };
      let container: Docker.Container;
      try {
        // A volume either way, so the workspace's storage has one name: with a disk image it is
        // bound to the image's workspace directory.
        await docker.createVolume({
          Name: volume,
          Labels: labels,
          ...(disk ? { Driver: "local", DriverOpts: { type: "none", o: "bind", device: disk.workspace } } : {}),
        });
        container = await docker.createContainer({
          name: `aw-${opts.id}`,
          Image: image,
          // PID 1 is the wrapper shell, which runs the executor and, after it exited when idle, waits
          // for WAKE to run it again; being PID 1 it reaps orphans, and the executor's sweep
          // (kill -1) reaches everything but it and itself.
          Cmd: [
            "/bin/sh",
            "-c",
            EXECUTOR_WRAPPER,
            "aw-executor",
            `${root}/node`,
            ...EXECUTOR_NODE_FLAGS,
            `${root}/executor/${options.executor.main}`,
            "--sandbox",
            "--detect-oom",
            "--uid",
            String(options.user.uid),
            "--gid",
            String(options.user.gid),
            "--idle-exit-ms",
            String(options.executorIdleMs ?? 0),
            ...enforce,
          ],
          Entrypoint: [],
          User: "0:0",
          WorkingDir: WORKSPACE_ROOT,
          Env: [`HOME=${WORKSPACE_ROOT}`, "NODE_OPTIONS="],
          OpenStdin: true,
          StdinOnce: false,
          AttachStdin: true,
          AttachStdout: true,
          AttachStderr: true,
          Tty: false,
          NetworkDisabled: network === "none",
          Labels: { ...labels, ...reserves, [LABELS.layout]: LAYOUT, [LABELS.sleeps]: "1" },
          HostConfig: hostConfig,
        });
      } catch (err) {
        await docker.getVolume(volume).remove().catch(() => undefined);
        if (disk) await disks?.remove(opts.id).catch(() => undefined);
        if (egressDir) await options.egressSockets?.remove(egressDir.name).catch(() => undefined);
        throw unreachable(err, "create the workspace container");
      }
      return {
        id: opts.id,
        provider: options.name,
        createdAt: new Date(),
        labels: opts.labels,
        limits,
        // The image asked for; a prepared one is derived from it (see the container for which).
        image: baseImage,
        state: {
          containerId: container.id,
          volume,
          ...(disk ? { disk: disk.dir } : {}),
          ...(programs !== undefined ? { noexec: "1" } : {}),
          ...(egressDir ? { egress: egressDir.name } : {}),
          ...(options.engine !== undefined ? { engine: options.engine } : {}),
        },
      };
    },

    async open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      const container = docker.getContainer(record.state.containerId);
      let connecting: Promise<SandboxConnection> | undefined;
      let conn: SandboxConnection | undefined;
      /** The workspace's egress socket, listened on once per handle (egress-socket.ts). */
      let egressSocket: Promise<{ close(): void } | undefined> | undefined;
      /**
       * What a request on that socket must present (egress-socket.ts): made anew per handle, given to
       * commands in their proxy URL only.
       */
      const egressCredential =
        openOptions?.egress && record.state.egress !== undefined && options.egressSockets?.offered ? newProxyCredential() : undefined;
      const egressSocketPath = async (): Promise<string | undefined> => {
        const name = record.state.egress;
        const hook = openOptions?.egress;
        if (name === undefined || !hook || !options.egressSockets?.offered) return undefined;
        egressSocket ??= options.egressSockets.listen(name, (socket) => hook.accept(socket, egressCredential)).catch((err: unknown) => {
          options.log.warn("egress socket not listened on; proxy connections go over the attach stream", { workspace_id: record.id, error: String(err) });
          return undefined;
        });
        return (await egressSocket) ? SANDBOX_EGRESS_SOCKET : undefined;
      };
      const connect = async (): Promise<SandboxConnection> => {
        // An executor that exited when idle is woken here, so a failed start (a server upgraded
        // meanwhile removed the files it ran from) takes the restart below rather than the call.
        if (conn?.alive && conn.asleep) await conn.wake().catch(() => undefined);
        if (conn?.alive) return conn;
        // Outside the attempt below: a synchronous throw there would run its `finally` before the
        // assignment, leaving a rejected attempt in place for good.
        if (connecting === undefined) await options.gate?.();
        connecting ??= (async () => {
          try {
            const info = await container.inspect();
            if (info.Config.Labels?.[LABELS.layout] !== LAYOUT) {
              options.log.warn("workspace container has an older layout and cannot be reopened", { workspace_id: record.id, host_dir: record.state.dir });
              throw new DomainError("WORKSPACE_NOT_READY", "The workspace was created by an older server version and cannot be reopened; delete it and create a new one");
            }
            if (conn?.violation !== undefined) {
              // The executor broke the protocol: start it afresh rather than trust its stream.
              options.log.warn("restarting workspace container after an executor protocol violation", { workspace_id: record.id, violation: conn.violation });
              await container.restart({ t: 1 });
            }
            // A container restarted below starts from the payload's `current`: make it this version.
            if (options.payload) await options.payload.ensure(docker, info.Image);
            const sleeps = info.Config.Labels?.[LABELS.sleeps] === "1";
            const attach = () => attachExecutor(container, (line) => options.log.warn("sandbox executor", { workspace_id: record.id, line }), sleeps);
            const first = await attach();
            first.onExecutorExit = (status) => options.log.warn("sandbox executor exited outside a call's end; the next call starts it again", { workspace_id: record.id, status });
            if (!info.State.Running) await container.start();
            let c = first;
            const running = await c.ping(30_000).catch(async (err: unknown) => {
              // The executor exited as it started (see SandboxConnection): start the sandbox afresh.
              if (c.violation === undefined) throw err;
              options.log.warn("restarting workspace container: its executor did not start", { workspace_id: record.id, violation: c.violation });
              c.close();
              await container.restart({ t: 1 });
              c = await attach();
              c.onExecutorExit = first.onExecutorExit;
              return c.ping(30_000);
            });
            if (running !== options.executor.version) {
              // An executor started by an older server: restart the container so it runs this code.
              options.log.warn("restarting workspace container to update its executor", { workspace_id: record.id, running, current: options.executor.version });
              c.close();
              await container.stop({ t: 1 });
              c = await attach();
              c.onExecutorExit = first.onExecutorExit;
              await container.start();
              await c.ping(30_000);
            }
            // A server before this one (killed) may have left commands running in the executor: they
            // are nobody's now, and end before anything of this connection runs.
            const orphans = await c.forgetEarlierCalls();
            if (orphans > 0) options.log.warn("commands an earlier server connection left running in the sandbox were ended", { workspace_id: record.id, commands: orphans });
            // Egress by allowlist: the executor's listener on the sandbox's loopback feeds the proxy.
            // Its connections take the workspace's egress socket when the sandbox can reach it.
            if (openOptions?.egress) {
              const offered = await egressSocketPath();
              const via = await c.listen(EGRESS_PROXY_PORT, (stream) => openOptions.egress?.accept(stream), offered);
              options.log.info("workspace egress path", { workspace_id: record.id, via, socket_offered: offered !== undefined });
            }
            conn = c;
            return c;
          } catch (err) {
            if ((err as { statusCode?: number }).statusCode === 404) {
              throw new DomainError("WORKSPACE_NOT_READY", "The workspace container no longer exists; delete the workspace and create a new one", { cause: err });
            }
            throw unreachable(err, "attach to the workspace container");
          } finally {
            connecting = undefined;
          }
        })();
        return connecting;
      };
      await connect();
      const proxyUrl = openOptions?.egress ? proxyUrlFor(EGRESS_PROXY_PORT, egressCredential) : undefined;
      const fs = new ExecutorFs(connect, WORKSPACE_ROOT, openOptions?.fileRules);
      return {
        id: record.id,
        fs,
        ripgrepPath: `${root}/bin/rg`,
        seal: () => fs.seal(),
        dial: async (port, signal) => (await connect()).dial(port, signal),
        exec(spec: ExecSpec): AsyncIterable<ExecEvent> {
          return (async function* () {
            const c = await connect();
            // Under gVisor the memory limit applies to the whole sandbox: the kernel's OOM killer
            // takes the sandbox down mid-command. Report that as the command's OOM kill (the next
            // call restarts the sandbox), not as a broken connection.
            yield* execOver(c, execRequest(spec, WORKSPACE_ROOT, proxyUrl), spec, async (err, started): Promise<ExecEvent> => {
              // The sandbox is up and only its executor died (its wrapper said so, with its status
              // and the cgroup's OOM count).
              if (c.alive) return executorDeath(err, started, options.log, "sandbox", record.id);
              // The attach stream ends as the sandbox dies; the engine may record the exit a moment later.
              let lost: unknown;
              let state = await container.inspect().then(
                (i) => i.State,
                (e: unknown) => {
                  lost = unreachable(e, "ask what became of the workspace container after its connection broke during a command");
                  return undefined;
                },
              );
              if (hasReason(lost, "PROVIDER_UNAVAILABLE")) {
                options.log.error("the Docker engine stopped answering during a command", { workspace_id: record.id, engine: options.engine });
                throw lost;
              }
              for (let i = 0; i < 100 && state?.Running; i++) {
                await new Promise((r) => setTimeout(r, 100));
                state = await container.inspect().then((x) => x.State, () => undefined);
              }
              const finished = state ? Date.parse(state.FinishedAt) : Number.NaN;
              // The engine does not always flag a gVisor sandbox's OOM kill; a sandbox SIGKILLed (137)
              // under a memory limit while nobody stopped it is the same event.
              const oom = Boolean(state?.OOMKilled) || (state?.ExitCode === 137 && record.limits.memoryBytes > 0);
              if (!oom || !(finished >= started - 1000)) {
                // Not an OOM kill: something nobody asked for ended the sandbox or its executor.
                options.log.error("sandbox connection lost during a command", {
                  cause: String((err as Error).cause ?? err),
                  workspace_id: record.id,
                  running: state?.Running,
                  oom_killed: state?.OOMKilled,
                  exit_code: state?.ExitCode,
                  finished_at: state?.FinishedAt,
                });
                throw err;
              }
              return { type: "exited", exit: { exitCode: 137, signal: "SIGKILL", timedOut: false, oomKilled: true, durationMs: Date.now() - started } };
            });
          })();
        },
        async health() {
          try {
            const info = await container.inspect();
            if (info.State.Running) return { status: "ready", message: "" };
            return { status: "stopped", message: `container is ${info.State.Status}${info.State.OOMKilled ? " (OOM killed)" : ""}; the next tool call restarts it` };
          } catch (err) {
            const e = unreachable(err, "inspect the workspace container");
            if (e instanceof DomainError) return { status: "failed", message: e.message };
            if ((err as { statusCode?: number }).statusCode === 404) return { status: "failed", message: "the workspace container no longer exists" };
            throw e;
          }
        },
        async close() {
          conn?.close();
          void egressSocket?.then((s) => s?.close());
        },
      };
    },

    async destroy(record: WorkspaceRecord): Promise<void> {
      const gone = (err: unknown) => (err as { statusCode?: number }).statusCode === 404;
      try {
        await docker.getContainer(record.state.containerId).remove({ force: true, v: true });
      } catch (err) {
        if (!gone(err)) throw unreachable(err, "remove the workspace container");
      }
      try {
        await docker.getVolume(record.state.volume ?? volumeName(record.id)).remove();
      } catch (err) {
        if (!gone(err)) throw unreachable(err, "remove the workspace volume");
      }
      // Last, once nothing uses it: unmounted, its loop device released, its image deleted.
      if (record.state.disk) await disks?.remove(record.id);
      if (record.state.egress) await options.egressSockets?.remove(record.state.egress);
    },

    async pause(record: WorkspaceRecord): Promise<void> {
      const container = docker.getContainer(record.state.containerId);
      const state = await container.inspect().then((i) => i.State, (err: unknown) => {
        throw unreachable(err, "inspect the workspace container");
      });
      // A stopped container has nothing to freeze; it starts (and is frozen by no one) on next use.
      if (!state.Running || state.Paused) return;
      await container.pause().catch((err: unknown) => {
        throw unreachable(err, "pause the workspace container");
      });
    },

    async resume(record: WorkspaceRecord): Promise<void> {
      const container = docker.getContainer(record.state.containerId);
      const state = await container.inspect().then((i) => i.State, (err: unknown) => {
        throw unreachable(err, "inspect the workspace container");
      });
      if (!state.Paused) return;
      await container.unpause().catch((err: unknown) => {
        throw unreachable(err, "resume the workspace container");
      });
    },

    async dispose(): Promise<void> {},

    /**
     * This instance's containers whose workspace the server does not know, and disk images of
     * unknown workspaces that have no container (a create interrupted by a crash); those come with
     * an empty container id.
     */
    async findOrphans(known: Set<string>) {
      const list = await docker.listContainers({
        all: true,
        filters: { label: [`${LABELS.managed}=true`, `${LABELS.provider}=${options.name}`, `${LABELS.instance}=${options.instance}`] },
      });
      const containers = list.map((c) => ({ containerId: c.Id, workspaceId: c.Labels[LABELS.workspace] ?? "" }));
      const withContainer = new Set(containers.map((c) => c.workspaceId));
      const diskOnly = (disks ? await disks.list() : []).filter((id) => !withContainer.has(id)).map((workspaceId) => ({ containerId: "", workspaceId }));
      return [...containers, ...diskOnly].filter((c) => !known.has(c.workspaceId));
    },

    async removeContainer(containerId: string, workspaceId: string) {
      if (containerId !== "") {
        const c = docker.getContainer(containerId);
        const egress = (await c.inspect().catch(() => undefined))?.Mounts?.find((m) => m.Destination === SANDBOX_EGRESS_DIR)?.Source;
        await c.remove({ force: true, v: true });
        if (egress !== undefined) await options.egressSockets?.remove(path.basename(egress)).catch(() => undefined);
      }
      await docker.getVolume(volumeName(workspaceId)).remove().catch(() => undefined);
      await disks?.remove(workspaceId);
    },
  };

  return {
    ...provider,
    /**
     * Mounts the workspace's disk again first when it is not mounted (the host restarted since),
     * so the container starts on its own filesystem or not at all.
     */
    async open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      if (record.state.disk && disks) await disks.ensure(record.id, { noexec: record.state.noexec === "1" });
      return provider.open(record, openOptions);
    },
  };
}

/**
 * Attaches to the container's executor: its stdout comes demultiplexed from Docker's framing
 * (stderr lines go to `onStderr`), its stdin is the raw hijacked socket.
 */
async function attachExecutor(container: Docker.Container, onStderr: (line: string) => void, sleeps: boolean): Promise<SandboxConnection> {
  const stream = (await container.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true })) as unknown as Duplex;
  const stdout = new DockerAttachDemux((chunk) => onStderr(chunk.toString("utf8").trimEnd().slice(0, 2000)));
  stream.pipe(stdout);
  stream.on("error", (err) => stdout.destroy(err));
  stream.on("close", () => stdout.destroy());
  return new SandboxConnection(stdout, stream, { sleeps, reattached: true });
}

/** True when the engine answers a ping within a short time. */
export async function engineAvailable(docker: Docker): Promise<boolean> {
  try {
    await Promise.race([docker.ping(), new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), 3000))]);
    return true;
  } catch {
    return false;
  }
}

/** True when the engine has the named runtime registered. */
export async function runtimeAvailable(docker: Docker, runtime: string): Promise<boolean> {
  try {
    const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
    return Boolean(info.Runtimes && runtime in info.Runtimes);
  } catch {
    return false;
  }
}
