/**
 * The provider conformance suite against the local provider, through the real server, twice:
 * over gRPC (binary protobuf on HTTP/2 with prior knowledge) and over Connect (JSON on HTTP/1.1).
 */
import anyTest, { type TestFn } from "ava";
import { registerToolScenarios, type ScenarioEnv } from "./conformance/tool-scenarios.ts";
import { startServer, type ClientSet, type TestServer } from "./helpers/server.ts";

interface Ctx {
  server: TestServer;
}

const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  // Container providers are not needed here; "off" keeps startup independent of a Docker engine.
  t.context.server = await startServer({ env: { AGENT_WORKSPACE_DOCKER: "off" } });
});

test.after.always(async (t) => {
  await t.context.server?.close();
});

function env(clients: ClientSet): ScenarioEnv {
  return {
    tools: clients.tools,
    workspaces: clients.workspaces,
    async createWorkspace() {
      const { workspace } = await clients.workspaces.createWorkspace({ provider: "local", labels: { suite: "conformance" } });
      if (!workspace) throw new Error("CreateWorkspace returned no workspace");
      return workspace.id;
    },
  };
}

registerToolScenarios(test, "local/grpc", (t) => env(t.context.server.clients.grpc));
registerToolScenarios(test, "local/connect", (t) => env(t.context.server.clients.connect));
