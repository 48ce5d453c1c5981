/**
 * The local Kubernetes stand-in (helpers/k8s-standin.ts), driven only through the official client
 * library `@kubernetes/client-node` (a KubeConfig loaded from the kubeconfig the stand-in writes;
 * CoreV1Api, NetworkingV1Api, Exec): every operation the Kubernetes provider calls works, and
 * fails, the way the client expects of an API server. Docker is looked at only to check what a pod
 * became (its container's settings, its removal). Its pods are Docker containers, so the file is
 * gated like the other Docker suites: a visible skip without the engine, a failure when
 * REQUIRE_DOCKER=1.
 */
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { Readable, Writable } from "node:stream";
import {
  ApiException,
  type ConfigurationOptions,
  CoreV1Api,
  Exec,
  KubeConfig,
  NetworkingV1Api,
  Observable,
  type V1Pod,
  type V1PodSpec,
  type V1Status,
  VersionApi,
} from "@kubernetes/client-node";
// Not re-exported by the package's index; Exec takes one to choose the WebSocket (here: the protocols offered).
import { WebSocketHandler } from "@kubernetes/client-node/dist/web-socket-handler.js";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import Docker from "dockerode";
import WebSocket from "ws";
import { gate, probeEngines } from "./helpers/engines.ts";
import { type K8sStandIn, startK8sStandIn } from "./helpers/k8s-standin.ts";

interface Ctx {
  standIn: K8sStandIn;
  kc: KubeConfig;
  core: CoreV1Api;
  net: NetworkingV1Api;
}

const test = anyTest as TestFn<Ctx>;
const IMAGE = process.env.AGENT_WORKSPACE_IMAGE ?? "agent-workspace-base:bookworm";
const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });
const engines = await probeEngines();
/** Tells this run's pods and labels from any other's. */
const RUN = randomBytes(3).toString("hex");
const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let pods = 0;
/** A pod name unique in this run. */
const podName = (what: string) => `${what}-${RUN}-${++pods}`;

/** A KubeConfig for the stand-in's cluster with another user: `token`, or none at all. */
function withToken(kc: KubeConfig, token: string | undefined): KubeConfig {
  const other = new KubeConfig();
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("the kubeconfig has no current cluster");
  other.loadFromClusterAndUser(cluster, { name: "intruder", ...(token !== undefined ? { token } : {}) });
  return other;
}

/** Per-request options aborting the call after `ms` (client-node 2.x: a middleware setting the request's signal). */
function timeout(ms: number): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (request) => {
          request.setSignal(AbortSignal.timeout(ms));
          return new Observable(Promise.resolve(request));
        },
        post: (response) => new Observable(Promise.resolve(response)),
      },
    ],
    middlewareMergeStrategy: "append",
  };
}

/** The refusal a client call ends in: the HTTP code and the Status the client hands over as the body. */
async function refusal(call: Promise<unknown>): Promise<{ code: number; status: V1Status }> {
  const err = await call.then(() => undefined, (e: unknown) => e);
  if (!(err instanceof ApiException)) throw new Error(`expected the call to be refused, got ${err === undefined ? "success" : String(err)}`);
  return { code: err.code, status: typeof err.body === "string" ? (JSON.parse(err.body) as V1Status) : (err.body as V1Status) };
}

/** A pod sleeping forever (pid 1 ignores SIGTERM, so only SIGKILL ends it), with `spec` merged in. */
function sleeper(name: string, spec: Partial<V1PodSpec> = {}, labels: Record<string, string> = {}): V1Pod {
  return {
    metadata: { name, labels: { suite: RUN, ...labels } },
    spec: { automountServiceAccountToken: false, containers: [{ name: "main", image: IMAGE, command: ["sleep", "infinity"] }], ...spec },
  };
}

/** The locked-down pod the provider makes: uid 1000, no capabilities, read-only root, an emptyDir for writing, limits. */
function lockedDown(name: string, labels: Record<string, string> = {}): V1Pod {
  const pod = sleeper(name, { volumes: [{ name: "scratch", emptyDir: { sizeLimit: "64Mi" } }] }, labels);
  pod.spec!.containers[0] = {
    ...pod.spec!.containers[0],
    resources: { limits: { cpu: "1500m", memory: "512Mi", "ephemeral-storage": "1Gi" } },
    securityContext: { runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
    volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
  };
  return pod;
}

/** Creates the pod; it is deleted (grace period 0) when the test ends. */
async function createPod(t: ExecutionContext<Ctx>, pod: V1Pod, namespace = "default"): Promise<V1Pod> {
  const created = await t.context.core.createNamespacedPod({ namespace, body: pod });
  t.teardown(() => t.context.core.deleteNamespacedPod({ name: created.metadata?.name ?? "", namespace, gracePeriodSeconds: 0 }).then(() => {}, () => {}));
  return created;
}

/**
 * Reads the pod until `done` holds (or fails the wait after `ms`: a hang guard, sized for a loaded
 * two-core CI where a container took 22 s to start and the old 20 s ran out just after it had).
 */
async function waitForPod(t: ExecutionContext<Ctx>, name: string, done: (pod: V1Pod) => boolean, namespace = "default", ms = 120_000): Promise<V1Pod> {
  const deadline = Date.now() + ms;
  for (;;) {
    const pod = await t.context.core.readNamespacedPod({ name, namespace });
    if (done(pod)) return pod;
    if (Date.now() > deadline) throw new Error(`pod ${name} never got there: ${JSON.stringify(pod.status)}`);
    await delay(100);
  }
}

const isRunning = (pod: V1Pod) => pod.status?.phase === "Running" && pod.status.containerStatuses?.[0]?.ready === true;

/** Creates the pod and waits until it runs. */
async function runningPod(t: ExecutionContext<Ctx>, pod: V1Pod, namespace = "default"): Promise<V1Pod> {
  await createPod(t, pod, namespace);
  return waitForPod(t, pod.metadata?.name ?? "", isRunning, namespace);
}

/** What an exec gave back. */
interface ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  status: V1Status;
}

/** A Writable keeping what is written; `finished` once the client ended it. */
function collector(): { stream: Writable; finished: Promise<unknown>; bytes: () => Buffer } {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      done();
    },
  });
  return { stream, finished: once(stream, "finish"), bytes: () => Buffer.concat(chunks) };
}

/** Runs `command` in the pod through client-node's Exec, stdin (when given) in 64 KiB pieces. */
async function exec(t: ExecutionContext<Ctx>, pod: string, command: string[], options: { stdin?: Buffer; namespace?: string; kc?: KubeConfig; tty?: boolean; client?: Exec } = {}): Promise<ExecResult> {
  const stdout = collector();
  const stderr = collector();
  const input = options.stdin;
  const stdin = input ? Readable.from(Array.from({ length: Math.ceil(input.length / 65536) }, (_, i) => input.subarray(i * 65536, (i + 1) * 65536))) : null;
  const status = await new Promise<V1Status>((resolve, reject) => {
    const client = options.client ?? new Exec(options.kc ?? t.context.kc);
    client.exec(options.namespace ?? "default", pod, "main", command, stdout.stream, stderr.stream, stdin, options.tty ?? false, resolve).then(
      (ws) => ws.on("close", () => reject(new Error("the WebSocket closed without a status"))),
      reject,
    );
  });
  await Promise.all([stdout.finished, stderr.finished]);
  return { stdout: stdout.bytes(), stderr: stderr.bytes(), status };
}

/** The output of a command that must succeed. */
async function execText(t: ExecutionContext<Ctx>, pod: string, script: string, namespace = "default"): Promise<string> {
  const r = await exec(t, pod, ["sh", "-c", script], { namespace });
  if (r.status.status !== "Success") throw new Error(`${script}: ${JSON.stringify(r.status)} ${r.stderr.toString()}`);
  return r.stdout.toString("utf8");
}

/** The network interfaces inside the pod. */
async function interfaces(t: ExecutionContext<Ctx>, pod: string, namespace = "default"): Promise<string[]> {
  const dev = await execText(t, pod, "cat /proc/net/dev", namespace);
  return dev
    .split("\n")
    .slice(2)
    .map((line) => line.split(":")[0].trim())
    .filter(Boolean);
}

async function containerGone(id: string): Promise<boolean> {
  return docker.getContainer(id).inspect().then(
    () => false,
    (err: { statusCode?: number }) => err.statusCode === 404,
  );
}

if (gate(test, engines, "docker", "Kubernetes stand-in")) {
  test.before(async (t) => {
    const standIn = await startK8sStandIn({ docker, namespaces: ["default", "sealed"], runtimeClasses: engines.gvisor ? { gvisor: "runsc" } : {} });
    const kc = new KubeConfig();
    kc.loadFromFile(standIn.kubeconfig);
    t.context = { standIn, kc, core: kc.makeApiClient(CoreV1Api), net: kc.makeApiClient(NetworkingV1Api) };
  });
  test.after.always(async (t) => {
    await t.context.standIn?.close();
  });

  // Serial (and so before the others), so that failNext and stall meet this test's calls and no other's.
  test.serial("a missing or wrong bearer token is refused 401, as the client reports it, for calls and exec alike; the right one is answered", async (t) => {
    const pod = await runningPod(t, sleeper(podName("auth")));
    for (const token of [undefined, "not-the-token"]) {
      const kc = withToken(t.context.kc, token);
      const err = await t.throwsAsync(kc.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: "default" }), { instanceOf: ApiException });
      t.is(err?.code, 401);
      t.regex(err?.message ?? "", /^HTTP-Code: 401\nMessage: Unauthorized/);
      const refused = await exec(t, pod.metadata?.name ?? "", ["true"], { kc }).then(() => undefined, (e: { message?: string }) => e);
      t.regex(String(refused?.message), /Unexpected server response: 401/);
    }
    t.is((await t.context.kc.makeApiClient(VersionApi).getCode()).major, "1", "discovery answers the right token");
  });

  test.serial("failNext: the next call fails with 503 ServiceUnavailable, the one after is answered", async (t) => {
    t.context.standIn.failNext(1);
    const { code, status } = await refusal(t.context.core.listNamespacedPod({ namespace: "default" }));
    t.is(code, 503);
    t.like(status, { kind: "Status", apiVersion: "v1", status: "Failure", reason: "ServiceUnavailable", code: 503 });
    await t.notThrowsAsync(t.context.core.listNamespacedPod({ namespace: "default" }));
  });

  test.serial("stall: a call with a short per-request timeout fails, on a pooled connection and a new one; after unstall calls are answered", async (t) => {
    const { standIn, core } = t.context;
    await core.listNamespacedPod({ namespace: "default" });
    standIn.stall();
    try {
      const fresh = new KubeConfig();
      fresh.loadFromFile(standIn.kubeconfig);
      for (const client of [core, fresh.makeApiClient(CoreV1Api)]) {
        const started = Date.now();
        const err = await t.throwsAsync(client.listNamespacedPod({ namespace: "default" }, timeout(500)));
        t.is(err?.name, "TimeoutError");
        t.true(Date.now() - started < 5000, `gave up after ${Date.now() - started} ms`);
      }
    } finally {
      standIn.unstall();
    }
    t.true(Array.isArray((await core.listNamespacedPod({ namespace: "default" }, timeout(5000))).items));
  });

  test("a pod with labels, limits, a locked-down securityContext and an emptyDir is Pending, then Running; get, and list by label and field selectors", async (t) => {
    const name = podName("locked");
    const created = await createPod(t, lockedDown(name, { role: "main" }));
    t.is(created.status?.phase, "Pending");
    t.truthy(created.metadata?.uid);
    t.is(created.spec?.nodeName, "k8s-standin");
    t.is(created.spec?.restartPolicy, "Always");
    t.is(created.spec?.terminationGracePeriodSeconds, 30);
    t.deepEqual(created.spec?.containers[0].resources?.requests, { cpu: "1500m", memory: "512Mi" }, "requests default to the limits");

    const pod = await waitForPod(t, name, isRunning);
    t.is(pod.metadata?.uid, created.metadata?.uid);
    t.truthy(pod.status?.containerStatuses?.[0]?.state?.running?.startedAt);
    t.is(pod.status?.conditions?.find((c) => c.type === "Ready")?.status, "True");
    t.is(pod.status?.qosClass, "Guaranteed");
    t.truthy(pod.status?.podIP);

    const id = t.context.standIn.pods().get(`default/${name}`) ?? "";
    const { HostConfig, Config } = await docker.getContainer(id).inspect();
    t.is(HostConfig.NanoCpus, 1_500_000_000);
    t.is(HostConfig.Memory, 512 * 2 ** 20);
    t.is(HostConfig.MemorySwap, 512 * 2 ** 20);
    t.true(HostConfig.ReadonlyRootfs);
    t.deepEqual(HostConfig.CapDrop, ["ALL"]);
    t.true((HostConfig.SecurityOpt ?? []).includes("no-new-privileges"));
    t.is(Config.User, "1000:1000");

    const names = async (labelSelector: string, fieldSelector?: string) =>
      (await t.context.core.listNamespacedPod({ namespace: "default", labelSelector, fieldSelector })).items.map((p) => p.metadata?.name);
    t.deepEqual(await names(`suite=${RUN},role=main`), [name]);
    t.deepEqual(await names(`suite=${RUN},role in (main,other),!absent`), [name]);
    t.deepEqual(await names(`suite=${RUN},role=other`), []);
    t.false((await names(`suite=${RUN},!role`)).includes(name));
    t.deepEqual(await names(`suite=${RUN}`, `metadata.name=${name},status.phase=Running`), [name]);
    const list = await t.context.core.listNamespacedPod({ namespace: "default", labelSelector: `suite=${RUN}` });
    t.regex(list.metadata?.resourceVersion ?? "", /^\d+$/);
    t.deepEqual((await t.context.core.listPodForAllNamespaces({ labelSelector: `suite=${RUN},role=main` })).items.map((p) => p.metadata?.namespace), ["default"]);
  });

  test("exec runs as the container's user with its capabilities: id, CapEff, a read-only root, a writable emptyDir, no token", async (t) => {
    const name = podName("exec");
    const pod = lockedDown(name);
    // The same emptyDir again, read-only, over a directory the image has (owned by uid 1000, with files in it).
    pod.spec!.containers[0].volumeMounts?.push({ name: "scratch", mountPath: "/home/agent", readOnly: true });
    await runningPod(t, pod);
    t.is(await execText(t, name, "id -u; id -g"), "1000\n1000\n");
    t.is(await execText(t, name, "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status"), "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n");

    const readOnly = await exec(t, name, ["touch", "/x"]);
    t.like(readOnly.status, { status: "Failure", reason: "NonZeroExitCode", details: { causes: [{ reason: "ExitCode", message: "1" }] } });
    t.regex(readOnly.stderr.toString(), /Read-only file system/);
    t.is(await execText(t, name, "echo hi > /scratch/x && cat /scratch/x && stat -c '%a %U' /scratch"), "hi\n777 root\n");
    t.regex(await execText(t, name, "grep ' /scratch ' /proc/mounts"), /^tmpfs \/scratch tmpfs rw,.*size=65536k/);
    t.is(await execText(t, name, "stat -c '%a %U' /home/agent && ls -A /home/agent"), "777 root\nx\n", "empty at first whatever the image has there, and shared");
    t.regex((await exec(t, name, ["touch", "/home/agent/y"])).stderr.toString(), /Read-only file system/);
    const full = await exec(t, name, ["sh", "-c", "head -c 100000000 /dev/zero > /scratch/fill"]);
    t.regex(full.stderr.toString(), /No space left on device/, "sizeLimit is the tmpfs's size");
    t.is((await exec(t, name, ["test", "-e", `${SERVICE_ACCOUNT_DIR}/token`])).status.status, "Failure");
  });

  test("exec is binary-safe both ways: 1 MiB of random stdin hashed in the pod, 4 MiB of random stdout intact, 2 MiB through cat", async (t) => {
    const name = podName("bytes");
    await runningPod(t, lockedDown(name));
    const input = randomBytes(1024 * 1024);
    const hashed = await exec(t, name, ["sha256sum"], { stdin: input });
    t.is(hashed.stdout.toString(), `${sha256(input)}  -\n`);
    t.is(hashed.status.status, "Success");

    const expected = (await execText(t, name, "head -c 4194304 /dev/urandom > /scratch/big && sha256sum /scratch/big")).split(" ")[0];
    const big = await exec(t, name, ["cat", "/scratch/big"]);
    t.is(big.stdout.length, 4 * 1024 * 1024);
    t.is(sha256(big.stdout), expected);

    const echo = randomBytes(2 * 1024 * 1024);
    const echoed = await exec(t, name, ["cat"], { stdin: echo });
    t.is(echoed.stdout.length, echo.length);
    t.true(echoed.stdout.equals(echo));
  });

  test("the exit code comes through the status channel: Success for 0, NonZeroExitCode with the code otherwise (v5, v4, with a TTY)", async (t) => {
    const name = podName("exit");
    await runningPod(t, sleeper(name));
    const failed = await exec(t, name, ["sh", "-c", "echo partial; echo oops >&2; exit 3"]);
    t.is(failed.stdout.toString(), "partial\n");
    t.is(failed.stderr.toString(), "oops\n");
    t.like(failed.status, { status: "Failure", reason: "NonZeroExitCode", details: { causes: [{ reason: "ExitCode", message: "3" }] } });
    t.deepEqual((await exec(t, name, ["true"])).status, { metadata: {}, status: "Success" });
    // Without stdin the command sees EOF at once.
    t.is((await exec(t, name, ["sh", "-c", "wc -c"])).stdout.toString().trim(), "0");
    t.is((await exec(t, name, ["tty"], { tty: true })).stdout.toString(), "/dev/pts/0\r\n");

    // A client that speaks only v4 (client-node's socket factory, offering that one protocol).
    let protocol = "";
    const v4 = new WebSocketHandler(t.context.kc, (uri, _protocols, options) => {
      const ws = new WebSocket(uri, ["v4.channel.k8s.io"], options);
      ws.once("open", () => (protocol = ws.protocol));
      return ws;
    });
    const old = await exec(t, name, ["sh", "-c", "echo v4; exit 4"], { client: new Exec(t.context.kc, v4) });
    t.is(protocol, "v4.channel.k8s.io");
    t.is(old.stdout.toString(), "v4\n");
    t.like(old.status, { status: "Failure", reason: "NonZeroExitCode", details: { causes: [{ reason: "ExitCode", message: "4" }] } });
  });

  test("a NetworkPolicy denying egress leaves a new pod only lo; a pod it does not select keeps its network; deleting it changes no pod", async (t) => {
    const { net } = t.context;
    const policy = `deny-egress-${RUN}`;
    const created = await net.createNamespacedNetworkPolicy({
      namespace: "default",
      body: { metadata: { name: policy, labels: { suite: RUN } }, spec: { podSelector: { matchExpressions: [{ key: "egress", operator: "In", values: [`deny-${RUN}`] }] }, policyTypes: ["Egress"] } },
    });
    t.deepEqual(created.spec?.policyTypes, ["Egress"]);
    t.is((await net.readNamespacedNetworkPolicy({ name: policy, namespace: "default" })).metadata?.uid, created.metadata?.uid);
    t.deepEqual((await net.listNamespacedNetworkPolicy({ namespace: "default", labelSelector: `suite=${RUN}` })).items.map((p) => p.metadata?.name), [policy]);
    t.true(t.context.standIn.networkPolicies().has(`default/${policy}`));

    const [denied, open] = [podName("denied"), podName("open")];
    await Promise.all([runningPod(t, sleeper(denied, {}, { egress: `deny-${RUN}` })), runningPod(t, sleeper(open))]);
    t.deepEqual(await interfaces(t, denied), ["lo"]);
    t.true((await interfaces(t, open)).some((i) => i !== "lo"));

    const deleted = await net.deleteNamespacedNetworkPolicy({ name: policy, namespace: "default" });
    t.like(deleted, { status: "Success", details: { name: policy, group: "networking.k8s.io", kind: "networkpolicies" } });
    const gone = await refusal(net.readNamespacedNetworkPolicy({ name: policy, namespace: "default" }));
    t.like(gone.status, { reason: "NotFound", code: 404, message: `networkpolicies.networking.k8s.io "${policy}" not found` });
    t.false(t.context.standIn.networkPolicies().has(`default/${policy}`));
    t.deepEqual(await interfaces(t, denied), ["lo"], "decided when the pod was made");
  });

  test("an empty podSelector selects every pod of its namespace, and only of its namespace", async (t) => {
    await t.context.net.createNamespacedNetworkPolicy({ namespace: "sealed", body: { metadata: { name: "deny-all" }, spec: { podSelector: {}, policyTypes: ["Ingress", "Egress"] } } });
    const sealed = podName("sealed");
    await runningPod(t, sleeper(sealed), "sealed");
    t.deepEqual(await interfaces(t, sealed, "sealed"), ["lo"]);
    const other = podName("unsealed");
    await runningPod(t, sleeper(other));
    t.true((await interfaces(t, other)).some((i) => i !== "lo"));
  });

  test("automountServiceAccountToken not false mounts a token, CA and namespace read-only, as a cluster does; false mounts nothing", async (t) => {
    const name = podName("token");
    const pod = sleeper(name, { automountServiceAccountToken: undefined });
    pod.spec!.containers[0].securityContext = { capabilities: { drop: ["ALL"], add: ["NET_BIND_SERVICE"] } };
    const created = await createPod(t, pod);
    t.true(created.spec?.volumes?.some((v) => v.name.startsWith("kube-api-access-")));
    t.true(created.spec?.containers[0].volumeMounts?.some((m) => m.mountPath === SERVICE_ACCOUNT_DIR && m.readOnly === true));
    await waitForPod(t, name, isRunning);
    t.is(await execText(t, name, `cat ${SERVICE_ACCOUNT_DIR}/namespace`), "default");
    t.regex(await execText(t, name, `cat ${SERVICE_ACCOUNT_DIR}/token`), /^[\w-]+\.[\w-]+\.[\w-]+$/);
    t.regex(await execText(t, name, `cat ${SERVICE_ACCOUNT_DIR}/ca.crt`), /BEGIN CERTIFICATE/);
    const write = await exec(t, name, ["touch", `${SERVICE_ACCOUNT_DIR}/x`]);
    t.is(write.status.status, "Failure");
    t.regex(write.stderr.toString(), /Read-only file system/);
    t.is(await execText(t, name, "id -u; grep CapEff /proc/self/status"), "0\nCapEff:\t0000000000000400\n");

    const without = podName("no-token");
    const plain = await runningPod(t, sleeper(without));
    t.false(plain.spec?.volumes?.some((v) => v.name.startsWith("kube-api-access-")) ?? false);
    t.is((await exec(t, without, ["test", "-e", SERVICE_ACCOUNT_DIR])).status.status, "Failure");
  });

  test("refusals as the API server words them: 409 AlreadyExists, 404 for a namespace or pod, 422 Invalid with causes, 403 for an unknown RuntimeClass", async (t) => {
    const { core } = t.context;
    const name = podName("taken");
    await createPod(t, sleeper(name));
    t.like((await refusal(core.createNamespacedPod({ namespace: "default", body: sleeper(name) }))).status, {
      kind: "Status",
      status: "Failure",
      reason: "AlreadyExists",
      code: 409,
      message: `pods "${name}" already exists`,
      details: { name, kind: "pods" },
    });
    t.like((await refusal(core.createNamespacedPod({ namespace: "nope", body: sleeper(podName("x")) }))).status, { reason: "NotFound", code: 404, message: 'namespaces "nope" not found' });
    t.like((await refusal(core.readNamespacedPod({ name: "no-such-pod", namespace: "default" }))).status, { reason: "NotFound", code: 404, message: 'pods "no-such-pod" not found' });
    t.is((await refusal(core.deleteNamespacedPod({ name: "no-such-pod", namespace: "default" }))).code, 404);

    const noImage = sleeper("no-image");
    delete noImage.spec!.containers[0].image;
    const missing = await refusal(core.createNamespacedPod({ namespace: "default", body: noImage }));
    t.is(missing.code, 422);
    t.like(missing.status, { reason: "Invalid", message: 'Pod "no-image" is invalid: spec.containers[0].image: Required value', details: { name: "no-image", kind: "Pod" } });
    t.deepEqual(missing.status.details?.causes, [{ reason: "FieldValueRequired", message: "Required value", field: "spec.containers[0].image" }]);

    const policy = "Forbidden: disallowed by cluster policy";
    const host = await refusal(core.createNamespacedPod({ namespace: "default", body: sleeper("host", { hostNetwork: true, volumes: [{ name: "root", hostPath: { path: "/" } }] }) }));
    t.deepEqual(host.status.details?.causes, [
      { reason: "FieldValueForbidden", message: policy, field: "spec.hostNetwork" },
      { reason: "FieldValueForbidden", message: policy, field: "spec.volumes[0].hostPath" },
    ]);
    t.is(host.status.message, `Pod "host" is invalid: [spec.hostNetwork: ${policy}, spec.volumes[0].hostPath: ${policy}]`);
    const privileged = sleeper("privileged");
    privileged.spec!.containers[0].securityContext = { privileged: true };
    t.deepEqual((await refusal(core.createNamespacedPod({ namespace: "default", body: privileged }))).status.details?.causes, [
      { reason: "FieldValueForbidden", message: policy, field: "spec.containers[0].securityContext.privileged" },
    ]);
    const probed = sleeper("probed");
    probed.spec!.containers[0].readinessProbe = { exec: { command: ["true"] } };
    t.regex((await refusal(core.createNamespacedPod({ namespace: "default", body: probed }))).status.message ?? "", /readinessProbe: Forbidden: not implemented by the local Kubernetes stand-in/);

    const runtime = await refusal(core.createNamespacedPod({ namespace: "default", body: sleeper("odd-runtime", { runtimeClassName: "no-such-class" }) }));
    t.is(runtime.code, 403);
    t.like(runtime.status, { reason: "Forbidden", message: 'pods "odd-runtime" is forbidden: pod rejected: RuntimeClass "no-such-class" not found' });
    for (const refused of ["no-image", "host", "privileged", "probed", "odd-runtime"]) t.false(t.context.standIn.pods().has(`default/${refused}`));
  });

  test("a pod whose image is not on the engine stays Pending with ErrImagePull", async (t) => {
    const name = podName("no-pull");
    const pod = sleeper(name);
    pod.spec!.containers[0].image = `agent-workspace-no-such-image-${RUN}:v0`;
    await createPod(t, pod);
    const waiting = await waitForPod(t, name, (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === "ErrImagePull");
    t.is(waiting.status?.phase, "Pending");
    t.is(waiting.status?.containerStatuses?.[0]?.ready, false);
    t.false(t.context.standIn.pods().has(`default/${name}`));
  });

  test("restartPolicy: Never ends Succeeded or Failed with the exit code; Always restarts the container and counts", async (t) => {
    const [ok, bad, again] = [podName("ok"), podName("bad"), podName("again")];
    const running = (name: string, command: string[], restartPolicy?: string): V1Pod => {
      const pod = sleeper(name, restartPolicy ? { restartPolicy } : {});
      pod.spec!.containers[0].command = command;
      return pod;
    };
    await createPod(t, running(ok, ["true"], "Never"));
    await createPod(t, running(bad, ["sh", "-c", "exit 2"], "Never"));
    await createPod(t, running(again, ["sh", "-c", "sleep 0.3; exit 1"]));
    const succeeded = await waitForPod(t, ok, (p) => p.status?.phase === "Succeeded");
    t.like(succeeded.status?.containerStatuses?.[0]?.state?.terminated, { exitCode: 0, reason: "Completed" });
    const failed = await waitForPod(t, bad, (p) => p.status?.phase === "Failed");
    t.like(failed.status?.containerStatuses?.[0]?.state?.terminated, { exitCode: 2, reason: "Error" });
    const restarted = await waitForPod(t, again, (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1);
    t.is(restarted.status?.phase, "Running");
    const completed = await exec(t, ok, ["true"]).then(() => undefined, (e: { message?: string }) => e);
    t.regex(String(completed?.message), /Unexpected server response: 400/, "no exec into a completed pod");
  });

  if (engines.gvisor) {
    test("runtimeClassName gvisor runs the pod's container on Docker's runsc runtime", async (t) => {
      const name = podName("gvisor");
      await runningPod(t, sleeper(name, { runtimeClassName: "gvisor" }));
      const id = t.context.standIn.pods().get(`default/${name}`) ?? "";
      t.is((await docker.getContainer(id).inspect()).HostConfig.Runtime, "runsc");
      t.regex(await execText(t, name, "dmesg 2>/dev/null | head -n 3 || true"), /gVisor/);
    });
  } else {
    console.log(`skipping the gVisor RuntimeClass test: ${engines.reason.gvisor}`);
    test.skip(`runtimeClassName gvisor runs the pod's container on Docker's runsc runtime (${engines.reason.gvisor})`, () => {});
  }

  test("delete: the pod is terminating for its grace period, then gone (404) with its container; grace period 0 removes it at once", async (t) => {
    const { core, standIn } = t.context;
    const name = podName("doomed");
    await runningPod(t, sleeper(name));
    const id = standIn.pods().get(`default/${name}`) ?? "";
    const deleted = await core.deleteNamespacedPod({ name, namespace: "default", gracePeriodSeconds: 1 });
    t.is(deleted.metadata?.deletionGracePeriodSeconds, 1);
    t.truthy(deleted.metadata?.deletionTimestamp);
    t.truthy((await core.readNamespacedPod({ name, namespace: "default" })).metadata?.deletionTimestamp, "still there while it terminates");
    // A hang guard, not a timing: the stand-in's kubelet stops (1 s grace) and removes the container
    // through Docker first, which took over 10 s in a loaded CI run.
    const started = Date.now();
    const deadline = started + 60_000;
    let code: number | undefined;
    while (Date.now() < deadline && code === undefined) {
      code = await core.readNamespacedPod({ name, namespace: "default" }).then(() => undefined, (err: ApiException<string>) => err.code);
      if (code === undefined) await delay(100);
    }
    t.is(code, 404, `the pod was still there ${Date.now() - started} ms after its delete`);
    t.true(await containerGone(id));
    t.false(standIn.pods().has(`default/${name}`));
    t.is((await refusal(core.deleteNamespacedPod({ name, namespace: "default" }))).code, 404);

    const quick = podName("quick");
    await runningPod(t, sleeper(quick));
    const quickId = standIn.pods().get(`default/${quick}`) ?? "";
    await core.deleteNamespacedPod({ name: quick, namespace: "default", gracePeriodSeconds: 0 });
    t.is((await refusal(core.readNamespacedPod({ name: quick, namespace: "default" }))).code, 404);
    const quickDeadline = Date.now() + 60_000;
    while (!(await containerGone(quickId)) && Date.now() < quickDeadline) await delay(100);
    t.true(await containerGone(quickId));
  });

  test("close() removes every container and volume of its stand-in, a pod still being created too, and no other", async (t) => {
    const bystander = podName("bystander");
    await runningPod(t, sleeper(bystander));
    const own = await startK8sStandIn({ docker });
    try {
      const kc = new KubeConfig();
      kc.loadFromFile(own.kubeconfig);
      const core = kc.makeApiClient(CoreV1Api);
      await core.createNamespacedPod({ namespace: "default", body: sleeper("with-token", { automountServiceAccountToken: true }) });
      while (!own.pods().has("default/with-token")) await delay(50);
      const labels = (await docker.getContainer(own.pods().get("default/with-token") ?? "").inspect()).Config.Labels;
      const filters = { label: [`agent-workspace.k8s-standin=${labels["agent-workspace.k8s-standin"]}`] };
      t.is((await docker.listVolumes({ filters })).Volumes?.length, 1, "the token's volume");
      await core.createNamespacedPod({ namespace: "default", body: sleeper("in-flight") });
      await own.close();
      t.deepEqual(await docker.listContainers({ all: true, filters }), []);
      t.deepEqual((await docker.listVolumes({ filters })).Volumes ?? [], []);
      t.is(await execText(t, bystander, "echo still here"), "still here\n");
    } finally {
      await own.close();
    }
  });
}
