/**
 * Section (m): what the audit trail costs a tool call, and proof that watchers cannot slow one.
 *
 * Every call is a span written to the database and offered to every WatchEvents reader. Three
 * series of the same cheap call (ListFiles of a small directory, local provider), interleaved
 * round-robin so background load touches each alike, each in its own workspace:
 * - no watcher follows the workspace (the baseline: the call with its span and record);
 * - a watcher reads every event of its workspace as it comes (Connect over HTTP/1.1);
 * - a watcher of its workspace has stopped reading (an HTTP/2 stream paused with a 256-byte
 *   window): its queue is full, so each event is counted as dropped instead.
 * Goals: p50 with a live watcher at most 1.2× the baseline, with a stalled one at most 1.1× (a
 * stalled reader costs a counter increment). It also reports the events the stalled reader lost,
 * and the redactor's cost on a typical command line against the call itself.
 */
import http from "node:http";
import http2 from "node:http2";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AuditService } from "../gen/agentworkspace/v1/audit_pb.js";
import { Redactor } from "../server/audit/redact.ts";
import { type BenchContext, type SectionResult, createWorkspace, interleave, timed } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

/** Options of section (m). */
export interface AuditOptions {
  iterations: number;
  warmup: number;
}

const LIVE_GOAL = 1.2;
const STALLED_GOAL = 1.1;

/** A WatchEvents stream (Connect, JSON, HTTP/2) that reads its first message and then stops reading. */
function stalledWatcher(url: string, workspaceId: string): { close(): void; bytes(): number } {
  const session = http2.connect(url, { settings: { initialWindowSize: 256 } });
  const body = Buffer.from(JSON.stringify({ workspaceId }));
  const envelope = Buffer.alloc(5 + body.length);
  envelope.writeUInt32BE(body.length, 1);
  body.copy(envelope, 5);
  const req = session.request({ ":method": "POST", ":path": "/agentworkspace.v1.AuditService/WatchEvents", "content-type": "application/connect+json", "connect-protocol-version": "1" });
  req.end(envelope);
  let received = 0;
  req.on("data", (c: Buffer) => {
    received += c.length;
    req.pause();
  });
  req.on("error", () => undefined);
  return {
    bytes: () => received,
    close() {
      req.close();
      session.destroy();
    },
  };
}

/** Runs section (m). */
export async function benchAudit(ctx: BenchContext, options: AuditOptions): Promise<SectionResult> {
  const made = await Promise.all([createWorkspace(ctx, "local"), createWorkspace(ctx, "local"), createWorkspace(ctx, "local")]);
  const workspaces = made.flatMap((m) => (m.ok ? [m.workspace] : []));
  if (workspaces.length !== 3) return { rows: [], data: {}, skipped: [`audit: ${made.find((m) => !m.ok && "reason" in m)?.["reason" as never] ?? "no workspace"}`] };
  const [plain, live, stalled] = workspaces;
  const tools = ctx.clients.grpc.tools;
  for (const w of workspaces) {
    for (let i = 0; i < 5; i++) await tools.writeFile({ workspaceId: w.id, path: `f${i}.txt`, content: "x" });
  }

  // The live watcher: reads everything as it comes.
  const agent = new http.Agent({ keepAlive: true });
  const audit = createClient(AuditService, createConnectTransport({ baseUrl: ctx.server.url, httpVersion: "1.1", nodeOptions: { agent } }));
  const abort = new AbortController();
  let liveEvents = 0;
  let liveDropped = 0;
  const reading = (async () => {
    try {
      for await (const m of audit.watchEvents({ workspaceId: live.id }, { signal: abort.signal })) {
        liveEvents++;
        if (m.event.case === "eventsDropped") liveDropped += Number(m.event.value.count);
      }
    } catch {
      // Aborted at the end.
    }
  })();
  const stall = stalledWatcher(ctx.server.url, stalled.id);
  // Fill the stalled reader's window, the server's write budget and its queue before measuring.
  for (let i = 0; i < 3000; i++) await tools.listFiles({ workspaceId: stalled.id });

  const call = (workspaceId: string) => timed(() => tools.listFiles({ workspaceId }));
  const samples = await interleave({ plain: call(plain.id), live: call(live.id), stalled: call(stalled.id) }, options.warmup, options.iterations);
  abort.abort();
  await reading;
  stall.close();
  agent.destroy();
  // What the stalled reader lost: every event of its workspace past what it held.
  const finished = await audit.listAuditEvents({ workspaceId: stalled.id, pageSize: 1 }).catch(() => undefined);

  const base = summarize(samples.plain);
  const withLive = summarize(samples.live);
  const withStalled = summarize(samples.stalled);
  const redactor = new Redactor(["an-operator-key-0123456789"]);
  const command = 'cd src && curl -sf -H "Authorization: Bearer abc.def.ghi" https://example.com/api | jq .items > out.json && npm test -- --watch=false 2>&1 | tee ../test.log';
  const redact: number[] = [];
  for (let i = 0; i < 20_000; i++) {
    const t0 = performance.now();
    redactor.redact(command);
    redact.push(performance.now() - t0);
  }
  const redactSummary = summarize(redact);
  const rows: Row[] = [
    {
      section: "m audit",
      metric: "ListFiles p50 with a live WatchEvents reader of its workspace",
      server: round(withLive.p50, 3),
      baseline: round(base.p50, 3),
      unit: "ms",
      ratio: round(withLive.p50 / base.p50, 3),
      goal: `≤ ${LIVE_GOAL}× the same call unwatched`,
      pass: withLive.p50 / base.p50 <= LIVE_GOAL,
    },
    {
      section: "m audit",
      metric: "ListFiles p50 with a stalled WatchEvents reader of its workspace",
      server: round(withStalled.p50, 3),
      baseline: round(base.p50, 3),
      unit: "ms",
      ratio: round(withStalled.p50 / base.p50, 3),
      goal: `≤ ${STALLED_GOAL}× the same call unwatched`,
      pass: withStalled.p50 / base.p50 <= STALLED_GOAL,
    },
    {
      section: "m audit",
      metric: "redacting a typical command line (p50), against the unwatched call",
      server: round(redactSummary.p50, 4),
      baseline: round(base.p50, 3),
      unit: "ms",
      ratio: round(redactSummary.p50 / base.p50, 4),
      goal: "≤ 0.02× the call",
      pass: redactSummary.p50 / base.p50 <= 0.02,
    },
  ];
  return {
    rows,
    data: { unwatched: base, liveWatcher: withLive, stalledWatcher: withStalled, redactMs: redactSummary, liveEvents, liveDropped, stalledBytesRead: stall.bytes(), recordsListed: finished?.events.length ?? 0 },
    skipped: [],
  };
}
