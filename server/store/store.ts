/**
 * The server's durable state behind one small interface: workspace records, agent types,
 * sessions, background processes and the audit trail. Services never see SQL. Two
 * implementations: the embedded SQLite (sqlite-store.ts, the default) and PostgreSQL
 * (postgres-store.ts, a database several servers can share), which is why every method is async
 * although SQLite answers synchronously.
 */
import type { WorkspaceRecord } from "../../providers/types.ts";

/**
 * A database that cannot be used as it is (newer than this server, unreachable, a corrupt legacy
 * file) or cannot serve at the moment (down, restarting, closed while the server stops). At start
 * it stops the server; during a call it is UNAVAILABLE / DATABASE_UNAVAILABLE, its message logged only.
 */
export class StoreError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StoreError";
  }
}

/** Where workspace records live. */
export interface WorkspaceStore {
  load(): Promise<WorkspaceRecord[]>;
  /** Inserts or replaces a record. Resolves once it is durable. */
  put(record: WorkspaceRecord): Promise<void>;
  delete(id: string): Promise<void>;
}

/** An agent type as stored: its identity and revision beside an opaque JSON body. */
export interface StoredAgentType {
  id: string;
  revision: number;
  createdAt: Date;
  updatedAt: Date;
  /** The AgentType message as proto JSON; the store never looks inside. */
  body: string;
}

/** What deleting an agent type did. */
export type AgentTypeDeletion = { deleted: true } | { deleted: false; missing: true } | { deleted: false; missing: false; workspaces: number };

/** Where agent types live. */
export interface AgentTypeStore {
  list(): Promise<StoredAgentType[]>;
  /** Inserts a new agent type; false when the id is taken. */
  insert(row: StoredAgentType): Promise<boolean>;
  /**
   * Replaces an agent type if it is still at `expectedRevision` (compare-and-set, so that two
   * writers, or two replicas, never overwrite each other unseen); false otherwise.
   */
  update(row: StoredAgentType, expectedRevision: number): Promise<boolean>;
  /** Deletes an agent type unless workspaces still belong to it, in one transaction. */
  delete(id: string): Promise<AgentTypeDeletion>;
}

/** A session as stored: the columns queries use beside the JSON record the store never reads. */
export interface StoredSession {
  id: string;
  agentType: string;
  status: string;
  /** SHA-256 of the session token, hex. */
  tokenHash: string;
  createdAt: Date;
  record: string;
}

/** Where sessions live. */
export interface SessionStore {
  /** Every session not ended, and those ended after `endedSince`. */
  load(endedSince: Date): Promise<StoredSession[]>;
  /**
   * Inserts or replaces a session; resolves once it is durable. With several servers on one
   * database (PostgreSQL) a stored session is replaced only by the server its stored record names
   * (its `server`): resolves false, changing nothing, when another server has taken it over.
   */
  put(row: StoredSession): Promise<boolean>;
  /** Removes sessions that ended before `before`; returns how many. */
  prune(before: Date): Promise<number>;
}

/** One audit record as stored: the columns queries filter on beside the JSON record. */
export interface StoredAuditEvent {
  /** When the call started, in microseconds since the epoch. */
  startUs: number;
  traceId: string;
  spanId: string;
  workspaceId: string;
  sessionId: string;
  agentType: string;
  tool: string;
  /** "ok", "error", "denied" or "cancelled". */
  outcome: string;
  /** The whole record as JSON; the store never looks inside. */
  record: string;
}

/** A page of the audit trail: filters (empty ones do not filter), newest first. */
export interface AuditQuery {
  workspaceId: string;
  sessionId: string;
  agentType: string;
  tool: string;
  outcome: string;
  /** Started at or after, in microseconds; 0 for no bound. */
  fromUs: number;
  /** Started before, in microseconds; 0 for no bound. */
  toUs: number;
  limit: number;
  /** Only records after this one in newest-first order (the previous page's last). */
  after?: { startUs: number; id: number };
}

/** Where the audit trail lives. */
export interface AuditStore {
  /** Appends records in one transaction; resolves once they are committed (appends commit in order). */
  append(rows: StoredAuditEvent[]): Promise<void>;
  query(q: AuditQuery): Promise<Array<StoredAuditEvent & { id: number }>>;
  /** Removes records that started before `beforeUs` (0: none) and all but the newest `maxRows` (0: no bound); resolves to how many. */
  prune(beforeUs: number, maxRows: number): Promise<number>;
}

/** A background process as stored: its handle and workspace beside the JSON record the store never reads. */
export interface StoredProcess {
  id: string;
  workspaceId: string;
  record: string;
}

/**
 * Bytes each workspace moved through the egress proxy (its budget's count): added to, never
 * overwritten, so servers counting one workspace at once (one losing it to another) lose nothing.
 */
export interface EgressUsageStore {
  /** Adds `bytes` (0 to read) to the workspace's count; resolves with the count then. */
  add(workspaceId: string, bytes: number): Promise<number>;
  /** Sets the workspace's count to 0 (its budget starts again). */
  reset(workspaceId: string): Promise<void>;
  /** Forgets the workspace's count (it is deleted). */
  delete(workspaceId: string): Promise<void>;
}

/** Where background processes' records live (their output is never stored). */
export interface ProcessStore {
  /** Every record, oldest first. */
  load(): Promise<StoredProcess[]>;
  /** Inserts or replaces a record. Resolves once it is durable. */
  put(row: StoredProcess): Promise<void>;
  delete(id: string): Promise<void>;
  /** Removes every record of a workspace (it was deleted). */
  deleteWorkspace(workspaceId: string): Promise<void>;
}

/** A committed change another server (or an operator) made: the table and the row's id. */
export interface StoreChange {
  table: string;
  id: string;
}

/** What a store shared by several servers tells each of them. */
export interface ChangeFeed {
  /**
   * Calls `onChange` for every change committed to a table that announces them (agent types,
   * workspaces, sessions),
   * whoever made it, and `onResync` after the feed was interrupted and is back (changes may have
   * been missed: reload everything). Returns how to stop listening.
   */
  subscribe(onChange: (change: StoreChange) => void, onResync: () => void): () => void;
  /**
   * Sends `events` (JSON-safe values: live events, watch interest) to every server sharing the
   * database, this one included, in order. Never waits and never throws: what cannot be sent is
   * logged and lost, and the listeners learn of the loss as a gap.
   */
  publish(events: unknown[]): void;
  /**
   * Calls `onEvents` with what any server published, in the order it was published, and `onGap`
   * when events may have been missed (the feed was interrupted and is back). Returns how to stop.
   */
  listen(onEvents: (events: unknown[]) => void, onGap: () => void): () => void;
}

/** The servers sharing one database: who is alive, and which of them serves a workspace. */
export interface ReplicaStore {
  /** Records that server `id`, reachable at `url`, is alive now. */
  beat(id: string, url: string): Promise<void>;
  /** The servers that beat within the last `withinMs`: id → URL. */
  live(withinMs: number): Promise<Map<string, string>>;
  /** Removes server `id` (it is stopping: its workspaces may be taken over at once). */
  leave(id: string): Promise<void>;
  /** The workspace's record as stored now, or undefined. */
  workspace(id: string): Promise<WorkspaceRecord | undefined>;
  /** The session's record (JSON) as stored now, or undefined. */
  session(id: string): Promise<string | undefined>;
  /** Sets the workspace's `server` to `to` if it is still `from` ("" for none); whether it was. */
  claim(workspaceId: string, from: string, to: string): Promise<boolean>;
  /**
   * Takes the first of `ids` that is still a ready warm-pool workspace no session has and no
   * server took, for server `to`, under a row lock (so two servers never take one): sets its
   * `server` to `to` and its pool membership `claimed`. Returns the record as stored, or undefined.
   */
  claimPooled(ids: string[], to: string): Promise<WorkspaceRecord | undefined>;
  /**
   * Takes session `id` over from server `from` for server `to`: sets its `server` to `to` if the
   * session has not ended and is still `from`'s. Returns its record (JSON) as stored then, or
   * undefined if it was not taken.
   */
  claimSession(id: string, from: string, to: string): Promise<string | undefined>;
}

/** The whole durable state. */
export interface Store {
  workspaces: WorkspaceStore;
  agentTypes: AgentTypeStore;
  sessions: SessionStore;
  processes: ProcessStore;
  egress: EgressUsageStore;
  /** The audit trail: written off the event loop, in batches. */
  audit: AuditStore;
  /** Changes made by other servers sharing the database; absent for a store only one server uses (SQLite). */
  changes?: ChangeFeed;
  /** The servers sharing the database; absent with `changes`. */
  replicas?: ReplicaStore;
  /** Where the state lives, for the start log (a file path; never credentials). */
  readonly location: string;
  /** Closes the database; resolves once nothing (the audit writer included) touches its files any more. */
  close(): Promise<void>;
}
