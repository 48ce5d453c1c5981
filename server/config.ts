/**
 * Server configuration from environment variables and command-line flags (flags win). Every
 * setting has a default that starts a working server with the local provider and no external
 * services.
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_TOOL_LIMITS, type ToolLimits } from "./tools/limits.ts";
import type { LimitStrings } from "./limits.ts";

export interface ServerConfig {
  host: string;
  port: number;
  dataDir: string;
  defaultProvider: string;
  defaultLimits: LimitStrings;
  toolLimits: ToolLimits;
  maxMessageBytes: number;
  /** Response compression offered to clients: "none" (default) or "gzip" (gzip and brotli). */
  compression: "none" | "gzip";
  tlsCert: string;
  tlsKey: string;
  quiet: boolean;
  docker: {
    /** Enable container providers ("auto" enables them when the engine answers). */
    enabled: "auto" | "on" | "off";
    socketPath: string;
    image: string;
    network: string;
    cleanupOrphans: boolean;
    /** uid/gid commands run as in containers. */
    user: { uid: number; gid: number };
  };
}

function int(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined || value === "") return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got '${value}'`);
  return n;
}

/** Reads configuration from `env` and `argv` (without the node and script entries). */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, argv: string[] = []): ServerConfig {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: "string" },
      port: { type: "string" },
      "data-dir": { type: "string" },
      "default-provider": { type: "string" },
      "tls-cert": { type: "string" },
      "tls-key": { type: "string" },
      quiet: { type: "boolean" },
    },
    strict: true,
  });
  const dataDir = path.resolve(values["data-dir"] ?? env.AGENT_WORKSPACE_DATA_DIR ?? ".data");
  const maxTimeoutMs = int(env.AGENT_WORKSPACE_MAX_TIMEOUT_MS, "AGENT_WORKSPACE_MAX_TIMEOUT_MS", DEFAULT_TOOL_LIMITS.maxTimeoutMs);
  return {
    host: values.host ?? env.HOST ?? "127.0.0.1",
    port: int(values.port ?? env.PORT, "PORT", 8080),
    dataDir,
    defaultProvider: values["default-provider"] ?? env.AGENT_WORKSPACE_DEFAULT_PROVIDER ?? "local",
    defaultLimits: {
      cpu: env.WORKSPACE_DEFAULT_CPU ?? "",
      memory: env.WORKSPACE_DEFAULT_MEMORY ?? "",
      disk: env.WORKSPACE_DEFAULT_DISK ?? "",
      pids: int(env.WORKSPACE_DEFAULT_PIDS, "WORKSPACE_DEFAULT_PIDS", 1024),
    },
    toolLimits: {
      ...DEFAULT_TOOL_LIMITS,
      maxTimeoutMs,
      defaultTimeoutMs: Math.min(DEFAULT_TOOL_LIMITS.defaultTimeoutMs, maxTimeoutMs),
    },
    maxMessageBytes: 32 * 1024 * 1024,
    compression: env.AGENT_WORKSPACE_COMPRESSION === "gzip" ? "gzip" : "none",
    tlsCert: values["tls-cert"] ?? env.AGENT_WORKSPACE_TLS_CERT ?? "",
    tlsKey: values["tls-key"] ?? env.AGENT_WORKSPACE_TLS_KEY ?? "",
    quiet: values.quiet ?? env.AGENT_WORKSPACE_QUIET === "1",
    docker: {
      enabled: (env.AGENT_WORKSPACE_DOCKER as "auto" | "on" | "off" | undefined) ?? "auto",
      socketPath: env.DOCKER_SOCKET ?? "/var/run/docker.sock",
      image: env.AGENT_WORKSPACE_IMAGE ?? "agent-workspace-base:bookworm",
      network: env.AGENT_WORKSPACE_DOCKER_NETWORK ?? "none",
      cleanupOrphans: env.AGENT_WORKSPACE_CLEANUP_ORPHANS === "1",
      user: {
        uid: int(env.AGENT_WORKSPACE_CONTAINER_UID, "AGENT_WORKSPACE_CONTAINER_UID", 1000),
        gid: int(env.AGENT_WORKSPACE_CONTAINER_GID, "AGENT_WORKSPACE_CONTAINER_GID", 1000),
      },
    },
  };
}
