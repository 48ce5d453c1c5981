/**
 * `agent-workspace mcp`: the MCP bridge over stdio, for MCP clients that spawn their tool servers
 * (Claude Code, Claude Desktop, Codex…). It is a client of an agent-workspace server: every tool
 * call is that server's ToolService RPC over gRPC, sent with the session token (or operator key),
 * so the server's authentication, permissions, command policy, sensitive files and audit decide
 * and record it as they would any call.
 *
 *   agent-workspace mcp --agent-type T   starts a session of agent type T (operator key from
 *                                        AGENT_WORKSPACE_API_KEY), waits until it is ACTIVE, serves
 *                                        it, and ends it when stdin closes or on SIGINT/SIGTERM;
 *   agent-workspace mcp --session TOKEN  serves an existing session (or AGENT_WORKSPACE_SESSION_TOKEN,
 *                                        which keeps the token out of the process list);
 *   agent-workspace mcp --workspace WS   serves a workspace as an operator.
 *   --server URL (default AGENT_WORKSPACE_URL, else http://127.0.0.1:8080).
 *
 * stdout carries the protocol and nothing else; everything for people (provisioning progress,
 * errors) goes to stderr, and never a token or key.
 */
import { parseArgs } from "node:util";
import { type Client, Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { ConfigService } from "../../gen/agentworkspace/v1/config_pb.js";
import { ProvisioningStage, SessionStatus, WorkspaceService } from "../../gen/agentworkspace/v1/workspace_pb.js";
import { createBridge } from "./bridge.ts";

const USAGE = `Usage: agent-workspace mcp (--agent-type TYPE | --session TOKEN | --workspace ID) [--server URL]

Serves one session's or workspace's tools to an MCP client over stdio.
  --agent-type TYPE  start a session of TYPE, serve it, end it on exit (needs an operator key)
  --session TOKEN    serve an existing session (or set AGENT_WORKSPACE_SESSION_TOKEN)
  --workspace ID     serve a workspace as an operator
  --server URL       the agent-workspace server (default: AGENT_WORKSPACE_URL, else http://127.0.0.1:8080)
Environment: AGENT_WORKSPACE_API_KEY (operator key), AGENT_WORKSPACE_SESSION_TOKEN, AGENT_WORKSPACE_URL.
`;

/** A start-up failure told to the user: exit code and message, never a credential. */
class Refusal extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

/** What the command line and environment ask for, parsed once. */
interface McpSettings {
  server: string;
  apiKey: string;
  mode: { kind: "agent-type"; agentType: string } | { kind: "session"; token: string } | { kind: "workspace"; workspaceId: string };
}

function parseSettings(args: string[], env: NodeJS.ProcessEnv): McpSettings | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: { "agent-type": { type: "string" }, session: { type: "string" }, workspace: { type: "string" }, server: { type: "string" }, help: { type: "boolean", short: "h" } },
      strict: true,
    }));
  } catch (err) {
    throw new Refusal(`${(err as Error).message}\n${USAGE}`, 2);
  }
  if (values.help) return "help";
  const token = values.session ?? (values["agent-type"] === undefined && values.workspace === undefined ? env.AGENT_WORKSPACE_SESSION_TOKEN : undefined);
  const chosen = [values["agent-type"], token, values.workspace].filter((v) => v !== undefined && v !== "");
  if (chosen.length !== 1) throw new Refusal(`name exactly one of --agent-type, --session and --workspace\n${USAGE}`, 2);
  const server = values.server ?? env.AGENT_WORKSPACE_URL ?? "http://127.0.0.1:8080";
  try {
    const url = new URL(server);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    throw new Refusal(`--server must be an http:// or https:// URL`, 2);
  }
  const mode: McpSettings["mode"] = values["agent-type"] ? { kind: "agent-type", agentType: values["agent-type"] } : token ? { kind: "session", token } : { kind: "workspace", workspaceId: values.workspace ?? "" };
  return { server, apiKey: env.AGENT_WORKSPACE_API_KEY ?? "", mode };
}

const say = (message: string) => process.stderr.write(`agent-workspace mcp: ${message}\n`);
const bearer = (credential: string) => (credential === "" ? new Headers() : new Headers({ authorization: `Bearer ${credential}` }));
/** A failed call's code and message, for stderr (the server's messages carry no credentials). */
const why = (err: unknown) => {
  const e = ConnectError.from(err);
  return `${Code[e.code]}: ${e.rawMessage}`;
};

/** Waits until the session leaves PROVISIONING, telling stderr what happens; resolves to its status. */
async function provisioned(workspaces: Client<typeof WorkspaceService>, id: string, token: string): Promise<{ status: SessionStatus; message: string }> {
  for await (const res of workspaces.watchSession({ id }, { headers: bearer(token) })) {
    const ev = res.event;
    switch (ev.case) {
      case "stageStarted":
        say(`${ProvisioningStage[ev.value.stage].toLowerCase()} started${ev.value.detail ? `: ${ev.value.detail}` : ""}`);
        break;
      case "stageEnded":
        say(`${ProvisioningStage[ev.value.stage].toLowerCase()} ${ev.value.ok ? "done" : "failed"} in ${ev.value.durationMs} ms${ev.value.message ? `: ${ev.value.message}` : ""}`);
        break;
      case "output":
        process.stderr.write(ev.value.data);
        break;
      case "warning":
        say(`warning: ${ev.value.message}`);
        break;
      case "status":
        if (ev.value.status !== SessionStatus.PROVISIONING) return { status: ev.value.status, message: ev.value.message };
        break;
    }
  }
  const { session } = await workspaces.getSession({ id }, { headers: bearer(token) });
  return { status: session?.status ?? SessionStatus.UNSPECIFIED, message: session?.statusMessage ?? "" };
}

/** The tools an agent type enables, when the operator key may read them; undefined lists every tool. */
async function toolsOf(config: Client<typeof ConfigService>, agentType: string, apiKey: string): Promise<string[] | undefined> {
  if (agentType === "") return undefined;
  try {
    return (await config.getWorkspaceConfig({ agentTypeId: agentType }, { headers: bearer(apiKey) })).workspaceConfig?.tools;
  } catch {
    return undefined;
  }
}

/** Runs the stdio bridge until stdin closes or a signal; resolves to the exit code. */
export async function runMcpStdio(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  let settings: McpSettings | "help";
  try {
    settings = parseSettings(args, env);
  } catch (err) {
    say((err as Error).message);
    return (err as Refusal).exitCode ?? 2;
  }
  if (settings === "help") {
    process.stderr.write(USAGE);
    return 0;
  }
  const transport: Transport = createGrpcTransport({ baseUrl: settings.server });
  const workspaces = createClient(WorkspaceService, transport);
  const config = createClient(ConfigService, transport);
  const { apiKey, mode } = settings;

  let credential: string;
  let workspaceId = "";
  let enabled: string[] | undefined;
  let started: string | undefined;
  try {
    switch (mode.kind) {
      case "agent-type": {
        const res = await workspaces.startSession({ agentType: mode.agentType }, { headers: bearer(apiKey) }).catch((err: unknown) => {
          throw new Refusal(`could not start a session of agent type '${mode.agentType}' at ${settings.server}: ${why(err)}`);
        });
        started = res.session?.id ?? "";
        credential = res.sessionToken;
        say(`session ${started} of agent type '${mode.agentType}' started${res.session?.fromWarmPool ? " from a warm pool" : ""}`);
        const status = res.session?.status === SessionStatus.PROVISIONING ? await provisioned(workspaces, started, credential) : { status: res.session?.status ?? SessionStatus.UNSPECIFIED, message: "" };
        if (status.status !== SessionStatus.ACTIVE) {
          await workspaces.endSession({ id: started }, { headers: bearer(apiKey) }).catch(() => undefined);
          throw new Refusal(`session ${started} is ${SessionStatus[status.status]}: ${status.message}`);
        }
        say(`session ${started} is ACTIVE; serving its tools over stdio`);
        enabled = await toolsOf(config, mode.agentType, apiKey);
        break;
      }
      case "session": {
        credential = mode.token;
        const { session } = await workspaces.getSession({}, { headers: bearer(credential) }).catch((err: unknown) => {
          throw new Refusal(`the session token does not work at ${settings.server}: ${why(err)}`);
        });
        say(`serving session ${session?.id ?? ""} (${session?.agentType ?? ""}) over stdio`);
        enabled = await toolsOf(config, session?.agentType ?? "", apiKey);
        break;
      }
      case "workspace": {
        credential = apiKey;
        workspaceId = mode.workspaceId;
        const { workspace } = await workspaces.getWorkspace({ id: workspaceId }, { headers: bearer(credential) }).catch((err: unknown) => {
          throw new Refusal(`workspace '${workspaceId}' at ${settings.server}: ${why(err)}`);
        });
        say(`serving workspace ${workspaceId} over stdio`);
        enabled = await toolsOf(config, workspace?.agentType ?? "", apiKey);
        break;
      }
    }
  } catch (err) {
    say(err instanceof Refusal ? err.message : `failed: ${why(err)}`);
    return err instanceof Refusal ? err.exitCode : 1;
  }

  const header = bearer(credential);
  const server = createBridge({
    caller: { transport, header: () => new Headers(header) },
    workspaceId,
    ...(enabled ? { enabledTools: enabled } : {}),
    onUnexpected: (err) => say(`a tool call failed: ${why(err)}`),
  });
  const stdio = new StdioServerTransport();
  const done = new Promise<number>((resolve) => {
    let ending = false;
    const end = (cause: string, code: number) => {
      if (ending) return;
      ending = true;
      void (async () => {
        if (started !== undefined) {
          // The session this process started ends with it: its workspace goes, its token stops working.
          try {
            await workspaces.endSession({ id: started }, { headers: bearer(apiKey), timeoutMs: 10_000 });
            say(`${cause}: session ${started} ended`);
          } catch (err) {
            say(`${cause}: ending session ${started} failed: ${why(err)}`);
          }
        }
        await server.close().catch(() => undefined);
        resolve(code);
      })();
    };
    process.stdin.once("end", () => end("stdin closed", 0));
    process.stdin.once("close", () => end("stdin closed", 0));
    process.once("SIGINT", () => end("SIGINT", 130));
    process.once("SIGTERM", () => end("SIGTERM", 143));
  });
  await server.connect(stdio);
  return done;
}
