/**
 * `AgentWorkspace`: one object per server and credential, over gRPC, Connect or gRPC-Web.
 */
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import http from "node:http";
import https from "node:https";
import { Http2SessionManager, createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import {
  AuditService,
  type ListAuditEventsRequestSchema,
  type ListAuditEventsResponse,
  type PostAgentMessageRequestSchema,
  type PostAgentMessageResponse,
  type WatchEventsRequestSchema,
  type WatchEventsResponse,
} from "../gen/agentworkspace/v1/audit_pb.js";
import {
  ConfigService,
  type AgentType,
  type AgentTypeSchema,
  type WorkspaceConfig,
  type WorkspaceConfigSchema,
} from "../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { ProcessService } from "../gen/agentworkspace/v1/process_pb.js";
import {
  WorkspaceService,
  type CreateWorkspaceRequestSchema,
  type GetWorkspaceDigestRequestSchema,
  type GetWorkspaceDigestResponse,
  type ListSessionsRequestSchema,
  type ListSessionsResponse,
  type ListWorkspacesRequestSchema,
  type ListWorkspacesResponse,
  type Session as SessionInfo,
  type SetWorkspaceDigestRequestSchema,
  type WorkspaceDigest,
  type Workspace as WorkspaceInfo,
  type StartSessionRequestSchema,
} from "../gen/agentworkspace/v1/workspace_pb.js";
import { Caller, type CallOptions, type RetryOptions } from "./call.ts";
import { followingRedirects, type OwnTransport } from "./redirect.ts";
import { AgentTypeExistsError } from "./error-classes.ts";
import { Session } from "./session.ts";
import { Workspace } from "./workspace.ts";

/** A request's init shape (protobuf-es), without its `$typeName`. */
export type Init<S extends DescMessage> = Omit<MessageInitShape<S>, "$typeName">;

/** The wire protocol. */
export type Protocol = "connect" | "grpc" | "grpc-web";

/** Options of `new AgentWorkspace(…)`. */
export interface AgentWorkspaceOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:8080` (`https://` for TLS). */
  url: string;
  /** An operator API key, sent as `authorization: Bearer …`. */
  apiKey?: string;
  /** A session token instead of a key: then `workspace()` is the session's workspace. */
  sessionToken?: string;
  /** `"connect"` (default), `"grpc"` (HTTP/2 only) or `"grpc-web"`. */
  protocol?: Protocol;
  /** `"2"` (default; h2c prior knowledge for http://, ALPN for https://) or `"1.1"` (not for gRPC). */
  httpVersion?: "1.1" | "2";
  /** Connect and gRPC-Web only: JSON instead of binary protobuf. Default false. */
  useJson?: boolean;
  /** Retries of idempotent reads on UNAVAILABLE; `false` disables them. Default: 4 attempts, 50 ms doubling to 1 s. */
  retry?: RetryOptions | false;
  /** A deadline for every call that sets none, in ms. Default: none. */
  defaultTimeoutMs?: number;
  /** connect-es interceptors, outermost first (tracing, logging). */
  interceptors?: Interceptor[];
  /** HTTP/2 only: a session manager of your own (e.g. with wider flow-control windows). */
  sessionManager?: Http2SessionManager;
  /** A connect-es transport of your own instead of one made from the options above (`url` is then ignored). */
  transport?: Transport;
  /**
   * Servers sharing a database refuse calls for a workspace or session another one serves, naming
   * it (`WORKSPACE_SERVED_ELSEWHERE`, `metadata.server_url`); by default such a call is sent there
   * once, on a connection kept per server (never from https to http). `false` surfaces the refusal
   * as `WorkspaceServedElsewhereError` instead. Not with a `transport` of your own.
   */
  followRedirects?: boolean;
}

function makeTransport(options: AgentWorkspaceOptions): OwnTransport {
  if (options.transport) return { transport: options.transport, close: () => undefined };
  const own = makeOwnTransport(options);
  if (options.followRedirects === false) return own;
  const others = followingRedirects(own.transport, options.url, (url) => makeOwnTransport({ ...options, url, sessionManager: undefined }));
  return {
    transport: others.transport,
    close: () => {
      others.close();
      own.close();
    },
  };
}

function makeOwnTransport(options: AgentWorkspaceOptions): OwnTransport {
  const protocol = options.protocol ?? "connect";
  const httpVersion = options.httpVersion ?? "2";
  if (protocol !== "connect" && protocol !== "grpc" && protocol !== "grpc-web") throw new TypeError(`Unknown protocol '${String(protocol)}': use 'connect', 'grpc' or 'grpc-web'`);
  if (protocol === "grpc" && httpVersion !== "2") throw new TypeError("gRPC needs HTTP/2: use protocol 'connect' or 'grpc-web' for HTTP/1.1");
  const common = { baseUrl: options.url, interceptors: options.interceptors, defaultTimeoutMs: options.defaultTimeoutMs };
  const useBinaryFormat = !options.useJson;
  if (httpVersion === "2") {
    // Our own session manager (unless given one), so close() can end the connection.
    const own = options.sessionManager === undefined ? new Http2SessionManager(options.url) : undefined;
    const sessionManager = options.sessionManager ?? (own as Http2SessionManager);
    const transport =
      protocol === "grpc"
        ? createGrpcTransport({ ...common, sessionManager })
        : protocol === "grpc-web"
          ? createGrpcWebTransport({ ...common, httpVersion, sessionManager, useBinaryFormat })
          : createConnectTransport({ ...common, httpVersion, sessionManager, useBinaryFormat });
    return { transport, close: () => own?.abort() };
  }
  const agent = options.url.startsWith("https:") ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true });
  const nodeOptions = { agent };
  const transport = protocol === "grpc-web" ? createGrpcWebTransport({ ...common, httpVersion, nodeOptions, useBinaryFormat }) : createConnectTransport({ ...common, httpVersion, nodeOptions, useBinaryFormat });
  return { transport, close: () => agent.destroy() };
}

/**
 * A client of one agent-workspace server with one credential (an operator key, a session token,
 * or none for an open server). Everything else hangs off it: `workspaces`, `startSession()` and
 * `sessions`, `workspace(id)` for tools, `agentTypes`, `audit`. Errors are `AgentWorkspaceError`
 * subclasses by reason; every call takes `CallOptions` (`signal`, `timeoutMs`, `retry`, `headers`).
 * The key and token are kept private and never appear in errors or `console.log`.
 */
export class AgentWorkspace {
  /** The generated connect-es clients on this client's transport, for anything the helpers do not cover. */
  readonly raw: {
    tools: Client<typeof ToolService>;
    processes: Client<typeof ProcessService>;
    workspaces: Client<typeof WorkspaceService>;
    config: Client<typeof ConfigService>;
    audit: Client<typeof AuditService>;
  };
  /** CreateWorkspace, GetWorkspace, ListWorkspaces, DeleteWorkspace. */
  readonly workspaces: {
    create(input?: Init<typeof CreateWorkspaceRequestSchema>, opts?: CallOptions): Promise<WorkspaceInfo>;
    get(id: string, opts?: CallOptions): Promise<WorkspaceInfo>;
    list(input?: Init<typeof ListWorkspacesRequestSchema>, opts?: CallOptions): Promise<ListWorkspacesResponse>;
    delete(id: string, opts?: CallOptions): Promise<void>;
  };
  /** GetSession, ListSessions, EndSession, and the workspace digests. */
  readonly sessions: {
    get(id: string, opts?: CallOptions): Promise<SessionInfo>;
    list(input?: Init<typeof ListSessionsRequestSchema>, opts?: CallOptions): Promise<ListSessionsResponse>;
    end(id: string, opts?: CallOptions): Promise<SessionInfo>;
    setDigest(input: Init<typeof SetWorkspaceDigestRequestSchema>, opts?: CallOptions): Promise<WorkspaceDigest>;
    getDigest(input?: Init<typeof GetWorkspaceDigestRequestSchema>, opts?: CallOptions): Promise<GetWorkspaceDigestResponse>;
  };
  /** Agent types (ConfigService): list, get, create, update, delete, apply, and their workspace configuration. */
  readonly agentTypes: {
    list(opts?: CallOptions): Promise<AgentType[]>;
    get(id: string, opts?: CallOptions): Promise<AgentType>;
    create(agentType: Init<typeof AgentTypeSchema>, opts?: CallOptions): Promise<AgentType>;
    update(agentType: Init<typeof AgentTypeSchema>, opts?: CallOptions): Promise<AgentType>;
    delete(id: string, opts?: CallOptions): Promise<void>;
    /** Creates the agent type, or updates it when one with its id exists (for `apply FILE`). */
    apply(agentType: Init<typeof AgentTypeSchema>, opts?: CallOptions): Promise<{ agentType: AgentType; created: boolean }>;
    getWorkspaceConfig(id: string, opts?: CallOptions): Promise<WorkspaceConfig>;
    updateWorkspaceConfig(id: string, config: Init<typeof WorkspaceConfigSchema>, opts?: CallOptions): Promise<WorkspaceConfig>;
  };
  /** The audit trail: recorded tool calls (newest first, paged) and the live event stream. */
  readonly audit: {
    list(input?: Init<typeof ListAuditEventsRequestSchema>, opts?: CallOptions): Promise<ListAuditEventsResponse>;
    watch(filter?: Init<typeof WatchEventsRequestSchema>, opts?: CallOptions): AsyncIterable<WatchEventsResponse>;
    /** Posts an agent's note or summary into a session's chain (PostAgentMessage; never retried). With a session token, `sessionId` may be left out. */
    postMessage(input: Init<typeof PostAgentMessageRequestSchema>, opts?: CallOptions): Promise<PostAgentMessageResponse>;
  };
  readonly #caller: Caller;
  readonly #close: () => void;

  constructor(options: AgentWorkspaceOptions) {
    if (options.apiKey && options.sessionToken) throw new TypeError("Give an apiKey or a sessionToken, not both");
    const { transport, close } = makeTransport(options);
    this.#close = close;
    const raw = (this.raw = {
      tools: createClient(ToolService, transport),
      processes: createClient(ProcessService, transport),
      workspaces: createClient(WorkspaceService, transport),
      config: createClient(ConfigService, transport),
      audit: createClient(AuditService, transport),
    });
    const caller = (this.#caller = new Caller(options.apiKey ?? options.sessionToken, options.retry));
    const ws = raw.workspaces;
    const cfg = raw.config;
    const must = <T>(value: T | undefined, what: string): T => {
      if (value === undefined) throw new TypeError(`The server's answer has no ${what}`);
      return value;
    };
    this.workspaces = {
      create: async (input = {}, opts) => must((await caller.unary(ws.createWorkspace, input, opts, "once")).workspace, "workspace"),
      get: async (id, opts) => must((await caller.unary(ws.getWorkspace, { id }, opts, "idempotent")).workspace, "workspace"),
      list: (input = {}, opts) => caller.unary(ws.listWorkspaces, input, opts, "idempotent"),
      delete: async (id, opts) => void (await caller.unary(ws.deleteWorkspace, { id }, opts, "once")),
    };
    this.sessions = {
      get: async (id, opts) => must((await caller.unary(ws.getSession, { id }, opts, "idempotent")).session, "session"),
      list: (input = {}, opts) => caller.unary(ws.listSessions, input, opts, "idempotent"),
      end: async (id, opts) => must((await caller.unary(ws.endSession, { id }, opts, "once")).session, "session"),
      setDigest: async (input, opts) => must((await caller.unary(ws.setWorkspaceDigest, input, opts, "once")).digest, "digest"),
      getDigest: (input = {}, opts) => caller.unary(ws.getWorkspaceDigest, input, opts, "idempotent"),
    };
    this.agentTypes = {
      list: async (opts) => (await caller.unary(cfg.listAgentTypes, {}, opts, "idempotent")).agentTypes,
      get: async (id, opts) => must((await caller.unary(cfg.getAgentType, { id }, opts, "idempotent")).agentType, "agent type"),
      create: async (agentType, opts) => must((await caller.unary(cfg.createAgentType, { agentType }, opts, "once")).agentType, "agent type"),
      update: async (agentType, opts) => must((await caller.unary(cfg.updateAgentType, { agentType }, opts, "once")).agentType, "agent type"),
      delete: async (id, opts) => void (await caller.unary(cfg.deleteAgentType, { id }, opts, "once")),
      apply: async (agentType, opts) => {
        try {
          return { agentType: await this.agentTypes.create(agentType, opts), created: true };
        } catch (err) {
          if (!(err instanceof AgentTypeExistsError)) throw err;
          return { agentType: await this.agentTypes.update(agentType, opts), created: false };
        }
      },
      getWorkspaceConfig: async (id, opts) => must((await caller.unary(cfg.getWorkspaceConfig, { agentTypeId: id }, opts, "idempotent")).workspaceConfig, "workspace configuration"),
      updateWorkspaceConfig: async (id, workspaceConfig, opts) =>
        must((await caller.unary(cfg.updateWorkspaceConfig, { agentTypeId: id, workspaceConfig }, opts, "once")).workspaceConfig, "workspace configuration"),
    };
    this.audit = {
      list: (input = {}, opts) => caller.unary(raw.audit.listAuditEvents, input, opts, "idempotent"),
      watch: (filter = {}, opts) => caller.stream(raw.audit.watchEvents, filter, opts),
      postMessage: (input, opts) => caller.unary(raw.audit.postAgentMessage, input, opts, "once"),
    };
  }

  /**
   * Closes the connections this client opened (not those of a `transport` or `sessionManager`
   * passed in). Calls still running fail; a later call opens a new connection.
   */
  close(): void {
    this.#close();
  }

  /**
   * The tools of workspace `id`. With a session token, leave `id` out: the session's workspace.
   */
  workspace(id = ""): Workspace {
    return new Workspace(id, this.raw, this.#caller);
  }

  /**
   * Starts a session of an agent type (StartSession) and returns it at once, usually PROVISIONING:
   * `await session.ready()` waits for its workspace, `session.watch()` shows the progress,
   * `session.workspace` calls its tools with its token, `session.end()` ends it.
   */
  async startSession(input: Init<typeof StartSessionRequestSchema>, opts?: CallOptions): Promise<Session> {
    const res = await this.#caller.unary(this.raw.workspaces.startSession, input, opts, "once");
    if (!res.session) throw new TypeError("The server's answer has no session");
    return new Session(res.session, res.sessionToken, this.#caller, this.raw);
  }

  /** Live events (tool calls, files changed, status changes), filtered by `workspaceId` or `sessionId`; opens with `started`. */
  watchEvents(filter: Init<typeof WatchEventsRequestSchema> = {}, opts?: CallOptions): AsyncIterable<WatchEventsResponse> {
    return this.audit.watch(filter, opts);
  }
}
