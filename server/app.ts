/**
 * Composition root: builds providers, the workspace manager, services, interceptors, health and
 * reflection into one Connect router, and the Node request handler that serves it for gRPC,
 * gRPC-Web and Connect alike.
 */
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { errnoCode } from "../providers/errors.ts";
import { file_agentworkspace_v1_options } from "../gen/agentworkspace/v1/options_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import Docker from "dockerode";
import { createDockerProvider, engineAvailable, runtimeAvailable } from "../providers/docker.ts";
import { createLocalProvider } from "../providers/local.ts";
import type { Provider } from "../providers/types.ts";
import type { ServerConfig } from "./config.ts";
import { HealthStatus, registerHealth } from "./health.ts";
import { createErrorInterceptor } from "./interceptors/error-interceptor.ts";
import { createLogger, type Logger } from "./logger.ts";
import { registerReflection } from "./reflection.ts";
import { createToolService } from "./services/tool-service.ts";
import { createWorkspaceService } from "./services/workspace-service.ts";
import { WorkspaceManager } from "./workspace-manager.ts";
import { createFileWorkspaceStore } from "./workspace-store.ts";

/** A built application, not yet listening. */
export interface App {
  handler: (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void;
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  workspaces: WorkspaceManager;
  health: HealthStatus;
  logger: Logger;
  /** Stops streams, closes workspace handles and providers. */
  close(): Promise<void>;
}

/** Extra pieces tests and embedders may inject. */
export interface AppOverrides {
  providers?: Provider[];
  logger?: Logger;
}

/** Builds the application from configuration. */
export async function createApp(config: ServerConfig, overrides: AppOverrides = {}): Promise<App> {
  const logger = overrides.logger ?? createLogger({ quiet: config.quiet });
  const store = createFileWorkspaceStore(config.dataDir);
  // Workspaces of container providers already on record keep their providers registered even
  // when the engine is down at start, so their calls fail with UNAVAILABLE and recover later.
  const onRecord = new Set((await store.load()).map((r) => r.provider));
  const built = overrides.providers ? { providers: overrides.providers, containers: [] } : await createProviders(config, logger, onRecord);
  const providers = built.providers;
  const workspaces = new WorkspaceManager({
    providers,
    defaultProvider: config.defaultProvider,
    defaultLimits: config.defaultLimits,
    store,
    logger,
  });
  await workspaces.init();
  await reconcileOrphans(built.containers, new Set(workspaces.listRecords("", {}).map((r) => r.id)), config.docker.cleanupOrphans, logger);
  const health = new HealthStatus([ToolService.typeName, WorkspaceService.typeName]);
  const shutdown = new AbortController();
  const interceptors = [createErrorInterceptor(logger)];
  const routes = (router: ConnectRouter) => {
    router.service(WorkspaceService, createWorkspaceService(workspaces));
    router.service(ToolService, createToolService({ workspaces, limits: config.toolLimits }));
    registerHealth(router, health);
    registerReflection(router, { files: [file_agentworkspace_v1_options] });
  };
  const handler = connectNodeAdapter({
    routes,
    interceptors,
    shutdownSignal: shutdown.signal,
    // Compression is off by default: tool output goes to agents on the same host or network, where
    // gzip of every 64 KiB stream chunk costs far more CPU than the bytes it saves.
    acceptCompression: config.compression === "gzip" ? [compressionGzip, compressionBrotli] : [],
    // Bounded request bodies: WriteFile content is the largest legitimate message.
    readMaxBytes: config.maxMessageBytes,
    writeMaxBytes: config.maxMessageBytes,
  });
  return {
    handler,
    routes,
    interceptors,
    workspaces,
    health,
    logger,
    async close() {
      health.shutdown();
      shutdown.abort();
      await workspaces.close();
    },
  };
}

type ContainerProvider = ReturnType<typeof createDockerProvider>;

/**
 * The local provider always; `docker` and `gvisor` when the engine answers, when container
 * workspaces are on record, or always with AGENT_WORKSPACE_DOCKER=on (calls then fail with
 * UNAVAILABLE until the engine is up).
 */
async function createProviders(
  config: ServerConfig,
  logger: Logger,
  onRecord: Set<string>,
): Promise<{ providers: Provider[]; containers: ContainerProvider[] }> {
  const providers: Provider[] = [
    createLocalProvider({ baseDir: path.join(config.dataDir, "workspaces"), log: (msg, fields) => logger.warn(msg, fields) }),
  ];
  const containers: ContainerProvider[] = [];
  if (config.docker.enabled === "off") return { providers, containers };
  // DOCKER_HOST (read by docker-modem) wins unless DOCKER_SOCKET names a socket explicitly.
  const docker = process.env.DOCKER_HOST && !process.env.DOCKER_SOCKET ? new Docker() : new Docker({ socketPath: config.docker.socketPath });
  const up = await engineAvailable(docker);
  const needed = onRecord.has("docker") || onRecord.has("gvisor");
  if (!up && config.docker.enabled === "auto" && !needed) {
    logger.warn("docker engine not reachable; container providers disabled", { socket: config.docker.socketPath });
    return { providers, containers };
  }
  const common = {
    docker,
    instance: await instanceId(config.dataDir),
    image: config.docker.image,
    network: config.docker.network,
    baseDir: path.join(config.dataDir, "containers"),
    user: config.docker.user,
    log: (msg: string, fields: Record<string, unknown>) => logger.warn(msg, fields),
  };
  if (!up) logger.warn("docker engine not reachable; container workspaces answer UNAVAILABLE until it is back", { socket: config.docker.socketPath });
  containers.push(createDockerProvider({ ...common, name: "docker" }));
  if (!up || (await runtimeAvailable(docker, "runsc"))) {
    containers.push(createDockerProvider({ ...common, name: "gvisor", runtime: "runsc", network: "none" }));
  } else {
    logger.warn("runsc runtime not registered with the docker engine; gvisor provider disabled", {});
  }
  providers.push(...containers);
  return { providers, containers };
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

/** Reports (and with cleanupOrphans removes) containers labelled as ours that no record knows. */
async function reconcileOrphans(containers: ContainerProvider[], known: Set<string>, cleanup: boolean, logger: Logger): Promise<void> {
  for (const p of containers) {
    try {
      for (const orphan of await p.findOrphans(known)) {
        logger.warn(cleanup ? "removing orphaned workspace container" : "orphaned workspace container (set AGENT_WORKSPACE_CLEANUP_ORPHANS=1 to remove)", {
          provider: p.name,
          container_id: orphan.containerId,
          workspace_id: orphan.workspaceId,
        });
        if (cleanup) await p.removeContainer(orphan.containerId);
      }
    } catch (err) {
      logger.warn("could not look for orphaned containers", { provider: p.name, error: String(err) });
    }
  }
}
