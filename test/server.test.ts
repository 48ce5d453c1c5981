/**
 * The server as a whole, on a real socket: the three protocols on one port (gRPC-Web, and plain
 * HTTP/1.1 JSON as curl or fetch would send it), Connect's HTTP status codes for errors, the
 * WorkspaceService lifecycle, persistence across a restart, a missing ripgrep, and resilience
 * against bad input.
 */
import { execFile } from "node:child_process";
import http from "node:http";
import net from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import anyTest, { type TestFn } from "ava";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { FileKind, ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { createLocalProvider } from "../providers/local.ts";
import { expectError, startServer, type ClientSet, type TestServer } from "./helpers/server.ts";

interface Ctx {
  server: TestServer;
}

const test = anyTest as TestFn<Ctx>;
const run = promisify(execFile);
/** Container providers are not under test here; "off" keeps startup independent of Docker. */
const LOCAL_ONLY = { AGENT_WORKSPACE_DOCKER: "off" };

test.before(async (t) => {
  t.context.server = await startServer({ env: LOCAL_ONLY });
});

test.after.always(async (t) => {
  await t.context.server?.close();
});

async function newWorkspace(clients: ClientSet, labels: Record<string, string> = {}): Promise<string> {
  const { workspace } = await clients.workspaces.createWorkspace({ labels });
  if (!workspace) throw new Error("CreateWorkspace returned no workspace");
  return workspace.id;
}

interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  httpVersion: string;
}

/** One HTTP/1.1 POST on a fresh connection, the way curl or a browser would send it. */
function post(baseUrl: string, route: string, body: string, contentType = "application/json"): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${baseUrl}${route}`,
      { method: "POST", agent: false, headers: { "content-type": contentType, "content-length": Buffer.byteLength(body) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8"), httpVersion: res.httpVersion }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

interface ConnectErrorBody {
  code: string;
  message: string;
  details?: Array<{ type: string; value: string }>;
}

/** The ErrorReason carried by a Connect JSON error body. */
function reasonOf(body: ConnectErrorBody): ErrorReason | undefined {
  const detail = body.details?.find((d) => d.type === "agentworkspace.v1.ErrorDetail");
  if (!detail) return undefined;
  const b64 = detail.value.replace(/-/g, "+").replace(/_/g, "/");
  return fromBinary(ErrorDetailSchema, Buffer.from(b64, "base64")).reason;
}

// ───────────────────────────── Protocols ─────────────────────────────

test("gRPC-Web over HTTP/1.1 runs unary and streaming calls and carries error details", async (t) => {
  const web = t.context.server.clients.grpcWeb;
  const id = await newWorkspace(web);
  const r = await web.tools.bash({ workspaceId: id, command: 'echo "hello"' });
  t.is(r.stdout, "hello\n");
  t.is(r.exitCode, 0);
  await web.tools.writeFile({ workspaceId: id, path: "a.txt", content: "one\ntwo\n" });
  t.is((await web.tools.readFile({ workspaceId: id, path: "/workspace/a.txt" })).content, "1: one\n2: two");
  const events = [];
  for await (const ev of web.tools.streamBash({ workspaceId: id, command: "echo out; echo err >&2" })) events.push(ev.event.case);
  t.is(events[0], "started");
  t.is(events.at(-1), "exited");
  t.true(events.includes("stdout") && events.includes("stderr"));
  await expectError(t, web.tools.readFile({ workspaceId: id, path: "missing" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  await expectError(t, web.tools.readFile({ workspaceId: id, path: "/etc/passwd" }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
});

test("plain HTTP/1.1 JSON POST to /agentworkspace.v1.ToolService/Bash works without HTTP/2", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const ok = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: "echo hi" }));
  t.is(ok.httpVersion, "1.1");
  t.is(ok.status, 200);
  t.regex(String(ok.headers["content-type"]), /^application\/json/);
  const body = JSON.parse(ok.body) as Record<string, unknown>;
  t.is(body.stdout, "hi\n");
  t.is(body.exitCode ?? 0, 0);
  t.is(body.stdoutTotalBytes, "3");

  // A failing command is still a 200 with the exit code in the body (seed 000).
  const failed = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspace_id: id, command: "echo nope >&2; exit 7" }));
  t.is(failed.status, 200);
  t.like(JSON.parse(failed.body), { exitCode: 7, stderr: "nope\n" });
});

test("curl --http1.1 can call the server", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  let out: string;
  try {
    ({ stdout: out } = await run("curl", [
      "--http1.1", "-sS", "-X", "POST", "-H", "Content-Type: application/json",
      "-d", JSON.stringify({ workspaceId: id, command: "printf curl-ok" }),
      `${url}/agentworkspace.v1.ToolService/Bash`,
    ]));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") {
      t.pass("curl is not installed; the node:http test covers plain HTTP/1.1");
      return;
    }
    throw err;
  }
  t.is((JSON.parse(out) as { stdout: string }).stdout, "curl-ok");
});

test("Connect errors use HTTP statuses: 404 not found, 403 outside the workspace, 400 invalid argument and failed precondition", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  await clients.grpc.tools.writeFile({ workspaceId: id, path: "dir/f.txt", content: "x" });
  const call = async (method: string, body: Record<string, unknown>) => {
    const res = await post(url, `/agentworkspace.v1.ToolService/${method}`, JSON.stringify({ workspaceId: id, ...body }));
    return { status: res.status, body: JSON.parse(res.body) as ConnectErrorBody };
  };
  const cases: Array<[string, Record<string, unknown>, number, string, ErrorReason]> = [
    ["ReadFile", { path: "missing.txt" }, 404, "not_found", ErrorReason.FILE_NOT_FOUND],
    ["ReadFile", { path: "/etc/passwd" }, 403, "permission_denied", ErrorReason.PATH_OUTSIDE_WORKSPACE],
    ["Grep", { pattern: "a(" }, 400, "invalid_argument", ErrorReason.INVALID_PATTERN],
    ["WriteFile", { path: "dir", content: "y" }, 400, "failed_precondition", ErrorReason.IS_DIRECTORY],
    ["Bash", { command: "sleep 5", timeoutMs: "200" }, 504, "deadline_exceeded", ErrorReason.COMMAND_TIMEOUT],
  ];
  for (const [method, body, status, code, reason] of cases) {
    const res = await call(method, body);
    t.is(res.status, status, `${method} ${JSON.stringify(body)}`);
    t.is(res.body.code, code);
    t.is(reasonOf(res.body), reason);
  }
  const unknown = await post(url, "/agentworkspace.v1.ToolService/ReadFile", JSON.stringify({ workspaceId: "ws-0000000000000000", path: "a" }));
  t.is(unknown.status, 404);
  t.is(reasonOf(JSON.parse(unknown.body) as ConnectErrorBody), ErrorReason.WORKSPACE_NOT_FOUND);
});

// ───────────────────────────── WorkspaceService ─────────────────────────────

test("WorkspaceService: create, get and delete a workspace", async (t) => {
  const { workspaces, tools } = t.context.server.clients.grpc;
  const before = Date.now();
  const { workspace } = await workspaces.createWorkspace({ labels: { team: "core" } });
  t.truthy(workspace);
  if (!workspace) return;
  t.regex(workspace.id, /^ws-[0-9a-f]{16}$/);
  t.is(workspace.provider, "local");
  t.is(workspace.status, WorkspaceStatus.READY);
  t.is(workspace.root, "/workspace");
  t.deepEqual(workspace.labels, { team: "core" });
  t.is(workspace.limits?.pids, 1024n);
  const createdMs = Number(workspace.createdAt?.seconds ?? 0n) * 1000;
  t.true(createdMs >= before - 1000 && createdMs <= Date.now() + 1000);

  const got = await workspaces.getWorkspace({ id: workspace.id });
  t.is(got.workspace?.id, workspace.id);
  t.is(got.workspace?.status, WorkspaceStatus.READY);
  t.deepEqual(got.workspace?.labels, { team: "core" });

  await tools.writeFile({ workspaceId: workspace.id, path: "f.txt", content: "x" });
  await workspaces.deleteWorkspace({ id: workspace.id });
  await expectError(t, workspaces.getWorkspace({ id: workspace.id }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
  await expectError(t, tools.readFile({ workspaceId: workspace.id, path: "f.txt" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
  await expectError(t, workspaces.deleteWorkspace({ id: workspace.id }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
});

test("WorkspaceService: list pages newest first and filters by labels and provider", async (t) => {
  const { workspaces } = t.context.server.clients.connect;
  const run = `list-${process.pid}-${Date.now()}`;
  const ids: string[] = [];
  for (const n of ["a", "b", "c"]) {
    ids.push(await newWorkspace(t.context.server.clients.connect, { run, name: n }));
    await new Promise((r) => setTimeout(r, 5));
  }
  const page1 = await workspaces.listWorkspaces({ labels: { run }, pageSize: 2 });
  t.deepEqual(page1.workspaces.map((w) => w.id), [ids[2], ids[1]]);
  t.not(page1.nextPageToken, "");
  const page2 = await workspaces.listWorkspaces({ labels: { run }, pageSize: 2, pageToken: page1.nextPageToken });
  t.deepEqual(page2.workspaces.map((w) => w.id), [ids[0]]);
  t.is(page2.nextPageToken, "");

  const one = await workspaces.listWorkspaces({ labels: { run, name: "b" } });
  t.deepEqual(one.workspaces.map((w) => w.id), [ids[1]]);
  t.true(one.workspaces.every((w) => w.status === WorkspaceStatus.READY));
  const local = await workspaces.listWorkspaces({ labels: { run }, provider: "local" });
  t.is(local.workspaces.length, 3);
  const none = await workspaces.listWorkspaces({ labels: { run }, provider: "elsewhere" });
  t.deepEqual(none.workspaces, []);
  const noMatch = await workspaces.listWorkspaces({ labels: { run: "no-such-run" } });
  t.deepEqual(noMatch.workspaces, []);
  await expectError(t, workspaces.listWorkspaces({ pageToken: "not-a-token" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
});

test("WorkspaceService: an unknown workspace is NOT_FOUND / WORKSPACE_NOT_FOUND everywhere", async (t) => {
  const { workspaces, tools } = t.context.server.clients.grpc;
  for (const id of ["ws-0000000000000000", "garbage", "../ws-1"]) {
    await expectError(t, workspaces.getWorkspace({ id }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    await expectError(t, workspaces.deleteWorkspace({ id }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    await expectError(t, tools.bash({ workspaceId: id, command: "true" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    await expectError(t, tools.readFile({ workspaceId: id, path: "a" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
  }
  await expectError(t, tools.readFile({ workspaceId: "", path: "a" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
});

test("WorkspaceService: an unknown provider is INVALID_ARGUMENT / UNKNOWN_PROVIDER", async (t) => {
  const { workspaces } = t.context.server.clients.grpc;
  const { error, detail } = await expectError(t, workspaces.createWorkspace({ provider: "firecracker" }), Code.InvalidArgument, ErrorReason.UNKNOWN_PROVIDER);
  t.regex(error.rawMessage, /firecracker/);
  t.is(detail.metadata.provider, "firecracker");
  await expectError(t, workspaces.createWorkspace({ labels: { "bad key!": "v" } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  await expectError(t, workspaces.createWorkspace({ limits: { memory: "lots" } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
});

test("workspaces survive a server restart", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-restart-"));
  try {
    const first = await startServer({ dataDir, env: LOCAL_ONLY });
    let id: string;
    try {
      id = await newWorkspace(first.clients.grpc, { keep: "yes" });
      await first.clients.grpc.tools.writeFile({ workspaceId: id, path: "notes/state.txt", content: "before restart\n" });
    } finally {
      await first.close();
    }
    const second = await startServer({ dataDir, env: LOCAL_ONLY });
    try {
      const got = await second.clients.connect.workspaces.getWorkspace({ id });
      t.is(got.workspace?.status, WorkspaceStatus.READY);
      t.deepEqual(got.workspace?.labels, { keep: "yes" });
      const read = await second.clients.connect.tools.readFile({ workspaceId: id, path: "notes/state.txt" });
      t.is(read.content, "1: before restart");
      const r = await second.clients.grpc.tools.bash({ workspaceId: id, command: "cat notes/state.txt" });
      t.is(r.stdout, "before restart\n");
      const listed = await second.clients.grpc.workspaces.listWorkspaces({ labels: { keep: "yes" } });
      t.deepEqual(listed.workspaces.map((w) => w.id), [id]);
    } finally {
      await second.close();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
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

// ───────────────────────────── Resilience ─────────────────────────────

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
  const wrongType = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: "true" }), "text/plain");
  t.is(wrongType.status, 415);
  const noMethod = await post(url, "/agentworkspace.v1.ToolService/NoSuchMethod", "{}");
  t.true(noMethod.status === 404 || noMethod.status === 501, `status ${noMethod.status}`);
  const wrongField = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: 42 }));
  t.is(wrongField.status, 400);
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
  const started = Date.now();
  await server.close();
  await ended;
  t.true(Date.now() - started < 5000);
});

test("DeleteWorkspace kills the commands still running in it", async (t) => {
  const { tools, workspaces } = t.context.server.clients.grpc;
  const { workspace } = await workspaces.createWorkspace({ provider: "local" });
  const id = workspace!.id;
  // The local provider isolates paths, not processes, so the command can leave its pid outside.
  const dir = await mkdtemp(path.join(tmpdir(), "aw-delete-"));
  const pidFile = path.join(dir, "pid");
  const abort = new AbortController();
  try {
    const stream = tools.streamBash({ workspaceId: id, command: `echo $$ > ${pidFile}; echo ready; sleep 100` }, { signal: abort.signal });
    const iterator = stream[Symbol.asyncIterator]();
    for (let ev = await iterator.next(); !ev.done && ev.value.event.case !== "stdout"; ev = await iterator.next());
    await workspaces.deleteWorkspace({ id });
    const pid = Number((await promisify(execFile)("cat", [pidFile])).stdout.trim());
    // The command would sleep for 100 s; the delete must end it (polled for up to 10 s).
    let alive = true;
    for (let i = 0; i < 100 && alive; i++) {
      try {
        process.kill(pid, 0);
        await new Promise((r) => setTimeout(r, 100));
      } catch {
        alive = false;
      }
    }
    t.false(alive, "the command outlived its workspace");
  } finally {
    abort.abort();
    await rm(dir, { recursive: true, force: true });
  }
});
