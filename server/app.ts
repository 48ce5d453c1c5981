/**
 * Composition root: builds providers, the workspace manager, services, interceptors, health and
 * reflection into one Connect router, and the Node request handler that serves it for gRPC,
 * gRPC-Web and Connect alike.
 */
import { loadShellParser } from "./security/shell-parser.ts";
import { mkdir, readdir, rm } from "node:fs/promises";
import type { IncomingMessage } from "node:http";
import path from "node:path";
import type { Duplex } from "node:stream";
import { createCredentialProvider } from "./git/credentials.ts";
import { canonicalRoots } from "./mounts/host-mounts.ts";
import { Pusher } from "./git/push.ts";
import type { CommandPolicyOf, GitContext } from "./tools/context.ts";
import { type ConnectRouter, createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { SpanExporter } from "@opentelemetry/sdk-trace-base";
import { AuditService } from "../gen/agentworkspace/v1/audit_pb.js";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { file_agentworkspace_v1_errors } from "../gen/agentworkspace/v1/errors_pb.js";
import { file_agentworkspace_v1_options } from "../gen/agentworkspace/v1/options_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { ProcessService } from "../gen/agentworkspace/v1/process_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { createProviders, type ProviderSet } from "../providers/index.ts";
import type { Provider } from "../providers/types.ts";
import { AgentTypes } from "./agent-types/agent-types.ts";
import { readAgentTypesFile } from "./agent-types/file.ts";
import { createKeyRing } from "./auth/api-keys.ts";
import { DomainError } from "../core/errors.ts";
import { HealthStatus, registerHealth } from "./health.ts";
import { authenticate, createAuthenticationInterceptor } from "./interceptors/authentication-interceptor.ts";
import { createErrorInterceptor, describeCause } from "./interceptors/error-interceptor.ts";
import { checkCaller, createPermissionInterceptor } from "./interceptors/permission-interceptor.ts";
import { createLogger, type Logger } from "./logger.ts";
import { createNodeHandler, type NodeHandler, type StreamHandler } from "./node-adapter.ts";
import { type Allowed, checkPolicy, POLICY } from "./policy.ts";
import { registerReflection } from "./reflection.ts";
import { CONFIG_REST_ROUTES } from "./services/config-rest.ts";
import { AuditTrail } from "./audit/audit-trail.ts";
import { FileChanges, MAX_LISTED_CHANGES } from "./audit/file-changes.ts";
import { Redactor } from "./audit/redact.ts";
import { createAuditService } from "./services/audit-service.ts";
import { createConfigService } from "./services/config-service.ts";
import { createToolService, toolContextOf } from "./services/tool-service.ts";
import { createProcessService } from "./services/process-service.ts";
import { ProcessTable } from "./processes/process-table.ts";
import type { ToolAccess } from "./interceptors/permission-interceptor.ts";
import { createWorkspaceService } from "./services/workspace-service.ts";
import { SettingsError, type Settings } from "./settings.ts";
import { openPostgresStore } from "./store/postgres-store.ts";
import { openSqliteStore } from "./store/sqlite-store.ts";
import { StoreError } from "./store/store.ts";
import { relayEvents } from "./audit/event-relay.ts";
import { Replica, replicaId } from "./replicas.ts";
import type { Store } from "./store/store.ts";
import { createToolAccess } from "./tool-access.ts";
import { checkToolRegistry, TOOL_NAMES } from "./tools/registry.ts";
import { WorkspaceManager } from "./workspace-manager.ts";
import { enabledToolsOf } from "./mcp/enabled-tools.ts";
import { createMcpHandler, isMcpPath } from "./mcp/http.ts";
import { PortExposures } from "./ports/exposures.ts";
import { createPortProxy, isPortsPath, PORT_PROXY_PROCEDURE } from "./ports/port-proxy.ts";
import { createUiHandler, isUiPath } from "./ui/ui-handler.ts";
import { Egress } from "./egress/egress.ts";
import { Provisioner } from "./sessions/provision.ts";
import { SessionManager } from "./sessions/session-manager.ts";
import { WarmPools } from "./sessions/warm-pool.ts";

/** A built application, not yet listening. */
export interface App {
  /** Every request; `handler.stream` takes unary calls over HTTP/2 at their stream (give it to `listen`). */
  handler: NodeHandler & { stream: StreamHandler };
  /** HTTP/1.1 upgrades: WebSockets through the port proxy (ports/port-proxy.ts). */
  upgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void;
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  workspaces: WorkspaceManager;
  agentTypes: AgentTypes;
  sessions: SessionManager;
  store: Store;
  audit: AuditTrail;
  health: HealthStatus;
  logger: Logger;
  /** The egress proxy: told where the server listens, that endpoint is never a destination. */
  egress: Pick<Egress, "listening">;
  /** This server among others sharing its database (PostgreSQL): told the URL it listens on. */
  replica?: Pick<Replica, "id" | "advertise">;
  /** Reports NOT_SERVING and ends every stream; the server can then drain its connections. */
  stopStreams(): void;
  /** Stops streams, closes workspace handles, providers and the database. */
  close(): Promise<void>;
}

/** Extra pieces tests and embedders may inject. */
export interface AppOverrides {
  providers?: Provider[];
  logger?: Logger;
  /** A policy table instead of server/policy.ts (tests prove a gap in it stops the start). */
  policy?: Readonly<Record<string, Allowed>>;
  /** More span exporters for the audit trail (tests: the SDK's in-memory exporter). */
  spanExporters?: SpanExporter[];
  /**
   * The command policy of a workspace instead of the parser's (tests switch the parser off to show
   * what the sandbox refuses on its own). Not reachable from settings or the network.
   */
  commandPolicy?: CommandPolicyOf;
}

/** The database URL's password, for the redactor (none for SQLite or a URL without one). */
function databasePassword(url: string): string[] {
  try {
    const password = url === "" ? "" : decodeURIComponent(new URL(url).password);
    return password === "" ? [] : [password];
  } catch {
    return [];
  }
}

/** Builds the application from settings. */
export async function createApp(settings: Settings, overrides: AppOverrides = {}): Promise<App> {
  // Before anything else: a proto method without its tool, or a tool without its method, is a build fault.
  checkToolRegistry(ToolService);
  // The command policy's parser (WebAssembly) loads once, now, so no call waits for it.
  await loadShellParser();
  const logger = overrides.logger ?? createLogger({ level: settings.logLevel });
  const store =
    settings.databaseUrl !== ""
      ? await openPostgresStore(settings.databaseUrl, logger).catch((err: unknown) => {
          throw err instanceof StoreError ? new StoreError(`AGENT_WORKSPACE_DATABASE_URL: ${err.message}`, { cause: err.cause }) : err;
        })
      : openSqliteStore(settings.providers.dataDir, logger);
  // The audit trail exists before anything it reports on. Its redactor knows the credentials the
  // server holds, so they never reach a record even where no pattern would recognise them.
  const known: { workspaces?: WorkspaceManager; sessions?: SessionManager } = {};
  const audit = new AuditTrail({
    settings: settings.audit,
    store: store.audit,
    logger,
    redactor: new Redactor([...settings.apiKeys, ...[...settings.git.credentials.values()].map((c) => c.token), ...databasePassword(settings.databaseUrl), ...(settings.providers.e2b ? [settings.providers.e2b.apiKey] : [])]),
    describe(workspaceId) {
      const record = known.workspaces?.find(workspaceId);
      if (!record) return undefined;
      const session = known.sessions?.ofWorkspace(workspaceId);
      return { provider: record.provider, agentType: session?.agentType ?? record.agentType?.id ?? "", sessionId: session?.id ?? record.session?.id ?? "" };
    },
    workspaceOfSession(sessionId) {
      try {
        return known.sessions?.get(sessionId).workspaceId ?? "";
      } catch {
        return "";
      }
    },
    exporters: overrides.spanExporters,
  });
  // Servers sharing a database see each other's live events (WatchEvents on any of them).
  const relay = store.changes ? relayEvents(audit.hub, store.changes) : undefined;
  // Workspaces of container providers already on record keep their providers registered even
  // when the engine is down at start, so their calls fail with UNAVAILABLE and recover later.
  const onRecord = new Set((await store.workspaces.load()).map((r) => r.provider));
  const built: ProviderSet = overrides.providers
    ? { providers: overrides.providers, reconcileOrphans: async () => undefined }
    : await createProviders(settings.providers, logger, onRecord);
  let mountRoots: string[];
  try {
    mountRoots = await canonicalRoots(settings.mounts.allowedRoots);
  } catch (err) {
    throw new SettingsError(`AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: ${(err as NodeJS.ErrnoException).path ?? ""} cannot be used (${(err as NodeJS.ErrnoException).code ?? "error"})`);
  }
  const agentTypes = new AgentTypes(store.agentTypes, {
    tools: TOOL_NAMES,
    providers: built.providers.map((p) => p.name),
    egressAllowed: settings.providers.docker.egressNetwork !== "" && built.providers.some((p) => p.name === "docker"),
    maxTimeoutMs: settings.toolLimits.maxTimeoutMs,
    mountRoots,
  }, store.changes, logger);
  await agentTypes.init();
  if (settings.agentTypesFile !== "") {
    try {
      const report = await agentTypes.apply(await readAgentTypesFile(settings.agentTypesFile));
      logger.info("agent types applied", { file: settings.agentTypesFile, ...report });
    } catch (err) {
      await store.close();
      if (err instanceof DomainError) throw new SettingsError(`--agent-types ${settings.agentTypesFile}: ${err.message}${err.metadata.field ? ` (field ${err.metadata.field})` : ""}`);
      throw err;
    }
  }
  // Commands' file changes, found by a scan after each watched command.
  const fileChanges = new FileChanges(audit.hub, { ...settings.audit.changeScan, maxChanges: MAX_LISTED_CHANGES }, (err) =>
    logger.error("a command's change scan failed; the workspace's next scan reports tree_changed", { error: describeCause(err) }),
  );
  const egress = new Egress(settings.egress, logger, (refusal) => audit.egressRefused(refusal), store.egress);
  // Background processes: records of an earlier server's are loaded (its running ones were lost).
  // This server among others sharing the database: each workspace is served by one of them.
  const replica = store.replicas ? new Replica(await replicaId(settings.providers.dataDir), store.replicas, logger) : undefined;
  await replica?.start();
  const processes = new ProcessTable({
    store: store.processes,
    settings: settings.processes,
    logger,
    servedElsewhere: async (workspaceId) => {
      const server = known.workspaces?.find(workspaceId)?.server;
      return replica !== undefined && server !== undefined && server !== replica.id && (await replica.status(server)).live;
    },
  });
  // Ports exposed through the proxy: a deleted workspace's end with their connections.
  const ports = new PortExposures();
  const workspaces = new WorkspaceManager({
    beforeDelete: (id) => {
      ports.endWorkspace(id);
      return processes.endWorkspace(id, "workspace deleted");
    },
    stopProcesses: (id, stop) => processes.signalWorkspace(id, stop ? "SIGSTOP" : "SIGCONT"),
    ...(replica && store.replicas && store.changes ? { shared: { replica, store: store.replicas, changes: store.changes } } : {}),
    onTakeover: (id) => processes.takenOver(id),
    egress,
    mounts: { allowedRoots: mountRoots, maxBytes: settings.mounts.maxBytes },
    providers: built.providers,
    defaultProvider: settings.defaultProvider,
    defaultLimits: settings.workspaceDefaults,
    store: store.workspaces,
    agentTypes,
    logger,
    onStatus: (change) => {
      if (change.deleted) fileChanges.forget(change.workspaceId);
      audit.hub.publish({ time: new Date(), workspaceId: change.workspaceId, sessionId: change.sessionId, payload: { case: "workspaceStatus", value: change } });
    },
  });
  known.workspaces = workspaces;
  await workspaces.init();
  await processes.init();
  await built.reconcileOrphans(new Set(workspaces.listRecords("", {}).map((r) => r.id)));
  const cloneTmp = path.join(settings.providers.dataDir, "tmp");
  await rm(cloneTmp, { recursive: true, force: true });
  await mkdir(cloneTmp, { recursive: true, mode: 0o700 });
  // Git credentials for clones and pushes: static tokens per host, or a GitHub App's.
  const credentials = createCredentialProvider({
    staticCredentials: settings.git.credentials,
    ...(settings.git.githubApp ? { githubApp: settings.git.githubApp } : {}),
    fallbackIdentity: { name: settings.git.botName, email: settings.git.botEmail },
  });
  const provisioner = new Provisioner({
    workspaces,
    clone: { credentials, tmpDir: cloneTmp, maxBytes: settings.git.cloneMaxBytes, timeoutMs: settings.git.cloneTimeoutMs },
    toolLimits: settings.toolLimits,
    logger,
    audit,
    ...(overrides.commandPolicy ? { commandPolicy: overrides.commandPolicy } : {}),
  });
  const pools = new WarmPools({
    workspaces,
    agentTypes,
    provisioner,
    logger,
    concurrency: settings.sessions.poolConcurrency,
    serverDefaults: JSON.stringify([settings.defaultProvider, settings.providers.docker.image, settings.workspaceDefaults]),
    defaultProvider: settings.defaultProvider,
  });
  const sessions = new SessionManager({
    ...(replica ? { server: replica } : {}),
    ...(replica && store.changes && store.replicas ? { shared: { changes: store.changes, store: store.replicas } } : {}),
    store: store.sessions,
    workspaces,
    agentTypes,
    provisioner,
    pools,
    logger,
    defaultProvider: settings.defaultProvider,
    idleTimeoutMs: settings.sessions.idleTimeoutMs,
    tickMs: settings.sessions.tickMs,
    onStatus: (change) => {
      // A session's background processes end with it (a shared workspace outlives the session).
      if (change.status === "ended") void processes.endSession(change.sessionId, "session ended");
      audit.hub.publish({ time: new Date(), workspaceId: change.workspaceId, sessionId: change.sessionId, payload: { case: "sessionStatus", value: change } });
    },
  });
  known.sessions = sessions;
  await sessions.init();

  // The git tools: commits as the bot, pushes from the server's mirrors with issued tokens.
  const mirrorDir = path.join(settings.providers.dataDir, "git-mirrors");
  await mkdir(mirrorDir, { recursive: true, mode: 0o700 });
  // A push's scratch directory outlives only a server that died during the push.
  for (const name of await readdir(mirrorDir)) if (name.startsWith("push-")) await rm(path.join(mirrorDir, name), { recursive: true, force: true });
  const pusher = new Pusher({ mirrorDir, maxBytes: settings.git.cloneMaxBytes, timeoutMs: settings.git.pushTimeoutMs, credentials });
  // Mirrors of repositories no push used for the operator's idle time go, at start and then at a
  // tenth of that time (between 1 s and 1 h); the next push to such a repository fetches afresh.
  const pruneMirrors = () =>
    void pusher.prune(settings.git.mirrorMaxIdleMs).then(
      (gone) => gone.length > 0 && logger.info("unused git mirrors removed", { mirrors: gone.length, max_idle_ms: settings.git.mirrorMaxIdleMs }),
      (err: unknown) => logger.warn("removing unused git mirrors failed", { error: err instanceof Error ? err.message : String(err) }),
    );
  let mirrorPruner: NodeJS.Timeout | undefined;
  if (settings.git.mirrorMaxIdleMs > 0) {
    pruneMirrors();
    mirrorPruner = setInterval(pruneMirrors, Math.min(Math.max(Math.floor(settings.git.mirrorMaxIdleMs / 10), 1000), 3_600_000));
    mirrorPruner.unref();
  }
  const gitContext = (workspaceId: string): GitContext => {
    const binding = workspaces.find(workspaceId)?.agentType;
    return {
      identity: () => credentials.botIdentity(),
      fileRules: binding?.sensitiveFiles,
      push: (ctx, req) => {
        const session = sessions.ofWorkspace(workspaceId);
        const patterns = binding?.protectedBranches ?? [];
        const base = session?.task.baseBranch ?? "";
        return pusher.push(ctx, {
          repositoryUrl: session?.checkout?.repositoryUrl ?? "",
          protectedBranches: patterns.length > 0 ? patterns : base !== "" ? [base] : [],
          protectDefaultBranch: patterns.length === 0,
          fileRules: binding?.sensitiveFiles,
        }, req.branch);
      },
    };
  };
  const health = new HealthStatus([AuditService.typeName, ConfigService.typeName, ProcessService.typeName, ToolService.typeName, WorkspaceService.typeName]);
  // Idle workspaces' background processes end on the sessions' tick.
  const idleOf = (workspaceId: string) => workspaces.find(workspaceId)?.agentType?.processIdleTimeoutMs ?? settings.processes.idleTimeoutMs;
  // Idle workspaces of agent types with a time to live are paused, then deleted (a session's: ended).
  const lifetimes = new Set<string>();
  const liveOut = () => {
    for (const r of workspaces.listRecords("", {})) {
      const ttl = r.agentType;
      if (!ttl || (ttl.pauseAfterIdleMs === undefined && ttl.deleteAfterIdleMs === undefined) || (r.pool && !r.session) || lifetimes.has(r.id)) continue;
      const idle = processes.idleFor(r.id);
      const remove = ttl.deleteAfterIdleMs !== undefined && idle >= ttl.deleteAfterIdleMs;
      const pause = !remove && !r.paused && ttl.pauseAfterIdleMs !== undefined && idle >= ttl.pauseAfterIdleMs;
      if (!remove && !pause) continue;
      lifetimes.add(r.id);
      const fields = { workspace_id: r.id, idle_ms: idle };
      const step = remove
        ? (r.session ? sessions.end(r.session.id, "its workspace was idle").then(() => undefined) : workspaces.delete(r.id)).then(() => logger.info("idle workspace removed", fields))
        : workspaces.pause(r.id).then(() => logger.info("idle workspace paused", fields));
      void step
        .catch((err: unknown) => logger.warn(`an idle workspace could not be ${remove ? "removed" : "paused"}`, { ...fields, error: err instanceof Error ? err.message : String(err) }))
        .finally(() => lifetimes.delete(r.id));
    }
  };
  const processIdle = setInterval(() => {
    processes.endIdle(idleOf);
    liveOut();
  }, settings.sessions.tickMs);
  processIdle.unref();
  const shutdown = new AbortController();
  // Outermost first: the audit span sees every call and every refusal; errors turn each refusal
  // into its typed error; authentication establishes the caller that the permission check then
  // judges; the audit trail's inner half marks the call admitted, just before the handler runs.
  const keys = createKeyRing(settings.apiKeys);
  const policy = overrides.policy ?? POLICY;
  const toolAccess = touching(createToolAccess(workspaces, agentTypes, sessions), processes);
  const interceptors = [
    audit.outer,
    createErrorInterceptor(logger),
    createAuthenticationInterceptor(keys, sessions),
    createPermissionInterceptor({ policy, toolAccess }),
    audit.inner,
  ];
  const routes = (router: ConnectRouter) => {
    router.service(AuditService, createAuditService(audit, store.audit, sessions));
    router.service(ConfigService, createConfigService(agentTypes));
    router.service(WorkspaceService, createWorkspaceService(workspaces, sessions));
    const toolDeps = { workspaces, limits: settings.toolLimits, git: gitContext, fileChanges, processes, ports, ...(overrides.commandPolicy ? { commandPolicy: overrides.commandPolicy } : {}) };
    router.service(ToolService, createToolService(toolDeps));
    router.service(ProcessService, createProcessService(toolContextOf(toolDeps)));
    registerHealth(router, health);
    // Besides the services' own files: the tool option, and the error detail every error carries,
    // so reflection clients (buf curl, grpcurl) decode error details without local protos.
    registerReflection(router, { files: [file_agentworkspace_v1_options, file_agentworkspace_v1_errors] });
  };
  // The port proxy: whoever may expose a port may reach it, admitted to the workspace as a `bash` call.
  const portProxy = createPortProxy({
    authenticate: (header) => authenticate(header, keys, sessions),
    checkCaller: (principal) => checkCaller(policy, PORT_PROXY_PROCEDURE, principal),
    admit: (principal, workspaceId, signal) => toolAccess.admit(principal, workspaceId, "bash", signal),
    exists: (id) => workspaces.find(id) !== undefined,
    handleFor: (id) => workspaces.handleForCall(id),
    exposures: ports,
    logger,
  });
  let handler: NodeHandler & { stream: StreamHandler };
  try {
    handler = buildHandler();
  } catch (err) {
    await workspaces.close();
    await store.close();
    throw err;
  }
  sessions.begin();
  function buildHandler(): NodeHandler & { stream: StreamHandler } {
    const rpc = createNodeHandler({
    routes,
    rest: CONFIG_REST_ROUTES,
    restCallerCheck: (header, procedure) => checkCaller(policy, procedure, authenticate(header, keys, sessions)),
    // A served RPC without a policy entry (or an entry for none) stops the start.
    checkRoutes: (procedures) => checkPolicy(policy, procedures),
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
    // The MCP bridge (streamable HTTP) on the same port: its tool calls go through these same
    // routes and interceptors in-process, as the caller (server/mcp/http.ts).
    const mcp = createMcpHandler({
      transport: createRouterTransport(routes, {
        router: { interceptors, shutdownSignal: shutdown.signal, readMaxBytes: settings.maxMessageBytes, writeMaxBytes: settings.maxMessageBytes },
      }),
      authenticate: (header) => authenticate(header, keys, sessions),
      enabledTools: enabledToolsOf(workspaces, agentTypes, sessions),
      workspaceExists: (id) => workspaces.find(id) !== undefined,
      maxBodyBytes: settings.maxMessageBytes,
      logger,
    });
    // The web UI's static files (server/ui/): it reads through the API above like any client.
    const ui = createUiHandler();
    const serve: NodeHandler = (req, res) => (isMcpPath(req.url) ? mcp(req, res) : isUiPath(req.url) ? ui(req, res) : isPortsPath(req.url) ? portProxy.request(req, res) : rpc(req, res));
    // Unary calls over HTTP/2 are taken at their stream: none of the paths above is an RPC's.
    return Object.assign(serve, { stream: rpc.stream });
  }
  return {
    handler,
    upgrade: portProxy.upgrade,
    routes,
    interceptors,
    workspaces,
    agentTypes,
    sessions,
    store,
    ...(replica ? { replica } : {}),
    audit,
    health,
    logger,
    egress,
    stopStreams() {
      health.shutdown();
      shutdown.abort();
    },
    async close() {
      health.shutdown();
      shutdown.abort();
      clearInterval(mirrorPruner);
      clearInterval(processIdle);
      ports.close();
      await processes.close();
      await sessions.close();
      await workspaces.close();
      // Egress counts written before leaving the replicas table: a server taking over goes on from them.
      await egress.close();
      // Gone from the replicas table only once its handles are closed: then another may take over.
      await replica?.close();
      await audit.close();
      relay?.close();
      await store.close();
    },
  };
}

/**
 * Tool access that also tells the process table about the admitted call (its workspace is active
 * while it runs and from its end: the background processes' idle time).
 */
function touching(access: ToolAccess, processes: ProcessTable): ToolAccess {
  return {
    async admit(principal, workspaceId, tool, signal) {
      const admitted = await access.admit(principal, workspaceId, tool, signal);
      const ended = processes.callStarted(admitted.workspaceId);
      return {
        workspaceId: admitted.workspaceId,
        done() {
          ended();
          admitted.done();
        },
      };
    },
  };
}
