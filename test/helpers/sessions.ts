/**
 * Test fixtures for sessions: clients that carry a session token, a watcher that collects a
 * session's events until provisioning is over, and the git credentials file a server clones
 * with.
 */
import http from "node:http";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AuditService } from "../../gen/agentworkspace/v1/audit_pb.js";
import { ConfigService } from "../../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../../gen/agentworkspace/v1/tool_pb.js";
import { ProcessService } from "../../gen/agentworkspace/v1/process_pb.js";
import {
  type Session,
  type WatchSessionResponse,
  ProvisioningStage,
  SessionStatus,
  WorkspaceService,
} from "../../gen/agentworkspace/v1/workspace_pb.js";
import { bearer, type ClientSet } from "./server.ts";

const agent = new http.Agent({ keepAlive: false });

/** Connect (JSON over HTTP/1.1) clients sending `authorization: Bearer <token>` (none for ""). */
export function clientsWithToken(baseUrl: string, token: string): ClientSet {
  const transport = createConnectTransport({ baseUrl, httpVersion: "1.1", nodeOptions: { agent }, interceptors: token === "" ? [] : [bearer(token)] });
  return { tools: createClient(ToolService, transport), processes: createClient(ProcessService, transport), workspaces: createClient(WorkspaceService, transport), config: createClient(ConfigService, transport), audit: createClient(AuditService, transport) };
}

/** Writes a git credentials file (host → token) into `dir` and returns its path. */
export async function credentialsFile(dir: string, hosts: Record<string, string>): Promise<string> {
  const file = path.join(dir, "git-credentials.json");
  await writeFile(file, JSON.stringify(hosts), { mode: 0o600 });
  return file;
}

/** One event, flattened for assertions. */
export interface Seen {
  kind: string;
  stage?: string;
  status?: string;
  index?: number;
  ok?: boolean;
  detail?: string;
  text?: string;
}

/** A readable line per event, for order assertions and failure messages. */
export function describe(ev: WatchSessionResponse): Seen {
  const e = ev.event;
  switch (e.case) {
    case "status":
      return { kind: "status", status: SessionStatus[e.value.status], text: e.value.message };
    case "stageStarted":
      return { kind: "started", stage: ProvisioningStage[e.value.stage], index: e.value.index, detail: e.value.detail };
    case "stageEnded":
      return { kind: "ended", stage: ProvisioningStage[e.value.stage], index: e.value.index, ok: e.value.ok, text: e.value.message };
    case "output":
      return { kind: "output", stage: ProvisioningStage[e.value.stage], index: e.value.index, text: Buffer.from(e.value.data).toString("utf8") };
    case "warning":
      return { kind: "warning", stage: ProvisioningStage[e.value.stage], text: e.value.message };
    default:
      return { kind: "none" };
  }
}

/**
 * How long a test waits for a session of `provider` to be ready: a hang guard, not a timing. A
 * microvm session (an emulated VM booting, cloning and running setup) passed 60 s in a loaded CI,
 * and a git test's passed 180 s with three other providers' sessions and another test file beside it.
 */
export function readyGuardMs(provider: string): number {
  return provider === "microvm" ? 600_000 : 180_000;
}

/**
 * Every event of a session until provisioning is over, and the session then. When the deadline
 * (a hang guard) passes first, the error says what had come and how long it waited.
 */
export async function watchUntilReady(clients: ClientSet, id: string, timeoutMs = 180_000): Promise<{ events: Seen[]; session: Session }> {
  const events: Seen[] = [];
  const started = Date.now();
  try {
    for await (const ev of clients.workspaces.watchSession({ id }, { timeoutMs })) events.push(describe(ev));
  } catch (err) {
    const seen = outline(events).join(", ");
    throw new Error(`session ${id} not ready after ${Date.now() - started} ms (guard ${timeoutMs} ms); events: ${seen || "none"}`, { cause: err });
  }
  const { session } = await clients.workspaces.getSession({ id });
  if (!session) throw new Error("GetSession returned no session");
  return { events, session };
}

/** The events without output chunks, as "kind stage index ok" strings. */
export function outline(events: Seen[]): string[] {
  return events
    .filter((e) => e.kind !== "output")
    .map((e) => [e.kind, e.stage ?? e.status ?? "", e.index === undefined || e.stage === "SANDBOX" || e.stage === "CLONE" || e.stage === "WARM_POOL" ? "" : String(e.index), e.ok === undefined ? "" : e.ok ? "ok" : "failed"].filter((x) => x !== "").join(" "));
}

/** Polls `check` until it returns a value other than undefined, or fails after `ms`. */
export async function eventually<T>(check: () => Promise<T | undefined> | T | undefined, ms = 30_000, what = "condition"): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runs `command` with `clients` (in `workspaceId`, or the session token's own) and returns its stdout; a non-zero exit throws. */
export async function bashOk(clients: ClientSet, command: string, workspaceId = ""): Promise<string> {
  const r = await clients.tools.bash({ workspaceId, command });
  if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${r.stderr}`);
  return r.stdout;
}
