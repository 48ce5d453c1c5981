/**
 * Composition root: builds providers, the workspace manager, services, interceptors, health and
 * reflection into one Connect router, and the Node request handler that serves it for gRPC,
 * gRPC-Web and Connect alike.
 */
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import path from "node:path";
import { file_agentworkspace_v1_options } from "../gen/agentworkspace/v1/options_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
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
  const providers = overrides.providers ?? (await createProviders(config, logger));
  const workspaces = new WorkspaceManager({
    providers,
    defaultProvider: config.defaultProvider,
    defaultLimits: config.defaultLimits,
    store: createFileWorkspaceStore(config.dataDir),
    logger,
  });
  await workspaces.init();
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

async function createProviders(config: ServerConfig, logger: Logger): Promise<Provider[]> {
  const providers: Provider[] = [createLocalProvider({ baseDir: path.join(config.dataDir, "workspaces") })];
  void logger;
  return providers;
}
