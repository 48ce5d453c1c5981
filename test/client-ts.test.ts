/**
 * The TypeScript client (@agent-workspace/client, imported by its package name as in-repo users do)
 * against a real server on a real socket: sessions, every tool, git, events, typed errors,
 * cancellation, deadlines and retries, over gRPC, Connect and gRPC-Web.
 */
import net from "node:net";
import { inspect } from "node:util";
import {
  AgentWorkspace,
  AgentWorkspaceError,
  CancelledError,
  Code,
  CommandNotAllowedError,
  DeadlineExceededError,
  ERROR_CLASSES,
  ErrorReason,
  ErrorReasonSchema,
  FileNotFoundError,
  FindNotFoundError,
  FindNotUniqueError,
  GitChange,
  NoRepositoryError,
  NothingToCommitError,
  PathOutsideWorkspaceError,
  ProcessNotRunningError,
  ProcessState,
  SessionStatus,
  ToolNotEnabledError,
  UnauthenticatedError,
  UnavailableError,
  type AgentWorkspaceOptions,
  type Protocol,
} from "@agent-workspace/client";
import { Code as ConnectCode, ConnectError, type Interceptor } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { ErrorDetailSchema } from "../gen/agentworkspace/v1/errors_pb.js";
import { servedElsewhere } from "../clients/ts/src/redirect.ts";
import { LOCAL_ONLY, serverTest, startServer } from "./helpers/server.ts";
import { alive, waitDead } from "./helpers/process.ts";

const test = serverTest({ env: LOCAL_ONLY });

const PROTOCOLS: Array<{ protocol: Protocol; httpVersion: "1.1" | "2" }> = [
  { protocol: "grpc", httpVersion: "2" },
  { protocol: "connect", httpVersion: "2" },
  { protocol: "grpc-web", httpVersion: "1.1" },
];

let serial = 0;
const unique = (hint: string) => `${hint}-${process.pid}-${++serial}`;

/** A client for the shared server, closed when the test ends. */
function client(t: { context: { server: { url: string } }; teardown(fn: () => void): void }, options: Partial<AgentWorkspaceOptions> = {}): AgentWorkspace {
  const aw = new AgentWorkspace({ url: t.context.server.url, ...options });
  t.teardown(() => aw.close());
  return aw;
}

/** The error `promise` rejects with (fails the test if it resolves). */
async function rejection(promise: Promise<unknown>): Promise<AgentWorkspaceError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof AgentWorkspaceError) return err;
    throw new Error(`not an AgentWorkspaceError: ${inspect(err)}`);
  }
  throw new Error("the call succeeded");
}

for (const { protocol, httpVersion } of PROTOCOLS) {
  test(`${protocol}/h${httpVersion}: a session starts, becomes ACTIVE, runs tools with its token, and ends`, async (t) => {
    const aw = client(t, { protocol, httpVersion });
    const agentType = unique("ts-coder");
    const { created } = await aw.agentTypes.apply({ id: agentType, workspace: { enabled: true, tools: ["bash", "read", "write"] } });
    t.true(created);
    // Applying again updates the existing agent type.
    const again = await aw.agentTypes.apply({ id: agentType, displayName: "TS coder", workspace: { enabled: true, tools: ["bash", "read", "write"] } });
    t.false(again.created);
    t.is((await aw.agentTypes.get(agentType)).displayName, "TS coder");

    const session = await aw.startSession({ agentType, labels: { by: "client-ts" } });
    t.regex(session.id, /^sess-/);
    t.regex(session.token, /^awsess_/);
    t.false(inspect(session, { depth: 5 }).includes(session.token), "the token does not show in console.log(session)");
    const ready = await session.ready({ timeoutMs: 30_000 });
    t.is(ready.status, SessionStatus.ACTIVE);
    t.not(ready.workspaceId, "");
    t.is(session.workspace.id, "", "the token's own workspace, no id needed");

    await session.workspace.write({ path: "note.txt", content: "from the session\n" });
    const r = await session.workspace.bash("cat note.txt; echo $((6 * 7))");
    t.is(r.stdout, "from the session\n42\n");
    t.is(r.exitCode, 0);
    t.is((await aw.sessions.get(session.id)).labels.by, "client-ts");
    t.true((await aw.sessions.list({ agentType })).sessions.some((s) => s.id === session.id));

    // A client made from the token alone reaches the same workspace.
    const agent = client(t, { protocol, httpVersion, sessionToken: session.token });
    t.is((await agent.workspace().read("note.txt")).content, "1: from the session");

    const ended = await session.end();
    t.is(ended.status, SessionStatus.ENDED);
    const refused = await rejection(agent.workspace().bash("true"));
    t.true(refused instanceof UnauthenticatedError, `${refused.name}: ${refused.message}`);
    t.is(refused.code, Code.Unauthenticated);
    t.false(`${refused.message}${refused.stack}${inspect(refused, { depth: 8 })}`.includes(session.token), "the token is not in the error");
    await aw.agentTypes.delete(agentType);
  });

  test(`${protocol}/h${httpVersion}: file tools, grep and bash in a workspace`, async (t) => {
    const aw = client(t, { protocol, httpVersion });
    const info = await aw.workspaces.create({ provider: "local", labels: { suite: "client-ts" } });
    t.teardown(() => aw.workspaces.delete(info.id).catch(() => undefined));
    t.is((await aw.workspaces.get(info.id)).id, info.id);
    t.true((await aw.workspaces.list({ labels: { suite: "client-ts" } })).workspaces.some((w) => w.id === info.id));
    const ws = aw.workspace(info.id);

    t.true((await ws.write({ path: "src/app.ts", content: "const a = 1;\nconst b = 2;\n" })).created);
    const read = await ws.read("src/app.ts");
    t.is(read.content, "1: const a = 1;\n2: const b = 2;");
    t.is(read.totalLines, 2);
    t.is((await ws.edit({ path: "src/app.ts", oldString: "a = 1", newString: "a = 10" })).replacements, 1);
    t.is((await ws.patch({ path: "src/app.ts", patches: [{ find: "b = 2", replace: "b = 20" }, { find: "b = 20", replace: "b = 200" }] })).patchesApplied, 2);
    t.is((await ws.readFile({ path: "src/app.ts", offset: 2 })).content, "2: const b = 200;");
    await ws.write({ path: "src/other.ts", content: "export const a = 10;\n" });
    t.deepEqual((await ws.list("src")).files.map((f) => f.path), ["src/app.ts", "src/other.ts"]);
    t.deepEqual((await ws.list({ pattern: "**/*.ts" })).files.map((f) => f.path).sort(), ["src/app.ts", "src/other.ts"]);
    t.deepEqual((await ws.glob("**/app.ts")).paths, ["src/app.ts"]);

    const grep = await ws.grep({ pattern: "a = 10", glob: "*.ts" });
    t.deepEqual(grep.matches.map((m) => `${m.path}:${m.line}`).sort(), ["src/app.ts:1", "src/other.ts:1"]);
    const streamed: string[] = [];
    const matches = ws.streamGrep({ pattern: "const", maxResults: 2 });
    let step = await matches.next();
    while (!step.done) {
      streamed.push(step.value.path);
      step = await matches.next();
    }
    t.is(streamed.length, 2);
    t.deepEqual(step.value, { matchCount: 2, truncated: true });

    await ws.delete("src/other.ts");
    t.true((await rejection(ws.read("src/other.ts"))) instanceof FileNotFoundError);

    const bash = await ws.bash({ command: "echo out; echo err >&2; exit 3", env: { X: "1" } });
    t.deepEqual([bash.stdout, bash.stderr, bash.exitCode], ["out\n", "err\n", 3]);

    // A multi-byte character split across two output chunks decodes whole; the raw bytes are there too.
    const run = ws.streamBash("printf 'caf\\xc3'; sleep 0.3; printf '\\xa9 \\xe2\\x82'; sleep 0.3; printf '\\xac\\n'; echo warn >&2; exit 7");
    const chunks: Array<{ stream: string; text: string; bytes: number[] }> = [];
    for await (const c of run) chunks.push({ stream: c.stream, text: c.text, bytes: [...c.bytes] });
    const stdout = chunks.filter((c) => c.stream === "stdout");
    t.true(stdout.length >= 3, `the output came in several chunks: ${JSON.stringify(stdout)}`);
    t.deepEqual(stdout[0].bytes, [0x63, 0x61, 0x66, 0xc3], "the first chunk ends inside 'é'");
    t.is(stdout[0].text, "caf");
    t.is(stdout.map((c) => c.text).join(""), "café €\n");
    t.false(chunks.some((c) => c.text.includes("\uFFFD")));
    t.deepEqual(Buffer.concat(stdout.map((c) => Buffer.from(c.bytes))), Buffer.from("café €\n"));
    t.is(chunks.filter((c) => c.stream === "stderr").map((c) => c.text).join(""), "warn\n");
    const exit = await run.exit;
    t.is(exit.exitCode, 7);
    t.false(exit.timedOut);
    t.is(exit.stdoutTotalBytes, BigInt(Buffer.byteLength("café €\n")));
    t.truthy(run.started?.startedAt);
    const collected = await ws.streamBash({ command: "echo one; echo two >&2" }).collect();
    t.deepEqual([collected.stdout, collected.stderr, collected.exit.exitCode], ["one\n", "two\n", 0]);
  });
}

test("a refusal naming the serving server is followed to an http(s) URL only, and never from https to http", (t) => {
  const refusal = (url: string, reason = ErrorReason.WORKSPACE_SERVED_ELSEWHERE, code = ConnectCode.Unavailable) =>
    new ConnectError("served elsewhere", code, undefined, [{ desc: ErrorDetailSchema, value: create(ErrorDetailSchema, { reason, metadata: { server_url: url } }) }]);
  t.is(servedElsewhere(refusal("http://10.0.0.2:8080/"), "http://10.0.0.1:8080"), "http://10.0.0.2:8080");
  t.is(servedElsewhere(refusal("https://b.internal"), "https://a.internal"), "https://b.internal");
  t.is(servedElsewhere(refusal("http://b.internal"), "https://a.internal"), undefined);
  for (const bad of ["file:///etc/passwd", "unix:///run/x.sock", "", "not a url"]) t.is(servedElsewhere(refusal(bad), "http://a"), undefined, bad);
  t.is(servedElsewhere(refusal("http://b", ErrorReason.DATABASE_UNAVAILABLE), "http://a"), undefined);
  t.is(servedElsewhere(refusal("http://b", ErrorReason.WORKSPACE_SERVED_ELSEWHERE, ConnectCode.Internal), "http://a"), undefined);
  t.is(servedElsewhere(new Error("no"), "http://a"), undefined);
});

test("git helpers: status, diff, commit, checkout on a repository made in the workspace; push without one is NoRepositoryError", async (t) => {
  const aw = client(t, { protocol: "grpc" });
  const info = await aw.workspaces.create({ provider: "local" });
  t.teardown(() => aw.workspaces.delete(info.id).catch(() => undefined));
  const ws = aw.workspace(info.id);
  const init = await ws.bash("git init -q -b main . && printf 'one\\n' > a.txt");
  t.is(init.exitCode, 0, init.stderr);

  const first = await ws.git.status();
  t.is(first.branch, "main");
  t.deepEqual(first.files.map((f) => [f.path, f.untracked]), [["a.txt", true]]);
  const commit = await ws.git.commit({ message: "first", files: ["a.txt"] });
  t.regex(commit.commit, /^[0-9a-f]{40}$/);
  t.is(commit.filesChanged, 1);
  t.true((await rejection(ws.git.commit({ message: "again", all: true }))) instanceof NothingToCommitError);

  await ws.write({ path: "a.txt", content: "one\ntwo\n" });
  const status = await ws.git.status();
  t.deepEqual(status.files.map((f) => [f.path, f.unstaged]), [["a.txt", GitChange.MODIFIED]]);
  const diff = await ws.git.diff();
  t.regex(diff.unstaged?.diff ?? "", /\+two/);
  t.deepEqual(diff.unstaged?.files.map((f) => [f.path, f.added, f.removed]), [["a.txt", 1, 0]]);

  await ws.git.commit({ message: "second", all: true });
  const checkout = await ws.git.checkout({ branch: "feature/x", create: true });
  t.true(checkout.created);
  t.is((await ws.git.status()).branch, "feature/x");
  t.is((await ws.git.checkout("main")).branch, "main");
  const push = await rejection(ws.git.push());
  t.true(push instanceof NoRepositoryError, `${push.name}: ${push.message}`);
  t.is(push.code, Code.FailedPrecondition);
});

test("processes and ports: a session's workspace starts a REPL, writes to it, reads and follows its output, waits for its end; a server it runs is exposed and reached through /ports/ with the session token", async (t) => {
  const aw = client(t, { protocol: "connect" });
  const agentType = unique("client-proc");
  await aw.agentTypes.create({ id: agentType, workspace: { enabled: true, provider: "local", tools: ["bash", "write"] } });
  const session = await aw.startSession({ agentType });
  t.teardown(() => session.end().catch(() => undefined));
  await session.ready();
  const procs = session.workspace.processes;

  // A REPL over stdin: what is written is read back, closing stdin ends it.
  const repl = await procs.start({ command: "while read -r line; do echo \"got $line\"; done; echo bye", stdin: true });
  t.is(repl.state, ProcessState.RUNNING);
  t.true((await procs.write(repl.processId, "one\n")) === 4n);
  await procs.write(repl.processId, "two\n", { close: true });
  const ended = await procs.wait(repl.processId, 30_000);
  t.false(ended.timedOut);
  t.is(ended.process?.exitCode, 0);
  const out = await procs.read(repl.processId);
  t.is(new TextDecoder().decode(out.stdout), "got one\ngot two\nbye\n");
  let followed = "";
  for await (const ev of procs.attach(repl.processId)) if (ev.event.case === "stdout") followed += new TextDecoder().decode(ev.event.value.data);
  t.is(followed, "got one\ngot two\nbye\n");
  t.deepEqual((await procs.list()).map((p) => p.processId), [repl.processId]);
  t.true((await rejection(procs.signal(repl.processId, "TERM"))) instanceof ProcessNotRunningError);

  // A server, exposed and reached through the proxy with the session token.
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  await session.workspace.write({ path: "srv.cjs", content: `require("node:http").createServer((q, s) => s.end("from " + q.url)).listen(${port}, "127.0.0.1", () => console.log("up"));` });
  const srv = await procs.start(`exec ${JSON.stringify(process.execPath)} srv.cjs`);
  for (let i = 0; i < 200 && !new TextDecoder().decode((await procs.read(srv.processId)).stdout).includes("up"); i++) await new Promise((r) => setTimeout(r, 50));
  const exposed = await procs.exposePort(port);
  t.true(exposed.listening);
  t.deepEqual((await procs.listExposedPorts()).map((p) => p.port), [port]);
  const res = await fetch(`${t.context.server.url}${exposed.port?.path}hello`, { headers: { authorization: `Bearer ${session.token}` } });
  t.is(await res.text(), "from /hello");
  t.is(await procs.unexposePort(port), 0);
  await procs.signal(srv.processId, "KILL");
  t.is((await procs.wait(srv.processId, 30_000)).process?.signal, "SIGKILL");
});

test("watchEvents sees a tool call start and finish, and the audit trail lists it", async (t) => {
  const aw = client(t);
  const info = await aw.workspaces.create({ provider: "local" });
  t.teardown(() => aw.workspaces.delete(info.id).catch(() => undefined));
  const ws = aw.workspace(info.id);
  const abort = new AbortController();
  const events = aw.watchEvents({ workspaceId: info.id }, { signal: abort.signal })[Symbol.asyncIterator]();
  t.is((await events.next()).value?.event.case, "started");
  await ws.bash("echo watched");
  const seen: string[] = [];
  while (!seen.includes("toolCallFinished")) {
    const { value } = await events.next();
    if (value?.event.case === "toolCallStarted" || value?.event.case === "toolCallFinished") {
      t.is(value.event.value.call?.tool, "bash");
      seen.push(value.event.case);
    }
  }
  t.deepEqual(seen, ["toolCallStarted", "toolCallFinished"]);
  abort.abort();
  await t.throwsAsync(events.next(), { instanceOf: CancelledError });
  const listed = await aw.audit.list({ workspaceId: info.id, tool: "bash" });
  t.true(listed.events.some((e) => e.request.command === "echo watched"));
});

test("typed errors: each carries its reason, code and metadata, and instanceof narrows", async (t) => {
  const aw = client(t, { protocol: "connect", httpVersion: "1.1" });
  const info = await aw.workspaces.create({ provider: "local" });
  t.teardown(() => aw.workspaces.delete(info.id).catch(() => undefined));
  const ws = aw.workspace(info.id);

  const missing = await rejection(ws.read("src/missing.ts"));
  t.true(missing instanceof FileNotFoundError);
  t.is(missing.name, "FileNotFoundError");
  t.is(missing.reason, "FILE_NOT_FOUND");
  t.is(missing.code, Code.NotFound);
  t.is(missing.metadata.path, "src/missing.ts");
  t.true(missing.cause instanceof Error, "the ConnectError is the cause");

  const outside = await rejection(ws.read("../../etc/passwd"));
  t.true(outside instanceof PathOutsideWorkspaceError);
  t.is(outside.code, Code.PermissionDenied);

  await ws.write({ path: "dup.txt", content: "x = 1\nx = 1\n" });
  const dup = await rejection(ws.edit({ path: "dup.txt", oldString: "x = 1", newString: "x = 2" }));
  t.true(dup instanceof FindNotUniqueError);
  t.is(dup.reason, "FIND_NOT_UNIQUE");
  t.is(dup.code, Code.FailedPrecondition);
  const notFound = await rejection(ws.edit({ path: "dup.txt", oldString: "x = 3\nx = 1", newString: "y" }));
  t.true(notFound instanceof FindNotFoundError);
  t.truthy(notFound.closestMatch, "a failed edit carries the closest match");
  t.true((notFound.closestMatch?.text ?? "").includes("x = 1"));

  const unknown = await rejection(aw.workspaces.get("ws-does-not-exist"));
  t.is(unknown.reason, "WORKSPACE_NOT_FOUND");
});

test("ToolNotEnabledError and CommandNotAllowedError come from the agent type's configuration", async (t) => {
  const aw = client(t, { protocol: "grpc" });
  const readOnly = unique("ts-reader");
  await aw.agentTypes.create({ id: readOnly, workspace: { enabled: true, tools: ["read"] } });
  const allowlist = unique("ts-allowlist");
  await aw.agentTypes.create({ id: allowlist, workspace: { enabled: true, tools: ["bash"], commandPolicy: { allow: ["echo"], deny: [] } } });
  t.deepEqual((await aw.agentTypes.getWorkspaceConfig(allowlist)).commandPolicy?.allow, ["echo"]);
  t.true((await aw.agentTypes.list()).some((a) => a.id === readOnly));

  const reader = await aw.startSession({ agentType: readOnly });
  t.teardown(() => reader.end().then(() => undefined, () => undefined));
  const refused = await rejection(reader.workspace.bash("true"));
  t.true(refused instanceof ToolNotEnabledError, `${refused.name}: ${refused.message}`);
  t.is(refused.code, Code.PermissionDenied);

  const limited = await aw.startSession({ agentType: allowlist });
  t.teardown(() => limited.end().then(() => undefined, () => undefined));
  await limited.ready({ timeoutMs: 30_000 });
  t.is((await limited.workspace.bash("echo allowed")).stdout, "allowed\n");
  const denied = await rejection(limited.workspace.bash("curl http://example.invalid"));
  t.true(denied instanceof CommandNotAllowedError, `${denied.name}: ${denied.message}`);
  t.is(denied.reason, "COMMAND_NOT_ALLOWED");
  t.is(denied.metadata.why, "not_in_allowlist");
  // A StreamBash refused by the policy throws the same class from the loop.
  const stream = limited.workspace.streamBash("curl http://example.invalid");
  await t.throwsAsync(async () => {
    for await (const _ of stream) void _;
  }, { instanceOf: CommandNotAllowedError });
  await t.throwsAsync(stream.exit, { instanceOf: CommandNotAllowedError });
});

test("every ErrorReason of errors.proto has its own class, named after it, and the server's errors select it", (t) => {
  const values = ErrorReasonSchema.values.filter((v) => v.number !== 0);
  t.is(Object.keys(ERROR_CLASSES).length, values.length);
  const names = new Set<string>();
  for (const v of values) {
    const Class = ERROR_CLASSES[v.number];
    t.truthy(Class, `a class for ${v.name}`);
    const expected = `${v.localName.toLowerCase().replace(/(^|_)([a-z0-9])/g, (_m, _s, c: string) => c.toUpperCase())}Error`;
    t.is(Class.name, expected);
    t.true(Class.prototype instanceof AgentWorkspaceError);
    names.add(Class.name);
  }
  t.is(names.size, values.length, "no two reasons share a class");
  t.is(ErrorReason.FILE_NOT_FOUND, 1);
});

test("timeoutMs is a deadline: a slow Bash fails DEADLINE_EXCEEDED and its command is stopped", async (t) => {
  const aw = client(t, { protocol: "grpc" });
  const info = await aw.workspaces.create({ provider: "local" });
  t.teardown(() => aw.workspaces.delete(info.id).catch(() => undefined));
  const ws = aw.workspace(info.id);
  const err = await rejection(ws.bash("sleep 20; echo done > late.txt", { timeoutMs: 300 }));
  t.is(err.code, Code.DeadlineExceeded);
  t.true(err instanceof DeadlineExceededError || err.reason === "COMMAND_TIMEOUT", `${err.name}: ${err.message}`);
  const read = await rejection(ws.read("late.txt"));
  t.true(read instanceof FileNotFoundError);
});

test("an AbortSignal cancels a streamBash: the loop ends with CancelledError and the command's process is gone", async (t) => {
  const aw = client(t, { protocol: "grpc" });
  const info = await aw.workspaces.create({ provider: "local" });
  t.teardown(() => aw.workspaces.delete(info.id).catch(() => undefined));
  const ws = aw.workspace(info.id);
  for (const how of ["signal", "break"] as const) {
    const abort = new AbortController();
    const run = ws.streamBash("echo $$; exec sleep 60", { signal: abort.signal });
    let pid = 0;
    const loop = (async () => {
      for await (const chunk of run) {
        pid = Number(chunk.text.trim());
        if (how === "break") break;
        abort.abort();
      }
    })();
    if (how === "signal") await t.throwsAsync(loop, { instanceOf: CancelledError });
    else await loop;
    t.true(pid > 0, "the command's pid arrived");
    await t.throwsAsync(run.exit, { instanceOf: CancelledError });
    t.true(await waitDead([pid], 10_000), `the command (pid ${pid}) was killed after ${how}`);
    t.false(alive(pid));
  }
  // A unary call too: the signal rejects it at once with CancelledError.
  const abort = new AbortController();
  const started = performance.now();
  setTimeout(() => abort.abort(), 200);
  const err = await rejection(ws.bash("sleep 30", { signal: abort.signal }));
  t.true(err instanceof CancelledError);
  t.is(err.code, Code.Canceled);
  t.true(performance.now() - started < 10_000);
});

/** A port nothing listens on (yet), and a TCP forwarder to `target` that can start listening on it later. */
async function lateProxy(target: string) {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  const { hostname, port: targetPort } = new URL(target);
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const proxy = net.createServer((client) => {
    connections++;
    const upstream = net.connect(Number(targetPort), hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => sockets.delete(s));
    }
    client.pipe(upstream).pipe(client);
  });
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    listen: () => new Promise<void>((resolve) => proxy.listen(port, "127.0.0.1", resolve)),
    close: () => {
      for (const s of sockets) s.destroy();
      proxy.close();
    },
  };
}

/** An interceptor counting the attempts that reach the transport. */
function counting(): { interceptor: Interceptor; attempts: Map<string, number> } {
  const attempts = new Map<string, number>();
  return {
    attempts,
    interceptor: (next) => (req) => {
      attempts.set(req.method.name, (attempts.get(req.method.name) ?? 0) + 1);
      return next(req);
    },
  };
}

test("a read is retried across a brief outage (UNAVAILABLE); a Bash is sent once and never retried", async (t) => {
  const direct = client(t);
  const info = await direct.workspaces.create({ provider: "local" });
  t.teardown(() => direct.workspaces.delete(info.id).catch(() => undefined));
  await direct.workspace(info.id).write({ path: "r.txt", content: "retried\n" });

  for (const { protocol, httpVersion } of PROTOCOLS) {
    // The read: the server's port refuses connections when the call starts and accepts 150 ms later.
    const proxy = await lateProxy(t.context.server.url);
    const count = counting();
    const aw = new AgentWorkspace({ url: proxy.url, protocol, httpVersion, interceptors: [count.interceptor], retry: { maxAttempts: 8, initialBackoffMs: 40, maxBackoffMs: 200 } });
    try {
      const reading = aw.workspace(info.id).read("r.txt");
      setTimeout(() => void proxy.listen(), 150);
      t.is((await reading).content, "1: retried", `${protocol}: the read succeeded`);
      t.true((count.attempts.get("ReadFile") ?? 0) >= 2, `${protocol}: ReadFile was sent ${count.attempts.get("ReadFile")} times`);
    } finally {
      aw.close();
      proxy.close();
    }

    // The Bash, in the same outage: one attempt, UnavailableError, and the command never ran.
    const down = await lateProxy(t.context.server.url);
    const once = counting();
    const agent = new AgentWorkspace({ url: down.url, protocol, httpVersion, interceptors: [once.interceptor], retry: { maxAttempts: 8, initialBackoffMs: 40, maxBackoffMs: 200 } });
    try {
      const running = agent.workspace(info.id).bash("echo ran >> bash-ran.txt");
      setTimeout(() => void down.listen(), 150);
      const err = await rejection(running);
      t.true(err instanceof UnavailableError, `${protocol}: ${err.name}: ${err.message}`);
      t.is(once.attempts.get("Bash"), 1, `${protocol}: Bash was sent once`);
      // A retry-safe read on the same client still retries: the policy is per RPC, not per client.
      t.is((await agent.workspace(info.id).list()).files.some((f) => f.path === "bash-ran.txt"), false, `${protocol}: the command never ran`);
    } finally {
      agent.close();
      down.close();
    }
  }
  // Retries stop at the deadline and at the signal.
  const never = await lateProxy(t.context.server.url);
  const aw = new AgentWorkspace({ url: never.url, retry: { maxAttempts: 100, initialBackoffMs: 20, maxBackoffMs: 50 } });
  t.teardown(() => aw.close());
  const deadline = await rejection(aw.workspace(info.id).read("r.txt", { timeoutMs: 300 }));
  t.true(deadline.code === Code.Unavailable || deadline.code === Code.DeadlineExceeded, `${deadline.name}: ${deadline.message}`);
  const abort = new AbortController();
  setTimeout(() => abort.abort(), 200);
  t.true((await rejection(aw.workspace(info.id).read("r.txt", { signal: abort.signal }))) instanceof CancelledError);
});

test("an operator key never appears in errors, and a wrong one is UnauthenticatedError", async (t) => {
  const key = "aw-test-key-0123456789abcdef0123456789";
  const server = await startServer({ env: LOCAL_ONLY, apiKeys: [key] });
  try {
    const good = new AgentWorkspace({ url: server.url, apiKey: key, protocol: "grpc" });
    const bad = new AgentWorkspace({ url: server.url, apiKey: `${key}-wrong`, protocol: "connect", httpVersion: "1.1" });
    try {
      t.false(inspect(good, { depth: 8 }).includes(key), "the key does not show in console.log(client)");
      const info = await good.workspaces.create({ provider: "local" });
      const missing = await rejection(good.workspace(info.id).read("nope"));
      t.true(missing instanceof FileNotFoundError);
      const refused = await rejection(bad.workspaces.list());
      t.true(refused instanceof UnauthenticatedError, `${refused.name}: ${refused.message}`);
      for (const err of [missing, refused]) t.false(`${err.message}${err.stack}${inspect(err, { depth: 8 })}${JSON.stringify(err)}`.includes(key));
      await good.workspaces.delete(info.id);
    } finally {
      good.close();
      bad.close();
    }
  } finally {
    await server.close();
  }
});
