/**
 * Interoperability with a gRPC implementation that is not ours: Python's grpcio (gRPC C-core),
 * calling the real server over a real socket with raw messages (encoded and decoded here with the
 * generated schemas). It exercises the server's direct unary gRPC path (server/direct/unary-grpc.ts) the
 * way clients in other languages use it: plain calls, typed errors with their ErrorDetail in the
 * trailers, a client deadline, a message larger than HTTP/2's default window, an unknown method,
 * and concurrent calls on one channel; and the direct server-streaming path (server/direct/
 * streaming.ts) with StreamBash: megabytes of output byte for byte, a deadline, a cancel; and a
 * session end to end with its token in the call metadata.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { create, type DescMessage, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { createHash } from "node:crypto";
import { BashRequestSchema, BashResponseSchema, StreamBashRequestSchema, StreamBashResponseSchema, ReadFileRequestSchema, ReadFileResponseSchema, WriteFileRequestSchema, WriteFileResponseSchema } from "../gen/agentworkspace/v1/tool_pb.js";
import { CreateAgentTypeRequestSchema, CreateAgentTypeResponseSchema, ListAgentTypesRequestSchema } from "../gen/agentworkspace/v1/config_pb.js";
import {
  CreateWorkspaceRequestSchema,
  CreateWorkspaceResponseSchema,
  EndSessionRequestSchema,
  SessionStatus,
  StartSessionRequestSchema,
  StartSessionResponseSchema,
  WatchSessionRequestSchema,
  WatchSessionResponseSchema,
} from "../gen/agentworkspace/v1/workspace_pb.js";
import { HealthCheckRequestSchema, HealthCheckResponse_ServingStatus, HealthCheckResponseSchema } from "../gen/grpc/health/v1/health_pb.js";
import { commandGate } from "./helpers/engines.ts";
import { LOCAL_ONLY, newWorkspace, serverTest, startServer } from "./helpers/server.ts";
import { decodeRpcStatus } from "./helpers/status.ts";

const test = serverTest({ env: LOCAL_ONLY });
const CLIENT = fileURLToPath(new URL("./interop/grpc_client.py", import.meta.url));

interface Call {
  method: string;
  request: string;
  timeout?: number;
  parallel?: number;
  stream?: boolean;
  cancel_after?: number;
  metadata?: Array<[string, string]>;
}
interface Result {
  code: string;
  message: string;
  response: string | null;
  details: string | null;
  responses?: string[];
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
    t.deepEqual(
      // Anything else says how the call ended (a lost output once came back as OK, exit 0, after 2 s).
      parallel.map((r) => {
        if (r.code !== "OK") return `${r.code}: ${r.message}`;
        const b = decode(BashResponseSchema, r.response);
        return b.stdout === "parallel\n" ? b.stdout : JSON.stringify({ stdout: b.stdout, stderr: b.stderr, exitCode: b.exitCode, durationMs: String(b.durationMs) });
      }),
      Array.from({ length: 20 }, () => "parallel\n"),
    );
  });

  test("Python grpcio: policy refusals arrive typed (COMMAND_NOT_ALLOWED on Bash and StreamBash, SENSITIVE_FILE on ReadFile), and a timed-out flood's error leaves the channel serving", async (t) => {
    const { url, clients } = t.context.server;
    const id = await newWorkspace(clients.grpc);
    const [refused, streamRefused, secret, flood, after] = await python(url, [
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "echo ran > marker; sudo id" }) },
      { method: "/agentworkspace.v1.ToolService/StreamBash", stream: true, request: encode(StreamBashRequestSchema, { workspaceId: id, command: "r''m -rf /" }) },
      { method: "/agentworkspace.v1.ToolService/ReadFile", request: encode(ReadFileRequestSchema, { workspaceId: id, path: "app/.ENV." }) },
      // Over 100 KiB of output in 2 s: its partial output travels in the error's trailer.
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "yes; sleep 30", timeoutMs: 2000n }) },
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "test -e marker && echo ran || echo nothing ran" }) },
    ]);
    t.is(refused.code, "PERMISSION_DENIED");
    t.is(reasonOf(refused), "COMMAND_NOT_ALLOWED");
    t.is(refused.message, "Command 'sudo id' is not allowed: it matches the server's deny rule 'sudo'");
    t.is(streamRefused.code, "PERMISSION_DENIED");
    t.is(reasonOf(streamRefused), "COMMAND_NOT_ALLOWED");
    t.deepEqual(streamRefused.responses, [], "a refused StreamBash sends no message");
    t.is(secret.code, "PERMISSION_DENIED");
    t.is(reasonOf(secret), "SENSITIVE_FILE");
    t.is(flood.code, "DEADLINE_EXCEEDED", flood.message);
    const partial = fromBinary(ErrorDetailSchema, decodeRpcStatus(Buffer.from(flood.details ?? "", "hex")).details[0]?.value ?? new Uint8Array()).partialOutput;
    t.true(partial?.stdoutTruncated === true && (partial?.stdout.length ?? 0) > 0 && (partial?.stdout.length ?? Infinity) <= 2 * 1024);
    t.is(after.code, "OK", "the channel kept serving after the flood's error");
    t.is(decode(BashResponseSchema, after.response).stdout, "nothing ran\n");
  });

  test("Python grpcio: StreamBash streams megabytes byte for byte, ends with exited, honours a deadline and a cancel", async (t) => {
    const { url, clients } = t.context.server;
    const id = await newWorkspace(clients.grpc);
    const method = "/agentworkspace.v1.ToolService/StreamBash";
    const [bulk, deadline, cancelled, after] = await python(url, [
      { method, stream: true, request: encode(StreamBashRequestSchema, { workspaceId: id, command: "head -c 3000000 /dev/urandom | tee out.bin; sha256sum out.bin >&2" }) },
      { method, stream: true, timeout: 3, request: encode(StreamBashRequestSchema, { workspaceId: id, command: "echo begun; sleep 30" }) },
      { method, stream: true, cancel_after: 2, request: encode(StreamBashRequestSchema, { workspaceId: id, command: "echo $$ > cancelled.pid; echo begun; sleep 30" }) },
      { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "p=$(cat cancelled.pid); for i in $(seq 100); do kill -0 $p 2>/dev/null || { echo gone; exit; }; sleep 0.1; done; echo alive" }) },
    ]);
    const events = (r: Result) => (r.responses ?? []).map((hex) => decode(StreamBashResponseSchema, hex).event);
    t.is(bulk.code, "OK");
    const ev = events(bulk);
    t.is(ev[0]?.case, "started");
    const stdout = Buffer.concat(ev.flatMap((e) => (e.case === "stdout" ? [Buffer.from(e.value)] : [])));
    const stderr = Buffer.concat(ev.flatMap((e) => (e.case === "stderr" ? [Buffer.from(e.value)] : []))).toString();
    t.is(stdout.length, 3_000_000);
    t.is(stderr.split(" ")[0], createHash("sha256").update(stdout).digest("hex"));
    const last = ev.at(-1);
    t.true(last?.case === "exited" && last.value.exitCode === 0);
    t.is(deadline.code, "DEADLINE_EXCEEDED");
    t.true(events(deadline).some((e) => e.case === "stdout" && Buffer.from(e.value).toString() === "begun\n"));
    t.is(cancelled.code, "CANCELLED");
    t.is(after.code, "OK");
    t.is(decode(BashResponseSchema, after.response).stdout, "gone\n", "cancelling the call killed the command");
  });
}

if (commandGate(test, ["/usr/bin/python3", "-c", "import grpc"], "Python grpcio interop with API keys")) {
  test("Python grpcio: an API key in the call metadata makes an operator; without one, or with a wrong one, UNAUTHENTICATED; a disabled tool is PERMISSION_DENIED with the exact message", async (t) => {
    const key = "interop-key-0123456789abcdef";
    const server = await startServer({ env: LOCAL_ONLY, apiKeys: [key] });
    try {
      const auth: Array<[string, string]> = [["authorization", `Bearer ${key}`]];
      const createType = encode(CreateAgentTypeRequestSchema, { agentType: { id: "py-readers", workspace: { enabled: true, tools: ["read"] } } });
      const [anonymous, wrong, created, health] = await python(server.url, [
        { method: "/agentworkspace.v1.ConfigService/CreateAgentType", request: createType },
        { method: "/agentworkspace.v1.ConfigService/CreateAgentType", request: createType, metadata: [["authorization", "Bearer not-the-key-000000000"]] },
        { method: "/agentworkspace.v1.ConfigService/CreateAgentType", request: createType, metadata: auth },
        { method: "/grpc.health.v1.Health/Check", request: encode(HealthCheckRequestSchema, {}) },
      ]);
      for (const r of [anonymous, wrong]) {
        t.is(r.code, "UNAUTHENTICATED");
        t.is(reasonOf(r), "UNAUTHENTICATED");
        t.false(r.message.includes(key));
      }
      t.is(created.code, "OK");
      t.is(decode(CreateAgentTypeResponseSchema, created.response).agentType?.revision, 1n);
      t.is(health.code, "OK", "probes need no key");

      const [ws] = await python(server.url, [{ method: "/agentworkspace.v1.WorkspaceService/CreateWorkspace", request: encode(CreateWorkspaceRequestSchema, { agentType: "py-readers" }), metadata: auth }]);
      const id = decode(CreateWorkspaceResponseSchema, ws.response).workspace?.id ?? "";
      const [bash, streamed] = await python(server.url, [
        { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { workspaceId: id, command: "id" }), metadata: auth },
        { method: "/agentworkspace.v1.ToolService/StreamBash", request: encode(StreamBashRequestSchema, { workspaceId: id, command: "echo leaked" }), metadata: auth, stream: true },
      ]);
      for (const r of [bash, streamed]) {
        t.is(r.code, "PERMISSION_DENIED");
        t.is(r.message, "Tool 'bash' is not enabled for this agent type");
        t.is(reasonOf(r), "TOOL_NOT_ENABLED");
      }
      t.deepEqual(streamed.responses, [], "a refused stream sends no message");
    } finally {
      await server.close();
    }
  });

  test("Python grpcio: a session end to end — StartSession, WatchSession to ACTIVE, tool calls with the session token and no workspace id, nothing else, revoked at EndSession", async (t) => {
    const key = "interop-key-sessions-0123456789";
    const server = await startServer({ env: LOCAL_ONLY, apiKeys: [key] });
    try {
      const auth: Array<[string, string]> = [["authorization", `Bearer ${key}`]];
      const [created] = await python(server.url, [
        { method: "/agentworkspace.v1.ConfigService/CreateAgentType", request: encode(CreateAgentTypeRequestSchema, { agentType: { id: "py-sessions", workspace: { enabled: true, tools: ["bash"], setupCommands: ["echo set > up.txt"] } } }), metadata: auth },
      ]);
      t.is(created.code, "OK");
      const [started] = await python(server.url, [{ method: "/agentworkspace.v1.WorkspaceService/StartSession", request: encode(StartSessionRequestSchema, { agentType: "py-sessions", task: { pullRequestNumber: 7n } }), metadata: auth }]);
      const res = decode(StartSessionResponseSchema, started.response);
      const id = res.session?.id ?? "";
      const token: Array<[string, string]> = [["authorization", `Bearer ${res.sessionToken}`]];
      // The session token may watch its own session.
      const [watched] = await python(server.url, [{ method: "/agentworkspace.v1.WorkspaceService/WatchSession", request: encode(WatchSessionRequestSchema, { id }), metadata: token, stream: true }]);
      t.is(watched.code, "OK");
      const statuses = (watched.responses ?? []).map((hex) => decode(WatchSessionResponseSchema, hex).event).flatMap((e) => (e.case === "status" ? [SessionStatus[e.value.status]] : []));
      t.deepEqual(statuses, ["PROVISIONING", "ACTIVE"]);
      const [bash, config, ended] = await python(server.url, [
        { method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { command: "cat up.txt; echo $AGENT_TASK_PULL_REQUEST_NUMBER" }), metadata: token },
        { method: "/agentworkspace.v1.ConfigService/ListAgentTypes", request: encode(ListAgentTypesRequestSchema, {}), metadata: token },
        { method: "/agentworkspace.v1.WorkspaceService/EndSession", request: encode(EndSessionRequestSchema, { id }), metadata: auth },
      ]);
      t.is(bash.code, "OK");
      t.is(decode(BashResponseSchema, bash.response).stdout, "set\n7\n");
      t.is(config.code, "PERMISSION_DENIED");
      t.is(reasonOf(config), "CALLER_NOT_PERMITTED");
      t.is(ended.code, "OK");
      const [after] = await python(server.url, [{ method: "/agentworkspace.v1.ToolService/Bash", request: encode(BashRequestSchema, { command: "true" }), metadata: token }]);
      t.is(after.code, "UNAUTHENTICATED");
      t.false(after.message.includes(res.sessionToken));
    } finally {
      await server.close();
    }
  });
}
