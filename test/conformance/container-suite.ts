/**
 * Registers the provider conformance suite for a container provider (over gRPC; the protocols
 * are covered by the local provider's run). Without the engine the suite is skipped with a
 * visible message, unless REQUIRE_DOCKER / REQUIRE_GVISOR demands it, in which case it fails.
 */
import anyTest, { type TestFn } from "ava";
import { gate, probeEngines } from "../helpers/engines.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { registerToolScenarios } from "./tool-scenarios.ts";

/** Registers the suite for `provider` in the calling test file. */
export async function registerContainerConformance(provider: "docker" | "gvisor"): Promise<void> {
  const test = anyTest as TestFn<{ server: TestServer }>;
  const engines = await probeEngines();
  if (!gate(test, engines, provider, "conformance suite")) return;
  test.before(async (t) => {
    t.context.server = await startServer();
  });
  test.after.always(async (t) => {
    await t.context.server?.close();
  });
  registerToolScenarios(test, `${provider}/grpc`, (t) => {
    const clients = t.context.server.clients.grpc;
    return {
      tools: clients.tools,
      workspaces: clients.workspaces,
      async createWorkspace() {
        const { workspace } = await clients.workspaces.createWorkspace({ provider, labels: { suite: "conformance" } });
        if (!workspace) throw new Error("CreateWorkspace returned no workspace");
        return workspace.id;
      },
    };
  });
}
