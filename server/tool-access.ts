/**
 * Which tools may be used in which workspace. A workspace made without an agent type allows
 * every tool to the callers the policy table admits. A workspace made for an agent type allows a
 * tool only while the agent type's workspace configuration is enabled and the tool is in both
 * the list it had when the workspace was made and its current list: a later update never widens
 * what an existing workspace may do (the seed's "existing sessions are not affected"), while a
 * tool taken away, or a disabled workspace configuration, stops the next call at once.
 */
import { DomainError } from "../core/errors.ts";
import type { AgentTypes } from "./agent-types/agent-types.ts";
import type { Principal } from "./auth/principal.ts";
import type { ToolAccess } from "./interceptors/permission-interceptor.ts";
import type { WorkspaceManager } from "./workspace-manager.ts";

/** The tool check of the permission interceptor. */
export function createToolAccess(workspaces: WorkspaceManager, agentTypes: AgentTypes): ToolAccess {
  return {
    check(_principal: Principal, workspaceId: string, tool: string) {
      // An unknown workspace is the handler's to report (WORKSPACE_NOT_FOUND), the same for every tool.
      const binding = workspaces.find(workspaceId)?.agentType;
      if (!binding) return;
      const cfg = agentTypes.find(binding.id)?.workspace;
      if (!cfg?.enabled) {
        throw new DomainError("WORKSPACE_DISABLED", `Workspace '${workspaceId}' is not available: agent type '${binding.id}' has workspaces disabled`, {
          metadata: { workspace_id: workspaceId, agent_type: binding.id },
        });
      }
      if (!binding.tools.includes(tool) || !cfg.tools.includes(tool)) {
        throw new DomainError("TOOL_NOT_ENABLED", `Tool '${tool}' is not enabled for this agent type`, {
          metadata: { tool, agent_type: binding.id, workspace_id: workspaceId },
        });
      }
    },
  };
}
