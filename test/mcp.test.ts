/**
 * The MCP bridge over streamable HTTP (`/mcp` on the server's own port), driven by the official
 * MCP SDK client against the real server on a real socket: the tools it lists and their schemas,
 * every tool run, the server's refusals (a tool the agent type lacks, a command its policy
 * denies) as tool errors, the audit trail of those calls, progress notifications of a long
 * command, and what an unauthenticated or malformed request gets.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { fromJson } from "@bufbuild/protobuf";
import { AuditOutcome, ListAuditEventsRequestSchema } from "../gen/agentworkspace/v1/audit_pb.js";
import { StreamBashResponseSchema } from "../gen/agentworkspace/v1/tool_pb.js";
import { messageSchema } from "../server/mcp/schema.ts";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { bridgeCatalog } from "../server/mcp/catalog.ts";
import { TOOL_NAMES } from "../server/tools/registry.ts";
import { errorOf, exerciseTools, httpClient, ok, PROCESS_TOOL_NAMES, textOf } from "./helpers/mcp.ts";
import { ProcessService } from "../gen/agentworkspace/v1/process_pb.js";
import { LOCAL_ONLY, serverTest } from "./helpers/server.ts";

const KEY = "mcp-test-operator-key-0123456789";
const test = serverTest({ env: LOCAL_ONLY, apiKeys: [KEY] });

let serial = 0;
const newId = (hint: string) => `${hint}-${process.pid}-${++serial}`;

/** A workspace without an agent type (every tool allowed to operators). */
async function plainWorkspace(t: { context: { server: { clients: { connect: { workspaces: { createWorkspace(i: object): Promise<{ workspace?: { id: string } }> } } } } } }): Promise<string> {
  const { workspace } = await t.context.server.clients.connect.workspaces.createWorkspace({ provider: "local" });
  return workspace!.id;
}

/** Posts one JSON-RPC message to /mcp with fetch; resolves to the status, headers and body text. */
async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const INITIALIZE = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "curl", version: "1" } } };

test("every registry tool is exposed, one MCP tool per unary RPC, with a schema derived from its request message", async (t) => {
  const { server } = t.context;
  const client = await httpClient(server.url, { credential: KEY, workspace: await plainWorkspace(t) });
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    t.deepEqual(names, bridgeCatalog().map((c) => c.name));
    t.deepEqual(names, ["bash", "read", "write", "edit", "patch", "delete", "list", "glob", "grep", "git_status", "git_diff", "git_commit", "git_checkout", "git_push", ...PROCESS_TOOL_NAMES]);
    for (const tool of TOOL_NAMES) t.true(names.some((n) => n === tool || n.startsWith(`${tool}_`)), `registry tool ${tool} is exposed`);
    // Every ToolService RPC is reachable: as a tool's RPC, or as the streamed form of one.
    const catalog = bridgeCatalog();
    for (const method of ToolService.methods) t.true(catalog.some((c) => c.method === method || c.stream === method), `${method.name} is bridged`);
    // Every unary ProcessService RPC is a tool of its own; AttachProcess, a stream, is not bridged.
    for (const method of ProcessService.methods) t.is(catalog.some((c) => c.method === method), method.methodKind === "unary", `${method.name}`);
    for (const tool of tools) {
      t.true((tool.description ?? "").length > 20, `${tool.name} has a description`);
      const props = (tool.inputSchema.properties ?? {}) as Record<string, { description?: string }>;
      t.false("workspace_id" in props, `${tool.name} does not ask for the workspace`);
      for (const [field, schema] of Object.entries(props)) t.truthy(schema.description, `${tool.name}.${field} is described`);
    }
    const bash = tools.find((tool) => tool.name === "bash")!;
    t.deepEqual(bash.inputSchema, {
      type: "object",
      additionalProperties: false,
      properties: {
        command: { type: "string", description: "The command line, run as `bash -c command`." },
        workdir: { type: "string", description: "Working directory, relative to the workspace or absolute under /workspace; empty is the root." },
        timeout_ms: { type: ["integer", "string"], pattern: "^-?[0-9]+$", description: "Timeout in milliseconds; 0 takes the server default (120000). Capped at the server maximum." },
        env: { type: "object", additionalProperties: { type: "string" }, description: "Extra environment variables for the command." },
      },
    });
    const patch = tools.find((tool) => tool.name === "patch")!;
    t.like(patch.inputSchema.properties, { patches: { type: "array", items: { type: "object", properties: { find: { type: "string" }, replace: { type: "string" } } } } });
  } finally {
    await client.close();
  }
});

test("schemas follow the proto3 JSON mapping for enums, timestamps, 64-bit integers, bytes and oneofs, and fromJson takes what they describe", (t) => {
  const audit = messageSchema(ListAuditEventsRequestSchema, { omit: ["workspace_id"] });
  const props = audit.properties as Record<string, Record<string, unknown>>;
  t.false("workspace_id" in props);
  t.deepEqual(props.outcome, { type: "string", enum: ["AUDIT_OUTCOME_OK", "AUDIT_OUTCOME_ERROR", "AUDIT_OUTCOME_DENIED", "AUDIT_OUTCOME_CANCELLED"] });
  t.deepEqual(props.start_time, { type: "string", format: "date-time" });
  t.deepEqual(props.page_size, { type: "integer", minimum: -2147483648, maximum: 2147483647 });
  const input = { outcome: "AUDIT_OUTCOME_DENIED", start_time: "2026-01-02T03:04:05Z", page_size: 5 };
  t.is(fromJson(ListAuditEventsRequestSchema, input).outcome, AuditOutcome.DENIED);
  const stream = messageSchema(StreamBashResponseSchema).properties as Record<string, Record<string, unknown>>;
  t.like(stream.stdout, { type: "string", contentEncoding: "base64", description: "Only one of started, stdout, stderr, exited may be set." });
  t.like(stream.exited, { type: "object", properties: { duration_ms: { type: ["integer", "string"], pattern: "^-?[0-9]+$" } } });
});

test("each tool runs over streamable HTTP, as an operator naming the workspace", async (t) => {
  const { server } = t.context;
  const client = await httpClient(server.url, { credential: KEY, workspace: await plainWorkspace(t) });
  try {
    const called = await exerciseTools(t, client);
    t.deepEqual([...called].sort(), bridgeCatalog().map((c) => c.name).sort());
  } finally {
    await client.close();
  }
});

test("a tool the agent type lacks and a command its policy denies come back as tool errors, and the audit trail shows those calls", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const type = newId("mcp-narrow");
  await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "local", tools: ["bash", "read", "write"], commandPolicy: { allow: ["echo", "cat"] } } } });
  const { session, sessionToken } = await op.workspaces.startSession({ agentType: type });
  const client = await httpClient(server.url, { credential: sessionToken });
  const texts: string[] = [];
  try {
    const { tools } = await client.listTools();
    t.deepEqual(tools.map((tool) => tool.name), ["bash", "read", "write", ...PROCESS_TOOL_NAMES]);

    // Not listed, still callable: the server refuses it.
    const grep = await client.callTool({ name: "grep", arguments: { pattern: "x" } });
    texts.push(textOf(grep));
    t.like(errorOf(grep), { code: "permission_denied", reason: "ERROR_REASON_TOOL_NOT_ENABLED", message: "Tool 'grep' is not enabled for this agent type", metadata: { tool: "grep", agent_type: type } });
    t.regex(textOf(grep), /^Error ERROR_REASON_TOOL_NOT_ENABLED \(permission_denied\): Tool 'grep' is not enabled for this agent type\nmetadata: .*tool=grep/);

    const denied = await client.callTool({ name: "bash", arguments: { command: "whoami" } });
    texts.push(textOf(denied));
    t.like(errorOf(denied), { code: "permission_denied", reason: "ERROR_REASON_COMMAND_NOT_ALLOWED" });
    t.true(textOf(denied).includes("COMMAND_NOT_ALLOWED"));

    const allowed = await ok(t, client, "bash", { command: "echo allowed" });
    texts.push(textOf(allowed));
    t.true(textOf(allowed).includes("--- stdout ---\nallowed"));

    // Another workspace through the session's token: the server's OUTSIDE_SESSION.
    const other = await plainWorkspace(t);
    const outside = await httpClient(server.url, { credential: sessionToken, workspace: other });
    try {
      const r = await outside.callTool({ name: "read", arguments: { path: "x" } });
      texts.push(textOf(r));
      t.is(errorOf(r).reason, "ERROR_REASON_OUTSIDE_SESSION");
    } finally {
      await outside.close();
    }
  } finally {
    await client.close();
  }
  const { events } = await op.audit.listAuditEvents({ sessionId: session!.id, pageSize: 50 });
  const seen = events.map((e) => ({ tool: e.tool, outcome: AuditOutcome[e.outcome], reason: ErrorReason[e.reason], principal: e.principalKind, command: e.request.command ?? "" }));
  t.deepEqual(seen.filter((e) => e.tool === "grep"), [{ tool: "grep", outcome: "DENIED", reason: "TOOL_NOT_ENABLED", principal: "session", command: "" }]);
  t.deepEqual(seen.filter((e) => e.tool === "bash").sort((a, b) => a.command.localeCompare(b.command)), [
    { tool: "bash", outcome: "OK", reason: "UNSPECIFIED", principal: "session", command: "echo allowed" },
    { tool: "bash", outcome: "DENIED", reason: "COMMAND_NOT_ALLOWED", principal: "session", command: "whoami" },
  ]);
  t.deepEqual(seen.filter((e) => e.tool === "read"), [{ tool: "read", outcome: "DENIED", reason: "OUTSIDE_SESSION", principal: "session", command: "" }]);
  // The token is nowhere: not in a result, not in a record.
  for (const text of [...texts, JSON.stringify(events, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))]) t.false(text.includes(sessionToken));
  await op.workspaces.endSession({ id: session!.id });
});

test("a long command sends its output as progress notifications when the client asks, and the result holds all of it", async (t) => {
  const { server } = t.context;
  const workspace = await plainWorkspace(t);
  const client = await httpClient(server.url, { credential: KEY, workspace });
  try {
    // The command waits for a file the test writes only once the first notification arrived: it
    // can finish only if its output reached the client while it ran.
    const progress: Array<{ progress: number; message?: string }> = [];
    let released: Promise<unknown> | undefined;
    const command = "echo line1; i=0; while [ ! -f go ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done; [ -f go ] && echo line2; echo done >&2";
    const result = (await client.callTool({ name: "bash", arguments: { command } }, undefined, {
      onprogress: (p) => {
        progress.push(p);
        released ??= server.clients.connect.tools.writeFile({ workspaceId: workspace, path: "go", content: "" });
      },
    })) as CallToolResult;
    await released;
    t.falsy(result.isError);
    t.regex(textOf(result), /^\[exit code 0, \d+ ms\]\n--- stdout ---\nline1\nline2\n--- stderr ---\ndone$/);
    t.like(result.structuredContent, { exit_code: 0, stdout: "line1\nline2\n", stderr: "done\n", stdout_total_bytes: "12", stderr_total_bytes: "5" });
    // Each stream's chunks in order (the two streams are separate pipes, so not ordered with each other).
    const messages = progress.map((p) => p.message ?? "");
    t.is(messages.filter((m) => !m.startsWith("[stderr] ")).join(""), "line1\nline2\n");
    t.is(messages.filter((m) => m.startsWith("[stderr] ")).join(""), "[stderr] done\n");
    t.is(progress.at(-1)?.progress, 17);
    for (let i = 1; i < progress.length; i++) t.true(progress[i].progress > progress[i - 1].progress, "progress increases");
  } finally {
    await client.close();
  }
});

test("arguments that do not fit the request message are a tool error naming the field; the server keeps serving", async (t) => {
  const { server } = t.context;
  const client = await httpClient(server.url, { credential: KEY, workspace: await plainWorkspace(t) });
  try {
    const unknown = await client.callTool({ name: "read", arguments: { path: "a.txt", bogus: 1 } });
    t.like(errorOf(unknown), { code: "invalid_argument", reason: "ERROR_REASON_INVALID_ARGUMENT", metadata: { field: "bogus" } });
    t.regex(textOf(unknown), /key "bogus" is unknown/);
    const wrongType = await client.callTool({ name: "bash", arguments: { command: 42 } });
    t.like(errorOf(wrongType), { reason: "ERROR_REASON_INVALID_ARGUMENT", metadata: { field: "command" } });
    const bound = await client.callTool({ name: "read", arguments: { path: "a.txt", workspace_id: "ws-elsewhere" } });
    t.like(errorOf(bound), { reason: "ERROR_REASON_INVALID_ARGUMENT", metadata: { field: "workspace_id" } });
    const noTool = await client.callTool({ name: "rm_rf", arguments: {} });
    t.like(errorOf(noTool), { reason: "ERROR_REASON_UNKNOWN_TOOL" });
    // camelCase, as protobuf-es fromJson also accepts, and 64-bit integers as strings.
    await ok(t, client, "write", { path: "a.txt", content: "one\n" });
    t.is(errorOf(await client.callTool({ name: "edit", arguments: { path: "a.txt", oldString: "zzz", newString: "y" } })).reason, "ERROR_REASON_FIND_NOT_FOUND");
    t.true(textOf(await ok(t, client, "bash", { command: "cat a.txt", timeout_ms: "5000" })).includes("one"));
  } finally {
    await client.close();
  }
});

test("/mcp without a credential, or with a bad one, is 401 and runs nothing", async (t) => {
  const { server } = t.context;
  const workspace = await plainWorkspace(t);
  const url = `${server.url}/mcp?workspace=${workspace}`;
  const bare = await post(url, INITIALIZE);
  t.is(bare.status, 401);
  t.is(bare.headers.get("www-authenticate"), 'Bearer realm="agent-workspace"');
  t.like(JSON.parse(bare.text), { jsonrpc: "2.0", id: null, error: { code: -32001, data: { reason: "ERROR_REASON_UNAUTHENTICATED" } } });

  const badToken = "awsess_this-token-does-not-exist-0123456789";
  const bad = await post(url, INITIALIZE, { authorization: `Bearer ${badToken}` });
  t.is(bad.status, 401);
  t.false(bad.text.includes(badToken));
  t.is(JSON.parse(bad.text).error.message, "The session token is not valid: its session has ended, or it never existed");

  const call = { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "bash", arguments: { command: "touch ran.txt" } } };
  t.is((await post(url, call)).status, 401);
  t.is((await post(url, call, { authorization: "Bearer wrong-key" })).status, 401);
  const read = await server.clients.connect.tools.readFile({ workspaceId: workspace, path: "ran.txt" }).catch((err: unknown) => err);
  t.true(String(read).includes("not found") || String(read).includes("FILE_NOT_FOUND"), String(read));
});

test("/mcp answers an operator who names no workspace, or an unknown one, a body over the limit, bad JSON and GET with JSON-RPC errors", async (t) => {
  const { server } = t.context;
  const auth = { authorization: `Bearer ${KEY}` };
  const none = await post(`${server.url}/mcp`, INITIALIZE, auth);
  t.is(none.status, 400);
  t.like(JSON.parse(none.text), { error: { data: { reason: "ERROR_REASON_INVALID_ARGUMENT", metadata: { field: "workspace" } } } });
  const unknown = await post(`${server.url}/mcp?workspace=ws-nope`, INITIALIZE, auth);
  t.is(unknown.status, 404);
  t.like(JSON.parse(unknown.text), { error: { data: { reason: "ERROR_REASON_WORKSPACE_NOT_FOUND" } } });
  const workspace = await plainWorkspace(t);
  const url = `${server.url}/mcp?workspace=${workspace}`;
  const notJson = await post(url, "{not json", auth);
  t.is(notJson.status, 400);
  t.like(JSON.parse(notJson.text), { error: { data: { reason: "ERROR_REASON_INVALID_ARGUMENT" } } });
  const huge = await post(url, { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "write", arguments: { path: "big.txt", content: "x".repeat(33 * 1024 * 1024) } } }, auth);
  t.is(huge.status, 413);
  t.like(JSON.parse(huge.text), { error: { data: { reason: "ERROR_REASON_RESOURCE_EXHAUSTED" } } });
  const get = await fetch(url, { headers: { ...auth, accept: "text/event-stream" } });
  t.is(get.status, 405);
  t.is(get.headers.get("allow"), "POST");
  await get.text();
  // And it goes on serving.
  const client = await httpClient(server.url, { credential: KEY, workspace });
  try {
    t.is((await client.listTools()).tools.length, bridgeCatalog().length);
  } finally {
    await client.close();
  }
});
