/**
 * Workspace digests (seed 001) through the real server: set and read by section key, the
 * resolution order (the session's latest → the agent type's override → a placeholder with a
 * warning logged), each session's own, a session token only its own session's, kept across a
 * restart, refused when malformed.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import test from "ava";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { DigestSource } from "../gen/agentworkspace/v1/workspace_pb.js";
import { createMemoryProvider } from "../providers/memory.ts";
import { type ClientSet, expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken } from "./helpers/sessions.ts";

const KEY = "aw_digest-operator-key-0123456789";

async function server(dataDir: string, logs: string[] = []): Promise<TestServer> {
  // Memory workspaces: digests need sessions, not processes, and these start at once.
  return startServer({ dataDir, apiKeys: [KEY], providers: [createMemoryProvider()], env: { ...LOCAL_ONLY, AGENT_WORKSPACE_DEFAULT_PROVIDER: "memory" }, onLog: (l) => logs.push(l) });
}

async function agentType(op: ClientSet, id: string, overrides: Array<{ sectionKey: string; summary: string; body: string }> = []): Promise<void> {
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, provider: "memory", tools: ["read"], digestOverrides: overrides } } });
}

test("the session's latest digest wins, then the agent type's override, then a placeholder with a warning logged; each session has its own", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-digests-"));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const logs: string[] = [];
  const s = await server(dataDir, logs);
  try {
    const op = s.clients.grpc;
    await agentType(op, "explorer", [{ sectionKey: "workspace-digest", summary: "from the agent type", body: "override body" }]);
    const a = await op.workspaces.startSession({ agentType: "explorer" });
    const b = await op.workspaces.startSession({ agentType: "explorer" });
    const agentA = clientsWithToken(s.url, a.sessionToken);

    // Nothing set: the override (the default key is "workspace-digest").
    const first = await agentA.workspaces.getWorkspaceDigest({});
    t.is(first.source, DigestSource.AGENT_TYPE);
    t.is(first.digest?.sectionKey, "workspace-digest");
    t.is(first.digest?.summary, "from the agent type");
    t.is(first.digest?.updatedAt, undefined);

    // Set twice: the latest is kept, for this session only.
    await agentA.workspaces.setWorkspaceDigest({ digest: { summary: "v1", body: "first" } });
    const kept = await agentA.workspaces.setWorkspaceDigest({ digest: { sectionKey: "workspace-digest", summary: "Python web app with FastAPI backend.", body: "Full project analysis…" } });
    t.truthy(kept.digest?.updatedAt);
    const mine = await agentA.workspaces.getWorkspaceDigest({ sectionKey: "workspace-digest" });
    t.is(mine.source, DigestSource.SESSION);
    t.is(mine.digest?.summary, "Python web app with FastAPI backend.");
    t.is(mine.digest?.body, "Full project analysis…");
    const theirs = await op.workspaces.getWorkspaceDigest({ sessionId: b.session!.id });
    t.is(theirs.source, DigestSource.AGENT_TYPE);

    // A key nobody set and no override: the placeholder, and one warning naming session and key.
    const none = await op.workspaces.getWorkspaceDigest({ sessionId: a.session!.id, sectionKey: "test-commands" });
    t.is(none.source, DigestSource.PLACEHOLDER);
    t.regex(none.digest?.body ?? "", /No workspace digest has been recorded for 'test-commands'/);
    const warning = logs.find((l) => l.includes("placeholder") && l.includes("test-commands"));
    t.truthy(warning);
    t.true(warning!.includes(a.session!.id));

    // A session token reaches only its own session's digests.
    await expectError(t, agentA.workspaces.getWorkspaceDigest({ sessionId: b.session!.id }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
    await expectError(t, agentA.workspaces.setWorkspaceDigest({ sessionId: b.session!.id, digest: { summary: "x" } }), Code.PermissionDenied, ErrorReason.OUTSIDE_SESSION);
  } finally {
    await s.close();
  }

  // After a restart the session's digest is still there.
  const again = await server(dataDir);
  try {
    const ids = (await again.clients.grpc.workspaces.listSessions({ agentType: "explorer" })).sessions.map((x) => x.id);
    t.is(ids.length, 2);
    const found = await Promise.all(ids.map((id) => again.clients.grpc.workspaces.getWorkspaceDigest({ sessionId: id })));
    t.deepEqual(found.map((f) => `${DigestSource[f.source]}:${f.digest?.summary}`).sort(), ["AGENT_TYPE:from the agent type", "SESSION:Python web app with FastAPI backend."]);
  } finally {
    await again.close();
  }
});

test("malformed keys and oversized digests are INVALID_ARGUMENT; an ended session's digests are read-only; agent types check their overrides", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-digests-"));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const s = await server(dataDir);
  try {
    const op = s.clients.grpc;
    await agentType(op, "plain");
    const { session } = await op.workspaces.startSession({ agentType: "plain" });
    const id = session!.id;
    for (const sectionKey of ["Upper", "-dash", "a b", "x".repeat(65), "../up"]) {
      await expectError(t, op.workspaces.setWorkspaceDigest({ sessionId: id, digest: { sectionKey, summary: "s" } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    }
    await expectError(t, op.workspaces.getWorkspaceDigest({ sessionId: id, sectionKey: "Bad Key" }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    const long = await expectError(t, op.workspaces.setWorkspaceDigest({ sessionId: id, digest: { body: "b".repeat(64_001) } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.is(long.detail.metadata.field, "digest.body");
    await op.workspaces.setWorkspaceDigest({ sessionId: id, digest: { body: "b".repeat(64_000) } });
    for (let i = 1; i < 32; i++) await op.workspaces.setWorkspaceDigest({ sessionId: id, digest: { sectionKey: `k${i}`, summary: "s" } });
    await expectError(t, op.workspaces.setWorkspaceDigest({ sessionId: id, digest: { sectionKey: "one-too-many", summary: "s" } }), Code.ResourceExhausted, ErrorReason.RESOURCE_EXHAUSTED);
    await expectError(t, op.workspaces.getWorkspaceDigest({ sessionId: "sess-0000000000000000" }), Code.NotFound, ErrorReason.SESSION_NOT_FOUND);

    await op.workspaces.endSession({ id });
    t.is((await op.workspaces.getWorkspaceDigest({ sessionId: id, sectionKey: "k1" })).digest?.summary, "s");
    await expectError(t, op.workspaces.setWorkspaceDigest({ sessionId: id, digest: { sectionKey: "k1", summary: "late" } }), Code.FailedPrecondition, ErrorReason.SESSION_NOT_READY);

    const dup = await expectError(
      t,
      op.config.createAgentType({ agentType: { id: "dup", workspace: { enabled: true, tools: ["read"], digestOverrides: [{ sectionKey: "a", body: "1" }, { sectionKey: "a", body: "2" }] } } }),
      Code.InvalidArgument,
      ErrorReason.INVALID_ARGUMENT,
    );
    t.regex(dup.detail.metadata.field ?? "", /digest_overrides\[1\]\.section_key/);
  } finally {
    await s.close();
  }
});
