/**
 * The `kubernetes` provider: a workspace is a pod, made and driven through the official
 * `@kubernetes/client-node`. Our executor runs in the pod's container (executor/main.ts with
 * `--sandbox`, as in a Docker container), its channel one exec of it over the API server's exec
 * WebSocket (binary frames both ways), so every tool, the jail and the policy behave as on the
 * other providers. What the pod runs the executor from is copied in over exec too
 * (remote-sandbox.ts), unless the image has it already.
 *
 * The pod (`podManifest`, kept as a fixture validated against Kubernetes' OpenAPI schema):
 * - one container `sandbox` from the workspace's image, whose main process only waits; a read-only
 *   root filesystem; `emptyDir` volumes for /workspace (its `sizeLimit` the disk limit), /tmp,
 *   /var/tmp and the executor's directory; no capabilities but CHOWN, SETUID, SETGID and KILL for
 *   the executor (commands run as uid 1000 and get none); no privilege escalation;
 * - resource requests and limits from the workspace's limits (CPU, memory, ephemeral storage);
 * - `automountServiceAccountToken: false` and no service links, so nothing in the pod can talk to
 *   the API server; `shareProcessNamespace` so the pause container reaps orphans;
 * - the RuntimeClass of the agent type (`runtime_class`) or the server's (gVisor's runsc where
 *   the cluster has it);
 * - labels naming the server instance and the workspace, for ownership and orphan cleanup;
 * - with no network (the default), a NetworkPolicy of the namespace denying every pod so labelled
 *   all ingress and egress (made once per namespace); an allowlist's egress rides the channel to
 *   the server's proxy, as on gVisor.
 *
 * Clusters and namespaces come from configuration (AGENT_WORKSPACE_KUBERNETES_CLUSTERS); a new
 * workspace goes to the first whose labels match the agent type's `engine_labels` and that
 * answers. Every API call has a deadline: an unavailable cluster is reported (UNAVAILABLE,
 * PROVIDER_UNAVAILABLE, naming it), never retried forever. Any server with the same configuration
 * reaches the pods, so they are `portable` (a shared warm pool, a takeover).
 */
import { PassThrough, Readable, Writable } from "node:stream";
import { ApiException, CoreV1Api, Exec, KubeConfig, NetworkingV1Api, type V1NetworkPolicy, type V1Pod, type V1Status } from "@kubernetes/client-node";
import { DomainError } from "../core/errors.ts";
import { WORKSPACE_ROOT } from "./executor/jail.ts";
import type { ExecutorBuild } from "./executor-build.ts";
import { PAYLOAD_DIR, type RemoteSandbox, remoteHandle, SandboxPayload } from "./remote-sandbox.ts";
import type { CreateOptions, Limits, OpenOptions, Provider, ProviderLog, WorkspaceHandle, WorkspaceRecord } from "./types.ts";

/** One cluster and namespace workspaces may go to (AGENT_WORKSPACE_KUBERNETES_CLUSTERS). */
export interface KubernetesCluster {
  /** Stable: workspace records name their cluster by it. */
  name: string;
  /** A kubeconfig file; "" for the default (KUBECONFIG, ~/.kube/config, or in-cluster). */
  kubeconfig: string;
  /** The kubeconfig's context; "" for its current one. */
  context: string;
  namespace: string;
  /** What agent types' `engine_labels` match. */
  labels: Record<string, string>;
}

/** The kubernetes provider's settings. */
export interface KubernetesSettings {
  clusters: KubernetesCluster[];
  /** Image of workspaces that name none. */
  image: string;
  /** RuntimeClass of pods whose agent type names none; "" for the cluster's default. */
  runtimeClass: string;
  /** How long a pod may take to run (its image pulled, scheduled), in ms. */
  startTimeoutMs: number;
  /** Deadline of each API call, in ms. */
  requestTimeoutMs: number;
}

export interface KubernetesOptions extends KubernetesSettings {
  executor: ExecutorBuild;
  instance: string;
  stageDir: string;
  user: { uid: number; gid: number };
  log: ProviderLog;
}

const MANAGED_BY = "app.kubernetes.io/managed-by";
const LABEL_INSTANCE = "agent-workspace/instance";
const LABEL_WORKSPACE = "agent-workspace/workspace";
const LABEL_NETWORK = "agent-workspace/network";
/** The policy every namespace gets: pods labelled network=none reach nothing and are reached by nothing. */
export const DENY_POLICY = "agent-workspace-deny-all";
const CONTAINER = "sandbox";

/** Kubernetes quantity of a byte count (exact, in bytes). */
const bytes = (n: number) => String(Math.floor(n));
/** Kubernetes quantity of a CPU count, in millicores. */
const cpus = (n: number) => `${Math.max(1, Math.round(n * 1000))}m`;

/** The pod of workspace `id` (pure: a fixture test validates it against the OpenAPI schema). */
export function podManifest(o: { id: string; namespace: string; instance: string; image: string; limits: Limits; runtimeClass: string; network: "none" | "egress" }): V1Pod {
  const resources: Record<string, string> = {};
  if (o.limits.cpus > 0) resources.cpu = cpus(o.limits.cpus);
  if (o.limits.memoryBytes > 0) resources.memory = bytes(o.limits.memoryBytes);
  if (o.limits.diskBytes > 0) resources["ephemeral-storage"] = bytes(o.limits.diskBytes);
  const scratch = (name: string, sizeLimit?: number) => ({ name, emptyDir: sizeLimit !== undefined && sizeLimit > 0 ? { sizeLimit: bytes(sizeLimit) } : {} });
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: `aw-${o.id}`,
      namespace: o.namespace,
      labels: { [MANAGED_BY]: "agent-workspace", [LABEL_INSTANCE]: o.instance, [LABEL_WORKSPACE]: o.id, [LABEL_NETWORK]: o.network },
    },
    spec: {
      ...(o.runtimeClass !== "" ? { runtimeClassName: o.runtimeClass } : {}),
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      shareProcessNamespace: true,
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: CONTAINER,
          image: o.image,
          // Only waits: the executor is started over exec, and a TERM ends the pod at once.
          command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"],
          workingDir: WORKSPACE_ROOT,
          env: [{ name: "HOME", value: WORKSPACE_ROOT }],
          resources: Object.keys(resources).length > 0 ? { requests: { ...resources }, limits: { ...resources } } : {},
          securityContext: {
            runAsUser: 0,
            runAsGroup: 0,
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ["ALL"], add: ["CHOWN", "SETUID", "SETGID", "KILL"] },
          },
          volumeMounts: [
            { name: "workspace", mountPath: WORKSPACE_ROOT },
            { name: "tmp", mountPath: "/tmp" },
            { name: "var-tmp", mountPath: "/var/tmp" },
            { name: "executor", mountPath: PAYLOAD_DIR },
          ],
        },
      ],
      volumes: [scratch("workspace", o.limits.diskBytes), scratch("tmp"), scratch("var-tmp"), scratch("executor")],
    },
  };
}

/** The namespace's policy: pods labelled network=none get no ingress and no egress at all. */
export function denyPolicyManifest(namespace: string): V1NetworkPolicy {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: DENY_POLICY, namespace, labels: { [MANAGED_BY]: "agent-workspace" } },
    spec: {
      podSelector: { matchLabels: { [MANAGED_BY]: "agent-workspace", [LABEL_NETWORK]: "none" } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress: [],
    },
  };
}

/** A cluster's clients. */
interface Client {
  cluster: KubernetesCluster;
  core: CoreV1Api;
  net: NetworkingV1Api;
  exec: Exec;
  /** The namespace's deny policy exists (made once). */
  policy?: Promise<void>;
}

/** The HTTP status of a client-node failure, if it carries one. */
const statusOf = (err: unknown): number | undefined => (err instanceof ApiException ? err.code : undefined);

export function createKubernetesProvider(options: KubernetesOptions): Provider & { findOrphans(known: Set<string>): Promise<string[]>; removeOrphan(workspaceId: string): Promise<void> } {
  const { log } = options;
  const payload = new SandboxPayload(options.executor, options.stageDir);
  const clients = new Map<string, Client>();
  for (const cluster of options.clusters) {
    const kc = new KubeConfig();
    if (cluster.kubeconfig !== "") kc.loadFromFile(cluster.kubeconfig);
    else kc.loadFromDefault();
    if (cluster.context !== "") kc.setCurrentContext(cluster.context);
    clients.set(cluster.name, { cluster, core: kc.makeApiClient(CoreV1Api), net: kc.makeApiClient(NetworkingV1Api), exec: new Exec(kc) });
  }
  const clientOf = (name: string): Client => {
    const c = clients.get(name) ?? clients.get(options.clusters[0]?.name ?? "");
    if (!c) throw new DomainError("PROVIDER_UNAVAILABLE", `Kubernetes cluster '${name}' is not configured on this server`, { metadata: { provider: "kubernetes", cluster: name } });
    return c;
  };

  /** `call` within the request deadline; a failure as a DomainError naming the cluster (never retried). */
  const api = async <T>(c: Client, what: string, call: () => Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        call(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer in ${options.requestTimeoutMs} ms`)), options.requestTimeoutMs);
        }),
      ]);
    } catch (err) {
      if (err instanceof DomainError) throw err;
      const code = statusOf(err);
      log.warn("kubernetes: an API call failed", { cluster: c.cluster.name, what, code, error: String((err as Error)?.message ?? err).slice(0, 300) });
      if (code === 404) throw new DomainError("WORKSPACE_NOT_FOUND", `Kubernetes cluster '${c.cluster.name}': ${what}: not found`, { cause: err, metadata: { provider: "kubernetes", cluster: c.cluster.name } });
      if (code === 403 || code === 422 || code === 400) {
        throw new DomainError("INVALID_ARGUMENT", `Kubernetes cluster '${c.cluster.name}' refused to ${what}: ${apiMessage(err)}`, { cause: err, metadata: { provider: "kubernetes", cluster: c.cluster.name } });
      }
      throw new DomainError("PROVIDER_UNAVAILABLE", `Kubernetes cluster '${c.cluster.name}' could not ${what} (${code !== undefined ? `HTTP ${code}` : String((err as Error)?.message ?? err).slice(0, 120)}); it is not retried, try again later`, {
        cause: err,
        metadata: { provider: "kubernetes", cluster: c.cluster.name },
      });
    } finally {
      clearTimeout(timer);
    }
  };

  /** Makes the namespace's deny policy once (an existing one is kept). */
  const ensurePolicy = (c: Client): Promise<void> => {
    c.policy ??= api(c, "make the namespace's network policy", async () => {
      try {
        await c.net.createNamespacedNetworkPolicy({ namespace: c.cluster.namespace, body: denyPolicyManifest(c.cluster.namespace) });
      } catch (err) {
        if (statusOf(err) !== 409) throw err;
      }
    }).catch((err: unknown) => {
      c.policy = undefined;
      throw err;
    });
    return c.policy;
  };

  /**
   * Runs `argv` in the pod over exec; stdout, stderr and the exit status. Within the pod start's
   * deadline (an upload of the payload included): an exec the cluster never answers fails, and
   * its socket is closed, instead of holding the caller forever.
   */
  const run = (c: Client, pod: string, argv: string[], stdin?: Buffer): Promise<{ stdout: string; stderr: string; code: number }> =>
    new Promise((resolve, reject) => {
      let socket: { close(): void } | undefined;
      const timer = setTimeout(() => {
        socket?.close();
        reject(new Error(`an exec in the pod got no answer in ${options.startTimeoutMs} ms`));
      }, options.startTimeoutMs);
      const settle = <T>(fn: (v: T) => void) => (v: T) => {
        clearTimeout(timer);
        fn(v);
      };
      resolve = settle(resolve);
      reject = settle(reject);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      const sink = (into: Buffer[]) =>
        new Writable({
          write(chunk: Buffer, _e, done) {
            into.push(chunk);
            done();
          },
        });
      const onStatus = (s: V1Status) => {
        const code = s.status === "Success" ? 0 : Number(s.details?.causes?.find((x) => x.reason === "ExitCode")?.message ?? 1);
        resolve({ stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8"), code });
      };
      // Stdin in slices of 1 MiB: one WebSocket message each, under any server's message limit.
      const slices = stdin ? Array.from({ length: Math.ceil(stdin.length / 2 ** 20) }, (_, i) => stdin.subarray(i * 2 ** 20, (i + 1) * 2 ** 20)) : [];
      c.exec.exec(c.cluster.namespace, pod, CONTAINER, argv, sink(out), sink(err), stdin ? Readable.from(slices) : null, false, onStatus).then((ws) => {
        socket = ws;
        ws.on("close", () => resolve({ stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8"), code: -1 }));
      }, reject);
    });

  /** A pod as RemoteSandbox. */
  const remoteOf = (c: Client, pod: string, workspaceId: string): RemoteSandbox => ({
    async runAsRoot(script) {
      const r = await run(c, pod, ["/bin/sh", "-c", script]);
      if (r.code !== 0) throw new Error(`a command in the pod failed (exit ${r.code}): ${r.stderr.slice(0, 300)}`);
      return r.stdout;
    },
    async upload(file, data) {
      // Exactly that many bytes: no end-of-input is needed (the exec protocol before v5 has none).
      const r = await run(c, pod, ["/bin/sh", "-c", `head -c ${data.length} > ${file}`], data);
      if (r.code !== 0) throw new Error(`copying into the pod failed (exit ${r.code}): ${r.stderr.slice(0, 300)}`);
    },
    async start(argv) {
      const input = new PassThrough();
      const output = new PassThrough();
      const stdout = new Writable({
        write(chunk: Buffer, _e, done) {
          if (input.write(chunk)) done();
          else input.once("drain", () => done());
        },
      });
      const stderr = new Writable({
        write(chunk: Buffer, _e, done) {
          log.warn("sandbox executor", { workspace_id: workspaceId, line: chunk.toString("utf8").slice(0, 500) });
          done();
        },
      });
      const ws = await c.exec.exec(c.cluster.namespace, pod, CONTAINER, argv, stdout, stderr, output, false, () => input.end());
      ws.on("close", () => input.end());
      ws.on("error", (err: Error) => input.destroy(err));
      return { input, output };
    },
  });

  /** Waits until the pod runs; a pod that cannot (its image, its runtime class) fails with why. */
  const waitRunning = async (c: Client, pod: string): Promise<void> => {
    const deadline = Date.now() + options.startTimeoutMs;
    for (;;) {
      const p = await api(c, "read the workspace's pod", () => c.core.readNamespacedPod({ name: pod, namespace: c.cluster.namespace }));
      const status = p.status?.containerStatuses?.[0];
      if (p.status?.phase === "Running" && status?.ready === true) return;
      const waiting = status?.state?.waiting?.reason ?? "";
      if (/ErrImagePull|ImagePullBackOff|InvalidImageName|CreateContainerConfigError/.test(waiting) || p.status?.phase === "Failed") {
        throw new DomainError("INVALID_ARGUMENT", `The workspace's pod cannot run: ${waiting || p.status?.phase} (${status?.state?.waiting?.message ?? p.status?.message ?? ""})`.slice(0, 400), { metadata: { provider: "kubernetes", cluster: c.cluster.name } });
      }
      if (Date.now() > deadline) throw new DomainError("PROVIDER_UNAVAILABLE", `The workspace's pod did not run within ${options.startTimeoutMs} ms (phase ${p.status?.phase ?? "unknown"})`, { metadata: { provider: "kubernetes", cluster: c.cluster.name } });
      await new Promise((r) => setTimeout(r, 250));
    }
  };

  /** The clusters a workspace with these placement labels may go to, in order. */
  const candidates = (labels: Record<string, string>): Client[] => [...clients.values()].filter((c) => Object.entries(labels).every(([k, v]) => c.cluster.labels[k] === v));

  const makeIn = async (c: Client, opts: CreateOptions): Promise<WorkspaceRecord> => {
    const network = opts.network === "egress" ? "egress" : "none";
    const runtimeClass = opts.runtimeClass ?? options.runtimeClass;
    const image = opts.image !== "" ? opts.image : options.image;
    const pod = `aw-${opts.id}`;
    if (network === "none") await ensurePolicy(c);
    await api(c, "make the workspace's pod", () => c.core.createNamespacedPod({ namespace: c.cluster.namespace, body: podManifest({ id: opts.id, namespace: c.cluster.namespace, instance: options.instance, image, limits: opts.limits, runtimeClass, network }) }));
    try {
      await waitRunning(c, pod);
      const remote = remoteOf(c, pod, opts.id);
      const began = Date.now();
      const copy = await payload.ensure(remote);
      if (copy.copied) log.info("copied the executor into a pod", { workspace_id: opts.id, bytes: copy.bytes, duration_ms: Date.now() - began });
      await payload.prepareWorkspace(remote, options.user);
    } catch (err) {
      await c.core.deleteNamespacedPod({ name: pod, namespace: c.cluster.namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
      if (err instanceof DomainError) throw err;
      log.error("kubernetes: the workspace's pod could not be prepared", { workspace_id: opts.id, cluster: c.cluster.name, error: String((err as Error)?.message ?? err).slice(0, 300) });
      throw new DomainError("PROVIDER_UNAVAILABLE", "The workspace's pod could not be prepared; the server's log says why", { cause: err, metadata: { provider: "kubernetes", cluster: c.cluster.name, stage: "prepare" } });
    }
    log.info("kubernetes pod made", { workspace_id: opts.id, cluster: c.cluster.name, namespace: c.cluster.namespace, pod, runtime_class: runtimeClass });
    return {
      id: opts.id,
      provider: "kubernetes",
      createdAt: new Date(),
      labels: opts.labels,
      limits: opts.limits,
      image,
      state: { cluster: c.cluster.name, namespace: c.cluster.namespace, pod, ...(runtimeClass !== "" ? { runtimeClass } : {}) },
    };
  };

  return {
    name: "kubernetes",

    portable: () => true,

    async create(opts: CreateOptions): Promise<WorkspaceRecord> {
      if (opts.enforcement?.programs) {
        throw new DomainError("ENFORCEMENT_UNAVAILABLE", "The kubernetes provider cannot enforce the agent type's command allowlist: it needs an image prepared by the server on the sandbox's host", { metadata: { provider: "kubernetes" } });
      }
      const list = candidates(opts.placement?.engineLabels ?? {});
      if (list.length === 0) {
        throw new DomainError("PROVIDER_UNAVAILABLE", "No configured Kubernetes cluster carries the agent type's engine_labels", { metadata: { provider: "kubernetes" } });
      }
      let last: unknown;
      for (const c of list) {
        try {
          return await makeIn(c, opts);
        } catch (err) {
          // Another cluster is tried only when this one could not be reached (not when its pod failed).
          if (!(err instanceof DomainError) || err.reason !== "PROVIDER_UNAVAILABLE" || err.metadata.stage === "prepare") throw err;
          last = err;
        }
      }
      throw last;
    },

    open(record: WorkspaceRecord, openOptions?: OpenOptions): Promise<WorkspaceHandle> {
      const c = clientOf(record.state.cluster ?? "");
      const pod = record.state.pod;
      return remoteHandle(record, openOptions, {
        what: "pod",
        ripgrepPath: `${payload.root}/bin/rg`,
        log,
        async connect() {
          await waitRunning(c, pod);
          const remote = remoteOf(c, pod, record.id);
          // A restarted container lost its executor's directory (an emptyDir survives, but be sure).
          await payload.ensure(remote);
          return payload.attach(remote, options.user, [], (status) => log.warn("kubernetes: the pod's executor exited outside a call's end; the next call starts it again", { workspace_id: record.id, status }));
        },
        async health() {
          try {
            const p = await api(c, "read the workspace's pod", () => c.core.readNamespacedPod({ name: pod, namespace: c.cluster.namespace }));
            if (p.status?.phase === "Running") return { status: "ready", message: "" };
            return { status: p.status?.phase === "Pending" ? "stopped" : "failed", message: `The workspace's pod is ${p.status?.phase ?? "in an unknown phase"}` };
          } catch (err) {
            if (err instanceof DomainError && err.reason === "WORKSPACE_NOT_FOUND") return { status: "failed", message: "The workspace's pod is gone (deleted outside the server); delete the workspace" };
            return { status: "failed", message: (err as Error).message };
          }
        },
      });
    },

    async destroy(record: WorkspaceRecord): Promise<void> {
      const c = clientOf(record.state.cluster ?? "");
      try {
        await api(c, "delete the workspace's pod", () => c.core.deleteNamespacedPod({ name: record.state.pod, namespace: c.cluster.namespace, gracePeriodSeconds: 0 }));
      } catch (err) {
        if (err instanceof DomainError && err.reason === "WORKSPACE_NOT_FOUND") return;
        throw err;
      }
    },

    async findOrphans(known: Set<string>): Promise<string[]> {
      const orphans: string[] = [];
      for (const c of clients.values()) {
        const pods = await api(c, "list the server's pods", () => c.core.listNamespacedPod({ namespace: c.cluster.namespace, labelSelector: `${LABEL_INSTANCE}=${options.instance}` }));
        for (const p of pods.items) {
          const id = p.metadata?.labels?.[LABEL_WORKSPACE];
          if (id !== undefined && !known.has(id)) orphans.push(id);
        }
      }
      return orphans;
    },

    async removeOrphan(workspaceId: string): Promise<void> {
      for (const c of clients.values()) {
        const pods = await api(c, "list the server's pods", () => c.core.listNamespacedPod({ namespace: c.cluster.namespace, labelSelector: `${LABEL_INSTANCE}=${options.instance},${LABEL_WORKSPACE}=${workspaceId}` }));
        for (const p of pods.items) await api(c, "delete an orphaned pod", () => c.core.deleteNamespacedPod({ name: p.metadata?.name ?? "", namespace: c.cluster.namespace, gracePeriodSeconds: 0 }));
      }
    },

    async dispose(): Promise<void> {},
  };
}

/** The message of a Kubernetes Status in a client-node failure, short. */
function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  const parsed = typeof body === "string" ? (() => { try { return JSON.parse(body) as { message?: string }; } catch { return undefined; } })() : (body as { message?: string } | undefined);
  return String(parsed?.message ?? (err as Error).message ?? "").slice(0, 300);
}
