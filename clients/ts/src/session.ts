/**
 * A started session: its id and token, a workspace handle bound to the token, and its lifecycle.
 */
import type { Client } from "@connectrpc/connect";
import { Code } from "@connectrpc/connect";
import {
  SessionStatus,
  type Session as SessionInfo,
  type WatchSessionResponse,
  type WorkspaceService,
} from "../gen/agentworkspace/v1/workspace_pb.js";
import { AgentMessageKind, type PostAgentMessageResponse } from "../gen/agentworkspace/v1/audit_pb.js";
import type { CallOptions, Caller } from "./call.ts";
import { AgentWorkspaceError } from "./error-base.ts";
import type { HandleClients } from "./workspace.ts";
import { Workspace } from "./workspace.ts";

/** Options of `Session.ready`. */
export interface ReadyOptions extends CallOptions {
  /** Resolve on DEGRADED too instead of throwing `SessionDegradedError`. */
  allowDegraded?: boolean;
}

/**
 * Provisioning ended DEGRADED (the provider and its fallback failed): the session has no
 * workspace. `session.statusMessage` says why. Thrown by `Session.ready()`; not a server error.
 */
export class SessionDegradedError extends AgentWorkspaceError {
  /** The session as it was when provisioning ended. */
  readonly session: SessionInfo;

  constructor(session: SessionInfo) {
    super(`Session ${session.id} is DEGRADED: ${session.statusMessage}`, { code: Code.FailedPrecondition });
    this.session = session;
  }
}

/**
 * One agent session, as `AgentWorkspace.startSession()` returns it. `workspace` calls the tools
 * with the session token (no workspace id needed; a call made while the session is still
 * PROVISIONING waits for its workspace, bounded by its deadline). The token is kept private: it
 * does not show in `console.log(session)` or JSON.
 */
export class Session {
  /** The session id (`sess-…`). */
  readonly id: string;
  /** The tools of the session's workspace, authorised by the session token. */
  readonly workspace: Workspace;
  /** The session as last seen: by `startSession`, `refresh`, `ready`, `watch` or `end`. */
  info: SessionInfo;
  readonly #token: string;
  readonly #operator: Caller;
  readonly #agent: Caller;
  readonly #workspaces: Client<typeof WorkspaceService>;
  readonly #audit: HandleClients["audit"];

  constructor(info: SessionInfo, token: string, operator: Caller, clients: HandleClients & { workspaces: Client<typeof WorkspaceService> }) {
    this.id = info.id;
    this.info = info;
    this.#token = token;
    this.#operator = operator;
    this.#agent = operator.with(token);
    this.#workspaces = clients.workspaces;
    this.#audit = clients.audit;
    this.workspace = new Workspace("", clients, this.#agent);
  }

  /** The session token (`awsess_…`): send it as `authorization: Bearer …`, or give it to `new AgentWorkspace({ sessionToken })`. */
  get token(): string {
    return this.#token;
  }

  /** The status as last seen. */
  get status(): SessionStatus {
    return this.info.status;
  }

  /** Reads the session again (with its token). Retried on UNAVAILABLE. */
  async refresh(opts?: CallOptions): Promise<SessionInfo> {
    const { session } = await this.#agent.unary(this.#workspaces.getSession, { id: this.id }, opts, "idempotent");
    if (session) this.info = session;
    return this.info;
  }

  /**
   * The session's events (with its token): status changes, provisioning stages with their start,
   * output (git's progress, setup commands' output) and end, warnings. Replays what happened so
   * far, then follows; ends once provisioning is over, or with `follow` once the session ends.
   */
  watch(options: { follow?: boolean } & CallOptions = {}): AsyncIterable<WatchSessionResponse> {
    const { follow = false, ...opts } = options;
    return this.#agent.stream(this.#workspaces.watchSession, { id: this.id, follow }, opts);
  }

  /**
   * Waits until provisioning is over and returns the session: ACTIVE, or DEGRADED with
   * `allowDegraded` (otherwise `SessionDegradedError`). Bounded by `timeoutMs` and `signal`.
   */
  async ready(options: ReadyOptions = {}): Promise<SessionInfo> {
    const { allowDegraded = false, ...opts } = options;
    if (this.info.status === SessionStatus.PROVISIONING) {
      for await (const { event } of this.watch(opts)) {
        if (event.case === "status" && event.value.status !== SessionStatus.PROVISIONING) break;
      }
    }
    const info = await this.refresh(opts);
    if (info.status === SessionStatus.DEGRADED && !allowDegraded) throw new SessionDegradedError(info);
    return info;
  }

  /**
   * Posts the agent's own words into the session's chain (with its token): a note while it works,
   * or with `kind: AgentMessageKind.SUMMARY` its closing summary. People watching see it in order
   * with the tool calls. Never retried.
   */
  async postMessage(text: string, options: { kind?: AgentMessageKind } & CallOptions = {}): Promise<PostAgentMessageResponse> {
    const { kind = AgentMessageKind.NOTE, ...opts } = options;
    return this.#agent.unary(this.#audit.postAgentMessage, { text, kind }, opts, "once");
  }

  /** Ends the session (with the operator's credentials): the token stops working, the workspace is removed. */
  async end(opts?: CallOptions): Promise<SessionInfo> {
    const { session } = await this.#operator.unary(this.#workspaces.endSession, { id: this.id }, opts, "once");
    if (session) this.info = session;
    return this.info;
  }
}
