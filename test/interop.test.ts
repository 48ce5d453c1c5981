/**
 * Interoperability with a gRPC implementation that is not ours: Python's grpcio (gRPC C-core),
 * calling the real server over a real socket with raw messages (encoded and decoded here with the
 * generated schemas). It exercises the server's direct unary gRPC path (server/grpc-unary.ts) the
 * way clients in other languages use it: plain calls, typed errors with their ErrorDetail in the
 * trailers, a client deadline, a message larger than HTTP/2's default window, an unknown method,
 * and concurrent calls on one channel.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { create, type DescMessage, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { BashRequestSchema, BashResponseSchema, ReadFileRequestSchema, ReadFileResponseSchema, WriteFileRequestSchema, WriteFileResponseSchema } from "../gen/agentworkspace/v1/tool_pb.js";
import { HealthCheckRequestSchema, HealthCheckResponse_ServingStatus, HealthCheckResponseSchema } from "../gen/grpc/health/v1/health_pb.js";
import { commandGate } from "./helpers/engines.ts";
import { LOCAL_ONLY, newWorkspace, serverTest } from "./helpers/server.ts";
import { decodeRpcStatus } from "./helpers/status.ts";

const test = serverTest({ env: LOCAL_ONLY });
const CLIENT = fileURLToPath(new URL("./interop/grpc_client.py", import.meta.url));

interface Call {
  method: string;
  request: string;
  timeout?: number;
  parallel?: number;
}
interface Result {
  code: string;
  message: string;
  response: string | null;
  details: string | null;
}

const encode = <D extends DescMessage>(schema: D, init: MessageInitShape<D>) => Buffer.from(toBinary(schema, create(schema, init))).toString("hex");
const decode = <D extends DescMessage>(schema: D, hex: string | null) => fromBinary(schema, Buffer.from(hex ?? "", "hex"));
const reasonOf = (r: Result) => {
  const status = decodeRpcStatus(Buffer.from(r.details ?? "", "hex"));
  return ErrorReason[fromBinary(ErrorDetailSchema, status.details[0]?.value ?? new Uint8Array()).reason];
};

/** Runs the Python client against `url` with `calls`. */
function python(url: string, calls: Call[]): Promise<Result[]> {
  return new Promise((resolve, reject) => {
    const child = spawn("/usr/bin/python3", [CLIENT, new URL(url).host], { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(JSON.parse(out) as Result[]) : reject(new Error(`python client exited ${code}: ${err}`))));
    child.stdin.end(JSON.stringify(calls));
  });
}

if (commandGate(test, ["/usr/bin/python3", "-c", "import grpc"], "Python grpcio interop")) {
  test("Python grpcio: unary calls, typed errors, deadlines, large messages and concurrency work against the server", async (t) => {
    const { url, clients } = t.context.server;
    const id = await newWorkspace(clients.grpc);
    const big = "x".repeat(5 * 1024 * 1024);
    const [health, bash, missing, deadline, write, read, unknown, ...parallel] = await python(url, [
      { method: "/grpc.health.v1.Health/Check", request: encode(HealthCheckRequestSchema, {}) },
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "echo hi from $0" }) },
      { method: "/agentworkspace.v1.ToolService/ReadFile", request: encode(ReadFileRequestSchema, { workspaceId: id, path: "missing.txt" }) },
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "sleep 30" }), timeout: 1 },
      { method: "/agentworkspace.v1.ToolService/WriteFile", request: encode(WriteFileRequestSchema, { workspaceId: id, path: "big.txt", content: big }) },
      { method: "/agentworkspace.v1.ToolService/ReadFile", request: encode(ReadFileRequestSchema, { workspaceId: id, path: "big.txt", limit: 1 }) },
      { method: "/agentworkspace.v1.ToolService/NoSuchMethod", request: "" },
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "echo parallel" }), parallel: 20 },
    ]);
    t.is(health.code, "OK");
    t.is(decode(HealthCheckResponseSchema, health.response).status, HealthCheckResponse_ServingStatus.SERVING);
    t.is(bash.code, "OK");
    t.is(decode(BashResponseSchema, bash.response).stdout, "hi from bash\n");
    t.is(missing.code, "NOT_FOUND");
    t.is(missing.message, "File not found: missing.txt");
    t.is(reasonOf(missing), "FILE_NOT_FOUND");
    t.is(deadline.code, "DEADLINE_EXCEEDED");
    t.is(write.code, "OK");
    t.is(decode(WriteFileResponseSchema, write.response).bytesWritten, BigInt(big.length));
    t.is(read.code, "OK");
    t.is(decode(ReadFileResponseSchema, read.response).totalLines, 1);
    t.is(unknown.code, "UNIMPLEMENTED");
    t.is(parallel.length, 20);
    t.true(parallel.every((r) => r.code === "OK" && decode(BashResponseSchema, r.response).stdout === "parallel\n"));
  });
}
