/**
 * The audit trail: one OpenTelemetry span per tool operation, and per administrative change,
 * made by one pair of interceptors for unary and streaming calls on every protocol alike.
 *
 * - The outer interceptor (outermost of all) starts the span with the request's summary, as a
 *   child of the caller's W3C `traceparent` when one came, and ends it when the call ends: for a
 *   stream, when its last message went out, it failed, or the client went away. So it sees every
 *   refusal of the interceptors inside it (authentication, permissions) and records them as DENIED.
 * - The inner interceptor (innermost, after permissions) marks the moment a call was admitted: it
 *   fills in who called and where, and publishes ToolCallStarted for watchers.
 *
 * Spans are named and attributed after OpenTelemetry's GenAI tool-execution and RPC conventions;
 * our own attributes live under `agentworkspace.`. Every span is recorded (the sampler is always
 * on: an audit trail that samples is not one) and goes to the span processors: the database (with
 * the live ToolCallFinished and FileChanged events), the OTLP exporter when a collector is
 * configured, and whatever tests add. What a span may hold is decided in summary.ts.
 */
import { createRequire } from "node:module";
import { type Attributes, context as otelContext, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, type TextMapGetter, type Tracer } from "@opentelemetry/api";
import { ExportResultCode, W3CTraceContextPropagator } from "@opentelemetry/core";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { AlwaysOnSampler, BatchSpanProcessor, type ReadableSpan, SimpleSpanProcessor, type SpanExporter, type SpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { Code, ConnectError, type ContextValues, createContextKey, type Interceptor, type StreamRequest, type StreamResponse, type UnaryRequest } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { ErrorDetailSchema, ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";
import { PRINCIPAL, type Principal } from "../auth/principal.ts";
import { AFTER_ANSWER } from "../direct/common.ts";
import { DomainError } from "../../core/errors.ts";
import { toWorkspacePath } from "../../providers/executor/jail.ts";
import { toConnectError } from "../interceptors/error-interceptor.ts";
import type { Logger } from "../logger.ts";
import type { AuditSettings, OtlpSettings } from "../settings.ts";
import type { AuditStore, StoredAuditEvent } from "../store/store.ts";
import { toolNameOf, type ToolName } from "../tools/registry.ts";
import type { WorkspaceStatusChange } from "../workspace-manager.ts";
import type { SessionStatusChange } from "../sessions/session-manager.ts";
import { EventHub } from "./event-hub.ts";
import { ATTR, type AuditRecord, type Outcome, recordFrom, recordOfSpan, SEMCONV } from "./records.ts";
import type { Redactor } from "./redact.ts";
import { ADMIN_AUDIT, type AdminAudit, FILE_CHANGING_TOOLS, type Facts, type Summary, TOOL_AUDIT, type ToolAudit } from "./summary.ts";

const requireModule = createRequire(import.meta.url);

/** What a live event carries. */
export type LivePayload =
  | { case: "toolCallStarted"; value: AuditRecord }
  | { case: "toolCallFinished"; value: AuditRecord }
  | { case: "fileChanged"; value: FileChange }
  | { case: "workspaceStatus"; value: WorkspaceStatusChange }
  | { case: "sessionStatus"; value: SessionStatusChange };

/** What happened to a path (FileChangeKind); "" for a tree_changed event. */
export type FileChangeKind = "created" | "modified" | "deleted" | "";

/** One FileChanged event: a path a tool or a command changed, or (`treeChanged`) "more than listed". */
export interface FileChange {
  workspaceId: string;
  sessionId: string;
  /** Workspace-relative; "" when treeChanged. */
  path: string;
  tool: string;
  spanId: string;
  change: FileChangeKind;
  treeChanged: boolean;
}

/** The change each file tool reports, from its record. */
function fileToolChange(r: AuditRecord): FileChangeKind {
  if (r.tool === "delete") return "deleted";
  if (r.tool === "write") return r.result.created === "true" ? "created" : "modified";
  return "modified";
}

/** The workspace-relative form of a path a tool was given (as the jail normalises it). */
function relativePath(path: string): string {
  try {
    return toWorkspacePath(path);
  } catch {
    return path;
  }
}

/** Where a workspace's calls belong, looked up by id. */
export interface WorkspaceFacts {
  provider: string;
  agentType: string;
  sessionId: string;
}

/** A tool operation the server runs on its own account. */
export interface InternalCall {
  tool: ToolName;
  /** What ran it ("setup_command"). */
  procedure: string;
  /** The request, as the tool's RPC would carry it (summarised like one). */
  request: object;
  workspaceId: string;
  sessionId: string;
  agentType: string;
}

/** Options of the audit trail. */
export interface AuditTrailOptions {
  settings: AuditSettings;
  store: AuditStore;
  logger: Logger;
  redactor: Redactor;
  /** The facts of a workspace, undefined when it is unknown. */
  describe(workspaceId: string): WorkspaceFacts | undefined;
  /** A session's workspace ("" when it has none), for session calls refused before they named one. */
  workspaceOfSession(sessionId: string): string;
  /** More exporters, each behind a SimpleSpanProcessor (tests: the SDK's in-memory exporter). */
  exporters?: SpanExporter[];
}

/** The call being audited, for the inner interceptor. */
const AUDIT_CALL = createContextKey<AuditCall | undefined>(undefined, { description: "the audited call" });

/** What a handler may know of its own audited call. */
export interface AuditedCall {
  /** The span's id, 16 hex digits. */
  spanId: string;
  /** The session the record names (the caller's, or the workspace's); "" for none. */
  sessionId: string;
  /**
   * Settles once the span has ended: its ToolCallFinished is then published, so events published
   * after it follow that event on every watch.
   */
  ended: Promise<void>;
}

/** The audited call a handler runs in (from its context values), once it was admitted; undefined when it is not audited. */
export function auditedCall(values: ContextValues): AuditedCall | undefined {
  const call = values.get(AUDIT_CALL);
  return call === undefined ? undefined : { spanId: call.spanId, sessionId: call.sessionId, ended: call.ended };
}

const HEADERS_GETTER: TextMapGetter<Headers> = {
  get: (h, key) => h.get(key) ?? undefined,
  keys: (h) => [...h.keys()],
};

/** A caller's own id for its tool call: printable ASCII, at most 128 characters; anything else is ignored. */
const TOOL_CALL_ID = /^[\x21-\x7e]{1,128}$/;

/** The request header carrying the caller's tool call id. */
export const TOOL_CALL_ID_HEADER = "tool-call-id";

/** Lower snake case of a Connect code: "not_found". */
const codeName = (code: Code) => Code[code].replace(/[A-Z]/g, (c, at: number) => (at === 0 ? "" : "_") + c.toLowerCase());

function protocolOf(header: Headers): "grpc" | "grpc_web" | "connect" {
  const type = header.get("content-type") ?? "";
  if (type.startsWith("application/grpc-web")) return "grpc_web";
  if (type.startsWith("application/grpc")) return "grpc";
  return "connect";
}

function outcomeOf(error: ConnectError): Outcome {
  if (error.code === Code.PermissionDenied || error.code === Code.Unauthenticated) return "denied";
  if (error.code === Code.Canceled) return "cancelled";
  return "error";
}

function setSummary(attrs: Attributes, prefix: string, summary: Summary): void {
  for (const [k, v] of Object.entries(summary)) attrs[prefix + k] = v;
}

/** The trail: interceptors, the live event hub, and the span pipeline. */
export class AuditTrail {
  readonly hub: EventHub<LivePayload>;
  readonly #o: AuditTrailOptions;
  readonly #provider: NodeTracerProvider;
  readonly #tracer: Tracer;
  readonly #store: StoreSpanProcessor;
  readonly #propagator = new W3CTraceContextPropagator();
  /** Spans of answered calls that end once the answer is written. */
  readonly #endsLater = new Set<() => void>();

  constructor(options: AuditTrailOptions) {
    this.#o = options;
    this.hub = new EventHub(options.settings.watchBuffer);
    this.#store = new StoreSpanProcessor(options.store, this.hub, options.settings, options.logger);
    const processors: SpanProcessor[] = [this.#store];
    const otlp = options.settings.otlp;
    if (otlp) {
      processors.push(
        // Every option given: the SDK would otherwise read OTEL_BSP_* itself (settings.ts has).
        new BatchSpanProcessor(new ReportingExporter(otlpExporter(otlp), otlp.url, options.logger), {
          maxQueueSize: otlp.batch.maxQueueSize,
          maxExportBatchSize: otlp.batch.maxExportBatchSize,
          scheduledDelayMillis: otlp.batch.scheduledDelayMs,
          exportTimeoutMillis: otlp.batch.exportTimeoutMs,
        }),
      );
    }
    for (const e of options.exporters ?? []) processors.push(new SimpleSpanProcessor(e));
    this.#provider = new NodeTracerProvider({
      resource: resourceFromAttributes({ ...otlp?.resourceAttributes, "service.name": otlp?.serviceName ?? "agent-workspace" }),
      sampler: new AlwaysOnSampler(),
      // The SDK's own defaults, given so that it reads no OTEL_*_LIMIT variable: the span is also
      // the database's audit record, which an export setting must not truncate.
      generalLimits: { attributeValueLengthLimit: Infinity, attributeCountLimit: 128 },
      spanLimits: {
        attributeValueLengthLimit: Infinity,
        attributeCountLimit: 128,
        linkCountLimit: 128,
        eventCountLimit: 128,
        attributePerEventCountLimit: 128,
        attributePerLinkCountLimit: 128,
      },
      spanProcessors: processors,
    });
    // Not registered globally: the server's tracer is its own, and tests run several servers in one process.
    this.#tracer = this.#provider.getTracer("agent-workspace");
  }

  /** The outer interceptor: place it outermost. */
  readonly outer: Interceptor = (next) => async (req) => {
    const procedure = `/${req.service.typeName}/${req.method.name}`;
    const tool = toolNameOf(req.method);
    const audit: ToolAudit | AdminAudit | undefined = tool !== "" ? TOOL_AUDIT[tool as ToolName] : ADMIN_AUDIT[procedure];
    if (audit === undefined) return next(req);
    // A server-streaming request has one message: read it here, so the summary (and a refusal's
    // record) has it, and hand the same message on.
    let message: unknown;
    let readError: unknown;
    if (req.stream) {
      const messages: unknown[] = [];
      try {
        for await (const m of (req as StreamRequest).message) messages.push(m);
      } catch (err) {
        readError = err;
      }
      message = messages[0];
      req = { ...req, message: createAsyncIterable(messages) } as StreamRequest;
    } else {
      message = (req as UnaryRequest).message;
    }
    const call = new AuditCall(this, req.header, procedure, tool, audit, message);
    if (readError !== undefined) throw call.failed(readError);
    req.contextValues.set(AUDIT_CALL, call);
    let res;
    try {
      res = await next(req);
    } catch (err) {
      throw call.failed(err, req.contextValues.get(PRINCIPAL));
    }
    if (!res.stream) {
      call.finished(res.message, req.contextValues.get(PRINCIPAL), req.contextValues.get(AFTER_ANSWER));
      return res;
    }
    return { ...res, message: call.observe((res as StreamResponse).message, req.contextValues.get(PRINCIPAL), req.signal) } as StreamResponse;
  };

  /** The inner interceptor: place it innermost, after permissions. */
  readonly inner: Interceptor = (next) => async (req) => {
    req.contextValues.get(AUDIT_CALL)?.admitted(req.contextValues.get(PRINCIPAL));
    return next(req);
  };

  /** @internal Starts a span. */
  startSpan(name: string, attrs: Attributes, header: Headers): Span {
    const parent = header.has("traceparent") ? this.#propagator.extract(ROOT_CONTEXT, header, HEADERS_GETTER) : ROOT_CONTEXT;
    return this.#tracer.startSpan(name, { kind: SpanKind.SERVER, attributes: attrs }, parent ?? otelContext.active());
  }

  /** A call's span that ends after its answer (AFTER_ANSWER): `flushed` and `close` end it first if it has not ended. */
  endLater(end: () => void): void {
    this.#endsLater.add(end);
  }

  /** Ends a span `endLater` took (once), logging what the end throws instead of throwing it. */
  endNow(end: () => void): void {
    if (!this.#endsLater.delete(end)) return;
    try {
      end();
    } catch (err) {
      this.#o.logger.error("a call's audit record could not be made", { error: String(err).slice(0, 300) });
    }
  }

  #endAll(): void {
    for (const end of [...this.#endsLater]) this.endNow(end);
  }

  get redactor(): Redactor {
    return this.#o.redactor;
  }

  describe(workspaceId: string): WorkspaceFacts | undefined {
    return workspaceId === "" ? undefined : this.#o.describe(workspaceId);
  }

  workspaceOfSession(sessionId: string): string {
    return this.#o.workspaceOfSession(sessionId);
  }

  /**
   * A tool operation the server runs itself (an agent type's setup command): a span like a call's,
   * with principal kind "server" and `procedure` naming what ran it, child of no caller's trace.
   */
  beginInternal(init: InternalCall): { end(result: Summary, error?: unknown): void } {
    const attrs: Attributes = {
      [SEMCONV.operationName]: "execute_tool",
      [SEMCONV.toolName]: init.tool,
      [ATTR.procedure]: init.procedure,
      [ATTR.principalKind]: "server",
    };
    const where = this.describe(init.workspaceId);
    for (const [key, value] of [[ATTR.workspaceId, init.workspaceId], [ATTR.sessionId, init.sessionId], [ATTR.agentType, init.agentType], [ATTR.provider, where?.provider]] as const) {
      if (value) attrs[key] = value;
    }
    const audit = TOOL_AUDIT[init.tool];
    try {
      setSummary(attrs, ATTR.request, (audit.request as (m: unknown, r: Redactor) => Summary)(init.request, this.#o.redactor));
    } catch {
      // A summary never fails a call.
    }
    const span = this.#tracer.startSpan(`execute_tool ${init.tool}`, { kind: SpanKind.INTERNAL, attributes: attrs }, ROOT_CONTEXT);
    const ids = span.spanContext();
    const start = (span as unknown as ReadableSpan).startTime;
    const started = recordFrom(attrs, { traceId: ids.traceId, spanId: ids.spanId, parentSpanId: "", name: `execute_tool ${init.tool}`, startUs: start[0] * 1_000_000 + Math.floor(start[1] / 1000), durationUs: -1 });
    this.hub.publish({ time: new Date(), workspaceId: started.workspaceId, sessionId: started.sessionId, payload: { case: "toolCallStarted", value: started } });
    let ended = false;
    return {
      end: (result, error) => {
        if (ended) return;
        ended = true;
        endSpan(span, attrs, result, error === undefined ? undefined : toConnectError(error));
      },
    };
  }

  /**
   * A destination the egress proxy refused to a command of `workspaceId`: a DENIED record of its
   * own (procedure "egress", principal kind "sandbox"), under the workspace's session, with the
   * destination asked for and the refusal's reason.
   */
  egressRefused(refusal: { workspaceId: string; host: string; port: number; reason: string; message: string }): void {
    const attrs: Attributes = { [SEMCONV.operationName]: "egress", [ATTR.procedure]: "egress", [ATTR.principalKind]: "sandbox" };
    const where = this.describe(refusal.workspaceId);
    for (const [key, value] of [[ATTR.workspaceId, refusal.workspaceId], [ATTR.sessionId, where?.sessionId], [ATTR.agentType, where?.agentType], [ATTR.provider, where?.provider]] as const) {
      if (value) attrs[key] = value;
    }
    setSummary(attrs, ATTR.request, { host: refusal.host.slice(0, 253), port: refusal.port });
    const span = this.#tracer.startSpan("egress", { kind: SpanKind.INTERNAL, attributes: attrs }, ROOT_CONTEXT);
    const error = toConnectError(new DomainError("EGRESS_DENIED", refusal.message.slice(0, 500)));
    endSpan(span, attrs, { reason: refusal.reason }, error);
  }

  /** Resolves once every finished call's record is in the database (a query then sees them all). */
  flushed(): Promise<void> {
    this.#endAll();
    return this.#store.flushed();
  }

  /** Ends the pipeline: pending records written, the exporter flushed (bounded in time). */
  async close(): Promise<void> {
    this.#endAll();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.#provider.shutdown().catch(() => undefined), new Promise((r) => (timer = setTimeout(r, 5000)))]);
    clearTimeout(timer);
    // Whatever the exporter did, the database gets every record.
    await this.#store.shutdown();
  }
}

/** One audited call: its span, and what it learns as it goes. */
class AuditCall {
  readonly #trail: AuditTrail;
  readonly #audit: ToolAudit | AdminAudit;
  readonly #tool: string;
  readonly #message: unknown;
  readonly #span: Span;
  readonly #attrs: Attributes;
  readonly #facts: Facts = {};
  readonly #result: Summary = {};
  #principal: Principal | undefined;
  #ended = false;
  readonly #endedSignal = Promise.withResolvers<void>();

  constructor(trail: AuditTrail, header: Headers, procedure: string, tool: string, audit: ToolAudit | AdminAudit, message: unknown) {
    this.#trail = trail;
    this.#audit = audit;
    this.#tool = tool;
    this.#message = message;
    const protocol = protocolOf(header);
    const service = procedure.slice(1, procedure.lastIndexOf("/"));
    const attrs: Attributes = {
      [SEMCONV.rpcSystem]: protocol === "connect" ? "connect_rpc" : "grpc",
      [SEMCONV.rpcService]: service,
      [SEMCONV.rpcMethod]: procedure.slice(procedure.lastIndexOf("/") + 1),
      [ATTR.procedure]: procedure,
      [ATTR.protocol]: protocol,
    };
    if (tool !== "") {
      attrs[SEMCONV.operationName] = "execute_tool";
      attrs[SEMCONV.toolName] = tool;
    }
    const callId = header.get(TOOL_CALL_ID_HEADER);
    if (callId !== null && TOOL_CALL_ID.test(callId)) attrs[SEMCONV.toolCallId] = callId;
    if (message !== undefined) {
      try {
        setSummary(attrs, ATTR.request, (this.#audit.request as (m: unknown, r: Redactor, f: Facts) => Summary)(message, trail.redactor, this.#facts));
      } catch {
        // A summary never fails a call; the record just has none.
      }
    }
    this.#attrs = attrs;
    this.#span = trail.startSpan(tool !== "" ? `execute_tool ${tool}` : procedure.slice(1), attrs, header);
  }

  /** The span's id. */
  get spanId(): string {
    return this.#span.spanContext().spanId;
  }

  /** The session the record names so far. */
  get sessionId(): string {
    return String(this.#attrs[ATTR.sessionId] ?? "");
  }

  /** Settles once the span has ended (and its ToolCallFinished was published). */
  get ended(): Promise<void> {
    return this.#endedSignal.promise;
  }

  /** Who called and where: from the principal, the request (after permissions chose the workspace) and the facts. */
  #identify(principal: Principal | undefined): void {
    if (principal !== undefined) this.#principal = principal;
    const p = this.#principal;
    const attrs = this.#attrs;
    const requested = (this.#message as { workspaceId?: unknown } | undefined)?.workspaceId;
    // A session token's call may leave the workspace empty: it means the session's own.
    const workspaceId = this.#facts.workspaceId || (typeof requested === "string" && requested !== "" ? requested : p?.kind === "session" && this.#tool !== "" ? this.#trail.workspaceOfSession(p.sessionId) : "");
    const known = this.#trail.describe(workspaceId);
    const set = (key: string, value: string | undefined) => {
      if (value) attrs[key] = value;
    };
    set(ATTR.workspaceId, workspaceId.slice(0, 64));
    set(ATTR.provider, this.#facts.provider || known?.provider);
    set(ATTR.sessionId, this.#facts.sessionId || (p?.kind === "session" ? p.sessionId : known?.sessionId));
    set(ATTR.agentType, this.#facts.agentType || (p?.kind === "session" ? p.agentType : known?.agentType));
    if (p !== undefined) {
      attrs[ATTR.principalKind] = p.kind;
      set(ATTR.principalId, p.kind === "operator" ? p.id : p.kind === "session" ? p.sessionId : "");
    }
  }

  #snapshot(): AuditRecord {
    const ctx = this.#span.spanContext();
    const start = (this.#span as unknown as ReadableSpan).startTime;
    return recordFrom(this.#attrs, {
      traceId: ctx.traceId,
      spanId: ctx.spanId,
      parentSpanId: (this.#span as unknown as ReadableSpan).parentSpanContext?.spanId ?? "",
      name: (this.#span as unknown as ReadableSpan).name,
      startUs: start ? start[0] * 1_000_000 + Math.floor(start[1] / 1000) : Date.now() * 1000,
      durationUs: -1,
    });
  }

  /** The call passed authentication and permissions and is about to run. */
  admitted(principal: Principal): void {
    // The span takes the attributes once, when it ends (endSpan); the live event reads them here.
    this.#identify(principal);
    if (!this.#trail.hub.listened) return;
    const r = this.#snapshot();
    this.#trail.hub.publish({ time: new Date(), workspaceId: r.workspaceId, sessionId: r.sessionId, payload: { case: "toolCallStarted", value: r } });
  }

  /**
   * A unary call's response arrived. Its span ends now, or, given `afterAnswer` (a direct path's
   * AFTER_ANSWER), once the answer is written: the record's duration then covers the write too.
   */
  finished(response: unknown, principal: Principal | undefined, afterAnswer?: (() => void)[]): void {
    try {
      // A tool's response goes into the result summary; an administrative one into the facts.
      const into = this.#tool !== "" ? this.#result : this.#facts;
      if ("response" in this.#audit && this.#audit.response) (this.#audit.response as (m: unknown, o: Summary | Facts) => void)(response, into);
    } catch {
      // As for requests: a summary never fails a call.
    }
    if (afterAnswer === undefined) {
      this.#end(undefined, principal);
      return;
    }
    const end = () => this.#end(undefined, principal);
    this.#trail.endLater(end);
    afterAnswer.push(() => this.#trail.endNow(end));
  }

  /** The call failed; returns the error to throw (with its detail, as the client will see it). */
  failed(err: unknown, principal?: Principal): ConnectError {
    const error = toConnectError(err);
    this.#end(error, principal);
    return error;
  }

  /** A streaming response, observed message by message; the span ends with the stream. */
  observe<T>(messages: AsyncIterable<T>, principal: Principal | undefined, signal: AbortSignal): AsyncIterable<T> {
    const call = this;
    const event = "event" in this.#audit ? (this.#audit.event as ((m: unknown, o: Summary) => void) | undefined) : undefined;
    return (async function* () {
      let completed = false;
      try {
        for await (const m of messages) {
          if (event) {
            try {
              event(m, call.#result);
            } catch {
              // A summary never fails a call.
            }
          }
          yield m;
        }
        completed = true;
      } catch (err) {
        throw call.failed(err, principal);
      } finally {
        // Ended neither by its last message nor by an error: the client went away mid-stream.
        if (!completed) call.#end(new ConnectError(signal.aborted ? "the client went away" : "the stream was abandoned", Code.Canceled), principal);
        else call.#end(undefined, principal);
      }
    })();
  }

  #end(error: ConnectError | undefined, principal: Principal | undefined): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#identify(principal);
    endSpan(this.#span, this.#attrs, this.#result, error);
    this.#endedSignal.resolve();
  }
}

/** Sets the outcome (from the error, if any) and the result on a span, and ends it. */
function endSpan(span: Span, attrs: Attributes, result: Summary, error: ConnectError | undefined): void {
  setSummary(attrs, ATTR.result, result);
  if (error === undefined) {
    attrs[ATTR.outcome] = "ok";
    attrs[ATTR.code] = "ok";
    attrs[SEMCONV.rpcGrpcStatusCode] = 0;
  } else {
    const reason = error.findDetails(ErrorDetailSchema)[0]?.reason ?? ErrorReason.UNSPECIFIED;
    const reasonName = reason === ErrorReason.UNSPECIFIED ? "" : ErrorReason[reason];
    attrs[ATTR.outcome] = outcomeOf(error);
    attrs[ATTR.code] = codeName(error.code);
    attrs[SEMCONV.rpcGrpcStatusCode] = error.code;
    if (reasonName) attrs[ATTR.reason] = reasonName;
    attrs[SEMCONV.errorType] = reasonName || codeName(error.code);
    // The reason, not the message: a message may quote what the caller sent.
    span.setStatus({ code: SpanStatusCode.ERROR, message: reasonName || codeName(error.code) });
  }
  span.setAttributes(attrs);
  span.end();
}


/** A collector failure is logged when it starts and when it ends, never per span. */
class ReportingExporter implements SpanExporter {
  readonly #inner: SpanExporter;
  readonly #url: string;
  readonly #logger: Logger;
  #failing = false;

  constructor(inner: SpanExporter, url: string, logger: Logger) {
    this.#inner = inner;
    this.#url = url;
    this.#logger = logger;
  }

  export(spans: ReadableSpan[], done: Parameters<SpanExporter["export"]>[1]): void {
    this.#inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS && !this.#failing) {
        this.#failing = true;
        this.#logger.warn("audit export to the OTLP collector failed; the audit trail stays in the database and export keeps trying", {
          endpoint: this.#url,
          error: String(result.error?.message ?? result.error ?? "unknown").slice(0, 300),
        });
      } else if (result.code === ExportResultCode.SUCCESS && this.#failing) {
        this.#failing = false;
        this.#logger.info("audit export to the OTLP collector works again", { endpoint: this.#url });
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush?.() ?? Promise.resolve();
  }
}

/**
 * The OTLP exporter for the configured protocol, with every setting given explicitly (compression
 * and TLS included), so the exporter's own fallbacks to the environment never decide anything.
 */
function otlpExporter(s: OtlpSettings): SpanExporter {
  // The exporters' CompressionAlgorithm enum has exactly these strings as values; it lives in a
  // package this one does not depend on directly.
  const compression = s.compression as unknown as NonNullable<NonNullable<ConstructorParameters<typeof import("@opentelemetry/exporter-trace-otlp-proto").OTLPTraceExporter>[0]>["compression"]>;
  const pem = (text: string | undefined) => (text === undefined ? undefined : Buffer.from(text));
  if (s.protocol === "grpc") {
    // Loaded only when asked for: @grpc/grpc-js is large.
    const { Metadata, credentials } = requireModule("@grpc/grpc-js") as typeof import("@grpc/grpc-js");
    const { OTLPTraceExporter } = requireModule("@opentelemetry/exporter-trace-otlp-grpc") as typeof import("@opentelemetry/exporter-trace-otlp-grpc");
    const metadata = new Metadata();
    for (const [k, v] of Object.entries(s.headers)) metadata.set(k, v);
    // The endpoint's scheme decides: http:// is plaintext, https:// TLS with the configured CA and client certificate.
    const channel = s.url.startsWith("https:") ? credentials.createSsl(pem(s.tls.ca) ?? null, pem(s.tls.key) ?? null, pem(s.tls.cert) ?? null) : credentials.createInsecure();
    return new OTLPTraceExporter({ url: s.url, metadata, timeoutMillis: s.timeoutMs, compression, credentials: channel });
  }
  const { OTLPTraceExporter } = requireModule("@opentelemetry/exporter-trace-otlp-proto") as typeof import("@opentelemetry/exporter-trace-otlp-proto");
  return new OTLPTraceExporter({
    url: s.url,
    headers: s.headers,
    timeoutMillis: s.timeoutMs,
    compression,
    httpAgentOptions: { keepAlive: true, ca: s.tls.ca, cert: s.tls.cert, key: s.tls.key },
  });
}


/**
 * Records are written in batches: at most this long after a call ended (a query waits for them
 * anyway), or at once when this many wait. One transaction per batch instead of per call.
 */
const BATCH_MS = 20;
const BATCH_ROWS = 256;

/** How many records may wait for the database before the oldest are dropped (only while it fails). */
const MAX_PENDING = 50_000;

/**
 * Writes every finished audit span to the database, and tells watchers. Records are handed to the
 * store's writer thread in batches (every 20 ms, or 256 records), so a burst of calls costs one
 * transaction and no call waits for the disk; a query waits for what is in flight first. A
 * database that fails (a full disk) is logged once, and the records wait for the next attempt.
 * Old records are pruned by age and count on a timer.
 */
class StoreSpanProcessor implements SpanProcessor {
  readonly #store: AuditStore;
  readonly #hub: EventHub<LivePayload>;
  readonly #settings: AuditSettings;
  readonly #logger: Logger;
  #pending: StoredAuditEvent[] = [];
  /** The chain of appends handed to the store, in order. */
  #written: Promise<void> = Promise.resolve();
  #scheduled = false;
  #failing = false;
  #sincePrune = 0;
  readonly #pruner: NodeJS.Timeout;

  constructor(store: AuditStore, hub: EventHub<LivePayload>, settings: AuditSettings, logger: Logger) {
    this.#store = store;
    this.#hub = hub;
    this.#settings = settings;
    this.#logger = logger;
    void this.prune();
    const every = settings.maxAgeMs > 0 ? Math.min(Math.max(Math.floor(settings.maxAgeMs / 10), 1000), 60_000) : 60_000;
    this.#pruner = setInterval(() => void this.prune(), every);
    this.#pruner.unref();
  }

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    if (span.attributes[ATTR.procedure] === undefined) return;
    const r = recordOfSpan(span);
    this.#pending.push({ startUs: r.startUs, traceId: r.traceId, spanId: r.spanId, workspaceId: r.workspaceId, sessionId: r.sessionId, agentType: r.agentType, tool: r.tool, outcome: r.outcome, record: JSON.stringify(r) });
    if (this.#pending.length > MAX_PENDING) this.#pending.splice(0, this.#pending.length - MAX_PENDING);
    if (this.#pending.length >= BATCH_ROWS) this.flush();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      setTimeout(() => this.flush(), BATCH_MS).unref();
    }
    if (!this.#hub.listened) return;
    const time = new Date();
    this.#hub.publish({ time, workspaceId: r.workspaceId, sessionId: r.sessionId, payload: { case: "toolCallFinished", value: r } });
    const path = r.request.path;
    if (r.outcome === "ok" && FILE_CHANGING_TOOLS.has(r.tool) && path !== undefined) {
      const value: FileChange = { workspaceId: r.workspaceId, sessionId: r.sessionId, path: relativePath(path), tool: r.tool, spanId: r.spanId, change: fileToolChange(r), treeChanged: false };
      this.#hub.publish({ time, workspaceId: r.workspaceId, sessionId: r.sessionId, payload: { case: "fileChanged", value } });
    }
  }

  /** Hands what is pending to the store; `#written` settles once it is committed. */
  flush(): void {
    this.#scheduled = false;
    if (this.#pending.length === 0) return;
    const rows = this.#pending;
    this.#pending = [];
    this.#written = this.#written.then(async () => {
      try {
        await this.#store.append(rows);
      } catch (err) {
        // Kept for the next attempt (in front of what came since), bounded; logged once per outage.
        this.#pending = [...rows, ...this.#pending].slice(-MAX_PENDING);
        if (!this.#failing) {
          this.#failing = true;
          this.#logger.error("audit records cannot be written to the database; they wait in memory and are retried", { error: String(err).slice(0, 300), records: rows.length });
        }
        return;
      }
      if (this.#failing) {
        this.#failing = false;
        this.#logger.info("audit records are written to the database again", { records: rows.length });
      }
      this.#sincePrune += rows.length;
      if (this.#settings.maxRows > 0 && this.#sincePrune >= Math.min(10_000, Math.max(1, Math.floor(this.#settings.maxRows / 10)))) await this.prune();
    });
  }

  /** Resolves once every record of a call that ended before it was called is committed. */
  async flushed(): Promise<void> {
    this.flush();
    await this.#written;
  }

  async prune(): Promise<void> {
    this.#sincePrune = 0;
    try {
      const before = this.#settings.maxAgeMs > 0 ? (Date.now() - this.#settings.maxAgeMs) * 1000 : 0;
      const n = await this.#store.prune(before, this.#settings.maxRows);
      if (n > 0) this.#logger.debug("audit records pruned", { records: n });
    } catch (err) {
      this.#logger.warn("audit records could not be pruned", { error: String(err).slice(0, 300) });
    }
  }

  forceFlush(): Promise<void> {
    return this.flushed();
  }

  shutdown(): Promise<void> {
    clearInterval(this.#pruner);
    return this.flushed();
  }
}
