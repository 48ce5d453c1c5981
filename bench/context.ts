/**
 * What every benchmark section gets (the server child, clients, options) and returns (rows for
 * the table, raw data for the JSON report), plus workspace helpers shared by the sections.
 */
import path from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import type { Row } from "./report.ts";
import type { Clients, ServerProcess } from "./server-process.ts";

/** Shared state of one benchmark run. */
export interface BenchContext {
  server: ServerProcess;
  clients: Clients;
  /** The server's data directory (local workspaces live in `<dataDir>/workspaces/<id>`). */
  dataDir: string;
  quick: boolean;
  /** Progress output (stderr), so stdout keeps only the table. */
  log(msg: string): void;
}

/** What a section produces. */
export interface SectionResult {
  rows: Row[];
  /** Raw measurements for bench/results/latest.json. */
  data: Record<string, unknown>;
  /** Human-readable reasons for parts that did not run. */
  skipped: string[];
}

/** A workspace created for a section; `delete` is idempotent and never throws. */
export interface BenchWorkspace {
  id: string;
  provider: string;
  delete(): Promise<void>;
}

/** Workspaces created and not yet deleted, so an interrupted run can still remove them. */
export const liveWorkspaces = new Set<BenchWorkspace>();

/** Outcome of trying to create a workspace on a provider. */
export type CreateOutcome = { ok: true; workspace: BenchWorkspace } | { ok: false; reason: string };

/**
 * Creates a workspace on `provider` through the gRPC client. A provider the server does not
 * configure (UNKNOWN_PROVIDER), or one that fails, is reported as a reason instead of thrown.
 */
export async function createWorkspace(ctx: BenchContext, provider: string): Promise<CreateOutcome> {
  try {
    const res = await ctx.clients.grpc.workspaces.createWorkspace({ provider, labels: { purpose: "bench" } });
    const id = res.workspace?.id ?? "";
    let deleted = false;
    const workspace: BenchWorkspace = {
      id,
      provider,
      async delete() {
        if (deleted) return;
        deleted = true;
        liveWorkspaces.delete(workspace);
        try {
          await ctx.clients.grpc.workspaces.deleteWorkspace({ id });
        } catch (err) {
          ctx.log(`warning: could not delete workspace ${id}: ${String(err)}`);
        }
      },
    };
    liveWorkspaces.add(workspace);
    return { ok: true, workspace };
  } catch (err) {
    const ce = ConnectError.from(err);
    const reason = ce.findDetails(ErrorDetailSchema)[0]?.reason;
    if (reason === ErrorReason.UNKNOWN_PROVIDER) return { ok: false, reason: `provider '${provider}' is not configured on the server (${ce.rawMessage})` };
    return { ok: false, reason: `creating a '${provider}' workspace failed: ${ce.rawMessage}` };
  }
}

/** Host directory of a local-provider workspace. */
export function localWorkspaceDir(ctx: BenchContext, id: string): string {
  return path.join(ctx.dataDir, "workspaces", id);
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Bytes to mebibytes. */
export function mib(bytes: number): number {
  return bytes / (1024 * 1024);
}
