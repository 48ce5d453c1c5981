/**
 * ExposePort through the real server, on local, docker and gvisor: an application a background
 * process runs on the workspace's own loopback (HTTP and a WebSocket, in Node: the base image's
 * only runtime is the executor's) is reached through `/ports/{workspace}/{port}/` on the server's
 * port, with the workspace's session token or an operator key, and by nobody else: no
 * credential, a wrong one, another session's token, a port not exposed, another workspace's
 * port, an agent type without `bash`. The credential the proxy used never reaches the
 * application; the application's own `authorization` header does when the proxy's is sent apart.
 * Unexposing a port closes what is open through it; a deleted workspace takes its ports along.
 * On local, where workspaces share the host's loopback, a port some other process listens on
 * (the test's own, the server's) is never reached.
 */
import { randomBytes, randomInt } from "node:crypto";
import http, { type IncomingHttpHeaders } from "node:http";
import http2 from "node:http2";
import net, { type AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { Code } from "@connectrpc/connect";
import type { ExecutionContext } from "ava";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { gate, probeEngines } from "./helpers/engines.ts";
import { startServerProcess, waitDead } from "./helpers/process.ts";
import { type ClientSet, expectError, type ServerCtx, serverTest } from "./helpers/server.ts";
import { clientsWithToken, eventually, watchUntilReady } from "./helpers/sessions.ts";

const KEY = `op-${randomBytes(12).toString("hex")}`;
const engines = await probeEngines();
const test = serverTest({ apiKeys: [KEY] });
type T = ExecutionContext<ServerCtx>;

const uniqueId = (hint: string) => `${hint}-${randomBytes(4).toString("hex")}`;

/**
 * The application: HTTP answers with what it was sent (method, path, headers, body) as JSON;
 * a WebSocket upgrade is accepted and every text frame (short, masked, as clients send) is
 * answered with "echo:" and the text, upper-cased. It prints "listening" once it listens.
 */
const APP = String.raw`
const http = require("node:http");
const crypto = require("node:crypto");
const port = Number(process.argv[2]);
const server = http.createServer((req, res) => {
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    res.writeHead(200, { "content-type": "application/json", "x-app": "seen" });
    res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
  });
});
server.on("upgrade", (req, socket) => {
  const accept = crypto.createHash("sha1").update(req.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\nX-Seen-Authorization: " + (req.headers.authorization || "none") + "\r\nX-Seen-Path: " + req.url + "\r\n\r\n");
  let buf = Buffer.alloc(0);
  socket.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 6) {
      const len = buf[1] & 0x7f;
      if (buf.length < 6 + len) return;
      const mask = buf.subarray(2, 6);
      const text = Buffer.from(buf.subarray(6, 6 + len).map((b, i) => b ^ mask[i % 4])).toString("utf8");
      buf = buf.subarray(6 + len);
      const out = Buffer.from("echo:" + text.toUpperCase());
      socket.write(Buffer.concat([Buffer.from([0x81, out.length]), out]));
    }
  });
  socket.on("error", () => {});
});
server.listen(port, "127.0.0.1", () => console.log("listening " + port));
`;

/** A raw HTTP/1.1 request to the test server: status, headers and body, whatever the status. */
function request(base: string, path: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    // The path as given, not normalised as a URL would be ("/ports/../x" stays what it is).
    const req = http.request(base, { path, method: options.method ?? "GET", headers: options.headers, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(options.body);
  });
}

/** A GET over HTTP/2 (prior knowledge, as gRPC clients connect). */
function http2Get(base: string, path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(base);
    session.on("error", reject);
    const stream = session.request({ ":path": path, ...headers });
    let status = 0;
    let body = "";
    stream.setEncoding("utf8");
    stream.on("response", (h) => (status = Number(h[":status"])));
    stream.on("data", (c: string) => (body += c));
    stream.on("end", () => {
      session.close();
      resolve({ status, body });
    });
    stream.on("error", reject);
    stream.end();
  });
}

/** The error reason of a refused proxy request (its JSON body). */
const reasonOf = (body: string) => (JSON.parse(body) as { reason: string }).reason;

/** A WebSocket client handshake: the upgraded socket and the 101's headers, or the refusal. */
function upgrade(base: string, path: string, headers: Record<string, string>): Promise<{ socket: Duplex; headers: IncomingHttpHeaders } | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${path}`, {
      agent: false,
      headers: { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": randomBytes(16).toString("base64"), ...headers },
    });
    req.on("upgrade", (res, socket, head) => {
      if (head.length > 0) socket.unshift(head);
      resolve({ socket, headers: res.headers });
    });
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Sends one masked text frame and reads the one frame that answers it. */
async function roundTrip(socket: Duplex, text: string): Promise<string> {
  const payload = Buffer.from(text);
  const mask = randomBytes(4);
  socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, Buffer.from(payload.map((b, i) => b ^ mask[i % 4]))]));
  // Read with listeners, not an async iterator: leaving one destroys the socket.
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 2 || buf.length < 2 + (buf[1] & 0x7f)) return;
      socket.off("data", onData);
      socket.off("close", onClose);
      socket.pause();
      resolve(buf.subarray(2, 2 + (buf[1] & 0x7f)).toString("utf8"));
    };
    const onClose = () => reject(new Error("the WebSocket closed before its answer"));
    socket.on("data", onData);
    socket.once("close", onClose);
    socket.resume();
  });
}

/** Resolves once `socket` has closed (or after `ms`, false). */
function closed(socket: Duplex, ms = 30_000): Promise<boolean> {
  if (socket.destroyed) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    socket.resume();
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

interface Started {
  sessionId: string;
  token: string;
  workspaceId: string;
  agent: ClientSet;
}

async function startSession(t: T, agentType: string): Promise<Started> {
  const op = t.context.server.clients.grpc;
  const started = await op.workspaces.startSession({ agentType });
  const { session } = await watchUntilReady(t.context.server.clients.connect, started.session?.id ?? "", 180_000);
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  return { sessionId: session.id, token: started.sessionToken, workspaceId: session.workspaceId, agent: clientsWithToken(t.context.server.url, started.sessionToken) };
}

/** Starts the application on `port` in the session's workspace and waits until it listens. */
async function runApp(agent: ClientSet, workspaceId: string, node: string, port: number): Promise<string> {
  await agent.tools.writeFile({ workspaceId, path: "app.cjs", content: APP });
  const { process: proc } = await agent.processes.startProcess({ workspaceId, command: `exec ${node} app.cjs ${port}` });
  const id = proc?.processId ?? "";
  await eventually(async () => {
    const out = await agent.processes.readProcessOutput({ workspaceId, processId: id });
    if (Buffer.from(out.stderr).length > 0) throw new Error(`the application failed: ${Buffer.from(out.stderr).toString("utf8")}`);
    return Buffer.from(out.stdout).toString("utf8").includes("listening") ? true : undefined;
  }, 60_000, "the application to listen");
  return id;
}

const PROVIDERS = ["local", ...(["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "exposed ports"))];

for (const provider of PROVIDERS) {
  test(`${provider}: ExposePort serves HTTP and a WebSocket to the session's token and an operator key; other credentials, ports and workspaces are refused; unexposing closes what is open`, async (t) => {
    t.timeout(300_000);
    const { server } = t.context;
    const op = server.clients.grpc;
    const type = uniqueId(`ports-${provider}`);
    await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider, tools: ["bash", "write", "read"] } } });
    const [a, b] = await Promise.all([startSession(t, type), startSession(t, type)]);
    const node = provider === "local" ? process.execPath : "/opt/agent-workspace/node";
    // Local workspaces share the host's ports: a random one, unlikely to be taken.
    const port = provider === "local" ? 20_000 + randomInt(20_000) : 3000;
    await runApp(a.agent, a.workspaceId, node, port);

    // Before ExposePort the proxy reaches nothing, even for the workspace's own token.
    const prefix = `/ports/${a.workspaceId}/${port}`;
    const bearer = { authorization: `Bearer ${a.token}` };
    let r = await request(server.url, `${prefix}/`, { headers: bearer });
    t.is(r.status, 404, r.body);
    t.is(reasonOf(r.body), "ERROR_REASON_PORT_NOT_EXPOSED");

    const exposed = await a.agent.processes.exposePort({ workspaceId: a.workspaceId, port });
    t.is(exposed.port?.path, `${prefix}/`);
    t.true(exposed.listening);

    // HTTP with the session token: the application sees its own host, the path below the prefix,
    // the forwarded headers and the body, and never the token.
    r = await request(server.url, `${prefix}/api/items?q=1`, { method: "POST", headers: { ...bearer, "content-type": "text/plain", "x-custom": "kept" }, body: "payload" });
    t.is(r.status, 200, r.body);
    t.is(r.headers["x-app"], "seen");
    t.regex(String(r.headers["content-security-policy"]), /^sandbox /, "the page is not sandboxed away from the server's origin");
    const seen = JSON.parse(r.body) as { method: string; url: string; headers: Record<string, string | undefined>; body: string };
    t.like(seen, { method: "POST", url: "/api/items?q=1", body: "payload" });
    t.is(seen.headers.host, `localhost:${port}`);
    t.is(seen.headers["x-custom"], "kept");
    t.is(seen.headers["x-forwarded-prefix"], prefix);
    t.is(seen.headers.authorization, undefined, "the session token reached the application");
    t.false(r.body.includes(a.token), "the session token reached the application");

    // The application's own authorization header passes when the proxy's credential is sent apart.
    r = await request(server.url, `${prefix}/own`, { headers: { "x-agent-workspace-authorization": `Bearer ${a.token}`, authorization: "Bearer app-secret" } });
    t.is(r.status, 200, r.body);
    t.is((JSON.parse(r.body) as { headers: Record<string, string> }).headers.authorization, "Bearer app-secret");
    t.false(r.body.includes(a.token));

    // An operator key reaches it too.
    r = await request(server.url, `${prefix}/op`, { headers: { authorization: `Bearer ${KEY}` } });
    t.is(r.status, 200, r.body);
    t.false(r.body.includes(KEY), "the operator key reached the application");

    // Over HTTP/2 (what gRPC clients speak to this port) as well.
    const h2 = await http2Get(server.url, `${prefix}/h2`, { authorization: `Bearer ${KEY}` });
    t.is(h2.status, 200, h2.body);
    t.is((JSON.parse(h2.body) as { url: string }).url, "/h2");

    // Refused: no credential, a wrong one, another session's token, another workspace's path with
    // the first token, a port not exposed, a path without its slash (redirected, nothing reached).
    for (const [headers, status, reason] of [
      [{}, 401, "ERROR_REASON_UNAUTHENTICATED"],
      [{ authorization: "Bearer awsess_not-a-real-token" }, 401, "ERROR_REASON_UNAUTHENTICATED"],
      [{ authorization: `Bearer ${b.token}` }, 403, "ERROR_REASON_OUTSIDE_SESSION"],
    ] as const) {
      r = await request(server.url, `${prefix}/`, { headers });
      t.is(r.status, status, r.body);
      t.is(reasonOf(r.body), reason);
    }
    r = await request(server.url, `/ports/${b.workspaceId}/${port}/`, { headers: bearer });
    t.is(reasonOf(r.body), "ERROR_REASON_OUTSIDE_SESSION");
    r = await request(server.url, `/ports/${b.workspaceId}/${port}/`, { headers: { authorization: `Bearer ${KEY}` } });
    t.is(r.status, 404);
    t.is(reasonOf(r.body), "ERROR_REASON_PORT_NOT_EXPOSED", "another workspace's port is not the exposed one");
    r = await request(server.url, `/ports/${a.workspaceId}/${port + 1}/`, { headers: bearer });
    t.is(reasonOf(r.body), "ERROR_REASON_PORT_NOT_EXPOSED");
    r = await request(server.url, `${prefix}?x=1`, { headers: bearer });
    t.is(r.status, 308);
    t.is(r.headers.location, `${prefix}/?x=1`);
    for (const odd of [`/ports/%E0%A4%A/${port}/`, `/ports/${a.workspaceId}/0/`, `/ports/${a.workspaceId}/65536/`, `/ports/../agentworkspace.v1.ToolService/Bash`, "/ports/"]) {
      r = await request(server.url, odd, { headers: bearer });
      t.is(r.status, 400, `${odd}: ${r.body}`);
    }

    // Exposed but nothing listening: 503, retryable.
    await a.agent.processes.exposePort({ workspaceId: a.workspaceId, port: port + 1 });
    r = await request(server.url, `/ports/${a.workspaceId}/${port + 1}/`, { headers: bearer });
    t.is(r.status, 503, r.body);
    t.is(reasonOf(r.body), "ERROR_REASON_PORT_NOT_LISTENING");

    // A WebSocket: the token authenticates the upgrade and never reaches the application.
    const ws = await upgrade(server.url, `${prefix}/socket?room=1`, bearer);
    if (!("socket" in ws)) return t.fail(`upgrade refused: ${ws.status} ${ws.body}`);
    t.is(ws.headers["x-seen-authorization"], "none");
    t.is(ws.headers["x-seen-path"], "/socket?room=1");
    t.is(await roundTrip(ws.socket, "hello"), "echo:HELLO");
    t.is(await roundTrip(ws.socket, "again"), "echo:AGAIN");
    const refusedWs = await upgrade(server.url, `${prefix}/socket`, { authorization: `Bearer ${b.token}` });
    t.true("status" in refusedWs && refusedWs.status === 403, JSON.stringify(refusedWs));

    const listed = await a.agent.processes.listExposedPorts({ workspaceId: a.workspaceId });
    t.deepEqual(listed.ports.map((p) => p.port), [port, port + 1]);
    t.is(listed.ports[0].openConnections, 1, "the WebSocket is open through the port");

    // Unexposing closes the WebSocket and refuses what comes next.
    const unexposed = await a.agent.processes.unexposePort({ workspaceId: a.workspaceId, port });
    t.is(unexposed.closedConnections, 1);
    t.true(await closed(ws.socket), "the WebSocket outlived its port's exposure");
    r = await request(server.url, `${prefix}/`, { headers: bearer });
    t.is(reasonOf(r.body), "ERROR_REASON_PORT_NOT_EXPOSED");

    // A deleted workspace takes its ports along: the operator re-exposes, the session ends.
    await op.processes.exposePort({ workspaceId: a.workspaceId, port });
    const again = await upgrade(server.url, `${prefix}/socket`, { authorization: `Bearer ${KEY}` });
    if (!("socket" in again)) return t.fail(`upgrade refused: ${again.status} ${again.body}`);
    t.is(await roundTrip(again.socket, "x"), "echo:X");
    await op.workspaces.endSession({ id: a.sessionId });
    t.true(await closed(again.socket), "the WebSocket outlived its workspace");
    r = await request(server.url, `${prefix}/`, { headers: { authorization: `Bearer ${KEY}` } });
    t.is(r.status, 404);
    t.is(reasonOf(r.body), "ERROR_REASON_WORKSPACE_NOT_FOUND");
    await op.workspaces.endSession({ id: b.sessionId });
  });
}

test("local: a port some other process of the host listens on is never reached, the server's own included", async (t) => {
  t.timeout(120_000);
  const { server } = t.context;
  const op = server.clients.grpc;
  const { workspace } = await op.workspaces.createWorkspace({ provider: "local" });
  const id = workspace?.id ?? "";
  const outsider = net.createServer((s) => s.end("HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nsecret"));
  await new Promise<void>((resolve) => outsider.listen(0, "127.0.0.1", () => resolve()));
  try {
    const serverPort = Number(new URL(server.url).port);
    for (const port of [(outsider.address() as AddressInfo).port, serverPort]) {
      const exposed = await op.processes.exposePort({ workspaceId: id, port });
      t.false(exposed.listening, `port ${port} counted as the workspace's`);
      const r = await request(server.url, `/ports/${id}/${port}/`, { headers: { authorization: `Bearer ${KEY}` } });
      t.is(r.status, 503, r.body);
      t.is(reasonOf(r.body), "ERROR_REASON_PORT_NOT_LISTENING");
      t.regex(r.body, /another process of the host/);
      t.false(r.body.includes("secret"));
    }
  } finally {
    outsider.close();
    await op.workspaces.deleteWorkspace({ id });
  }
});

test("ExposePort: a memory workspace has no ports; an agent type without bash reaches none through the proxy; bad ports are INVALID_ARGUMENT", async (t) => {
  const { server } = t.context;
  const op = server.clients.grpc;
  const { workspace } = await op.workspaces.createWorkspace({ provider: "memory" });
  const mem = workspace?.id ?? "";
  await expectError(t, op.processes.exposePort({ workspaceId: mem, port: 3000 }), Code.FailedPrecondition, ErrorReason.PROCESSES_UNSUPPORTED);
  const { workspace: local } = await op.workspaces.createWorkspace({ provider: "local" });
  for (const port of [0, 65536, 100_000]) {
    await expectError(t, op.processes.exposePort({ workspaceId: local?.id ?? "", port }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
  }
  const type = uniqueId("ports-nobash");
  await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "local", tools: ["read"] } } });
  const s = await startSession(t, type);
  const r = await request(server.url, `/ports/${s.workspaceId}/3000/`, { headers: { authorization: `Bearer ${s.token}` } });
  t.is(r.status, 403, r.body);
  t.is(reasonOf(r.body), "ERROR_REASON_TOOL_NOT_ENABLED");
  const bad = await request(server.url, `/ports/${s.workspaceId}/99999/`, { headers: { authorization: `Bearer ${s.token}` } });
  t.is(bad.status, 400, bad.body);
  await op.workspaces.endSession({ id: s.sessionId });
  await op.workspaces.deleteWorkspace({ id: mem });
  await op.workspaces.deleteWorkspace({ id: local?.id ?? "" });
});

test("SIGTERM while a WebSocket and a request are open through the proxy: both are closed, the application's process ends, and the server exits 0", async (t) => {
  t.timeout(120_000);
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-ports-term-"));
  const server = await startServerProcess({ dataDir, env: { AGENT_WORKSPACE_HOST: "127.0.0.1" } });
  try {
    const c = clientsWithToken(server.url, "");
    const { workspace } = await c.workspaces.createWorkspace({ provider: "local" });
    const id = workspace?.id ?? "";
    const port = 20_000 + randomInt(20_000);
    const processId = await runApp(c, id, process.execPath, port);
    const pid = (await c.processes.getProcess({ workspaceId: id, processId })).process?.pid ?? 0;
    await c.processes.exposePort({ workspaceId: id, port });
    const ws = await upgrade(server.url, `/ports/${id}/${port}/socket`, {});
    if (!("socket" in ws)) return t.fail(`upgrade refused: ${ws.status} ${ws.body}`);
    t.is(await roundTrip(ws.socket, "before"), "echo:BEFORE");
    // A request whose body never ends holds a second proxy connection open.
    const hanging = http.request(`${server.url}/ports/${id}/${port}/upload`, { method: "POST", agent: false, headers: { "content-type": "text/plain" } });
    const hangingDone = new Promise<string>((resolve) => {
      hanging.on("response", (res) => resolve(`answered ${res.statusCode}`));
      hanging.on("error", (err) => resolve(`closed: ${err.message}`));
      hanging.on("close", () => resolve("closed"));
    });
    hanging.write("part of a body");
    await eventually(async () => ((await c.processes.listExposedPorts({ workspaceId: id })).ports[0]?.openConnections === 2 ? true : undefined), 30_000, "two open proxy connections");
    const exited = new Promise<number | null>((resolve) => server.child.once("exit", (code) => resolve(code)));
    process.kill(server.serverPid, "SIGTERM");
    t.true(await closed(ws.socket), "the WebSocket outlived the server");
    t.regex(await hangingDone, /closed|answered/);
    t.is(await exited, 0, server.stderr().slice(-2000));
    t.true(await waitDead([pid], 10_000), "the application outlived the server");
  } finally {
    if (server.child.exitCode === null) process.kill(-server.child.pid!, "SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
  }
});
