/**
 * The policy table: for every RPC the server serves, which kinds of caller may make it. It is the
 * whole of "who may call what"; the permission interceptor only reads it. Deny by default: a
 * procedure missing here is refused, and `checkPolicy` refuses to start a server whose routes and
 * table disagree in either direction, so a new RPC cannot ship without a decision about it.
 */
import type { Principal } from "./auth/principal.ts";

/** Which principal kinds may call a procedure. */
export type Allowed = ReadonlyArray<Principal["kind"]>;

const OPERATOR: Allowed = ["operator"];
/** Tool calls: operators anywhere, session tokens in their own session's workspace (tool-access.ts). */
const TOOL_CALLERS: Allowed = ["operator", "session"];
/** One session's state and digests: operators, and a session token its own (workspace-service.ts). */
const SESSION_READERS: Allowed = ["operator", "session"];
/** The audit trail: operators all of it, a session token its own session's (audit-service.ts). */
const AUDIT_READERS: Allowed = ["operator", "session"];
/** An agent's messages: a session token into its own session, operators into any (audit-service.ts). */
const AGENT_MESSAGE_WRITERS: Allowed = ["operator", "session"];
/** Probes and schema discovery: load balancers and `buf curl` call them without a key. */
const ANYONE: Allowed = ["operator", "anonymous"];

/** Procedure ("/package.Service/Method") → allowed principal kinds. */
export const POLICY: Readonly<Record<string, Allowed>> = {
  "/agentworkspace.v1.AuditService/ListAuditEvents": AUDIT_READERS,
  "/agentworkspace.v1.AuditService/WatchEvents": AUDIT_READERS,
  "/agentworkspace.v1.AuditService/PostAgentMessage": AGENT_MESSAGE_WRITERS,

  "/agentworkspace.v1.ConfigService/CreateAgentType": OPERATOR,
  "/agentworkspace.v1.ConfigService/GetAgentType": OPERATOR,
  "/agentworkspace.v1.ConfigService/ListAgentTypes": OPERATOR,
  "/agentworkspace.v1.ConfigService/UpdateAgentType": OPERATOR,
  "/agentworkspace.v1.ConfigService/DeleteAgentType": OPERATOR,
  "/agentworkspace.v1.ConfigService/GetWorkspaceConfig": OPERATOR,
  "/agentworkspace.v1.ConfigService/UpdateWorkspaceConfig": OPERATOR,

  "/agentworkspace.v1.WorkspaceService/CreateWorkspace": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/GetWorkspace": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/ListWorkspaces": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/DeleteWorkspace": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/PauseWorkspace": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/ResumeWorkspace": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/StartSession": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/GetSession": SESSION_READERS,
  "/agentworkspace.v1.WorkspaceService/ListSessions": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/EndSession": OPERATOR,
  "/agentworkspace.v1.WorkspaceService/WatchSession": SESSION_READERS,
  "/agentworkspace.v1.WorkspaceService/SetWorkspaceDigest": SESSION_READERS,
  "/agentworkspace.v1.WorkspaceService/GetWorkspaceDigest": SESSION_READERS,

  "/agentworkspace.v1.ProcessService/StartProcess": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/ListProcesses": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/GetProcess": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/ReadProcessOutput": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/AttachProcess": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/WriteProcessStdin": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/ResizeProcess": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/SignalProcess": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/WaitProcess": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/ExposePort": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/UnexposePort": TOOL_CALLERS,
  "/agentworkspace.v1.ProcessService/ListExposedPorts": TOOL_CALLERS,

  "/agentworkspace.v1.ToolService/Bash": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/StreamBash": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/ReadFile": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/WriteFile": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/EditFile": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/PatchFile": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/DeleteFile": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/ListFiles": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/Glob": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/Grep": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/StreamGrep": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/GitStatus": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/GitDiff": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/GitCommit": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/GitCheckout": TOOL_CALLERS,
  "/agentworkspace.v1.ToolService/GitPush": TOOL_CALLERS,

  "/grpc.health.v1.Health/Check": ANYONE,
  "/grpc.health.v1.Health/Watch": ANYONE,
  "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": ANYONE,
  "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": ANYONE,
};

/**
 * Proves that `policy` covers exactly the served `procedures`: throws an Error listing every
 * procedure without an entry and every entry without a procedure.
 */
export function checkPolicy(policy: Readonly<Record<string, Allowed>>, procedures: Iterable<string>): void {
  const served = new Set(procedures);
  const problems: string[] = [];
  for (const p of served) if (!Object.hasOwn(policy, p)) problems.push(`${p} has no entry in the policy table (server/policy.ts)`);
  for (const p of Object.keys(policy)) if (!served.has(p)) problems.push(`the policy table names ${p}, which the server does not serve`);
  if (problems.length > 0) throw new Error(`policy table and routes disagree:\n- ${problems.join("\n- ")}`);
}
