/**
 * The protocols on one port, as clients outside this codebase use them: gRPC-Web, plain HTTP/1.1
 * JSON (curl, fetch), Connect's HTTP status codes for errors, unknown JSON fields, protocol
 * deadlines and cancels (`connect-timeout-ms`, `grpc-timeout`, a client that aborts), and
 * streamed output over every wire form the server's direct streaming path serves.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import { promisify } from "node:util";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { type BashExited, BashRequestSchema, ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { leanStreamBash } from "../bench/lean-client.ts";
import { commandGate } from "./helpers/engines.ts";
import { type ConnectErrorBody, post, reasonOf } from "./helpers/http.ts";
import { type ClientSet, expectError, LOCAL_ONLY, newWorkspace, serverTest } from "./helpers/server.ts";
import { decodeRpcStatus } from "./helpers/status.ts";

const test = serverTest({ env: LOCAL_ONLY });
const run = promisify(execFile);

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

if (commandGate(test, "curl", "curl --http1.1 can call the server")) {
  test("curl --http1.1 can call the server", async (t) => {
    const { url, clients } = t.context.server;
    const id = await newWorkspace(clients.grpc);
    const { stdout } = await run("curl", [
      "--http1.1", "-sS", "-X", "POST", "-H", "Content-Type: application/json",
      "-d", JSON.stringify({ workspaceId: id, command: "printf curl-ok" }),
      `${url}/agentworkspace.v1.ToolService/Bash`,
    ]);
    t.is((JSON.parse(stdout) as { stdout: string }).stdout, "curl-ok");
  });
}

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

test("an unknown JSON field is INVALID_ARGUMENT naming the field, and nothing runs", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const res = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, cmd: "touch ran" }));
  t.is(res.status, 400);
  const body = JSON.parse(res.body) as ConnectErrorBody & { details: Array<{ debug?: { metadata?: Record<string, string> } }> };
  t.is(body.code, "invalid_argument");
  t.regex(body.message, /"cmd" is unknown/);
  t.is(reasonOf(body), ErrorReason.INVALID_ARGUMENT);
  t.is(body.details[0].debug?.metadata?.field, "cmd");
  t.is((await clients.grpc.tools.bash({ workspaceId: id, command: "ls" })).stdout, "");
});

/** Polls (up to ~5 s) until the workspace file `file` has content: a command started and wrote its pid. */
async function waitWritten(clients: ClientSet, workspaceId: string, file: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if ((await clients.tools.bash({ workspaceId, command: `cat ${file} 2>/dev/null` })).stdout !== "") return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Polls until the process whose pid is in the workspace file `pidFile` is gone; "gone" or "alive". */
async function waitGone(clients: ClientSet, workspaceId: string, pidFile: string, withinMs: number): Promise<string> {
  const command = `kill -0 "$(cat ${pidFile})" 2>/dev/null && echo alive || echo gone`;
  const until = Date.now() + withinMs;
  for (;;) {
    // Only a look begun after the deadline ends the wait with the process alive: one begun before
    // the kill landed may answer late on a loaded host (tool-scenarios.ts, waitGone).
    const last = Date.now() > until;
    const state = (await clients.tools.bash({ workspaceId, command })).stdout.trim();
    if (state === "gone" || last) return state;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A command that records SIGTERM (in term.marker, which a SIGKILL could never write) before
 * exiting, so tests see the kill sequence whatever the machine's load.
 */
/**
 * The client deadline of the deadline tests. Long enough for a loaded host to start the command
 * and let it print and set its trap before the deadline (a 1 s deadline failed on a host whose
 * forks took 5 ms idle, while other test files ran: the command had printed nothing yet).
 */
const DEADLINE_S = 4;
const GRPC_DEADLINE = { "grpc-timeout": `${DEADLINE_S}S` };

const TERM_AWARE = "echo before; trap 'echo got-term; : > term.marker; exit 143' TERM; sleep 30 & wait";

/** Waits until the command's TERM trap has run; true when it did. */
async function termTrapped(clients: ClientSet, workspaceId: string): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if ((await clients.tools.bash({ workspaceId, command: "test -e term.marker && echo yes || true" })).stdout === "yes\n") return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

test("Connect: connect-timeout-ms ends a unary Bash as DEADLINE_EXCEEDED with the partial output, after SIGTERM", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const res = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: TERM_AWARE }), "application/json", {
    "connect-timeout-ms": String(DEADLINE_S * 1000),
  });
  t.is(res.status, 504);
  const body = JSON.parse(res.body) as ConnectErrorBody & { details: Array<{ debug?: { partialOutput?: { stdout?: string }; metadata?: Record<string, string> } }> };
  t.is(body.code, "deadline_exceeded");
  t.is(reasonOf(body), ErrorReason.COMMAND_TIMEOUT);
  // What it printed before the deadline (and, when it ended in time, what its trap printed).
  t.regex(body.details[0].debug?.partialOutput?.stdout ?? "", /^before\n(got-term\n)?$/);
  t.is(body.details[0].debug?.metadata?.deadline, "true");
  t.true(await termTrapped(clients.grpc, id), "the command got SIGTERM");
});

test("gRPC: grpc-timeout ends a unary Bash as DEADLINE_EXCEEDED with the partial output, after SIGTERM", async (t) => {
  const { clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  // The header alone (no client-side timer), as a client whose deadline the server must enforce.
  const { detail } = await expectError(
    t,
    clients.grpc.tools.bash({ workspaceId: id, command: TERM_AWARE }, { headers: GRPC_DEADLINE }),
    Code.DeadlineExceeded,
    ErrorReason.COMMAND_TIMEOUT,
  );
  // The output before, then SIGTERM once (its trap runs once), never KILL first.
  t.regex(detail.partialOutput?.stdout ?? "", /^before\n(got-term\n)?$/);
  t.true(await termTrapped(clients.grpc, id), "the command got SIGTERM");
});

test("gRPC: a flood under a client deadline that outlives SIGTERM: the partial output counts every byte that came, not just the head kept", async (t) => {
  const { clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  // The command ignores SIGTERM, so its exit comes only after the kill grace, long after the call
  // answered: the totals can only be what the server itself received (the sandbox sends
  // everything under a deadline; sending only the kept head would leave them at 50 KiB).
  const { detail } = await expectError(
    t,
    clients.grpc.tools.bash({ workspaceId: id, command: "trap '' TERM; head -c 300000 /dev/zero; sleep 30" }, { headers: GRPC_DEADLINE }),
    Code.DeadlineExceeded,
    ErrorReason.COMMAND_TIMEOUT,
  );
  t.is(detail.partialOutput?.stdoutTotalBytes, 300_000n);
  t.true(detail.partialOutput?.stdoutTruncated);
  t.true((detail.partialOutput?.stdout.length ?? Infinity) <= 2 * 1024);
});

test("gRPC: a StreamBash past its deadline sends exited with timed_out after SIGTERM, then ends DEADLINE_EXCEEDED", async (t) => {
  const { clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const seen: string[] = [];
  const stream = async () => {
    for await (const ev of clients.grpc.tools.streamBash({ workspaceId: id, command: TERM_AWARE }, { headers: GRPC_DEADLINE })) {
      if (ev.event.case === "stdout") seen.push(new TextDecoder().decode(ev.event.value));
      if (ev.event.case === "exited") seen.push(`exited timed_out=${ev.event.value.timedOut} code=${ev.event.value.exitCode}`);
    }
  };
  await expectError(t, stream(), Code.DeadlineExceeded, ErrorReason.COMMAND_TIMEOUT);
  // The output as it came; an exited event when the command ended within the settle time, always timed out.
  t.regex(seen.join(""), /^before\n(got-term\n(exited timed_out=true code=143)?)?$/);
  t.true(await termTrapped(clients.grpc, id), "the command got SIGTERM");
});

test("a command that ignores SIGTERM at the deadline is answered at once and killed after the grace", async (t) => {
  const { clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const { detail } = await expectError(
    t,
    // Its trap notes each SIGTERM and carries on.
    clients.grpc.tools.bash(
      { workspaceId: id, command: "trap 'echo term >> terms.log' TERM; echo $$ > victim.pid; echo started; while :; do sleep 0.1; done" },
      { headers: GRPC_DEADLINE },
    ),
    Code.DeadlineExceeded,
    ErrorReason.COMMAND_TIMEOUT,
  );
  t.is(detail.partialOutput?.stdout, "started\n");
  t.regex(detail.message, /is being stopped/);
  // The kill sequence goes on without the caller: SIGKILL follows the 5 s grace.
  t.is(await waitGone(clients.grpc, id, "victim.pid", 15_000), "gone");
  // SIGTERM reached it once: the group signal and the sweep of marked processes do not both send it.
  t.is((await clients.grpc.tools.readFile({ workspaceId: id, path: "terms.log" })).content, "1: term");
});

test("a cancel by the client stays CANCELLED and kills the command at once", async (t) => {
  const { clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const abort = new AbortController();
  const call = clients.grpc.tools.bash({ workspaceId: id, command: "echo $$ > c.pid; exec sleep 30" }, { signal: abort.signal });
  await waitWritten(clients.grpc, id, "c.pid");
  abort.abort();
  const err = await t.throwsAsync(call);
  t.is(ConnectError.from(err).code, Code.Canceled);
  t.is(await waitGone(clients.grpc, id, "c.pid", 5000), "gone");
});

test("StreamBash carries the same bytes over gRPC, Connect (protobuf and JSON, HTTP/1.1 and HTTP/2) and gRPC-Web", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  // Random bytes in chunks of every size (a few bytes, and whole 64 KiB pipe reads), on both streams.
  await clients.grpc.tools.bash({ workspaceId: id, command: "head -c 700001 /dev/urandom > out.bin; head -c 3000 /dev/urandom > err.bin" });
  const sha256 = async (command: string) => (await clients.grpc.tools.bash({ workspaceId: id, command: `{ ${command}; } | sha256sum | cut -c1-64` })).stdout.trim();
  const stdoutCommand = "cat out.bin; printf x; head -c 100 out.bin";
  const want = { stdout: await sha256(stdoutCommand), stderr: await sha256("cat err.bin") };
  const command = `${stdoutCommand}; cat err.bin >&2`;
  const sessions = new Http2SessionManager(url);
  const transports: Record<string, Transport> = {
    "grpc/h2": createGrpcTransport({ baseUrl: url, sessionManager: sessions }),
    "connect+proto/h2": createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: sessions }),
    "connect+json/h2": createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: false, sessionManager: sessions }),
    "connect+proto/h1": createConnectTransport({ baseUrl: url, httpVersion: "1.1" }),
    "connect+json/h1": createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: false }),
    "grpc-web/h1": createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" }),
  };
  try {
    for (const [name, transport] of Object.entries(transports)) {
      const out = createHash("sha256");
      const err = createHash("sha256");
      const cases: string[] = [];
      let exited: BashExited | undefined;
      for await (const ev of createClient(ToolService, transport).streamBash({ workspaceId: id, command })) {
        cases.push(ev.event.case ?? "none");
        if (ev.event.case === "stdout") out.update(ev.event.value);
        if (ev.event.case === "stderr") err.update(ev.event.value);
        if (ev.event.case === "exited") exited = ev.event.value;
      }
      t.is(cases[0], "started", name);
      t.is(cases.at(-1), "exited", name);
      t.is(exited?.stdoutTotalBytes, 700_001n + 1n + 100n, name);
      t.is(exited?.stderrTotalBytes, 3000n, name);
      t.is(out.digest("hex"), want.stdout, name);
      t.is(err.digest("hex"), want.stderr, name);
    }
  } finally {
    sessions.abort();
  }
});

test("a malformed streaming request gets a typed error with its detail, over gRPC and Connect, and the server keeps serving", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const envelope = (payload: Buffer, flags = 0) => {
    const out = Buffer.alloc(5 + payload.length);
    out[0] = flags;
    out.writeUInt32BE(payload.length, 1);
    payload.copy(out, 5);
    return out;
  };
  // Connect streaming: an unknown JSON field, then a body that is not an envelope at all. The
  // status travels in the end-of-stream message; nothing runs.
  const endOf = (raw: string) => {
    const bytes = Buffer.from(raw, "latin1");
    t.true(bytes.length >= 5, "a response body");
    const length = bytes.readUInt32BE(1);
    t.is(bytes[0], 0b10, "the only message is the end of the stream");
    return JSON.parse(bytes.subarray(5, 5 + length).toString("utf8")) as { error?: ConnectErrorBody & { details: Array<{ debug?: { metadata?: Record<string, string> } }> } };
  };
  const stream = (body: Buffer, contentType = "application/connect+json") =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${url}/agentworkspace.v1.ToolService/StreamBash`, { method: "POST", agent: false, headers: { "content-type": contentType } }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("latin1") }));
      });
      req.on("error", reject);
      req.end(body);
    });
  const unknown = await stream(envelope(Buffer.from(JSON.stringify({ workspaceId: id, cmd: "touch ran" }))));
  t.is(unknown.status, 200);
  const unknownEnd = endOf(unknown.body);
  t.is(unknownEnd.error?.code, "invalid_argument");
  t.regex(unknownEnd.error?.message ?? "", /"cmd" is unknown/);
  t.is(reasonOf(unknownEnd.error as ConnectErrorBody), ErrorReason.INVALID_ARGUMENT);
  t.is(unknownEnd.error?.details[0].debug?.metadata?.field, "cmd");
  const truncated = endOf((await stream(Buffer.from([0, 0, 0, 0, 9, 1, 2]))).body);
  t.is(truncated.error?.code, "invalid_argument");
  t.is(reasonOf(truncated.error as ConnectErrorBody), ErrorReason.INVALID_ARGUMENT);
  const garbled = endOf((await stream(envelope(Buffer.from([0xff, 0xff, 0xff])), "application/connect+proto")).body);
  t.is(garbled.error?.code, "invalid_argument");

  // gRPC: a message that does not parse is INVALID_ARGUMENT with its detail, in the trailers.
  const session = http2.connect(url);
  try {
    const status = await new Promise<Headers>((resolve, reject) => {
      const req = session.request({ ":method": "POST", ":path": "/agentworkspace.v1.ToolService/StreamBash", "content-type": "application/grpc", te: "trailers" });
      req.on("trailers", (trailers) => resolve(new Headers(Object.entries(trailers).map(([k, v]) => [k, String(v)]))));
      req.on("response", (headers) => {
        if (headers["grpc-status"] !== undefined) resolve(new Headers(Object.entries(headers).filter(([k]) => !k.startsWith(":")).map(([k, v]) => [k, String(v)])));
      });
      req.on("error", reject);
      req.resume();
      req.end(envelope(Buffer.from([0xff, 0xff, 0xff])));
    });
    t.is(status.get("grpc-status"), String(Code.InvalidArgument));
    const rpcStatus = decodeRpcStatus(Buffer.from(status.get("grpc-status-details-bin") ?? "", "base64"));
    const detail = rpcStatus.details.find((d) => d.typeUrl.endsWith("/agentworkspace.v1.ErrorDetail"));
    t.is(detail && fromBinary(ErrorDetailSchema, detail.value).reason, ErrorReason.INVALID_ARGUMENT);
  } finally {
    session.close();
  }
  t.is((await clients.grpc.tools.bash({ workspaceId: id, command: "ls" })).stdout, "");
});

test("Connect unary, JSON and protobuf over HTTP/1.1 and HTTP/2: the answer with its length, errors with their detail, and a client that hangs up kills the command", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const sessions = new Http2SessionManager(url);
  try {
    for (const [label, transport] of [
      ["proto/h2", createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: true, sessionManager: sessions })],
      ["proto/h1", createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: true })],
      ["json/h2", createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: sessions })],
    ] as const) {
      const tools = createClient(ToolService, transport);
      const r = await tools.bash({ workspaceId: id, command: `printf '%s' ${label}` });
      t.is(r.stdout, label, label);
      const big = `${"x".repeat(299_999)}\n`;
      await tools.writeFile({ workspaceId: id, path: `big-${label.replace("/", "-")}.txt`, content: big });
      const read = await tools.readFile({ workspaceId: id, path: `big-${label.replace("/", "-")}.txt`, limit: 1 });
      t.is(read.size, 300_000n, label);
      t.true(read.content.startsWith("1: xxx"), label);
      await expectError(t, tools.readFile({ workspaceId: id, path: "missing" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
    }
  } finally {
    sessions.abort();
  }

  // The Content-Length is the body's.
  const ok = await post(url, "/agentworkspace.v1.ToolService/Bash", JSON.stringify({ workspaceId: id, command: "head -c 9000 /dev/zero | tr '\\0' a" }));
  t.is(ok.status, 200);
  t.is(Number(ok.headers["content-length"]), Buffer.byteLength(ok.body));
  t.is((JSON.parse(ok.body) as { stdout: string }).stdout, "a".repeat(9000));

  // A body that is no protobuf is INVALID_ARGUMENT with its detail, nothing runs, and the server goes on.
  const garbage = await post(url, "/agentworkspace.v1.ToolService/Bash", "\xff\xff\xff\xff", "application/proto");
  t.is(garbage.status, 400);
  t.regex(String(garbage.headers["content-type"]), /^application\/json/);
  const body = JSON.parse(garbage.body) as ConnectErrorBody;
  t.is(body.code, "invalid_argument");
  t.is(reasonOf(body), ErrorReason.INVALID_ARGUMENT);

  // A client that goes away mid-call, over HTTP/1.1 (its connection closes) and over HTTP/2 (its
  // stream is reset): the command is killed.
  const h2 = new Http2SessionManager(url);
  try {
    const connectH2 = createClient(ToolService, createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: h2 }));
    for (const [pid, tools] of [["h1.pid", clients.connect.tools], ["h2.pid", connectH2]] as const) {
      const abort = new AbortController();
      const call = tools.bash({ workspaceId: id, command: `echo $$ > ${pid}; exec sleep 30` }, { signal: abort.signal });
      await waitWritten(clients.grpc, id, pid);
      abort.abort();
      await t.throwsAsync(call);
      t.is(await waitGone(clients.grpc, id, pid, 5000), "gone", pid);
    }
  } finally {
    h2.abort();
  }
});

test("unary calls taken at the HTTP/2 stream: a reset with an error code, a half-sent body and an unread answer kill the command and the server keeps serving", async (t) => {
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  const bashRequest = (command: string) => {
    const payload = Buffer.from(toBinary(BashRequestSchema, create(BashRequestSchema, { workspaceId: id, command })));
    const out = Buffer.alloc(5 + payload.length);
    out.writeUInt32BE(payload.length, 1);
    payload.copy(out, 5);
    return out;
  };
  const session = http2.connect(url);
  session.on("error", () => undefined);
  try {
    const open = (contentType: string) => {
      const req = session.request({ ":method": "POST", ":path": "/agentworkspace.v1.ToolService/Bash", "content-type": contentType, te: "trailers" });
      req.on("error", () => undefined);
      return req;
    };
    // Reset mid-call with INTERNAL_ERROR (not CANCEL): the server's stream errors; the command dies.
    for (const [pid, code] of [["internal.pid", http2.constants.NGHTTP2_INTERNAL_ERROR], ["cancel.pid", http2.constants.NGHTTP2_CANCEL]] as const) {
      const req = open("application/grpc");
      req.end(bashRequest(`echo $$ > ${pid}; exec sleep 30`));
      await waitWritten(clients.grpc, id, pid);
      req.close(code);
      t.is(await waitGone(clients.grpc, id, pid, 5000), "gone", pid);
    }
    // Half a message, then a reset: nothing runs, nothing is left waiting.
    const half = open("application/grpc");
    half.write(bashRequest("touch half-ran").subarray(0, 8));
    await new Promise((r) => setTimeout(r, 100));
    half.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    // A Connect unary call over HTTP/2 whose client never reads the answer, then resets.
    const unread = open("application/proto");
    unread.pause();
    unread.end(bashRequest("head -c 2000000 /dev/zero").subarray(5));
    await new Promise((r) => setTimeout(r, 300));
    unread.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  } finally {
    session.destroy();
  }
  const r = await clients.grpc.tools.bash({ workspaceId: id, command: "ls half-ran 2>/dev/null; echo ok" });
  t.is(r.stdout, "ok\n");
  t.is((await clients.connect.tools.bash({ workspaceId: id, command: "echo still" })).stdout, "still\n");
});

test("StreamBash output freed once written arrives intact: three fast readers at once over gRPC, and Connect JSON over HTTP/2 and HTTP/1.1", async (t) => {
  // Output chunks read from a command's pipe are freed as soon as the socket took them
  // (core/owned-chunks.ts); a chunk freed before its bytes were sent would arrive as other bytes.
  const { url, clients } = t.context.server;
  const id = await newWorkspace(clients.grpc);
  await clients.grpc.tools.bash({ workspaceId: id, command: "head -c 24000007 /dev/urandom > big.bin" });
  const want = (await clients.grpc.tools.bash({ workspaceId: id, command: "sha256sum big.bin | cut -c1-64" })).stdout.trim();
  const drain = async (protocol: "grpc" | "connect-json-h2" | "connect-json-h1") => {
    const hash = createHash("sha256");
    let bytes = 0;
    await leanStreamBash(url, protocol, { workspaceId: id, command: "cat big.bin" }, (m) => {
      if (m.event.case === "stdout") {
        hash.update(m.event.value);
        bytes += m.event.value.length;
      }
    });
    return `${bytes} ${hash.digest("hex")}`;
  };
  const results = await Promise.all([drain("grpc"), drain("grpc"), drain("grpc"), drain("connect-json-h2"), drain("connect-json-h1")]);
  t.deepEqual(results, Array(5).fill(`24000007 ${want}`));
});
