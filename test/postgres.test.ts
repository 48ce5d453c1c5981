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
import { refusedStart, startServerProcess, waitDead, type ServerProcess } from "./helpers/process.ts";

function clientsOf(url: string, token?: string) {
  const sessions = new Http2SessionManager(url);
  const auth: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({ baseUrl: url, sessionManager: sessions, interceptors: [auth] });
  return {
    config: createClient(ConfigService, transport),
    workspaces: createClient(WorkspaceService, transport),
    tools: createClient(ToolService, transport),
    audit: createClient(AuditService, transport),
    close: () => sessions.abort(),
  };
}

async function kill9(server: ServerProcess): Promise<void> {
  process.kill(-(server.child.pid as number), "SIGKILL");
  await waitDead([server.serverPid], 10_000);
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
        const session = await c.workspaces.startSession({ agentType: "survivor" });
        token = session.sessionToken;
        sessionId = session.session?.id ?? "";
        const agent = clientsOf(first.url, token);
        for (let i = 0; i < 50 && (await agent.workspaces.getSession({})).session?.status !== SessionStatus.ACTIVE; i++) await new Promise((r) => setTimeout(r, 100));
        for (let i = 0; i < 20; i++) await agent.tools.listFiles({ path: "." });
        agent.close();
        // Every call above was answered more than a second before the kill: its record is committed.
        await new Promise((r) => setTimeout(r, 1200));
        let stopped = false;
        const updates = (async () => {
          for (let i = 1; ; i++) {
            await c.config.updateAgentType({ agentType: { id: "survivor", description: `update ${i}` } });
            confirmed = i;
          }
        })().catch(() => {
          stopped = true;
        });
        while (confirmed < 25 && !stopped) await new Promise((r) => setTimeout(r, 5));
        t.true(confirmed >= 25 && !stopped, `updates were being confirmed when the kill came (${confirmed})`);
        await kill9(first);
        await updates;
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

  test("two servers on one database: an agent type changed by one is a CONCURRENT_MODIFICATION (ABORTED) for the other's stale copy, and its retry applies", async (t) => {
    const pg = await cluster();
    const url = await pg.createDatabase("two_servers");
    const dirs = [await mkdtemp(path.join(tmpdir(), "aw-pgsrv-")), await mkdtemp(path.join(tmpdir(), "aw-pgsrv-"))];
    const servers: ServerProcess[] = [];
    try {
      servers.push(await startServerProcess({ dataDir: dirs[0], env: { AGENT_WORKSPACE_DATABASE_URL: url } }));
      const a = clientsOf(servers[0].url);
      await a.config.createAgentType({ agentType: { id: "shared", description: "v1" } });
      await a.config.updateAgentType({ agentType: { id: "shared", description: "v2 from a" } });
      // The second server reads revision 2 from the database at its start.
      servers.push(await startServerProcess({ dataDir: dirs[1], env: { AGENT_WORKSPACE_DATABASE_URL: url } }));
      const b = clientsOf(servers[1].url);
      try {
        t.is((await b.config.getAgentType({ id: "shared" })).agentType?.revision, 2n);
        await a.config.updateAgentType({ agentType: { id: "shared", description: "v3 from a" } });
        const err = await t.throwsAsync(b.config.updateAgentType({ agentType: { id: "shared", description: "v3 from b" } }));
        t.regex(err!.message, /\[aborted\] Agent type 'shared' was changed by another server since revision 2; read it again and retry/);
        const detail = (err as unknown as { findDetails: (s: unknown) => Array<{ reason: number; metadata: Record<string, string> }> }).findDetails(ErrorDetailSchema)[0];
        t.is(detail.reason, ErrorReason.CONCURRENT_MODIFICATION);
        t.deepEqual(detail.metadata, { agent_type: "shared", revision: "2" });
        // Nothing was written, and the server now holds revision 3: the retry applies as 4.
        t.is((await b.config.getAgentType({ id: "shared" })).agentType?.description, "v3 from a");
        t.is((await b.config.updateAgentType({ agentType: { id: "shared", description: "v4 from b" } })).agentType?.revision, 4n);
        t.deepEqual((await pg.query("two_servers", "SELECT revision::int AS r, body::jsonb ->> 'description' AS d FROM agent_types WHERE id = 'shared'")).rows, [{ r: 4, d: "v4 from b" }]);
      } finally {
        a.close();
        b.close();
      }
    } finally {
      for (const s of servers) await kill9(s);
      for (const d of dirs) await rm(d, { recursive: true, force: true });
    }
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
