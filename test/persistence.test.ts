/**
 * The embedded database, through real server processes: what a reply confirmed survives a
 * SIGKILL and is served after a restart; an old `workspaces.json` is imported once; a database
 * from a newer server is refused; the agent-types file is applied at start, idempotently, and a
 * bad one stops the start naming what is wrong.
 */
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import test from "ava";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { refusedStart, startServerProcess, waitDead } from "./helpers/process.ts";
import { clientsOf, kill9, killDuringUpdates } from "./helpers/store-crash.ts";

async function withDataDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-db-"));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("a server killed with SIGKILL between updates restarts with every agent type and workspace it confirmed", async (t) => {
  await withDataDir(async (dataDir) => {
    const first = await startServerProcess({ dataDir });
    const c = clientsOf(first.url);
    let workspaceId = "";
    let confirmed = 0;
    try {
      await c.config.createAgentType({ agentType: { id: "survivor", workspace: { enabled: true, tools: ["bash", "read"] } } });
      await c.config.createAgentType({ agentType: { id: "bystander" } });
      workspaceId = (await c.workspaces.createWorkspace({ agentType: "survivor" })).workspace?.id ?? "";
      await c.tools.bash({ workspaceId, command: "echo kept > note.txt" });
      // Updates one after another; the kill lands while one is in flight.
      confirmed = await killDuringUpdates(t, first, c.config, "survivor");
    } finally {
      c.close();
      if (first.child.exitCode === null) await kill9(first);
    }

    // The database file is intact after the kill.
    const db = new DatabaseSync(path.join(dataDir, "agent-workspace.db"));
    t.is((db.prepare("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check, "ok");
    db.close();

    const second = await startServerProcess({ dataDir });
    const c2 = clientsOf(second.url);
    try {
      const survivor = (await c2.config.getAgentType({ id: "survivor" })).agentType;
      const last = Number(/update (\d+)/.exec(survivor?.description ?? "")?.[1]);
      t.true(last >= confirmed, `confirmed update ${confirmed}, restarted with ${last}`);
      t.is(survivor?.revision, BigInt(last + 1), "the description and its revision were committed together");
      t.deepEqual(survivor?.workspace?.tools, ["bash", "read"]);
      t.deepEqual((await c2.config.listAgentTypes({})).agentTypes.map((a) => a.id), ["bystander", "survivor"]);
      const { workspaces } = await c2.workspaces.listWorkspaces({});
      t.deepEqual(workspaces.map((w) => [w.id, w.agentType]), [[workspaceId, "survivor"]]);
      t.is((await c2.tools.bash({ workspaceId, command: "cat note.txt" })).stdout, "kept\n");
      // The workspace still obeys its agent type after the restart.
      await t.throwsAsync(c2.tools.writeFile({ workspaceId, path: "x", content: "x" }), { message: /Tool 'write' is not enabled for this agent type/ });
    } finally {
      c2.close();
      await kill9(second);
    }
  });
});

test("an existing workspaces.json is imported once, then renamed, and its workspaces keep working", async (t) => {
  await withDataDir(async (dataDir) => {
    // Make a real workspace, then turn the data directory into what an older server left: the
    // records in workspaces.json, no database.
    const first = await startServerProcess({ dataDir });
    const c = clientsOf(first.url);
    const workspaceId = (await c.workspaces.createWorkspace({ labels: { team: "legacy" } })).workspace?.id ?? "";
    await c.tools.writeFile({ workspaceId, path: "old.txt", content: "from before\n" });
    c.close();
    process.kill(first.serverPid, "SIGTERM");
    await waitDead([first.serverPid], 15_000);
    const db = new DatabaseSync(path.join(dataDir, "agent-workspace.db"));
    const records = (db.prepare("SELECT record FROM workspaces").all() as Array<{ record: string }>).map((r) => JSON.parse(r.record) as Record<string, unknown>);
    db.close();
    for (const f of ["agent-workspace.db", "agent-workspace.db-wal", "agent-workspace.db-shm"]) await rm(path.join(dataDir, f), { force: true });
    await writeFile(path.join(dataDir, "workspaces.json"), JSON.stringify(records.map(({ agentType: _a, ...r }) => r), null, 2));

    for (const round of [1, 2]) {
      const server = await startServerProcess({ dataDir });
      const c2 = clientsOf(server.url);
      try {
        const { workspaces } = await c2.workspaces.listWorkspaces({});
        t.deepEqual(workspaces.map((w) => [w.id, w.labels.team]), [[workspaceId, "legacy"]], `round ${round}`);
        t.is((await c2.tools.bash({ workspaceId, command: "cat old.txt" })).stdout, "from before\n");
        if (round === 1) t.regex(server.stderr(), /imported workspaces.json into the database/);
        else t.notRegex(server.stderr(), /imported workspaces.json/);
      } finally {
        c2.close();
        await kill9(server);
      }
    }
    await t.throwsAsync(stat(path.join(dataDir, "workspaces.json")));
    t.truthy(await stat(path.join(dataDir, "workspaces.json.imported")));
  });
});

test("a database from a newer server is refused at start, and left untouched", async (t) => {
  await withDataDir(async (dataDir) => {
    const db = new DatabaseSync(path.join(dataDir, "agent-workspace.db"));
    db.exec("PRAGMA user_version = 999");
    db.close();
    const before = await readFile(path.join(dataDir, "agent-workspace.db"));
    const { code, stderr } = await refusedStart(["--port", "0"], { AGENT_WORKSPACE_DATA_DIR: dataDir });
    t.is(code, 2, stderr);
    t.regex(stderr, /schema version 999, newer than this server knows/);
    t.deepEqual(await readFile(path.join(dataDir, "agent-workspace.db")), before);
  });
});

test("agent types declared in a file are applied at start, idempotently; a bad file stops the start naming the entry", async (t) => {
  await withDataDir(async (dataDir) => {
    const file = path.join(dataDir, "agent-types.yaml");
    const yaml = (tools: string) => `# kept in version control
agent_types:
  - id: code-reviewer
    display_name: Code reviewer
    workspace:
      enabled: true
      repo_source: { type: task_context, branch: main }
      tools: [${tools}]
      resource_limits: { cpu: "2", memory: 4G }
      setup_commands: ["npm install --frozen-lockfile"]
  - id: planner
`;
    await writeFile(file, yaml("read, grep"));
    const revisions: bigint[] = [];
    for (const [round, tools] of [[1, "read, grep"], [2, "read, grep"], [3, "read, grep, bash"]] as const) {
      await writeFile(file, yaml(tools));
      const server = await startServerProcess({ dataDir, args: ["--liftoff-only", "bin/agent-workspace.js", "serve", "--agent-types", file] });
      const c = clientsOf(server.url);
      try {
        const reviewer = (await c.config.getAgentType({ id: "code-reviewer" })).agentType;
        t.is(reviewer?.displayName, "Code reviewer");
        t.is(reviewer?.workspace?.resourceLimits?.memory, "4G");
        t.is(reviewer?.workspace?.repoSource?.branch, "main");
        t.deepEqual(reviewer?.workspace?.tools, tools.split(", "), `round ${round}`);
        t.false((await c.config.getAgentType({ id: "planner" })).agentType?.workspace?.enabled);
        revisions.push(reviewer?.revision ?? 0n);
      } finally {
        c.close();
        await kill9(server);
      }
    }
    t.deepEqual(revisions, [1n, 1n, 2n], "the same file twice changes nothing; a changed one makes one new revision");

    const cases: Array<[string, RegExp]> = [
      ["agent_types:\n  - id: bad\n    workspace: { tools: [bash, ssh] }\n", /--agent-types .*Invalid tool names: 'ssh'.*\(field agent_type\.workspace\.tools\)/],
      ["agent_types:\n  - id: x\n    workspace: { colour: blue }\n", /--agent-types .*entry 1 \('x'\).*colour/],
      ["agent_types: [ {id: a}, {id: a} ]\n", /entry 2 \('a'\): the id is declared twice/],
      ["just: text\n", /expected a list of agent types/],
      ["agent_types: [ {id: 'Bad Id'} ]\n", /Agent type id 'Bad Id' is not valid/],
    ];
    const bad = path.join(dataDir, "bad.yaml");
    for (const [content, message] of cases) {
      await writeFile(bad, content);
      const { code, stderr } = await refusedStart(["--port", "0", "--agent-types", bad], { AGENT_WORKSPACE_DATA_DIR: dataDir });
      t.is(code, 2, stderr);
      t.regex(stderr, message);
    }
    // A JSON file works the same.
    const json = path.join(dataDir, "agent-types.json");
    await writeFile(json, JSON.stringify([{ id: "from-json", workspace: { enabled: true, tools: ["read"] } }]));
    const server = await startServerProcess({ dataDir, env: { AGENT_WORKSPACE_AGENT_TYPES: json } });
    const c = clientsOf(server.url);
    try {
      t.deepEqual((await c.config.getWorkspaceConfig({ agentTypeId: "from-json" })).workspaceConfig?.tools, ["read"]);
    } finally {
      c.close();
      await kill9(server);
    }
  });
});
