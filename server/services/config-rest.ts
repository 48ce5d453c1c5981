/**
 * The REST paths of seed 003 and a listing beside them, each over a ConfigService RPC:
 *   GET /api/v1/agent-types                              → ListAgentTypes   → {"agent_types": [...]}
 *   GET /api/v1/agent-types/{id}                         → GetAgentType     → the agent type
 *   GET /api/v1/agent-types/{id}/workspace-config        → GetWorkspaceConfig    → the configuration
 *   PUT /api/v1/agent-types/{id}/workspace-config (JSON) → UpdateWorkspaceConfig → the stored configuration
 * Bodies use the seed's field names (`repo_source`, `resource_limits`, …).
 */
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { AgentTypeSchema, ConfigService, WorkspaceConfigSchema } from "../../gen/agentworkspace/v1/config_pb.js";
import { DomainError } from "../../core/errors.ts";
import { type RestRoute, restJson, restRoute } from "../rest.ts";

const config = (json: JsonValue | undefined) => {
  if (json === undefined || json === null || typeof json !== "object" || Array.isArray(json)) {
    throw new DomainError("INVALID_ARGUMENT", "The request body must be a JSON object: the workspace configuration", { metadata: { field: "body" } });
  }
  return fromJson(WorkspaceConfigSchema, json, { ignoreUnknownFields: false });
};

export const CONFIG_REST_ROUTES: RestRoute[] = [
  restRoute({
    method: "GET",
    path: "/api/v1/agent-types",
    rpc: ConfigService.method.listAgentTypes,
    request: () => ({}),
    response: (res) => ({ agent_types: res.agentTypes.map((t) => restJson(AgentTypeSchema, t)) }),
  }),
  restRoute({
    method: "GET",
    path: "/api/v1/agent-types/{id}",
    rpc: ConfigService.method.getAgentType,
    request: (p) => ({ id: p.id }),
    response: (res) => (res.agentType ? restJson(AgentTypeSchema, res.agentType) : null),
  }),
  restRoute({
    method: "GET",
    path: "/api/v1/agent-types/{id}/workspace-config",
    rpc: ConfigService.method.getWorkspaceConfig,
    request: (p) => ({ agentTypeId: p.id }),
    response: (res) => (res.workspaceConfig ? restJson(WorkspaceConfigSchema, res.workspaceConfig) : null),
  }),
  restRoute({
    method: "PUT",
    path: "/api/v1/agent-types/{id}/workspace-config",
    rpc: ConfigService.method.updateWorkspaceConfig,
    request: (p, body) => ({ agentTypeId: p.id, workspaceConfig: config(body) }),
    response: (res) => (res.workspaceConfig ? restJson(WorkspaceConfigSchema, res.workspaceConfig) : null),
  }),
];
