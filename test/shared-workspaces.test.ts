/**
 * Shared workspaces (seed 001's clone(session=...)) through the real server, on every provider
 * (the refusals, the restart and the race, which happen in the session layer, on local and memory): a second session joins the workspace of a live one; each keeps its own token,
 * audit trail and digests; the workspace is reference counted and deleted when the last session
 * ends, also across a restart; joins that cannot be are refused, and a join racing the last end
 * never leaves a session without its workspace.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import test from "ava";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { DigestSource, SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type ClientSet, errorDetail, expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import { clientsWithToken, eventually, watchUntilReady } from "./helpers/sessions.ts";

const KEY = "aw_shared-operator-key-0123456789";

const engines = await probeEngines();
const CONTAINERS = (["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "shared workspaces"));

const start = (dataDir: string, containers = false) => startServer({ dataDir, apiKeys: [KEY], env: containers ? {} : LOCAL_ONLY });

async function agentType(op: ClientSet, id: string, provider: string): Promise<void> {
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: ["read", "write", "list"] } } });
}

/** A live session of `type` with its workspace, and its own clients. */
async function session(s: TestServer, type: string, workspaceId = "") {
  const op = s.clients.grpc;
  const res = await op.workspaces.startSession({ agentType: type, workspaceId });
  const ready = await watchUntilReady(op, res.session!.id);
  return { id: res.session!.id, session: ready.session, agent: clientsWithToken(s.url, res.sessionToken) };
}

async function exists(op: ClientSet, workspaceId: string): Promise<boolean> {
  try {
    await op.workspaces.getWorkspace({ id: workspaceId });
    return true;
  } catch (err) {
    if (errorDetail(ConnectError.from(err))?.reason === ErrorReason.WORKSPACE_NOT_FOUND) return false;
    throw err;
  }
}

async function tempDir(t: { teardown(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-shared-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

for (const provider of ["local", "memory", ...CONTAINERS]) {
  test(`${provider}: a joined session shares the files but keeps its own token, audit trail and digests; the last end deletes the workspace`, async (t) => {
    const s = await start(await tempDir(t), provider === "docker" || provider === "gvisor");
    try {
      const op = s.clients.grpc;
      const type = `shared-${provider}`;
      await agentType(op, type, provider);
      const a = await session(s, type);
      const workspaceId = a.session.workspaceId;
      const b = await session(s, type, workspaceId);
      t.is(b.session.status, SessionStatus.ACTIVE);
      t.is(b.session.workspaceId, workspaceId);
      t.true(b.session.joinedWorkspace);
      t.false(a.session.joinedWorkspace);
      t.deepEqual((await op.workspaces.getWorkspace({ id: workspaceId })).workspace?.sessionIds, [a.id, b.id]);

      // One filesystem: what one writes the other reads.
      await b.agent.tools.writeFile({ path: "from-b.txt", content: "b was here\n" });
      t.is((await a.agent.tools.readFile({ path: "from-b.txt" })).content, "1: b was here");

      // Tokens stay apart: each reaches its own session only.
      await expectError(t, a.agent.workspaces.getSession({ id: b.id }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
      t.is((await b.agent.workspaces.getSession({})).session?.id, b.id);
      // Audit trails stay apart: b's token sees b's call only, recorded under b's session.
      const bEvents = (await b.agent.audit.listAuditEvents({})).events;
      t.true(bEvents.length > 0);
      t.true(bEvents.every((e) => e.sessionId === b.id));
      t.true(bEvents.some((e) => e.tool === "write"));
      const aEvents = (await a.agent.audit.listAuditEvents({})).events;
      t.true(aEvents.every((e) => e.sessionId === a.id));
      t.false(aEvents.some((e) => e.tool === "write"));
      // Digests stay apart.
      await a.agent.workspaces.setWorkspaceDigest({ digest: { summary: "a's view" } });
      t.is((await b.agent.workspaces.getWorkspaceDigest({})).source, DigestSource.PLACEHOLDER);

      // Reference counted: the first end leaves the workspace to the other session.
      await op.workspaces.endSession({ id: a.id });
      t.true(await exists(op, workspaceId));
      t.deepEqual((await op.workspaces.getWorkspace({ id: workspaceId })).workspace?.sessionIds, [b.id]);
      t.is((await b.agent.tools.readFile({ path: "from-b.txt" })).content, "1: b was here");
      await expectError(t, a.agent.tools.readFile({ path: "from-b.txt" }), Code.Unauthenticated, ErrorReason.UNAUTHENTICATED);
      // The last end deletes it.
      await op.workspaces.endSession({ id: b.id });
      t.false(await exists(op, workspaceId));
    } finally {
      await s.close();
    }
  });
}

test("local: a restart keeps the count: the workspace outlives the first end after it and goes with the last", async (t) => {
  const dataDir = await tempDir(t);
  let s = await start(dataDir);
  const op = () => s.clients.grpc;
  try {
    await agentType(op(), "restarted", "local");
    const a = await session(s, "restarted");
    const workspaceId = a.session.workspaceId;
    const b = await session(s, "restarted", workspaceId);
    const c = await session(s, "restarted", workspaceId);
    await op().workspaces.endSession({ id: a.id });
    await s.close();
    s = await start(dataDir);
    await s.app.sessions.recovered;
    t.true(await exists(op(), workspaceId));
    t.deepEqual((await op().workspaces.getWorkspace({ id: workspaceId })).workspace?.sessionIds, [b.id, c.id]);
    await op().workspaces.endSession({ id: b.id });
    t.true(await exists(op(), workspaceId));
    await op().workspaces.endSession({ id: c.id });
    t.false(await exists(op(), workspaceId));
  } finally {
    await s.close();
  }
});

test("joins that cannot be are refused: unknown, unshared and other agent types' workspaces, a task or mounts of its own, a workspace whose sessions ended", async (t) => {
  const s = await start(await tempDir(t));
  try {
    const op = s.clients.grpc;
    await agentType(op, "owner", "memory");
    await agentType(op, "stranger", "memory");
    const a = await session(s, "owner");
    const workspaceId = a.session.workspaceId;
    await expectError(t, op.workspaces.startSession({ agentType: "owner", workspaceId: "ws-0000000000000000" }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
    const standalone = (await op.workspaces.createWorkspace({ provider: "memory" })).workspace!.id;
    await expectError(t, op.workspaces.startSession({ agentType: "owner", workspaceId: standalone }), Code.FailedPrecondition, ErrorReason.WORKSPACE_NOT_SHAREABLE);
    const other = await expectError(t, op.workspaces.startSession({ agentType: "stranger", workspaceId }), Code.FailedPrecondition, ErrorReason.WORKSPACE_NOT_SHAREABLE);
    t.regex(other.error.message, /made for agent type 'owner'/);
    await expectError(t, op.workspaces.startSession({ agentType: "owner", workspaceId, task: { branch: "main" } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    await expectError(t, op.workspaces.startSession({ agentType: "owner", workspaceId, mounts: [{ hostPath: "/tmp" }] }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    // Nothing of the refusals joined it.
    t.deepEqual((await op.workspaces.getWorkspace({ id: workspaceId })).workspace?.sessionIds, [a.id]);
    await op.workspaces.endSession({ id: a.id });
    await expectError(t, op.workspaces.startSession({ agentType: "owner", workspaceId }), Code.NotFound, ErrorReason.WORKSPACE_NOT_FOUND);
  } finally {
    await s.close();
  }
});

test("a join racing the last session's end either keeps the workspace for the joined session or is refused: never a session without its workspace", async (t) => {
  const s = await start(await tempDir(t));
  try {
    const op = s.clients.grpc;
    await agentType(op, "racer", "local");
    let joined = 0;
    let refused = 0;
    for (let i = 0; i < 12; i++) {
      const a = await session(s, "racer");
      const workspaceId = a.session.workspaceId;
      // The end and the join leave in the same turn, in either order.
      const end = () => op.workspaces.endSession({ id: a.id });
      const join = () => op.workspaces.startSession({ agentType: "racer", workspaceId });
      const [, outcome] = await Promise.all(i % 2 === 0 ? [end(), join().catch((e: unknown) => e)] : [join().catch((e: unknown) => e), end()].reverse());
      if (outcome instanceof Error) {
        const reason = errorDetail(ConnectError.from(outcome))?.reason;
        t.true(reason === ErrorReason.WORKSPACE_NOT_SHAREABLE || reason === ErrorReason.WORKSPACE_NOT_FOUND, String(outcome));
        refused++;
        await sleep(50);
        t.false(await exists(op, workspaceId));
        continue;
      }
      joined++;
      const b = (outcome as { session?: { id: string } }).session!;
      t.true(await exists(op, workspaceId));
      t.deepEqual((await op.workspaces.getWorkspace({ id: workspaceId })).workspace?.sessionIds, [b.id]);
      await op.workspaces.endSession({ id: b.id });
      t.false(await exists(op, workspaceId));
    }
    t.log(`joined ${joined}, refused ${refused}`);
    t.is(joined + refused, 12);
  } finally {
    await s.close();
  }
});

test("a workspace that was shared never goes back to a warm pool: the next session cannot find what a joined one wrote", async (t) => {
  const s = await startServer({ dataDir: await tempDir(t), apiKeys: [KEY], env: { ...LOCAL_ONLY, AGENT_WORKSPACE_SESSION_TICK_MS: "50" } });
  try {
    const op = s.clients.grpc;
    // Making a pool workspace takes a few seconds (its setup command), so when the sessions below
    // end the pool is short of a ready workspace and would take theirs back.
    await op.config.createAgentType({ agentType: { id: "pooled", workspace: { enabled: true, provider: "local", tools: ["read", "write"], warmPoolSize: 1, setupCommands: ["sleep 3"] } } });
    // A session from the pool that never calls a tool itself (so on its own it would go back).
    const fromPool = async () =>
      eventually(async () => {
        const res = await op.workspaces.startSession({ agentType: "pooled" });
        if (res.session?.fromWarmPool) return { id: res.session.id, workspaceId: res.session.workspaceId, agent: clientsWithToken(s.url, res.sessionToken) };
        await op.workspaces.endSession({ id: res.session!.id });
        return undefined;
      }, 30_000, "a session from the warm pool");
    const a = await fromPool();
    const b = await session(s, "pooled", a.workspaceId);
    await b.agent.tools.writeFile({ path: "left-by-b.txt", content: "b's notes" });
    await op.workspaces.endSession({ id: b.id });
    await op.workspaces.endSession({ id: a.id });
    t.false(await exists(op, a.workspaceId), "the shared workspace was deleted, not pooled");
    const next = await fromPool();
    t.not(next.workspaceId, a.workspaceId);
    await expectError(t, next.agent.tools.readFile({ path: "left-by-b.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  } finally {
    await s.close();
  }
});
