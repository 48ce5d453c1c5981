/**
 * The provider conformance suite against the `kubernetes` provider, through the real server over
 * gRPC: the real @kubernetes/client-node in the server talks to a local stand-in of the Kubernetes
 * API (helpers/k8s-standin.ts), whose pods are Docker containers, from an image with the executor
 * in it. No Kubernetes API server can be installed here; with KUBERNETES_TEST_CLUSTERS set (the
 * server's AGENT_WORKSPACE_KUBERNETES_CLUSTERS for a real cluster) the same suite runs there.
 */
import anyTest, { type TestFn } from "ava";
import Docker from "dockerode";
import { registerAuditScenario } from "./conformance/audit-scenario.ts";
import { providerEnv, registerToolScenarios } from "./conformance/tool-scenarios.ts";
import { payloadImage } from "./helpers/e2b.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import { kubernetesEnv, startClusterStandIn } from "./helpers/kubernetes.ts";
import { startOtlpHttpReceiver } from "./helpers/otlp-receiver.ts";
import { type ServerCtx, serverTest } from "./helpers/server.ts";

const real = process.env.KUBERNETES_TEST_CLUSTERS ?? "";
let env: Record<string, string> | undefined;
let closeStandIn: () => Promise<void> = async () => undefined;
if (real !== "") {
  env = { AGENT_WORKSPACE_KUBERNETES_CLUSTERS: real, ...(process.env.KUBERNETES_TEST_IMAGE ? { AGENT_WORKSPACE_KUBERNETES_IMAGE: process.env.KUBERNETES_TEST_IMAGE } : {}) };
} else {
  console.log("kubernetes conformance: no KUBERNETES_TEST_CLUSTERS, so the suite runs against the local stand-in of the Kubernetes API, not a cluster");
  if (gate(anyTest as TestFn<ServerCtx>, await probeEngines(), "docker", "kubernetes conformance suite (its stand-in's pods are containers)")) {
    const standIn = await startClusterStandIn();
    env = kubernetesEnv(standIn, await payloadImage(new Docker()));
    closeStandIn = () => standIn.close();
  }
}
if (env !== undefined) {
  const otlp = await startOtlpHttpReceiver();
  const test = serverTest({ env: { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint } });
  test.after.always(async () => {
    await otlp.close();
    await closeStandIn();
  });
  registerToolScenarios(test, "kubernetes/grpc", (t) => providerEnv(t.context.server.clients.grpc, "kubernetes"), { slots: 4 });
  registerAuditScenario(test, "kubernetes", (t) => t.context.server.clients.grpc, () => otlp);
}
