import test from "ava";
import { execFile } from "node:child_process";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { create, createFileRegistry, fromBinary, getOption } from "@bufbuild/protobuf";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createGrpcTransport } from "@connectrpc/connect-node";
import { tool } from "../gen/agentworkspace/v1/options_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import type { ServerReflectionResponse } from "../gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { HealthStatus, ServingStatus, registerHealth } from "../server/health.ts";
import { registerReflection } from "../server/reflection.ts";

const run = promisify(execFile);
const buf = new URL("../node_modules/.bin/buf", import.meta.url).pathname;

const health = new HealthStatus(["agentworkspace.v1.ToolService"]);
const server = http2.createServer(
  connectNodeAdapter({
    routes(router) {
      // Not implemented here (every method answers UNIMPLEMENTED); only its descriptor matters.
      router.service(ToolService, {});
      registerHealth(router, health);
      registerReflection(router);
    },
  }),
);
let baseUrl = "";
const transport = () => createGrpcTransport({ baseUrl });

test.before(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

test.after.always(() => {
  server.close();
});

type Request = MessageInitShape<typeof ServerReflectionRequestSchema>;

/** Sends all requests on one v1 reflection stream and collects the responses. */
async function reflect(...requests: Request[]): Promise<ServerReflectionResponse[]> {
  const client = createClient(ServerReflection, transport());
  async function* send() {
    for (const request of requests) {
      yield create(ServerReflectionRequestSchema, request);
    }
  }
  const responses: ServerReflectionResponse[] = [];
  for await (const response of client.serverReflectionInfo(send())) {
    responses.push(response);
  }
  return responses;
}

function fileNames(response: ServerReflectionResponse): string[] {
  if (response.messageResponse.case !== "fileDescriptorResponse") {
    throw new Error(`expected files, got ${response.messageResponse.case}`);
  }
  return response.messageResponse.value.fileDescriptorProto.map(
    (bytes) => fromBinary(FileDescriptorProtoSchema, bytes).name,
  );
}

test("v1 list_services names every service on the router", async (t) => {
  const [response] = await reflect({ host: "h", messageRequest: { case: "listServices", value: "*" } });
  t.is(response.validHost, "h");
  t.is(response.originalRequest?.messageRequest.case, "listServices");
  t.is(response.messageResponse.case, "listServicesResponse");
  const names =
    response.messageResponse.case === "listServicesResponse"
      ? response.messageResponse.value.service.map((s) => s.name)
      : [];
  t.deepEqual(names, [
    "agentworkspace.v1.ToolService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
  ]);
});

test("v1 file_containing_symbol returns the file, then its transitive imports", async (t) => {
  const [response] = await reflect({
    messageRequest: { case: "fileContainingSymbol", value: "agentworkspace.v1.ToolService" },
  });
  const names = fileNames(response);
  t.is(names[0], "agentworkspace/v1/tool.proto");
  t.deepEqual([...names].sort(), [
    "agentworkspace/v1/git.proto",
    "agentworkspace/v1/options.proto",
    "agentworkspace/v1/tool.proto",
    "google/protobuf/descriptor.proto",
    "google/protobuf/timestamp.proto",
  ]);

  // The files form a complete set that keeps custom options: rebuild them and read (tool).
  if (response.messageResponse.case !== "fileDescriptorResponse") throw new Error("unreachable");
  // A FileDescriptorSet lists imports before their importers, so reverse the response order.
  const set = create(FileDescriptorSetSchema, {
    file: response.messageResponse.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b)).reverse(),
  });
  const service = createFileRegistry(set).getService("agentworkspace.v1.ToolService");
  t.truthy(service);
  const bash = service?.methods.find((m) => m.name === "Bash");
  t.is(bash && getOption(bash, tool), "bash");
});

test("v1 resolves methods, messages, fields, enum values, extensions and file names", async (t) => {
  const responses = await reflect(
    { messageRequest: { case: "fileContainingSymbol", value: "agentworkspace.v1.ToolService.Bash" } },
    { messageRequest: { case: "fileContainingSymbol", value: "agentworkspace.v1.BashRequest" } },
    { messageRequest: { case: "fileContainingSymbol", value: "agentworkspace.v1.BashRequest.command" } },
    { messageRequest: { case: "fileContainingSymbol", value: "agentworkspace.v1.tool" } },
    { messageRequest: { case: "fileContainingSymbol", value: "grpc.health.v1.HealthCheckResponse.SERVING" } },
    { messageRequest: { case: "fileByFilename", value: "google/protobuf/timestamp.proto" } },
    {
      messageRequest: {
        case: "fileContainingExtension",
        value: { containingType: "google.protobuf.MethodOptions", extensionNumber: 50001 },
      },
    },
  );
  t.deepEqual(
    responses.map((r) => fileNames(r)[0]),
    [
      "agentworkspace/v1/tool.proto",
      "agentworkspace/v1/tool.proto",
      "agentworkspace/v1/tool.proto",
      "agentworkspace/v1/options.proto",
      "grpc/health/v1/health.proto",
      "google/protobuf/timestamp.proto",
      "agentworkspace/v1/options.proto",
    ],
  );
  t.deepEqual(fileNames(responses[3]), ["agentworkspace/v1/options.proto", "google/protobuf/descriptor.proto"]);
});

test("v1 all_extension_numbers_of_type lists known extensions", async (t) => {
  const [known, unknown] = await reflect(
    { messageRequest: { case: "allExtensionNumbersOfType", value: "google.protobuf.MethodOptions" } },
    { messageRequest: { case: "allExtensionNumbersOfType", value: "no.such.Type" } },
  );
  t.deepEqual(known.messageResponse.case === "allExtensionNumbersResponse" && known.messageResponse.value, {
    $typeName: "grpc.reflection.v1.ExtensionNumberResponse",
    baseTypeName: "google.protobuf.MethodOptions",
    extensionNumber: [50001],
  });
  t.is(unknown.messageResponse.case === "errorResponse" && unknown.messageResponse.value.errorCode, 5);
});

test("v1 unknown symbols get NOT_FOUND and the stream stays open", async (t) => {
  const [missing, fileMissing, after] = await reflect(
    { messageRequest: { case: "fileContainingSymbol", value: "no.such.Symbol" } },
    { messageRequest: { case: "fileByFilename", value: "no/such.proto" } },
    { messageRequest: { case: "listServices", value: "" } },
  );
  t.is(missing.messageResponse.case, "errorResponse");
  t.is(missing.messageResponse.case === "errorResponse" && missing.messageResponse.value.errorCode, 5);
  t.regex((missing.messageResponse.case === "errorResponse" && missing.messageResponse.value.errorMessage) || "", /no\.such\.Symbol/);
  t.is(fileMissing.messageResponse.case === "errorResponse" && fileMissing.messageResponse.value.errorCode, 5);
  t.is(after.messageResponse.case, "listServicesResponse");
});

test("v1alpha answers like v1", async (t) => {
  const client = createClient(v1alpha.ServerReflection, transport());
  async function* send() {
    yield create(v1alpha.ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
    yield create(v1alpha.ServerReflectionRequestSchema, {
      host: "alpha",
      messageRequest: { case: "fileContainingSymbol", value: "agentworkspace.v1.ToolService" },
    });
  }
  const responses: v1alpha.ServerReflectionResponse[] = [];
  for await (const response of client.serverReflectionInfo(send())) {
    responses.push(response);
  }
  const [list, files] = responses;
  t.true(
    list.messageResponse.case === "listServicesResponse" &&
      list.messageResponse.value.service.some((s) => s.name === "agentworkspace.v1.ToolService"),
  );
  t.is(files.validHost, "alpha");
  t.is(files.originalRequest?.messageRequest.value, "agentworkspace.v1.ToolService");
  t.is(files.messageResponse.case, "fileDescriptorResponse");
  const first =
    files.messageResponse.case === "fileDescriptorResponse" ? files.messageResponse.value.fileDescriptorProto[0] : undefined;
  t.is(first && fromBinary(FileDescriptorProtoSchema, first).name, "agentworkspace/v1/tool.proto");
});

test("health Check answers SERVING for the server and known services, NOT_FOUND otherwise", async (t) => {
  const client = createClient(Health, transport());
  t.is((await client.check({ service: "" })).status, ServingStatus.SERVING);
  t.is((await client.check({ service: "agentworkspace.v1.ToolService" })).status, ServingStatus.SERVING);
  const error = await t.throwsAsync(client.check({ service: "no.such.Service" }));
  t.is(ConnectError.from(error).code, Code.NotFound);
});

test("health Watch streams the current status, then changes, until cancelled", async (t) => {
  const client = createClient(Health, transport());
  const abort = new AbortController();
  const seen: ServingStatus[] = [];
  const stream = client.watch({ service: "test.Watched" }, { signal: abort.signal });
  try {
    for await (const response of stream) {
      seen.push(response.status);
      if (seen.length === 1) health.set("test.Watched", ServingStatus.SERVING);
      if (seen.length === 2) health.set("test.Watched", ServingStatus.NOT_SERVING);
      if (seen.length === 3) abort.abort();
    }
  } catch (error) {
    t.is(ConnectError.from(error).code, Code.Canceled);
  }
  t.deepEqual(seen, [ServingStatus.SERVICE_UNKNOWN, ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
});

test("buf curl lists services and methods through reflection", async (t) => {
  const curl = (...args: string[]) =>
    run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args], { timeout: 60_000 });

  const services = await curl("--list-services", baseUrl);
  t.deepEqual(services.stdout.trim().split("\n").sort(), [
    "agentworkspace.v1.ToolService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
  ]);

  // With reflection, buf curl wants the base URL here too (not .../agentworkspace.v1.ToolService)
  // and lists the methods of every service.
  const methods = await curl("--list-methods", baseUrl);
  const listed = methods.stdout
    .trim()
    .split("\n")
    .filter((line) => line.startsWith("agentworkspace.v1.ToolService/"));
  t.true(listed.includes("agentworkspace.v1.ToolService/Bash"), methods.stdout);
  t.true(listed.includes("agentworkspace.v1.ToolService/StreamGrep"), methods.stdout);
  t.is(listed.length, ToolService.methods.length);

  // The old protocol alone, and a real call whose schema comes from reflection.
  const alpha = await curl("--reflect-protocol", "grpc-v1alpha", "--list-methods", baseUrl);
  t.true(alpha.stdout.split("\n").includes("grpc.health.v1.Health/Watch"), alpha.stdout);
  const check = await curl("-d", "{}", `${baseUrl}/grpc.health.v1.Health/Check`);
  t.deepEqual(JSON.parse(check.stdout), { status: "SERVING" });
});
