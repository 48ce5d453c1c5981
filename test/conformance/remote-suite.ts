/**
 * The conformance suite of a provider whose sandboxes live behind a service's API (e2b,
 * kubernetes): the tool scenarios and the audit scenario over gRPC, against a server configured by
 * `env`, with spans also sent to a real OTLP receiver. `close` ends what the suite's file started
 * for it (a local stand-in of the service), after the server.
 */
import { registerAuditScenario } from "./audit-scenario.ts";
import { providerEnv, registerToolScenarios } from "./tool-scenarios.ts";
import { startOtlpHttpReceiver } from "../helpers/otlp-receiver.ts";
import { serverTest } from "../helpers/server.ts";

export async function registerRemoteSuite(provider: string, env: Record<string, string>, close: () => Promise<void>): Promise<void> {
  const otlp = await startOtlpHttpReceiver();
  const test = serverTest({ env: { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint } });
  test.after.always(async () => {
    await otlp.close();
    await close();
  });
  // Each scenario's workspace is a sandbox: a few at a time.
  registerToolScenarios(test, `${provider}/grpc`, (t) => providerEnv(t.context.server.clients.grpc, provider), { slots: 4 });
  registerAuditScenario(test, provider, (t) => t.context.server.clients.grpc, () => otlp);
}
