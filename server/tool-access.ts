/**
 * Which tools may be used in which workspace, by whom.
 *
 * - A session token reaches only its own session's workspace (a call may leave workspace_id
 *   empty and gets it; another id is OUTSIDE_SESSION). Its agent type decides: a session without a
 *   workspace (workspaces disabled) answers NOT_FOUND for every tool, as the seed says; a tool the
 *   agent type does not enable is TOOL_NOT_ENABLED (403); a call in a session still provisioning
 *   waits until it is ACTIVE (then runs) or DEGRADED (WORKSPACE_NOT_PROVISIONED, FAILED_PRECONDITION),
 *   bounded by the call's deadline (SESSION_NOT_READY) and cancellation (CANCELLED), and is checked
 *   again from the start when it wakes (the agent type may have changed meanwhile).
 * - A workspace made without an agent type allows every tool to the callers the policy admits.
 * - A workspace made for an agent type allows a tool only while the agent type's workspace
 *   configuration is enabled and the tool is in both the list it had when the workspace was made
 *   and its current list: a later update never widens what an existing workspace may do (the
 *   seed's "existing sessions are not affected"), while a tool taken away, or a disabled
 *   configuration, stops the next call at once.
 *
 * Every admitted call in a session's workspace counts as the session's activity (idle timeout).
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { DomainError } from "../core/errors.ts";
import type { AgentTypes } from "./agent-types/agent-types.ts";
import type { Principal } from "./auth/principal.ts";
import type { Admission, ToolAccess } from "./interceptors/permission-interceptor.ts";
import type { SessionManager } from "./sessions/session-manager.ts";
import type { WorkspaceManager } from "./workspace-manager.ts";

const notEnabled = (tool: string, agentType: string, workspaceId: string) =>
  new DomainError("TOOL_NOT_ENABLED", `Tool '${tool}' is not enabled for this agent type`, { metadata: { tool, agent_type: agentType, workspace_id: workspaceId } });

/** The tool check of the permission interceptor. */
export function createToolAccess(workspaces: WorkspaceManager, agentTypes: AgentTypes, sessions: SessionManager): ToolAccess {
  /** The agent type's checks on a workspace made for it. */
  const checkWorkspace = (workspaceId: string, tool: string) => {
    // An unknown workspace is the handler's to report (WORKSPACE_NOT_FOUND), the same for every tool.
    const binding = workspaces.find(workspaceId)?.agentType;
    if (!binding) return;
    const cfg = agentTypes.find(binding.id)?.workspace;
    if (!cfg?.enabled) {
      throw new DomainError("WORKSPACE_DISABLED", `Workspace '${workspaceId}' is not available: agent type '${binding.id}' has workspaces disabled`, {
        metadata: { workspace_id: workspaceId, agent_type: binding.id },
      });
    }
    if (!binding.tools.includes(tool) || !cfg.tools.includes(tool)) throw notEnabled(tool, binding.id, workspaceId);
  };

  /** Why a call stopped waiting for its session's workspace: its deadline, or a cancellation. Nothing of it ran. */
  const stoppedWaiting = (sessionId: string, reason: unknown) =>
    reason instanceof ConnectError && reason.code === Code.DeadlineExceeded
      ? new DomainError("SESSION_NOT_READY", `Session '${sessionId}' was still provisioning its workspace when the call's deadline passed; nothing ran. Watch it (WatchSession) or call with a longer deadline`, {
          metadata: { session_id: sessionId },
        })
      : new DomainError("CANCELLED", `The call was cancelled while it waited for session '${sessionId}' to be provisioned; nothing ran`, { metadata: { session_id: sessionId } });

  const admitSession = async (sessionId: string, requested: string, tool: string, signal: AbortSignal): Promise<string> => {
    const s = sessions.get(sessionId);
    const cfg = agentTypes.find(s.agentType)?.workspace;
    if (!s.workspaceEnabled || !cfg?.enabled) {
      throw new DomainError("WORKSPACE_DISABLED", `Session '${s.id}' has no workspace: agent type '${s.agentType}' has workspaces disabled`, {
        metadata: { session_id: s.id, agent_type: s.agentType },
      });
    }
    if (!cfg.tools.includes(tool)) throw notEnabled(tool, s.agentType, s.workspaceId);
    if (s.status === "provisioning") {
      try {
        await sessions.whenSettled(s.id, signal);
      } catch (reason) {
        throw stoppedWaiting(s.id, reason);
      }
      return admitSession(sessionId, requested, tool, signal);
    }
    if (s.status === "ended") {
      // Only a call that waited gets here: an ended session's token no longer authenticates.
      throw new DomainError("UNAUTHENTICATED", `Session '${s.id}' ended while the call waited for its workspace; its token no longer works`, { metadata: { session_id: s.id } });
    }
    if (s.status === "degraded") {
      throw new DomainError("WORKSPACE_NOT_PROVISIONED", `Session '${s.id}' has no workspace: it could not be provisioned (${s.statusMessage})`, {
        metadata: { session_id: s.id, cause: s.statusMessage.slice(0, 500) },
      });
    }
    if (requested !== "" && requested !== s.workspaceId) {
      throw new DomainError("OUTSIDE_SESSION", "A session token reaches only its own session's workspace", {
        metadata: { session_id: s.id, workspace_id: requested.slice(0, 64) },
      });
    }
    return s.workspaceId;
  };

  return {
    async admit(principal: Principal, requested: string, tool: string, signal: AbortSignal): Promise<Admission> {
      const workspaceId = principal.kind === "session" ? await admitSession(principal.sessionId, requested, tool, signal) : requested;
      checkWorkspace(workspaceId, tool);
      // The call counts as activity of the caller's own session (a shared workspace has several).
      const owner = principal.kind === "session" ? principal.sessionId : sessions.ofWorkspace(workspaceId)?.id;
      return { workspaceId, done: owner !== undefined ? sessions.enter(owner) : () => undefined };
    },
  };
}
