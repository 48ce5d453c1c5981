/**
 * The audit trail's writer: a worker thread with its own connection to the database, so that no
 * audit write (and no WAL checkpoint with its fsync, which on a busy disk takes anything from a
 * millisecond to seconds) ever runs on the server's event loop. The main thread posts batches and
 * prune requests; each message is answered once its work is committed, in order.
 *
 * Run as a worker by sqlite-store.ts; it imports nothing of the server.
 */
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";

/** What the main thread sends. */
export type WriterRequest =
  | { id: number; kind: "append"; rows: Array<[number, string, string, string, string, string, string, string, string]> }
  | { id: number; kind: "prune"; beforeUs: number; maxRows: number };

/** What the worker answers. */
export type WriterReply = { id: number; ok: true; pruned?: number } | { id: number; ok: false; error: string };

if (parentPort && (workerData as { auditWriter?: string } | undefined)?.auditWriter) {
  const port = parentPort;
  const db = new DatabaseSync((workerData as { auditWriter: string }).auditWriter);
  // NORMAL in WAL mode: a commit survives a crash of the process; only a power cut may lose the last ones.
  db.exec("PRAGMA synchronous = NORMAL");
  db.exec("PRAGMA busy_timeout = 10000");
  const insert = db.prepare("INSERT INTO audit_events (start_us, trace_id, span_id, workspace_id, session_id, agent_type, tool, outcome, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  const pruneAge = db.prepare("DELETE FROM audit_events WHERE start_us < ?");
  const pruneRows = db.prepare("DELETE FROM audit_events WHERE id <= (SELECT id FROM audit_events ORDER BY id DESC LIMIT 1 OFFSET ?)");
  port.on("message", (m: WriterRequest | "close") => {
    if (m === "close") {
      db.close();
      port.close();
      return;
    }
    try {
      if (m.kind === "append") {
        db.exec("BEGIN IMMEDIATE");
        try {
          for (const r of m.rows) insert.run(...r);
          db.exec("COMMIT");
        } catch (err) {
          if (db.isTransaction) db.exec("ROLLBACK");
          throw err;
        }
        port.postMessage({ id: m.id, ok: true } satisfies WriterReply);
      } else {
        let n = 0;
        if (m.beforeUs > 0) n += Number(pruneAge.run(m.beforeUs).changes);
        if (m.maxRows > 0) n += Number(pruneRows.run(m.maxRows).changes);
        port.postMessage({ id: m.id, ok: true, pruned: n } satisfies WriterReply);
      }
    } catch (err) {
      port.postMessage({ id: m.id, ok: false, error: String(err) } satisfies WriterReply);
    }
  });
}
