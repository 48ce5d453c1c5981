/**
 * The provider conformance suite against the local provider, through the real server, twice:
 * over gRPC (binary protobuf on HTTP/2 with prior knowledge) and over Connect (JSON on HTTP/1.1).
 */
import { registerAuditScenario } from "./conformance/audit-scenario.ts";
import { providerEnv, registerToolScenarios } from "./conformance/tool-scenarios.ts";
import { LOCAL_ONLY, serverTest } from "./helpers/server.ts";

const test = serverTest({ env: LOCAL_ONLY });

registerToolScenarios(test, "local/grpc", (t) => providerEnv(t.context.server.clients.grpc, "local"));
registerToolScenarios(test, "local/connect", (t) => providerEnv(t.context.server.clients.connect, "local"));
registerAuditScenario(test, "local", (t) => t.context.server.clients.connect);
