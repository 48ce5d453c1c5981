/**
 * Registers the provider conformance suite for a sandboxed provider (over gRPC; the protocols
 * are covered by the local provider's run). Without the engine the suite is skipped with a
 * visible message, unless REQUIRE_DOCKER / REQUIRE_GVISOR / REQUIRE_MICROVM demands it, in which
 * case it fails.
 */
import anyTest, { type TestFn } from "ava";
import { gate, microvmGate, probeEngines } from "../helpers/engines.ts";
import { startOtlpHttpReceiver } from "../helpers/otlp-receiver.ts";
import { type ServerCtx, serverTest } from "../helpers/server.ts";
import { registerAuditScenario } from "./audit-scenario.ts";
import { providerEnv, registerToolScenarios } from "./tool-scenarios.ts";

/** Registers the suite for `provider` in the calling test file. */
export async function registerContainerConformance(provider: "docker" | "gvisor" | "microvm"): Promise<void> {
  const available = provider === "microvm" ? microvmGate(anyTest as TestFn<ServerCtx>, "conformance suite") : gate(anyTest as TestFn<ServerCtx>, await probeEngines(), provider, "conformance suite");
  if (!available) return;
  // The server exports its audit spans to a real OTLP endpoint; the audit scenario checks both ends.
  const otlp = await startOtlpHttpReceiver();
  const test = serverTest({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint } });
  test.after.always(() => otlp.close());
  // A VM per scenario: three at a time keep both cores busy without a queue of emulated guests.
  registerToolScenarios(test, `${provider}/grpc`, (t) => providerEnv(t.context.server.clients.grpc, provider), provider === "microvm" ? { slots: 3 } : {});
  registerAuditScenario(test, provider, (t) => t.context.server.clients.grpc, () => otlp);
}
