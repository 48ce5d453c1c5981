/**
 * Builds the providers from validated settings: the local and memory providers always, and `docker` and
 * `gvisor` when the engine answers, when container workspaces are already on record, or always
 * with mode "on" (calls then fail with UNAVAILABLE until the engine is up). Also owns the start-up
 * chores of container providers: the server instance id and the report of orphaned containers.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import Docker from "dockerode";
import { errnoCode } from "../core/errors.ts";
import { EgressSockets } from "./egress-socket.ts";
import { createDockerProvider } from "./docker.ts";
import { createPlacedProvider, Engine, Engines } from "./docker-engines.ts";
import { EnginePayload } from "./engine-payload.ts";
import { buildExecutor, type ExecutorBuild } from "./executor-build.ts";
import { stageSandboxDir } from "./sandbox-dir.ts";
import { createE2bProvider, type E2bSettings } from "./e2b.ts";
import { createKubernetesProvider, type KubernetesSettings } from "./kubernetes.ts";
import { createMicrovmProvider, microvmSupport } from "./microvm.ts";
import { createLocalProvider } from "./local.ts";
import { createMemoryProvider } from "./memory.ts";
import type { Provider, ProviderLog } from "./types.ts";

/** How to reach the Docker engine: a local socket, or a TCP endpoint (TLS when a cert dir is given). */
export type DockerConnection = { socketPath: string } | { host: string; port: number; tlsCertDir: string | undefined };

/** One Docker engine the container providers use (AGENT_WORKSPACE_DOCKER_ENGINES). */
export interface EngineSettings {
  /** Stable: workspace records name their engine by it. */
  name: string;
  connection: DockerConnection;
  /** What agent types' `engine_labels` match. */
  labels: Record<string, string>;
}

/** What the providers are configured with (parsed and validated by server/settings.ts). */
export interface ProviderSettings {
  /** Holds the instance id, local workspaces and container workspace storage. */
  dataDir: string;
  /** How local commands start: a resident launcher per workspace (executor/launcher.ts), or a spawn each. */
  localLauncher: "launcher" | "spawn";
  docker: {
    /** "auto" enables container providers when the engine answers at start. */
    mode: "auto" | "on" | "off";
    /**
     * The engines, at least one. One reached by a Unix socket is on this host (bind mounts of the
     * server's files, disk images, egress sockets); one reached over TCP shares nothing with it.
     */
    engines: EngineSettings[];
    /** Default image of container workspaces. */
    image: string;
    /** Docker network of `docker` workspaces; gVisor always has none. */
    network: string;
    /** Docker network of `docker` workspaces whose agent type asks for egress; "" for none. */
    egressNetwork: string;
    /** Remove containers labelled as this instance's that no workspace record knows. */
    cleanupOrphans: boolean;
    /**
     * "socket": container workspaces' proxy connections take a Unix socket of their own bind-mounted
     * from the data directory (egress-socket.ts) when the engine is on this host; "channel": the
     * executor's channel (the attach stream) carries them.
     */
    egressPath: "socket" | "channel";
    /**
     * A container's executor exits after this long with nothing to do, and starts again on the next
     * call (0: it never exits); fixed when the container is made.
     */
    executorIdleMs: number;
    /** uid/gid commands run as in containers. */
    user: { uid: number; gid: number };
  };
  microvm: {
    /** "auto" enables the provider when QEMU and the image (scripts/build-vm-image.sh) are there. */
    mode: "auto" | "on" | "off";
    /** The directory scripts/build-vm-image.sh wrote. */
    images: string;
    accel: "auto" | "kvm" | "tcg";
    defaultMemoryBytes: number;
    defaultDiskBytes: number;
    bootTimeoutMs: number;
    /** Start VMs by restoring a template (microvm-templates.ts). */
    snapshots: boolean;
    /** Where executor disks and templates live when not `<data-dir>/microvm` (servers may share it). */
    cache: string | undefined;
  };
  /** E2B sandboxes (on when E2B_API_KEY is set). */
  e2b: E2bSettings | undefined;
  /** Pods (on when AGENT_WORKSPACE_KUBERNETES_CLUSTERS is set). */
  kubernetes: KubernetesSettings | undefined;
}

/** The built providers and what the server does with them at start. */
export interface ProviderSet {
  providers: Provider[];
  /** Reports (and with cleanupOrphans removes) containers of this instance that no record knows. */
  reconcileOrphans(known: Set<string>): Promise<void>;
}

type ContainerProvider = ReturnType<typeof createPlacedProvider>;
type VmProvider = ReturnType<typeof createMicrovmProvider>;
/** A provider whose orphans are found by workspace id (VMs, E2B sandboxes). */
type OrphanFinder = Pick<VmProvider, "name" | "findOrphans" | "removeOrphan">;

/**
 * The microvm provider when it is on, or on "auto" when QEMU and the VM image are there.
 */
async function microvmProvider(settings: ProviderSettings, log: ProviderLog, executor: ExecutorBuild, onRecord: Set<string>): Promise<VmProvider | undefined> {
  const cfg = settings.microvm;
  if (cfg.mode === "off") return undefined;
  const support = await microvmSupport(cfg.images);
  if (!support.ok) {
    // Asked for explicitly: a configuration error. Only on record: the server still starts, and those
    // workspaces' calls fail as UNKNOWN_PROVIDER, naming the providers there are.
    if (cfg.mode === "on") throw new Error(`the microvm provider cannot start: ${support.reason}`);
    if (onRecord.has("microvm")) log.error("microvm workspaces are on record but the provider cannot start; their calls fail until it can", { reason: support.reason });
    else log.info("microvm provider disabled", { reason: support.reason });
    return undefined;
  }
  const vm = createMicrovmProvider({
    ...cfg,
    qemu: support.qemu,
    dir: path.join(settings.dataDir, "microvm"),
    executor,
    log,
    user: settings.docker.user,
  });
  log.info("microvm provider enabled", { images: cfg.images });
  return vm;
}

async function reconcileVmOrphans(vms: OrphanFinder[], known: Set<string>, cleanup: boolean, log: ProviderLog): Promise<void> {
  for (const p of vms) {
    try {
      for (const id of await p.findOrphans(known)) {
        const what = p.name === "microvm" ? "VM" : "sandbox";
        log.warn(cleanup ? `removing orphaned workspace ${what}` : `orphaned workspace ${what} (set AGENT_WORKSPACE_CLEANUP_ORPHANS=1 to remove)`, { provider: p.name, workspace_id: id });
        if (cleanup) await p.removeOrphan(id);
      }
    } catch (err) {
      log.warn("could not look for orphaned VMs", { provider: p.name, error: String(err) });
    }
  }
}

/** A dockerode client for the configured connection. */
async function dockerClient(connection: DockerConnection): Promise<Docker> {
  if ("socketPath" in connection) return new Docker({ socketPath: connection.socketPath });
  if (connection.tlsCertDir === undefined) return new Docker({ host: connection.host, port: connection.port, protocol: "http" });
  const file = (name: string) => readFile(path.join(connection.tlsCertDir as string, name));
  return new Docker({ host: connection.host, port: connection.port, protocol: "https", ca: await file("ca.pem"), cert: await file("cert.pem"), key: await file("key.pem") });
}

/** Where the engine is, for log lines (never credentials). */
function describe(connection: DockerConnection): string {
  return "socketPath" in connection ? connection.socketPath : `${connection.host}:${connection.port}`;
}

/**
 * Creates the providers. `onRecord` names the providers of workspaces already on record: their
 * providers stay registered even when the engine is down at start, so those workspaces' calls
 * fail with UNAVAILABLE and recover once the engine is back.
 */
export async function createProviders(settings: ProviderSettings, log: ProviderLog, onRecord: Set<string>): Promise<ProviderSet> {
  const executor = await buildExecutor(settings.dataDir);
  const providers: Provider[] = [createLocalProvider({ baseDir: path.join(settings.dataDir, "workspaces"), log, executor, launcher: settings.localLauncher }), createMemoryProvider()];
  const containers: ContainerProvider[] = [];
  const vms: OrphanFinder[] = [];
  const set: ProviderSet = {
    providers,
    reconcileOrphans: async (known) => {
      await reconcileOrphans(containers, known, settings.docker.cleanupOrphans, log);
      await reconcileVmOrphans(vms, known, settings.docker.cleanupOrphans, log);
    },
  };
  const vm: VmProvider | undefined = await microvmProvider(settings, log, executor, onRecord);
  if (vm) {
    vms.push(vm);
    providers.push(vm);
  }
  if (settings.e2b) {
    const e2b = createE2bProvider({ ...settings.e2b, executor, instance: await instanceId(settings.dataDir), stageDir: settings.dataDir, user: settings.docker.user, log });
    // Orphans are sandboxes, reported and removed like VMs.
    vms.push(e2b);
    providers.push(e2b);
    log.info("e2b provider enabled", { template: settings.e2b.template, ...(settings.e2b.apiUrl !== "" ? { api_url: settings.e2b.apiUrl } : {}) });
  } else if (onRecord.has("e2b")) {
    log.error("e2b workspaces are on record but E2B_API_KEY is not set; their calls fail until it is");
  }
  if (settings.kubernetes) {
    const k8s = createKubernetesProvider({ ...settings.kubernetes, executor, instance: await instanceId(settings.dataDir), stageDir: settings.dataDir, user: settings.docker.user, log });
    vms.push(k8s);
    providers.push(k8s);
    log.info("kubernetes provider enabled", { clusters: settings.kubernetes.clusters.map((c) => `${c.name}=${c.namespace}`).join(", ") });
  } else if (onRecord.has("kubernetes")) {
    log.error("kubernetes workspaces are on record but AGENT_WORKSPACE_KUBERNETES_CLUSTERS is not set; their calls fail until it is");
  }
  const { docker: cfg } = settings;
  if (cfg.mode === "off") return set;
  const engines = new Engines(
    await Promise.all(cfg.engines.map(async (e) => new Engine(e.name, e.labels, await dockerClient(e.connection), describe(e.connection), log, !("socketPath" in e.connection)))),
    log,
  );
  await engines.start();
  const needed = onRecord.has("docker") || onRecord.has("gvisor");
  const where = { engines: engines.list.map((e) => `${e.name}=${e.where}`).join(", ") };
  const anyUp = engines.list.some((e) => e.up);
  if (!anyUp && cfg.mode === "auto" && !needed) {
    engines.stop();
    log.warn("no docker engine reachable; container providers disabled", where);
    return set;
  }
  if (!anyUp) log.warn("no docker engine reachable; container workspaces answer UNAVAILABLE until one is back", where);
  const instance = await instanceId(settings.dataDir);
  const payload = new EnginePayload(executor, path.join(settings.dataDir, "engine-payload"), log);
  // Made only when an engine on this host needs it.
  let sandboxDir: Promise<string> | undefined;
  for (const engine of engines.list) {
    const local = "socketPath" in (cfg.engines.find((e) => e.name === engine.name) as EngineSettings).connection;
    const common = {
      docker: engine.docker,
      engine: engine.name,
      instance,
      image: cfg.image,
      network: cfg.network,
      egressNetwork: cfg.egressNetwork,
      user: cfg.user,
      log,
      executor,
      executorIdleMs: cfg.executorIdleMs,
      gate: () => engine.ensureUp(),
      // Bind mounts of the server's directories need the engine on this host, as the executor's do;
      // a remote engine gets the executor from a volume (engine-payload.ts) and nothing else.
      ...(local
        ? {
            diskDir: path.join(settings.dataDir, "disks"),
            egressSockets: new EgressSockets(path.join(settings.dataDir, "egress"), cfg.egressPath === "socket"),
            sandboxDir: await (sandboxDir ??= stageSandboxDir(settings.dataDir, executor)),
          }
        : { payload }),
    };
    engine.providers.set("docker", createDockerProvider({ ...common, name: "docker" }));
    // Down at start (its runtimes unknown) or with runsc: gVisor workspaces may be placed on it.
    if (!engine.up || engine.hasRuntime("runsc")) {
      engine.providers.set("gvisor", createDockerProvider({ ...common, name: "gvisor", runtime: "runsc", network: "none", egressNetwork: "" }));
    } else {
      log.warn("runsc runtime not registered with a docker engine; no gvisor workspaces are placed on it", { engine: engine.name });
    }
  }
  containers.push(createPlacedProvider("docker", undefined, engines));
  if (engines.list.some((e) => e.providers.has("gvisor"))) containers.push(createPlacedProvider("gvisor", "runsc", engines));
  else log.warn("no docker engine has the runsc runtime; gvisor provider disabled", where);
  providers.push(...containers);
  return set;
}

/**
 * The id of this server instance: random, kept in the data directory, so a restarted server
 * recognises its own containers and two servers on one engine never claim each other's.
 */
async function instanceId(dataDir: string): Promise<string> {
  const file = path.join(dataDir, "instance-id");
  try {
    const id = (await readFile(file, "utf8")).trim();
    if (/^[0-9a-f]{16}$/.test(id)) return id;
  } catch (err) {
    if (errnoCode(err) !== "ENOENT") throw err;
  }
  const id = randomBytes(8).toString("hex");
  await mkdir(dataDir, { recursive: true });
  await writeFile(file, `${id}\n`, { flag: "wx" }).catch(async (err) => {
    if (errnoCode(err) !== "EEXIST") throw err;
  });
  return (await readFile(file, "utf8")).trim();
}

async function reconcileOrphans(containers: ContainerProvider[], known: Set<string>, cleanup: boolean, log: ProviderLog): Promise<void> {
  for (const p of containers) {
    try {
      for (const orphan of await p.findOrphans(known)) {
        log.warn(cleanup ? "removing orphaned workspace container" : "orphaned workspace container (set AGENT_WORKSPACE_CLEANUP_ORPHANS=1 to remove)", {
          provider: p.name,
          container_id: orphan.containerId,
          workspace_id: orphan.workspaceId,
          engine: orphan.engine,
        });
        if (cleanup) await p.removeContainer(orphan.containerId, orphan.workspaceId, orphan.engine);
      }
    } catch (err) {
      log.warn("could not look for orphaned containers", { provider: p.name, error: String(err) });
    }
  }
}
