/**
 * The audit record: the attribute names our spans carry, the record a finished span becomes (in
 * the database and in ToolCallFinished events), and its API form. A span is the source of truth;
 * the record is read back from its attributes, so what the database keeps and what a collector
 * receives cannot drift apart.
 */
import { create } from "@bufbuild/protobuf";
import type { Attributes } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { AgentMessageKind, AuditEventSchema, AuditOutcome, type AuditEvent } from "../../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";

/** Our attributes, under the project's prefix; the rest follow OpenTelemetry's conventions. */
export const ATTR = {
  workspaceId: "agentworkspace.workspace.id",
  sessionId: "agentworkspace.session.id",
  agentType: "agentworkspace.agent_type",
  principalKind: "agentworkspace.principal.kind",
  principalId: "agentworkspace.principal.id",
  provider: "agentworkspace.provider",
  protocol: "agentworkspace.protocol",
  procedure: "agentworkspace.procedure",
  outcome: "agentworkspace.outcome",
  code: "agentworkspace.code",
  reason: "agentworkspace.error.reason",
  request: "agentworkspace.request.",
  result: "agentworkspace.result.",
} as const;

/** OpenTelemetry semantic convention attributes we set (GenAI tool execution, RPC, errors). */
export const SEMCONV = {
  operationName: "gen_ai.operation.name",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  rpcSystem: "rpc.system",
  rpcService: "rpc.service",
  rpcMethod: "rpc.method",
  rpcGrpcStatusCode: "rpc.grpc.status_code",
  errorType: "error.type",
} as const;

export type Outcome = "ok" | "error" | "denied" | "cancelled";

/** A finished call as the audit trail keeps it (JSON in the database). */
export interface AuditRecord {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  tool: string;
  procedure: string;
  toolCallId: string;
  workspaceId: string;
  sessionId: string;
  agentType: string;
  principalKind: string;
  principalId: string;
  provider: string;
  protocol: string;
  /** Microseconds since the epoch. */
  startUs: number;
  /** Microseconds; -1 for a call not finished. */
  durationUs: number;
  /** "" for a call not finished. */
  outcome: Outcome | "";
  /** "ok", or the gRPC code in lower snake case. */
  code: string;
  /** The ErrorReason's name without its prefix ("FILE_NOT_FOUND"); "" on success. */
  reason: string;
  request: Record<string, string>;
  result: Record<string, string>;
}

const str = (v: unknown) => (v === undefined ? "" : String(v));
const hrUs = ([s, ns]: [number, number]) => s * 1_000_000 + Math.floor(ns / 1000);

/** Reads a record back from attributes (a finished span's, or a started call's so far). */
export function recordFrom(attrs: Attributes, ids: { traceId: string; spanId: string; parentSpanId: string; name: string; startUs: number; durationUs: number }): AuditRecord {
  const request: Record<string, string> = {};
  const result: Record<string, string> = {};
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith(ATTR.request)) request[k.slice(ATTR.request.length)] = str(v);
    else if (k.startsWith(ATTR.result)) result[k.slice(ATTR.result.length)] = str(v);
  }
  return {
    ...ids,
    tool: str(attrs[SEMCONV.toolName]),
    procedure: str(attrs[ATTR.procedure]),
    toolCallId: str(attrs[SEMCONV.toolCallId]),
    workspaceId: str(attrs[ATTR.workspaceId]),
    sessionId: str(attrs[ATTR.sessionId]),
    agentType: str(attrs[ATTR.agentType]),
    principalKind: str(attrs[ATTR.principalKind]),
    principalId: str(attrs[ATTR.principalId]),
    provider: str(attrs[ATTR.provider]),
    protocol: str(attrs[ATTR.protocol]),
    outcome: str(attrs[ATTR.outcome]) as Outcome | "",
    code: str(attrs[ATTR.code]),
    reason: str(attrs[ATTR.reason]),
    request,
    result,
  };
}

/** The record of a finished span. */
export function recordOfSpan(span: ReadableSpan): AuditRecord {
  const ctx = span.spanContext();
  return recordFrom(span.attributes, {
    traceId: ctx.traceId,
    spanId: ctx.spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? "",
    name: span.name,
    startUs: hrUs(span.startTime),
    durationUs: hrUs(span.duration),
  });
}

const OUTCOMES: Record<string, AuditOutcome> = {
  ok: AuditOutcome.OK,
  error: AuditOutcome.ERROR,
  denied: AuditOutcome.DENIED,
  cancelled: AuditOutcome.CANCELLED,
};

/** An outcome filter's stored name ("" for UNSPECIFIED). */
export function outcomeName(outcome: AuditOutcome): string {
  return Object.entries(OUTCOMES).find(([, v]) => v === outcome)?.[0] ?? "";
}

/** The API form of a record. */
export function toAuditEvent(r: AuditRecord): AuditEvent {
  const exit = r.result.exit_code;
  return create(AuditEventSchema, {
    traceId: r.traceId,
    spanId: r.spanId,
    parentSpanId: r.parentSpanId,
    name: r.name,
    tool: r.tool,
    procedure: r.procedure,
    toolCallId: r.toolCallId,
    workspaceId: r.workspaceId,
    sessionId: r.sessionId,
    agentType: r.agentType,
    principalKind: r.principalKind,
    principalId: r.principalId,
    provider: r.provider,
    protocol: r.protocol,
    startTime: { seconds: BigInt(Math.floor(r.startUs / 1_000_000)), nanos: (r.startUs % 1_000_000) * 1000 },
    ...(r.durationUs >= 0 ? { duration: { seconds: BigInt(Math.floor(r.durationUs / 1_000_000)), nanos: (r.durationUs % 1_000_000) * 1000 } } : {}),
    outcome: OUTCOMES[r.outcome] ?? AuditOutcome.UNSPECIFIED,
    code: r.code,
    reason: r.reason === "" ? ErrorReason.UNSPECIFIED : (ErrorReason[r.reason as keyof typeof ErrorReason] ?? ErrorReason.UNSPECIFIED),
    request: r.request,
    result: r.result,
    ...(exit !== undefined && /^-?\d+$/.test(exit) ? { exitCode: Number(exit) } : {}),
    truncated: r.result.truncated === "true",
    // An agent's message (PostAgentMessage's record, when it was posted): its summary is the message
    // itself. A refused attempt stays a record like any refused call's, not a message.
    ...(r.procedure === "/agentworkspace.v1.AuditService/PostAgentMessage" && r.outcome === "ok"
      ? { agentMessage: { kind: r.request.kind === "summary" ? AgentMessageKind.SUMMARY : AgentMessageKind.NOTE, text: r.request.text ?? "" } }
      : {}),
  });
}
