/**
 * The server under bad input and odd clients: it answers every malformed request with a typed
 * error and keeps serving, refuses oversized messages without getting stuck, closes silent
 * connections on shutdown, and reports a missing ripgrep as such.
 */
import http2 from "node:http2";
import net from "node:net";
import { fromBinary } from "@bufbuild/protobuf";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { decodeRpcStatus } from "./helpers/status.ts";
import { FileKind, ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { createLocalProvider } from "../providers/local.ts";
import { type ConnectErrorBody, post, reasonOf } from "./helpers/http.ts";
import { expectError, LOCAL_ONLY, newWorkspace, serverTest, startServer } from "./helpers/server.ts";

const test = serverTest({ env: LOCAL_ONLY });

test("the server keeps serving after a batch of bad input", async (t) => {
  const { url, clients } = t.context.server;
  const { tools } = clients.grpc;
  const id = await newWorkspace(clients.grpc);
  const invalid = (p: Promise<unknown>, reason = ErrorReason.INVALID_ARGUMENT) => expectError(t, p, Code.InvalidArgument, reason);

  await invalid(tools.bash({ workspaceId: id, command: "" }));
  await invalid(tools.bash({ workspaceId: id, command: "echo a\0b" }));
  await invalid(tools.bash({ workspaceId: id, command: "true", timeoutMs: -1n }));
  await invalid(tools.bash({ workspaceId: id, command: "true", timeoutMs: 10_000_000n }));
  await invalid(tools.bash({ workspaceId: id, command: "true", env: { AGENT_WORKSPACE_EXEC_ID: "x" } }));
  await invalid(tools.bash({ workspaceId: id, command: "true", env: { LD_PRELOAD: "/tmp/x.so" } }));
  // Beyond what Linux passes to a program in one argument (and one executor message).
  await invalid(tools.bash({ workspaceId: id, command: `echo ${"x".repeat(200 * 1024)}` }));
  await invalid(tools.bash({ workspaceId: id, command: "true", env: { BIG: "y".repeat(200 * 1024) } }));
  await invalid(tools.grep({ workspaceId: id, pattern: "z".repeat(200 * 1024) }));
  await invalid(tools.readFile({ workspaceId: id, path: "a", offset: -1 }));
  await invalid(tools.readFile({ workspaceId: id, path: "a", limit: -5 }));
  await invalid(tools.writeFile({ workspaceId: id, path: "", content: "x" }));
  await invalid(tools.writeFile({ workspaceId: id, path: "x".repeat(5000), content: "x" }));
  await invalid(tools.editFile({ workspaceId: id, path: "a", oldString: "", newString: "x" }));
  await invalid(tools.editFile({ workspaceId: id, path: "a", oldString: "same", newString: "same" }));
  await invalid(tools.patchFile({ workspaceId: id, path: "a", patches: [] }));
  await invalid(tools.grep({ workspaceId: id, pattern: "" }));
  await invalid(tools.grep({ workspaceId: id, pattern: "a", contextLines: 21 }));
  await invalid(tools.grep({ workspaceId: id, pattern: "a", maxResults: -1 }));
  await invalid(tools.glob({ workspaceId: id, pattern: "" }), ErrorReason.INVALID_PATTERN);
  await invalid(tools.glob({ workspaceId: id, pattern: "/etc/*" }), ErrorReason.INVALID_PATTERN);
  await invalid(tools.glob({ workspaceId: id, pattern: "*", limit: -1 }));
  await invalid(clients.grpc.workspaces.listWorkspaces({ pageSize: -1 }));
  const streamInvalid = async () => {
    for await (const _ of tools.streamBash({ workspaceId: id, command: "true", maxOutputBytes: -1n })) void _;
  };
  await invalid(streamInvalid());

  // Malformed requests at the HTTP level.
  const badJson = await post(url, "/agentworkspace.v1.ToolService/Bash", "{not json");
  t.is(badJson.status, 400);
  t.is(reasonOf(JSON.parse(badJson.body) as ConnectErrorBody), ErrorReason.INVALID_ARGUMENT);
  const wrongType = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: "true" }), "text/plain");
  t.is(wrongType.status, 415);
  const noMethod = await post(url, "/agentworkspace.v1.ToolService/NoSuchMethod", "{}");
  t.true(noMethod.status === 404 || noMethod.status === 501, `status ${noMethod.status}`);
  const wrongField = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: 42 }));
  t.is(wrongField.status, 400);
  t.is(reasonOf(JSON.parse(wrongField.body) as ConnectErrorBody), ErrorReason.INVALID_ARGUMENT);
  // A message over the server's 32 MiB limit is refused, not buffered, and the connection it came
  // on is not left stuck (the next Connect and gRPC-Web calls below reuse their keep-alive agent).
  const hugeContent = "x".repeat(33 * 1024 * 1024);
  for (const set of [clients.connect, clients.grpcWeb]) {
    const huge = await t.throwsAsync(set.tools.writeFile({ workspaceId: id, path: "huge.txt", content: hugeContent }));
    t.is(ConnectError.from(huge).code, Code.ResourceExhausted);
  }
  // Over gRPC the Node client's own HTTP/2 session exceeds its memory limit while it is still
  // sending (ENHANCE_YOUR_CALM) and stays unusable, so this uses a connection of its own.
  const sessions = new Http2SessionManager(url);
  try {
    const throwaway = createClient(ToolService, createGrpcTransport({ baseUrl: url, sessionManager: sessions }));
    await t.throwsAsync(throwaway.writeFile({ workspaceId: id, path: "huge.txt", content: hugeContent }));
  } finally {
    sessions.abort();
  }

  // After all that, a good call on every protocol.
  for (const set of [clients.grpc, clients.connect, clients.grpcWeb]) {
    const r = await set.tools.bash({ workspaceId: id, command: "echo still-serving" });
    t.is(r.stdout, "still-serving\n");
  }
  const listed = await tools.listFiles({ workspaceId: id });
  t.false(listed.files.some((f) => f.path === "huge.txt"));
});

test("close() ends connections that never sent a byte", async (t) => {
  const server = await startServer({ env: LOCAL_ONLY });
  const port = Number(new URL(server.url).port);
  const silent = net.connect(port, "127.0.0.1");
  await new Promise<void>((resolve, reject) => silent.once("connect", resolve).once("error", reject));
  const ended = new Promise<void>((resolve) => silent.once("close", () => resolve()));
  silent.on("error", () => undefined);
  // Without the forced end, close() would wait for this socket forever (the test's timeout then
  // fails it); no wall-clock bound here, which a loaded machine would break.
  let closed = false;
  void ended.then(() => (closed = true));
  await server.close();
  await ended;
  t.true(closed, "the silent connection was ended by the server");
  t.true(silent.destroyed);
});

test("Grep without a ripgrep binary is FAILED_PRECONDITION / RIPGREP_NOT_FOUND", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-norg-"));
  const server = await startServer({
    dataDir,
    env: LOCAL_ONLY,
    providers: [createLocalProvider({ baseDir: path.join(dataDir, "workspaces"), ripgrepPath: "/nonexistent/rg" })],
  });
  try {
    for (const clients of [server.clients.grpc, server.clients.connect]) {
      const id = await newWorkspace(clients);
      await clients.tools.writeFile({ workspaceId: id, path: "a.txt", content: "needle\n" });
      await expectError(t, clients.tools.grep({ workspaceId: id, pattern: "needle" }), Code.FailedPrecondition, ErrorReason.RIPGREP_NOT_FOUND);
      const stream = async () => {
        for await (const _ of clients.tools.streamGrep({ workspaceId: id, pattern: "needle" })) void _;
      };
      await expectError(t, stream(), Code.FailedPrecondition, ErrorReason.RIPGREP_NOT_FOUND);
      // Everything else still works.
      const r = await clients.tools.readFile({ workspaceId: id, path: "a.txt" });
      t.is(r.kind, FileKind.TEXT);
    }
  } finally {
    await server.close();
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a gRPC request whose body is not a valid message is INVALID_ARGUMENT with an ErrorDetail", async (t) => {
  const { url } = t.context.server;
  const session = http2.connect(url);
  try {
    // One gRPC frame (uncompressed, 3 bytes) holding a truncated field: not a BashRequest.
    const stream = session.request({ ":method": "POST", ":path": "/agentworkspace.v1.ToolService/Bash", "content-type": "application/grpc", te: "trailers" });
    stream.end(Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x05, 0x41]));
    const fields = new Map<string, string>();
    stream.on("response", (h) => Object.entries(h).forEach(([k, v]) => fields.set(k, String(v))));
    stream.on("trailers", (h) => Object.entries(h).forEach(([k, v]) => fields.set(k, String(v))));
    stream.resume();
    await new Promise<void>((resolve, reject) => stream.on("close", resolve).on("error", reject));
    t.is(fields.get("grpc-status"), String(Code.InvalidArgument));
    const bin = fields.get("grpc-status-details-bin");
    t.truthy(bin, "the status carries details");
    const status = decodeRpcStatus(Buffer.from(bin ?? "", "base64"));
    const detail = fromBinary(ErrorDetailSchema, status.details[0].value);
    t.is(status.details[0].typeUrl, "type.googleapis.com/agentworkspace.v1.ErrorDetail");
    t.is(detail.reason, ErrorReason.INVALID_ARGUMENT);
  } finally {
    session.close();
  }
});
