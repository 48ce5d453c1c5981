/**
 * What every tool receives besides its input. Tools are `(ctx, input) → result` or
 * `(ctx, input) → AsyncIterable<event>`, registered by tool name in registry.ts; the service
 * builds the context once per call. Later steps add the caller (principal) and the session here.
 */
import type { WorkspaceHandle } from "../../providers/types.ts";
import type { CommandPolicy } from "../security/command-policy.ts";
import type { ToolLimits } from "./tool-limits.ts";

/** The context of one tool call. */
export interface ToolContext {
  /** The workspace the call runs in, already resolved. */
  workspace: WorkspaceHandle;
  limits: ToolLimits;
  /** The workspace's command policy: bash checks every script against it before anything runs. */
  commands: CommandPolicy;
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
}

/** Milliseconds left before the deadline (at least 1), or undefined without one. */
export function remainingMs(ctx: ToolContext): number | undefined {
  return ctx.deadline === undefined ? undefined : Math.max(1, ctx.deadline - Date.now());
}
