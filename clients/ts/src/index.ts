/**
 * @agent-workspace/client — the TypeScript client of agent-workspace.
 *
 * ```ts
 * const aw = new AgentWorkspace({ url: "http://127.0.0.1:8080", apiKey: process.env.AW_KEY });
 * const session = await aw.startSession({ agentType: "coder" });
 * await session.ready();
 * for await (const { stream, text } of session.workspace.streamBash("npm test")) process[stream].write(text);
 * await session.end();
 * ```
 */
export { AgentWorkspace, type AgentWorkspaceOptions, type Init, type Protocol } from "./client.ts";
export { Workspace, type GitTools, type GrepSummary, type ToolInput } from "./workspace.ts";
export type * from "./workspace.ts";
export { Session, SessionDegradedError, type ReadyOptions } from "./session.ts";
export { BashStream, type BashChunk, type BashOutput } from "./bash-stream.ts";
export type { CallOptions, RetryOptions } from "./call.ts";
export { AgentWorkspaceError, DeadlineExceededError, UnavailableError, type AgentWorkspaceErrorInit } from "./error-base.ts";
export * from "./error-classes.ts";
export { toAgentWorkspaceError } from "./errors.ts";
export { Code } from "@connectrpc/connect";
/** The generated messages and enums, for types and values the helpers return. */
export * from "../gen/agentworkspace/v1/audit_pb.js";
export * from "../gen/agentworkspace/v1/config_pb.js";
export * from "../gen/agentworkspace/v1/errors_pb.js";
export * from "../gen/agentworkspace/v1/git_pb.js";
export * from "../gen/agentworkspace/v1/process_pb.js";
export * from "../gen/agentworkspace/v1/tool_pb.js";
export * from "../gen/agentworkspace/v1/workspace_pb.js";
/** The `Workspace` and `Session` messages, named apart from the handle classes above. */
export type { Workspace as WorkspaceInfo, Session as SessionInfo } from "../gen/agentworkspace/v1/workspace_pb.js";
