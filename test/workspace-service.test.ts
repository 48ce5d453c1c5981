/**
 * WorkspaceService through the real server: the lifecycle, listing, unknown ids and providers,
 * persistence across a restart, and commands that die with their workspace.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { expectError, LOCAL_ONLY, newWorkspace, serverTest, startServer } from "./helpers/server.ts";

const test = serverTest({ env: LOCAL_ONLY });

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
    ids.push(await newWorkspace(t.context.server.clients.connect, { labels: { run, name: n } }));
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
      id = await newWorkspace(first.clients.grpc, { labels: { keep: "yes" } });
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
