/**
 * How the command line reaches a server: through the TypeScript client (`@agent-workspace/client`,
 * clients/ts), so its typed errors, deadlines and read retries are the CLI's too. The URL comes from
 * `--server`, else `AGENT_WORKSPACE_URL`, else http://127.0.0.1:8080; the protocol from `--protocol`
 * (Connect over HTTP/1.1 by default, which every proxy in between speaks; gRPC over HTTP/2); the
 * credential from the environment only (`AGENT_WORKSPACE_API_KEY`, else
 * `AGENT_WORKSPACE_SESSION_TOKEN`), so it stays out of shell history and process listings. The
 * client never puts it in an error, and the CLI never prints it.
 */
import { AgentWorkspace, type Protocol } from "@agent-workspace/client";
import { UsageError } from "./output.ts";

/** The protocols `--protocol` accepts. */
export const PROTOCOLS: readonly Protocol[] = ["connect", "grpc", "grpc-web"];

/** The server's URL from the options and the environment. */
export function serverUrl(options: { server?: string }, env: NodeJS.ProcessEnv): string {
  return (options.server || env.AGENT_WORKSPACE_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
}

/** A client for the parsed global options and the environment. */
export function connect(options: { server?: string; protocol?: string }, env: NodeJS.ProcessEnv): AgentWorkspace {
  const url = serverUrl(options, env);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--server ${url}: not a URL (for example http://127.0.0.1:8080)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new UsageError(`--server ${url}: the URL must start with http:// or https://`);
  const protocol = (options.protocol || "connect") as Protocol;
  if (!PROTOCOLS.includes(protocol)) throw new UsageError(`--protocol ${protocol}: expected one of ${PROTOCOLS.join(", ")}`);
  const apiKey = env.AGENT_WORKSPACE_API_KEY || undefined;
  const sessionToken = apiKey ? undefined : env.AGENT_WORKSPACE_SESSION_TOKEN || undefined;
  return new AgentWorkspace({ url, protocol, httpVersion: protocol === "grpc" ? "2" : "1.1", apiKey, sessionToken });
}
