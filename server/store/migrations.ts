/**
 * The database schema, as an ordered list of migrations. A migration is never edited once it has
 * shipped: a change to the schema is a new entry at the end. Each store applies the ones its
 * database lacks at start, each in its own transaction together with the new version (SQLite's
 * `user_version`, PostgreSQL's `schema_version` row), so a crash mid-migration leaves the database
 * at the previous version. Every step is written twice, once per dialect, with the same tables,
 * columns and meaning: `sql` for SQLite, `postgres` for PostgreSQL.
 */

/** One step of the schema. */
export interface Migration {
  /** 1, 2, 3, … without gaps; stored as SQLite's `user_version`. */
  version: number;
  /** What the step does, for the start log. */
  name: string;
  /** The statements for SQLite, run in one transaction. */
  sql: string;
  /** The same step for PostgreSQL. */
  postgres: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "workspaces, agent types and server metadata",
    sql: `
      -- One row per workspace. The record (provider-private state included) is JSON; the
      -- columns beside it are what queries filter on.
      CREATE TABLE workspaces (
        id          TEXT PRIMARY KEY,
        provider    TEXT NOT NULL,
        agent_type  TEXT,
        created_at  TEXT NOT NULL,
        record      TEXT NOT NULL
      ) STRICT;
      CREATE INDEX workspaces_agent_type ON workspaces (agent_type);

      -- One row per agent type; body is the AgentType message as proto JSON.
      CREATE TABLE agent_types (
        id          TEXT PRIMARY KEY,
        revision    INTEGER NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        body        TEXT NOT NULL
      ) STRICT;

      -- Facts about the database itself (one-time imports done, …).
      CREATE TABLE meta (
        key    TEXT PRIMARY KEY,
        value  TEXT NOT NULL
      ) STRICT;
    `,
    postgres: `
      CREATE TABLE workspaces (
        id          TEXT PRIMARY KEY,
        provider    TEXT NOT NULL,
        agent_type  TEXT,
        created_at  TEXT NOT NULL,
        record      TEXT NOT NULL
      );
      CREATE INDEX workspaces_agent_type ON workspaces (agent_type);
      CREATE TABLE agent_types (
        id          TEXT PRIMARY KEY,
        revision    BIGINT NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        body        TEXT NOT NULL
      );
      CREATE TABLE meta (
        key    TEXT PRIMARY KEY,
        value  TEXT NOT NULL
      );
    `,
  },
  {
    version: 2,
    name: "sessions",
    sql: `
      -- One row per agent session. The record (task, warnings, timestamps) is JSON; the token is
      -- only ever stored as its SHA-256.
      CREATE TABLE sessions (
        id          TEXT PRIMARY KEY,
        agent_type  TEXT NOT NULL,
        status      TEXT NOT NULL,
        token_hash  TEXT NOT NULL UNIQUE,
        created_at  TEXT NOT NULL,
        record      TEXT NOT NULL
      ) STRICT;
      CREATE INDEX sessions_status ON sessions (status);
    `,
    postgres: `
      CREATE TABLE sessions (
        id          TEXT PRIMARY KEY,
        agent_type  TEXT NOT NULL,
        status      TEXT NOT NULL,
        token_hash  TEXT NOT NULL UNIQUE,
        created_at  TEXT NOT NULL,
        record      TEXT NOT NULL
      );
      CREATE INDEX sessions_status ON sessions (status);
    `,
  },
  {
    version: 3,
    name: "agent types keep checkout_on_start = false as stored",
    sql: `
      -- checkout_on_start gained presence: unset now means "clone when repo_source names a
      -- repository". Before, false was the default and was stored by leaving the field out, so a
      -- stored agent type cannot tell "never set" from "false". Each keeps the false it was
      -- stored with (and GET showed), written out, so an upgrade changes no agent type's
      -- behaviour; saving its configuration again without the field applies the new default.
      UPDATE agent_types
        SET body = json_set(body, '$.workspace.checkoutOnStart', json('false'))
        WHERE json_type(body, '$.workspace') = 'object'
          AND json_type(body, '$.workspace.checkoutOnStart') IS NULL;
    `,
    postgres: `
      UPDATE agent_types
        SET body = jsonb_set(body::jsonb, '{workspace,checkoutOnStart}', 'false'::jsonb)::text
        WHERE jsonb_typeof(body::jsonb -> 'workspace') = 'object'
          AND (body::jsonb -> 'workspace') -> 'checkoutOnStart' IS NULL;
    `,
  },
  {
    version: 4,
    name: "background processes",
    sql: `
      -- One row per background process (ProcessService): its handle and state as JSON, so that a
      -- restarted server reports the ones that were running as lost. Their output is not kept.
      CREATE TABLE processes (
        id            TEXT PRIMARY KEY,
        workspace_id  TEXT NOT NULL,
        record        TEXT NOT NULL
      ) STRICT;
      CREATE INDEX processes_workspace ON processes (workspace_id);
    `,
    postgres: `
      -- seq keeps the order records were first stored in (SQLite's rowid).
      CREATE TABLE processes (
        id            TEXT PRIMARY KEY,
        seq           BIGSERIAL NOT NULL,
        workspace_id  TEXT NOT NULL,
        record        TEXT NOT NULL
      );
      CREATE INDEX processes_workspace ON processes (workspace_id);
    `,
  },
  {
    version: 5,
    name: "change notifications",
    sql: `
      -- SQLite serves one server: there is no other to tell.
      SELECT 1;
    `,
    postgres: `
      -- Every change to an agent type, committed, is announced to the servers sharing the database
      -- (LISTEN agent_workspace_changes), with the table and the row's id: they reload it. A
      -- trigger, so that no way of writing (another server, an operator's SQL) goes unannounced.
      CREATE FUNCTION agent_workspace_notify() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        changed TEXT;
      BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD.id; ELSE changed := NEW.id; END IF;
        PERFORM pg_notify('agent_workspace_changes', json_build_object('table', TG_TABLE_NAME, 'id', changed)::text);
        RETURN NULL;
      END;
      $$;
      CREATE TRIGGER agent_types_changed AFTER INSERT OR UPDATE OR DELETE ON agent_types
        FOR EACH ROW EXECUTE FUNCTION agent_workspace_notify();
    `,
  },
  {
    version: 6,
    name: "live events shared between servers",
    sql: `
      -- SQLite serves one server: its live events never leave it.
      SELECT 1;
    `,
    postgres: `
      -- Live events travel between the servers as notifications (agent_workspace_events); one too
      -- large for a notification waits here, and the notification carries its id. Kept minutes.
      CREATE TABLE live_events (
        id    BIGSERIAL PRIMARY KEY,
        at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        body  TEXT NOT NULL
      );
      CREATE INDEX live_events_at ON live_events (at);
    `,
  },
  {
    version: 7,
    name: "servers sharing the database, and their workspaces and sessions announced",
    sql: `
      -- SQLite serves one server.
      SELECT 1;
    `,
    postgres: `
      -- Each server beats here every few seconds; one that stopped beating has stopped, and the
      -- workspaces it served may be taken over by another.
      CREATE TABLE replicas (
        id          TEXT PRIMARY KEY,
        url         TEXT NOT NULL,
        started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
        beat_at     TIMESTAMPTZ NOT NULL DEFAULT now()
      );
      CREATE TRIGGER workspaces_changed AFTER INSERT OR UPDATE OR DELETE ON workspaces
        FOR EACH ROW EXECUTE FUNCTION agent_workspace_notify();
      CREATE TRIGGER sessions_changed AFTER INSERT OR UPDATE OR DELETE ON sessions
        FOR EACH ROW EXECUTE FUNCTION agent_workspace_notify();
    `,
  },
  {
    version: 8,
    name: "bytes each workspace moved through the egress proxy",
    sql: `
      -- Counted against the workspace's budget; added to every second by the serving server.
      CREATE TABLE egress_usage (
        workspace_id  TEXT PRIMARY KEY,
        bytes         INTEGER NOT NULL
      ) STRICT;
    `,
    postgres: `
      -- Counted against the workspace's budget; added to every second by the serving server, so
      -- a server taking a workspace over goes on from what the other one counted.
      CREATE TABLE egress_usage (
        workspace_id  TEXT PRIMARY KEY,
        bytes         BIGINT NOT NULL
      );
    `,
  },
];
