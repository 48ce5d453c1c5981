/**
 * The server on PostgreSQL (AGENT_WORKSPACE_DATABASE_URL), through real server processes and a
 * private cluster started by the test: agent types, workspaces, sessions and the audit trail live
 * in the database; what a reply confirmed survives a SIGKILL of the server and is served by the
 * next one (its session token too); the start log names the database without its password; a URL
 * that is not PostgreSQL's, and a database that cannot be reached, stop the start with a message
 * that shows no password.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import test from "ava";
import { AuditService } from "../gen/agentworkspace/v1/audit_pb.js";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { SessionStatus, WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type Postgres, postgresGate, startPostgres } from "./helpers/postgres.ts";
import { refusedStart, startServerProcess, type ServerProcess } from "./helpers/process.ts";
import { clientsOf, kill9, killDuringUpdates } from "./helpers/store-crash.ts";

/** Polls `read` every 50 ms for up to 5 s until `done` holds for its value (default: defined); returns the last value. */
async function eventually<T>(read: () => Promise<T>, done: (v: T) => boolean = (v) => v !== undefined && v !== false): Promise<T> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Two server processes on a new database `db` of the cluster, with their clients; removed again after `fn`. */
async function twoServers(db: string, fn: (pg: Postgres, servers: ServerProcess[], clients: Array<ReturnType<typeof clientsOf>>) => Promise<void>): Promise<void> {
  const pg = await cluster();
  const url = await pg.createDatabase(db);
  const dirs = [await mkdtemp(path.join(tmpdir(), "aw-pgsrv-")), await mkdtemp(path.join(tmpdir(), "aw-pgsrv-"))];
  const servers: ServerProcess[] = [];
  const clients: Array<ReturnType<typeof clientsOf>> = [];
  try {
    for (const dataDir of dirs) servers.push(await startServerProcess({ dataDir, env: { AGENT_WORKSPACE_DATABASE_URL: url } }));
    for (const s of servers) clients.push(clientsOf(s.url));
    await fn(pg, servers, clients);
  } finally {
    for (const c of clients) c.close();
    for (const s of servers) await kill9(s);
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  }
}

let started: Promise<Postgres> | undefined;
const cluster = () => (started ??= startPostgres());
test.after.always(async () => {
  await (await started)?.stop();
});

if (postgresGate(test, "the server on PostgreSQL")) {
  test("a server on PostgreSQL killed with SIGKILL restarts with every agent type, workspace, session and audit record it confirmed", async (t) => {
    const pg = await cluster();
    const url = await pg.createDatabase("server_crash");
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-pgsrv-"));
    const env = { AGENT_WORKSPACE_DATABASE_URL: url };
    try {
      const first = await startServerProcess({ dataDir, env });
      t.regex(first.stderr(), /"database":"postgresql:\/\/postgres@localhost\/server_crash \(socket [^)]+\)"/);
      const c = clientsOf(first.url);
      let confirmed = 0;
      let workspaceId = "";
      let token = "";
      let sessionId = "";
      try {
        await c.config.createAgentType({ agentType: { id: "survivor", workspace: { enabled: true, tools: ["bash", "read", "list"] } } });
        workspaceId = (await c.workspaces.createWorkspace({ agentType: "survivor" })).workspace?.id ?? "";
        await c.tools.bash({ workspaceId, command: "echo kept > note.txt" });
        // The database's URL is the server's, never a command's.
        t.notRegex((await c.tools.bash({ workspaceId, command: "env" })).stdout, /DATABASE_URL|postgres/i);
        const session = await c.workspaces.startSession({ agentType: "survivor" });
        token = session.sessionToken;
        sessionId = session.session?.id ?? "";
        const agent = clientsOf(first.url, token);
        for (let i = 0; i < 50 && (await agent.workspaces.getSession({})).session?.status !== SessionStatus.ACTIVE; i++) await new Promise((r) => setTimeout(r, 100));
        for (let i = 0; i < 20; i++) await agent.tools.listFiles({ path: "." });
        agent.close();
        // Every call above was answered more than a second before the kill: its record is committed.
        await new Promise((r) => setTimeout(r, 1200));
        confirmed = await killDuringUpdates(t, first, c.config, "survivor");
      } finally {
        c.close();
        if (first.child.exitCode === null) await kill9(first);
      }

      const second = await startServerProcess({ dataDir, env });
      const c2 = clientsOf(second.url);
      const agent2 = clientsOf(second.url, token);
      try {
        const survivor = (await c2.config.getAgentType({ id: "survivor" })).agentType;
        const last = Number(/update (\d+)/.exec(survivor?.description ?? "")?.[1]);
        t.true(last >= confirmed, `confirmed update ${confirmed}, restarted with ${last}`);
        t.is(survivor?.revision, BigInt(last + 1), "the description and its revision were committed together");
        t.true((await c2.workspaces.listWorkspaces({})).workspaces.some((w) => w.id === workspaceId && w.agentType === "survivor"));
        t.is((await c2.tools.bash({ workspaceId, command: "cat note.txt" })).stdout, "kept\n");
        // The session and its token came back from the database.
        t.is((await agent2.workspaces.getSession({})).session?.id, sessionId);
        await agent2.tools.listFiles({ path: "." });
        const { events } = await c2.audit.listAuditEvents({ sessionId, tool: "list", pageSize: 100 });
        t.true(events.length >= 20, `the session's list calls in the audit trail: ${events.length}`);
        t.true(events.every((e) => e.sessionId === sessionId && e.agentType === "survivor"));
        // Rows are in the database itself, not in a file in the data directory.
        const rows = await pg.query("server_crash", "SELECT count(*)::int AS n FROM audit_events WHERE session_id = $1", [sessionId]);
        t.true(rows.rows[0].n >= 21);
      } finally {
        c2.close();
        agent2.close();
        await kill9(second);
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  test("two servers on one database: an agent type created, changed and deleted on one is followed by the other, also after its change feed was cut", async (t) => {
    await twoServers("two_servers_follow", async (pg, servers, [a, b]) => {
      await a.config.createAgentType({ agentType: { id: "followed", description: "v1", workspace: { enabled: true, tools: ["bash", "read"] } } });
      t.is(await eventually(async () => (await b.config.getAgentType({ id: "followed" }).catch(() => undefined))?.agentType?.description), "v1");
      // A tool taken away on one server is refused by the other.
      await a.config.updateWorkspaceConfig({ agentTypeId: "followed", workspaceConfig: { enabled: true, tools: ["read"] } });
      t.deepEqual(await eventually(async () => (await b.config.getAgentType({ id: "followed" })).agentType?.workspace?.tools, (tools) => tools?.length === 1), ["read"]);
      const ws = (await b.workspaces.createWorkspace({ agentType: "followed" })).workspace?.id ?? "";
      await t.throwsAsync(b.tools.bash({ workspaceId: ws, command: "true" }), { message: /Tool 'bash' is not enabled for this agent type/ });
      await b.workspaces.deleteWorkspace({ id: ws });
      // Every change feed is cut; a change made before they are back is still followed (a resync).
      const cut = await pg.query("two_servers_follow", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'agent-workspace changes' AND datname = current_database()");
      t.is(cut.rowCount, 2);
      await a.config.updateAgentType({ agentType: { id: "followed", description: "changed while cut" } });
      t.is(await eventually(async () => (await b.config.getAgentType({ id: "followed" })).agentType?.description, (d) => d === "changed while cut"), "changed while cut");
      t.true(await eventually(async () => /database change feed back/.test(servers[1].stderr())));
      t.regex(servers[1].stderr(), /database change feed lost; reconnecting/);
      await a.config.deleteAgentType({ id: "followed" });
      t.is(await eventually(async () => (await b.config.getAgentType({ id: "followed" }).catch((e: Error) => e.message)) as unknown as string, (m) => typeof m === "string"), "[not_found] Agent type 'followed' not found");
    });
  });

  test("an operator's SQL change is followed too; a reload that fails (the table gone a moment) is retried until it succeeds", async (t) => {
    await twoServers("two_servers_retry", async (pg, servers, [a, b]) => {
      await a.config.createAgentType({ agentType: { id: "edited", description: "v1" } });
      await eventually(async () => (await b.config.getAgentType({ id: "edited" }).catch(() => undefined))?.agentType?.revision);
      // One transaction: the change (announced on commit) and the table renamed, so the reload it causes fails.
      await pg.query(
        "two_servers_retry",
        `BEGIN; UPDATE agent_types SET body = jsonb_set(body::jsonb, '{description}', '"by SQL"')::text, revision = revision + 1 WHERE id = 'edited'; ALTER TABLE agent_types RENAME TO agent_types_away; COMMIT;`,
      );
      t.true(await eventually(async () => /agent types could not be reloaded after another server changed them; retrying/.test(servers[1].stderr())));
      t.is((await b.config.getAgentType({ id: "edited" })).agentType?.description, "v1", "the copy is kept while the reload fails");
      await pg.query("two_servers_retry", "ALTER TABLE agent_types_away RENAME TO agent_types");
      t.is(await eventually(async () => (await b.config.getAgentType({ id: "edited" })).agentType?.description, (d) => d === "by SQL"), "by SQL");
      t.is((await a.config.getAgentType({ id: "edited" })).agentType?.revision, 2n);
    });
  });

  test("two servers writing one agent type at once: each loser is ABORTED / CONCURRENT_MODIFICATION, nothing is overwritten unseen, and a retry applies", async (t) => {
    await twoServers("two_servers_race", async (pg, _servers, [a, b]) => {
      await a.config.createAgentType({ agentType: { id: "raced", description: "v0" } });
      await eventually(async () => (await b.config.getAgentType({ id: "raced" }).catch(() => undefined))?.agentType?.revision);
      let applied = 0;
      let conflicts = 0;
      for (let round = 0; round < 30 && conflicts < 3; round++) {
        const outcomes = await Promise.allSettled([a, b].map((c, i) => c.config.updateAgentType({ agentType: { id: "raced", description: `round ${round} by ${"ab"[i]}` } })));
        for (const o of outcomes) {
          if (o.status === "fulfilled") {
            applied++;
            continue;
          }
          conflicts++;
          t.regex(String(o.reason), /\[aborted\] Agent type 'raced' was changed by another server since revision \d+; read it again and retry/);
          const detail = (o.reason as { findDetails: (s: unknown) => Array<{ reason: number; metadata: Record<string, string> }> }).findDetails(ErrorDetailSchema)[0];
          t.is(detail.reason, ErrorReason.CONCURRENT_MODIFICATION);
          t.is(detail.metadata.agent_type, "raced");
        }
      }
      t.true(conflicts > 0, "two writers at once met at least once in 30 rounds");
      // Every applied update is a revision; none was lost or applied twice.
      const stored = (await pg.query("two_servers_race", "SELECT revision::int AS r FROM agent_types WHERE id = 'raced'")).rows[0].r as number;
      t.is(stored, 1 + applied);
      // The loser's copy was refreshed: its retry applies on the current revision.
      t.is((await b.config.updateAgentType({ agentType: { id: "raced", description: "retried" } })).agentType?.revision, BigInt(stored + 1));
    });
  });

  test("a URL that is not PostgreSQL's, and a database that cannot be reached, stop the start without showing a password", async (t) => {
    const bad = await refusedStart([], { AGENT_WORKSPACE_DATABASE_URL: "mysql://root:hunter2-secret@db/x" });
    t.is(bad.code, 2, bad.stderr);
    t.regex(bad.stderr, /AGENT_WORKSPACE_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL/);
    t.notRegex(bad.stderr, /hunter2-secret/);
    const pg = await cluster();
    const gone = await refusedStart([], { AGENT_WORKSPACE_DATABASE_URL: `postgresql://postgres:hunter2-secret@localhost/no_such_db?host=${encodeURIComponent(pg.dir)}` });
    t.is(gone.code, 2, gone.stderr);
    t.regex(gone.stderr, /cannot open the database postgresql:\/\/postgres@localhost\/no_such_db .*database "no_such_db" does not exist/);
    t.notRegex(gone.stderr, /hunter2-secret/);
  });
}
