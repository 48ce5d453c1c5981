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

/**
 * The audit database's schema. The trail lives in its own file beside the main database
 * (`audit.db`): its heavy, append-only traffic and its checkpoints never share a WAL with the
 * state the server's event loop commits with synchronous = FULL. Records are only ever appended
 * and pruned, so the schema is created once and versioned by `user_version`.
 */
export const AUDIT_SCHEMA = `
      -- One row per audited call (an OpenTelemetry span). The record is JSON; the columns beside
      -- it are what ListAuditEvents filters on. Rows are only ever appended and pruned.
      CREATE TABLE IF NOT EXISTS audit_events (
        id            INTEGER PRIMARY KEY,
        start_us      INTEGER NOT NULL,
        trace_id      TEXT NOT NULL,
        span_id       TEXT NOT NULL,
        workspace_id  TEXT NOT NULL,
        session_id    TEXT NOT NULL,
        agent_type    TEXT NOT NULL,
        tool          TEXT NOT NULL,
        outcome       TEXT NOT NULL,
        record        TEXT NOT NULL
      ) STRICT;
      CREATE INDEX IF NOT EXISTS audit_events_start ON audit_events (start_us, id);
      CREATE INDEX IF NOT EXISTS audit_events_workspace ON audit_events (workspace_id, start_us, id);
      CREATE INDEX IF NOT EXISTS audit_events_session ON audit_events (session_id, start_us, id);
    `;

/** What the main thread sends. */
export type WriterRequest =
  | { id: number; kind: "append"; rows: Array<[number, string, string, string, string, string, string, string, string]> }
  | { id: number; kind: "prune"; beforeUs: number; maxRows: number };

/** What the worker answers. */
export type WriterReply = { id: number; ok: true; pruned?: number } | { id: number; ok: false; error: string };

if (parentPort && (workerData as { auditWriter?: string } | undefined)?.auditWriter) {
  const port = parentPort;
  const location = (workerData as { auditWriter: string }).auditWriter;
  // Opened on the first write, so a writer closed before any (a server that failed to start)
  // never touches the files.
  let opened: { db: DatabaseSync; insert: ReturnType<DatabaseSync["prepare"]>; pruneAge: ReturnType<DatabaseSync["prepare"]>; pruneRows: ReturnType<DatabaseSync["prepare"]> } | undefined;
  const open = () => {
    if (opened) return opened;
    const db = new DatabaseSync(location);
    db.exec("PRAGMA busy_timeout = 10000");
    db.exec("PRAGMA journal_mode = WAL");
    // NORMAL in WAL mode: a commit survives a crash of the process; only a power cut may lose the last ones.
    db.exec("PRAGMA synchronous = NORMAL");
    db.exec(AUDIT_SCHEMA);
    opened = {
      db,
      insert: db.prepare("INSERT INTO audit_events (start_us, trace_id, span_id, workspace_id, session_id, agent_type, tool, outcome, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
      pruneAge: db.prepare("DELETE FROM audit_events WHERE start_us < ?"),
      pruneRows: db.prepare("DELETE FROM audit_events WHERE id <= (SELECT id FROM audit_events ORDER BY id DESC LIMIT 1 OFFSET ?)"),
    };
    return opened;
  };
  port.on("message", (m: WriterRequest | "close") => {
    if (m === "close") {
      opened?.db.close();
      port.close();
      return;
    }
    try {
      const { db, insert, pruneAge, pruneRows } = open();
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
