/**
 * Which tools the MCP bridge lists for a caller: the tools its agent type enables, read from the
 * same records the permission check reads (tool-access.ts), without admitting anything. Only a
 * listing: a call to a tool left out still goes to the server, which decides (TOOL_NOT_ENABLED).
 */
import type { AgentTypes } from "../agent-types/agent-types.ts";
import type { Principal } from "../auth/principal.ts";
import type { SessionManager } from "../sessions/session-manager.ts";
import type { WorkspaceManager } from "../workspace-manager.ts";

/** The registry tools the caller's agent type enables in `workspaceId`; undefined when no agent type limits them. */
export function enabledToolsOf(workspaces: WorkspaceManager, agentTypes: AgentTypes, sessions: SessionManager) {
  return (principal: Principal, workspaceId: string): readonly string[] | undefined => {
    if (principal.kind === "session") {
      try {
        return agentTypes.find(sessions.get(principal.sessionId).agentType)?.workspace?.tools ?? [];
      } catch {
        return undefined;
      }
    }
    const binding = workspaces.find(workspaceId)?.agentType;
    if (!binding) return undefined;
    const now = agentTypes.find(binding.id)?.workspace?.tools ?? [];
    return binding.tools.filter((t) => now.includes(t));
  };
}
