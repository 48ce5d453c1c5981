/**
 * FileChanged on WatchEvents: the file tools' changes with their kind, and what a Bash or
 * StreamBash command created, modified or deleted, found by the scan after it (audit/file-changes.ts),
 * through the real server on a real socket, on local and (gated) on docker and gvisor.
 */
import { writeFile } from "node:fs/promises";
import path from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { FileChangeKind, type FileChanged, type WatchEventsResponse } from "../gen/agentworkspace/v1/audit_pb.js";
import { gate, probeEngines } from "./helpers/engines.ts";
import { type ClientSet, LOCAL_ONLY, newWorkspace, startServer, type TestServer } from "./helpers/server.ts";
import { eventually } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  /** A server whose scans walk at most SMALL_BOUND entries. */
  bounded: TestServer;
  /** A server whose scans stop after 1 ms. */
  hasty: TestServer;
}

const test = anyTest as TestFn<Ctx>;
const engines = await probeEngines();
const SMALL_BOUND = 50;

/**
 * The scans' time bound for the servers whose tests are about what a scan finds, not about how long
 * it may take: the default 500 ms of wall time is a bound a loaded CI passes (a scan of 1,001 files
 * did, and the next command's events were then tree_changed too, as nothing was known). The time
 * bound itself has its own server and test (`hasty`).
 */
const PATIENT = { AGENT_WORKSPACE_CHANGE_SCAN_MAX_MS: "60000" };

test.before(async (t) => {
  const containers = engines.docker || engines.gvisor;
  t.context.server = await startServer({ env: containers ? PATIENT : { ...LOCAL_ONLY, ...PATIENT } });
  t.context.bounded = await startServer({ env: { ...LOCAL_ONLY, ...PATIENT, AGENT_WORKSPACE_CHANGE_SCAN_MAX_ENTRIES: String(SMALL_BOUND) } });
  t.context.hasty = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_CHANGE_SCAN_MAX_MS: "1" } });
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.bounded?.close();
  await t.context.hasty?.close();
});

/** A WatchEvents stream collected in the background. */
function watch(clients: ClientSet, filter: { workspaceId?: string; sessionId?: string }) {
  const abort = new AbortController();
  const seen: WatchEventsResponse[] = [];
  const done = (async () => {
    try {
      for await (const m of clients.audit.watchEvents(filter, { signal: abort.signal })) seen.push(m);
    } catch {
      // Ended by stop().
    }
  })();
  return {
    seen,
    started: () => eventually(() => (seen[0]?.event.case === "started" ? true : undefined), 10_000, "the watch to start"),
    /** The span of the (unique) bash call whose ToolCallFinished has this command. */
    spanOf: (command: string) =>
      eventually(() => {
        for (const m of seen) if (m.event.case === "toolCallFinished" && m.event.value.call?.request.command === command) return m.event.value.call.spanId;
        return undefined;
      }, 20_000, `the end of '${command}'`),
    changes: () => seen.flatMap((m) => (m.event.case === "fileChanged" ? [m.event.value] : [])),
    async stop() {
      abort.abort();
      await done;
    },
  };
}
type Watch = ReturnType<typeof watch>;

const line = (c: FileChanged) => (c.treeChanged ? `tree_changed ${c.tool}` : `${FileChangeKind[c.change]} ${c.path} ${c.tool}`);

/**
 * Runs `command` and returns the FileChanged events of its span. Its changes follow its
 * ToolCallFinished; a `touch` run after it (scans take turns per workspace) and seen marks the end.
 */
async function bashChanges(clients: ClientSet, w: Watch, workspaceId: string, command: string): Promise<string[]> {
  await clients.tools.bash({ workspaceId, command });
  const span = await w.spanOf(command);
  const markCommand = `touch marker-${Math.random().toString(36).slice(2)}`;
  await clients.tools.bash({ workspaceId, command: markCommand });
  const markSpan = await w.spanOf(markCommand);
  await eventually(() => (w.changes().some((c) => c.spanId === markSpan) ? true : undefined), 20_000, "the marker's event");
  return w.changes().filter((c) => c.spanId === span).map(line);
}

test("WatchEvents shows each file tool's change with its kind: WriteFile created then modified, EditFile and PatchFile modified, DeleteFile deleted", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.writeFile({ workspaceId: ws, path: "/workspace/notes.md", content: "one" });
  await c.tools.writeFile({ workspaceId: ws, path: "notes.md", content: "two" });
  await c.tools.editFile({ workspaceId: ws, path: "./notes.md", oldString: "two", newString: "three" });
  await c.tools.patchFile({ workspaceId: ws, path: "notes.md", patches: [{ find: "three", replace: "four" }] });
  await c.tools.deleteFile({ workspaceId: ws, path: "notes.md" });
  await eventually(() => (w.changes().length === 5 ? true : undefined), 10_000, "five events");
  t.deepEqual(w.changes().map(line), ["CREATED notes.md write", "MODIFIED notes.md write", "MODIFIED notes.md edit", "MODIFIED notes.md patch", "DELETED notes.md delete"]);
  for (const ch of w.changes()) t.like(ch, { workspaceId: ws, treeChanged: false });
  await w.stop();
});

/** The basic case, on every provider this machine has. */
async function basicCase(t: ExecutionContext<Ctx>, provider: string): Promise<void> {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  // The first command takes the snapshot; the files written after it are the tools' to report.
  await c.tools.bash({ workspaceId: ws, command: "true" });
  await c.tools.writeFile({ workspaceId: ws, path: "old.txt", content: "old\n" });
  await c.tools.writeFile({ workspaceId: ws, path: "kept.txt", content: "kept\n" });
  await c.tools.writeFile({ workspaceId: ws, path: "deep/er/file.txt", content: "made with its parents\n" });
  const command = "mkdir -p a/b && echo x > a/b/new.txt && rm old.txt && echo y >> kept.txt";
  t.deepEqual(await bashChanges(c, w, ws, command), ["DELETED old.txt bash", "CREATED a bash", "CREATED a/b bash", "CREATED a/b/new.txt bash", "MODIFIED kept.txt bash"]);
  // Every change of a path is reported once: the writes by the write tool, nothing of them by bash.
  t.deepEqual(w.changes().filter((ch) => /^(old|kept)\.txt$|^deep/.test(ch.path)).map(line), ["CREATED old.txt write", "CREATED kept.txt write", "CREATED deep/er/file.txt write", "DELETED old.txt bash", "MODIFIED kept.txt bash"]);
  // After the command's own ToolCallFinished, with its span and the workspace.
  const span = await w.spanOf(command);
  const finished = w.seen.findIndex((m) => m.event.case === "toolCallFinished" && m.event.value.call?.spanId === span);
  const first = w.seen.findIndex((m) => m.event.case === "fileChanged" && m.event.value.spanId === span);
  t.true(finished >= 0 && first > finished);
  t.true(w.changes().filter((ch) => ch.spanId === span).every((ch) => ch.workspaceId === ws && !ch.treeChanged));
  await w.stop();
  await c.workspaces.deleteWorkspace({ id: ws });
}

test("local: a command's created, deleted and modified paths are FileChanged events of tool bash, after its ToolCallFinished", (t) => basicCase(t, "local"));

for (const provider of ["docker", "gvisor"] as const) {
  if (gate(test, engines, provider, "file changes of commands")) {
    test(`${provider}: a command's created, deleted and modified paths are FileChanged events of tool bash, after its ToolCallFinished`, (t) => basicCase(t, provider));
  }
}

test("a command that changes nothing gives no event; neither does one that only reads", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  await c.tools.writeFile({ workspaceId: ws, path: "src/app.ts", content: "export {};\n" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  t.deepEqual(await bashChanges(c, w, ws, "ls -la; cat src/app.ts; exit 3"), []);
  t.deepEqual(await bashChanges(c, w, ws, "echo nothing"), []);
  await w.stop();
});

test("a symlink a command makes to outside the workspace is reported as a path and never followed", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.bash({ workspaceId: ws, command: "true" });
  t.deepEqual(await bashChanges(c, w, ws, "ln -s /etc escape && ln -s /etc/passwd pw && ln -s missing dangling"), ["CREATED dangling bash", "CREATED escape bash", "CREATED pw bash"]);
  // Retargeting a link modifies it; nothing below it is ever listed.
  t.deepEqual(await bashChanges(c, w, ws, "ln -sfn /usr escape"), ["MODIFIED escape bash"]);
  t.false(w.changes().some((ch) => ch.path.startsWith("escape/")));
  await w.stop();
});

test("StreamBash commands report their changes too, and a sensitive file's name appears as it does in ListFiles", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.bash({ workspaceId: ws, command: "true" });
  // A sensitive file put in place from outside (the command policy refuses commands naming one).
  const dir = t.context.server.app.workspaces.find(ws)?.state.dir;
  if (dir === undefined) throw new Error("no directory for the local workspace");
  await writeFile(path.join(dir, ".env"), "KEY=1\n");
  const command = "echo streamed > s.txt";
  for await (const _ of c.tools.streamBash({ workspaceId: ws, command }));
  const span = await w.spanOf(command);
  await eventually(() => (w.changes().filter((ch) => ch.spanId === span).length === 2 ? true : undefined), 20_000, "the stream's changes");
  t.deepEqual(w.changes().filter((ch) => ch.spanId === span).map(line), ["CREATED .env bash", "CREATED s.txt bash"]);
  const listed = await c.tools.listFiles({ workspaceId: ws, path: "" });
  t.true(listed.files.some((f) => f.path === ".env"));
  await w.stop();
});

test("the insides of .git and node_modules are not scanned; the directories themselves are reported", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.bash({ workspaceId: ws, command: "true" });
  t.deepEqual(await bashChanges(c, w, ws, "mkdir -p node_modules/x .git/objects && touch node_modules/x/i.js .git/HEAD"), ["CREATED .git bash", "CREATED node_modules bash"]);
  t.deepEqual(await bashChanges(c, w, ws, "touch node_modules/x/j.js .git/objects/o && rm node_modules/x/i.js"), []);
  await w.stop();
});

test("a watcher that arrives later gets the changes of the commands after it, not earlier ones", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  await c.tools.bash({ workspaceId: ws, command: "touch before-anyone-watched" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  t.deepEqual(await bashChanges(c, w, ws, "touch after && rm before-anyone-watched"), ["DELETED before-anyone-watched bash", "CREATED after bash"]);
  await w.stop();
  // Unwatched again: the next commands are not scanned; a new watcher starts from a fresh snapshot.
  await c.tools.bash({ workspaceId: ws, command: "touch unseen" });
  const again = watch(c, { workspaceId: ws });
  await again.started();
  t.deepEqual(await bashChanges(c, again, ws, "rm unseen after"), ["DELETED unseen bash", "DELETED after bash"]);
  await again.stop();
});

test("commands running at once in one workspace: every change is reported, none lost", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.bash({ workspaceId: ws, command: "true" });
  await Promise.all([
    c.tools.bash({ workspaceId: ws, command: "touch one-a; sleep 0.3; touch one-b" }),
    c.tools.bash({ workspaceId: ws, command: "touch two-a; sleep 0.6; touch two-b" }),
    c.tools.bash({ workspaceId: ws, command: "sleep 0.1; touch three" }),
  ]);
  await bashChanges(c, w, ws, "echo after the three");
  const created = new Set(w.changes().filter((ch) => ch.change === FileChangeKind.CREATED && ch.tool === "bash").map((ch) => ch.path));
  for (const p of ["one-a", "one-b", "two-a", "two-b", "three"]) t.true(created.has(p), p);
  t.false(w.changes().some((ch) => ch.treeChanged));
  await w.stop();
});

test("a command that makes more than the scan's bound gives one tree_changed event; precise events return once the tree fits", async (t) => {
  const c = t.context.bounded.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.bash({ workspaceId: ws, command: "true" });
  const over = await bashChanges(c, w, ws, `mkdir many && touch many/f{1..${SMALL_BOUND + 10}}`);
  t.deepEqual(over, ["tree_changed bash"]);
  const event = w.changes().find((ch) => ch.treeChanged);
  t.like(event, { path: "", change: FileChangeKind.UNSPECIFIED, workspaceId: ws, tool: "bash" });
  // While the tree is over the bound every command says tree_changed (nothing precise is known).
  t.deepEqual(await bashChanges(c, w, ws, "echo still over the bound"), ["tree_changed bash"]);
  // Back under the bound: the first scan has nothing to compare with, the next ones are precise.
  t.deepEqual(await bashChanges(c, w, ws, "rm -r many"), ["tree_changed bash"]);
  t.deepEqual(await bashChanges(c, w, ws, "touch fits"), ["CREATED fits bash"]);
  await w.stop();
});

test("a scan that passes its time bound is stopped: its command, and the next while nothing is known, give one tree_changed event each", async (t) => {
  const c = t.context.hasty.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  // 2,000 entries cannot be walked in 1 ms; the count bound (50,000) and the change bound (1,000
  // listed) are not what stops these scans: 600 changes are fewer than the list holds.
  await c.tools.bash({ workspaceId: ws, command: "mkdir old && touch old/f{1..2000}" });
  t.deepEqual(await bashChanges(c, w, ws, "touch new{1..600}"), ["tree_changed bash"]);
  t.deepEqual(await bashChanges(c, w, ws, "touch new1"), ["tree_changed bash"]);
  t.false(w.changes().some((ch) => !ch.treeChanged), "no precise event from a scan that was stopped");
  await w.stop();
});

test("a command that changes more paths than one scan lists gives one tree_changed event", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await newWorkspace(c, { provider: "local" });
  const w = watch(c, { workspaceId: ws });
  await w.started();
  await c.tools.bash({ workspaceId: ws, command: "true" });
  t.deepEqual(await bashChanges(c, w, ws, "mkdir many && cd many && touch f{1..1001}"), ["tree_changed bash"]);
  t.deepEqual(await bashChanges(c, w, ws, "touch many/f1001"), ["MODIFIED many/f1001 bash"]);
  await w.stop();
});
