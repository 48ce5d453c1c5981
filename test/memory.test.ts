/**
 * The memory provider through the real server: the conformance suite's file scenarios (every one
 * that runs no command) over gRPC and Connect, and seed 001's in-memory filesystem: its limits as
 * typed errors, no processes, grep without ripgrep, nothing on disk, and the end of its contents
 * with the workspace, the session and the server process.
 */
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import anyTest, { type TestFn } from "ava";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { createMemoryProvider, type MemoryProvider } from "../providers/memory.ts";
import { toWorkspacePath } from "../providers/executor/jail.ts";
import { providerEnv, registerToolScenarios } from "./conformance/tool-scenarios.ts";
import { type ClientSet, expectError, LOCAL_ONLY, newWorkspace, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  memory: MemoryProvider;
}
const test = anyTest as TestFn<Ctx>;

const memoryServer = (memory: MemoryProvider, dataDir?: string) =>
  startServer({ providers: [memory], dataDir, env: { ...LOCAL_ONLY, AGENT_WORKSPACE_DEFAULT_PROVIDER: "memory" } });

test.before(async (t) => {
  t.context.memory = createMemoryProvider();
  t.context.server = await memoryServer(t.context.memory);
});
test.after.always(async (t) => {
  await t.context.server?.close();
});

const decoder = new TextDecoder();
const scenarios = (clients: (s: TestServer) => ClientSet) => (t: { context: Ctx }) => ({
  ...providerEnv(clients(t.context.server), "memory"),
  async rawRead(workspaceId: string, p: string) {
    const bytes = t.context.memory.peek(workspaceId, toWorkspacePath(p));
    if (bytes === undefined) throw new Error(`no file '${p}' in memory workspace ${workspaceId}`);
    return decoder.decode(bytes);
  },
});
registerToolScenarios(test, "memory/grpc", scenarios((s) => s.clients.grpc), { processes: false });
registerToolScenarios(test, "memory/connect", scenarios((s) => s.clients.connect), { processes: false });

const ws = (t: { context: Ctx }) => newWorkspace(t.context.server.clients.grpc, { provider: "memory" });

test("memory: a write of 48,000 characters is kept; one more is CONTENT_TOO_LONG and changes nothing", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const id = await ws(t);
  // Characters, not bytes: 48,000 two-byte characters are 96,000 bytes and still fit.
  const full = "é".repeat(48_000);
  t.is((await tools.writeFile({ workspaceId: id, path: "big.txt", content: full })).bytesWritten, 96_000n);
  const { detail } = await expectError(t, tools.writeFile({ workspaceId: id, path: "big.txt", content: `${full}x` }), Code.InvalidArgument, ErrorReason.CONTENT_TOO_LONG);
  t.is(detail.metadata.max_chars, "48000");
  t.is(detail.metadata.provider, "memory");
  t.is(decoder.decode(t.context.memory.peek(id, "big.txt")), full);
  // An edit whose result would pass the limit is refused the same way, and the file stays.
  await expectError(t, tools.editFile({ workspaceId: id, path: "big.txt", oldString: "é", newString: "éé", replaceAll: true }), Code.InvalidArgument, ErrorReason.CONTENT_TOO_LONG);
  t.is(decoder.decode(t.context.memory.peek(id, "big.txt")), full);
});

test("memory: paths of more than 16 segments, segments of more than 80 characters and non-ASCII names are typed errors", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const id = await ws(t);
  const deep16 = Array.from({ length: 16 }, (_, i) => `d${i}`).join("/");
  await tools.writeFile({ workspaceId: id, path: deep16, content: "deepest allowed" });
  t.is((await tools.readFile({ workspaceId: id, path: deep16 })).content, "1: deepest allowed");
  const deep = await expectError(t, tools.writeFile({ workspaceId: id, path: `${deep16}/x`, content: "x" }), Code.InvalidArgument, ErrorReason.PATH_TOO_DEEP);
  t.is(deep.detail.metadata.max_depth, "16");
  // A path 300 directories deep, which the other providers make whole (the conformance suite's
  // "a path 300 new directories deep" scenario), is PATH_TOO_DEEP here, and nothing of it is made.
  const deep300 = `${Array.from({ length: 300 }, (_, i) => `x${i}`).join("/")}/leaf.txt`;
  const refused300 = await expectError(t, tools.writeFile({ workspaceId: id, path: deep300, content: "x" }), Code.InvalidArgument, ErrorReason.PATH_TOO_DEEP);
  t.regex(refused300.detail.message, /has 301 segments; a memory workspace allows at most 16$/);
  t.deepEqual((await tools.listFiles({ workspaceId: id })).files.map((e) => e.path), ["d0"]);
  await tools.writeFile({ workspaceId: id, path: `dir/${"s".repeat(76)}.txt`, content: "80 characters" });
  const long = await expectError(t, tools.writeFile({ workspaceId: id, path: `dir/${"s".repeat(81)}`, content: "x" }), Code.InvalidArgument, ErrorReason.PATH_SEGMENT_TOO_LONG);
  t.is(long.detail.metadata.max_segment_chars, "80");
  for (const name of ["café.txt", "日本.md", "tab\there"]) {
    await expectError(t, tools.writeFile({ workspaceId: id, path: name, content: "x" }), Code.InvalidArgument, ErrorReason.PATH_NOT_ASCII);
    // Reads are held to the same rules: such a path can name nothing here.
    await expectError(t, tools.readFile({ workspaceId: id, path: name }), Code.InvalidArgument, ErrorReason.PATH_NOT_ASCII);
  }
  // Nothing of the refused writes was made, not even a parent directory.
  t.deepEqual(
    (await tools.listFiles({ workspaceId: id, path: "dir" })).files.map((e) => e.path),
    [`dir/${"s".repeat(76)}.txt`],
  );
});

test("memory: binary content is refused with BINARY_CONTENT; text with every printable script is kept", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const id = await ws(t);
  await expectError(t, tools.writeFile({ workspaceId: id, path: "nul.bin", content: "a\0b" }), Code.InvalidArgument, ErrorReason.BINARY_CONTENT);
  t.is(t.context.memory.peek(id, "nul.bin"), undefined);
  const text = "ünïcödé ✓ 日本語 🚀\r\n";
  await tools.writeFile({ workspaceId: id, path: "text.txt", content: text });
  t.is(decoder.decode(t.context.memory.peek(id, "text.txt")), text);
});

test("memory: Bash, StreamBash and the git tools are FAILED_PRECONDITION naming the provider", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const id = await ws(t);
  const bash = await expectError(t, tools.bash({ workspaceId: id, command: "echo hi" }), Code.FailedPrecondition, ErrorReason.PROCESSES_UNSUPPORTED);
  t.is(bash.detail.metadata.provider, "memory");
  t.regex(bash.error.message, /'memory' provider runs no processes/);
  const stream = async () => {
    for await (const _ of tools.streamBash({ workspaceId: id, command: "echo hi" })) void _;
  };
  await expectError(t, stream(), Code.FailedPrecondition, ErrorReason.PROCESSES_UNSUPPORTED);
  // Every git RPC answers that first, before any check of its request or of a repository (a push
  // naming its branch would otherwise be NO_REPOSITORY, a forced one FORCE_PUSH_DENIED): in a
  // memory workspace none of them can ever work.
  const git: Array<[string, () => Promise<unknown>]> = [
    ["GitStatus", () => tools.gitStatus({ workspaceId: id })],
    ["GitDiff", () => tools.gitDiff({ workspaceId: id })],
    ["GitDiff against a ref", () => tools.gitDiff({ workspaceId: id, ref: "main", paths: ["a.txt"], contextLines: 3 })],
    ["GitCommit", () => tools.gitCommit({ workspaceId: id, message: "m", files: ["a"] })],
    ["GitCommit without files", () => tools.gitCommit({ workspaceId: id, message: "" })],
    ["GitCheckout", () => tools.gitCheckout({ workspaceId: id, branch: "feature", create: true })],
    ["GitCheckout of a bad name", () => tools.gitCheckout({ workspaceId: id, branch: "-x" })],
    ["GitPush", () => tools.gitPush({ workspaceId: id })],
    ["GitPush of a branch", () => tools.gitPush({ workspaceId: id, branch: "main" })],
    ["GitPush forced", () => tools.gitPush({ workspaceId: id, branch: "main", force: true })],
  ];
  for (const [what, call] of git) {
    const { detail } = await expectError(t, call(), Code.FailedPrecondition, ErrorReason.PROCESSES_UNSUPPORTED);
    t.is(detail.metadata.provider, "memory", what);
  }
  // The workspace goes on serving its files.
  await tools.writeFile({ workspaceId: id, path: "still.txt", content: "here" });
  t.is((await tools.readFile({ workspaceId: id, path: "still.txt" })).content, "1: here");
});

test("memory: grep without ripgrep: RE2 syntax, hidden files skipped unless the glob names them, globs by name at any depth, a catastrophic pattern stays linear", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const id = await ws(t);
  await tools.writeFile({ workspaceId: id, path: "src/a.ts", content: "const Alpha = 1;\nlet beta = 2;\n" });
  await tools.writeFile({ workspaceId: id, path: "src/deep/b.ts", content: "alpha again\n" });
  await tools.writeFile({ workspaceId: id, path: ".hidden/c.ts", content: "alpha hidden\n" });
  await tools.writeFile({ workspaceId: id, path: ".env.example", content: "ALPHA=1\n" });
  const where = (r: { matches: Array<{ path: string; line: number }> }) => r.matches.map((m) => `${m.path}:${m.line}`).sort();
  // Inline flags, POSIX classes and \p classes, as in ripgrep's regex syntax.
  t.deepEqual(where(await tools.grep({ workspaceId: id, pattern: "(?i)alpha" })), ["src/a.ts:1", "src/deep/b.ts:1"]);
  t.deepEqual(where(await tools.grep({ workspaceId: id, pattern: "[[:upper:]]\\pL+ =" })), ["src/a.ts:1"]);
  t.deepEqual(where(await tools.grep({ workspaceId: id, pattern: "alpha", glob: "b.ts", caseSensitive: false })), ["src/deep/b.ts:1"]);
  t.deepEqual(where(await tools.grep({ workspaceId: id, pattern: "alpha", glob: "!b.ts", caseSensitive: false })), ["src/a.ts:1"]);
  t.deepEqual(where(await tools.grep({ workspaceId: id, pattern: "ALPHA", glob: ".env*" })), [".env.example:1"]);
  // Look-around and backreferences are refused as ripgrep refuses them.
  await expectError(t, tools.grep({ workspaceId: id, pattern: "alpha(?= again)" }), Code.InvalidArgument, ErrorReason.INVALID_PATTERN);
  await expectError(t, tools.grep({ workspaceId: id, pattern: "(a)\\1" }), Code.InvalidArgument, ErrorReason.INVALID_PATTERN);
  // A pattern that backtracks exponentially in JavaScript's engine is linear here.
  await tools.writeFile({ workspaceId: id, path: "aaa.txt", content: `${"a".repeat(40_000)}b\n` });
  const r = await tools.grep({ workspaceId: id, pattern: "^(a+)+$", path: "aaa.txt" });
  t.deepEqual(r.matches, []);
});

test("memory: nothing touches the disk, and a deleted workspace's files are gone", async (t) => {
  const { tools, workspaces } = t.context.server.clients.grpc;
  const id = await ws(t);
  await tools.writeFile({ workspaceId: id, path: "note.txt", content: "in memory only" });
  const onDisk = await readdir(t.context.server.dataDir, { recursive: true });
  t.false(onDisk.some((p) => p.includes(id) || p.endsWith("note.txt")), onDisk.join(" "));
  await workspaces.deleteWorkspace({ id });
  t.is(t.context.memory.peek(id, "note.txt"), undefined);
  await expectError(t, tools.readFile({ workspaceId: id, path: "note.txt" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
});

test("memory: a workspace holds at most its disk limit; past it a write is RESOURCE_EXHAUSTED and a delete makes room", async (t) => {
  const { tools, workspaces } = t.context.server.clients.grpc;
  const made = await workspaces.createWorkspace({ provider: "memory", limits: { disk: "16M" } });
  const id = made.workspace?.id ?? "";
  const chunk = "x".repeat(48_000);
  let written = 0;
  let refused: unknown;
  for (let i = 0; i < 400 && refused === undefined; i++) {
    await tools.writeFile({ workspaceId: id, path: `f${i}.txt`, content: chunk }).then(() => written++, (e: unknown) => (refused = e));
  }
  // 16 MiB of 48,000-byte files (and each entry's own cost): about 349 of them.
  t.true(written >= 340 && written < 350, `${written} files`);
  await expectError(t, Promise.reject(refused), Code.ResourceExhausted, ErrorReason.RESOURCE_EXHAUSTED);
  await tools.deleteFile({ workspaceId: id, path: "f0.txt" });
  await tools.writeFile({ workspaceId: id, path: "again.txt", content: chunk });
  t.pass();
});

test("memory: sensitive files are refused as on every provider", async (t) => {
  const { tools } = t.context.server.clients.grpc;
  const id = await ws(t);
  await expectError(t, tools.writeFile({ workspaceId: id, path: ".env", content: "TOKEN=x" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
  await expectError(t, tools.readFile({ workspaceId: id, path: "config/.env" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
  t.is(t.context.memory.peek(id, ".env"), undefined);
});

test("memory: a restarted server has none of the memory workspaces of the one before (they ended with it), and their sessions are DEGRADED, not ACTIVE", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-memory-"));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const first = await memoryServer(createMemoryProvider(), dataDir);
  const id = await newWorkspace(first.clients.grpc, { provider: "memory" });
  await first.clients.grpc.tools.writeFile({ workspaceId: id, path: "a.txt", content: "a" });
  await first.clients.grpc.config.createAgentType({ agentType: { id: "remembered", workspace: { enabled: true, provider: "memory", tools: ["read"] } } });
  const started = await first.clients.grpc.workspaces.startSession({ agentType: "remembered" });
  const before = (await watchUntilReady(first.clients.grpc, started.session!.id)).session;
  t.is(before.status, SessionStatus.ACTIVE);
  await first.close();
  const second = await memoryServer(createMemoryProvider(), dataDir);
  try {
    await second.app.sessions.recovered;
    t.deepEqual((await second.clients.grpc.workspaces.listWorkspaces({})).workspaces, []);
    await expectError(t, second.clients.grpc.tools.readFile({ workspaceId: id, path: "a.txt" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    // Its session is not left ACTIVE in a workspace that is gone: it is DEGRADED, and says why.
    const after = (await second.clients.grpc.workspaces.getSession({ id: before.id })).session!;
    t.is(after.status, SessionStatus.DEGRADED);
    t.is(after.workspaceId, "");
    t.regex(after.statusMessage, /memory workspace ended with the previous server process/);
    await expectError(t, clientsWithToken(second.url, started.sessionToken).tools.readFile({ path: "a.txt" }), Code.FailedPrecondition, ErrorReason.WORKSPACE_NOT_PROVISIONED);
  } finally {
    await second.close();
  }
});

test("memory: a session on a memory agent type is ACTIVE with a workspace of its own; its end ends the files; setup commands are refused for the memory provider, and end in a warning when a default provider of memory meets them", async (t) => {
  const op = t.context.server.clients.grpc;
  const type = `memory-${process.pid}`;
  await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "memory", tools: ["read", "write", "grep", "bash"] } } });
  const { session, sessionToken } = await op.workspaces.startSession({ agentType: type });
  const ready = await watchUntilReady(op, session!.id);
  t.is(ready.session.status, SessionStatus.ACTIVE);
  t.is(ready.session.provider, "memory");
  const agent = clientsWithToken(t.context.server.url, sessionToken);
  await agent.tools.writeFile({ path: "notes.md", content: "# notes\n" });
  t.is((await agent.tools.grep({ pattern: "notes" })).matches[0]?.path, "notes.md");
  await expectError(t, agent.tools.bash({ command: "ls" }), Code.FailedPrecondition, ErrorReason.PROCESSES_UNSUPPORTED);
  const workspaceId = ready.session.workspaceId;
  t.truthy(t.context.memory.peek(workspaceId, "notes.md"));
  await op.workspaces.endSession({ id: session!.id });
  t.is(t.context.memory.peek(workspaceId, "notes.md"), undefined);

  // An agent type naming the memory provider cannot ask for setup commands there;
  const refused = await expectError(
    t,
    op.config.createAgentType({ agentType: { id: `memory-refused-${process.pid}`, workspace: { enabled: true, provider: "memory", tools: ["read"], setupCommands: ["npm ci"] } } }),
    Code.InvalidArgument,
    ErrorReason.INVALID_ARGUMENT,
  );
  t.is(refused.detail.metadata.field, "agent_type.workspace.setup_commands");
  t.regex(refused.detail.message, /'memory' provider runs none/);
  // one naming no provider lands on this server's default, memory, and its setup command fails there.
  const withSetup = `memory-setup-${process.pid}`;
  await op.config.createAgentType({ agentType: { id: withSetup, workspace: { enabled: true, tools: ["read"], setupCommands: ["npm ci"] } } });
  const second = await op.workspaces.startSession({ agentType: withSetup });
  const degraded = await watchUntilReady(op, second.session!.id);
  // A failed setup command leaves a partial setup: the session is active, with the refusal as its warning.
  t.is(degraded.session.status, SessionStatus.ACTIVE, JSON.stringify(degraded.events));
  t.regex(degraded.session.warnings[0]?.message ?? "", /'memory' provider runs no processes/);
  await op.workspaces.endSession({ id: second.session!.id });
});

test("memory: an agent type of the memory provider with a repository is refused where it is saved: CreateAgentType, UpdateAgentType, UpdateWorkspaceConfig and the agent-types file", async (t) => {
  const op = t.context.server.clients.grpc;
  const type = `memory-repo-${process.pid}`;
  const repoSource = { type: "fixed", url: "https://example.org/org/repo.git", branch: "main" };
  const refusedField = async (call: Promise<unknown>, prefix: string) => {
    const { detail } = await expectError(t, call, Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.is(detail.metadata.field, `${prefix}repo_source.type`);
    t.regex(detail.message, /^repo_source\.type '(fixed|task_context)' needs a provider that runs processes; the 'memory' provider runs none/);
  };
  await refusedField(op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "memory", tools: ["read"], repoSource } } }), "agent_type.workspace.");
  await expectError(t, op.config.getAgentType({ id: type }), Code.NotFound, ErrorReason.AGENT_TYPE_NOT_FOUND);
  // A type saved without one cannot be given one later, by either update.
  await op.config.createAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "memory", tools: ["read"] } } });
  await refusedField(op.config.updateAgentType({ agentType: { id: type, workspace: { enabled: true, provider: "memory", tools: ["read"], repoSource: { type: "task_context" } } } }), "agent_type.workspace.");
  await refusedField(op.config.updateWorkspaceConfig({ agentTypeId: type, workspaceConfig: { enabled: true, provider: "memory", tools: ["read"], repoSource } }), "");
  t.is((await op.config.getWorkspaceConfig({ agentTypeId: type })).workspaceConfig?.repoSource?.type, "none", "nothing of the refused updates was stored");

  // The agent-types file is held to the same rule: the server does not start with such an entry.
  const dir = await mkdtemp(path.join(tmpdir(), "aw-memory-types-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, "agent-types.yaml");
  await writeFile(file, "agent_types:\n  - id: in-memory\n    workspace: { enabled: true, provider: memory, tools: [read], repo_source: { type: fixed, url: 'https://example.org/org/repo.git' } }\n");
  const started = startServer({ providers: [createMemoryProvider()], env: { ...LOCAL_ONLY, AGENT_WORKSPACE_AGENT_TYPES: file } });
  const error = await t.throwsAsync(started);
  t.regex(error?.message ?? "", /--agent-types .*repo_source\.type 'fixed' needs a provider that runs processes.*\(field agent_type\.workspace\.repo_source\.type\)/);
});
