/**
 * Server settings: every environment variable and command-line flag is read and validated here,
 * once, at start (flags win over the environment). A bad value stops the server with a
 * SettingsError naming the variable or flag; nothing below `main` reads `process.env`. Every
 * setting has a default that starts a working server with the local provider and no external
 * services. (Per-agent-type configuration is the ConfigService's business, not this module's.)
 */
import { createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { isIP } from "node:net";
import path from "node:path";
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import type { DockerConnection, EngineSettings, ProviderSettings } from "../providers/index.ts";
import type { E2bSettings } from "../providers/e2b.ts";
import type { KubernetesCluster, KubernetesSettings } from "../providers/kubernetes.ts";
import { DomainError } from "../core/errors.ts";
import { LOG_LEVELS, type LogLevel } from "./logger.ts";
import type { GitCredential } from "./sessions/clone.ts";
import type { GitHubAppSettings } from "./git/credentials.ts";
import { parseCidr } from "./egress/destinations.ts";
import type { EgressSettings } from "./egress/egress.ts";
import { DEFAULT_TOOL_LIMITS, type ToolLimits } from "./tools/tool-limits.ts";
import { DEFAULT_LIMITS, defaultCpuLimit, defaultSizeLimit, type LimitStrings, parseSize } from "./workspace-limits.ts";

/** Everything the server is configured with. */
export interface Settings {
  host: string;
  port: number;
  /** TLS certificate and key files (PEM); both empty for plain HTTP. */
  tlsCert: string;
  tlsKey: string;
  /** Providers, the data directory and the container engine. */
  providers: ProviderSettings;
  /** Provider used when a request names none. */
  defaultProvider: string;
  /**
   * Limits a workspace gets when neither its request nor its agent type sets them: DEFAULT_LIMITS
   * unless WORKSPACE_DEFAULT_* say otherwise ("" or 0 when the operator switched one off).
   */
  workspaceDefaults: LimitStrings;
  toolLimits: ToolLimits;
  /** Largest request or response message, in bytes. */
  maxMessageBytes: number;
  /** Response compression offered to clients: "none" (default) or "gzip" (gzip and brotli). */
  compression: "none" | "gzip";
  logLevel: LogLevel;
  /**
   * Operator API keys (bearer tokens). Empty runs the server open: every caller is an operator,
   * which is refused unless the server listens on a loopback address only.
   */
  apiKeys: string[];
  /** A YAML or JSON file of agent types applied at start; "" for none. */
  agentTypesFile: string;
  /**
   * The shared database (AGENT_WORKSPACE_DATABASE_URL, postgres:// or postgresql://); "" for the
   * embedded SQLite store in the data directory. May hold a password: never logged or echoed.
   */
  databaseUrl: string;
  /**
   * The URL other servers sharing the database send a workspace's calls to when this server serves
   * it (AGENT_WORKSPACE_ADVERTISE_URL); "" for the URL the server listens on.
   */
  advertiseUrl: string;
  sessions: SessionSettings;
  processes: ProcessSettings;
  git: GitSettings;
  mounts: MountSettingsInput;
  audit: AuditSettings;
  egress: EgressSettings;
}

/** Where the audit trail goes and how long it is kept. */
export interface AuditSettings {
  /** Records older than this are removed from the database, in milliseconds; 0 keeps them. */
  maxAgeMs: number;
  /** At most this many records are kept (the oldest go first); 0 for no bound. */
  maxRows: number;
  /** Events a WatchEvents stream may hold for a reader that is behind before it drops them. */
  watchBuffer: number;
  /**
   * The bounds of the scan after each watched command (audit/file-changes.ts): entries walked at
   * most, and milliseconds; past either, the command's changes are one tree_changed event.
   */
  changeScan: { maxEntries: number; maxMs: number };
  /** OTLP export, when the standard OTEL_EXPORTER_OTLP_* variables ask for it. */
  otlp: OtlpSettings | undefined;
}

/**
 * An OTLP trace exporter's configuration, from the standard OpenTelemetry variables, parsed here
 * with the SDK's meanings so that nothing below reads the environment (the SDK would otherwise
 * read some of them itself, silently ignoring a malformed one).
 */
export interface OtlpSettings {
  protocol: "http/protobuf" | "grpc";
  /** The full URL: `…/v1/traces` for HTTP, `http(s)://host:port` for gRPC. */
  url: string;
  /** Sent with every export (an API key of the collector, for example); never logged. */
  headers: Record<string, string>;
  timeoutMs: number;
  /** OTEL_EXPORTER_OTLP_(TRACES_)COMPRESSION. */
  compression: "none" | "gzip";
  /**
   * TLS towards the collector, PEM: the CA to trust (OTEL_EXPORTER_OTLP_(TRACES_)CERTIFICATE) and a
   * client certificate with its key (…_CLIENT_CERTIFICATE, …_CLIENT_KEY; both or neither).
   */
  tls: { ca?: string; cert?: string; key?: string };
  /** `service.name` of the exported resource. */
  serviceName: string;
  /** OTEL_RESOURCE_ATTRIBUTES (service.name is serviceName's, whatever they say). */
  resourceAttributes: Record<string, string>;
  /** The batch span processor's OTEL_BSP_* settings. */
  batch: BatchSettings;
}

/** How spans are batched for export (OTEL_BSP_*). */
export interface BatchSettings {
  /** Longest a finished span waits before its batch is sent, in milliseconds. */
  scheduledDelayMs: number;
  /** Longest one export may take, in milliseconds. */
  exportTimeoutMs: number;
  /** Spans waiting for export beyond this are dropped. */
  maxQueueSize: number;
  /** Most spans in one export; never above maxQueueSize. */
  maxExportBatchSize: number;
}

/**
 * Defaults of OTEL_BSP_*. The SDK's are 5000 ms, 30000 ms, 2048 and 512; two differ here, on
 * purpose. The delay is 1 s: spans are the audit trail, and a collector watching for refused or
 * failing calls should see them within a second, which costs at most one export a second and
 * none while idle. The queue holds 8192: the server answers thousands of small tool calls a
 * second, and 2048 spans waiting for one delay would drop records in a burst.
 */
export const DEFAULT_BATCH: BatchSettings = { scheduledDelayMs: 1000, exportTimeoutMs: 30_000, maxQueueSize: 8192, maxExportBatchSize: 512 };

/** How sessions and warm pools run. */
export interface SessionSettings {
  /** Idle timeout of sessions whose agent type sets none, in milliseconds; 0 for none. */
  idleTimeoutMs: number;
  /** Warm-pool fills running at once, over all agent types. */
  poolConcurrency: number;
  /** How often idle sessions are looked for and pools refilled, in milliseconds. */
  tickMs: number;
}

/** Bounds of background processes (ProcessService), per workspace. */
export interface ProcessSettings {
  /** Processes running at once. */
  maxRunning: number;
  /** Bytes of output kept per stream of one process (the ring). */
  ringBytes: number;
  /** Bytes of output kept for all of a workspace's processes (each kept one reserves two rings). */
  maxBufferedBytes: number;
  /** Idle time after which a workspace's processes are ended when its agent type sets none, in ms; 0 for none. */
  idleTimeoutMs: number;
}

/** How the server clones repositories into workspaces. */
export interface GitSettings {
  /** A token per git host (URL host, with its port if it has one). */
  credentials: Map<string, GitCredential>;
  cloneTimeoutMs: number;
  cloneMaxBytes: number;
  /** The commit identity without a GitHub App (with one, the app's bot account). */
  botName: string;
  botEmail: string;
  /** Push credentials from a GitHub App, for its hosts. */
  githubApp: GitHubAppSettings | undefined;
  /** How long one GitPush may take, in milliseconds. */
  pushTimeoutMs: number;
  /** A push mirror no push used for this long is deleted, in milliseconds (0 keeps mirrors forever). */
  mirrorMaxIdleMs: number;
}

/** Where host mounts may come from. */
export interface MountSettingsInput {
  /** Absolute directories (made canonical at start); empty refuses every mount. */
  allowedRoots: string[];
  /** The most one mount may copy, in bytes. */
  maxBytes: number;
}

/** AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: addresses and CIDR ranges, comma-separated. */
function privateAllow(value: string | undefined): string[] {
  const name = "AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW";
  return (value ?? "")
    .split(",")
    .map((v) => v.trim())
    .filter((v) => v !== "")
    .map((v) => {
      const range = parseCidr(v.replace(/^\[|\](?=\/|$)/g, ""), true);
      if (!range) throw new SettingsError(`${name}: '${v.slice(0, 100)}' is not an address or address/prefix`);
      return `${range.address}/${range.prefix}`;
    });
}

/** AGENT_WORKSPACE_EGRESS_HOSTS: `name=address` pairs, comma-separated. */
function egressHosts(value: string | undefined): Map<string, string> {
  const name = "AGENT_WORKSPACE_EGRESS_HOSTS";
  const out = new Map<string, string>();
  for (const pair of (value ?? "").split(",").map((v) => v.trim()).filter((v) => v !== "")) {
    const eq = pair.indexOf("=");
    const host = pair.slice(0, eq).trim().toLowerCase();
    const address = pair.slice(eq + 1).trim();
    if (eq <= 0 || !/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(host) || isIP(address) === 0) {
      throw new SettingsError(`${name}: '${pair.slice(0, 100)}' is not name=address`);
    }
    out.set(host, address);
  }
  return out;
}

/** A setting that cannot be used; the message names the variable or flag and what it accepts. */
export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SettingsError";
  }
}

/**
 * Reads the file a secret-bearing setting names. A setting that takes a path is sometimes given
 * the secret itself (a key pasted where its file belongs), so a failure names the setting and the
 * error code, never the value.
 */
function readSecretFile(file: string, name: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "error";
    throw new SettingsError(`${name} must name a readable file (${code}); the value is not shown, in case it is a secret rather than a path`);
  }
}

/**
 * The e2b provider's settings: on when E2B_API_KEY is set. The URLs are for a self-hosted E2B or a
 * local stand-in (the SDK's own defaults otherwise); the key is a secret, never shown.
 */
function e2bSettings(env: Record<string, string | undefined>): E2bSettings | undefined {
  const apiKey = (env.E2B_API_KEY ?? "").trim();
  const url = (name: string): string => {
    const value = read(env, name) ?? "";
    if (value === "") return "";
    let u: URL;
    try {
      u = new URL(value);
    } catch {
      throw new SettingsError(`${name} must be an http(s) URL`);
    }
    if (u.protocol !== "https:" && u.protocol !== "http:") throw new SettingsError(`${name} must be an http(s) URL`);
    if (u.username !== "" || u.password !== "") throw new SettingsError(`${name} must not carry credentials (the API key is E2B_API_KEY)`);
    return value.replace(/\/+$/, "");
  };
  const settings: E2bSettings = {
    apiKey,
    domain: read(env, "AGENT_WORKSPACE_E2B_DOMAIN") ?? "",
    apiUrl: url("AGENT_WORKSPACE_E2B_API_URL"),
    sandboxUrl: url("AGENT_WORKSPACE_E2B_SANDBOX_URL"),
    template: read(env, "AGENT_WORKSPACE_E2B_TEMPLATE") ?? "base",
    timeoutMs: integer(read(env, "AGENT_WORKSPACE_E2B_TIMEOUT_MS"), "AGENT_WORKSPACE_E2B_TIMEOUT_MS", 3_600_000, 10_000, 24 * 3_600_000),
  };
  if (!/^[a-z0-9][a-z0-9._:/-]{0,127}$/i.test(settings.template)) throw new SettingsError("AGENT_WORKSPACE_E2B_TEMPLATE must be an E2B template id or name");
  if (apiKey === "") return undefined;
  if (/\s/.test(apiKey) || apiKey.length < 8) throw new SettingsError("E2B_API_KEY is not an E2B API key (the value is not shown)");
  return settings;
}

/** Providers a request or the default may name. */
export const PROVIDER_NAMES = ["local", "docker", "gvisor", "microvm", "e2b", "kubernetes", "memory"] as const;

/** Command-line flags and the variables they override. */
const FLAGS = {
  host: { type: "string", env: "HOST" },
  port: { type: "string", env: "PORT" },
  "data-dir": { type: "string", env: "AGENT_WORKSPACE_DATA_DIR" },
  "default-provider": { type: "string", env: "AGENT_WORKSPACE_DEFAULT_PROVIDER" },
  "tls-cert": { type: "string", env: "AGENT_WORKSPACE_TLS_CERT" },
  "tls-key": { type: "string", env: "AGENT_WORKSPACE_TLS_KEY" },
  "log-level": { type: "string", env: "AGENT_WORKSPACE_LOG_LEVEL" },
  quiet: { type: "boolean", env: "AGENT_WORKSPACE_QUIET" },
  "api-keys-file": { type: "string", env: "AGENT_WORKSPACE_API_KEYS_FILE" },
  "agent-types": { type: "string", env: "AGENT_WORKSPACE_AGENT_TYPES" },
  "git-credentials": { type: "string", env: "AGENT_WORKSPACE_GIT_CREDENTIALS" },
} as const;

/** Usage text for `agent-workspace serve --help`. */
export const USAGE = `Usage: agent-workspace serve [options]

Options (each also read from the environment variable shown):
  --host HOST               listen address (HOST, default 127.0.0.1)
  --port N                  port, 0 for any free one (PORT, default 8080)
  --data-dir DIR            workspace records and local workspaces (AGENT_WORKSPACE_DATA_DIR, default ./.data)
  --default-provider NAME   local | docker | gvisor | memory (AGENT_WORKSPACE_DEFAULT_PROVIDER, default local)
  --tls-cert FILE --tls-key FILE   serve HTTPS (AGENT_WORKSPACE_TLS_CERT / _KEY)
  --log-level LEVEL         debug | info | warn | error (AGENT_WORKSPACE_LOG_LEVEL, default info)
  --quiet                   same as --log-level warn (AGENT_WORKSPACE_QUIET=1)
  --api-keys-file FILE      operator API keys, one per line (AGENT_WORKSPACE_API_KEYS_FILE;
                            AGENT_WORKSPACE_API_KEYS takes them comma-separated). Without a key
                            the server runs open, and only on a loopback address.
  --agent-types FILE        agent types to create or update at start, YAML or JSON
                            (AGENT_WORKSPACE_AGENT_TYPES)
  --git-credentials FILE    tokens the server clones with, per git host, YAML or JSON: a file,
                            or the mapping itself when it starts with '{' or spans lines
                            (AGENT_WORKSPACE_GIT_CREDENTIALS)

The README lists every other environment variable.`;

/**
 * OTLP export from the standard OpenTelemetry variables: on when an endpoint is set
 * (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as it is, or OTEL_EXPORTER_OTLP_ENDPOINT, to which HTTP
 * adds /v1/traces) or OTEL_TRACES_EXPORTER=otlp asks for the default one; off with
 * OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true. The signal-specific variable wins. With
 * export on, the exporter's headers, timeout, compression and TLS files, OTEL_RESOURCE_ATTRIBUTES
 * and the batch processor's OTEL_BSP_* are read too, with the SDK's meanings (DEFAULT_BATCH says
 * where the defaults differ). OTEL_EXPORTER_OTLP_INSECURE is not needed: the endpoint's scheme
 * decides. OTEL_TRACES_SAMPLER and the OTEL_*_LIMIT variables are not honoured (audit-trail.ts).
 */
function otlpSettings(env: NodeJS.ProcessEnv): OtlpSettings | undefined {
  if (read(env, "OTEL_SDK_DISABLED")?.toLowerCase() === "true") return undefined;
  const exporters = (read(env, "OTEL_TRACES_EXPORTER") ?? "").split(",").map((s) => s.trim().toLowerCase()).filter((s) => s !== "");
  for (const e of exporters) {
    if (!["otlp", "none", "console"].includes(e)) throw new SettingsError(`OTEL_TRACES_EXPORTER: '${e}' is not supported; use otlp or none`);
  }
  if (exporters.includes("none")) return undefined;
  const signalName = read(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") === undefined ? "OTEL_EXPORTER_OTLP_PROTOCOL" : "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
  const protocol = oneOf(read(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ?? read(env, "OTEL_EXPORTER_OTLP_PROTOCOL"), signalName, ["http/protobuf", "grpc"] as const, "http/protobuf");
  const tracesEndpoint = read(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const endpoint = read(env, "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (tracesEndpoint === undefined && endpoint === undefined && !exporters.includes("otlp")) return undefined;
  const fallback = protocol === "grpc" ? "http://localhost:4317" : "http://localhost:4318";
  let url = tracesEndpoint ?? endpoint ?? fallback;
  const urlName = tracesEndpoint !== undefined ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" : "OTEL_EXPORTER_OTLP_ENDPOINT";
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // Not echoed: an endpoint may carry a password (refused below, once it parses).
    throw new SettingsError(`${urlName} is not a URL like http://collector:4318 (the value is not shown: it may carry credentials)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new SettingsError(`${urlName}: only http:// and https:// endpoints are supported`);
  if (parsed.username !== "" || parsed.password !== "") throw new SettingsError(`${urlName}: put credentials in OTEL_EXPORTER_OTLP_HEADERS, not in the URL`);
  // The generic endpoint is a base: HTTP exports go to its /v1/traces (the specification's rule).
  if (protocol === "http/protobuf" && tracesEndpoint === undefined) url = `${url.replace(/\/+$/, "")}/v1/traces`;
  const headersName = signal(env, "HEADERS");
  const headers: Record<string, string> = {};
  for (const pair of (read(env, headersName) ?? "").split(",")) {
    if (pair.trim() === "") continue;
    const at = pair.indexOf("=");
    if (at <= 0) throw new SettingsError(`${headersName}: expected key=value pairs separated by commas`);
    try {
      headers[decodeURIComponent(pair.slice(0, at).trim()).toLowerCase()] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new SettingsError(`${headersName}: a key or value is not valid percent-encoding`);
    }
  }
  const timeoutName = signal(env, "TIMEOUT");
  const compressionName = signal(env, "COMPRESSION");
  const maxQueueSize = integer(read(env, "OTEL_BSP_MAX_QUEUE_SIZE"), "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_BATCH.maxQueueSize, 1, 1_000_000);
  const maxExportBatchSize = integer(read(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", Math.min(DEFAULT_BATCH.maxExportBatchSize, maxQueueSize), 1, 1_000_000);
  if (maxExportBatchSize > maxQueueSize) {
    throw new SettingsError(`OTEL_BSP_MAX_EXPORT_BATCH_SIZE (${maxExportBatchSize}) must not be above OTEL_BSP_MAX_QUEUE_SIZE (${maxQueueSize})`);
  }
  return {
    protocol,
    url,
    headers,
    timeoutMs: integer(read(env, timeoutName), timeoutName, 10_000, 100, 600_000),
    compression: oneOf(read(env, compressionName), compressionName, ["none", "gzip"] as const, "none"),
    tls: otlpTls(env),
    serviceName: read(env, "OTEL_SERVICE_NAME") ?? "agent-workspace",
    resourceAttributes: resourceAttributes(read(env, "OTEL_RESOURCE_ATTRIBUTES")),
    batch: {
      scheduledDelayMs: integer(read(env, "OTEL_BSP_SCHEDULE_DELAY"), "OTEL_BSP_SCHEDULE_DELAY", DEFAULT_BATCH.scheduledDelayMs, 0, 3_600_000),
      exportTimeoutMs: integer(read(env, "OTEL_BSP_EXPORT_TIMEOUT"), "OTEL_BSP_EXPORT_TIMEOUT", DEFAULT_BATCH.exportTimeoutMs, 1, 3_600_000),
      maxQueueSize,
      maxExportBatchSize,
    },
  };
}

/** The variable a trace exporter setting comes from: OTEL_EXPORTER_OTLP_TRACES_<what> when set, else OTEL_EXPORTER_OTLP_<what>. */
function signal(env: NodeJS.ProcessEnv, what: string): string {
  return read(env, `OTEL_EXPORTER_OTLP_TRACES_${what}`) === undefined ? `OTEL_EXPORTER_OTLP_${what}` : `OTEL_EXPORTER_OTLP_TRACES_${what}`;
}

/** The collector's CA and a client certificate with its key, read now (the key as a secret). */
function otlpTls(env: NodeJS.ProcessEnv): OtlpSettings["tls"] {
  const file = (what: string, secret: boolean): string | undefined => {
    const name = signal(env, what);
    const value = read(env, name);
    if (value === undefined) return undefined;
    if (secret) return readSecretFile(value, name);
    try {
      return readFileSync(value, "utf8");
    } catch (err) {
      throw new SettingsError(`${name}: cannot read ${value.slice(0, 200)} (${(err as NodeJS.ErrnoException).code ?? "error"})`);
    }
  };
  const ca = file("CERTIFICATE", false);
  const cert = file("CLIENT_CERTIFICATE", false);
  const key = file("CLIENT_KEY", true);
  if ((cert === undefined) !== (key === undefined)) {
    throw new SettingsError(`${signal(env, "CLIENT_CERTIFICATE")} and ${signal(env, "CLIENT_KEY")} must be given together`);
  }
  return { ...(ca !== undefined ? { ca } : {}), ...(cert !== undefined && key !== undefined ? { cert, key } : {}) };
}

/** OTEL_RESOURCE_ATTRIBUTES: `key=value` pairs separated by commas, values percent-encoded (the specification's format). */
function resourceAttributes(value: string | undefined): Record<string, string> {
  const name = "OTEL_RESOURCE_ATTRIBUTES";
  const out: Record<string, string> = {};
  for (const pair of (value ?? "").split(",")) {
    if (pair.trim() === "") continue;
    const at = pair.indexOf("=");
    const key = pair.slice(0, at).trim();
    if (at <= 0 || key === "") throw new SettingsError(`${name}: expected key=value pairs separated by commas`);
    try {
      out[decodeURIComponent(key)] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new SettingsError(`${name}: the value of '${key.slice(0, 100)}' is not valid percent-encoding`);
    }
  }
  return out;
}

/** Reads one variable: trimmed, undefined when unset or empty. */
function read(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name]?.trim();
  return v === undefined || v === "" ? undefined : v;
}

function oneOf<T extends string>(value: string | undefined, name: string, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(value)) {
    throw new SettingsError(`${name} must be one of ${allowed.join(", ")}; got '${value}'`);
  }
  return value as T;
}

function integer(value: string | undefined, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new SettingsError(`${name} must be a whole number from ${min} to ${max}; got '${value}'`);
  }
  return n;
}

/** How long an unused push mirror is kept: 0 (forever), or at least a second. */
function mirrorMaxIdle(value: string | undefined): number {
  const name = "AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS";
  const ms = integer(value, name, 7 * 24 * 3_600_000, 0, 365 * 24 * 3_600_000);
  if (ms > 0 && ms < 1000) throw new SettingsError(`${name} must be 0 (keep mirrors forever) or at least 1000; got '${value}'`);
  return ms;
}

function bool(value: string | undefined, name: string): boolean {
  if (value === undefined) return false;
  if (["1", "true", "yes", "on"].includes(value.toLowerCase())) return true;
  if (["0", "false", "no", "off"].includes(value.toLowerCase())) return false;
  throw new SettingsError(`${name} must be 1 or 0 (true or false); got '${value}'`);
}

/** Checks a limit string with the same parser requests use, blaming the variable. */
function limit(value: string | undefined, name: string, parse: (v: string, field: string) => unknown): string {
  if (value === undefined) return "";
  blame(() => parse(value, name));
  return value;
}

/**
 * A WORKSPACE_DEFAULT_* value checked as requests are checked ("0" or "none" leaves the limit
 * out), or `fallback` when unset; a bad value is a SettingsError naming the variable.
 */
function defaultLimit(value: string | undefined, name: string, fallback: string, check: (v: string, field: string) => string): string {
  return value === undefined ? fallback : blame(() => check(value, name));
}

/** Runs a domain check, turning its INVALID_ARGUMENT into a SettingsError with the same message. */
function blame<T>(check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (err instanceof DomainError) throw new SettingsError(err.message);
    throw err;
  }
}

/** Shortest API key accepted: a key is a secret, not a password a person types. */
export const MIN_API_KEY_LENGTH = 16;

/** True for addresses only this host can reach. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost" || h === "::1") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  return h.startsWith("::ffff:127.");
}

/**
 * The operator keys from AGENT_WORKSPACE_API_KEYS (comma-separated) and the keys file (one per
 * line, "#" starts a comment). Messages name where a bad key came from, never the key itself.
 */
function apiKeys(env: NodeJS.ProcessEnv, file: string | undefined, fileName: string): string[] {
  const keys: Array<[string, string]> = (read(env, "AGENT_WORKSPACE_API_KEYS") ?? "")
    .split(",")
    .map((k) => k.trim())
    .filter((k) => k !== "")
    .map((k, i) => [k, `key ${i + 1} of AGENT_WORKSPACE_API_KEYS`]);
  if (file !== undefined) {
    readSecretFile(file, fileName).split("\n").forEach((line, i) => {
      const k = line.replace(/#.*/, "").trim();
      if (k !== "") keys.push([k, `line ${i + 1} of ${fileName}`]);
    });
  }
  for (const [k, where] of keys) {
    if (k.length < MIN_API_KEY_LENGTH || /[\s\x00-\x1f\x7f]/.test(k)) {
      throw new SettingsError(`the API key on ${where} must be at least ${MIN_API_KEY_LENGTH} characters without spaces or control characters (generate one with: openssl rand -hex 32)`);
    }
  }
  return [...new Set(keys.map(([k]) => k))];
}

/** AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: absolute directories separated by ':' (as PATH is). */
function allowedRoots(value: string | undefined): string[] {
  if (value === undefined) return [];
  const roots = value.split(":").map((r) => r.trim()).filter((r) => r !== "");
  for (const r of roots) {
    if (!path.isAbsolute(r) || r.split("/").includes("..")) throw new SettingsError(`AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: '${r.slice(0, 200)}' must be an absolute path without '..'`);
  }
  return roots;
}

/** A commit name or email: one line of printable text without git's delimiters. */
function identityPart(value: string, name: string): string {
  if (value.trim() === "" || value.length > 200 || /[<>\n\r\x00-\x1f]/.test(value)) throw new SettingsError(`${name} must be one line of at most 200 characters without < or >`);
  return value.trim();
}

/**
 * Where the git credentials are: a value that starts with "{" or spans several lines is the
 * mapping itself (YAML or JSON), anything else the path of a file holding it.
 */
export function isInlineCredentials(value: string): boolean {
  return value.trimStart().startsWith("{") || value.includes("\n");
}

/**
 * The git credentials (AGENT_WORKSPACE_GIT_CREDENTIALS, --git-credentials): a mapping from host
 * ("git.example.com", "127.0.0.1:8443") to a token, or to { username, token }, given inline or in
 * a file (`isInlineCredentials`). The value is full of tokens, so no message quotes it, nor a
 * parser's excerpt of it, nor a key that is not a host name (a URL there may carry a token):
 * messages name the entry, and the host once it is known to be one.
 */
function gitCredentials(value: string | undefined, name: string): Map<string, GitCredential> {
  const out = new Map<string, GitCredential>();
  if (value === undefined) return out;
  const inline = isInlineCredentials(value);
  const where = inline ? `${name} (inline)` : `${name} (the file ${value})`;
  let text = value;
  if (!inline) {
    try {
      text = readSecretFile(value, name);
    } catch (err) {
      throw new SettingsError(`${(err as Error).message}. To give the mapping itself, start it with '{': {"github.com": "ghp_…"}`);
    }
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch {
    throw new SettingsError(`${where} is not valid YAML or JSON; the parser's message is not shown, since it quotes the text`);
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    throw new SettingsError(`${where} must map git hosts to tokens, e.g. {"github.com": "ghp_…"}${inline ? "" : " (a value starting with '{' is read as the mapping itself)"}`);
  }
  Object.entries(doc as Record<string, unknown>).forEach(([host, entryValue], i) => {
    if (!/^[A-Za-z0-9][A-Za-z0-9.-]*(:\d{1,5})?$/.test(host)) {
      throw new SettingsError(`${where}: the key of entry ${i + 1} is not a host name with an optional :port (like github.com or git.example.com:8443); it is not shown, since a URL there may carry a token`);
    }
    const entry = typeof entryValue === "string" ? { username: "x-access-token", token: entryValue } : (entryValue as { username?: unknown; token?: unknown } | null);
    const token = entry?.token;
    const username = entry?.username ?? "x-access-token";
    if (typeof token !== "string" || token.length < 4 || /[\s\x00-\x1f\x7f]/.test(token)) {
      throw new SettingsError(`${where}: the token for ${host} must be a string of at least 4 characters without spaces`);
    }
    if (typeof username !== "string" || username === "" || /[:\s\x00-\x1f\x7f]/.test(username)) {
      throw new SettingsError(`${where}: the username for ${host} must be a non-empty string without ':' or spaces`);
    }
    out.set(host.toLowerCase(), { username, token });
  });
  return out;
}

/**
 * A GitHub App for push (and clone) tokens: AGENT_WORKSPACE_GITHUB_APP_ID with its private key
 * (AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE, PEM), for the git hosts in
 * AGENT_WORKSPACE_GITHUB_APP_HOSTS (default github.com), through the API at
 * AGENT_WORKSPACE_GITHUB_API_URL (default https://api.github.com; GitHub Enterprise: its /api/v3).
 * The installation is AGENT_WORKSPACE_GITHUB_APP_INSTALLATION_ID, or looked up per repository.
 */
function githubApp(env: NodeJS.ProcessEnv): GitHubAppSettings | undefined {
  const appId = read(env, "AGENT_WORKSPACE_GITHUB_APP_ID");
  const keyFile = read(env, "AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE");
  if (appId === undefined && keyFile === undefined) return undefined;
  if (appId === undefined || !/^\d{1,20}$/.test(appId)) throw new SettingsError("AGENT_WORKSPACE_GITHUB_APP_ID must be the app's numeric id");
  if (keyFile === undefined) throw new SettingsError("AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE is required with AGENT_WORKSPACE_GITHUB_APP_ID");
  const privateKey = readSecretFile(keyFile, "AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE");
  let keyType: string | undefined;
  try {
    keyType = createPrivateKey(privateKey).asymmetricKeyType;
  } catch {
    keyType = undefined;
  }
  if (keyType !== "rsa") throw new SettingsError(`AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: ${keyFile} holds no RSA private key in PEM`);
  const apiUrl = read(env, "AGENT_WORKSPACE_GITHUB_API_URL") ?? "https://api.github.com";
  let parsed: URL;
  try {
    parsed = new URL(apiUrl);
  } catch {
    throw new SettingsError("AGENT_WORKSPACE_GITHUB_API_URL must be an http or https URL");
  }
  if ((parsed.protocol !== "https:" && parsed.protocol !== "http:") || parsed.username !== "" || parsed.password !== "") {
    throw new SettingsError("AGENT_WORKSPACE_GITHUB_API_URL must be an http or https URL without credentials");
  }
  const hosts = (read(env, "AGENT_WORKSPACE_GITHUB_APP_HOSTS") ?? "github.com").split(",").map((h) => h.trim().toLowerCase()).filter((h) => h !== "");
  for (const h of hosts) if (!/^[a-z0-9][a-z0-9.-]*(:\d{1,5})?$/.test(h)) throw new SettingsError(`AGENT_WORKSPACE_GITHUB_APP_HOSTS: '${h.slice(0, 100)}' is not a host name (with an optional :port)`);
  const installation = read(env, "AGENT_WORKSPACE_GITHUB_APP_INSTALLATION_ID");
  if (installation !== undefined && !/^\d{1,20}$/.test(installation)) throw new SettingsError("AGENT_WORKSPACE_GITHUB_APP_INSTALLATION_ID must be a numeric id");
  return { appId, privateKey, apiUrl: apiUrl.replace(/\/+$/, ""), hosts, ...(installation !== undefined ? { installationId: Number(installation) } : {}) };
}

/**
 * Where the Docker engine is: DOCKER_SOCKET (a socket path) wins, then DOCKER_HOST
 * (`unix:///path` or `tcp://host:port`, HTTPS with DOCKER_TLS_VERIFY=1 and the client
 * certificates in DOCKER_CERT_PATH), then /var/run/docker.sock.
 */
function dockerConnection(env: NodeJS.ProcessEnv, what = "DOCKER_HOST"): DockerConnection {
  const socket = read(env, "DOCKER_SOCKET");
  if (socket !== undefined) return { socketPath: path.resolve(socket) };
  const host = read(env, "DOCKER_HOST");
  if (host === undefined) return { socketPath: "/var/run/docker.sock" };
  // The value is not quoted in messages: a URL may carry a password.
  let url: URL;
  try {
    url = new URL(host);
  } catch {
    throw new SettingsError(`${what} must be unix:///path or tcp://host:port (the value is not shown: it may carry credentials)`);
  }
  if (url.username !== "" || url.password !== "") throw new SettingsError(`${what} must not carry a user or password`);
  if (url.protocol === "unix:") {
    if (url.pathname === "" || url.pathname === "/") throw new SettingsError(`${what} names no socket path (unix:///path)`);
    return { socketPath: url.pathname };
  }
  if (url.protocol === "tcp:") {
    const tls = bool(read(env, "DOCKER_TLS_VERIFY"), "DOCKER_TLS_VERIFY");
    const port = integer(url.port === "" ? undefined : url.port, `the port of ${what}`, tls ? 2376 : 2375, 1, 65535);
    if (url.hostname === "") throw new SettingsError(`${what} names no host (tcp://host:port)`);
    const certDir = read(env, "DOCKER_CERT_PATH");
    if (tls && certDir === undefined) throw new SettingsError("DOCKER_TLS_VERIFY=1 needs DOCKER_CERT_PATH (a directory with ca.pem, cert.pem and key.pem)");
    return { host: url.hostname, port, tlsCertDir: tls ? path.resolve(certDir as string) : undefined };
  }
  throw new SettingsError(`${what} must be unix:///path or tcp://host:port; '${url.protocol}' is not supported`);
}

/** What an engine's name and labels may be: short, plain, safe in a log line and a label value. */
const ENGINE_WORD = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** An engine's or a cluster's `labels` (what agent types' engine_labels match), checked. */
function placementLabels(at: string, value: unknown): Record<string, string> {
  const labels: Record<string, string> = {};
  if (value === undefined) return labels;
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new SettingsError(`${at}.labels must be a mapping of names to values`);
  for (const [k, v] of Object.entries(value)) {
    if (!ENGINE_WORD.test(k) || typeof v !== "string" || !ENGINE_WORD.test(v)) throw new SettingsError(`${at}.labels: names and values must be 1-63 of a-z, 0-9, '.', '_', '-'`);
    labels[k] = v;
  }
  return labels;
}

/**
 * A setting that is a list: `value` is a JSON array, or the path of a YAML or JSON file holding
 * one; at least one `item` (named in the message).
 */
function listSetting(what: string, value: string, item: string): unknown[] {
  let text = value;
  if (!value.trimStart().startsWith("[")) {
    try {
      text = readFileSync(path.resolve(value), "utf8");
    } catch (err) {
      throw new SettingsError(`${what}: cannot read ${path.resolve(value)} (${(err as NodeJS.ErrnoException).code ?? "error"}); give a JSON array or the path of a YAML or JSON file`);
    }
  }
  let list: unknown;
  try {
    list = parseYaml(text);
  } catch {
    throw new SettingsError(`${what} is neither a JSON array nor YAML holding a list`);
  }
  if (!Array.isArray(list) || list.length === 0) throw new SettingsError(`${what} must list at least one ${item}`);
  return list;
}

/**
 * The Docker engines (AGENT_WORKSPACE_DOCKER_ENGINES): a JSON array, or the path of a YAML or
 * JSON file holding one, of `{name, host, tls, labels}`. `host` is `unix:///path` (an engine on
 * this host) or `tcp://host:port`, which needs `tls`, a directory with ca.pem, cert.pem and
 * key.pem: a remote engine is reached over mutual TLS only. Unset: one engine named "default",
 * where DOCKER_SOCKET / DOCKER_HOST say.
 */
function dockerEngines(env: NodeJS.ProcessEnv): EngineSettings[] {
  const value = read(env, "AGENT_WORKSPACE_DOCKER_ENGINES");
  if (value === undefined) return [{ name: "default", connection: dockerConnection(env), labels: {} }];
  const what = "AGENT_WORKSPACE_DOCKER_ENGINES";
  const list = listSetting(what, value, "engine ({name, host, tls, labels})");
  const seen = new Set<string>();
  return list.map((entry: unknown, i): EngineSettings => {
    const at = `${what}[${i}]`;
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) throw new SettingsError(`${at} must be an object {name, host, tls, labels}`);
    const e = entry as Record<string, unknown>;
    for (const key of Object.keys(e)) if (!["name", "host", "tls", "labels"].includes(key)) throw new SettingsError(`${at}: unknown key '${key.slice(0, 40)}' (name, host, tls, labels)`);
    const name = e.name;
    if (typeof name !== "string" || !ENGINE_WORD.test(name)) throw new SettingsError(`${at}.name must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit`);
    if (seen.has(name)) throw new SettingsError(`${at}.name '${name}' is given twice`);
    seen.add(name);
    const labels = placementLabels(at, e.labels);
    if (typeof e.host !== "string") throw new SettingsError(`${at}.host must be unix:///path or tcp://host:port`);
    if (e.tls !== undefined && typeof e.tls !== "string") throw new SettingsError(`${at}.tls must be a directory with ca.pem, cert.pem and key.pem`);
    const connection = dockerConnection({ DOCKER_HOST: e.host, ...(e.tls !== undefined ? { DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: e.tls } : {}) }, `${at}.host`);
    if (!("socketPath" in connection) && connection.tlsCertDir === undefined) {
      throw new SettingsError(`${at}: a tcp:// engine needs tls (a directory with ca.pem, cert.pem and key.pem); a remote engine is reached over mutual TLS only`);
    }
    return { name, connection, labels };
  });
}

/**
 * The kubernetes provider's clusters (AGENT_WORKSPACE_KUBERNETES_CLUSTERS: a JSON list, or the path of
 * a YAML or JSON file holding one, of {name, kubeconfig, context, namespace, labels}); the provider
 * is off without them.
 */
function kubernetesSettings(env: NodeJS.ProcessEnv): KubernetesSettings | undefined {
  const what = "AGENT_WORKSPACE_KUBERNETES_CLUSTERS";
  const value = read(env, what);
  if (value === undefined) return undefined;
  const list = listSetting(what, value, "cluster ({name, kubeconfig, context, namespace, labels})");
  const seen = new Set<string>();
  const clusters = list.map((entry: unknown, i): KubernetesCluster => {
    const at = `${what}[${i}]`;
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) throw new SettingsError(`${at} must be an object {name, kubeconfig, context, namespace, labels}`);
    const e = entry as Record<string, unknown>;
    for (const key of Object.keys(e)) if (!["name", "kubeconfig", "context", "namespace", "labels"].includes(key)) throw new SettingsError(`${at}: unknown key '${key.slice(0, 40)}' (name, kubeconfig, context, namespace, labels)`);
    const name = e.name;
    if (typeof name !== "string" || !ENGINE_WORD.test(name)) throw new SettingsError(`${at}.name must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit`);
    if (seen.has(name)) throw new SettingsError(`${at}.name '${name}' is given twice`);
    seen.add(name);
    const namespace = e.namespace ?? "default";
    if (typeof namespace !== "string" || !/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(namespace)) throw new SettingsError(`${at}.namespace must be a Kubernetes namespace name`);
    for (const key of ["kubeconfig", "context"] as const) if (e[key] !== undefined && typeof e[key] !== "string") throw new SettingsError(`${at}.${key} must be a string`);
    const labels = placementLabels(at, e.labels);
    return { name, kubeconfig: typeof e.kubeconfig === "string" ? path.resolve(e.kubeconfig) : "", context: (e.context as string | undefined) ?? "", namespace, labels };
  });
  const runtimeClass = read(env, "AGENT_WORKSPACE_KUBERNETES_RUNTIME_CLASS") ?? "";
  if (runtimeClass !== "" && !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(runtimeClass)) throw new SettingsError("AGENT_WORKSPACE_KUBERNETES_RUNTIME_CLASS must be a RuntimeClass name");
  return {
    clusters,
    image: read(env, "AGENT_WORKSPACE_KUBERNETES_IMAGE") ?? read(env, "AGENT_WORKSPACE_IMAGE") ?? "agent-workspace-base:bookworm",
    runtimeClass,
    startTimeoutMs: integer(read(env, "AGENT_WORKSPACE_KUBERNETES_START_TIMEOUT_MS"), "AGENT_WORKSPACE_KUBERNETES_START_TIMEOUT_MS", 180_000, 1000, 3_600_000),
    requestTimeoutMs: integer(read(env, "AGENT_WORKSPACE_KUBERNETES_REQUEST_TIMEOUT_MS"), "AGENT_WORKSPACE_KUBERNETES_REQUEST_TIMEOUT_MS", 15_000, 100, 600_000),
  };
}

/**
 * A command-line parser's message without the values it may quote: an option's value or a stray
 * argument (a credentials mapping the shell split in two) may be a secret. Option names stay, and
 * so does a stray plain word ("serve"), which says what went wrong.
 */
function withoutValues(message: string, argv: string[]): string {
  const values = argv
    .flatMap((a) => (a.startsWith("-") ? (a.includes("=") ? [a.slice(a.indexOf("=") + 1)] : []) : [a]))
    .filter((v) => v !== "" && !/^[a-z]{1,16}$/.test(v));
  let out = message;
  for (const v of values.sort((a, b) => b.length - a.length)) out = out.split(v).join("…");
  return out;
}

/**
 * Parses settings from `env` and `argv` (without the node and script entries). Throws
 * SettingsError for anything it cannot use.
 */
export function parseSettings(env: NodeJS.ProcessEnv = process.env, argv: string[] = []): Settings {
  let values: Record<string, string | boolean | Array<string | boolean> | undefined>;
  try {
    const options: ParseArgsOptionsConfig = Object.fromEntries(Object.entries(FLAGS).map(([k, v]) => [k, { type: v.type }]));
    ({ values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new SettingsError(`${withoutValues((err as Error).message, argv)}\n\n${USAGE}`);
  }
  // A flag wins over its variable; both go through the same checks under the flag's name.
  const pick = (flag: keyof typeof FLAGS): [string | undefined, string] => {
    const v = values[flag];
    if (Array.isArray(v)) throw new SettingsError(`--${flag} may be given once`);
    if (typeof v === "string") return [v.trim() === "" ? undefined : v.trim(), `--${flag}`];
    if (v === true) return ["1", `--${flag}`];
    return [read(env, FLAGS[flag].env), FLAGS[flag].env];
  };

  const [tlsCert, tlsCertName] = pick("tls-cert");
  const [tlsKey, tlsKeyName] = pick("tls-key");
  if ((tlsCert === undefined) !== (tlsKey === undefined)) {
    throw new SettingsError("--tls-cert and --tls-key (AGENT_WORKSPACE_TLS_CERT, AGENT_WORKSPACE_TLS_KEY) must be given together");
  }
  // Both are read when the server listens; checked now, so a key pasted where its path belongs is
  // refused here without being repeated (the listener's error would quote it).
  if (tlsCert !== undefined && tlsKey !== undefined) {
    try {
      readFileSync(tlsCert);
    } catch (err) {
      throw new SettingsError(`${tlsCertName}: cannot read ${tlsCert.slice(0, 200)} (${(err as NodeJS.ErrnoException).code ?? "error"})`);
    }
    readSecretFile(tlsKey, tlsKeyName);
  }
  const maxTimeoutMs = integer(read(env, "AGENT_WORKSPACE_MAX_TIMEOUT_MS"), "AGENT_WORKSPACE_MAX_TIMEOUT_MS", DEFAULT_TOOL_LIMITS.maxTimeoutMs, 1000, 24 * 3600 * 1000);
  const quiet = bool(...pick("quiet"));
  const [level, levelName] = pick("log-level");
  const host = pick("host")[0] ?? "127.0.0.1";
  const [keysFile, keysFileName] = pick("api-keys-file");
  const keys = apiKeys(env, keysFile, keysFileName);
  if (keys.length === 0 && !isLoopback(host)) {
    throw new SettingsError(
      `refusing to listen on ${host} without an API key: anyone who can reach it could run commands. ` +
        "Set AGENT_WORKSPACE_API_KEYS (or --api-keys-file), or listen on 127.0.0.1",
    );
  }

  const databaseUrl = read(env, "AGENT_WORKSPACE_DATABASE_URL") ?? "";
  if (databaseUrl !== "" && !/^postgres(ql)?:\/\/[^\s]*$/i.test(databaseUrl)) {
    // Not echoed: the value may hold a password.
    throw new SettingsError("AGENT_WORKSPACE_DATABASE_URL must be a postgres:// or postgresql:// URL (unset for the embedded SQLite store); the value is not shown, in case it holds a password");
  }

  const advertiseUrl = read(env, "AGENT_WORKSPACE_ADVERTISE_URL") ?? "";
  if (advertiseUrl !== "" && !/^https?:\/\/[^\s/]+\/?$/.test(advertiseUrl)) {
    throw new SettingsError(`AGENT_WORKSPACE_ADVERTISE_URL must be an http:// or https:// URL of a host and port, such as https://aw-2.internal:8443; got '${advertiseUrl.slice(0, 100)}'`);
  }

  return {
    host,
    port: integer(...pick("port"), 8080, 0, 65535),
    databaseUrl,
    advertiseUrl,
    tlsCert: tlsCert ?? "",
    tlsKey: tlsKey ?? "",
    defaultProvider: oneOf(...pick("default-provider"), PROVIDER_NAMES, "local"),
    workspaceDefaults: {
      cpu: defaultLimit(read(env, "WORKSPACE_DEFAULT_CPU"), "WORKSPACE_DEFAULT_CPU", DEFAULT_LIMITS.cpu, defaultCpuLimit),
      memory: defaultLimit(read(env, "WORKSPACE_DEFAULT_MEMORY"), "WORKSPACE_DEFAULT_MEMORY", DEFAULT_LIMITS.memory, (v, f) => defaultSizeLimit(v, f, "memory")),
      disk: defaultLimit(read(env, "WORKSPACE_DEFAULT_DISK"), "WORKSPACE_DEFAULT_DISK", DEFAULT_LIMITS.disk, (v, f) => defaultSizeLimit(v, f, "disk")),
      pids: integer(read(env, "WORKSPACE_DEFAULT_PIDS"), "WORKSPACE_DEFAULT_PIDS", DEFAULT_LIMITS.pids, 0, 4_194_304),
    },
    toolLimits: {
      ...DEFAULT_TOOL_LIMITS,
      maxTimeoutMs,
      defaultTimeoutMs: Math.min(DEFAULT_TOOL_LIMITS.defaultTimeoutMs, maxTimeoutMs),
    },
    maxMessageBytes: 32 * 1024 * 1024,
    compression: oneOf(read(env, "AGENT_WORKSPACE_COMPRESSION"), "AGENT_WORKSPACE_COMPRESSION", ["none", "gzip"], "none"),
    logLevel: level === undefined ? (quiet ? "warn" : "info") : oneOf(level, levelName, LOG_LEVELS, "info"),
    apiKeys: keys,
    sessions: {
      idleTimeoutMs: integer(read(env, "AGENT_WORKSPACE_SESSION_IDLE_TIMEOUT_MS"), "AGENT_WORKSPACE_SESSION_IDLE_TIMEOUT_MS", 30 * 60_000, 0, 30 * 24 * 3_600_000),
      poolConcurrency: integer(read(env, "AGENT_WORKSPACE_WARM_POOL_CONCURRENCY"), "AGENT_WORKSPACE_WARM_POOL_CONCURRENCY", 1, 1, 16),
      tickMs: integer(read(env, "AGENT_WORKSPACE_SESSION_TICK_MS"), "AGENT_WORKSPACE_SESSION_TICK_MS", 1000, 50, 60_000),
    },
    processes: {
      maxRunning: integer(read(env, "AGENT_WORKSPACE_MAX_PROCESSES"), "AGENT_WORKSPACE_MAX_PROCESSES", 16, 1, 1024),
      ringBytes: integer(read(env, "AGENT_WORKSPACE_PROCESS_OUTPUT_BYTES"), "AGENT_WORKSPACE_PROCESS_OUTPUT_BYTES", 1024 * 1024, 4096, 256 * 1024 * 1024),
      maxBufferedBytes: integer(read(env, "AGENT_WORKSPACE_PROCESS_BUFFER_BYTES"), "AGENT_WORKSPACE_PROCESS_BUFFER_BYTES", 64 * 1024 * 1024, 8192, 16 * 1024 * 1024 * 1024),
      idleTimeoutMs: integer(read(env, "AGENT_WORKSPACE_PROCESS_IDLE_TIMEOUT_MS"), "AGENT_WORKSPACE_PROCESS_IDLE_TIMEOUT_MS", 0, 0, 30 * 24 * 3_600_000),
    },
    git: {
      credentials: gitCredentials(...pick("git-credentials")),
      cloneTimeoutMs: integer(read(env, "AGENT_WORKSPACE_CLONE_TIMEOUT_MS"), "AGENT_WORKSPACE_CLONE_TIMEOUT_MS", 10 * 60_000, 1000, 24 * 3_600_000),
      cloneMaxBytes: parseSize(limit(read(env, "AGENT_WORKSPACE_CLONE_MAX_BYTES"), "AGENT_WORKSPACE_CLONE_MAX_BYTES", parseSize) || "512M", "AGENT_WORKSPACE_CLONE_MAX_BYTES"),
      botName: identityPart(read(env, "AGENT_WORKSPACE_GIT_BOT_NAME") ?? "agent-workspace[bot]", "AGENT_WORKSPACE_GIT_BOT_NAME"),
      botEmail: identityPart(read(env, "AGENT_WORKSPACE_GIT_BOT_EMAIL") ?? "agent-workspace[bot]@users.noreply.localhost", "AGENT_WORKSPACE_GIT_BOT_EMAIL"),
      githubApp: githubApp(env),
      pushTimeoutMs: integer(read(env, "AGENT_WORKSPACE_PUSH_TIMEOUT_MS"), "AGENT_WORKSPACE_PUSH_TIMEOUT_MS", 5 * 60_000, 1000, 24 * 3_600_000),
      mirrorMaxIdleMs: mirrorMaxIdle(read(env, "AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS")),
    },
    mounts: {
      allowedRoots: allowedRoots(read(env, "AGENT_WORKSPACE_ALLOWED_HOST_ROOTS")),
      maxBytes: parseSize(limit(read(env, "AGENT_WORKSPACE_MOUNT_MAX_BYTES"), "AGENT_WORKSPACE_MOUNT_MAX_BYTES", parseSize) || "1G", "AGENT_WORKSPACE_MOUNT_MAX_BYTES"),
    },
    audit: {
      maxAgeMs: integer(read(env, "AGENT_WORKSPACE_AUDIT_MAX_AGE_MS"), "AGENT_WORKSPACE_AUDIT_MAX_AGE_MS", 30 * 24 * 3_600_000, 0, 10 * 365 * 24 * 3_600_000),
      maxRows: integer(read(env, "AGENT_WORKSPACE_AUDIT_MAX_ROWS"), "AGENT_WORKSPACE_AUDIT_MAX_ROWS", 1_000_000, 0),
      watchBuffer: integer(read(env, "AGENT_WORKSPACE_WATCH_BUFFER"), "AGENT_WORKSPACE_WATCH_BUFFER", 4096, 1, 1_000_000),
      changeScan: {
        maxEntries: integer(read(env, "AGENT_WORKSPACE_CHANGE_SCAN_MAX_ENTRIES"), "AGENT_WORKSPACE_CHANGE_SCAN_MAX_ENTRIES", 50_000, 1, 10_000_000),
        maxMs: integer(read(env, "AGENT_WORKSPACE_CHANGE_SCAN_MAX_MS"), "AGENT_WORKSPACE_CHANGE_SCAN_MAX_MS", 500, 1, 600_000),
      },
      otlp: otlpSettings(env),
    },
    egress: {
      privateAllow: privateAllow(read(env, "AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW")),
      maxConnections: integer(read(env, "AGENT_WORKSPACE_EGRESS_MAX_CONNECTIONS"), "AGENT_WORKSPACE_EGRESS_MAX_CONNECTIONS", 32, 1, 4096),
      idleTimeoutMs: integer(read(env, "AGENT_WORKSPACE_EGRESS_IDLE_TIMEOUT_MS"), "AGENT_WORKSPACE_EGRESS_IDLE_TIMEOUT_MS", 120_000, 1000, 24 * 3_600_000),
      maxBytes: parseSize(limit(read(env, "AGENT_WORKSPACE_EGRESS_MAX_BYTES"), "AGENT_WORKSPACE_EGRESS_MAX_BYTES", parseSize) || "4G", "AGENT_WORKSPACE_EGRESS_MAX_BYTES"),
      hosts: egressHosts(read(env, "AGENT_WORKSPACE_EGRESS_HOSTS")),
    },
    agentTypesFile: pick("agent-types")[0] === undefined ? "" : path.resolve(pick("agent-types")[0] as string),
    providers: {
      dataDir: path.resolve(pick("data-dir")[0] ?? ".data"),
      localLauncher: oneOf(read(env, "AGENT_WORKSPACE_LOCAL_LAUNCHER"), "AGENT_WORKSPACE_LOCAL_LAUNCHER", ["launcher", "spawn"], "launcher"),
      docker: {
        mode: oneOf(read(env, "AGENT_WORKSPACE_DOCKER"), "AGENT_WORKSPACE_DOCKER", ["auto", "on", "off"], "auto"),
        engines: dockerEngines(env),
        image: read(env, "AGENT_WORKSPACE_IMAGE") ?? "agent-workspace-base:bookworm",
        network: read(env, "AGENT_WORKSPACE_DOCKER_NETWORK") ?? "none",
        egressNetwork: read(env, "AGENT_WORKSPACE_EGRESS_NETWORK") ?? "",
        cleanupOrphans: bool(read(env, "AGENT_WORKSPACE_CLEANUP_ORPHANS"), "AGENT_WORKSPACE_CLEANUP_ORPHANS"),
        egressPath: oneOf(read(env, "AGENT_WORKSPACE_EGRESS_PATH"), "AGENT_WORKSPACE_EGRESS_PATH", ["socket", "channel"], "socket"),
        executorIdleMs: integer(read(env, "AGENT_WORKSPACE_EXECUTOR_IDLE_MS"), "AGENT_WORKSPACE_EXECUTOR_IDLE_MS", 60_000, 0, 24 * 3_600_000),
        user: {
          uid: integer(read(env, "AGENT_WORKSPACE_CONTAINER_UID"), "AGENT_WORKSPACE_CONTAINER_UID", 1000, 0, 2 ** 31 - 1),
          gid: integer(read(env, "AGENT_WORKSPACE_CONTAINER_GID"), "AGENT_WORKSPACE_CONTAINER_GID", 1000, 0, 2 ** 31 - 1),
        },
      },
      microvm: {
        mode: oneOf(read(env, "AGENT_WORKSPACE_MICROVM"), "AGENT_WORKSPACE_MICROVM", ["auto", "on", "off"], "auto"),
        images: path.resolve(read(env, "AGENT_WORKSPACE_MICROVM_IMAGES") ?? "/var/lib/agent-workspace/microvm"),
        accel: oneOf(read(env, "AGENT_WORKSPACE_MICROVM_ACCEL"), "AGENT_WORKSPACE_MICROVM_ACCEL", ["auto", "kvm", "tcg"], "auto"),
        defaultMemoryBytes: parseSize(limit(read(env, "AGENT_WORKSPACE_MICROVM_MEMORY"), "AGENT_WORKSPACE_MICROVM_MEMORY", parseSize) || "1G", "AGENT_WORKSPACE_MICROVM_MEMORY"),
        defaultDiskBytes: parseSize(limit(read(env, "AGENT_WORKSPACE_MICROVM_DISK"), "AGENT_WORKSPACE_MICROVM_DISK", parseSize) || "10G", "AGENT_WORKSPACE_MICROVM_DISK"),
        bootTimeoutMs: integer(read(env, "AGENT_WORKSPACE_MICROVM_BOOT_TIMEOUT_MS"), "AGENT_WORKSPACE_MICROVM_BOOT_TIMEOUT_MS", 120_000, 1000, 3_600_000),
        snapshots: read(env, "AGENT_WORKSPACE_MICROVM_SNAPSHOTS") === undefined ? true : bool(read(env, "AGENT_WORKSPACE_MICROVM_SNAPSHOTS"), "AGENT_WORKSPACE_MICROVM_SNAPSHOTS"),
        cache: read(env, "AGENT_WORKSPACE_MICROVM_CACHE") === undefined ? undefined : path.resolve(read(env, "AGENT_WORKSPACE_MICROVM_CACHE") as string),
      },
      e2b: e2bSettings(env),
      kubernetes: kubernetesSettings(env),
    },
  };
}
