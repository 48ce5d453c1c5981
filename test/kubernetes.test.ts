/**
 * The `kubernetes` provider through the real server, its real client library in front of a local
 * stand-in of the Kubernetes API (helpers/k8s-standin.ts; no API server can be installed here): a
 * pod from a bare image gets the executor copied in over exec and runs every tool with no service
 * account token, no network and a read-only root; an agent type's RuntimeClass and engine labels
 * place its pods; a cluster that fails or stops answering is reported at once, never retried
 * forever; orphaned pods are found by their labels.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import anyTest, { type TestFn } from "ava";
import Docker from "dockerode";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { E2B_BASE_IMAGE, payloadImage } from "./helpers/e2b.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import type { K8sStandIn } from "./helpers/k8s-standin.ts";
import { hasRunsc, kubernetesEnv, startClusterStandIn } from "./helpers/kubernetes.ts";
import { startServer } from "./helpers/server.ts";

const test = anyTest as TestFn<{ standIn: K8sStandIn; image: string }>;
const available = gate(test, await probeEngines(), "docker", "kubernetes provider (its stand-in's pods are containers)");

/** The code and reason of a failed call. */
async function failure(call: Promise<unknown>): Promise<{ code: number; reason: number; message: string }> {
  const err = (await call.then(
    () => undefined,
    (e: unknown) => e,
  )) as { code: number; message: string; findDetails: (s: unknown) => Array<{ reason: number }> } | undefined;
  return { code: err?.code ?? 0, reason: err?.findDetails(ErrorDetailSchema)[0]?.reason ?? 0, message: err?.message ?? "" };
}

if (available) {
  test.before(async (t) => {
    t.context.standIn = await startClusterStandIn();
    t.context.image = await payloadImage(new Docker());
  });
  test.after.always(async (t) => {
    await t.context.standIn?.close();
  });

  test.serial("a pod from a bare image gets the executor copied in over exec; every tool works in it, as uid 1000, with no token, no network and a read-only root; deleting the workspace deletes the pod", async (t) => {
    const { standIn } = t.context;
    const logs: string[] = [];
    const server = await startServer({ env: kubernetesEnv(standIn, E2B_BASE_IMAGE), onLog: (l) => logs.push(l) });
    try {
      const c = server.clients.grpc;
      const ws = (await c.workspaces.createWorkspace({ provider: "kubernetes" })).workspace!.id;
      t.true(logs.some((l) => l.includes('"msg":"copied the executor into a pod"')));
      const details = (await c.workspaces.getWorkspace({ id: ws })).workspace?.providerDetails ?? {};
      t.deepEqual([details.cluster, details.namespace, details.pod], ["main", "agents", `aw-${ws}`]);
      t.true(standIn.pods().has(`agents/aw-${ws}`));
      t.true(standIn.networkPolicies().has("agents/agent-workspace-deny-all"), "the namespace got its deny policy");
      await c.tools.writeFile({ workspaceId: ws, path: "a.txt", content: "alpha\nbeta\n" });
      const r = await c.tools.bash({
        workspaceId: ws,
        command: "id -u; pwd; wc -l < a.txt; test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no-token; touch /etc/x 2>/dev/null && echo rw || echo ro; grep -c : /proc/net/dev",
      });
      t.deepEqual(r.stdout.split("\n").slice(0, 6), ["1000", "/workspace", "2", "no-token", "ro", "1"], "uid, cwd, file, no service account token, read-only root, only lo");
      t.is((await c.tools.grep({ workspaceId: ws, pattern: "bet" })).matches.length, 1);
      const big = await c.tools.bash({ workspaceId: ws, command: "head -c 3000000 /dev/urandom | tee r.bin | sha256sum | cut -c1-64; sha256sum r.bin | cut -c1-64" });
      const [one, two] = big.stdout.split("\n");
      t.is(one, two);
      await c.workspaces.deleteWorkspace({ id: ws });
      t.false(standIn.pods().has(`agents/aw-${ws}`), "the pod is deleted with the workspace");
    } finally {
      await server.close();
    }
  });

  test.serial("an agent type's engine_labels choose the cluster and its runtime_class the pod's RuntimeClass; an unknown RuntimeClass is refused as the cluster refuses it", async (t) => {
    const { standIn, image } = t.context;
    const server = await startServer({ env: kubernetesEnv(standIn, image) });
    try {
      const c = server.clients.grpc;
      await c.config.createAgentType({ agentType: { id: "batcher", workspace: { enabled: true, provider: "kubernetes", tools: ["bash"], engineLabels: { pool: "batch" } } } });
      const ws = (await c.workspaces.createWorkspace({ agentType: "batcher" })).workspace!.id;
      t.is((await c.workspaces.getWorkspace({ id: ws })).workspace?.providerDetails.namespace, "batch");
      t.is((await c.tools.bash({ workspaceId: ws, command: "echo batch" })).stdout, "batch\n");
      await c.workspaces.deleteWorkspace({ id: ws });
      await c.config.createAgentType({ agentType: { id: "odd-runtime", workspace: { enabled: true, provider: "kubernetes", tools: ["bash"], runtimeClass: "kata" } } });
      const refused = await failure(c.workspaces.createWorkspace({ agentType: "odd-runtime" }));
      t.is(refused.code, Code.InvalidArgument);
      t.regex(refused.message, /Kubernetes cluster 'main' refused to make the workspace's pod/);
      const bad = await failure(c.config.createAgentType({ agentType: { id: "bad-runtime", workspace: { enabled: true, provider: "kubernetes", runtimeClass: "Not_A_Name" } } }));
      t.is(bad.code, Code.InvalidArgument);
      if (await hasRunsc()) {
        await c.config.createAgentType({ agentType: { id: "gvisor-pods", workspace: { enabled: true, provider: "kubernetes", tools: ["bash"], runtimeClass: "gvisor" } } });
        const g = (await c.workspaces.createWorkspace({ agentType: "gvisor-pods" })).workspace!.id;
        t.is((await c.workspaces.getWorkspace({ id: g })).workspace?.providerDetails.runtimeClass, "gvisor");
        const container = standIn.pods().get(`agents/aw-${g}`) ?? "";
        t.is(((await new Docker().getContainer(container).inspect()) as { HostConfig: { Runtime?: string } }).HostConfig.Runtime, "runsc", "the pod runs under runsc");
        t.is((await c.tools.bash({ workspaceId: g, command: "echo in-gvisor" })).stdout, "in-gvisor\n");
        await c.workspaces.deleteWorkspace({ id: g });
      } else {
        t.log("no runsc on this engine: the gVisor RuntimeClass was not exercised");
      }
    } finally {
      await server.close();
    }
  });

  test.serial("a cluster that answers 503, or stops answering, is reported at once (UNAVAILABLE / PROVIDER_UNAVAILABLE naming it), not retried; the server keeps serving", async (t) => {
    const { standIn, image } = t.context;
    // 4 s per request: with 1.5 s a loaded host (forks of 5 ms) failed the first, healthy create.
    const server = await startServer({ env: kubernetesEnv(standIn, image, { AGENT_WORKSPACE_KUBERNETES_REQUEST_TIMEOUT_MS: "4000" }) });
    try {
      const c = server.clients.grpc;
      // One failure: the next cluster takes the workspace.
      standIn.failNext(1);
      const moved = (await c.workspaces.createWorkspace({ provider: "kubernetes" })).workspace!.id;
      t.is((await c.workspaces.getWorkspace({ id: moved })).workspace?.providerDetails.cluster, "batch");
      await c.workspaces.deleteWorkspace({ id: moved });
      // Both failing: reported, naming the last tried.
      standIn.failNext(2);
      const failed = await failure(c.workspaces.createWorkspace({ provider: "kubernetes" }));
      t.is(failed.code, Code.Unavailable);
      t.is(failed.reason, ErrorReason.PROVIDER_UNAVAILABLE);
      t.regex(failed.message, /Kubernetes cluster 'batch' could not make the (namespace's network policy|workspace's pod) \(HTTP 503\)/);
      standIn.stall();
      const began = Date.now();
      const stalled = await failure(c.workspaces.createWorkspace({ provider: "kubernetes" }));
      standIn.unstall();
      t.is(stalled.code, Code.Unavailable);
      t.regex(stalled.message, /could not .* \(no answer in 4000 ms\)/);
      t.true(Date.now() - began < 20_000, "two clusters tried, each within its deadline");
      t.truthy((await c.workspaces.createWorkspace({ provider: "local" })).workspace?.id);
    } finally {
      standIn.unstall();
      await server.close();
    }
  });

  test.serial("a pod a server left behind (labelled with this server and a workspace it has no record of) is removed at start with AGENT_WORKSPACE_CLEANUP_ORPHANS=1; another server's is left", async (t) => {
    const { standIn, image } = t.context;
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-k8s-orphans-"));
    await writeFile(path.join(dataDir, "instance-id"), "0123456789abcdef\n");
    const kc = new KubeConfig();
    kc.loadFromFile(standIn.kubeconfig);
    const core = kc.makeApiClient(CoreV1Api);
    const pod = (name: string, instance: string, ws: string) => ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name, labels: { "app.kubernetes.io/managed-by": "agent-workspace", "agent-workspace/instance": instance, "agent-workspace/workspace": ws } },
      spec: { automountServiceAccountToken: false, containers: [{ name: "sandbox", image, command: ["sleep", "600"] }] },
    });
    await core.createNamespacedPod({ namespace: "agents", body: pod("aw-ws-0000000000000000", "0123456789abcdef", "ws-0000000000000000") });
    await core.createNamespacedPod({ namespace: "agents", body: pod("aw-ws-1111111111111111", "fedcba9876543210", "ws-1111111111111111") });
    const logs: string[] = [];
    const server = await startServer({ dataDir, env: kubernetesEnv(standIn, image, { AGENT_WORKSPACE_CLEANUP_ORPHANS: "1" }), onLog: (l) => logs.push(l) });
    try {
      const deadline = Date.now() + 10_000;
      while (standIn.pods().has("agents/aw-ws-0000000000000000") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      t.false(standIn.pods().has("agents/aw-ws-0000000000000000"), "this server's orphan is removed");
      t.true(standIn.pods().has("agents/aw-ws-1111111111111111"), "another server's pod is left alone");
      t.true(logs.some((l) => l.includes('"msg":"removing orphaned workspace sandbox"') && l.includes("ws-0000000000000000")));
    } finally {
      await server.close();
      await core.deleteNamespacedPod({ name: "aw-ws-1111111111111111", namespace: "agents" }).catch(() => undefined);
      await rm(dataDir, { recursive: true, force: true });
    }
  });
}
