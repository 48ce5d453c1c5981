/**
 * What every tool receives besides its input. Tools are `(ctx, input) → result` or
 * `(ctx, input) → AsyncIterable<event>`, registered by tool name in registry.ts; the service
 * builds the context once per call. Later steps add the caller (principal) and the session here.
 */
import type { PortExposures } from "../ports/exposures.ts";
import type { AgentTypeBinding, WorkspaceHandle } from "../../providers/types.ts";
import type { FileRules } from "../../providers/executor/sensitive-files.ts";
import type { BotIdentity } from "../git/credentials.ts";
import type { ToolLimits } from "./tool-limits.ts";
import type { ProcessTable } from "../processes/process-table.ts";

/** The context of one tool call. */
export interface ToolContext {
  /** The workspace the call runs in, already resolved. */
  workspace: WorkspaceHandle;
  limits: ToolLimits;
  /** The workspace's command policy: bash checks every script against it before anything runs. */
  commands: CommandCheck;
  /**
   * Aborted when the caller cancels, goes away, or the server shuts down: stop at once (a command
   * gets SIGKILL). Not aborted by the protocol deadline, which `deadline` carries instead.
   */
  signal: AbortSignal;
  /**
   * When the call's protocol deadline passes (epoch milliseconds), if the caller set one
   * (`grpc-timeout`, `connect-timeout-ms`). A command is stopped at the deadline like at its own
   * timeout (SIGTERM, then SIGKILL after the grace), and the call ends DEADLINE_EXCEEDED.
   */
  deadline: number | undefined;
  /**
   * Variables every command of the workspace sees (a session's AGENT_TASK_*), under the
   * request's own env.
   */
  env?: Record<string, string>;
  /** What the git tools need besides the workspace (absent for setup commands, which run bash only). */
  git?: GitContext;
  /** Where the call's changes to the workspace's files are tracked for watchers (absent: nowhere). */
  changes?: ChangeTracking;
  /** The server's background processes (absent where none can start: setup commands). */
  processes?: ProcessTable;
  /** The ports exposed through the server's proxy (absent where none can be: setup commands). */
  ports?: PortExposures;
  /** The session the call belongs to ("" for none). */
  sessionId?: string;
  /** The agent type the workspace was made for, as it was then. */
  binding?: AgentTypeBinding;
}

/**
 * How a call tells the change tracking (audit/file-changes.ts) what it does to the workspace's
 * files: a command's changes are found by a scan after it, a file tool's are reported by the tool.
 */
export interface ChangeTracking {
  /**
   * Called once a command was admitted, just before it runs; resolves when it may run (a scan still
   * going in the workspace, or its first snapshot, is finished first). Call the function it returns
   * once the command has ended, however it ended.
   */
  commandStarting(): Promise<() => void>;
  /** Runs a file tool's change of `rel` (workspace-relative), so that no scan reports it again. */
  fileChange<T>(rel: string, change: () => Promise<T>): Promise<T>;
}

/** What the bash tool asks of a command policy (security/command-policy.ts). */
export interface CommandCheck {
  /** Resolves when `script` may run; throws COMMAND_NOT_ALLOWED otherwise. */
  enforce(script: string, env?: Record<string, string>, workdir?: string): Promise<void>;
}

/** The command policy of a workspace made for `binding` (none: made without an agent type). */
export type CommandPolicyOf = (binding: AgentTypeBinding | undefined) => CommandCheck;

/** What a push did. */
export interface PushResult {
  branch: string;
  commit: string;
  repositoryUrl: string;
  created: boolean;
  commitsPushed: number;
}

/** The git tools' view of the server: identity, the agent type's file rules, the push path. */
export interface GitContext {
  /** The bot identity (looked up once from a GitHub App, or the server's configured one). */
  identity(): Promise<BotIdentity>;
  /** Sensitive-file patterns the workspace's agent type adds to the server's. */
  fileRules: FileRules | undefined;
  /** Pushes `branch` of the workspace (already validated and checked out or named) to its repository. */
  push(ctx: ToolContext, request: { branch: string; force: boolean }): Promise<PushResult>;
}

/** Milliseconds left before the deadline (at least 1), or undefined without one. */
export function remainingMs(ctx: ToolContext): number | undefined {
  return ctx.deadline === undefined ? undefined : Math.max(1, ctx.deadline - Date.now());
}
