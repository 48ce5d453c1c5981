/**
 * The provider conformance suite against the `kubernetes` provider, through the real server over
 * gRPC: the real @kubernetes/client-node in the server talks to a local stand-in of the Kubernetes
 * API (helpers/k8s-standin.ts), whose pods are Docker containers, from an image with the executor
 * in it. No Kubernetes API server can be installed here; with KUBERNETES_TEST_CLUSTERS set (the
 * server's AGENT_WORKSPACE_KUBERNETES_CLUSTERS for a real cluster) the same suite runs there.
 */
import anyTest, { type TestFn } from "ava";
import Docker from "dockerode";
import { registerRemoteSuite } from "./conformance/remote-suite.ts";
import { payloadImage } from "./helpers/e2b.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import { kubernetesEnv, startClusterStandIn } from "./helpers/kubernetes.ts";
import type { ServerCtx } from "./helpers/server.ts";

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
if (env !== undefined) await registerRemoteSuite("kubernetes", env, closeStandIn);
