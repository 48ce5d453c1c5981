/**
 * Validation of agent types, shared by ConfigService, the REST paths and the agent-types file:
 * one function decides what a valid workspace configuration is and returns it in canonical form
 * (defaults written out, tools de-duplicated), so what is stored is what GET shows. Every
 * refusal is INVALID_ARGUMENT (or UNKNOWN_TOOL / UNKNOWN_PROVIDER) naming the offending field in
 * its metadata under "field".
 */
import { create } from "@bufbuild/protobuf";
import {
  type CommandPolicy,
  CommandPolicySchema,
  type SensitiveFiles,
  SensitiveFilesSchema,
  type WorkspaceConfig,
  WorkspaceConfigSchema,
} from "../../gen/agentworkspace/v1/config_pb.js";
import { DomainError } from "../../core/errors.ts";
import { parseRule } from "../egress/destinations.ts";
import { mountRootProblem } from "../mounts/host-mounts.ts";
import { ruleProblem } from "../security/command-policy.ts";
import { checkDigestText, MAX_DIGESTS_PER_SESSION, sectionKeyOf } from "../sessions/digests.ts";
import { MIN_DISK_BYTES, MIN_MEMORY_BYTES, parseCpu, sizeLimit } from "../workspace-limits.ts";

/** What validation needs to know about this server. */
export interface ValidationContext {
  /** Every tool name an agent type may list. */
  tools: readonly string[];
  /** The providers this server has. */
  providers: readonly string[];
  /** Whether the operator set aside a network for egress. */
  egressAllowed: boolean;
  /** The server's largest command timeout, in milliseconds. */
  maxTimeoutMs: number;
  /** Canonical directories host mounts may come from (AGENT_WORKSPACE_ALLOWED_HOST_ROOTS); empty allows none. */
  mountRoots: readonly string[];
}

export const REPO_SOURCE_TYPES = ["none", "fixed", "task_context"] as const;
export const NETWORK_MODES = ["none", "allowlist", "open"] as const;
/** Most entries of network.allow. */
const MAX_ALLOW_RULES = 200;
/** Default of setup_command_timeout_ms (the seed's five minutes). */
export const DEFAULT_SETUP_TIMEOUT_MS = 5 * 60_000;
const MAX_WARM_POOL = 64;
const MAX_SETUP_COMMANDS = 64;
const MAX_SETUP_COMMAND_BYTES = 16 * 1024;
const ID = /^[a-z0-9][a-z0-9._-]{0,62}$/;

const invalid = (field: string, message: string, extra: Record<string, string> = {}) =>
  new DomainError("INVALID_ARGUMENT", message, { metadata: { field, ...extra } });

/** Quotes a caller-supplied value for a message, bounded. */
const shown = (v: string) => `'${v.slice(0, 100)}'`;

/** Checks an agent type id. */
export function validateAgentTypeId(id: string, field = "id"): void {
  if (!ID.test(id)) {
    throw invalid(field, `Agent type id ${shown(id)} is not valid: 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit`);
  }
}

/**
 * Checks a repository URL: https, http, ssh and git URLs, and scp-like `user@host:path`. Never a
 * local path, `file://`, or a remote helper (`ext::sh -c …` runs a command), and never one
 * carrying a password: credentials are the server's to add, not stored where GET shows them.
 */
export function validateRepoUrl(url: string, field: string): void {
  // scp-like user@host:path; neither user nor host may start with "-", which ssh would read as an option.
  if (/^[A-Za-z0-9_][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9.-]*:(?!\/\/)[^\s]+$/.test(url)) return;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalid(field, `${field} ${shown(url)} is not a URL; use https://, http://, ssh://, git:// or user@host:path`);
  }
  if (!["https:", "http:", "ssh:", "git:"].includes(parsed.protocol)) {
    throw invalid(field, `${field} must use https, http, ssh or git; got ${shown(parsed.protocol.replace(/:$/, ""))}`);
  }
  if (parsed.hostname === "") throw invalid(field, `${field} ${shown(url)} names no host`);
  if (parsed.hostname.startsWith("-") || decodeURIComponent(parsed.username).startsWith("-")) {
    throw invalid(field, `${field} must not have a host or user starting with '-' (ssh would read it as an option)`);
  }
  if (parsed.password !== "") {
    throw invalid(field, `${field} must not carry a password; credentials are configured on the server, never in an agent type`);
  }
  if (/\s/.test(url)) throw invalid(field, `${field} must not contain whitespace`);
}

/** A branch name git would accept, which can never be read as an option. */
export function validateBranch(branch: string, field: string): void {
  const bad =
    branch.length > 255 ||
    branch.startsWith("-") ||
    branch.startsWith("/") ||
    branch.endsWith("/") ||
    branch.endsWith(".") ||
    branch.endsWith(".lock") ||
    branch.includes("..") ||
    branch.includes("//") ||
    branch.includes("@{") ||
    !/^[A-Za-z0-9._\/-]+$/.test(branch);
  if (bad) throw invalid(field, `${field} ${shown(branch)} is not a valid branch name`);
}

function validateImage(image: string, field: string): void {
  if (image.length > 255 || !/^[a-z0-9][a-z0-9._\/:@-]*$/i.test(image)) {
    throw invalid(field, `${field} ${shown(image)} is not an image reference like debian:bookworm or registry.example/team/image:tag`);
  }
}

function validateTimeout(value: bigint, field: string, max: number): number {
  if (value < 0n || value > BigInt(max)) throw invalid(field, `${field} must be from 0 to ${max} milliseconds`, { max: String(max) });
  return Number(value);
}

/**
 * Validates a workspace configuration (undefined: the default, disabled) and returns its
 * canonical form. Throws the first problem found, field by field in declaration order.
 */
export function normalizeWorkspaceConfig(input: WorkspaceConfig | undefined, ctx: ValidationContext, prefix = ""): WorkspaceConfig {
  const f = (name: string) => `${prefix}${name}`;
  const cfg = input ?? create(WorkspaceConfigSchema, {});

  const type = cfg.repoSource?.type === undefined || cfg.repoSource.type === "" ? "none" : cfg.repoSource.type;
  if (!(REPO_SOURCE_TYPES as readonly string[]).includes(type)) {
    throw invalid(f("repo_source.type"), `Unknown repo_source.type ${shown(type)}; valid types: ${REPO_SOURCE_TYPES.join(", ")}`, { valid: REPO_SOURCE_TYPES.join(",") });
  }
  const url = cfg.repoSource?.url ?? "";
  const branch = cfg.repoSource?.branch ?? "";
  if (type === "fixed" && url === "") throw invalid(f("repo_source.url"), "repo_source.type 'fixed' needs repo_source.url");
  if (type !== "fixed" && url !== "") {
    throw invalid(f("repo_source.url"), `repo_source.url is only used with type 'fixed' (with 'task_context' the task names the repository); got type '${type}'`);
  }
  if (url !== "") validateRepoUrl(url, f("repo_source.url"));
  if (branch !== "") validateBranch(branch, f("repo_source.branch"));

  const tools = [...new Set(cfg.tools)];
  const unknown = tools.filter((t) => !ctx.tools.includes(t));
  if (unknown.length > 0) {
    throw new DomainError(
      "UNKNOWN_TOOL",
      `Invalid tool names: ${unknown.map((t) => `'${t.slice(0, 50)}'`).join(", ")}. Valid tools: ${ctx.tools.join(", ")}`,
      { metadata: { field: f("tools"), invalid: unknown.map((t) => t.slice(0, 50)).join(","), valid: ctx.tools.join(",") } },
    );
  }

  const limits = cfg.resourceLimits;
  if (limits) {
    if (limits.cpu.trim() !== "") parseCpu(limits.cpu, f("resource_limits.cpu"));
    // The same minimums as a request's: "0" would read as "no limit", which only the operator may choose.
    if (limits.memory.trim() !== "") sizeLimit(limits.memory, f("resource_limits.memory"), MIN_MEMORY_BYTES);
    if (limits.disk.trim() !== "") sizeLimit(limits.disk, f("resource_limits.disk"), MIN_DISK_BYTES);
    if (limits.pids < 0n || limits.pids > 4_194_304n) throw invalid(f("resource_limits.pids"), "resource_limits.pids must be from 0 to 4194304");
  }

  if (cfg.baseImage !== "") validateImage(cfg.baseImage, f("base_image"));
  if (cfg.setupCommands.length > MAX_SETUP_COMMANDS) throw invalid(f("setup_commands"), `setup_commands may hold at most ${MAX_SETUP_COMMANDS} commands`);
  cfg.setupCommands.forEach((c, i) => {
    if (c.trim() === "") throw invalid(f(`setup_commands[${i}]`), `setup_commands[${i}] is empty`);
    if (Buffer.byteLength(c) > MAX_SETUP_COMMAND_BYTES || c.includes("\0")) {
      throw invalid(f(`setup_commands[${i}]`), `setup_commands[${i}] must be at most ${MAX_SETUP_COMMAND_BYTES} bytes without NUL characters`);
    }
  });

  const policy = normalizeCommandPolicy(cfg.commandPolicy, f);
  const files = normalizeSensitiveFiles(cfg.sensitiveFiles, f);
  if (cfg.mounts.length > 32) throw invalid(f("mounts"), "mounts may hold at most 32 host mounts");
  cfg.mounts.forEach((m, i) => {
    const mf = (name: string) => f(`mounts[${i}].${name}`);
    if (m.hostPath.trim() === "" || m.hostPath.includes("\0")) throw invalid(mf("host_path"), `mounts[${i}].host_path is required`);
    if (m.hostPath.split("/").includes("..")) throw invalid(mf("host_path"), `mounts[${i}].host_path may not contain '..'`);
    const problem = mountRootProblem(m.hostPath, m.followSymlinks, ctx.mountRoots);
    if (problem !== undefined) {
      throw invalid(mf("host_path"), `mounts[${i}].host_path ${shown(m.hostPath)} cannot be mounted on this server: ${problem}`, { host_path: m.hostPath.slice(0, 300) });
    }
    if (m.maxBytes < 0n) throw invalid(mf("max_bytes"), `mounts[${i}].max_bytes must not be negative`);
    const target = m.mountPath.trim() !== "" ? m.mountPath : m.hostPath.split("/").filter((x) => x !== "").at(-1) ?? "";
    if (target.startsWith("/") ? !target.startsWith("/workspace") : target.split("/").includes("..")) throw invalid(mf("mount_path"), `mounts[${i}].mount_path must stay inside the workspace`);
    for (const g of [...m.includeGlob, ...m.excludeGlob]) if (g.trim() === "") throw invalid(mf("include_glob"), `mounts[${i}]: glob patterns may not be empty`);
  });
  if (cfg.digestOverrides.length > MAX_DIGESTS_PER_SESSION) throw invalid(f("digest_overrides"), `digest_overrides may hold at most ${MAX_DIGESTS_PER_SESSION} digests`);
  const digestKeys = new Set<string>();
  const digestOverrides = cfg.digestOverrides.map((d, i) => {
    const key = sectionKeyOf(d.sectionKey, f(`digest_overrides[${i}].section_key`));
    if (digestKeys.has(key)) throw invalid(f(`digest_overrides[${i}].section_key`), `digest_overrides[${i}].section_key '${key}' appears twice`);
    digestKeys.add(key);
    checkDigestText(d.summary, d.body, f(`digest_overrides[${i}]`));
    return { sectionKey: key, summary: d.summary, body: d.body };
  });
  const protectedBranches = [...new Set((cfg.git?.protectedBranches ?? []).map((p) => p.trim()))];
  if (protectedBranches.length > MAX_POLICY_ENTRIES) throw invalid(f("git.protected_branches"), `git.protected_branches may hold at most ${MAX_POLICY_ENTRIES} patterns`);
  protectedBranches.forEach((p, i) => {
    if (!/^[A-Za-z0-9._\/*-]{1,255}$/.test(p)) {
      throw invalid(f(`git.protected_branches[${i}]`), `git.protected_branches[${i}] ${shown(p)} must be a branch name or pattern of letters, digits, '.', '_', '-', '/' and '*'`);
    }
  });

  for (const [name, value] of [["provider", cfg.provider], ["fallback_provider", cfg.fallbackProvider]] as const) {
    if (value !== "" && !ctx.providers.includes(value)) {
      throw new DomainError("UNKNOWN_PROVIDER", `Provider ${shown(value)} is not configured on this server; available: ${ctx.providers.join(", ")}`, {
        metadata: { field: f(name), provider: value.slice(0, 50), available: ctx.providers.join(",") },
      });
    }
  }
  if (cfg.fallbackProvider !== "" && cfg.fallbackProvider === cfg.provider) {
    throw invalid(f("fallback_provider"), "fallback_provider must differ from provider");
  }

  const runtimeClass = cfg.runtimeClass ?? "";
  if (runtimeClass !== "" && (runtimeClass.length > 253 || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(runtimeClass))) {
    throw invalid(f("runtime_class"), `runtime_class ${shown(runtimeClass)} must be a DNS subdomain name: lower-case letters, digits, '-' and '.', at most 253 characters`);
  }
  const engineLabels = Object.entries(cfg.engineLabels ?? {});
  if (engineLabels.length > 16) throw invalid(f("engine_labels"), "engine_labels may hold at most 16 labels");
  for (const [k, v] of engineLabels) {
    if (!/^[a-z0-9][a-z0-9._-]{0,62}$/.test(k) || !/^[a-z0-9][a-z0-9._-]{0,62}$/.test(v)) {
      throw invalid(f(`engine_labels.${k.slice(0, 63)}`), `engine_labels: ${shown(k)}: ${shown(v)} must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit`);
    }
  }

  const written = cfg.network?.mode === undefined || cfg.network.mode === "" ? "none" : cfg.network.mode;
  // "egress" is the former name of "open".
  const mode = written === "egress" ? "open" : written;
  if (!(NETWORK_MODES as readonly string[]).includes(mode)) {
    throw invalid(f("network.mode"), `Unknown network.mode ${shown(mode)}; valid modes: ${NETWORK_MODES.join(", ")}`, { valid: NETWORK_MODES.join(",") });
  }
  if (mode === "open" && !ctx.egressAllowed) {
    throw invalid(f("network.mode"), "network.mode 'open' is not allowed on this server: its operator set no egress network (AGENT_WORKSPACE_EGRESS_NETWORK); 'allowlist' needs none");
  }
  if (mode === "open" && (cfg.provider === "gvisor" || cfg.fallbackProvider === "gvisor")) {
    throw invalid(f("network.mode"), "network.mode 'open' is not available on gvisor: its sandboxes run with --network=none on this server; use 'allowlist', which needs no network");
  }
  const allow = [...(cfg.network?.allow ?? [])].map((r) => r.trim());
  if (allow.length > 0 && mode !== "allowlist") throw invalid(f("network.allow"), "network.allow is for network.mode 'allowlist' only");
  if (allow.length > MAX_ALLOW_RULES) throw invalid(f("network.allow"), `network.allow holds at most ${MAX_ALLOW_RULES} entries`);
  allow.forEach((r, i) => parseRule(r, f(`network.allow[${i}]`)));

  // A memory workspace runs no processes: no clone, no setup command and no network could ever
  // happen in it, so an agent type asking for them there is refused rather than always degraded.
  if (cfg.provider === "memory") {
    const needs: Array<[boolean, string, string]> = [
      [type !== "none", "repo_source.type", `repo_source.type '${type}'`],
      [cfg.setupCommands.length > 0, "setup_commands", "setup_commands"],
      [mode !== "none", "network.mode", `network.mode '${mode}'`],
    ];
    for (const [asked, field, what] of needs) {
      if (asked) throw invalid(f(field), `${what} needs a provider that runs processes; the 'memory' provider runs none (use local, docker or gvisor)`);
    }
  }

  if (cfg.warmPoolSize < 0 || cfg.warmPoolSize > MAX_WARM_POOL) throw invalid(f("warm_pool_size"), `warm_pool_size must be from 0 to ${MAX_WARM_POOL}`);
  const maxTimeout = validateTimeout(cfg.maxCommandTimeoutMs, f("max_command_timeout_ms"), ctx.maxTimeoutMs);
  const defaultTimeout = validateTimeout(cfg.defaultCommandTimeoutMs, f("default_command_timeout_ms"), maxTimeout || ctx.maxTimeoutMs);
  validateTimeout(cfg.setupCommandTimeoutMs, f("setup_command_timeout_ms"), 24 * 3_600_000);
  validateTimeout(cfg.sessionIdleTimeoutMs, f("session_idle_timeout_ms"), 30 * 24 * 3_600_000);
  validateTimeout(cfg.processIdleTimeoutMs, f("process_idle_timeout_ms"), 30 * 24 * 3_600_000);
  if (cfg.maxProcesses < 0 || cfg.maxProcesses > 1024) throw invalid(f("max_processes"), "max_processes must be from 0 to 1024");
  const pauseAfter = validateTimeout(cfg.pauseAfterIdleMs, f("pause_after_idle_ms"), 365 * 24 * 3_600_000);
  const deleteAfter = validateTimeout(cfg.deleteAfterIdleMs, f("delete_after_idle_ms"), 365 * 24 * 3_600_000);
  if (pauseAfter > 0 && deleteAfter > 0 && deleteAfter <= pauseAfter) throw invalid(f("delete_after_idle_ms"), "delete_after_idle_ms must be longer than pause_after_idle_ms");
  if (maxTimeout !== 0 && maxTimeout < 1000) throw invalid(f("max_command_timeout_ms"), "max_command_timeout_ms must be 0 or at least 1000");
  if (defaultTimeout !== 0 && defaultTimeout < 1000) throw invalid(f("default_command_timeout_ms"), "default_command_timeout_ms must be 0 or at least 1000");

  return create(WorkspaceConfigSchema, {
    enabled: cfg.enabled,
    repoSource: { type, url, branch },
    tools,
    resourceLimits: limits ? { cpu: limits.cpu.trim(), memory: limits.memory.trim(), disk: limits.disk.trim(), pids: limits.pids } : {},
    // Unset follows the repository source: a source that names a repository is there to be cloned.
    checkoutOnStart: cfg.checkoutOnStart ?? type !== "none",
    baseImage: cfg.baseImage,
    setupCommands: [...cfg.setupCommands],
    provider: cfg.provider,
    fallbackProvider: cfg.fallbackProvider,
    network: { mode, allow: [...new Set(allow)] },
    warmPoolSize: cfg.warmPoolSize,
    defaultCommandTimeoutMs: cfg.defaultCommandTimeoutMs,
    maxCommandTimeoutMs: cfg.maxCommandTimeoutMs,
    setupCommandTimeoutMs: cfg.setupCommandTimeoutMs,
    sessionIdleTimeoutMs: cfg.sessionIdleTimeoutMs,
    maxProcesses: cfg.maxProcesses,
    processIdleTimeoutMs: cfg.processIdleTimeoutMs,
    pauseAfterIdleMs: cfg.pauseAfterIdleMs,
    deleteAfterIdleMs: cfg.deleteAfterIdleMs,
    engineLabels: Object.fromEntries(engineLabels),
    runtimeClass,
    commandPolicy: policy,
    sensitiveFiles: files,
    git: { protectedBranches },
    mounts: cfg.mounts.map((m) => ({ ...m })),
    digestOverrides,
  });
}

/** Most rules or patterns one list may hold. */
const MAX_POLICY_ENTRIES = 200;

/** Checks a command policy's default and rules; returns it with rules trimmed and de-duplicated. */
function normalizeCommandPolicy(input: CommandPolicy | undefined, f: (name: string) => string): CommandPolicy {
  const action = input?.defaultAction ?? "";
  if (action !== "" && action !== "allow" && action !== "deny") {
    throw invalid(f("command_policy.default_action"), `command_policy.default_action must be "allow", "deny" or empty; got ${shown(action)}`, { valid: "allow,deny" });
  }
  const lists = { allow: input?.allow ?? [], deny: input?.deny ?? [] };
  for (const [name, rules] of Object.entries(lists)) {
    if (rules.length > MAX_POLICY_ENTRIES) throw invalid(f(`command_policy.${name}`), `command_policy.${name} may hold at most ${MAX_POLICY_ENTRIES} rules`);
    rules.forEach((rule, i) => {
      const problem = ruleProblem(rule);
      if (problem !== undefined) throw invalid(f(`command_policy.${name}[${i}]`), `command_policy.${name}[${i}] ${shown(rule)} ${problem}`);
    });
  }
  const tidy = (rules: string[]) => [...new Set(rules.map((r) => r.trim().split(/\s+/).join(" ")))];
  return create(CommandPolicySchema, { defaultAction: action, allow: tidy(lists.allow), deny: tidy(lists.deny) });
}

/** Checks sensitive-file patterns: relative, no "..", no control characters. */
function normalizeSensitiveFiles(input: SensitiveFiles | undefined, f: (name: string) => string): SensitiveFiles {
  const lists = { deny: input?.deny ?? [], write_protected: input?.writeProtected ?? [] };
  for (const [name, patterns] of Object.entries(lists)) {
    if (patterns.length > MAX_POLICY_ENTRIES) throw invalid(f(`sensitive_files.${name}`), `sensitive_files.${name} may hold at most ${MAX_POLICY_ENTRIES} patterns`);
    patterns.forEach((p, i) => {
      const field = f(`sensitive_files.${name}[${i}]`);
      const t = p.trim();
      if (t === "" || t.length > 200 || /[\u0000-\u001f]/.test(t)) throw invalid(field, `sensitive_files.${name}[${i}] must be 1-200 characters without control characters`);
      if (t.startsWith("/") || t.split("/").includes("..")) throw invalid(field, `sensitive_files.${name}[${i}] ${shown(t)} must be relative to the workspace, without ".."`);
    });
  }
  const tidy = (patterns: string[]) => [...new Set(patterns.map((p) => p.trim()))];
  return create(SensitiveFilesSchema, { deny: tidy(lists.deny), writeProtected: tidy(lists.write_protected) });
}
