/**
 * The audit trail's bound on a crash, through a real server process: records go to the database in
 * batches (every 20 ms, see audit-trail.ts), so a SIGKILL may take the last few with it, never an
 * older one. Calls run four at a time, each with its own W3C trace id; the server is killed while
 * they run; the database it leaves must be intact and hold the record of every call answered more
 * than BOUND_MS before the kill, each once.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import test from "ava";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { startServerProcess, waitDead, type ServerProcess } from "./helpers/process.ts";

/**
 * What the test allows between a call's answer and its record being committed: the 20 ms batch
 * timer plus the writer thread's transaction, with room for a loaded CI machine. What was lost in
 * fact is logged.
 */
const BOUND_MS = 1000;

async function kill9(server: ServerProcess): Promise<void> {
  process.kill(-(server.child.pid as number), "SIGKILL");
  await waitDead([server.serverPid], 10_000);
}

test("a server killed mid-load keeps the audit record of every call answered more than the bound before the kill, each once, in an intact database", async (t) => {
  t.timeout(120_000);
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-audit-crash-"));
  const server = await startServerProcess({ dataDir });
  const sessions = new Http2SessionManager(server.url);
  const transport = createGrpcTransport({ baseUrl: server.url, sessionManager: sessions });
  const tools = createClient(ToolService, transport);
  const answered = new Map<string, number>();
  let killedAt = 0;
  try {
    const workspaceId = (await createClient(WorkspaceService, transport).createWorkspace({ provider: "local" })).workspace?.id ?? "";
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const traceId = randomBytes(16).toString("hex");
        try {
          await tools.listFiles({ workspaceId }, { headers: { traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` } });
        } catch {
          return; // The kill.
        }
        answered.set(traceId, performance.now());
      }
    };
    const workers = Array.from({ length: 4 }, worker);
    // Long enough for many batches to be committed (and some still pending) when the kill comes.
    const until = performance.now() + 1500;
    while (performance.now() < until || answered.size < 200) await new Promise((r) => setTimeout(r, 10));
    killedAt = performance.now();
    await kill9(server);
    stop = true;
    await Promise.all(workers);
  } finally {
    sessions.abort();
    if (server.child.exitCode === null && killedAt === 0) await kill9(server);
  }

  const db = new DatabaseSync(path.join(dataDir, "audit.db"));
  try {
    t.is((db.prepare("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check, "ok");
    const rows = db.prepare("SELECT trace_id, count(*) AS n FROM audit_events WHERE tool = 'list' GROUP BY trace_id").all() as Array<{ trace_id: string; n: number }>;
    const recorded = new Map(rows.map((r) => [r.trace_id, Number(r.n)]));
    t.deepEqual(rows.filter((r) => Number(r.n) !== 1), [], "no call is recorded twice");
    const missing = [...answered].filter(([id]) => !recorded.has(id)).map(([, at]) => killedAt - at);
    t.log(`${answered.size} calls answered, ${recorded.size} recorded; ${missing.length} answered calls lost, answered ${missing.length === 0 ? "-" : `${Math.min(...missing).toFixed(0)}–${Math.max(...missing).toFixed(0)} ms`} before the kill`);
    t.deepEqual(
      missing.filter((ago) => ago > BOUND_MS),
      [],
      `every call answered more than ${BOUND_MS} ms before the kill is recorded`,
    );
    // Calls that were answered are most of what is recorded: records are not made up.
    t.true([...recorded.keys()].filter((id) => !answered.has(id)).length <= 4 * 2, "at most the calls in flight at the kill are recorded without an answer seen");
  } finally {
    db.close();
  }

  // The server starts again on what the kill left, and the trail goes on.
  const again = await startServerProcess({ dataDir });
  const sessions2 = new Http2SessionManager(again.url);
  try {
    const transport2 = createGrpcTransport({ baseUrl: again.url, sessionManager: sessions2 });
    const workspaceId = (await createClient(WorkspaceService, transport2).createWorkspace({ provider: "local" })).workspace?.id ?? "";
    await createClient(ToolService, transport2).listFiles({ workspaceId });
  } finally {
    sessions2.abort();
    await kill9(again);
    await rm(dataDir, { recursive: true, force: true });
  }
});
