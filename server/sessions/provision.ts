/**
 * Makes a ready workspace from an agent type's configuration, for a session or for a warm pool,
 * reporting each stage as it starts and ends:
 *
 * 1. sandbox: the workspace manager creates the workspace through a provider;
 * 2. clone: the repository, if any, is cloned on the server's side and checked out inside;
 * 3. setup commands, in order, in /workspace, each bounded by the agent type's setup timeout.
 *
 * A failure of 1 or 2 (provider unavailable, image missing, clone failure) undoes the workspace
 * and tries once more with the fallback provider; if that fails too, provisioning fails with the
 * cause. A setup command that exits non-zero or times out is not a failure: the rest are skipped
 * and the workspace is ready with a warning (the seed's "ready with a warning about partial
 * setup").
 */
import { DomainError } from "../../core/errors.ts";
import type { HostMount } from "../mounts/host-mounts.ts";
import type { CheckoutInfo, PoolMembership, ProvisioningWarning, WorkspaceSession } from "../../providers/types.ts";
import type { WorkspaceConfig } from "../../gen/agentworkspace/v1/config_pb.js";
import { create } from "@bufbuild/protobuf";
import { GitCheckoutRequestSchema } from "../../gen/agentworkspace/v1/git_pb.js";
import { DEFAULT_SETUP_TIMEOUT_MS } from "../agent-types/validate.ts";
import type { Logger } from "../logger.ts";
import { commandPolicyOf } from "../security/command-policy.ts";
import type { CommandPolicyOf } from "../tools/context.ts";
import { TOOL_REGISTRY } from "../tools/registry.ts";
import type { AuditTrail } from "../audit/audit-trail.ts";
import type { ToolLimits } from "../tools/tool-limits.ts";
import type { WorkspaceManager } from "../workspace-manager.ts";
import { type CloneSettings, type CloneTarget, cloneInto, SENSITIVE_LISTED } from "./clone.ts";
import { sealPlaced } from "../git/seal-placed.ts";
import type { SessionEvent } from "./session.ts";

/** What to build. */
export interface BuildSpec {
  agentType: string;
  /** The agent type's workspace configuration, as it was when provisioning began. */
  config: WorkspaceConfig;
  /** The provider to try first, then the fallback ("" for none). */
  provider: string;
  fallbackProvider: string;
  /** The repository to clone; undefined for an empty /workspace. */
  target: CloneTarget | undefined;
  labels: Record<string, string>;
  session?: WorkspaceSession;
  pool?: PoolMembership;
  /** Variables setup commands see (AGENT_TASK_*). */
  env: Record<string, string>;
  /** The session's own host mounts (the agent type's are added by the workspace manager). */
  mounts?: HostMount[];
}

/** What was built. */
export interface BuildResult {
  workspaceId: string;
  provider: string;
  checkout: CheckoutInfo | undefined;
  warnings: ProvisioningWarning[];
}

/** Provisioning failed on every provider; the message says why. */
export class ProvisioningFailed extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ProvisioningFailed";
  }
}

/** Receives the stage events of a build (without their time, which the receiver adds). */
export type StageSink = (ev: DistributiveOmit<SessionEvent, "time">) => void;
type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;

/** Dependencies of the provisioner. */
export interface ProvisionerOptions {
  workspaces: WorkspaceManager;
  clone: CloneSettings;
  toolLimits: ToolLimits;
  logger: Logger;
  /** The audit trail, which records every setup command. */
  audit?: Pick<AuditTrail, "beginInternal">;
  /** The command policy of a workspace's agent type (default: the parser's, commandPolicyOf). */
  commandPolicy?: CommandPolicyOf;
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Builds workspaces. */
export class Provisioner {
  readonly #o: ProvisionerOptions;

  constructor(options: ProvisionerOptions) {
    this.#o = options;
  }

  /** Builds a workspace for `spec`; throws ProvisioningFailed, or the abort reason. */
  async build(spec: BuildSpec, emit: StageSink, signal: AbortSignal): Promise<BuildResult> {
    const providers = [spec.provider];
    if (spec.fallbackProvider !== "" && spec.fallbackProvider !== spec.provider) providers.push(spec.fallbackProvider);
    const warnings: ProvisioningWarning[] = [];
    let lastError: unknown;
    for (const [i, provider] of providers.entries()) {
      if (i > 0) {
        const w: ProvisioningWarning = { stage: "sandbox", message: `Provider '${providers[i - 1]}' failed (${messageOf(lastError)}); using the fallback provider '${provider}'`, command: "", exitCode: 0, timedOut: false };
        warnings.push(w);
        emit({ type: "warning", warning: w });
      }
      const made = await this.#attempt(spec, provider, emit, signal).catch((err: unknown) => {
        if (signal.aborted) throw signal.reason;
        lastError = err;
        this.#o.logger.warn("provisioning failed", { agent_type: spec.agentType, session_id: spec.session?.id, provider, error: messageOf(err) });
        return undefined;
      });
      if (made === undefined) continue;
      for (const w of made.checkoutWarnings) {
        const warning: ProvisioningWarning = { stage: "clone", message: w, command: "", exitCode: 0, timedOut: false };
        warnings.push(warning);
        emit({ type: "warning", warning });
      }
      try {
        // What the clone put in place is sealed before any command runs, what setup commands put
        // there before the agent comes (their never-read files are swept after each already).
        const handle = await this.#o.workspaces.handle(made.workspaceId);
        if (made.checkout) await sealPlaced(handle, this.#o.workspaces.find(made.workspaceId)?.agentType?.sensitiveFiles, signal);
        warnings.push(...(await this.#setup(spec, made.workspaceId, emit, signal)));
        await handle.seal?.();
      } catch (err) {
        await this.discard(made.workspaceId);
        throw err;
      }
      return { workspaceId: made.workspaceId, provider, checkout: made.checkout, warnings };
    }
    throw new ProvisioningFailed(`The workspace could not be provisioned: ${messageOf(lastError)}`, { cause: lastError });
  }

  /** Removes a workspace a build made, logging (never throwing) a failure. */
  async discard(workspaceId: string): Promise<void> {
    await this.#o.workspaces.delete(workspaceId).catch((err: unknown) => {
      if (err instanceof DomainError && err.reason === "WORKSPACE_NOT_FOUND") return;
      this.#o.logger.warn("removing a workspace after failed provisioning failed", { workspace_id: workspaceId, error: messageOf(err) });
    });
  }

  /** Sandbox and clone on one provider; the workspace is undone if the clone fails. */
  async #attempt(spec: BuildSpec, provider: string, emit: StageSink, signal: AbortSignal) {
    let began = Date.now();
    emit({ type: "stage_started", stage: "sandbox", detail: provider, index: 0 });
    let workspaceId: string;
    try {
      const view = await this.#o.workspaces.create({
        provider,
        labels: spec.labels,
        limits: { cpu: "", memory: "", disk: "", pids: 0 },
        image: "",
        agentType: spec.agentType,
        session: spec.session,
        pool: spec.pool,
        ...(spec.mounts ? { mounts: spec.mounts } : {}),
      });
      workspaceId = view.record.id;
    } catch (err) {
      emit({ type: "stage_ended", stage: "sandbox", index: 0, ok: false, exitCode: 0, timedOut: false, durationMs: Date.now() - began, message: messageOf(err) });
      throw err;
    }
    emit({ type: "stage_ended", stage: "sandbox", index: 0, ok: true, exitCode: 0, timedOut: false, durationMs: Date.now() - began, message: "" });
    if (signal.aborted) {
      await this.discard(workspaceId);
      throw signal.reason;
    }
    if (spec.target === undefined) return { workspaceId, checkout: undefined, checkoutWarnings: [] as string[] };
    began = Date.now();
    emit({ type: "stage_started", stage: "clone", detail: spec.target.url, index: 0 });
    try {
      const handle = await this.#o.workspaces.handle(workspaceId);
      const rules = this.#o.workspaces.find(workspaceId)?.agentType?.sensitiveFiles;
      // The clone is a tool operation of the server's, in the audit trail like a setup command.
      const audited = this.#o.audit?.beginInternal({ tool: "git", procedure: "clone", request: create(GitCheckoutRequestSchema, { branch: spec.target.branch }), workspaceId, sessionId: spec.session?.id ?? "", agentType: spec.agentType });
      let out;
      try {
        out = await cloneInto(handle, spec.target, this.#o.clone, (data, stderr) => emit({ type: "output", stage: "clone", index: 0, data, stderr }), signal, rules);
      } catch (err) {
        audited?.end({}, err);
        throw err;
      }
      audited?.end({
        repository: out.repositoryUrl,
        commit: out.commit,
        sensitive_tracked: out.sensitive.tracked.length,
        sensitive_history: out.sensitive.history.length,
        ...(out.sensitive.history.length > 0 ? { sensitive_history_paths: out.sensitive.history.slice(0, 20).join(",") } : {}),
      });
      emit({ type: "stage_ended", stage: "clone", index: 0, ok: true, exitCode: 0, timedOut: false, durationMs: Date.now() - began, message: "" });
      const history = out.sensitive.history;
      const warnings = [...out.warnings];
      if (history.length > 0) {
        const listed = history.slice(0, 5).join(", ") + (history.length > 5 ? `, and ${history.length >= SENSITIVE_LISTED ? "more" : history.length - 5 + " more"}` : "");
        warnings.push(
          `The repository's history holds ${history.length >= SENSITIVE_LISTED ? `at least ${history.length}` : history.length} file(s) the sensitive-file rules name (${listed}): the workspace seals the checked-out ones, but any command that can run git can read every version from the history (git show REV:PATH). Rotate those secrets and remove them from the history`,
        );
      }
      return {
        workspaceId,
        checkout: { repositoryUrl: out.repositoryUrl, branch: out.branch, commit: out.commit },
        checkoutWarnings: warnings,
      };
    } catch (err) {
      emit({ type: "stage_ended", stage: "clone", index: 0, ok: false, exitCode: 0, timedOut: false, durationMs: Date.now() - began, message: messageOf(err) });
      await this.discard(workspaceId);
      throw err;
    }
  }

  /** Runs the setup commands in order; the first failure or timeout skips the rest, with a warning. */
  async #setup(spec: BuildSpec, workspaceId: string, emit: StageSink, signal: AbortSignal): Promise<ProvisioningWarning[]> {
    const commands = spec.config.setupCommands;
    if (commands.length === 0) return [];
    const timeoutMs = Number(spec.config.setupCommandTimeoutMs) || DEFAULT_SETUP_TIMEOUT_MS;
    const workspace = await this.#o.workspaces.handle(workspaceId);
    const limits = { ...this.#o.toolLimits, defaultTimeoutMs: timeoutMs, maxTimeoutMs: timeoutMs };
    // Setup commands pass the same command policy as the agent's own.
    const policy = (this.#o.commandPolicy ?? commandPolicyOf)(this.#o.workspaces.find(workspaceId)?.agentType);
    for (const [index, command] of commands.entries()) {
      const began = Date.now();
      emit({ type: "stage_started", stage: "setup_command", detail: command, index });
      let exit: { exitCode: number; timedOut: boolean; signal: string } | undefined;
      let failure = "";
      // A setup command is a tool operation like any other: it is in the audit trail.
      const audited = this.#o.audit?.beginInternal({ tool: "bash", procedure: "setup_command", request: { command, workdir: "", timeoutMs: BigInt(timeoutMs), env: {} }, workspaceId, sessionId: spec.session?.id ?? "", agentType: spec.agentType });
      let caught: unknown;
      try {
        const events = TOOL_REGISTRY.bash.streamBash({ workspace, limits, commands: policy, signal, deadline: undefined, env: spec.env }, { command, workdir: "", timeoutMs, env: {}, maxOutputBytes: 0 });
        for await (const ev of events) {
          if (ev.type === "stdout" || ev.type === "stderr") emit({ type: "output", stage: "setup_command", index, data: ev.data, stderr: ev.type === "stderr" });
          else if (ev.type === "exited") exit = ev.exit;
        }
      } catch (err) {
        caught = err;
        if (!signal.aborted) failure = messageOf(err);
      }
      const stopped = signal.aborted ? new DomainError("CANCELLED", "Provisioning was stopped") : undefined;
      audited?.end(exit ? { exit_code: exit.exitCode, ...(exit.timedOut ? { timed_out: true } : {}), ...(exit.signal ? { signal: exit.signal } : {}) } : {}, stopped ?? caught);
      if (signal.aborted) throw signal.reason;
      const durationMs = Date.now() - began;
      const ok = failure === "" && exit !== undefined && exit.exitCode === 0 && !exit.timedOut;
      const exitCode = exit?.exitCode ?? -1;
      const timedOut = exit?.timedOut ?? false;
      const why = failure !== "" ? failure : timedOut ? `timed out after ${timeoutMs} ms and was killed` : `exited with ${exitCode}${exit?.signal ? ` (${exit.signal})` : ""}`;
      emit({ type: "stage_ended", stage: "setup_command", index, ok, exitCode: timedOut ? -1 : exitCode, timedOut, durationMs, message: ok ? "" : why });
      if (ok) continue;
      const skipped = commands.length - index - 1;
      const warning: ProvisioningWarning = {
        stage: "setup_command",
        message: `Setup command ${index + 1} of ${commands.length} '${command.slice(0, 200)}' ${why}; ${skipped === 0 ? "it was the last one" : `the remaining ${skipped} were skipped`} (partial setup)`,
        command,
        exitCode: timedOut ? -1 : exitCode,
        timedOut,
      };
      emit({ type: "warning", warning });
      this.#o.logger.warn(timedOut ? "setup command timed out; workspace ready with a partial setup" : "setup command failed; workspace ready with a partial setup", {
        agent_type: spec.agentType,
        session_id: spec.session?.id,
        workspace_id: workspaceId,
        command_index: index,
        exit_code: exitCode,
        timed_out: timedOut,
        timeout_ms: timeoutMs,
      });
      return [warning];
    }
    return [];
  }
}
