/**
 * checkout_on_start follows the repository source when it is not set: seed 003's "Agent type with
 * fixed repository" and "PR-based task context" configure only `repo_source`, and their
 * workspaces must hold the repository. An explicit false still leaves /workspace empty. Every way
 * in agrees (ConfigService, the REST paths, the agent-types file), and agent types stored before
 * the field had presence keep the false they were stored with.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WorkspaceConfigSchema } from "../gen/agentworkspace/v1/config_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { createLogger } from "../server/logger.ts";
import { MIGRATIONS } from "../server/store/migrations.ts";
import { openSqliteStore } from "../server/store/sqlite-store.ts";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { type ClientSet, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { bashOk, clientsWithToken, credentialsFile, outline, watchUntilReady } from "./helpers/sessions.ts";

type Config = MessageInitShape<typeof WorkspaceConfigSchema>;
interface Ctx {
  server: TestServer;
  git: GitServer;
  dir: string;
  credentials: string;
}
const test = anyTest as TestFn<Ctx>;
const TOKEN = "checkout-token-0123456789abcdef";
const TOOLS = ["bash", "read", "list"];

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-checkout-"));
  const git = await startGitServer({ token: TOKEN });
  await git.createRepo("infra-repo", { branches: { main: { "infra.txt": "infra\n" } } });
  await git.createRepo("repo", { branches: { main: { "README.md": "main\n" }, "feature/auth": { "README.md": "feature auth\n" } } });
  const credentials = await credentialsFile(dir, { [new URL(git.url).host]: TOKEN });
  const server = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: credentials } });
  t.context = { server, git, dir, credentials };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/** A REST call with a JSON body (or none) and its JSON answer. */
async function rest(base: string, method: "GET" | "PUT", route: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${route}`, { method, ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

let serial = 0;
const newId = (hint: string) => `${hint}-${process.pid}-${++serial}`;

/** A session of `type` for `task`, once provisioned: its outline, and what `ls -A` shows in /workspace. */
async function provisioned(server: TestServer, op: ClientSet, type: string, task: { repositoryUrl?: string; branch?: string } = {}) {
  const started = await op.workspaces.startSession({ agentType: type, task });
  const { events, session } = await watchUntilReady(op, started.session?.id ?? "");
  const agent = clientsWithToken(server.url, started.sessionToken);
  return { session, stages: outline(events), files: session.status === SessionStatus.ACTIVE ? await bashOk(agent, "ls -A") : "", agent };
}

test("Agent type with fixed repository: repo_source alone clones the repository, and the stored configuration says so", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const id = newId("fixed");
  const created = await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: TOOLS, repoSource: { type: "fixed", url: git.repoUrl("infra-repo") } } } });
  t.is(created.agentType?.workspace?.checkoutOnStart, true, "unset resolves to true for a fixed source");
  t.is((await op.config.getWorkspaceConfig({ agentTypeId: id })).workspaceConfig?.checkoutOnStart, true);
  const { session, stages, files } = await provisioned(server, op, id);
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  t.true(stages.includes("ended CLONE ok"), stages.join(", "));
  t.is(files, ".git\ninfra.txt\n");
});

test("PR-based task context through the REST paths: repo_source alone clones the task's branch; an explicit false does not", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.connect;
  const id = newId("pr");
  await op.config.createAgentType({ agentType: { id } });
  const route = `/api/v1/agent-types/${id}/workspace-config`;
  const stored = await rest(server.url, "PUT", route, { enabled: true, repo_source: { type: "task_context" }, tools: TOOLS });
  t.is(stored.status, 200, JSON.stringify(stored.json));
  t.is(stored.json.checkout_on_start, true);
  t.is((await rest(server.url, "GET", route)).json.checkout_on_start, true, "GET shows what the unset field resolved to");
  const pr = await provisioned(server, op, id, { repositoryUrl: git.repoUrl("repo"), branch: "feature/auth" });
  t.is(pr.session.checkout?.branch, "feature/auth");
  t.is(await bashOk(pr.agent, "cat README.md"), "feature auth\n");

  const off = await rest(server.url, "PUT", route, { enabled: true, repo_source: { type: "task_context" }, tools: TOOLS, checkout_on_start: false });
  t.is(off.json.checkout_on_start, false);
  t.is((await rest(server.url, "GET", route)).json.checkout_on_start, false);
  const empty = await provisioned(server, op, id, { repositoryUrl: git.repoUrl("repo"), branch: "feature/auth" });
  t.is(empty.session.status, SessionStatus.ACTIVE);
  t.false(empty.stages.some((s) => s.includes("CLONE")), empty.stages.join(", "));
  t.is(empty.files, "", "an explicit false leaves /workspace empty");
});

test("checkout_on_start over RPC: an explicit false is kept, and a source of type none resolves to false", async (t) => {
  const { server, git } = t.context;
  const op = server.clients.grpc;
  const cases: Array<[string, Config, boolean]> = [
    ["explicit false", { repoSource: { type: "fixed", url: git.repoUrl("infra-repo") }, checkoutOnStart: false }, false],
    ["explicit true", { repoSource: { type: "fixed", url: git.repoUrl("infra-repo") }, checkoutOnStart: true }, true],
    ["type none, unset", { repoSource: { type: "none" } }, false],
    ["no repo_source, unset", {}, false],
  ];
  for (const [name, workspace, expected] of cases) {
    const id = newId("rpc");
    const { agentType } = await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: TOOLS, ...workspace } } });
    t.is(agentType?.workspace?.checkoutOnStart, expected, name);
    const { files } = await provisioned(server, op, id);
    t.is(files, expected ? ".git\ninfra.txt\n" : "", name);
  }
  // UpdateAgentType without a workspace keeps the resolved value; a new configuration resolves again.
  const id = newId("update");
  await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, tools: TOOLS, repoSource: { type: "none" } } } });
  const updated = await op.config.updateWorkspaceConfig({ agentTypeId: id, workspaceConfig: { enabled: true, tools: TOOLS, repoSource: { type: "fixed", url: git.repoUrl("infra-repo") } } });
  t.is(updated.workspaceConfig?.checkoutOnStart, true);
  const kept = await op.config.updateAgentType({ agentType: { id, description: "renamed" } });
  t.is(kept.agentType?.workspace?.checkoutOnStart, true);
});

test("the agent-types file: a repo_source without checkout_on_start clones, one with false does not", async (t) => {
  const { git, dir, credentials } = t.context;
  const file = path.join(dir, `agent-types-${++serial}.yaml`);
  await writeFile(
    file,
    `agent_types:
  - id: from-file-clones
    workspace:
      enabled: true
      repo_source: { type: fixed, url: "${git.repoUrl("infra-repo")}" }
      tools: [bash, read, list]
  - id: from-file-empty
    workspace:
      enabled: true
      repo_source: { type: fixed, url: "${git.repoUrl("infra-repo")}" }
      checkout_on_start: false
      tools: [bash, read, list]
`,
  );
  const server = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: credentials, AGENT_WORKSPACE_AGENT_TYPES: file } });
  try {
    const op = server.clients.connect;
    t.is((await op.config.getWorkspaceConfig({ agentTypeId: "from-file-clones" })).workspaceConfig?.checkoutOnStart, true);
    t.is((await op.config.getWorkspaceConfig({ agentTypeId: "from-file-empty" })).workspaceConfig?.checkoutOnStart, false);
    t.is((await provisioned(server, op, "from-file-clones")).files, ".git\ninfra.txt\n");
    t.is((await provisioned(server, op, "from-file-empty")).files, "");
  } finally {
    await server.close();
  }
});

test("agent types stored before checkout_on_start had presence keep the false they were stored with", async (t) => {
  const { git, credentials } = t.context;
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-checkout-old-"));
  try {
    // The database as the previous server left it (schema version 2): false was stored by leaving the field out.
    const old = openSqliteStore(dataDir, createLogger({ level: "error" }), MIGRATIONS.filter((m) => m.version <= 2));
    const now = new Date();
    const body = (id: string, checkout: boolean) =>
      JSON.stringify({ id, workspace: { enabled: true, repoSource: { type: "fixed", url: git.repoUrl("infra-repo") }, tools: TOOLS, ...(checkout ? { checkoutOnStart: true } : {}) } });
    t.true(await old.agentTypes.insert({ id: "stored-false", revision: 3, createdAt: now, updatedAt: now, body: body("stored-false", false) }));
    t.true(await old.agentTypes.insert({ id: "stored-true", revision: 1, createdAt: now, updatedAt: now, body: body("stored-true", true) }));
    await old.close();

    const server = await startServer({ dataDir, env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: credentials } });
    try {
      const op = server.clients.connect;
      const kept = (await op.config.getAgentType({ id: "stored-false" })).agentType;
      t.is(kept?.workspace?.checkoutOnStart, false);
      t.is(kept?.revision, 3n, "the migration is no change of the agent type");
      t.is((await op.config.getWorkspaceConfig({ agentTypeId: "stored-true" })).workspaceConfig?.checkoutOnStart, true);
      t.is((await provisioned(server, op, "stored-false")).files, "");
      t.is((await provisioned(server, op, "stored-true")).files, ".git\ninfra.txt\n");
      // Saving the configuration again without the field applies the new default.
      const { workspaceConfig } = await op.config.updateWorkspaceConfig({ agentTypeId: "stored-false", workspaceConfig: { enabled: true, tools: TOOLS, repoSource: { type: "fixed", url: git.repoUrl("infra-repo") } } });
      t.is(workspaceConfig?.checkoutOnStart, true);
    } finally {
      await server.close();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});
