/**
 * How the command line reaches a server: the URL (`--server`, else `AGENT_WORKSPACE_URL`, else
 * http://127.0.0.1:8080), the protocol (`--protocol`, Connect by default) and the credential from
 * the environment (`AGENT_WORKSPACE_API_KEY`, else `AGENT_WORKSPACE_SESSION_TOKEN`). The credential
 * is never taken from an argument, so it stays out of shell history and process listings, and it is
 * never printed.
 */
import { type Client, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { AuditService } from "../gen/agentworkspace/v1/audit_pb.js";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { UsageError } from "./output.ts";

/** The protocols `--protocol` accepts. */
export const PROTOCOLS = ["connect", "grpc", "grpc-web"] as const;

/** The services of one server, with the caller's credential on every call. */
export interface Connection {
  /** The server's base URL, for messages. */
  url: string;
  /** Whether a credential is sent (an error hint differs). */
  authenticated: boolean;
  workspaces: Client<typeof WorkspaceService>;
  tools: Client<typeof ToolService>;
  config: Client<typeof ConfigService>;
  audit: Client<typeof AuditService>;
}

/** Builds the connection from the parsed global options and the environment. */
export function connect(options: { server?: string; protocol?: string }, env: NodeJS.ProcessEnv): Connection {
  const url = options.server || env.AGENT_WORKSPACE_URL || "http://127.0.0.1:8080";
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--server ${url}: not a URL (for example http://127.0.0.1:8080)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new UsageError(`--server ${url}: the URL must start with http:// or https://`);
  const protocol = options.protocol || "connect";
  if (!(PROTOCOLS as readonly string[]).includes(protocol)) throw new UsageError(`--protocol ${protocol}: expected one of ${PROTOCOLS.join(", ")}`);
  const credential = env.AGENT_WORKSPACE_API_KEY || env.AGENT_WORKSPACE_SESSION_TOKEN || "";
  const interceptors: Interceptor[] = credential
    ? [
        (next) => (req) => {
          req.header.set("authorization", `Bearer ${credential}`);
          return next(req);
        },
      ]
    : [];
  const baseUrl = url.replace(/\/+$/, "");
  // gRPC needs HTTP/2; Connect and gRPC-Web go over HTTP/1.1, which every proxy in between speaks.
  const transport: Transport =
    protocol === "grpc"
      ? createGrpcTransport({ baseUrl, interceptors })
      : protocol === "grpc-web"
        ? createGrpcWebTransport({ baseUrl, httpVersion: "1.1", interceptors })
        : createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors });
  return {
    url: baseUrl,
    authenticated: credential !== "",
    workspaces: createClient(WorkspaceService, transport),
    tools: createClient(ToolService, transport),
    config: createClient(ConfigService, transport),
    audit: createClient(AuditService, transport),
  };
}
