/**
 * The MCP bridge over stdio: the real `agent-workspace mcp` process, spawned with this Node and
 * driven by the official MCP SDK client, against the real server on a real socket. It starts and
 * ends its own session (--agent-type), serves an existing one (--session) or a workspace
 * (--workspace), runs every tool, returns the server's refusals as tool errors, and writes
 * nothing but protocol on stdout.
 */
import { AuditOutcome } from "../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { bridgeCatalog } from "../server/mcp/catalog.ts";
import { TOOL_NAMES } from "../server/tools/registry.ts";
import { errorOf, exerciseTools, ok, PROCESS_TOOL_NAMES, stdioBridge, textOf } from "./helpers/mcp.ts";
import { LOCAL_ONLY, serverTest } from "./helpers/server.ts";
import { waitDead } from "./helpers/process.ts";

const KEY = "mcp-stdio-operator-key-0123456789";
const test = serverTest({ env: LOCAL_ONLY, apiKeys: [KEY] });

let serial = 0;
const newId = (hint: string) => `${hint}-${process.pid}-${++serial}`;

/** Sessions of an agent type, by status name. */
async function sessionsOf(t: { context: { server: { clients: { connect: { workspaces: { listSessions(i: object): Promise<{ sessions: Array<{ id: string; status: SessionStatus }> }> } } } } } }, agentType: string) {
  const { sessions } = await t.context.server.clients.connect.workspaces.listSessions({ agentType });
  return sessions.map((s) => ({ id: s.id, status: SessionStatus[s.status] }));
}

test("--agent-type starts a session, serves every tool over stdio, and ends the session when stdin closes", async (t) => {
  const { server } = t.context;
  const type = newId("mcp-all");
  await server.clients.connect.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "local", tools: [...TOOL_NAMES] } } });
  const bridge = await stdioBridge(["--agent-type", type, "--server", server.url], { AGENT_WORKSPACE_API_KEY: KEY });
  const { tools } = await bridge.client.listTools();
  t.deepEqual(tools.map((tool) => tool.name), bridgeCatalog().map((c) => c.name));
  const called = await exerciseTools(t, bridge.client);
  t.deepEqual([...called].sort(), bridgeCatalog().map((c) => c.name).sort());
  const [running] = await sessionsOf(t, type);
  t.is(running.status, "ACTIVE");

  const pid = bridge.transport.pid!;
  await bridge.client.close();
  t.true(await waitDead([pid], 15_000), "the bridge exits");
  t.deepEqual(await sessionsOf(t, type), [{ id: running.id, status: "ENDED" }]);
  // Nothing but protocol went to stdout (a stray line would have been a transport error).
  t.deepEqual(bridge.errors, []);
  t.regex(bridge.stderr(), new RegExp(`session ${running.id} of agent type '${type}' started`));
  t.regex(bridge.stderr(), /stdin closed: session sess-\w+ ended/);
  t.false(bridge.stderr().includes(KEY));
});

test("--agent-type ends its session on SIGTERM", async (t) => {
  const { server } = t.context;
  const type = newId("mcp-term");
  await server.clients.connect.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "local", tools: ["read"] } } });
  const bridge = await stdioBridge(["--agent-type", type, "--server", server.url], { AGENT_WORKSPACE_API_KEY: KEY });
  t.deepEqual((await bridge.client.listTools()).tools.map((tool) => tool.name), ["read"]);
  const [running] = await sessionsOf(t, type);
  t.is(running.status, "ACTIVE");
  const pid = bridge.transport.pid!;
  process.kill(pid, "SIGTERM");
  t.true(await waitDead([pid], 15_000), "the bridge exits");
  t.deepEqual(await sessionsOf(t, type), [{ id: running.id, status: "ENDED" }]);
  t.regex(bridge.stderr(), /SIGTERM: session sess-\w+ ended/);
  await bridge.client.close();
});

test("--session serves an existing session: a tool its agent type lacks and a command its policy denies are the server's refusals, in the audit trail", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = newId("mcp-narrow");
  await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "local", tools: ["bash", "read"], commandPolicy: { allow: ["echo"] } } } });
  const { session, sessionToken } = await op.workspaces.startSession({ agentType: type });
  const bridge = await stdioBridge(["--session", sessionToken, "--server", server.url], { AGENT_WORKSPACE_API_KEY: KEY });
  try {
    t.deepEqual((await bridge.client.listTools()).tools.map((tool) => tool.name), ["bash", "read", ...PROCESS_TOOL_NAMES]);
    const write = await bridge.client.callTool({ name: "write", arguments: { path: "x.txt", content: "x" } });
    t.like(errorOf(write), { code: "permission_denied", reason: "ERROR_REASON_TOOL_NOT_ENABLED", message: "Tool 'write' is not enabled for this agent type" });
    const denied = await bridge.client.callTool({ name: "bash", arguments: { command: "whoami" } });
    t.like(errorOf(denied), { code: "permission_denied", reason: "ERROR_REASON_COMMAND_NOT_ALLOWED" });
    t.true(textOf(await ok(t, bridge.client, "bash", { command: "echo fine" })).includes("fine"));
    for (const r of [write, denied]) t.false(textOf(r).includes(sessionToken));
  } finally {
    await bridge.client.close();
  }
  const { events } = await op.audit.listAuditEvents({ sessionId: session!.id, pageSize: 50 });
  const seen = events.filter((e) => e.tool !== "").map((e) => `${e.tool} ${AuditOutcome[e.outcome]} ${ErrorReason[e.reason]} ${e.protocol}`).sort();
  t.deepEqual(seen, ["bash DENIED COMMAND_NOT_ALLOWED grpc", "bash OK UNSPECIFIED grpc", "write DENIED TOOL_NOT_ENABLED grpc"]);
  // A bridge serving a session it did not start leaves it running.
  t.is(SessionStatus[(await op.workspaces.getSession({ id: session!.id })).session!.status], "ACTIVE");
  t.false(bridge.stderr().includes(sessionToken));
  await op.workspaces.endSession({ id: session!.id });
});

test("--workspace serves a workspace as an operator; a bad start is a message on stderr and an exit code, never a token", async (t) => {
  const { server } = t.context;
  const { workspace } = await server.clients.connect.workspaces.createWorkspace({ provider: "local" });
  const bridge = await stdioBridge(["--workspace", workspace!.id, "--server", server.url], { AGENT_WORKSPACE_API_KEY: KEY });
  try {
    await ok(t, bridge.client, "write", { path: "w.txt", content: "from stdio\n" });
    t.is(textOf(await ok(t, bridge.client, "read", { path: "w.txt" })), "1: from stdio");
  } finally {
    await bridge.client.close();
  }
  const token = "awsess_not-a-live-session-0123456789abcdef";
  const refused = await stdioBridge(["--session", token, "--server", server.url]).then(
    () => "started",
    (err: unknown) => String(err),
  );
  t.regex(refused, /the session token does not work at http:\/\/127\.0\.0\.1:\d+: Unauthenticated: The session token is not valid/);
  t.false(refused.includes(token));
});
