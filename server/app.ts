/**
 * Composition root: builds providers, the workspace manager, services, interceptors, health and
 * reflection into one Connect router, and the Node request handler that serves it for gRPC,
 * gRPC-Web and Connect alike.
 */
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import { file_agentworkspace_v1_errors } from "../gen/agentworkspace/v1/errors_pb.js";
import { file_agentworkspace_v1_options } from "../gen/agentworkspace/v1/options_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { createProviders, type ProviderSet } from "../providers/index.ts";
import type { Provider } from "../providers/types.ts";
import { HealthStatus, registerHealth } from "./health.ts";
import { createErrorInterceptor } from "./interceptors/error-interceptor.ts";
import { createLogger, type Logger } from "./logger.ts";
import { createNodeHandler, type NodeHandler } from "./node-adapter.ts";
import { registerReflection } from "./reflection.ts";
import { createToolService } from "./services/tool-service.ts";
import { createWorkspaceService } from "./services/workspace-service.ts";
import { checkToolRegistry } from "./tools/registry.ts";
import type { Settings } from "./settings.ts";
import { WorkspaceManager } from "./workspace-manager.ts";
import { createFileWorkspaceStore } from "./workspace-store.ts";

/** A built application, not yet listening. */
export interface App {
  handler: NodeHandler;
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

/** Builds the application from settings. */
export async function createApp(settings: Settings, overrides: AppOverrides = {}): Promise<App> {
  // Before anything else: a proto method without its tool, or a tool without its method, is a build fault.
  checkToolRegistry(ToolService);
  const logger = overrides.logger ?? createLogger({ level: settings.logLevel });
  const store = createFileWorkspaceStore(settings.providers.dataDir);
  // Workspaces of container providers already on record keep their providers registered even
  // when the engine is down at start, so their calls fail with UNAVAILABLE and recover later.
  const onRecord = new Set((await store.load()).map((r) => r.provider));
  const built: ProviderSet = overrides.providers
    ? { providers: overrides.providers, reconcileOrphans: async () => undefined }
    : await createProviders(settings.providers, logger, onRecord);
  const workspaces = new WorkspaceManager({
    providers: built.providers,
    defaultProvider: settings.defaultProvider,
    defaultLimits: settings.workspaceDefaults,
    store,
    logger,
  });
  await workspaces.init();
  await built.reconcileOrphans(new Set(workspaces.listRecords("", {}).map((r) => r.id)));
  const health = new HealthStatus([ToolService.typeName, WorkspaceService.typeName]);
  const shutdown = new AbortController();
  const interceptors = [createErrorInterceptor(logger)];
  const routes = (router: ConnectRouter) => {
    router.service(WorkspaceService, createWorkspaceService(workspaces));
    router.service(ToolService, createToolService({ workspaces, limits: settings.toolLimits }));
    registerHealth(router, health);
    // Besides the services' own files: the tool option, and the error detail every error carries,
    // so reflection clients (buf curl, grpcurl) decode error details without local protos.
    registerReflection(router, { files: [file_agentworkspace_v1_options, file_agentworkspace_v1_errors] });
  };
  const handler = createNodeHandler({
    routes,
    logger,
    interceptors,
    shutdownSignal: shutdown.signal,
    // Compression is off by default: tool output goes to agents on the same host or network, where
    // gzip of every 64 KiB stream chunk costs far more CPU than the bytes it saves.
    acceptCompression: settings.compression === "gzip" ? [compressionGzip, compressionBrotli] : [],
    // An unknown JSON field is a caller's mistake ({"cmd": …} for "command"): refuse it, naming it.
    jsonOptions: { ignoreUnknownFields: false },
    // Bounded request bodies: WriteFile content is the largest legitimate message.
    readMaxBytes: settings.maxMessageBytes,
    writeMaxBytes: settings.maxMessageBytes,
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
