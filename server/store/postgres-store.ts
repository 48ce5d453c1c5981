/**
 * The shared store: PostgreSQL, chosen by `AGENT_WORKSPACE_DATABASE_URL=postgres://…`, through
 * `pg` (node-postgres: pure JavaScript, pooled, the most used PostgreSQL driver for Node). The
 * same tables, migrations (their `postgres` dialect) and `Store` interface as the embedded SQLite
 * store, so services cannot tell them apart:
 * - every change is one statement or one transaction, committed (PostgreSQL's default
 *   `synchronous_commit`) before its promise resolves;
 * - schema changes run under an advisory lock, so servers starting together on one database
 *   migrate it once;
 * - the audit trail is a table of the same database (`audit_events`), appended in batches by one
 *   multi-row INSERT each, one batch at a time so records commit in order, as the SQLite writer
 *   thread does.
 * - changes to agent types are announced by a trigger (`pg_notify` on the channel
 *   `agent_workspace_changes`, sent on commit) and heard on a connection of their own that
 *   LISTENs, so every server sharing the database reloads what another one changed; the
 *   connection is made again when it breaks, and its listeners then reload everything.
 * The location logged is the URL without its password or parameters.
 */
import pg from "pg";
import type { WorkspaceRecord } from "../../providers/types.ts";
import type { Logger } from "../logger.ts";
import { MIGRATIONS, type Migration } from "./migrations.ts";
import { type AgentTypeDeletion, type AuditStore, type ChangeFeed, type Store, type StoreChange, type StoredAuditEvent, StoreError } from "./store.ts";

/** The audit trail's table, made once (as SQLite's audit.db schema is) under the migration lock. */
const AUDIT_SCHEMA = `
  CREATE TABLE IF NOT EXISTS audit_events (
    id            BIGSERIAL PRIMARY KEY,
    start_us      BIGINT NOT NULL,
    trace_id      TEXT NOT NULL,
    span_id       TEXT NOT NULL,
    workspace_id  TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    agent_type    TEXT NOT NULL,
    tool          TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    record        TEXT NOT NULL
  );
  CREATE INDEX IF NOT EXISTS audit_events_start ON audit_events (start_us, id);
  CREATE INDEX IF NOT EXISTS audit_events_workspace ON audit_events (workspace_id, start_us, id);
  CREATE INDEX IF NOT EXISTS audit_events_session ON audit_events (session_id, start_us, id);
`;

/** The advisory lock key under which the schema changes (any fixed 64-bit number). */
const SCHEMA_LOCK = 0x6177_5f73_6368;

/** True for the URLs this store serves. */
export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}

/** The URL as it may be logged: no password, no parameters but a socket directory. */
export function describePostgresUrl(url: string): string {
  try {
    const u = new URL(url);
    const socket = u.searchParams.get("host");
    return `${u.protocol}//${u.username ? `${decodeURIComponent(u.username)}@` : ""}${u.host}${u.pathname}${socket ? ` (socket ${socket})` : ""}`;
  } catch {
    return "postgres (unparseable URL)";
  }
}

type Queryable = pg.Pool | pg.PoolClient;

/**
 * Socket errors and SQLSTATEs that mean the database cannot serve at the moment (down,
 * restarting, out of connections, disk or memory), not that a statement is wrong.
 */
const UNREACHABLE = new Set(["ECONNREFUSED", "ECONNRESET", "ENOENT", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "57P01", "57P02", "57P03", "53000", "53100", "53200", "53300"]);
const UNREACHABLE_MESSAGE = /^(Connection terminated|timeout exceeded when trying to connect|Cannot use a pool after calling end|Client has encountered a connection error|Client was closed and is not queryable|Query read timeout)/;

/** `err` as a StoreError when it says the database cannot be reached (callers then answer UNAVAILABLE). */
function asStoreError(err: unknown): unknown {
  if (err instanceof StoreError || !(err instanceof Error)) return err;
  const code = (err as { code?: unknown }).code;
  const unreachable = (typeof code === "string" && (UNREACHABLE.has(code) || code.startsWith("08"))) || UNREACHABLE_MESSAGE.test(err.message);
  return unreachable ? new StoreError(`the database cannot be reached: ${err.message}`, { cause: err }) : err;
}

/** Makes every query and checkout of `pool` reject with a StoreError when the database cannot be reached. */
function guard(pool: pg.Pool): pg.Pool {
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  pool.query = ((...args: unknown[]) => {
    const r = query(...args);
    return r instanceof Promise ? r.catch((err: unknown) => Promise.reject(asStoreError(err))) : r;
  }) as typeof pool.query;
  // The pool calls connect itself with a callback (for its own queries): that form is left as it is.
  const connect = pool.connect.bind(pool) as (...args: unknown[]) => unknown;
  pool.connect = ((...args: unknown[]) => {
    const r = connect(...args);
    return r instanceof Promise ? r.catch((err: unknown) => Promise.reject(asStoreError(err))) : r;
  }) as typeof pool.connect;
  return pool;
}

async function inTransaction<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    const result = await fn(c);
    await c.query("COMMIT");
    return result;
  } catch (err) {
    await c.query("ROLLBACK").catch(() => undefined);
    throw asStoreError(err);
  } finally {
    c.release();
  }
}

async function schemaVersion(c: Queryable): Promise<number> {
  const r = await c.query<{ version: number }>("SELECT version FROM schema_version");
  return r.rows.length === 0 ? 0 : Number(r.rows[0].version);
}

/** Makes the schema current: refuses a newer one, applies the missing steps, each in a transaction. */
async function migrate(pool: pg.Pool, migrations: readonly Migration[], logger: Logger): Promise<void> {
  const c = await pool.connect();
  try {
    // Held for the whole migration: a second server starting now waits here, then finds it done.
    await c.query("SELECT pg_advisory_lock($1)", [SCHEMA_LOCK]);
    try {
      await c.query("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
      const current = await schemaVersion(c);
      const latest = migrations.at(-1)?.version ?? 0;
      if (current > latest) {
        throw new StoreError(`the database is at schema version ${current}, newer than this server knows (${latest}); run a newer agent-workspace or restore a backup`);
      }
      for (const m of migrations) {
        if (m.version <= current) continue;
        await c.query("BEGIN");
        try {
          await c.query(m.postgres);
          await c.query("DELETE FROM schema_version");
          await c.query("INSERT INTO schema_version (version) VALUES ($1)", [m.version]);
          await c.query("COMMIT");
        } catch (err) {
          await c.query("ROLLBACK").catch(() => undefined);
          throw err;
        }
        logger.info("database migrated", { version: m.version, migration: m.name });
      }
      await c.query(AUDIT_SCHEMA);
    } finally {
      await c.query("SELECT pg_advisory_unlock($1)", [SCHEMA_LOCK]).catch(() => undefined);
    }
  } finally {
    c.release();
  }
}

/** The channel the change trigger (migration 5) notifies. */
const CHANGES_CHANNEL = "agent_workspace_changes";
/** The channel live events travel on (published by the servers themselves, not by a trigger). */
const EVENTS_CHANNEL = "agent_workspace_events";
/** Most bytes of events one notification carries (PostgreSQL's limit is 8000). */
const NOTIFY_BYTES = 7000;
/** How long an event too large for a notification is kept in live_events. */
const LIVE_EVENT_KEEP_MS = 10 * 60_000;
/** How long a broken change feed waits before connecting again. */
const FEED_RETRY_MS = 500;

/**
 * The change feed: one connection of its own, LISTENing; every notification goes to every
 * subscriber. Connected before the store is handed out, so nothing committed after the services
 * load their state goes unheard; made again after a break, and then every subscriber resyncs.
 */
async function changeFeed(url: string, pool: pg.Pool, logger: Logger, location: string): Promise<ChangeFeed & { close(): Promise<void> }> {
  const subscribers = new Set<{ onChange: (c: StoreChange) => void; onResync: () => void }>();
  const listeners = new Set<{ onEvents: (events: unknown[]) => void; onGap: () => void }>();
  // Received notifications are handed on one after another: one that names a stored event is
  // read first, and what arrived after it waits.
  let received: Promise<void> = Promise.resolve();
  const receive = (payload: string) => {
    received = received.then(async () => {
      let events: unknown[];
      try {
        const parsed = JSON.parse(payload) as unknown[] | { ref: string };
        if (Array.isArray(parsed)) events = parsed;
        else {
          const r = await pool.query<{ body: string }>("SELECT body FROM live_events WHERE id = $1", [parsed.ref]);
          if (r.rows.length === 0) throw new Error(`live event ${parsed.ref} is gone`);
          events = [JSON.parse(r.rows[0].body)];
        }
      } catch (err) {
        logger.warn("a live event from another server could not be read; watchers are told of a gap", { database: location, error: (err as Error).message });
        for (const l of listeners) l.onGap();
        return;
      }
      for (const l of listeners) l.onEvents(events);
    });
  };
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let broken = false;
  const lost = (c: pg.Client, why: string) => {
    if (client !== c) return;
    client = undefined;
    void c.end().catch(() => undefined);
    if (!broken) logger.warn("database change feed lost; reconnecting", { database: location, error: why });
    broken = true;
    schedule();
  };
  const schedule = () => {
    if (closed || retry) return;
    retry = setTimeout(() => {
      retry = undefined;
      void connect().catch(() => schedule());
    }, FEED_RETRY_MS);
  };
  const connect = async () => {
    const c = new pg.Client({ connectionString: url, application_name: "agent-workspace changes" });
    c.on("error", (err) => lost(c, err.message));
    c.on("end", () => lost(c, "connection closed"));
    c.on("notification", (msg) => {
      if (msg.channel === EVENTS_CHANNEL && msg.payload) return receive(msg.payload);
      if (msg.channel !== CHANGES_CHANNEL || !msg.payload) return;
      let change: StoreChange;
      try {
        change = JSON.parse(msg.payload) as StoreChange;
      } catch {
        return;
      }
      for (const s of subscribers) s.onChange(change);
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${CHANGES_CHANNEL}; LISTEN ${EVENTS_CHANNEL}`);
    } catch (err) {
      await c.end().catch(() => undefined);
      throw err;
    }
    if (closed) {
      await c.end().catch(() => undefined);
      return;
    }
    client = c;
    if (broken) {
      broken = false;
      logger.info("database change feed back", { database: location });
      for (const s of subscribers) s.onResync();
      for (const l of listeners) l.onGap();
    }
  };
  await connect();
  // Publishing: what is published in one turn of the event loop goes out together, in
  // notifications of at most NOTIFY_BYTES, one statement at a time so they keep their order.
  let queued: string[] = [];
  let sending: Promise<void> = Promise.resolve();
  let lastPrune = 0;
  let failing = false;
  const notify = (payload: string) => pool.query("SELECT pg_notify($1, $2)", [EVENTS_CHANNEL, payload]);
  const flush = async (bodies: string[]) => {
    let batch: string[] = [];
    let bytes = 2;
    const sendBatch = async () => {
      if (batch.length > 0) await notify(`[${batch.join(",")}]`);
      batch = [];
      bytes = 2;
    };
    for (const body of bodies) {
      const size = Buffer.byteLength(body) + 1;
      if (size + 2 > NOTIFY_BYTES) {
        await sendBatch();
        const r = await pool.query<{ id: string }>("INSERT INTO live_events (body) VALUES ($1) RETURNING id", [body]);
        await notify(JSON.stringify({ ref: r.rows[0].id }));
        if (Date.now() - lastPrune > 60_000) {
          lastPrune = Date.now();
          await pool.query("DELETE FROM live_events WHERE at < now() - make_interval(secs => $1)", [LIVE_EVENT_KEEP_MS / 1000]);
        }
        continue;
      }
      if (bytes + size > NOTIFY_BYTES) await sendBatch();
      batch.push(body);
      bytes += size;
    }
    await sendBatch();
  };
  return {
    subscribe(onChange, onResync) {
      const s = { onChange, onResync };
      subscribers.add(s);
      return () => subscribers.delete(s);
    },
    listen(onEvents, onGap) {
      const l = { onEvents, onGap };
      listeners.add(l);
      return () => listeners.delete(l);
    },
    publish(events) {
      if (closed || events.length === 0) return;
      if (queued.length === 0) {
        setImmediate(() => {
          const bodies = queued;
          queued = [];
          sending = sending.then(() =>
            flush(bodies).then(
              () => {
                if (failing) logger.info("live events reach the other servers again", { database: location });
                failing = false;
              },
              (err: unknown) => {
                if (!failing) logger.warn("live events could not be sent to the other servers; they are lost to their watchers", { database: location, error: (err as Error).message, events: bodies.length });
                failing = true;
              },
            ),
          );
        });
      }
      for (const e of events) queued.push(JSON.stringify(e));
    },
    async close() {
      closed = true;
      await sending;
      clearTimeout(retry);
      const c = client;
      client = undefined;
      await c?.end().catch(() => undefined);
    },
  };
}

type LegacyRecord = Omit<WorkspaceRecord, "createdAt"> & { createdAt: string };
type AuditRow = { id: string; start_us: string; trace_id: string; span_id: string; workspace_id: string; session_id: string; agent_type: string; tool: string; outcome: string; record: string };

/** The audit trail's half: batches appended one at a time (in order), queries on the pool. */
function auditStore(pool: pg.Pool): AuditStore & { drained(): Promise<void> } {
  // One write at a time: a batch commits after the one before it, as the SQLite writer's queue does.
  let tail: Promise<unknown> = Promise.resolve();
  const serial = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = tail.then(fn, fn);
    tail = run.catch(() => undefined);
    return run;
  };
  return {
    append(rows: StoredAuditEvent[]) {
      if (rows.length === 0) return Promise.resolve();
      return serial(async () => {
        const values: Array<string | number> = [];
        const tuples = rows.map((r) => {
          const at = values.length;
          values.push(r.startUs, r.traceId, r.spanId, r.workspaceId, r.sessionId, r.agentType, r.tool, r.outcome, r.record);
          return `(${Array.from({ length: 9 }, (_, i) => `$${at + i + 1}`).join(", ")})`;
        });
        await pool.query(`INSERT INTO audit_events (start_us, trace_id, span_id, workspace_id, session_id, agent_type, tool, outcome, record) VALUES ${tuples.join(", ")}`, values);
      });
    },
    prune(beforeUs, maxRows) {
      return serial(async () => {
        let n = 0;
        if (beforeUs > 0) n += (await pool.query("DELETE FROM audit_events WHERE start_us < $1", [beforeUs])).rowCount ?? 0;
        if (maxRows > 0) n += (await pool.query("DELETE FROM audit_events WHERE id <= (SELECT id FROM audit_events ORDER BY id DESC LIMIT 1 OFFSET $1)", [maxRows])).rowCount ?? 0;
        return n;
      });
    },
    async query(q) {
      const where: string[] = [];
      const args: Array<string | number> = [];
      const arg = (v: string | number) => {
        args.push(v);
        return `$${args.length}`;
      };
      for (const [column, value] of [["workspace_id", q.workspaceId], ["session_id", q.sessionId], ["agent_type", q.agentType], ["tool", q.tool], ["outcome", q.outcome]] as const) {
        if (value !== "") where.push(`${column} = ${arg(value)}`);
      }
      if (q.fromUs > 0) where.push(`start_us >= ${arg(q.fromUs)}`);
      if (q.toUs > 0) where.push(`start_us < ${arg(q.toUs)}`);
      if (q.after) {
        const s = arg(q.after.startUs);
        where.push(`(start_us < ${s} OR (start_us = ${s} AND id < ${arg(q.after.id)}))`);
      }
      const sql = `SELECT * FROM audit_events${where.length > 0 ? ` WHERE ${where.join(" AND ")}` : ""} ORDER BY start_us DESC, id DESC LIMIT ${arg(q.limit)}`;
      const r = await pool.query<AuditRow>(sql, args);
      return r.rows.map((row) => ({
        id: Number(row.id),
        startUs: Number(row.start_us),
        traceId: row.trace_id,
        spanId: row.span_id,
        workspaceId: row.workspace_id,
        sessionId: row.session_id,
        agentType: row.agent_type,
        tool: row.tool,
        outcome: row.outcome,
        record: row.record,
      }));
    },
    drained: () => tail.then(() => undefined),
  };
}

/** Options of `openPostgresStore`. */
export interface PostgresStoreOptions {
  /** Most connections the pool opens (default 10). */
  maxConnections?: number;
}

/** Connects to the database at `url`, migrates it as needed, and returns the store. */
export async function openPostgresStore(url: string, logger: Logger, migrations: readonly Migration[] = MIGRATIONS, options: PostgresStoreOptions = {}): Promise<Store> {
  const location = describePostgresUrl(url);
  const pool = guard(new pg.Pool({ connectionString: url, max: options.maxConnections ?? 10, application_name: "agent-workspace", connectionTimeoutMillis: 10_000 }));
  // An idle connection that breaks (the database restarted) must not take the server down; the
  // pool replaces it on the next query.
  pool.on("error", (err) => logger.warn("database connection lost", { database: location, error: err.message }));
  try {
    await migrate(pool, migrations, logger);
  } catch (err) {
    await pool.end().catch(() => undefined);
    // A refusal of ours (a newer schema) as it is; the driver's errors (also those the pool's guard
    // made StoreErrors) with the database's location.
    if (err instanceof StoreError && err.cause === undefined) throw err;
    const cause = err instanceof StoreError ? err.cause : err;
    throw new StoreError(`cannot open the database ${location}: ${(cause as Error).message}`, { cause });
  }
  const audit = auditStore(pool);
  let changes: Awaited<ReturnType<typeof changeFeed>>;
  try {
    changes = await changeFeed(url, pool, logger, location);
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw new StoreError(`cannot open the database ${location}: ${(err as Error).message}`, { cause: err });
  }
  let closed = false;
  return {
    location,
    workspaces: {
      async load() {
        const r = await pool.query<{ record: string }>("SELECT record FROM workspaces ORDER BY created_at, id");
        return r.rows.map((row) => {
          const rec = JSON.parse(row.record) as LegacyRecord;
          return { ...rec, createdAt: new Date(rec.createdAt) };
        });
      },
      async put(r) {
        await pool.query(
          "INSERT INTO workspaces (id, provider, agent_type, created_at, record) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET provider = EXCLUDED.provider, agent_type = EXCLUDED.agent_type, created_at = EXCLUDED.created_at, record = EXCLUDED.record",
          [r.id, r.provider, r.agentType?.id ?? null, r.createdAt.toISOString(), JSON.stringify(r)],
        );
      },
      async delete(id) {
        await pool.query("DELETE FROM workspaces WHERE id = $1", [id]);
      },
    },
    replicas: {
      async beat(id, url) {
        await pool.query("INSERT INTO replicas (id, url) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, beat_at = now()", [id, url]);
      },
      async live(withinMs) {
        const r = await pool.query<{ id: string; url: string }>("SELECT id, url FROM replicas WHERE beat_at > now() - make_interval(secs => $1)", [withinMs / 1000]);
        return new Map(r.rows.map((row) => [row.id, row.url]));
      },
      async leave(id) {
        await pool.query("DELETE FROM replicas WHERE id = $1", [id]);
      },
      async workspace(id) {
        const r = await pool.query<{ record: string }>("SELECT record FROM workspaces WHERE id = $1", [id]);
        if (r.rows.length === 0) return undefined;
        const rec = JSON.parse(r.rows[0].record) as LegacyRecord;
        return { ...rec, createdAt: new Date(rec.createdAt) };
      },
      async session(id) {
        const r = await pool.query<{ record: string }>("SELECT record FROM sessions WHERE id = $1", [id]);
        return r.rows[0]?.record;
      },
      async claimPooled(ids, to) {
        if (ids.length === 0) return undefined;
        // The lock skips a row another server is taking; a row taken meanwhile is checked again on
        // its new version (READ COMMITTED re-evaluates the conditions of a row it locks).
        const pooled = `record::jsonb -> 'pool' ->> 'ready' = 'true' AND coalesce(record::jsonb -> 'pool' ->> 'claimed', 'false') <> 'true' AND record::jsonb -> 'session' IS NULL`;
        const r = await pool.query<{ record: string }>(
          `UPDATE workspaces SET record = jsonb_set(jsonb_set(record::jsonb, '{server}', to_jsonb($2::text)), '{pool,claimed}', 'true'::jsonb)::text
           WHERE id = (SELECT id FROM workspaces WHERE id = ANY($1::text[]) AND ${pooled} ORDER BY array_position($1::text[], id) LIMIT 1 FOR UPDATE SKIP LOCKED) AND ${pooled}
           RETURNING record`,
          [ids, to],
        );
        if (r.rows.length === 0) return undefined;
        const rec = JSON.parse(r.rows[0].record) as LegacyRecord;
        return { ...rec, createdAt: new Date(rec.createdAt) };
      },
      async claimSession(id, from, to) {
        const r = await pool.query<{ record: string }>(
          "UPDATE sessions SET record = jsonb_set(record::jsonb, '{server}', to_jsonb($3::text))::text WHERE id = $1 AND status <> 'ended' AND coalesce(record::jsonb ->> 'server', '') = $2 RETURNING record",
          [id, from, to],
        );
        return r.rows[0]?.record;
      },
      async claim(workspaceId, from, to) {
        const r = await pool.query(
          "UPDATE workspaces SET record = jsonb_set(record::jsonb, '{server}', to_jsonb($3::text))::text WHERE id = $1 AND coalesce(record::jsonb ->> 'server', '') = $2",
          [workspaceId, from, to],
        );
        return (r.rowCount ?? 0) === 1;
      },
    },
    agentTypes: {
      async list() {
        const r = await pool.query<{ id: string; revision: string; created_at: string; updated_at: string; body: string }>("SELECT id, revision, created_at, updated_at, body FROM agent_types ORDER BY id");
        return r.rows.map((row) => ({ id: row.id, revision: Number(row.revision), createdAt: new Date(row.created_at), updatedAt: new Date(row.updated_at), body: row.body }));
      },
      async insert(row) {
        const r = await pool.query("INSERT INTO agent_types (id, revision, created_at, updated_at, body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING", [
          row.id,
          row.revision,
          row.createdAt.toISOString(),
          row.updatedAt.toISOString(),
          row.body,
        ]);
        return r.rowCount === 1;
      },
      async update(row, expectedRevision) {
        const r = await pool.query("UPDATE agent_types SET revision = $1, updated_at = $2, body = $3 WHERE id = $4 AND revision = $5", [row.revision, row.updatedAt.toISOString(), row.body, row.id, expectedRevision]);
        return r.rowCount === 1;
      },
      delete(id): Promise<AgentTypeDeletion> {
        return inTransaction(pool, async (c) => {
          // The row stays locked until the end: a concurrent update or delete of it waits.
          if ((await c.query("SELECT 1 FROM agent_types WHERE id = $1 FOR UPDATE", [id])).rowCount === 0) return { deleted: false, missing: true };
          const n = Number((await c.query<{ n: string }>("SELECT count(*) AS n FROM workspaces WHERE agent_type = $1", [id])).rows[0].n);
          if (n > 0) return { deleted: false, missing: false, workspaces: n };
          await c.query("DELETE FROM agent_types WHERE id = $1", [id]);
          return { deleted: true };
        });
      },
    },
    sessions: {
      async load(endedSince) {
        const r = await pool.query<{ id: string; agent_type: string; status: string; token_hash: string; created_at: string; record: string }>(
          "SELECT id, agent_type, status, token_hash, created_at, record FROM sessions WHERE status <> 'ended' OR (record::jsonb ->> 'endedAt') >= $1 ORDER BY created_at, id",
          [endedSince.toISOString()],
        );
        return r.rows.map((row) => ({ id: row.id, agentType: row.agent_type, status: row.status, tokenHash: row.token_hash, createdAt: new Date(row.created_at), record: row.record }));
      },
      async put(row) {
        // Only the server the stored record names replaces it: a server that lost a session to
        // another (it stopped beating a while) cannot write its stale copy over the taker's.
        const r = await pool.query(
          `INSERT INTO sessions (id, agent_type, status, token_hash, created_at, record) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (id) DO UPDATE SET agent_type = EXCLUDED.agent_type, status = EXCLUDED.status, token_hash = EXCLUDED.token_hash, created_at = EXCLUDED.created_at, record = EXCLUDED.record
           WHERE coalesce(sessions.record::jsonb ->> 'server', '') = coalesce(EXCLUDED.record::jsonb ->> 'server', '')`,
          [row.id, row.agentType, row.status, row.tokenHash, row.createdAt.toISOString(), row.record],
        );
        return (r.rowCount ?? 0) === 1;
      },
      async prune(before) {
        const r = await pool.query("DELETE FROM sessions WHERE status = 'ended' AND (record::jsonb ->> 'endedAt') < $1", [before.toISOString()]);
        return r.rowCount ?? 0;
      },
    },
    processes: {
      async load() {
        const r = await pool.query<{ id: string; workspace_id: string; record: string }>("SELECT id, workspace_id, record FROM processes ORDER BY seq");
        return r.rows.map((row) => ({ id: row.id, workspaceId: row.workspace_id, record: row.record }));
      },
      async put(row) {
        await pool.query("INSERT INTO processes (id, workspace_id, record) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET workspace_id = EXCLUDED.workspace_id, record = EXCLUDED.record", [
          row.id,
          row.workspaceId,
          row.record,
        ]);
      },
      async delete(id) {
        await pool.query("DELETE FROM processes WHERE id = $1", [id]);
      },
      async deleteWorkspace(workspaceId) {
        await pool.query("DELETE FROM processes WHERE workspace_id = $1", [workspaceId]);
      },
    },
    egress: {
      async add(workspaceId, bytes) {
        const r = await pool.query<{ bytes: string }>(
          "INSERT INTO egress_usage (workspace_id, bytes) VALUES ($1, $2) ON CONFLICT (workspace_id) DO UPDATE SET bytes = egress_usage.bytes + EXCLUDED.bytes RETURNING bytes",
          [workspaceId, bytes],
        );
        return Number(r.rows[0].bytes);
      },
      async reset(workspaceId) {
        await pool.query("UPDATE egress_usage SET bytes = 0 WHERE workspace_id = $1", [workspaceId]);
      },
      async delete(workspaceId) {
        await pool.query("DELETE FROM egress_usage WHERE workspace_id = $1", [workspaceId]);
      },
    },
    audit,
    changes,
    async close() {
      if (closed) return;
      closed = true;
      await changes.close();
      await audit.drained();
      await pool.end();
    },
  };
}
