/**
 * What the tests of the stores (SQLite, PostgreSQL) share: typed clients of a real server process,
 * optionally with a session token, and a SIGKILL landing while a stream of agent type updates is
 * being confirmed.
 */
import { type Interceptor, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type { ExecutionContext } from "ava";
import { AuditService } from "../../gen/agentworkspace/v1/audit_pb.js";
import { ConfigService } from "../../gen/agentworkspace/v1/config_pb.js";
import { ProcessService } from "../../gen/agentworkspace/v1/process_pb.js";
import { ToolService } from "../../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../../gen/agentworkspace/v1/workspace_pb.js";
import { type ServerProcess, waitDead } from "./process.ts";

/** gRPC clients of `url` on their own connection, sending `token` as the bearer when given. */
export function clientsOf(url: string, token?: string) {
  const sessions = new Http2SessionManager(url);
  const auth: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({ baseUrl: url, sessionManager: sessions, interceptors: [auth] });
  return {
    config: createClient(ConfigService, transport),
    workspaces: createClient(WorkspaceService, transport),
    tools: createClient(ToolService, transport),
    audit: createClient(AuditService, transport),
    processes: createClient(ProcessService, transport),
    close: () => sessions.abort(),
  };
}

/** Kills the server's process group with SIGKILL and waits until the server is gone. */
export async function kill9(server: ServerProcess): Promise<void> {
  try {
    process.kill(-(server.child.pid as number), "SIGKILL");
  } catch {
    // Gone already (a test killed it).
  }
  await waitDead([server.serverPid], 10_000);
}

/**
 * Updates agent type `id`'s description to "update 1", "update 2", … one after another, and
 * kills the server with SIGKILL once at least 25 are confirmed, so the kill lands while one is in
 * flight. Resolves with the number confirmed before the kill.
 */
export async function killDuringUpdates(t: ExecutionContext, server: ServerProcess, config: ReturnType<typeof clientsOf>["config"], id: string): Promise<number> {
  let confirmed = 0;
  let stopped = false;
  const updates = (async () => {
    for (let i = 1; ; i++) {
      await config.updateAgentType({ agentType: { id, description: `update ${i}` } });
      confirmed = i;
    }
  })().catch(() => {
    stopped = true;
  });
  while (confirmed < 25 && !stopped) await new Promise((r) => setTimeout(r, 5));
  // At least 25: a fast server confirms another one or two before this loop looks again.
  t.true(confirmed >= 25 && !stopped, `updates were being confirmed when the kill came (${confirmed})`);
  await kill9(server);
  await updates;
  return confirmed;
}
