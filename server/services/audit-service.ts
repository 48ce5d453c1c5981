/**
 * AuditService: the audit trail read from the database (ListAuditEvents) and live (WatchEvents),
 * and the agent's own messages posted into it (PostAgentMessage). Operators see everything; a
 * session token sees, and posts into, its own session only, whatever it asks for.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { AgentMessageKind, AuditOutcome, AuditService, FileChangeKind, type WatchEventsResponse, WatchEventsResponseSchema } from "../../gen/agentworkspace/v1/audit_pb.js";
import { SessionStatus, WorkspaceStatus } from "../../gen/agentworkspace/v1/workspace_pb.js";
import { DomainError } from "../../core/errors.ts";
import { type AuditTrail, auditedCall, type LivePayload } from "../audit/audit-trail.ts";
import type { Delivered } from "../audit/event-hub.ts";
import { type AuditRecord, outcomeName, toAuditEvent } from "../audit/records.ts";
import { AGENT_MESSAGE_MAX_CHARS, POST_AGENT_MESSAGE } from "../audit/summary.ts";
import { PRINCIPAL } from "../auth/principal.ts";
import type { AuditStore } from "../store/store.ts";

const DEFAULT_PAGE = 100;
const MAX_PAGE = 1000;

const WORKSPACE_STATUS = { creating: WorkspaceStatus.CREATING, ready: WorkspaceStatus.READY, stopped: WorkspaceStatus.STOPPED, failed: WorkspaceStatus.FAILED, paused: WorkspaceStatus.PAUSED } as const;
const FILE_CHANGE_KINDS = { "": FileChangeKind.UNSPECIFIED, created: FileChangeKind.CREATED, modified: FileChangeKind.MODIFIED, deleted: FileChangeKind.DELETED } as const;
const SESSION_STATUS = { provisioning: SessionStatus.PROVISIONING, active: SessionStatus.ACTIVE, degraded: SessionStatus.DEGRADED, ended: SessionStatus.ENDED } as const;

/** The session a caller may see: a session token its own (naming another is refused), an operator what it asked. */
function sessionScope(requested: string, ctx: HandlerContext): string {
  const principal = ctx.values.get(PRINCIPAL);
  if (principal.kind !== "session") return requested;
  if (requested !== "" && requested !== principal.sessionId) {
    throw new DomainError("OUTSIDE_SESSION", "A session token sees only its own session's audit events", { metadata: { session_id: requested.slice(0, 64) } });
  }
  return principal.sessionId;
}

/** Page tokens: the last record's position, opaque to callers. */
function encodeToken(startUs: number, id: number): string {
  return Buffer.from(JSON.stringify([startUs, id])).toString("base64url");
}

function decodeToken(token: string): { startUs: number; id: number } | undefined {
  if (token === "") return undefined;
  try {
    const v = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as unknown;
    if (Array.isArray(v) && v.length === 2 && v.every((n) => Number.isSafeInteger(n) && n >= 0)) return { startUs: v[0] as number, id: v[1] as number };
  } catch {
    // Falls through to the refusal.
  }
  throw new DomainError("INVALID_ARGUMENT", "page_token is not one this server gave out", { metadata: { field: "page_token" } });
}

function toUs(t: { seconds: bigint; nanos: number } | undefined): number {
  return t === undefined ? 0 : Number(t.seconds) * 1_000_000 + Math.floor(t.nanos / 1000);
}

/** The longest message text accepted, in bytes of UTF-8. */
const AGENT_MESSAGE_MAX_BYTES = AGENT_MESSAGE_MAX_CHARS;

/** A live delivery in its API form; undefined for one a watcher does not see (an agent message's start). */
function toResponse(d: Delivered<LivePayload>): WatchEventsResponse | undefined {
  if (d.kind === "dropped") return create(WatchEventsResponseSchema, { time: timestampFromDate(d.time), event: { case: "eventsDropped", value: { count: BigInt(d.count) } } });
  const time = timestampFromDate(d.event.time);
  const p = d.event.payload;
  switch (p.case) {
    case "toolCallStarted":
      // An agent's message is shown once, as posted, not as a call that starts and ends.
      if (p.value.procedure === POST_AGENT_MESSAGE) return undefined;
      return create(WatchEventsResponseSchema, { time, event: { case: "toolCallStarted", value: { call: toAuditEvent(p.value) } } });
    case "toolCallFinished":
      if (p.value.procedure === POST_AGENT_MESSAGE) {
        if (p.value.outcome !== "ok") return undefined;
        return create(WatchEventsResponseSchema, { time, event: { case: "agentMessage", value: { event: toAuditEvent(p.value) } } });
      }
      return create(WatchEventsResponseSchema, { time, event: { case: "toolCallFinished", value: { call: toAuditEvent(p.value) } } });
    case "fileChanged":
      return create(WatchEventsResponseSchema, { time, event: { case: "fileChanged", value: { ...p.value, change: FILE_CHANGE_KINDS[p.value.change] } } });
    case "workspaceStatus":
      return create(WatchEventsResponseSchema, { time, event: { case: "workspaceStatus", value: { ...p.value, status: WORKSPACE_STATUS[p.value.status] } } });
    case "sessionStatus":
      return create(WatchEventsResponseSchema, { time, event: { case: "sessionStatus", value: { ...p.value, status: SESSION_STATUS[p.value.status] } } });
  }
}

/** What PostAgentMessage needs of sessions: a session's workspace and status (SESSION_NOT_FOUND for none). */
export interface SessionLookup {
  get(id: string): { id: string; workspaceId: string; status: string };
}

/** The service over the audit trail and the store's audit records. */
export function createAuditService(trail: AuditTrail, store: AuditStore, sessions: SessionLookup): ServiceImpl<typeof AuditService> {
  return {
    async listAuditEvents(req, ctx) {
      const sessionId = sessionScope(req.sessionId, ctx);
      if (req.pageSize < 0) throw new DomainError("INVALID_ARGUMENT", "page_size must not be negative", { metadata: { field: "page_size" } });
      if (!Object.values(AuditOutcome).includes(req.outcome)) throw new DomainError("INVALID_ARGUMENT", `outcome ${req.outcome} is not an AuditOutcome`, { metadata: { field: "outcome" } });
      const after = decodeToken(req.pageToken);
      const limit = Math.min(req.pageSize || DEFAULT_PAGE, MAX_PAGE);
      // Calls that finished this very moment are still waiting for their batch: write them first.
      await trail.flushed();
      const rows = await store.query({
        workspaceId: req.workspaceId,
        sessionId,
        agentType: req.agentType,
        tool: req.tool,
        outcome: outcomeName(req.outcome),
        fromUs: toUs(req.startTime),
        toUs: toUs(req.endTime),
        limit: limit + 1,
        after,
      });
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return {
        events: page.map((r) => toAuditEvent(JSON.parse(r.record) as AuditRecord)),
        nextPageToken: rows.length > limit && last ? encodeToken(last.startUs, last.id) : "",
      };
    },

    async *watchEvents(req, ctx) {
      const sessionId = sessionScope(req.sessionId, ctx);
      // Registered before the first message goes out, so `started` means nothing from now on is missed.
      const deliveries = trail.hub.watch({ workspaceId: req.workspaceId, sessionId }, ctx.signal);
      try {
        yield create(WatchEventsResponseSchema, { time: timestampFromDate(new Date()), event: { case: "started", value: {} } });
        for await (const d of deliveries) {
          const res = toResponse(d);
          if (res !== undefined) yield res;
        }
      } finally {
        await deliveries.return(undefined);
      }
    },

    async postAgentMessage(req, ctx) {
      const sessionId = sessionScope(req.sessionId, ctx);
      if (sessionId === "") throw new DomainError("INVALID_ARGUMENT", "session_id is required: name the session the message belongs to", { metadata: { field: "session_id" } });
      if (!Object.values(AgentMessageKind).includes(req.kind)) throw new DomainError("INVALID_ARGUMENT", `kind ${req.kind} is not an AgentMessageKind`, { metadata: { field: "kind" } });
      if (req.text.trim() === "") throw new DomainError("INVALID_ARGUMENT", "text is empty", { metadata: { field: "text" } });
      const bytes = Buffer.byteLength(req.text, "utf8");
      if (bytes > AGENT_MESSAGE_MAX_BYTES) {
        throw new DomainError("INVALID_ARGUMENT", `text is ${bytes} bytes; a message may hold at most ${AGENT_MESSAGE_MAX_BYTES}`, { metadata: { field: "text", max_bytes: String(AGENT_MESSAGE_MAX_BYTES) } });
      }
      const session = sessions.get(sessionId);
      if (session.status === "ended") {
        throw new DomainError("SESSION_NOT_READY", `Session '${session.id}' has ended; its chain takes no more messages`, { metadata: { session_id: session.id, status: session.status } });
      }
      const { workspaceId } = session;
      // The message is this call's own audit record (summary.ts): nothing else to write.
      return { sessionId, workspaceId, spanId: auditedCall(ctx.values)?.spanId ?? "" };
    },
  };
}

