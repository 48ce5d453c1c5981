/**
 * The server's durable state behind one small interface: workspace records and agent types now,
 * sessions and audit records later. Services never see SQL; a shared database for several
 * replicas (PostgreSQL) is another implementation of `Store`, which is why every method is async
 * although the embedded SQLite below answers synchronously.
 */
import type { WorkspaceRecord } from "../../providers/types.ts";

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

/** The whole durable state. */
export interface Store {
  workspaces: WorkspaceStore;
  agentTypes: AgentTypeStore;
  /** Where the state lives, for the start log (a file path; never credentials). */
  readonly location: string;
  close(): void;
}
