/**
 * The embedded store: one SQLite database (`agent-workspace.db`) in the data directory, through
 * Node's built-in `node:sqlite` (no native addon). WAL journal with `synchronous = FULL`: a
 * change is on disk when its call returns, so a `kill -9` (or a power cut) after a reply never
 * loses what that reply confirmed, and a crash mid-change leaves the previous state. Every change
 * is one transaction. A `workspaces.json` left by an older server is imported once, in the same
 * transaction that records the import, and then renamed to `workspaces.json.imported`.
 */
import { existsSync, mkdirSync, readFileSync, renameSync } from "node:fs";
import path from "node:path";
import { DatabaseSync, type StatementSync } from "node:sqlite";
import { Worker } from "node:worker_threads";
import { errnoCode } from "../../core/errors.ts";
import type { WorkspaceRecord } from "../../providers/types.ts";
import type { Logger } from "../logger.ts";
import { AUDIT_SCHEMA, type WriterReply, type WriterRequest } from "./audit-writer.ts";
import { MIGRATIONS, type Migration } from "./migrations.ts";
import { type AgentTypeDeletion, type AuditStore, type Store, type StoredAgentType, StoreError } from "./store.ts";

/** The audit trail's database file, beside the main one. */
export const AUDIT_DATABASE_FILE = "audit.db";

/** The database file's name inside the data directory. */
export const DATABASE_FILE = "agent-workspace.db";
const LEGACY_FILE = "workspaces.json";

export { StoreError } from "./store.ts";

/** Runs `fn` in a transaction: committed when it returns, rolled back when it throws. */
function transaction<T>(db: DatabaseSync, fn: () => T): T {
  db.exec("BEGIN IMMEDIATE");
  try {
    const result = fn();
    db.exec("COMMIT");
    return result;
  } catch (err) {
    if (db.isTransaction) db.exec("ROLLBACK");
    throw err;
  }
}

const schemaVersion = (db: DatabaseSync) => Number((db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version);

/** Refuses a database from a newer server before anything (even a pragma) writes to it. */
function refuseNewer(db: DatabaseSync, migrations: readonly Migration[]): void {
  const current = schemaVersion(db);
  const latest = migrations.at(-1)?.version ?? 0;
  if (current > latest) {
    throw new StoreError(`the database is at schema version ${current}, newer than this server knows (${latest}); run a newer agent-workspace or restore a backup`);
  }
}

/** Applies the migrations the database lacks. */
function migrate(db: DatabaseSync, migrations: readonly Migration[], logger: Logger): void {
  const current = schemaVersion(db);
  for (const m of migrations) {
    if (m.version <= current) continue;
    transaction(db, () => {
      db.exec(m.sql);
      // user_version lives in the database header and is written inside the transaction.
      db.exec(`PRAGMA user_version = ${m.version}`);
    });
    logger.info("database migrated", { version: m.version, migration: m.name });
  }
}

type LegacyRecord = Omit<WorkspaceRecord, "createdAt"> & { createdAt: string };

function recordRow(r: WorkspaceRecord): [string, string, string | null, string, string] {
  return [r.id, r.provider, r.agentType?.id ?? null, r.createdAt.toISOString(), JSON.stringify(r)];
}

/** Imports `workspaces.json` once; the import and its marker commit together. */
function importLegacy(db: DatabaseSync, dataDir: string, logger: Logger): void {
  const file = path.join(dataDir, LEGACY_FILE);
  if (!existsSync(file)) return;
  const done = db.prepare("SELECT value FROM meta WHERE key = 'imported_workspaces_json'").get();
  if (!done) {
    let records: LegacyRecord[];
    try {
      records = JSON.parse(readFileSync(file, "utf8")) as LegacyRecord[];
      if (!Array.isArray(records)) throw new Error("not a JSON array");
    } catch (err) {
      throw new StoreError(`${file} cannot be imported (${(err as Error).message}); fix or move it and start again`, { cause: err });
    }
    const insert = db.prepare("INSERT OR IGNORE INTO workspaces (id, provider, agent_type, created_at, record) VALUES (?, ?, ?, ?, ?)");
    transaction(db, () => {
      for (const r of records) insert.run(...recordRow({ ...r, createdAt: new Date(r.createdAt) }));
      db.prepare("INSERT INTO meta (key, value) VALUES ('imported_workspaces_json', ?)").run(new Date().toISOString());
    });
    logger.warn("imported workspaces.json into the database", { workspaces: records.length });
  }
  // Kept beside the database, renamed so nothing reads it again; a crash before the rename is
  // harmless (the marker says it was imported).
  renameSync(file, `${file}.imported`);
}

type AuditRow = { id: number; start_us: number; trace_id: string; span_id: string; workspace_id: string; session_id: string; agent_type: string; tool: string; outcome: string; record: string };

/**
 * The audit trail's half of the store: appends and prunes run in a worker thread with its own
 * connection (audit-writer.ts), so no write or checkpoint fsync stalls the event loop; queries
 * read on a connection of the main thread (WAL readers never wait for the writer).
 */
function auditStore(db: DatabaseSync, location: string): AuditStore & { close(): Promise<void> } {
  const worker = new Worker(new URL("./audit-writer.ts", import.meta.url), { workerData: { auditWriter: location } });
  worker.unref();
  let gone = false;
  const exited = new Promise<void>((resolve) =>
    worker.once("exit", () => {
      gone = true;
      // Nothing waits forever on a thread that is gone.
      for (const w of waiting.values()) w.reject(new StoreError("the audit writer has stopped"));
      waiting.clear();
      resolve();
    }),
  );
  let next = 0;
  const waiting = new Map<number, { resolve(v: number): void; reject(e: Error): void }>();
  let broken: Error | undefined;
  worker.on("message", (reply: WriterReply) => {
    const w = waiting.get(reply.id);
    waiting.delete(reply.id);
    if (reply.ok) w?.resolve(reply.pruned ?? 0);
    else w?.reject(new StoreError(`audit write failed: ${reply.error}`));
  });
  worker.on("error", (err) => {
    broken = new StoreError(`the audit writer stopped: ${err.message}`, { cause: err });
    for (const w of waiting.values()) w.reject(broken);
    waiting.clear();
  });
  const send = (request: Omit<WriterRequest, "id"> & { kind: WriterRequest["kind"] }) =>
    new Promise<number>((resolve, reject) => {
      if (broken || gone) {
        reject(broken ?? new StoreError("the audit writer has stopped"));
        return;
      }
      const id = ++next;
      waiting.set(id, { resolve, reject });
      worker.postMessage({ ...request, id });
    });
  const queries = new Map<string, ReturnType<DatabaseSync["prepare"]>>();
  return {
    async append(rows) {
      if (rows.length === 0) return;
      await send({ kind: "append", rows: rows.map((r) => [r.startUs, r.traceId, r.spanId, r.workspaceId, r.sessionId, r.agentType, r.tool, r.outcome, r.record]) } as never);
    },
    prune(beforeUs, maxRows) {
      return send({ kind: "prune", beforeUs, maxRows } as never);
    },
    close() {
      // Resolves when the thread is gone: its connection closed, its files left as they are (a
      // writer that does not close within 5 s is terminated, which to SQLite is a crash: safe).
      if (gone) return Promise.resolve();
      // Referenced again, so the process lives until the thread has closed its connection.
      worker.ref();
      worker.postMessage("close");
      const timer = setTimeout(() => void worker.terminate(), 5000);
      timer.unref();
      return exited.finally(() => clearTimeout(timer));
    },
    async query(q) {
      // Only the filters given become conditions (each shape's statement is prepared once), so
      // SQLite picks the index of the most selective one.
      const where: string[] = [];
      const args: Array<string | number> = [];
      for (const [column, value] of [["workspace_id", q.workspaceId], ["session_id", q.sessionId], ["agent_type", q.agentType], ["tool", q.tool], ["outcome", q.outcome]] as const) {
        if (value === "") continue;
        where.push(`${column} = ?`);
        args.push(value);
      }
      if (q.fromUs > 0) {
        where.push("start_us >= ?");
        args.push(q.fromUs);
      }
      if (q.toUs > 0) {
        where.push("start_us < ?");
        args.push(q.toUs);
      }
      if (q.after) {
        where.push("(start_us < ? OR (start_us = ? AND id < ?))");
        args.push(q.after.startUs, q.after.startUs, q.after.id);
      }
      const sql = `SELECT * FROM audit_events${where.length > 0 ? ` WHERE ${where.join(" AND ")}` : ""} ORDER BY start_us DESC, id DESC LIMIT ?`;
      // A query that arrives while the server stops (the connection already closed).
      if (!db.isOpen) throw new StoreError("the database is closed: the server is stopping");
      let stmt = queries.get(sql);
      if (!stmt) queries.set(sql, (stmt = db.prepare(sql)));
      return (stmt.all(...args, q.limit) as AuditRow[]).map((r) => ({
        id: Number(r.id),
        startUs: Number(r.start_us),
        traceId: r.trace_id,
        spanId: r.span_id,
        workspaceId: r.workspace_id,
        sessionId: r.session_id,
        agentType: r.agent_type,
        tool: r.tool,
        outcome: r.outcome,
        record: r.record,
      }));
    },
  };
}

/** Opens (creating and migrating as needed) the store in `dataDir`. */
export function openSqliteStore(dataDir: string, logger: Logger, migrations: readonly Migration[] = MIGRATIONS): Store {
  mkdirSync(dataDir, { recursive: true });
  const location = path.join(dataDir, DATABASE_FILE);
  let opened: DatabaseSync | undefined;
  try {
    opened = new DatabaseSync(location);
    const db = opened;
    // A second connection on the same file (the audit writer of a server closing, a backup, an
    // operator's sqlite3) makes this one wait instead of failing: set before anything takes a lock.
    db.exec("PRAGMA busy_timeout = 5000");
    refuseNewer(db, migrations);
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = FULL");
    db.exec("PRAGMA foreign_keys = ON");
    migrate(db, migrations, logger);
    importLegacy(db, dataDir, logger);
  } catch (err) {
    if (opened?.isOpen) opened.close();
    if (err instanceof StoreError) throw err;
    throw new StoreError(`cannot open the database ${location}: ${(err as Error).message}${errnoCode(err) ? ` (${errnoCode(err)})` : ""}`, { cause: err });
  }

  const db = opened;
  // The audit trail is read on its own connection and written by a worker (see auditStore).
  // The audit trail is a database of its own (audit.db, see audit-writer.ts); the schema is made
  // here, before the writer or any query needs it.
  const auditLocation = path.join(dataDir, AUDIT_DATABASE_FILE);
  let auditDb: DatabaseSync;
  try {
    auditDb = new DatabaseSync(auditLocation);
    auditDb.exec("PRAGMA busy_timeout = 5000");
    auditDb.exec("PRAGMA journal_mode = WAL");
    auditDb.exec(AUDIT_SCHEMA);
  } catch (err) {
    db.close();
    throw new StoreError(`cannot open the audit database ${auditLocation}: ${(err as Error).message}`, { cause: err });
  }
  const audit = auditStore(auditDb, auditLocation);
  const q = {
    workspaces: db.prepare("SELECT record FROM workspaces ORDER BY created_at, id"),
    putWorkspace: db.prepare("INSERT OR REPLACE INTO workspaces (id, provider, agent_type, created_at, record) VALUES (?, ?, ?, ?, ?)"),
    deleteWorkspace: db.prepare("DELETE FROM workspaces WHERE id = ?"),
    agentTypes: db.prepare("SELECT id, revision, created_at, updated_at, body FROM agent_types ORDER BY id"),
    insertAgentType: db.prepare("INSERT OR IGNORE INTO agent_types (id, revision, created_at, updated_at, body) VALUES (?, ?, ?, ?, ?)"),
    updateAgentType: db.prepare("UPDATE agent_types SET revision = ?, updated_at = ?, body = ? WHERE id = ? AND revision = ?"),
    agentTypeExists: db.prepare("SELECT 1 AS one FROM agent_types WHERE id = ?"),
    agentTypeWorkspaces: db.prepare("SELECT count(*) AS n FROM workspaces WHERE agent_type = ?"),
    deleteAgentType: db.prepare("DELETE FROM agent_types WHERE id = ?"),
    sessions: db.prepare("SELECT id, agent_type, status, token_hash, created_at, record FROM sessions WHERE status != 'ended' OR json_extract(record, '$.endedAt') >= ? ORDER BY created_at, id"),
    putSession: db.prepare("INSERT OR REPLACE INTO sessions (id, agent_type, status, token_hash, created_at, record) VALUES (?, ?, ?, ?, ?, ?)"),
    pruneSessions: db.prepare("DELETE FROM sessions WHERE status = 'ended' AND json_extract(record, '$.endedAt') < ?"),
  };
  // Prepared on first use: a store opened with fewer migrations (a test's database as an older
  // server left it) has no processes table, and must open all the same.
  let pq: { all: StatementSync; put: StatementSync; delete: StatementSync; deleteWorkspace: StatementSync } | undefined;
  let eq: { add: StatementSync; reset: StatementSync; delete: StatementSync } | undefined;
  const egressQueries = () =>
    (eq ??= {
      add: db.prepare("INSERT INTO egress_usage (workspace_id, bytes) VALUES (?, ?) ON CONFLICT (workspace_id) DO UPDATE SET bytes = bytes + excluded.bytes RETURNING bytes"),
      reset: db.prepare("UPDATE egress_usage SET bytes = 0 WHERE workspace_id = ?"),
      delete: db.prepare("DELETE FROM egress_usage WHERE workspace_id = ?"),
    });
  const processQueries = () =>
    (pq ??= {
      all: db.prepare("SELECT id, workspace_id, record FROM processes ORDER BY rowid"),
      put: db.prepare("INSERT OR REPLACE INTO processes (id, workspace_id, record) VALUES (?, ?, ?)"),
      delete: db.prepare("DELETE FROM processes WHERE id = ?"),
      deleteWorkspace: db.prepare("DELETE FROM processes WHERE workspace_id = ?"),
    });

  return {
    location,
    workspaces: {
      async load() {
        return (q.workspaces.all() as Array<{ record: string }>).map((row) => {
          const r = JSON.parse(row.record) as LegacyRecord;
          return { ...r, createdAt: new Date(r.createdAt) };
        });
      },
      async put(record) {
        q.putWorkspace.run(...recordRow(record));
      },
      async delete(id) {
        q.deleteWorkspace.run(id);
      },
    },
    agentTypes: {
      async list() {
        return (q.agentTypes.all() as Array<{ id: string; revision: number; created_at: string; updated_at: string; body: string }>).map((row) => ({
          id: row.id,
          revision: Number(row.revision),
          createdAt: new Date(row.created_at),
          updatedAt: new Date(row.updated_at),
          body: row.body,
        }));
      },
      async insert(row: StoredAgentType) {
        return q.insertAgentType.run(row.id, row.revision, row.createdAt.toISOString(), row.updatedAt.toISOString(), row.body).changes === 1;
      },
      async update(row, expectedRevision) {
        return q.updateAgentType.run(row.revision, row.updatedAt.toISOString(), row.body, row.id, expectedRevision).changes === 1;
      },
      async delete(id): Promise<AgentTypeDeletion> {
        return transaction(db, () => {
          if (!q.agentTypeExists.get(id)) return { deleted: false, missing: true };
          const n = Number((q.agentTypeWorkspaces.get(id) as { n: number }).n);
          if (n > 0) return { deleted: false, missing: false, workspaces: n };
          q.deleteAgentType.run(id);
          return { deleted: true };
        });
      },
    },
    sessions: {
      async load(endedSince) {
        return (q.sessions.all(endedSince.toISOString()) as Array<{ id: string; agent_type: string; status: string; token_hash: string; created_at: string; record: string }>).map((row) => ({
          id: row.id,
          agentType: row.agent_type,
          status: row.status,
          tokenHash: row.token_hash,
          createdAt: new Date(row.created_at),
          record: row.record,
        }));
      },
      async put(row) {
        q.putSession.run(row.id, row.agentType, row.status, row.tokenHash, row.createdAt.toISOString(), row.record);
        return true;
      },
      async prune(before) {
        return Number(q.pruneSessions.run(before.toISOString()).changes);
      },
    },
    processes: {
      async load() {
        return (processQueries().all.all() as Array<{ id: string; workspace_id: string; record: string }>).map((row) => ({ id: row.id, workspaceId: row.workspace_id, record: row.record }));
      },
      async put(row) {
        processQueries().put.run(row.id, row.workspaceId, row.record);
      },
      async delete(id) {
        processQueries().delete.run(id);
      },
      async deleteWorkspace(workspaceId) {
        processQueries().deleteWorkspace.run(workspaceId);
      },
    },
    egress: {
      async add(workspaceId, bytes) {
        return Number((egressQueries().add.get(workspaceId, bytes) as { bytes: number | bigint }).bytes);
      },
      async reset(workspaceId) {
        egressQueries().reset.run(workspaceId);
      },
      async delete(workspaceId) {
        egressQueries().delete.run(workspaceId);
      },
    },
    audit,
    async close() {
      await audit.close();
      if (auditDb.isOpen) auditDb.close();
      if (db.isOpen) db.close();
    },
  };
}
