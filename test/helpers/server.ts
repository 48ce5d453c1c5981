/**
 * Test fixture: the real application on a real socket (port 0, a fresh temporary data directory),
 * with one client set per protocol the server speaks: gRPC (binary, HTTP/2 prior knowledge),
 * Connect (JSON, HTTP/1.1) and gRPC-Web (binary, HTTP/1.1). Teardown closes every connection,
 * the app and the server, and removes the data directory it created.
 */
import http from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import {
  Http2SessionManager,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { ErrorDetailSchema, ErrorReason, type ErrorDetail } from "../../gen/agentworkspace/v1/errors_pb.js";
import { AuditService } from "../../gen/agentworkspace/v1/audit_pb.js";
import { ConfigService } from "../../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../../gen/agentworkspace/v1/tool_pb.js";
import { ProcessService } from "../../gen/agentworkspace/v1/process_pb.js";
import { WorkspaceService } from "../../gen/agentworkspace/v1/workspace_pb.js";
import type { Provider } from "../../providers/types.ts";
import { createApp, type App, type AppOverrides } from "../../server/app.ts";
import { parseSettings } from "../../server/settings.ts";
import { listen } from "../../server/http-server.ts";
import { createLogger } from "../../server/logger.ts";
import { MICROVM_TEST_ENV } from "./microvm.ts";

/** The clients of one protocol. */
export interface ClientSet {
  tools: Client<typeof ToolService>;
  processes: Client<typeof ProcessService>;
  workspaces: Client<typeof WorkspaceService>;
  config: Client<typeof ConfigService>;
  audit: Client<typeof AuditService>;
}

/** A running server and its clients. */
export interface TestServer {
  /** Base URL, e.g. http://127.0.0.1:40123. */
  url: string;
  app: App;
  /** The data directory the app persists workspaces in. */
  dataDir: string;
  clients: { grpc: ClientSet; connect: ClientSet; grpcWeb: ClientSet };
  /** Closes clients, app and server; removes the data directory unless the caller supplied it. */
  close(): Promise<void>;
}

/** Options of `startServer`. */
export interface StartServerOptions {
  /** Providers to inject instead of the configured ones (e.g. a local provider without ripgrep). */
  providers?: Provider[];
  /** Reuse this data directory (a restart); it is then left in place by `close()`. */
  dataDir?: string;
  /** Extra configuration environment, on top of the data directory and quiet logging. */
  env?: Record<string, string>;
  /** Receives every log line (JSON, all levels) instead of stderr, for tests that assert on logs. */
  onLog?: (line: string) => void;
  /**
   * Operator API keys the server accepts (AGENT_WORKSPACE_API_KEYS); the clients then send the
   * first as `authorization: Bearer …`. Without keys the server runs open, as on loopback it may.
   */
  apiKeys?: string[];
  /** Other overrides of the app (a policy table). */
  overrides?: AppOverrides;
  /** The port to listen on (a restart on the same address); 0, any free port, by default. */
  port?: number;
}

function clientSet(transport: Transport): ClientSet {
  return { tools: createClient(ToolService, transport), processes: createClient(ProcessService, transport), workspaces: createClient(WorkspaceService, transport), config: createClient(ConfigService, transport), audit: createClient(AuditService, transport) };
}

/** An interceptor that sends `authorization: Bearer <key>` on every call. */
export function bearer(key: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${key}`);
    return next(req);
  };
}


/** Builds the app from configuration, as `server/main.ts` does, and serves it on 127.0.0.1:0. */
export async function startServer(options: StartServerOptions = {}): Promise<TestServer> {
  const ownDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(path.join(tmpdir(), "aw-test-")));
  const keys = options.apiKeys ?? [];
  const config = parseSettings(
    {
      AGENT_WORKSPACE_DATA_DIR: dataDir,
      AGENT_WORKSPACE_LOG_LEVEL: "error",
      // Every test server shares microvm executor disks and templates (a template costs a VM's boot).
      ...MICROVM_TEST_ENV,
      // Where Docker is required (CI), a test server never drops its container providers because
      // the engine answered its first ping late (2 s, under a loaded suite): "auto" would start
      // without them; "on" keeps them, and a call asks the engine again (a test may still say "off").
      ...(process.env.REQUIRE_DOCKER === "1" ? { AGENT_WORKSPACE_DOCKER: "on" } : {}),
      ...(keys.length > 0 ? { AGENT_WORKSPACE_API_KEYS: keys.join(",") } : {}),
      ...options.env,
    },
    [],
  );
  const overrides: AppOverrides = { ...options.overrides };
  if (options.providers) overrides.providers = options.providers;
  if (options.onLog) overrides.logger = createLogger({ level: "debug", sink: options.onLog });
  const app = await createApp(config, overrides);
  const server = await listen(app.handler, { upgrade: app.upgrade, host: "127.0.0.1", port: options.port ?? 0 });
  app.egress.listening("127.0.0.1", server.port);
  const baseUrl = server.url;

  // Own connections per server, so close() can end them instead of waiting for idle timeouts.
  const sessions = new Http2SessionManager(baseUrl);
  // Idle sockets are closed by the client (10 s) before the server's keep-alive timeout (30 s)
  // can: a request sent on a socket the server is closing that moment is reset (ECONNRESET), and
  // with the server in this process a busy event loop widens that moment.
  const agent = new http.Agent({ keepAlive: true, timeout: 10_000 });
  const interceptors = keys.length > 0 ? [bearer(keys[0])] : [];
  const grpc = createGrpcTransport({ baseUrl, sessionManager: sessions, interceptors });
  const connect = createConnectTransport({ baseUrl, httpVersion: "1.1", nodeOptions: { agent }, interceptors });
  const grpcWeb = createGrpcWebTransport({ baseUrl, httpVersion: "1.1", nodeOptions: { agent }, interceptors });

  let closed = false;
  return {
    url: baseUrl,
    app,
    dataDir,
    clients: { grpc: clientSet(grpc), connect: clientSet(connect), grpcWeb: clientSet(grpcWeb) },
    async close() {
      if (closed) return;
      closed = true;
      sessions.abort();
      agent.destroy();
      // A server with a throwaway data directory takes its workspaces (containers) with it.
      if (ownDir) {
        for (const r of app.workspaces.listRecords("", {})) await app.workspaces.delete(r.id).catch(() => undefined);
      }
      await app.close();
      await server.close();
      if (ownDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** The context of a test file that shares one server. */
export interface ServerCtx {
  server: TestServer;
}

/**
 * The typed ava `test` of a file whose tests share one server: started in `before` with
 * `options`, closed in `after.always` (so teardown runs even when a test fails). Call it once per
 * file, at the top. Tests needing a server of their own (a restart, other settings) call
 * `startServer` and close it in `finally`.
 */
export function serverTest(options: StartServerOptions = {}): TestFn<ServerCtx> {
  const test = anyTest as TestFn<ServerCtx>;
  test.before(async (t) => {
    t.context.server = await startServer(options);
  });
  test.after.always(async (t) => {
    await t.context.server?.close();
  });
  return test;
}

/** Creates a workspace through `clients` and returns its id. */
export async function newWorkspace(clients: ClientSet, init: { provider?: string; labels?: Record<string, string> } = {}): Promise<string> {
  const { workspace } = await clients.workspaces.createWorkspace(init);
  if (!workspace) throw new Error("CreateWorkspace returned no workspace");
  return workspace.id;
}

/** Settings that keep a test server independent of a Docker engine. */
export const LOCAL_ONLY = { AGENT_WORKSPACE_DOCKER: "off" } as const;

/** The ErrorDetail every server error carries. */
export function errorDetail(err: ConnectError): ErrorDetail | undefined {
  return err.findDetails(ErrorDetailSchema)[0];
}

/**
 * Asserts that `promise` rejects with a ConnectError of `code` whose ErrorDetail carries
 * `reason`, and returns the error and its detail for further assertions.
 */
export async function expectError(
  t: ExecutionContext<unknown>,
  promise: Promise<unknown>,
  code: Code,
  reason: ErrorReason,
): Promise<{ error: ConnectError; detail: ErrorDetail }> {
  let caught: unknown;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  if (caught === undefined) {
    t.fail(`expected ${Code[code]} / ${ErrorReason[reason]}, but the call succeeded`);
    throw new Error("call succeeded");
  }
  t.true(caught instanceof ConnectError, `not a ConnectError: ${String(caught)}`);
  const error = ConnectError.from(caught);
  t.is(Code[error.code], Code[code], `code of: ${error.rawMessage}`);
  const detail = errorDetail(error);
  t.truthy(detail, "error carries an ErrorDetail");
  t.is(ErrorReason[detail?.reason ?? ErrorReason.UNSPECIFIED], ErrorReason[reason], `reason of: ${error.rawMessage}`);
  return { error, detail: detail as ErrorDetail };
}
