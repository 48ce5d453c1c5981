/**
 * The provider conformance suite against the local provider, through the real server, twice:
 * over gRPC (binary protobuf on HTTP/2 with prior knowledge) and over Connect (JSON on HTTP/1.1).
 */
import { registerAuditScenario } from "./conformance/audit-scenario.ts";
import { providerEnv, registerToolScenarios } from "./conformance/tool-scenarios.ts";
import { startOtlpHttpReceiver } from "./helpers/otlp-receiver.ts";
import { LOCAL_ONLY, serverTest } from "./helpers/server.ts";

// Audit spans go to a real OTLP endpoint as well as the database; the audit scenario checks both.
const otlp = await startOtlpHttpReceiver();
const test = serverTest({ env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint } });
test.after.always(() => otlp.close());

registerToolScenarios(test, "local/grpc", (t) => providerEnv(t.context.server.clients.grpc, "local"));
registerToolScenarios(test, "local/connect", (t) => providerEnv(t.context.server.clients.connect, "local"));
registerAuditScenario(test, "local", (t) => t.context.server.clients.connect, () => otlp);
