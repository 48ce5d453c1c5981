/**
 * The manifests the kubernetes provider sends, kept as fixtures (test/fixtures/kubernetes/) and
 * validated against Kubernetes' published OpenAPI schema through kubernetes-models' generated
 * validators: what the local stand-in of the API accepts, a real API server must accept too. A
 * change to a manifest shows up as a fixture diff (UPDATE_FIXTURES=1 writes them anew).
 */
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import test from "ava";
import { Pod } from "kubernetes-models/v1/Pod";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import { denyPolicyManifest, podManifest } from "../providers/kubernetes.ts";

const FIXTURES = path.join(import.meta.dirname, "fixtures", "kubernetes");

const cases = {
  "pod-defaults": podManifest({ id: "ws-0123456789abcdef", namespace: "agents", instance: "00112233445566aa", image: "agent-workspace-base:bookworm", limits: { cpus: 0, memoryBytes: 0, diskBytes: 0, pids: 0 }, runtimeClass: "", network: "none" }),
  "pod-limits-gvisor-egress": podManifest({
    id: "ws-fedcba9876543210",
    namespace: "agents",
    instance: "00112233445566aa",
    image: "registry.example/agents/node:22",
    limits: { cpus: 1.5, memoryBytes: 2 * 2 ** 30, diskBytes: 10 * 2 ** 30, pids: 512 },
    runtimeClass: "gvisor",
    network: "egress",
  }),
  "network-policy": denyPolicyManifest("agents"),
};

for (const [name, manifest] of Object.entries(cases)) {
  test(`${name}: valid against the Kubernetes OpenAPI schema, and as kept in the fixture`, async (t) => {
    const model = manifest.kind === "Pod" ? new Pod(manifest as ConstructorParameters<typeof Pod>[0]) : new NetworkPolicy(manifest as ConstructorParameters<typeof NetworkPolicy>[0]);
    t.notThrows(() => model.validate());
    const file = path.join(FIXTURES, `${name}.json`);
    const text = `${JSON.stringify(manifest, null, 2)}\n`;
    if (process.env.UPDATE_FIXTURES === "1") await writeFile(file, text);
    t.is(text, await readFile(file, "utf8"));
  });
}

test("the schema check is real: a pod whose container lacks its name, or whose restartPolicy is a number, is refused", (t) => {
  const pod = structuredClone(cases["pod-defaults"]);
  delete (pod.spec?.containers[0] as { name?: string }).name;
  t.throws(() => new Pod(pod as ConstructorParameters<typeof Pod>[0]).validate());
  const bad = { ...cases["pod-defaults"], spec: { ...cases["pod-defaults"].spec, restartPolicy: 42 } };
  t.throws(() => new Pod(bad as unknown as ConstructorParameters<typeof Pod>[0]).validate());
});
