/** ConfigService: thin mapping between the API and the agent-type registry. */
import type { ServiceImpl } from "@connectrpc/connect";
import type { ConfigService } from "../../gen/agentworkspace/v1/config_pb.js";
import type { AgentTypes } from "../agent-types/agent-types.ts";

/** Creates the ConfigService implementation. */
export function createConfigService(agentTypes: AgentTypes): ServiceImpl<typeof ConfigService> {
  return {
    async createAgentType(req) {
      return { agentType: await agentTypes.create(req.agentType) };
    },
    async getAgentType(req) {
      return { agentType: agentTypes.get(req.id) };
    },
    async listAgentTypes() {
      return { agentTypes: agentTypes.list() };
    },
    async updateAgentType(req) {
      return { agentType: await agentTypes.update(req.agentType) };
    },
    async deleteAgentType(req) {
      await agentTypes.delete(req.id);
      return {};
    },
    async getWorkspaceConfig(req) {
      return { workspaceConfig: agentTypes.get(req.agentTypeId, "agent_type_id").workspace };
    },
    async updateWorkspaceConfig(req) {
      return { workspaceConfig: await agentTypes.updateWorkspaceConfig(req.agentTypeId, req.workspaceConfig) };
    },
  };
}
