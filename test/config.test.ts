/**
 * Seed 003 (agent-workspace-config), scenario by scenario, through real clients of a real server:
 * ConfigService over gRPC, Connect and gRPC-Web, the seed's REST paths over plain HTTP, and the
 * tool permissions an agent type's configuration decides, with the gRPC codes and the HTTP
 * statuses the contract fixes.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import type { WorkspaceConfigSchema } from "../gen/agentworkspace/v1/config_pb.js";
import { toolNameOf } from "../server/tools/registry.ts";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { post } from "./helpers/http.ts";
import { type ClientSet, expectError, LOCAL_ONLY, serverTest, startServer } from "./helpers/server.ts";
import { everyToolCall } from "./helpers/tool-calls.ts";

const test = serverTest({ env: { ...LOCAL_ONLY, WORKSPACE_DEFAULT_CPU: "1", WORKSPACE_DEFAULT_MEMORY: "512M", WORKSPACE_DEFAULT_DISK: "1G" } });
const PROTOCOLS = ["grpc", "connect", "grpcWeb"] as const;
type Config = MessageInitShape<typeof WorkspaceConfigSchema>;

let serial = 0;
/** A fresh agent type id per call, so tests sharing the server never collide. */
const newId = (hint: string) => `${hint}-${process.pid}-${++serial}`;

async function createType(clients: ClientSet, id: string, workspace?: Config) {
  const { agentType } = await clients.config.createAgentType({ agentType: { id, displayName: id, workspace } });
  if (!agentType) throw new Error("no agent type returned");
  return agentType;
}

async function workspaceFor(clients: ClientSet, agentType: string) {
  const { workspace } = await clients.workspaces.createWorkspace({ agentType });
  if (!workspace) throw new Error("no workspace returned");
  return workspace;
}

/** A REST call the way curl makes it. */
async function rest(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === "" ? undefined : JSON.parse(text) };
}

const SEED_CONFIG: Config = {
  enabled: true,
  repoSource: { type: "task_context" },
  tools: ["bash", "read", "write", "edit", "grep", "git"],
  resourceLimits: { cpu: "2", memory: "4G" },
};

for (const protocol of PROTOCOLS) {
  test(`${protocol}: Agent type with workspace enabled — the configuration is stored and its workspaces are made from it`, async (t) => {
    const clients = t.context.server.clients[protocol];
    const id = newId("enabled");
    const created = await createType(clients, id, SEED_CONFIG);
    t.is(created.revision, 1n);
    t.true(created.workspace?.enabled);
    const { workspaceConfig } = await clients.config.getWorkspaceConfig({ agentTypeId: id });
    t.deepEqual(workspaceConfig?.tools, ["bash", "read", "write", "edit", "grep", "git"]);
    t.is(workspaceConfig?.repoSource?.type, "task_context");
    t.is(workspaceConfig?.resourceLimits?.memory, "4G");

    const ws = await workspaceFor(clients, id);
    t.is(ws.agentType, id);
    t.is(ws.limits?.cpu, "2");
    t.is(ws.limits?.memory, "4G");
    t.is(ws.limits?.disk, "1G", "a field the agent type leaves empty takes the server's default");
    const out = await clients.tools.bash({ workspaceId: ws.id, command: "echo ready" });
    t.is(out.stdout, "ready\n");
    await clients.workspaces.deleteWorkspace({ id: ws.id });
  });
}

test("Agent type with workspace disabled — no workspace is made, and every tool endpoint answers 404", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("disabled");
  await createType(clients.connect, id, { enabled: true, tools: ["bash", "read", "write", "edit", "patch", "delete", "list", "glob", "grep"] });
  const ws = await workspaceFor(clients.connect, id);
  await clients.connect.tools.writeFile({ workspaceId: ws.id, path: "README", content: "hello\n" });

  await clients.connect.config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { enabled: false, tools: ["bash"] } });
  await expectError(t, clients.grpc.workspaces.createWorkspace({ agentType: id }), Code.FailedPrecondition, ErrorReason.AGENT_TYPE_WORKSPACE_DISABLED);

  for (const { rpc, call } of everyToolCall()) {
    for (const protocol of PROTOCOLS) {
      const { detail } = await expectError(t, call(clients[protocol], ws.id), Code.NotFound, ErrorReason.WORKSPACE_DISABLED);
      t.is(detail.metadata.agent_type, id, `${protocol} ${rpc}`);
    }
  }
  // The HTTP status over the Connect protocol, as curl sees it.
  const raw = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: ws.id, command: "true" }));
  t.is(raw.status, 404);
  t.is(JSON.parse(raw.body).code, "not_found");

  // Enabled again, the workspace serves again: nothing of it was lost.
  await clients.connect.config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { enabled: true, tools: ["read"] } });
  t.regex((await clients.grpc.tools.readFile({ workspaceId: ws.id, path: "README" })).content, /hello/);
  await clients.connect.workspaces.deleteWorkspace({ id: ws.id });
});

test("Agent type with fixed repository — stored with its URL; a fixed source without one, or with a URL git must not fetch, is refused", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("fixed");
  await createType(clients.connect, id);
  const put = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, {
    enabled: true,
    repo_source: { type: "fixed", url: "https://github.com/org/infra-repo", branch: "main" },
    tools: ["read"],
  });
  t.is(put.status, 200);
  t.deepEqual(put.json.repo_source, { type: "fixed", url: "https://github.com/org/infra-repo", branch: "main" });
  t.is((await rest(url, "GET", `/api/v1/agent-types/${id}/workspace-config`)).json.repo_source.url, "https://github.com/org/infra-repo");

  const refused: Array<[unknown, string]> = [
    [{ type: "fixed" }, "repo_source.url"],
    [{ type: "fixed", url: "file:///etc" }, "repo_source.url"],
    [{ type: "fixed", url: "ext::sh -c touch% /tmp/pwned" }, "repo_source.url"],
    [{ type: "fixed", url: "ftp://example.com/repo.git" }, "repo_source.url"],
    [{ type: "fixed", url: "https://user:token@github.com/org/repo" }, "repo_source.url"],
    [{ type: "fixed", url: "/srv/repo.git" }, "repo_source.url"],
    [{ type: "fixed", url: "https://github.com/org/repo", branch: "--upload-pack=touch /tmp/x" }, "repo_source.branch"],
    [{ type: "none", url: "https://github.com/org/repo" }, "repo_source.url"],
    [{ type: "fixed", url: "ssh://-oProxyCommand=touch%20/tmp/pwned/repo" }, "repo_source.url"],
    [{ type: "fixed", url: "ssh://-oProxyCommand@example.com/repo" }, "repo_source.url"],
    [{ type: "fixed", url: "git@-oProxyCommand=x:repo" }, "repo_source.url"],
    [{ type: "fixed", url: "-u@host:repo" }, "repo_source.url"],
  ];
  for (const [repo_source, field] of refused) {
    const res = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, { enabled: true, repo_source });
    t.is(res.status, 400, JSON.stringify(repo_source));
    t.is(res.json.reason, "ERROR_REASON_INVALID_ARGUMENT");
    t.is(res.json.metadata.field, field, JSON.stringify(repo_source));
  }
  // Accepted forms: ssh, git, scp-like.
  for (const u of ["ssh://git@github.com/org/repo.git", "git://example.com/repo.git", "git@github.com:org/repo.git", "http://gitea.local/org/repo"]) {
    t.is((await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, { repo_source: { type: "fixed", url: u } })).status, 200, u);
  }
});

test("Agent type with no repository — its workspace starts with an empty /workspace", async (t) => {
  const clients = t.context.server.clients.grpc;
  const id = newId("norepo");
  await createType(clients, id, { enabled: true, repoSource: { type: "none" }, tools: ["list", "bash"] });
  const ws = await workspaceFor(clients, id);
  t.deepEqual((await clients.tools.listFiles({ workspaceId: ws.id, path: "" })).files, []);
  t.is((await clients.tools.bash({ workspaceId: ws.id, command: "ls -A /workspace | wc -l; git rev-parse 2>/dev/null || echo no-git" })).stdout, "0\nno-git\n");
  await clients.workspaces.deleteWorkspace({ id: ws.id });
});

test("Tool restriction enforcement — tools [read, grep]: bash is refused with 403 and the exact message, on every protocol", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("readers");
  await createType(clients.connect, id, { enabled: true, tools: ["read", "grep"] });
  const ws = await workspaceFor(clients.connect, id);

  for (const protocol of PROTOCOLS) {
    const { error, detail } = await expectError(t, clients[protocol].tools.bash({ workspaceId: ws.id, command: "id" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
    t.is(error.rawMessage, "Tool 'bash' is not enabled for this agent type");
    t.is(detail.metadata.tool, "bash");
  }
  const raw = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: ws.id, command: "id" }));
  t.is(raw.status, 403);
  t.is(JSON.parse(raw.body).message, "Tool 'bash' is not enabled for this agent type");

  // A streaming RPC is refused before its first message: no `started`, no output.
  let messages = 0;
  const stream = clients.grpc.tools.streamBash({ workspaceId: ws.id, command: "echo leaked" });
  await expectError(t, (async () => { for await (const _ of stream) messages++; })(), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
  t.is(messages, 0);

  // Every RPC whose tool is not in the list is refused, each naming its own tool; read and grep work.
  for (const { rpc, call } of everyToolCall()) {
    const tool = toolNameOf(ToolService.method[rpc.charAt(0).toLowerCase() + rpc.slice(1) as keyof typeof ToolService.method]);
    if (tool === "read" || tool === "grep") {
      await call(clients.connect, ws.id).catch((err: Error) => t.notRegex(err.message, /not enabled/, rpc));
      continue;
    }
    const { error } = await expectError(t, call(clients.connect, ws.id), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
    t.is(error.rawMessage, `Tool '${tool}' is not enabled for this agent type`);
  }
  await clients.connect.workspaces.deleteWorkspace({ id: ws.id });
});

test("Resource limit inheritance — an agent type without resource_limits gets WORKSPACE_DEFAULT_CPU, _MEMORY and _DISK", async (t) => {
  const clients = t.context.server.clients.connect;
  const bare = newId("nolimits");
  await createType(clients, bare, { enabled: true, tools: ["read"] });
  const ws = await workspaceFor(clients, bare);
  t.is(ws.limits?.cpu, "1");
  t.is(ws.limits?.memory, "512M");
  t.is(ws.limits?.disk, "1G");

  const partial = newId("somelimits");
  await createType(clients, partial, { enabled: true, tools: ["read"], resourceLimits: { memory: "2G" } });
  const ws2 = await workspaceFor(clients, partial);
  t.deepEqual([ws2.limits?.cpu, ws2.limits?.memory, ws2.limits?.disk], ["1", "2G", "1G"]);

  // A request's own limits win over the agent type's (an operator's explicit choice).
  const { workspace: ws3 } = await clients.workspaces.createWorkspace({ agentType: partial, limits: { memory: "3G" } });
  t.is(ws3?.limits?.memory, "3G");
  for (const w of [ws, ws2, ws3]) await clients.workspaces.deleteWorkspace({ id: w?.id ?? "" });
});

test("Get workspace config for agent type — GET returns every field of the seed", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("get");
  await createType(clients.connect, id, { ...SEED_CONFIG, checkoutOnStart: true, baseImage: "agent-workspace-base:bookworm", setupCommands: ["npm install --frozen-lockfile"] });
  const res = await rest(url, "GET", `/api/v1/agent-types/${id}/workspace-config`);
  t.is(res.status, 200);
  for (const field of ["enabled", "repo_source", "tools", "resource_limits", "checkout_on_start", "base_image", "setup_commands"]) t.true(field in res.json, field);
  t.is(res.json.enabled, true);
  t.deepEqual(res.json.repo_source, { type: "task_context", url: "", branch: "" });
  t.deepEqual(res.json.tools, ["bash", "read", "write", "edit", "grep", "git"]);
  t.is(res.json.resource_limits.cpu, "2");
  t.is(res.json.resource_limits.memory, "4G");
  t.is(res.json.checkout_on_start, true);
  t.is(res.json.base_image, "agent-workspace-base:bookworm");
  t.deepEqual(res.json.setup_commands, ["npm install --frozen-lockfile"]);
  t.deepEqual(res.json.network, { mode: "none", allow: [] });

  const list = await rest(url, "GET", "/api/v1/agent-types");
  t.is(list.status, 200);
  t.true(list.json.agent_types.some((a: { id: string }) => a.id === id));
  const one = await rest(url, "GET", `/api/v1/agent-types/${id}`);
  t.is(one.json.workspace.repo_source.type, "task_context");
});

test("Update workspace config — validated, persisted, and applied to workspaces made afterwards only", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("update");
  await createType(clients.connect, id, { enabled: true, tools: ["read"], resourceLimits: { memory: "1G" } });
  const before = await workspaceFor(clients.connect, id);

  const put = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, { enabled: true, tools: ["read", "bash"], resource_limits: { memory: "2G", cpu: "0.5" } });
  t.is(put.status, 200);
  t.deepEqual(put.json.tools, ["read", "bash"]);
  t.is((await clients.grpc.config.getAgentType({ id })).agentType?.revision, 2n);

  // The existing workspace keeps what it was made with: its limits, and no new tool.
  t.is((await clients.grpc.workspaces.getWorkspace({ id: before.id })).workspace?.limits?.memory, "1G");
  await expectError(t, clients.grpc.tools.bash({ workspaceId: before.id, command: "true" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
  const after = await workspaceFor(clients.connect, id);
  t.deepEqual([after.limits?.memory, after.limits?.cpu], ["2G", "0.5"]);
  t.is((await clients.grpc.tools.bash({ workspaceId: after.id, command: "echo new" })).stdout, "new\n");

  // Taking a tool away is a revocation: it stops at once, in old and new workspaces alike.
  await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, { enabled: true, tools: ["bash"] });
  await expectError(t, clients.grpc.tools.readFile({ workspaceId: before.id, path: "x" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);
  await expectError(t, clients.grpc.tools.readFile({ workspaceId: after.id, path: "x" }), Code.PermissionDenied, ErrorReason.TOOL_NOT_ENABLED);

  // The same configuration again is no change: the revision stays.
  const rev = (await clients.grpc.config.getAgentType({ id })).agentType?.revision;
  await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, { enabled: true, tools: ["bash"] });
  t.is((await clients.grpc.config.getAgentType({ id })).agentType?.revision, rev);
  for (const w of [before, after]) await clients.grpc.workspaces.deleteWorkspace({ id: w.id });
});

test("Invalid configuration rejected — tools [bash, ssh] is a 400 listing the invalid names and the valid options; nothing is stored", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("invalid");
  await createType(clients.connect, id, { enabled: true, tools: ["read"] });

  const res = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, { enabled: true, tools: ["bash", "ssh"] });
  t.is(res.status, 400);
  t.is(res.json.code, "invalid_argument");
  t.is(res.json.reason, "ERROR_REASON_UNKNOWN_TOOL");
  t.regex(res.json.message, /'ssh'/);
  t.notRegex(res.json.message, /'bash'/);
  for (const valid of ["bash", "read", "write", "edit", "patch", "delete", "list", "glob", "grep", "git"]) t.true(res.json.message.includes(valid), valid);
  t.is(res.json.metadata.invalid, "ssh");
  t.is(res.json.metadata.field, "tools");
  t.is(res.json.metadata.valid, "bash,read,write,edit,patch,delete,list,glob,grep,git");

  for (const protocol of PROTOCOLS) {
    const { detail } = await expectError(
      t,
      clients[protocol].config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { tools: ["bash", "ssh", "telnet"] } }),
      Code.InvalidArgument,
      ErrorReason.UNKNOWN_TOOL,
    );
    t.is(detail.metadata.invalid, "ssh,telnet");
  }
  t.deepEqual((await rest(url, "GET", `/api/v1/agent-types/${id}/workspace-config`)).json.tools, ["read"], "the rejected update stored nothing");
});

test("every malformed field is a 400 with a typed reason and the field in the metadata", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("malformed");
  await createType(clients.connect, id);
  const cases: Array<[Record<string, unknown>, string, string]> = [
    [{ resource_limits: { cpu: "two" } }, "resource_limits.cpu", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ resource_limits: { memory: "lots" } }, "resource_limits.memory", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ resource_limits: { disk: "-1G" } }, "resource_limits.disk", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ resource_limits: { cpu: "0" } }, "resource_limits.cpu", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ resource_limits: { memory: "0" } }, "resource_limits.memory", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ resource_limits: { disk: "1M" } }, "resource_limits.disk", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ repo_source: { type: "svn" } }, "repo_source.type", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ repo_source: { type: "fixed" } }, "repo_source.url", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ repo_source: { type: "fixed", url: "gopher://x/y" } }, "repo_source.url", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ provider: "firecracker" }, "provider", "ERROR_REASON_UNKNOWN_PROVIDER"],
    [{ provider: "local", fallback_provider: "kubernetes" }, "fallback_provider", "ERROR_REASON_UNKNOWN_PROVIDER"],
    [{ network: { mode: "host" } }, "network.mode", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "egress" } }, "network.mode", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "open" } }, "network.mode", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "none", allow: ["registry.npmjs.org"] } }, "network.allow", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "allowlist", allow: ["registry.npmjs.org", "http://x.org/"] } }, "network.allow[1]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "allowlist", allow: ["127.0.0.1"] } }, "network.allow[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "allowlist", allow: ["*.org"] } }, "network.allow[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "allowlist", allow: ["example.org:0"] } }, "network.allow[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    // A prefix is decimal digits: "10.0.0.0/" is not /0 (every address), nor "/0x10" /16.
    [{ network: { mode: "allowlist", allow: ["10.0.0.0/"] } }, "network.allow[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "allowlist", allow: ["example.org", "203.0.113.0/0x10"] } }, "network.allow[1]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ network: { mode: "allowlist", allow: Array.from({ length: 201 }, (_, i) => `h${i}.example.org`) } }, "network.allow", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ warm_pool_size: -1 }, "warm_pool_size", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ engine_labels: { Zone: "east" } }, "engine_labels.Zone", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ engine_labels: { zone: "east coast" } }, "engine_labels.zone", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ engine_labels: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`l${i}`, "x"])) }, "engine_labels", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ max_command_timeout_ms: 999_999_999 }, "max_command_timeout_ms", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ max_command_timeout_ms: 10_000, default_command_timeout_ms: 20_000 }, "default_command_timeout_ms", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ setup_commands: ["npm ci", "  "] }, "setup_commands[1]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ base_image: "--privileged" }, "base_image", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ tools: ["read"], shell: "bash" }, "shell", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ tools: "read" }, "tools", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ command_policy: { default_action: "maybe" } }, "command_policy.default_action", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ command_policy: { allow: ["git", "  "] } }, "command_policy.allow[1]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ command_policy: { deny: ["--force"] } }, "command_policy.deny[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ sensitive_files: { deny: ["/etc/shadow"] } }, "sensitive_files.deny[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ sensitive_files: { write_protected: ["a/../../b"] } }, "sensitive_files.write_protected[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ git: { protected_branches: ["main", "release/[0-9]"] } }, "git.protected_branches[1]", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ git: { protected_branches: ["has space"] } }, "git.protected_branches[0]", "ERROR_REASON_INVALID_ARGUMENT"],
    // The memory provider runs no processes: no clone, setup command or network there.
    [{ provider: "memory", repo_source: { type: "task_context" } }, "repo_source.type", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ provider: "memory", setup_commands: ["npm ci"] }, "setup_commands", "ERROR_REASON_INVALID_ARGUMENT"],
    [{ provider: "memory", network: { mode: "allowlist", allow: ["example.org"] } }, "network.mode", "ERROR_REASON_INVALID_ARGUMENT"],
  ];
  for (const [body, field, reason] of cases) {
    const res = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, body);
    t.is(res.status, 400, JSON.stringify(body));
    t.is(res.json.reason, reason, JSON.stringify(body));
    t.is(res.json.metadata.field, field, JSON.stringify(body));
  }
  const bad = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, "{not json");
  t.is(bad.status, 400);
  t.is(bad.json.metadata.field, "body");
  // Over gRPC the same validation, the same reason.
  const { detail } = await expectError(t, clients.grpc.config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { resourceLimits: { memory: "lots" } } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  t.is(detail.metadata.field, "resource_limits.memory");
  t.is((await clients.grpc.config.getAgentType({ id })).agentType?.revision, 1n, "no refused update was stored");
});

test("an egress allowlist is stored in canonical form (trimmed, de-duplicated) and shown by GET; 'egress' is the former name of 'open'", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("allowlist");
  await createType(clients.connect, id);
  const put = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, {
    enabled: true,
    network: { mode: "allowlist", allow: [" registry.npmjs.org ", "*.github.com:443", "registry.npmjs.org", "[2001:db8::]/32:443", "203.0.113.0/24:80,8080"] },
  });
  t.is(put.status, 200, JSON.stringify(put.json));
  const got = await rest(url, "GET", `/api/v1/agent-types/${id}/workspace-config`);
  t.deepEqual(got.json.network, { mode: "allowlist", allow: ["registry.npmjs.org", "*.github.com:443", "[2001:db8::]/32:443", "203.0.113.0/24:80,8080"] });
});

test("Default configuration for new agent types — without a workspace configuration an agent type has enabled = false", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("default");
  const created = await createType(clients.grpc, id);
  t.false(created.workspace?.enabled);
  const res = await rest(url, "GET", `/api/v1/agent-types/${id}/workspace-config`);
  t.is(res.json.enabled, false);
  t.deepEqual(res.json.tools, []);
  await expectError(t, clients.grpc.workspaces.createWorkspace({ agentType: id }), Code.FailedPrecondition, ErrorReason.AGENT_TYPE_WORKSPACE_DISABLED);
});

test("REST: an unknown agent type is 404 on GET and PUT; a wrong method is 405; an unknown path is 404", async (t) => {
  const { url } = t.context.server;
  const get = await rest(url, "GET", "/api/v1/agent-types/no-such-type/workspace-config");
  t.is(get.status, 404);
  t.is(get.json.reason, "ERROR_REASON_AGENT_TYPE_NOT_FOUND");
  t.is((await rest(url, "PUT", "/api/v1/agent-types/no-such-type/workspace-config", { enabled: true })).status, 404);
  t.is((await rest(url, "GET", "/api/v1/agent-types/no-such-type")).status, 404);
  const post405 = await fetch(`${url}/api/v1/agent-types/x/workspace-config`, { method: "POST", body: "{}" });
  t.is(post405.status, 405);
  t.is(post405.headers.get("allow"), "GET, PUT");
  t.is((await fetch(`${url}/api/v1/nothing`)).status, 404);
});

test("ConfigService CRUD: duplicates, bad ids, revisions, and an agent type in use cannot be deleted", async (t) => {
  const clients = t.context.server.clients.grpc;
  const id = newId("crud");
  await createType(clients, id, { enabled: true, tools: ["read"] });
  await expectError(t, createType(clients, id), Code.AlreadyExists, ErrorReason.AGENT_TYPE_EXISTS);
  for (const bad of ["", "Upper", "-dash", "a b", "x".repeat(64), "../etc"]) {
    await expectError(t, createType(clients, bad), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  }
  const updated = await clients.config.updateAgentType({ agentType: { id, displayName: "Readers", description: "reads" } });
  t.is(updated.agentType?.revision, 2n);
  t.deepEqual(updated.agentType?.workspace?.tools, ["read"], "an update without a workspace configuration keeps it");
  await expectError(t, clients.config.updateAgentType({ agentType: { id: newId("missing") } }), Code.NotFound, ErrorReason.AGENT_TYPE_NOT_FOUND);

  const ws = await workspaceFor(clients, id);
  const { detail } = await expectError(t, clients.config.deleteAgentType({ id }), Code.FailedPrecondition, ErrorReason.AGENT_TYPE_IN_USE);
  t.is(detail.metadata.workspaces, "1");
  await clients.workspaces.deleteWorkspace({ id: ws.id });
  await clients.config.deleteAgentType({ id });
  await expectError(t, clients.config.getAgentType({ id }), Code.NotFound, ErrorReason.AGENT_TYPE_NOT_FOUND);
  await expectError(t, clients.workspaces.createWorkspace({ agentType: id }), Code.NotFound, ErrorReason.AGENT_TYPE_NOT_FOUND);
  t.false((await clients.config.listAgentTypes({})).agentTypes.some((a) => a.id === id));
});

test("an agent type's command timeouts bound its workspaces' commands", async (t) => {
  const clients = t.context.server.clients.connect;
  const id = newId("timeouts");
  await createType(clients, id, { enabled: true, tools: ["bash"], maxCommandTimeoutMs: 5000n, defaultCommandTimeoutMs: 1000n });
  const ws = await workspaceFor(clients, id);
  const { detail } = await expectError(t, clients.tools.bash({ workspaceId: ws.id, command: "true", timeoutMs: 6000n }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  t.is(detail.metadata.max, "5000");
  await expectError(t, clients.tools.bash({ workspaceId: ws.id, command: "sleep 30" }), Code.DeadlineExceeded, ErrorReason.COMMAND_TIMEOUT);
  await clients.workspaces.deleteWorkspace({ id: ws.id });
});

test("a provider that is unavailable, or no longer configured, falls back to the agent type's fallback_provider", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-fallback-"));
  try {
    // A docker provider pointed at a socket nobody serves: registered (mode "on"), always unavailable.
    const server = await startServer({ dataDir, env: { AGENT_WORKSPACE_DOCKER: "on", DOCKER_SOCKET: "/nonexistent/docker.sock" } });
    try {
      const clients = server.clients.grpc;
      await createType(clients, "fallback", { enabled: true, tools: ["bash"], provider: "docker", fallbackProvider: "local" });
      const ws = await workspaceFor(clients, "fallback");
      t.is(ws.provider, "local");
      t.is((await clients.tools.bash({ workspaceId: ws.id, command: "echo fell-back" })).stdout, "fell-back\n");
      await clients.workspaces.deleteWorkspace({ id: ws.id });
      // Without a fallback the failure is the caller's to see.
      await createType(clients, "nofallback", { enabled: true, tools: ["bash"], provider: "docker" });
      await expectError(t, clients.workspaces.createWorkspace({ agentType: "nofallback" }), Code.Unavailable, ErrorReason.PROVIDER_UNAVAILABLE);
    } finally {
      await server.close();
    }
    // Restarted without container providers, the stored agent types name a provider the server lacks.
    const restarted = await startServer({ dataDir, env: LOCAL_ONLY });
    try {
      const clients = restarted.clients.connect;
      const ws = await workspaceFor(clients, "fallback");
      t.is(ws.provider, "local");
      await clients.workspaces.deleteWorkspace({ id: ws.id });
      await expectError(t, clients.workspaces.createWorkspace({ agentType: "nofallback" }), Code.InvalidArgument, ErrorReason.UNKNOWN_PROVIDER);
    } finally {
      await restarted.close();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a command policy and sensitive files are stored through REST, shown by GET, and govern the agent type's workspaces", async (t) => {
  const { clients, url } = t.context.server;
  const id = newId("policy");
  await createType(clients.connect, id, { enabled: true, tools: ["bash", "read", "write"] });
  const put = await rest(url, "PUT", `/api/v1/agent-types/${id}/workspace-config`, {
    enabled: true,
    tools: ["bash", "read", "write"],
    command_policy: { allow: ["echo", "cat", " git   status "], deny: ["git push"] },
    sensitive_files: { deny: ["secrets/**"], write_protected: ["Makefile"] },
    git: { protected_branches: [" main ", "release/*", "main"] },
  });
  t.is(put.status, 200, JSON.stringify(put.json));
  const got = await rest(url, "GET", `/api/v1/agent-types/${id}/workspace-config`);
  t.deepEqual(got.json.git, { protected_branches: ["main", "release/*"] });
  t.deepEqual(got.json.command_policy, { default_action: "", allow: ["echo", "cat", "git status"], deny: ["git push"] });
  t.deepEqual(got.json.sensitive_files, { deny: ["secrets/**"], write_protected: ["Makefile"] });

  const ws = await workspaceFor(clients.grpc, id);
  const tools = clients.grpc.tools;
  // An allowlist: echo runs, curl does not, and nothing of a refused script runs.
  t.is((await tools.bash({ workspaceId: ws.id, command: "echo ok" })).stdout, "ok\n");
  const { detail } = await expectError(t, tools.bash({ workspaceId: ws.id, command: "echo start > marker; curl http://example.invalid" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
  t.is(detail.metadata.why, "not_in_allowlist");
  t.regex(detail.message, /'curl' is not in the agent type's allowlist/);
  await expectError(t, tools.readFile({ workspaceId: ws.id, path: "marker" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  // The agent type's own sensitive files, next to the server's.
  await tools.writeFile({ workspaceId: ws.id, path: "Makefile", content: "all:\n" }).then(
    () => t.fail("a write-protected file was written"),
    (e) => t.regex(String(e), /write-protected/),
  );
  const denied = await expectError(t, tools.writeFile({ workspaceId: ws.id, path: "secrets/token.txt", content: "x" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
  t.is(denied.detail.metadata.rule, "secrets/**");
  await expectError(t, tools.readFile({ workspaceId: ws.id, path: ".env" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);

  // A workspace made before an update keeps the policy it was made with; a new one gets the new one.
  await clients.grpc.config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { enabled: true, tools: ["bash", "read", "write"] } });
  await expectError(t, tools.bash({ workspaceId: ws.id, command: "wc -c < /dev/null" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
  const after = await workspaceFor(clients.grpc, id);
  t.is((await tools.bash({ workspaceId: after.id, command: "wc -c < /dev/null" })).stdout.trim(), "0", "the new workspace has no allowlist");
  await expectError(t, tools.bash({ workspaceId: after.id, command: "sudo true" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
});
