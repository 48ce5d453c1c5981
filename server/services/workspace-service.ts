/** WorkspaceService: thin mapping between the API and the WorkspaceManager. */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { WorkspaceService, WorkspaceStatus } from "../../gen/agentworkspace/v1/workspace_pb.js";
import { DomainError } from "../../core/errors.ts";
import { WORKSPACE_ROOT } from "../../providers/executor/jail.ts";
import { formatSize } from "../workspace-limits.ts";
import type { WorkspaceManager, WorkspaceView } from "../workspace-manager.ts";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WorkspaceSchema } from "../../gen/agentworkspace/v1/workspace_pb.js";

const STATUS = {
  creating: WorkspaceStatus.CREATING,
  ready: WorkspaceStatus.READY,
  stopped: WorkspaceStatus.STOPPED,
  failed: WorkspaceStatus.FAILED,
} as const;

function toProto(v: WorkspaceView): MessageInitShape<typeof WorkspaceSchema> {
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
  };
}

/** Creates the WorkspaceService implementation. */
export function createWorkspaceService(workspaces: WorkspaceManager): ServiceImpl<typeof WorkspaceService> {
  return {
    async createWorkspace(req) {
      const limits = req.limits ?? { cpu: "", memory: "", disk: "", pids: 0n };
      const view = await workspaces.create({
        provider: req.provider,
        labels: req.labels,
        limits: { cpu: limits.cpu, memory: limits.memory, disk: limits.disk, pids: Number(limits.pids) },
        image: req.image,
        agentType: req.agentType,
      });
      return { workspace: toProto(view) };
    },
    async getWorkspace(req) {
      return { workspace: toProto(await workspaces.get(req.id)) };
    },
    async listWorkspaces(req) {
      if (req.pageSize < 0) throw new DomainError("INVALID_ARGUMENT", "page_size must not be negative", { metadata: { field: "page_size" } });
      const size = req.pageSize === 0 ? 100 : Math.min(req.pageSize, 1000);
      const start = req.pageToken === "" ? 0 : Number.parseInt(req.pageToken, 10);
      if (!Number.isInteger(start) || start < 0 || String(start) !== (req.pageToken || "0")) {
        throw new DomainError("INVALID_ARGUMENT", "page_token is not a token from a previous response", { metadata: { field: "page_token" } });
      }
      const all = workspaces.listRecords(req.provider, req.labels);
      const page = all.slice(start, start + size);
      const views = await Promise.all(page.map((r) => workspaces.get(r.id)));
      return { workspaces: views.map(toProto), nextPageToken: start + size < all.length ? String(start + size) : "" };
    },
    async deleteWorkspace(req) {
      await workspaces.delete(req.id);
      return {};
    },
  };
}
