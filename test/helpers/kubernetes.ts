/**
 * What the kubernetes tests share: a local stand-in of the Kubernetes API (k8s-standin.ts) with the
 * namespaces "agents" and "batch", and the server settings that point the kubernetes provider at
 * it, one configured cluster per namespace.
 */
import Docker from "dockerode";
import { type K8sStandIn, startK8sStandIn } from "./k8s-standin.ts";

/** Whether the Docker engine has gVisor's runtime (so the stand-in offers the "gvisor" RuntimeClass). */
export async function hasRunsc(docker = new Docker()): Promise<boolean> {
  return "runsc" in (((await docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {});
}

/** A stand-in with two namespaces and the gVisor RuntimeClass (runsc) where the engine has it. */
export async function startClusterStandIn(): Promise<K8sStandIn> {
  const docker = new Docker();
  return startK8sStandIn({ docker, namespaces: ["agents", "batch"], runtimeClasses: (await hasRunsc(docker)) ? { gvisor: "runsc" } : {} });
}

/** The server's environment for the kubernetes provider on `standIn` (clusters "main" → agents, "batch" → batch, labelled). */
export function kubernetesEnv(standIn: K8sStandIn, image: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    AGENT_WORKSPACE_KUBERNETES_CLUSTERS: JSON.stringify([
      { name: "main", kubeconfig: standIn.kubeconfig, namespace: "agents", labels: { pool: "main" } },
      { name: "batch", kubeconfig: standIn.kubeconfig, namespace: "batch", labels: { pool: "batch" } },
    ]),
    AGENT_WORKSPACE_KUBERNETES_IMAGE: image,
    ...extra,
  };
}
