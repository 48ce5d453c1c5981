/** WorkspaceService: thin mapping between the API and the workspace and session managers. */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { mountFromProto } from "../mounts/host-mounts.ts";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  DigestSource,
  type SessionSchema,
  type SessionWarningSchema,
  type WatchSessionResponseSchema,
  ProvisioningStage,
  SessionStatus,
  WorkspaceService,
  WorkspaceStatus,
} from "../../gen/agentworkspace/v1/workspace_pb.js";
import type { TaskContext as ProtoTask } from "../../gen/agentworkspace/v1/workspace_pb.js";
import type { ProvisioningWarning, TaskContext } from "../../providers/types.ts";
import { PRINCIPAL } from "../auth/principal.ts";
import type { ResolvedDigest } from "../sessions/digests.ts";
import type { SessionManager } from "../sessions/session-manager.ts";
import type { SessionEvent, SessionRecord, SessionStatus as Status, Stage } from "../sessions/session.ts";
import { DomainError, hasReason } from "../../core/errors.ts";
import { WORKSPACE_ROOT } from "../../providers/executor/jail.ts";
import { formatSize } from "../workspace-limits.ts";
import type { WorkspaceManager, WorkspaceView } from "../workspace-manager.ts";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WorkspaceSchema } from "../../gen/agentworkspace/v1/workspace_pb.js";

const DIGEST_SOURCE: Record<ResolvedDigest["source"], DigestSource> = {
  session: DigestSource.SESSION,
  agent_type: DigestSource.AGENT_TYPE,
  placeholder: DigestSource.PLACEHOLDER,
};

const digestToProto = (d: ResolvedDigest) => ({ sectionKey: d.sectionKey, summary: d.summary, body: d.body, updatedAt: ts(d.updatedAt) });

const ts = (iso: string | undefined) => (iso === undefined ? undefined : timestampFromDate(new Date(iso)));

const STATUS = {
  creating: WorkspaceStatus.CREATING,
  ready: WorkspaceStatus.READY,
  stopped: WorkspaceStatus.STOPPED,
  failed: WorkspaceStatus.FAILED,
  paused: WorkspaceStatus.PAUSED,
} as const;

function toProto(v: WorkspaceView, sessionIds: string[] = []): MessageInitShape<typeof WorkspaceSchema> {
  const r = v.record;
  return {
    id: r.id,
    provider: r.provider,
    status: STATUS[v.status],
    root: WORKSPACE_ROOT,
    createdAt: timestampFromDate(r.createdAt),
    labels: r.labels,
    limits: { cpu: r.limits.cpus ? String(r.limits.cpus) : "", memory: formatSize(r.limits.memoryBytes), disk: formatSize(r.limits.diskBytes), pids: BigInt(r.limits.pids) },
    image: r.image,
    statusMessage: v.statusMessage,
    agentType: r.agentType?.id ?? "",
    ...(r.session ? { task: taskToProto(r.session.task), sessionId: r.session.id } : {}),
    mounts: (r.mounts ?? []).map((m) => ({ ...m, bytesCopied: BigInt(m.bytesCopied) })),
    sessionIds,
    providerDetails: Object.fromEntries(
      (r.provider === "microvm" ? ["accel", "start"] : r.provider === "docker" || r.provider === "gvisor" ? ["engine"] : r.provider === "e2b" ? ["sandboxId", "template"] : r.provider === "kubernetes" ? ["cluster", "namespace", "pod", "runtimeClass"] : []).filter((k) => r.state[k] !== undefined).map((k) => [k, r.state[k] as string]),
    ),
  };
}

const SESSION_STATUS: Record<Status, SessionStatus> = {
  provisioning: SessionStatus.PROVISIONING,
  active: SessionStatus.ACTIVE,
  degraded: SessionStatus.DEGRADED,
  ended: SessionStatus.ENDED,
};
const STATUS_OF = new Map(Object.entries(SESSION_STATUS).map(([k, v]) => [v, k as Status]));
const STAGE: Record<Stage, ProvisioningStage> = {
  sandbox: ProvisioningStage.SANDBOX,
  clone: ProvisioningStage.CLONE,
  setup_command: ProvisioningStage.SETUP_COMMAND,
  warm_pool: ProvisioningStage.WARM_POOL,
};

function warningToProto(w: ProvisioningWarning): MessageInitShape<typeof SessionWarningSchema> {
  return { stage: STAGE[w.stage], message: w.message, command: w.command, exitCode: w.exitCode, timedOut: w.timedOut };
}

function sessionToProto(r: SessionRecord): MessageInitShape<typeof SessionSchema> {
  return {
    id: r.id,
    agentType: r.agentType,
    status: SESSION_STATUS[r.status],
    workspaceId: r.status === "active" ? r.workspaceId : "",
    task: taskToProto(r.task),
    warnings: r.warnings.map(warningToProto),
    statusMessage: r.statusMessage,
    createdAt: ts(r.createdAt),
    readyAt: ts(r.readyAt),
    endedAt: ts(r.endedAt),
    lastActivityAt: ts(r.lastActivityAt),
    provider: r.provider,
    fromWarmPool: r.fromWarmPool,
    checkout: r.checkout,
    labels: r.labels,
    workspaceEnabled: r.workspaceEnabled,
    joinedWorkspace: r.joined === true,
  };
}

function eventToProto(ev: SessionEvent): MessageInitShape<typeof WatchSessionResponseSchema> {
  const time = timestampFromDate(ev.time);
  switch (ev.type) {
    case "status":
      return { time, event: { case: "status", value: { status: SESSION_STATUS[ev.status], message: ev.message, workspaceId: ev.workspaceId } } };
    case "stage_started":
      return { time, event: { case: "stageStarted", value: { stage: STAGE[ev.stage], detail: ev.detail, index: ev.index } } };
    case "output":
      return { time, event: { case: "output", value: { stage: STAGE[ev.stage], index: ev.index, data: ev.data, stderr: ev.stderr } } };
    case "stage_ended":
      return {
        time,
        event: {
          case: "stageEnded",
          value: { stage: STAGE[ev.stage], index: ev.index, ok: ev.ok, exitCode: ev.exitCode, timedOut: ev.timedOut, durationMs: BigInt(ev.durationMs), message: ev.message },
        },
      };
    case "warning":
      return { time, event: { case: "warning", value: warningToProto(ev.warning) } };
  }
}

/** A page of `all` after `token`, as ListWorkspaces and ListSessions page. */
function page<T>(all: T[], pageSize: number, token: string): { items: T[]; next: string } {
  if (pageSize < 0) throw new DomainError("INVALID_ARGUMENT", "page_size must not be negative", { metadata: { field: "page_size" } });
  const size = pageSize === 0 ? 100 : Math.min(pageSize, 1000);
  const start = token === "" ? 0 : Number.parseInt(token, 10);
  if (!Number.isInteger(start) || start < 0 || String(start) !== (token || "0")) {
    throw new DomainError("INVALID_ARGUMENT", "page_token is not a token from a previous response", { metadata: { field: "page_token" } });
  }
  return { items: all.slice(start, start + size), next: start + size < all.length ? String(start + size) : "" };
}

/**
 * The session a call may see: any, for an operator; for a session token only its own (an empty
 * id meaning its own), anything else being OUTSIDE_SESSION.
 */
function sessionIdFor(requested: string, hctx: HandlerContext): string {
  const principal = hctx.values.get(PRINCIPAL);
  if (principal.kind !== "session") return requested;
  if (requested !== "" && requested !== principal.sessionId) {
    throw new DomainError("OUTSIDE_SESSION", "A session token reaches only its own session", { metadata: { session_id: requested.slice(0, 64) } });
  }
  return principal.sessionId;
}

function taskToProto(t: TaskContext) {
  return { repositoryUrl: t.repositoryUrl, branch: t.branch, pullRequestNumber: BigInt(t.pullRequestNumber), baseBranch: t.baseBranch };
}

const task = (t: ProtoTask | undefined): TaskContext => ({
  repositoryUrl: t?.repositoryUrl ?? "",
  branch: t?.branch ?? "",
  pullRequestNumber: Number(t?.pullRequestNumber ?? 0n),
  baseBranch: t?.baseBranch ?? "",
});

/** Creates the WorkspaceService implementation. */
export function createWorkspaceService(workspaces: WorkspaceManager, sessions: SessionManager): ServiceImpl<typeof WorkspaceService> {
  return {
    async createWorkspace(req) {
      const limits = req.limits ?? { cpu: "", memory: "", disk: "", pids: 0n };
      const view = await workspaces.create({
        provider: req.provider,
        labels: req.labels,
        limits: { cpu: limits.cpu, memory: limits.memory, disk: limits.disk, pids: Number(limits.pids) },
        image: req.image,
        agentType: req.agentType,
        mounts: req.mounts.map(mountFromProto),
      });
      return { workspace: toProto(view, sessions.sessionsOf(view.record.id)) };
    },
    async getWorkspace(req) {
      return { workspace: toProto(await workspaces.get(req.id), sessions.sessionsOf(req.id)) };
    },
    async listWorkspaces(req) {
      const { items, next } = page(workspaces.listRecords(req.provider, req.labels), req.pageSize, req.pageToken);
      // A workspace deleted between the listing and its status is left out, not an error of the whole list.
      const views = await Promise.all(items.map((r) => workspaces.get(r.id).catch((err: unknown) => (hasReason(err, "WORKSPACE_NOT_FOUND") ? undefined : Promise.reject(err)))));
      return { workspaces: views.filter((v) => v !== undefined).map((v) => toProto(v, sessions.sessionsOf(v.record.id))), nextPageToken: next };
    },
    async deleteWorkspace(req) {
      await workspaces.delete(req.id);
      return {};
    },
    async pauseWorkspace(req) {
      return { workspace: toProto(await workspaces.pause(req.id), sessions.sessionsOf(req.id)) };
    },
    async resumeWorkspace(req) {
      return { workspace: toProto(await workspaces.resume(req.id), sessions.sessionsOf(req.id)) };
    },
    async startSession(req) {
      const { record, token } = await sessions.start({ agentType: req.agentType, task: task(req.task), labels: req.labels, mounts: req.mounts.map(mountFromProto), workspaceId: req.workspaceId });
      return { session: sessionToProto(record), sessionToken: token };
    },
    async getSession(req, hctx) {
      return { session: sessionToProto(sessions.get(sessionIdFor(req.id, hctx))) };
    },
    async listSessions(req) {
      const status = req.status === SessionStatus.UNSPECIFIED ? undefined : STATUS_OF.get(req.status);
      if (req.status !== SessionStatus.UNSPECIFIED && status === undefined) {
        throw new DomainError("INVALID_ARGUMENT", `Unknown status ${req.status}`, { metadata: { field: "status" } });
      }
      const { items, next } = page(sessions.list(req.agentType, status), req.pageSize, req.pageToken);
      return { sessions: items.map(sessionToProto), nextPageToken: next };
    },
    async endSession(req) {
      return { session: sessionToProto(await sessions.end(req.id, "Ended by EndSession")) };
    },
    async *watchSession(req, hctx) {
      for await (const ev of sessions.watch(sessionIdFor(req.id, hctx), req.follow, hctx.signal)) yield eventToProto(ev);
    },
    async setWorkspaceDigest(req, hctx) {
      const d = req.digest;
      const kept = await sessions.setDigest(sessionIdFor(req.sessionId, hctx), d?.sectionKey ?? "", d?.summary ?? "", d?.body ?? "");
      return { digest: digestToProto(kept) };
    },
    async getWorkspaceDigest(req, hctx) {
      const found = sessions.digest(sessionIdFor(req.sessionId, hctx), req.sectionKey);
      return { digest: digestToProto(found), source: DIGEST_SOURCE[found.source] };
    },
  };
}
