/**
 * Errors end to end: every proto reason has a row in the error table; causes stay on the server
 * (logged, never sent); each failed call leaves one log line; and a client that knows nothing but
 * reflection can decode the ErrorDetail. Service-level cases run the app's own routes and
 * interceptors in memory through connect's createRouterTransport; the rest use a real socket.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { create, createFileRegistry, fromBinary, toJson } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import anyTest, { type TestFn } from "ava";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { ServerReflection, ServerReflectionRequestSchema } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { createLocalProvider } from "../providers/local.ts";
import type { Provider } from "../providers/types.ts";
import { type App, createApp } from "../server/app.ts";
import { ERROR_TABLE } from "../server/error-table.ts";
import { createLogger } from "../server/logger.ts";
import { parseSettings } from "../server/settings.ts";
import { expectError, newWorkspace, startServer } from "./helpers/server.ts";

interface Ctx {
  app: App;
  dataDir: string;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;

/** A local provider whose file reads fail with an errno the server does not expect. */
function brokenDiskProvider(baseDir: string): Provider {
  const local = createLocalProvider({ baseDir });
  return {
    ...local,
    async open(record) {
      const handle = await local.open(record);
      const broken = async () => {
        throw Object.assign(new Error("EIO: the disk is on fire, read '/secret/host/path'"), { code: "EIO" });
      };
      const fs = new Proxy(handle.fs, {
        get(target, prop) {
          if (prop === "readFile" || prop === "read") return broken;
          const value: unknown = Reflect.get(target, prop);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      return { ...handle, fs, exec: handle.exec.bind(handle), health: handle.health.bind(handle), close: handle.close.bind(handle) };
    },
  };
}

test.before(async (t) => {
  t.context.dataDir = await mkdtemp(path.join(tmpdir(), "aw-errors-"));
  t.context.logs = [];
  const settings = parseSettings({ AGENT_WORKSPACE_DATA_DIR: t.context.dataDir, AGENT_WORKSPACE_DOCKER: "off" });
  t.context.app = await createApp(settings, {
    providers: [brokenDiskProvider(path.join(t.context.dataDir, "workspaces"))],
    logger: createLogger({ level: "debug", sink: (line) => t.context.logs.push(line) }),
  });
});

test.after.always(async (t) => {
  await t.context.app?.close();
  await rm(t.context.dataDir, { recursive: true, force: true });
});

/** Clients over the app's own routes and interceptors, in memory. */
function inMemory(app: App) {
  const transport = createRouterTransport(app.routes, { router: { interceptors: app.interceptors } });
  return { tools: createClient(ToolService, transport), workspaces: createClient(WorkspaceService, transport) };
}

const logged = (logs: string[], procedure: string) =>
  logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "call failed" && l.procedure === procedure);

test("every ErrorReason in the proto has exactly one row in the error table", (t) => {
  const mapped = Object.values(ERROR_TABLE).map((m) => m.reason);
  for (const [name, value] of Object.entries(ErrorReason)) {
    if (typeof value !== "number" || value === ErrorReason.UNSPECIFIED) continue;
    t.is(mapped.filter((r) => r === value).length, 1, `ERROR_REASON_${name}`);
  }
});

test("an internal error's cause is logged on the server with the procedure, and never sent to the client", async (t) => {
  const { tools, workspaces } = inMemory(t.context.app);
  const { workspace } = await workspaces.createWorkspace({});
  await tools.writeFile({ workspaceId: workspace!.id, path: "a.txt", content: "x" });
  const { error } = await expectError(t, tools.readFile({ workspaceId: workspace!.id, path: "a.txt" }), Code.Internal, ErrorReason.INTERNAL);
  t.is(error.rawMessage, "Internal server error");
  t.notRegex(JSON.stringify(error.details), /fire|secret/);
  const [line, ...more] = logged(t.context.logs, "agentworkspace.v1.ToolService/ReadFile");
  t.deepEqual(more, []);
  t.is(line.level, "error");
  t.is(line.code, "Internal");
  t.is(line.reason, "ERROR_REASON_INTERNAL");
  t.regex(String(line.cause), /EIO: the disk is on fire/);
  t.is(typeof line.duration_ms, "number");
});

test("each failed call leaves exactly one log line with procedure, code, reason and duration, and no contents", async (t) => {
  const { tools, workspaces } = inMemory(t.context.app);
  const { workspace } = await workspaces.createWorkspace({});
  await expectError(t, tools.writeFile({ workspaceId: workspace!.id, path: "../SECRET-name", content: "SECRET-content" }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
  const lines = logged(t.context.logs, "agentworkspace.v1.ToolService/WriteFile");
  t.is(lines.length, 1);
  t.like(lines[0], { level: "info", code: "PermissionDenied", reason: "ERROR_REASON_PATH_OUTSIDE_WORKSPACE" });
  t.is(typeof lines[0].duration_ms, "number");
  t.notRegex(JSON.stringify(lines[0]), /SECRET/);
  // A streaming call's failure is logged once too.
  const stream = async () => {
    for await (const _ of tools.streamBash({ workspaceId: workspace!.id, command: "" })) void _;
  };
  await expectError(t, stream(), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  t.is(logged(t.context.logs, "agentworkspace.v1.ToolService/StreamBash").length, 1);
});

test("failed client calls are not logged below the configured level", async (t) => {
  const logs: string[] = [];
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-errors-"));
  const app = await createApp(parseSettings({ AGENT_WORKSPACE_DATA_DIR: dataDir, AGENT_WORKSPACE_DOCKER: "off" }), {
    logger: createLogger({ level: "warn", sink: (l) => logs.push(l) }),
  });
  try {
    const { tools } = inMemory(app);
    await expectError(t, tools.readFile({ workspaceId: "ws-0000000000000000", path: "a" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    t.deepEqual(logs, []);
  } finally {
    await app.close();
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a client that knows only reflection decodes the ErrorDetail of a gRPC error", async (t) => {
  const server = await startServer({ env: { AGENT_WORKSPACE_DOCKER: "off" } });
  try {
    const { grpc } = server.clients;
    const id = await newWorkspace(grpc);
    const err = ConnectError.from(await t.throwsAsync(grpc.tools.readFile({ workspaceId: id, path: "nope.txt" })));
    // What arrived on the wire: a type name and bytes, nothing this test compiled in.
    const raw = err.details.find((d): d is { type: string; value: Uint8Array } => "type" in d);
    t.is(raw?.type, "agentworkspace.v1.ErrorDetail");
    const reflection = createClient(ServerReflection, createGrpcTransport({ baseUrl: server.url }));
    const requests = (async function* () {
      yield create(ServerReflectionRequestSchema, { messageRequest: { case: "fileContainingSymbol", value: raw!.type } });
    })();
    const files = [];
    for await (const res of reflection.serverReflectionInfo(requests)) {
      if (res.messageResponse.case !== "fileDescriptorResponse") throw new Error(`reflection answered ${res.messageResponse.case}`);
      files.push(...res.messageResponse.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b)));
    }
    const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: files }));
    const schema = registry.getMessage(raw!.type);
    t.truthy(schema, "reflection served the detail's file");
    const decoded = toJson(schema!, fromBinary(schema!, raw!.value), { registry }) as Record<string, unknown>;
    t.is(decoded.reason, "ERROR_REASON_FILE_NOT_FOUND");
    t.deepEqual(decoded.metadata, { path: "nope.txt" });
  } finally {
    await server.close();
  }
});
