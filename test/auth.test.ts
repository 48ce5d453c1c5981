/**
 * Callers identify themselves, and one interceptor decides with one policy table. Against a real
 * server with API keys: a call without a key, with an unknown key or a malformed header is
 * UNAUTHENTICATED (HTTP 401) on every protocol and on the REST paths; a known key is an operator;
 * health and reflection answer anyone; keys never reach a log line, an error or a response. And
 * a policy table that misses an RPC (or names one that does not exist) stops the server's start.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import anyTest, { type TestFn } from "ava";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { createApp } from "../server/app.ts";
import { POLICY } from "../server/policy.ts";
import { parseSettings } from "../server/settings.ts";
import { post } from "./helpers/http.ts";
import { bearer, expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";

const KEY = "ak-test-7f3c9a1e5b2d4c6e8a0f";
const SECOND_KEY = "ak-test-second-key-0001";
const WRONG = "ak-test-wrong-key-99999999";

const test = anyTest as TestFn<{ server: TestServer; logs: string[] }>;
test.before(async (t) => {
  const logs: string[] = [];
  t.context.logs = logs;
  t.context.server = await startServer({ env: LOCAL_ONLY, apiKeys: [KEY, SECOND_KEY], onLog: (line) => logs.push(line) });
});
test.after.always(async (t) => {
  await t.context.server?.close();
});

/** Clients of every protocol that send `key` (or nothing). */
function clientsWith(url: string, key: string | undefined) {
  const interceptors = key === undefined ? [] : [bearer(key)];
  const sessions = new Http2SessionManager(url);
  const transports = {
    grpc: createGrpcTransport({ baseUrl: url, sessionManager: sessions, interceptors }),
    connect: createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors }),
    grpcWeb: createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1", interceptors }),
  };
  return {
    protocols: Object.entries(transports).map(([name, tr]) => ({
      name,
      config: createClient(ConfigService, tr),
      workspaces: createClient(WorkspaceService, tr),
      tools: createClient(ToolService, tr),
      health: createClient(Health, tr),
    })),
    close: () => sessions.abort(),
  };
}

test("without a key, with an unknown key or a malformed header, every operator call is UNAUTHENTICATED on every protocol", async (t) => {
  const { url } = t.context.server;
  for (const key of [undefined, WRONG, ""]) {
    const c = clientsWith(url, key);
    try {
      for (const p of c.protocols) {
        const { error } = await expectError(t, p.config.listAgentTypes({}), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
        t.false(error.rawMessage.includes(WRONG), "the presented key is never echoed");
        await expectError(t, p.workspaces.listWorkspaces({}), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
        await expectError(t, p.tools.bash({ workspaceId: "ws-0000000000000000", command: "id" }), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
        let messages = 0;
        await expectError(t, (async () => { for await (const _ of p.tools.streamBash({ workspaceId: "ws-0000000000000000", command: "id" })) messages++; })(), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
        t.is(messages, 0);
      }
    } finally {
      c.close();
    }
  }
  for (const header of ["Basic YWxhZGRpbjpvcGVuc2VzYW1l", `Bearer ${KEY} extra`, "Bearer", `Token ${KEY}`]) {
    const res = await post(url, "/agentworkspace.v1.ConfigService/ListAgentTypes", "{}", "application/json", { authorization: header });
    t.is(res.status, 401, header);
    t.false(res.body.includes(KEY), "the key is never echoed");
  }
});

test("the HTTP status is 401 over Connect and over the REST paths; a valid key passes both", async (t) => {
  const { url } = t.context.server;
  t.is((await post(url, "/agentworkspace.v1.ConfigService/ListAgentTypes", "{}")).status, 401);
  const anonymous = await fetch(`${url}/api/v1/agent-types`);
  t.is(anonymous.status, 401);
  t.is(((await anonymous.json()) as { reason: string }).reason, "ERROR_REASON_UNAUTHENTICATED");
  t.is((await fetch(`${url}/api/v1/agent-types`, { headers: { authorization: `Bearer ${WRONG}` } })).status, 401);
  for (const body of ["{}", "{not json", JSON.stringify({ tools: ["ssh"] })]) {
    const put = await fetch(`${url}/api/v1/agent-types/x/workspace-config`, { method: "PUT", body });
    t.is(put.status, 401, `an anonymous PUT is refused before its body is looked at: ${body}`);
  }

  for (const key of [KEY, SECOND_KEY]) {
    const ok = await fetch(`${url}/api/v1/agent-types`, { headers: { authorization: `bearer ${key}` } });
    t.is(ok.status, 200);
    t.deepEqual(Object.keys((await ok.json()) as object), ["agent_types"]);
    t.is((await post(url, "/agentworkspace.v1.ConfigService/ListAgentTypes", "{}", "application/json", { authorization: `Bearer ${key}` })).status, 200);
  }
});

test("an operator with a key administers agent types and workspaces and calls tools on every protocol", async (t) => {
  const c = clientsWith(t.context.server.url, KEY);
  try {
    for (const p of c.protocols) {
      const id = `auth-${p.name.toLowerCase()}`;
      await p.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: ["bash"] } } });
      const { workspace } = await p.workspaces.createWorkspace({ agentType: id });
      t.is((await p.tools.bash({ workspaceId: workspace?.id ?? "", command: "echo operator" })).stdout, "operator\n");
      await p.workspaces.deleteWorkspace({ id: workspace?.id ?? "" });
      await p.config.deleteAgentType({ id });
    }
  } finally {
    c.close();
  }
});

test("health and reflection answer without a key (probes and buf curl)", async (t) => {
  const c = clientsWith(t.context.server.url, undefined);
  try {
    for (const p of c.protocols) {
      t.is((await p.health.check({ service: "" })).status, HealthCheckResponse_ServingStatus.SERVING);
      t.is((await p.health.check({ service: "agentworkspace.v1.ConfigService" })).status, HealthCheckResponse_ServingStatus.SERVING);
    }
  } finally {
    c.close();
  }
  // Reflection, the way buf curl asks for a service list (Connect streaming needs HTTP/2 or gRPC; use the raw gRPC client).
  const { ServerReflection, ServerReflectionRequestSchema } = await import("../gen/grpc/reflection/v1/reflection_pb.js");
  const { create } = await import("@bufbuild/protobuf");
  const sessions = new Http2SessionManager(t.context.server.url);
  try {
    const reflection = createClient(ServerReflection, createGrpcTransport({ baseUrl: t.context.server.url, sessionManager: sessions }));
    const names: string[] = [];
    for await (const res of reflection.serverReflectionInfo((async function* () {
      yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
    })())) {
      if (res.messageResponse.case === "listServicesResponse") names.push(...res.messageResponse.value.service.map((s) => s.name));
    }
    t.true(names.includes("agentworkspace.v1.ConfigService"));
  } finally {
    sessions.abort();
  }
});

test("keys never appear in a log line, an error or a response", async (t) => {
  const { url, clients } = t.context.server;
  await clients.grpc.config.listAgentTypes({});
  await post(url, "/agentworkspace.v1.ConfigService/ListAgentTypes", "{}", "application/json", { authorization: `Bearer ${WRONG}` });
  await fetch(`${url}/api/v1/agent-types`, { headers: { authorization: `Bearer ${KEY}x` } });
  // No other test of this file calls GetWorkspaceConfig: exactly this REST refusal, made before the RPC runs, is logged.
  await fetch(`${url}/api/v1/agent-types/x/workspace-config`, { headers: { authorization: `Bearer ${KEY}x` } });
  const refusals = t.context.logs.filter((l) => l.includes('"procedure":"agentworkspace.v1.ConfigService/GetWorkspaceConfig"') && l.includes("ERROR_REASON_UNAUTHENTICATED"));
  t.is(refusals.length, 1, "a REST refusal is logged like any other");
  const ok = await fetch(`${url}/api/v1/agent-types`, { headers: { authorization: `Bearer ${KEY}` } });
  t.false((await ok.text()).includes(KEY));
  const logs = t.context.logs.join("\n");
  t.true(logs.includes("ERROR_REASON_UNAUTHENTICATED"), "refusals are logged");
  for (const secret of [KEY, SECOND_KEY, WRONG, KEY.slice(0, 12)]) t.false(logs.includes(secret), `a log line holds ${secret.slice(0, 6)}…`);
});

test("the policy table check fails the start when an RPC has no policy, or a policy names no RPC", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-policy-"));
  try {
    const settings = parseSettings({ AGENT_WORKSPACE_DATA_DIR: dataDir, ...LOCAL_ONLY, AGENT_WORKSPACE_LOG_LEVEL: "error" });
    const missing = { ...POLICY };
    delete (missing as Record<string, unknown>)["/agentworkspace.v1.ToolService/StreamGrep"];
    const e1 = await t.throwsAsync(createApp(settings, { policy: missing }));
    t.regex(e1?.message ?? "", /\/agentworkspace\.v1\.ToolService\/StreamGrep has no entry in the policy table/);
    const extra = { ...POLICY, "/agentworkspace.v1.ToolService/Teleport": ["operator"] as const };
    const e2 = await t.throwsAsync(createApp(settings, { policy: extra }));
    t.regex(e2?.message ?? "", /names \/agentworkspace\.v1\.ToolService\/Teleport, which the server does not serve/);
    // The real table covers exactly what the server serves.
    const app = await createApp(settings);
    await app.close();
    t.pass();
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("every entry of the policy table is an explicit list, and only probes and reflection admit anonymous callers", (t) => {
  for (const [procedure, allowed] of Object.entries(POLICY)) {
    t.true(allowed.length > 0, procedure);
    if (allowed.includes("anonymous")) t.regex(procedure, /^\/grpc\.(health|reflection)\./, procedure);
  }
});
