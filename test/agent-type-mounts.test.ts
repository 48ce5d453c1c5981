/**
 * An agent type's host mounts are checked against the server's allowed roots when the agent type
 * is saved (ConfigService Create/Update/UpdateWorkspaceConfig, the REST path, the agent-types file
 * at start), not first when a session provisions: a mount that could never be copied is
 * INVALID_ARGUMENT naming the field, and nothing is stored.
 */
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { SettingsError } from "../server/settings.ts";
import { expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  dir: string;
  allowed: string;
  sibling: string;
  outside: string;
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-type-mounts-"));
  const allowed = path.join(dir, "allowed");
  const sibling = path.join(dir, "allowed-secrets");
  const outside = path.join(dir, "outside");
  for (const d of [path.join(allowed, "fixtures"), sibling, outside]) await mkdir(d, { recursive: true });
  await writeFile(path.join(allowed, "fixtures/data.txt"), "fixture\n");
  await writeFile(path.join(outside, "passwd"), "outside secret\n");
  await symlink(outside, path.join(allowed, "escape"));
  await symlink(path.join(allowed, "fixtures"), path.join(allowed, "link-in"));
  const server = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: allowed } });
  t.context = { server, dir, allowed, sibling, outside };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

const mount = (hostPath: string, followSymlinks = false) => ({ hostPath, mountPath: "", includeGlob: [], excludeGlob: [], maxBytes: 0n, followSymlinks });
let serial = 0;
const newId = () => `mounting-${process.pid}-${++serial}`;

test("a mount outside the allowed roots is refused when the agent type is saved, naming the field, on every way in", async (t) => {
  const { server, allowed, sibling, outside } = t.context;
  const op = server.clients.grpc;
  const refused: Array<[string, ReturnType<typeof mount>, RegExp]> = [
    ["a sibling sharing the root's prefix", mount(sibling), /not inside an allowed root/],
    ["an absolute path elsewhere", mount(path.join(outside, "passwd")), /not inside an allowed root/],
    ["a link inside the root that leaves it, followed", mount(path.join(allowed, "escape"), true), /not inside an allowed root/],
    ["a path not made yet, below a link that leaves", mount("escape/later", true), /not inside an allowed root/],
    ["a link that stays inside, not followed", mount("link-in"), /goes through a symbolic link/],
  ];
  for (const [name, m, message] of refused) {
    const id = newId();
    const workspace = { enabled: true, tools: ["read"], mounts: [mount(path.join(allowed, "fixtures")), m] };
    const { detail } = await expectError(t, op.config.createAgentType({ agentType: { id, workspace } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.is(detail.metadata.field, "agent_type.workspace.mounts[1].host_path", name);
    t.regex(detail.message, message, name);
    await expectError(t, op.config.getAgentType({ id }), Code.NotFound, ErrorReason.AGENT_TYPE_NOT_FOUND);

    await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: ["read"] } } });
    const update = await expectError(t, op.config.updateAgentType({ agentType: { id, workspace } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.is(update.detail.metadata.field, "agent_type.workspace.mounts[1].host_path", name);
    const config = await expectError(t, op.config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: workspace }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.is(config.detail.metadata.field, "mounts[1].host_path", name);
    const rest = await fetch(`${server.url}/api/v1/agent-types/${id}/workspace-config`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ enabled: true, tools: ["read"], mounts: [{ host_path: m.hostPath, follow_symlinks: m.followSymlinks }] }),
    });
    t.is(rest.status, 400, name);
    t.like(await rest.json(), { reason: "ERROR_REASON_INVALID_ARGUMENT", metadata: { field: "mounts[0].host_path" } });
    const { agentType } = await op.config.getAgentType({ id });
    t.is(agentType?.revision, 1n, `${name}: nothing was stored`);
    t.deepEqual(agentType?.workspace?.mounts, []);
  }
});

test("mounts inside the roots are accepted at save (one not made yet too) and copied when a session provisions", async (t) => {
  const { server, allowed } = t.context;
  const op = server.clients.connect;
  const id = newId();
  await op.config.createAgentType({
    agentType: { id, workspace: { enabled: true, tools: ["bash", "read"], mounts: [mount("fixtures"), mount(path.join(allowed, "link-in"), true), mount("made-later")] } },
  });
  await mkdir(path.join(allowed, "made-later"));
  await writeFile(path.join(allowed, "made-later/late.txt"), "late\n");
  const started = await op.workspaces.startSession({ agentType: id, task: {} });
  const { session } = await watchUntilReady(op, started.session?.id ?? "");
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  const { workspace } = await op.workspaces.getWorkspace({ id: session.workspaceId });
  t.deepEqual(workspace?.mounts.map((m) => [m.mountPath, m.filesCopied]), [["fixtures", 1], ["link-in", 1], ["made-later", 1]]);
  await op.workspaces.endSession({ id: session.id });
});

test("a server without allowed roots refuses an agent type with any mount at save; the agent-types file stops the start naming the field", async (t) => {
  const { dir, allowed } = t.context;
  const closed = await startServer({ env: LOCAL_ONLY });
  try {
    const { detail } = await expectError(
      t,
      closed.clients.grpc.config.createAgentType({ agentType: { id: newId(), workspace: { enabled: true, mounts: [mount(path.join(allowed, "fixtures"))] } } }),
      Code.InvalidArgument,
      ErrorReason.INVALID_ARGUMENT,
    );
    t.is(detail.metadata.field, "agent_type.workspace.mounts[0].host_path");
    t.regex(detail.message, /AGENT_WORKSPACE_ALLOWED_HOST_ROOTS is not set/);
  } finally {
    await closed.close();
  }
  const file = path.join(dir, "agent-types.yaml");
  await writeFile(file, `agent_types:\n  - id: from-file\n    workspace:\n      enabled: true\n      mounts: [{ host_path: "${t.context.sibling}" }]\n`);
  const dataDir = path.join(dir, "refused-start");
  const err = await t.throwsAsync(startServer({ dataDir, env: { ...LOCAL_ONLY, AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: allowed, AGENT_WORKSPACE_AGENT_TYPES: file } }), { instanceOf: SettingsError });
  t.regex(err?.message ?? "", /not inside an allowed root .*\(field agent_type\.workspace\.mounts\[0\]\.host_path\)$/);
});
