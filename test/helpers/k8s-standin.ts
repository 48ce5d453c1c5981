/**
 * A LOCAL STAND-IN of the Kubernetes API server, for tests only. It is not Kubernetes and not an
 * API server: it answers the small part of the Kubernetes REST API that the official client
 * library `@kubernetes/client-node` (2.0.1) calls for the operations our Kubernetes provider uses,
 * so the provider can be tested end to end, unmodified, with the real client library in front of
 * it, on a machine where no cluster can be installed. Each pod is one real local Docker container.
 *
 * Serving: HTTPS on 127.0.0.1 at a random port, with a CA and a server certificate made with the
 * `openssl` CLI in a temporary directory. `kubeconfig` is a file naming the cluster (its CA as
 * certificate-authority-data), a user with a bearer token and one context with the default
 * namespace. Every request needs `Authorization: Bearer <token>` (discovery too), else 401. Every
 * refusal is a `Status` object (kind Status, apiVersion v1, status Failure, message, reason, code,
 * details) in the API server's words, because the client hands it to its caller as the error body.
 *
 * Resources and subresources served:
 * - core/v1 pods: create, get, delete, list (in a namespace and across namespaces; labelSelector
 *   with =, ==, !=, in, notin, key and !key; fieldSelector on metadata.name, metadata.namespace,
 *   spec.nodeName and status.phase; limit and continue);
 * - pods/exec over a WebSocket (v5.channel.k8s.io and v4.channel.k8s.io), one Docker exec each;
 * - core/v1 namespaces: get and list, a fixed set named at start;
 * - networking.k8s.io/v1 networkpolicies: create, get, list, delete;
 * - node.k8s.io/v1 runtimeclasses: get and list, a fixed set named at start;
 * - /version, /api and /apis, minimal discovery (client-node does not ask for them for these calls).
 * Anything else gets a Status: 405 for a method or subresource of a known resource that is not
 * served (patch, update, logs, attach, port-forward, …), 400 for watch and dryRun, 404 for an
 * unknown path.
 *
 * What is imitated, and how:
 * - Admission in the API server's order: a namespace not in the set → 404 NotFound (the
 *   NamespaceLifecycle plugin); a service account other than "default" → 403 (the ServiceAccount
 *   plugin, which also adds a kube-api-access-xxxxx volume when automountServiceAccountToken is not
 *   false); a runtimeClassName that is not configured → 403 Forbidden `pod rejected: RuntimeClass
 *   "x" not found` (the RuntimeClass plugin); then the API server's defaults (restartPolicy,
 *   terminationGracePeriodSeconds, dnsPolicy, imagePullPolicy, requests from limits, tolerations);
 *   then validation → 422 Invalid with one cause per field; then storage → 409 AlreadyExists.
 * - Cluster policy: hostNetwork, hostPID, hostIPC, hostPath volumes and privileged containers are
 *   refused with 422 (cause FieldValueForbidden, "disallowed by cluster policy"), as an API server
 *   started with --allow-privileged=false refuses a privileged container. A real cluster usually
 *   refuses the host namespaces and hostPath through Pod Security admission, with a 403 instead.
 * - Scheduling is immediate, onto one node named "k8s-standin"; nodeSelector, affinity and
 *   tolerations are kept and ignored. The kubelet's part starts as soon as the create is answered:
 *   the image must already be on the Docker engine (nothing is ever pulled: a missing image leaves
 *   the pod Pending with ErrImagePull), then the container is created and started.
 * - Pod status is read from Docker on every get and list: Pending (ContainerCreating,
 *   ErrImagePull, CreateContainerConfigError for runAsNonRoot, CreateContainerError,
 *   RunContainerError) until the container runs, then Running with containerStatuses[].ready and
 *   the Ready and ContainersReady conditions true; Succeeded or Failed once it exits under
 *   restartPolicy Never (or OnFailure with exit 0). Always and OnFailure are Docker's restart
 *   policies, counted in restartCount (CrashLoopBackOff while Docker waits to restart). No probes.
 * - Delete sets deletionTimestamp and answers the pod; the container is stopped with the grace
 *   period (SIGTERM, then SIGKILL, as the kubelet does; the default is the pod's
 *   terminationGracePeriodSeconds, 30) and removed, and only then does the pod disappear (404).
 *   gracePeriodSeconds=0 removes the object at once, as the API server does, the container after it.
 * - NetworkPolicy enforcement is an imitation decided once, when a pod is created: if every policy
 *   of its namespace that selects it (podSelector matchLabels/matchExpressions; an empty selector
 *   selects all) and has Egress in policyTypes has no egress rules (a deny-all), its container gets
 *   Docker's NetworkMode "none" (no interface but lo). Egress rules that allow some traffic leave
 *   the network fully open, ingress is never enforced, and a policy created or deleted later
 *   changes no pod that exists. A real CNI plugin enforces every policy continuously, per packet.
 * - The container (dockerode): the image; command → Entrypoint and args → Cmd, with $(VAR)
 *   references expanded from env as the kubelet does; env (plain values); workingDir; hostname =
 *   the pod's name; securityContext runAsUser/runAsGroup → User, capabilities drop/add → CapDrop/
 *   CapAdd, readOnlyRootFilesystem → ReadonlyRootfs, allowPrivilegeEscalation=false →
 *   no-new-privileges, seccompProfile RuntimeDefault → Docker's default profile (unset or Unconfined
 *   → unconfined, the kubelet's default), runAsNonRoot checked against the image's user,
 *   supplementalGroups and fsGroup → GroupAdd; resources.limits cpu → NanoCpus, memory → Memory
 *   (and MemorySwap, no swap), requests cpu → CpuShares, ephemeral-storage kept and ignored;
 *   runtimeClassName → the Docker runtime it maps to; pid 1 is the command, except that
 *   shareProcessNamespace: true (pid 1 the pause process, which reaps orphans) is Docker's init.
 * - emptyDir: always a tmpfs, as a Docker volume of the local driver (type tmpfs, mode 0777, size
 *   sizeLimit when one is given) mounted with nocopy: empty and 0777 whatever the image has at that
 *   path, as the kubelet makes it (Docker's own --tmpfs would take the image directory's mode), exec
 *   allowed, shared by all of its mounts, read-only where a mount says so. Unlike Kubernetes, a
 *   disk-backed emptyDir is memory here, sizeLimit is a hard limit (ENOSPC) rather than a reason
 *   to evict, and the contents do not survive a container restart (Docker unmounts the volume).
 * - The service account token, when automountServiceAccountToken is not false: a fake token,
 *   ca.crt (the stand-in's CA) and namespace, in a Docker volume mounted read-only at
 *   /var/run/secrets/kubernetes.io/serviceaccount, as a real cluster mounts them. The stand-in does
 *   not accept that token.
 * - Exec: the container's own user, environment and working directory, as Kubernetes always does;
 *   stdin, stdout and stderr binary-safe, with backpressure both ways (a fast writer is held back
 *   by the WebSocket's TCP window, a slow reader by Docker's); the exit as a Status on channel 3
 *   (Success, or Failure/NonZeroExitCode with the code as the ExitCode cause); v5's close of
 *   channel 0 is EOF on stdin. When the WebSocket closes the command gets EOF on stdin; one that
 *   goes on running is left running, as in Kubernetes (its output has nowhere to go any more, so
 *   writing more may end it with SIGPIPE, as there). A TTY works (tty=true, resize on channel 4).
 * - resourceVersion: one counter, bumped by every write; status changes bump nothing (nothing
 *   watches).
 *
 * Not implemented (refused with a Status naming what, never silently ignored): watch, patch,
 * update, dryRun, pod logs, attach, port-forward, eviction, creating namespaces or runtime
 * classes; a second container, init and ephemeral containers, probes, lifecycle hooks, env
 * valueFrom and envFrom, hostPort, volumes other than emptyDir, subPath, mount propagation,
 * seLinuxOptions, windowsOptions, Localhost seccomp and AppArmor profiles, hostAliases, dnsConfig,
 * activeDeadlineSeconds, readiness and scheduling gates, user namespaces (hostUsers: false).
 *
 * Trouble on demand: failNext(n) answers the next n requests 503 ServiceUnavailable; stall()
 * accepts connections and requests but answers none until unstall(); a held request whose client
 * gave up meanwhile is dropped without effect.
 *
 * Every container and volume it makes carries the label `agent-workspace.k8s-standin=<random per
 * instance>`; close() removes exactly those, so nothing else on the Docker engine is touched.
 */
import { execFile } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import https from "node:https";
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http";
import net, { type AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { promisify } from "node:util";
import Docker from "dockerode";
import type { INetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import type { INetworkPolicySpec } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicySpec";
import type { IContainer } from "kubernetes-models/v1/Container";
import type { IContainerState } from "kubernetes-models/v1/ContainerState";
import type { IPod } from "kubernetes-models/v1/Pod";
import type { IPodCondition } from "kubernetes-models/v1/PodCondition";
import type { IPodSpec } from "kubernetes-models/v1/PodSpec";
import type { IPodStatus } from "kubernetes-models/v1/PodStatus";
import { Header } from "tar";
import { type RawData, WebSocket, WebSocketServer } from "ws";
import { stringify as toYaml } from "yaml";

/** A running stand-in. */
export interface K8sStandIn {
  /** Path of a kubeconfig file for it (cluster server URL https://127.0.0.1:<port> with its CA data, a user with a bearer token, one context, the default namespace). */
  kubeconfig: string;
  /** https://127.0.0.1:<port> */
  server: string;
  /** The one bearer token it accepts. */
  token: string;
  /** Pods alive now: "namespace/name" → docker container id (pods whose container exists). */
  pods(): Map<string, string>;
  /** Network policies stored: "namespace/name" → object (a copy). */
  networkPolicies(): Map<string, unknown>;
  /** Makes the next N requests fail with 503 ServiceUnavailable (a cluster in trouble). */
  failNext(n: number): void;
  /** Stops answering altogether: connections and requests are accepted, then hang until `unstall()`. */
  stall(): void;
  /** Answers again, starting with the held requests whose clients are still there. */
  unstall(): void;
  /** Stops the server and removes every container and volume it made (label agent-workspace.k8s-standin=<random per instance>). */
  close(): Promise<void>;
}

/** What the stand-in serves. */
export interface K8sStandInOptions {
  /** The engine; by default dockerode's own (DOCKER_HOST or /var/run/docker.sock). */
  docker?: Docker;
  /** The namespaces that exist; by default ["default"]. */
  namespaces?: string[];
  /** RuntimeClass name → Docker runtime, e.g. { gvisor: "runsc" }; only these exist. */
  runtimeClasses?: Record<string, string>;
}

/** Starts a stand-in on 127.0.0.1 at a random port; nothing touches the engine until a pod is created. */
export async function startK8sStandIn(options: K8sStandInOptions = {}): Promise<K8sStandIn> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "k8s-standin-"));
  try {
    const tls = await makeCertificates(dir);
    const namespaces = options.namespaces ?? ["default"];
    const standIn = new StandIn({
      docker: options.docker ?? new Docker(),
      instance: randomBytes(8).toString("hex"),
      token: randomBytes(32).toString("base64url"),
      namespaces,
      runtimeClasses: new Map(Object.entries(options.runtimeClasses ?? {})),
      caPem: tls.ca,
    });
    const server = `https://127.0.0.1:${await standIn.listen(tls)}`;
    const kubeconfig = path.join(dir, "kubeconfig");
    const namespace = namespaces.includes("default") ? "default" : (namespaces[0] ?? "default");
    await writeFile(kubeconfig, kubeconfigText(server, tls.ca, standIn.token, namespace), { mode: 0o600 });
    return {
      kubeconfig,
      server,
      token: standIn.token,
      pods: () => standIn.podContainers(),
      networkPolicies: () => standIn.policyCopies(),
      failNext: (n) => standIn.failNext(n),
      stall: () => standIn.stall(),
      unstall: () => standIn.unstall(),
      close: async () => {
        await standIn.close();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** The label on every container and volume a stand-in makes; its value names the stand-in. */
const LABEL = "agent-workspace.k8s-standin";
/** The single node every pod is scheduled on. */
const NODE_NAME = "k8s-standin";
/** Where a real cluster mounts the service account's token, CA and namespace. */
const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
/** The API server's request body limit (3 MiB). */
const MAX_BODY = 3 * 1024 * 1024;
/** Bytes of exec output handed to the WebSocket and not yet written out before Docker is read no more. */
const EXEC_HIGH_WATER = 1024 * 1024;
/** What `resourceVersion` starts from (any opaque string would do; the client only echoes it). */
const FIRST_RESOURCE_VERSION = 1000;
/** The version /version reports. */
const VERSION = { major: "1", minor: "33", gitVersion: "v1.33.0+k8s-standin", gitTreeState: "clean", compiler: "gc", platform: "linux/amd64" };
/** Added to every pod by the DefaultTolerationSeconds admission plugin. */
const DEFAULT_TOLERATIONS = [
  { key: "node.kubernetes.io/not-ready", operator: "Exists", effect: "NoExecute", tolerationSeconds: 300 },
  { key: "node.kubernetes.io/unreachable", operator: "Exists", effect: "NoExecute", tolerationSeconds: 300 },
] as const;
/** The Kubernetes restart policies and the Docker ones that imitate them. */
const RESTART_POLICIES: Record<string, Docker.HostRestartPolicy> = {
  Always: { Name: "always" },
  OnFailure: { Name: "on-failure" },
  Never: { Name: "no" },
};
/** The words of every refusal of a field this stand-in does not implement. */
const NOT_IMPLEMENTED = "not implemented by the local Kubernetes stand-in";
/** The words of the cluster policy refusing host namespaces, hostPath and privileged containers. */
const CLUSTER_POLICY = "disallowed by cluster policy";
/** Pod spec fields the stand-in refuses when they are set (non-empty). */
const UNSUPPORTED_POD_FIELDS = [
  "initContainers",
  "ephemeralContainers",
  "hostAliases",
  "dnsConfig",
  "readinessGates",
  "schedulingGates",
  "resourceClaims",
  "activeDeadlineSeconds",
  "overhead",
] as const;
/** Container fields the stand-in refuses when they are set (non-empty). */
const UNSUPPORTED_CONTAINER_FIELDS = ["envFrom", "lifecycle", "livenessProbe", "readinessProbe", "startupProbe", "resizePolicy", "restartPolicy", "volumeDevices"] as const;
/** Container securityContext fields the stand-in refuses when they are set. */
const UNSUPPORTED_SECURITY_FIELDS = ["seLinuxOptions", "windowsOptions"] as const;

// ---------------------------------------------------------------------------------------------
// Kubernetes objects as the stand-in keeps them
// ---------------------------------------------------------------------------------------------

type ObjectMeta = NonNullable<IPod["metadata"]>;
/** The identity every stored object has. */
type StoredMeta = ObjectMeta & { name: string; namespace: string; uid: string; resourceVersion: string; creationTimestamp: string };
/** A pod as stored: metadata and spec with the API server's defaults, no status (read live). */
type StoredPod = IPod & { metadata: StoredMeta; spec: IPodSpec };
/** A network policy as stored, policyTypes defaulted. */
type StoredPolicy = INetworkPolicy & { metadata: StoredMeta; spec: INetworkPolicySpec };
type LabelSelector = NonNullable<INetworkPolicySpec["podSelector"]>;
type Volume = NonNullable<IPodSpec["volumes"]>[number];
type PodSecurityContext = NonNullable<IPodSpec["securityContext"]>;
type SecurityContext = NonNullable<IContainer["securityContext"]>;
type Phase = "Pending" | "Running" | "Succeeded" | "Failed";

/** Where the kind of an object is named in messages, as apimachinery's GroupResource and GroupKind. */
interface Kind {
  resource: string;
  group: string;
  kind: string;
}

const PODS: Kind = { resource: "pods", group: "", kind: "Pod" };
const NAMESPACES: Kind = { resource: "namespaces", group: "", kind: "Namespace" };
const NETWORK_POLICIES: Kind = { resource: "networkpolicies", group: "networking.k8s.io", kind: "NetworkPolicy" };
const RUNTIME_CLASSES: Kind = { resource: "runtimeclasses", group: "node.k8s.io", kind: "RuntimeClass" };

const qualifiedResource = (kind: Kind) => (kind.group ? `${kind.resource}.${kind.group}` : kind.resource);
const qualifiedKind = (kind: Kind) => (kind.group ? `${kind.kind}.${kind.group}` : kind.kind);

/** A time as Kubernetes writes it: RFC 3339, whole seconds. */
function kubeTime(date: Date | string): string {
  const text = typeof date === "string" ? date : date.toISOString();
  return text.replace(/\.\d+Z$/, "Z");
}

/** The random tail of generated names (generateName, kube-api-access-xxxxx), from the API server's alphabet. */
function nameSuffix(): string {
  const alphabet = "bcdfghjklmnpqrstvwxz2456789";
  return Array.from(randomBytes(5), (b) => alphabet[b % alphabet.length]).join("");
}

// ---------------------------------------------------------------------------------------------
// Status: every refusal, in the API server's words
// ---------------------------------------------------------------------------------------------

/** One reason a field is refused (StatusCause). */
interface StatusCause {
  reason?: string;
  message?: string;
  field?: string;
}

/** metav1.StatusDetails; empty fields are left out, as Go's omitempty does. */
interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  uid?: string;
  causes?: StatusCause[];
}

/** metav1.Status as the API server sends it. */
interface Status {
  kind: "Status";
  apiVersion: "v1";
  metadata: Record<string, never>;
  status: "Success" | "Failure";
  message?: string;
  reason?: string;
  details?: StatusDetails;
  code?: number;
}

/** A refusal: thrown by handlers, sent as its Status with its code. */
class ApiRefusal extends Error {
  readonly status: Status;

  constructor(code: number, reason: string, message: string, details?: StatusDetails) {
    super(message);
    this.status = failure(code, reason, message, details);
  }
}

function failure(code: number, reason: string, message: string, details?: StatusDetails): Status {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, ...(details ? { details: compact(details) } : {}), code };
}

function compact(details: StatusDetails): StatusDetails {
  return Object.fromEntries(Object.entries(details).filter(([, value]) => value !== "" && value !== undefined)) as StatusDetails;
}

function objectDetails(kind: Kind, name: string): StatusDetails {
  return { name, group: kind.group, kind: kind.resource };
}

const notFound = (kind: Kind, name: string) => new ApiRefusal(404, "NotFound", `${qualifiedResource(kind)} "${name}" not found`, objectDetails(kind, name));
const alreadyExists = (kind: Kind, name: string) => new ApiRefusal(409, "AlreadyExists", `${qualifiedResource(kind)} "${name}" already exists`, objectDetails(kind, name));
const badRequest = (message: string) => new ApiRefusal(400, "BadRequest", message);
const unsupportedRoute = () => new ApiRefusal(405, "MethodNotAllowed", `the server does not allow this method on the requested resource (${NOT_IMPLEMENTED})`);
const unknownRoute = () => new ApiRefusal(404, "NotFound", "the server could not find the requested resource");

/** apierrors.NewForbidden: `pods "x" is forbidden: <why>` (or `pods is forbidden: …` before a name exists). */
function forbidden(kind: Kind, name: string, why: string): ApiRefusal {
  const subject = name ? `${qualifiedResource(kind)} "${name}"` : qualifiedResource(kind);
  return new ApiRefusal(403, "Forbidden", `${subject} is forbidden: ${why}`, objectDetails(kind, name));
}

/** The Status sent for an error that is not a refusal (a bug or the engine failing), as apierrors.NewInternalError words it. */
function internalStatus(err: unknown): Status {
  const message = errorMessage(err);
  return failure(500, "InternalError", `Internal error occurred: ${message}`, { causes: [{ message }] });
}

function statusOfError(err: unknown): Status {
  return err instanceof ApiRefusal ? err.status : internalStatus(err);
}

// ---------------------------------------------------------------------------------------------
// Field errors (k8s.io/apimachinery/pkg/util/validation/field), and 422 Invalid
// ---------------------------------------------------------------------------------------------

type FieldErrorType = "Required" | "Invalid" | "Forbidden" | "NotSupported" | "Duplicate" | "NotFound";

/** One refused field: its path, what is wrong, the value when the message shows it. */
interface FieldError {
  type: FieldErrorType;
  field: string;
  value?: unknown;
  detail?: string;
}

/** Each error type's cause reason and the words its message starts with; whether the value is shown. */
const FIELD_ERRORS: Record<FieldErrorType, { cause: string; words: string; showsValue: boolean }> = {
  Required: { cause: "FieldValueRequired", words: "Required value", showsValue: false },
  Invalid: { cause: "FieldValueInvalid", words: "Invalid value", showsValue: true },
  Forbidden: { cause: "FieldValueForbidden", words: "Forbidden", showsValue: false },
  NotSupported: { cause: "FieldValueNotSupported", words: "Unsupported value", showsValue: true },
  Duplicate: { cause: "FieldValueDuplicate", words: "Duplicate value", showsValue: true },
  NotFound: { cause: "FieldValueNotFound", words: "Not found", showsValue: true },
};

/** field.Error.ErrorBody: `Invalid value: "x": detail`, `Required value`, `Forbidden: detail`. */
function errorBody(error: FieldError): string {
  const kind = FIELD_ERRORS[error.type];
  const head = kind.showsValue ? `${kind.words}: ${goValue(error.value)}` : kind.words;
  return error.detail ? `${head}: ${error.detail}` : head;
}

/** A value as field errors print it: strings quoted, numbers and booleans bare. */
function goValue(value: unknown): string {
  return typeof value === "number" || typeof value === "boolean" ? String(value) : JSON.stringify(value ?? null);
}

/** apierrors.NewInvalid: `Pod "x" is invalid: <field>: <body>`, or `[…, …]` for several. */
function invalid(kind: Kind, name: string, errors: FieldError[]): ApiRefusal {
  const lines = errors.map((e) => `${e.field}: ${errorBody(e)}`);
  const summary = lines.length === 1 ? lines[0] : `[${lines.join(", ")}]`;
  const causes = errors.map((e) => ({ reason: FIELD_ERRORS[e.type].cause, message: errorBody(e), field: e.field }));
  return new ApiRefusal(422, "Invalid", `${qualifiedKind(kind)} "${name}" is invalid: ${summary}`, { name, group: kind.group, kind: kind.kind, causes });
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_WORDS = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

function subdomainErrors(value: string, field: string): FieldError[] {
  if (value.length > 253) return [{ type: "Invalid", field, value, detail: "must be no more than 253 characters" }];
  if (DNS_SUBDOMAIN.test(value)) return [];
  const detail =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character " +
    "(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
  return [{ type: "Invalid", field, value, detail }];
}

function dnsLabelErrors(value: string, field: string): FieldError[] {
  if (value.length > 63) return [{ type: "Invalid", field, value, detail: "must be no more than 63 characters" }];
  if (DNS_LABEL.test(value)) return [];
  const detail =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character " +
    "(e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
  return [{ type: "Invalid", field, value, detail }];
}

/** Label keys (an optional DNS-subdomain prefix and a name) and values, as ValidateLabels checks them. */
function labelsErrors(labels: unknown, field: string): FieldError[] {
  if (labels === undefined || labels === null) return [];
  const errors: FieldError[] = [];
  for (const [key, value] of Object.entries(labels as Record<string, unknown>)) {
    const slash = key.indexOf("/");
    const [prefix, name] = slash < 0 ? ["", key] : [key.slice(0, slash), key.slice(slash + 1)];
    const keyValid = name.length <= 63 && QUALIFIED_NAME.test(name) && (slash < 0 || (prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix)));
    if (!keyValid) errors.push({ type: "Invalid", field, value: key, detail: `name part ${LABEL_WORDS}` });
    if (typeof value !== "string" || value.length > 63 || !LABEL_VALUE.test(value)) errors.push({ type: "Invalid", field, value, detail: `a valid label must be an empty string or ${LABEL_WORDS}` });
  }
  return errors;
}

/** The set fields of `object` among `names`, each refused as not implemented here. */
function unsupportedFields(object: object, names: readonly string[], at: string): FieldError[] {
  return names
    .filter((name) => isSet((object as Record<string, unknown>)[name]))
    .map((name) => ({ type: "Forbidden" as const, field: `${at}.${name}`, detail: NOT_IMPLEMENTED }));
}

/** Set as Go's omitempty sees it: not undefined, null, false, 0, "", [] or {}. */
function isSet(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === 0 || value === "") return false;
  if (Array.isArray(value)) return value.length > 0;
  return typeof value !== "object" || Object.keys(value).length > 0;
}

// ---------------------------------------------------------------------------------------------
// Quantities
// ---------------------------------------------------------------------------------------------

const QUANTITY = /^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$/;
const QUANTITY_SUFFIXES: Record<string, number> = {
  "": 1,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

/** A Kubernetes quantity as a number ("1500m" → 1.5, "512Mi" → 536870912, "1e3" → 1000); undefined when it is not one. */
function parseQuantity(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value !== "string") return undefined;
  const match = QUANTITY.exec(value);
  if (!match) return undefined;
  const number = Number(match[1]);
  if (!Number.isFinite(number)) return undefined;
  const exponent = /^[eE]([-+]?[0-9]+)$/.exec(match[2]);
  if (exponent) return number * 10 ** Number(exponent[1]);
  const scale = QUANTITY_SUFFIXES[match[2]];
  return scale === undefined ? undefined : number * scale;
}

/** Every quantity in a pod's spec that the stand-in reads, with where it is. */
function podQuantities(spec: IPodSpec | undefined): [unknown, string][] {
  const found: [unknown, string][] = [];
  for (const [i, c] of (spec?.containers ?? []).entries()) {
    for (const part of ["limits", "requests"] as const) {
      for (const [name, value] of Object.entries(c.resources?.[part] ?? {})) found.push([value, `spec.containers[${i}].resources.${part}[${name}]`]);
    }
  }
  for (const [i, v] of (spec?.volumes ?? []).entries()) if (v.emptyDir?.sizeLimit !== undefined) found.push([v.emptyDir.sizeLimit, `spec.volumes[${i}].emptyDir.sizeLimit`]);
  return found;
}

// ---------------------------------------------------------------------------------------------
// Selectors
// ---------------------------------------------------------------------------------------------

/** One selector requirement, in the form labels.Requirement has. */
interface Requirement {
  key: string;
  op: "in" | "notin" | "exists" | "!exists";
  values: string[];
}

const SELECTOR_KEY = "[A-Za-z0-9][-A-Za-z0-9_./]*";
const SELECTOR_VALUE = "[-A-Za-z0-9_.]*";

/** A labelSelector query parameter (`a=b,c!=d,e in (f,g),h,!i`); 400 when it does not parse. */
function parseLabelSelector(text: string | null): Requirement[] {
  if (!text) return [];
  return splitTopLevel(text).map((part) => parseRequirement(part.trim()));
}

function parseRequirement(part: string): Requirement {
  let m = new RegExp(`^!\\s*(${SELECTOR_KEY})$`).exec(part);
  if (m) return { key: m[1], op: "!exists", values: [] };
  m = new RegExp(`^(${SELECTOR_KEY})\\s*(==|=|!=)\\s*(${SELECTOR_VALUE})$`).exec(part);
  if (m) return { key: m[1], op: m[2] === "!=" ? "notin" : "in", values: [m[3]] };
  m = new RegExp(`^(${SELECTOR_KEY})\\s+(in|notin)\\s*\\(([^)]*)\\)$`).exec(part);
  if (m) return { key: m[1], op: m[2] as "in" | "notin", values: m[3].split(",").map((v) => v.trim()) };
  m = new RegExp(`^(${SELECTOR_KEY})$`).exec(part);
  if (m) return { key: m[1], op: "exists", values: [] };
  throw badRequest(`unable to parse requirement: <nil>: Invalid value: "${part}": not a valid label selector requirement`);
}

/** Splits at commas outside parentheses. */
function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "(") depth++;
    else if (text[i] === ")") depth--;
    else if (text[i] === "," && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts.filter((p) => p.trim() !== "");
}

/** A LabelSelector object (matchLabels, matchExpressions) as requirements; an empty one selects all. */
function selectorRequirements(selector: LabelSelector | undefined): Requirement[] {
  const ops: Record<string, Requirement["op"]> = { In: "in", NotIn: "notin", Exists: "exists", DoesNotExist: "!exists" };
  return [
    ...Object.entries(selector?.matchLabels ?? {}).map(([key, value]) => ({ key, op: "in" as const, values: [value] })),
    ...(selector?.matchExpressions ?? []).map((e) => ({ key: e.key, op: ops[e.operator], values: e.values ?? [] })),
  ];
}

function selects(requirements: Requirement[], labels: Record<string, string> | undefined): boolean {
  return requirements.every(({ key, op, values }) => {
    const has = labels !== undefined && Object.hasOwn(labels, key);
    switch (op) {
      case "in":
        return has && values.includes(labels[key]);
      case "notin":
        return !has || !values.includes(labels[key]);
      case "exists":
        return has;
      case "!exists":
        return !has;
    }
  });
}

/** A fieldSelector query parameter (`a=b,c!=d`) against the fields `known` reads. */
function fieldSelector<T>(text: string | null, known: Record<string, (item: T) => string | undefined>): (item: T) => boolean {
  const terms = splitTopLevel(text ?? "").map((term) => {
    const m = /^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$/.exec(term);
    if (!m) throw badRequest(`invalid selector: '${text}'; can't understand '${term}'`);
    const read = known[m[1]];
    if (!read) throw badRequest(`field label not supported: ${m[1]}`);
    return { read, equal: m[2] !== "!=", value: m[3] };
  });
  return (item) => terms.every(({ read, equal, value }) => (read(item) === value) === equal);
}

/** The page of `items` (sorted by key) that `limit` and `continue` ask for, and the token of the next. */
function paginate<T>(items: [string, T][], url: URL): { page: T[]; next: string | undefined } {
  const sorted = items.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const token = url.searchParams.get("continue");
  let after: string | undefined;
  if (token) {
    try {
      after = JSON.parse(Buffer.from(token, "base64url").toString("utf8")).after;
    } catch {
      throw badRequest("continue key is not valid");
    }
    if (typeof after !== "string") throw badRequest("continue key is not valid");
  }
  const rest = after === undefined ? sorted : sorted.filter(([key]) => key > (after as string));
  const limit = Number(url.searchParams.get("limit") ?? 0);
  if (!(limit > 0) || rest.length <= limit) return { page: rest.map(([, item]) => item), next: undefined };
  const page = rest.slice(0, limit);
  return { page: page.map(([, item]) => item), next: Buffer.from(JSON.stringify({ after: page[page.length - 1][0] })).toString("base64url") };
}

// ---------------------------------------------------------------------------------------------
// Pods: decoding, admission, defaults, validation
// ---------------------------------------------------------------------------------------------

/** Refuses (400) what the API server cannot even decode as a Pod: wrong kind or shape, a namespace other than the path's, a malformed quantity. */
function decodePod(body: Record<string, unknown>, namespace: string): IPod & { metadata: ObjectMeta } {
  const cannot = (why: string) => badRequest(`Pod in version "v1" cannot be handled as a Pod: ${why}`);
  if (body.kind !== undefined && body.kind !== "Pod") throw badRequest(`the kind in the data (${String(body.kind)}) does not match the expected kind (Pod)`);
  if (body.apiVersion !== undefined && body.apiVersion !== "v1") throw badRequest(`the API version in the data (${String(body.apiVersion)}) does not match the expected API version (v1)`);
  const metadata = (body.metadata ?? {}) as ObjectMeta;
  const spec = body.spec as IPodSpec | undefined;
  if (typeof metadata !== "object" || Array.isArray(metadata)) throw cannot("metadata must be an object");
  if (metadata.namespace && metadata.namespace !== namespace) throw badRequest("the namespace of the provided object does not match the namespace sent on the request");
  if (spec !== undefined && (typeof spec !== "object" || spec === null || Array.isArray(spec))) throw cannot("spec must be an object");
  for (const list of ["containers", "volumes"] as const) {
    const items = spec?.[list];
    if (items !== undefined && (!Array.isArray(items) || items.some((item) => typeof item !== "object" || item === null))) throw cannot(`spec.${list} must be an array of objects`);
  }
  for (const [value] of podQuantities(spec)) {
    if (parseQuantity(value) === undefined) throw cannot("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
  }
  return { apiVersion: "v1", kind: "Pod", metadata, ...(spec ? { spec } : {}) };
}

/** The name a create gives the object: metadata.name, or generateName and a random suffix. */
function nameFor(metadata: ObjectMeta): string {
  if (metadata.name) return metadata.name;
  return metadata.generateName ? `${metadata.generateName}${nameSuffix()}` : "";
}

/** What the API server validates of a pod (ValidatePodCreate), plus the refusals of this stand-in's limits. */
function podErrors(pod: IPod & { metadata: ObjectMeta }, name: string): FieldError[] {
  if (!name) return [{ type: "Required", field: "metadata.name", detail: "name or generateName is required" }];
  return [...subdomainErrors(name, "metadata.name"), ...labelsErrors(pod.metadata.labels, "metadata.labels"), ...podSpecErrors(pod.spec ?? { containers: [] })];
}

function podSpecErrors(spec: IPodSpec): FieldError[] {
  const errors: FieldError[] = [];
  const containers = spec.containers ?? [];
  if (containers.length === 0) errors.push({ type: "Required", field: "spec.containers" });
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  const names = new Set<string>();
  for (const [i, c] of containers.entries()) {
    if (i > 0) errors.push({ type: "Forbidden", field: `spec.containers[${i}]`, detail: `a second container is ${NOT_IMPLEMENTED}` });
    if (c.name && names.has(c.name)) errors.push({ type: "Duplicate", field: `spec.containers[${i}].name`, value: c.name });
    names.add(c.name);
    errors.push(...containerErrors(c, `spec.containers[${i}]`, volumes));
  }
  if (spec.restartPolicy !== undefined && !Object.hasOwn(RESTART_POLICIES, spec.restartPolicy)) {
    errors.push({ type: "NotSupported", field: "spec.restartPolicy", value: spec.restartPolicy, detail: 'supported values: "Always", "Never", "OnFailure"' });
  }
  for (const host of ["hostNetwork", "hostPID", "hostIPC"] as const) if (spec[host]) errors.push({ type: "Forbidden", field: `spec.${host}`, detail: CLUSTER_POLICY });
  if (spec.hostUsers === false) errors.push({ type: "Forbidden", field: "spec.hostUsers", detail: NOT_IMPLEMENTED });
  if (spec.terminationGracePeriodSeconds !== undefined && spec.terminationGracePeriodSeconds < 0) {
    errors.push({ type: "Invalid", field: "spec.terminationGracePeriodSeconds", value: spec.terminationGracePeriodSeconds, detail: "must be greater than or equal to 0" });
  }
  if (spec.runtimeClassName !== undefined) errors.push(...subdomainErrors(spec.runtimeClassName, "spec.runtimeClassName"));
  errors.push(...idErrors(spec.securityContext, "spec.securityContext"), ...volumeErrors(spec.volumes ?? []), ...unsupportedFields(spec, UNSUPPORTED_POD_FIELDS, "spec"));
  return errors;
}

function containerErrors(c: IContainer, at: string, volumes: Map<string, Volume>): FieldError[] {
  const errors: FieldError[] = [];
  if (!c.name) errors.push({ type: "Required", field: `${at}.name` });
  else errors.push(...dnsLabelErrors(c.name, `${at}.name`));
  if (!c.image?.trim()) errors.push({ type: "Required", field: `${at}.image` });
  for (const [i, e] of (c.env ?? []).entries()) {
    if (!e.name) errors.push({ type: "Required", field: `${at}.env[${i}].name` });
    if (e.valueFrom) errors.push({ type: "Forbidden", field: `${at}.env[${i}].valueFrom`, detail: NOT_IMPLEMENTED });
  }
  for (const [i, p] of (c.ports ?? []).entries()) if (p.hostPort) errors.push({ type: "Forbidden", field: `${at}.ports[${i}].hostPort`, detail: NOT_IMPLEMENTED });
  errors.push(...securityContextErrors(c.securityContext, `${at}.securityContext`), ...mountErrors(c, at, volumes), ...resourceErrors(c, at));
  return [...errors, ...unsupportedFields(c, UNSUPPORTED_CONTAINER_FIELDS, at)];
}

function securityContextErrors(sc: SecurityContext | undefined, at: string): FieldError[] {
  if (!sc) return [];
  const errors: FieldError[] = [...idErrors(sc, at), ...unsupportedFields(sc, UNSUPPORTED_SECURITY_FIELDS, at)];
  if (sc.privileged) errors.push({ type: "Forbidden", field: `${at}.privileged`, detail: CLUSTER_POLICY });
  if (sc.procMount !== undefined && sc.procMount !== "Default") errors.push({ type: "Forbidden", field: `${at}.procMount`, detail: NOT_IMPLEMENTED });
  if (sc.seccompProfile?.type === "Localhost") errors.push({ type: "Forbidden", field: `${at}.seccompProfile`, detail: NOT_IMPLEMENTED });
  if (sc.appArmorProfile?.type === "Localhost") errors.push({ type: "Forbidden", field: `${at}.appArmorProfile`, detail: NOT_IMPLEMENTED });
  return errors;
}

/** runAsUser and runAsGroup in range (pod or container level). */
function idErrors(sc: { runAsUser?: number; runAsGroup?: number } | undefined, at: string): FieldError[] {
  return (["runAsUser", "runAsGroup"] as const)
    .filter((field) => sc?.[field] !== undefined && !(Number.isInteger(sc[field]) && (sc[field] as number) >= 0 && (sc[field] as number) <= 2147483647))
    .map((field) => ({ type: "Invalid" as const, field: `${at}.${field}`, value: sc?.[field], detail: "must be between 0 and 2147483647, inclusive" }));
}

function mountErrors(c: IContainer, at: string, volumes: Map<string, Volume>): FieldError[] {
  const errors: FieldError[] = [];
  const paths = new Set<string>();
  for (const [i, m] of (c.volumeMounts ?? []).entries()) {
    const field = `${at}.volumeMounts[${i}]`;
    const volume = volumes.get(m.name);
    if (!volume) errors.push({ type: "NotFound", field: `${field}.name`, value: m.name });
    if (!m.mountPath) errors.push({ type: "Required", field: `${field}.mountPath` });
    else if (paths.has(m.mountPath)) errors.push({ type: "Invalid", field: `${field}.mountPath`, value: m.mountPath, detail: "must be unique" });
    paths.add(m.mountPath);
    errors.push(...unsupportedFields(m, ["subPath", "subPathExpr", "mountPropagation", "recursiveReadOnly"], field));
  }
  return errors;
}

/** Limits and requests: not negative, each request at most its limit (the API server's words). */
function resourceErrors(c: IContainer, at: string): FieldError[] {
  const errors: FieldError[] = [];
  const limits = c.resources?.limits ?? {};
  const requests = c.resources?.requests ?? {};
  for (const [part, values] of [["limits", limits], ["requests", requests]] as const) {
    for (const [name, value] of Object.entries(values)) {
      if ((parseQuantity(value) ?? 0) < 0) errors.push({ type: "Invalid", field: `${at}.resources.${part}[${name}]`, value: String(value), detail: "must be greater than or equal to 0" });
    }
  }
  for (const [name, request] of Object.entries(requests)) {
    const limit = limits[name];
    if (limit !== undefined && (parseQuantity(request) ?? 0) > (parseQuantity(limit) ?? 0)) {
      errors.push({ type: "Invalid", field: `${at}.resources.requests`, value: String(request), detail: `must be less than or equal to ${name} limit of ${String(limit)}` });
    }
  }
  return errors;
}

function volumeErrors(volumes: Volume[]): FieldError[] {
  const errors: FieldError[] = [];
  const names = new Set<string>();
  for (const [i, v] of volumes.entries()) {
    const at = `spec.volumes[${i}]`;
    if (!v.name) errors.push({ type: "Required", field: `${at}.name` });
    else if (names.has(v.name)) errors.push({ type: "Duplicate", field: `${at}.name`, value: v.name });
    else errors.push(...dnsLabelErrors(v.name, `${at}.name`));
    names.add(v.name);
    const sources = Object.keys(v).filter((key) => key !== "name");
    if (sources.length === 0) errors.push({ type: "Required", field: at, detail: "must specify a volume type" });
    for (const source of sources) {
      if (source === "hostPath") errors.push({ type: "Forbidden", field: `${at}.hostPath`, detail: CLUSTER_POLICY });
      else if (source !== "emptyDir") errors.push({ type: "Forbidden", field: `${at}.${source}`, detail: NOT_IMPLEMENTED });
    }
    const medium = v.emptyDir?.medium;
    if (medium !== undefined && medium !== "" && medium !== "Memory") errors.push({ type: "NotSupported", field: `${at}.emptyDir.medium`, value: medium, detail: 'supported values: "", "Memory"' });
  }
  return errors;
}

/** The pod as the API server stores it: identity, the node, and the defaults it fills in. */
function withPodDefaults(pod: IPod & { metadata: ObjectMeta; spec: IPodSpec }, identity: StoredMeta): StoredPod {
  const spec = pod.spec;
  const serviceAccount = spec.serviceAccountName ?? spec.serviceAccount ?? "default";
  const { uid: _uid, resourceVersion: _rv, creationTimestamp: _ct, deletionTimestamp: _dt, ...metadata } = pod.metadata;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { ...metadata, ...identity },
    spec: {
      ...spec,
      containers: spec.containers.map(withContainerDefaults),
      restartPolicy: spec.restartPolicy ?? "Always",
      terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds ?? 30,
      dnsPolicy: spec.dnsPolicy ?? "ClusterFirst",
      securityContext: spec.securityContext ?? {},
      schedulerName: spec.schedulerName ?? "default-scheduler",
      serviceAccountName: serviceAccount,
      serviceAccount,
      nodeName: NODE_NAME,
      enableServiceLinks: spec.enableServiceLinks ?? true,
      priority: spec.priority ?? 0,
      preemptionPolicy: spec.preemptionPolicy ?? "PreemptLowerPriority",
      tolerations: [...(spec.tolerations ?? []), ...DEFAULT_TOLERATIONS],
    },
  };
}

function withContainerDefaults(c: IContainer): IContainer {
  const limits = c.resources?.limits;
  const requests = limits ? { ...pick(limits, ["cpu", "memory"]), ...c.resources?.requests } : c.resources?.requests;
  return {
    ...c,
    resources: { ...c.resources, ...(requests ? { requests } : {}) },
    terminationMessagePath: c.terminationMessagePath ?? "/dev/termination-log",
    terminationMessagePolicy: c.terminationMessagePolicy ?? "File",
    imagePullPolicy: c.imagePullPolicy ?? defaultPullPolicy(c.image ?? ""),
  };
}

function pick<T>(record: Record<string, T>, keys: string[]): Record<string, T> {
  return Object.fromEntries(Object.entries(record).filter(([key]) => keys.includes(key)));
}

/** Always for an untagged or :latest image, else IfNotPresent (the API server's default; nothing is pulled here either way). */
function defaultPullPolicy(image: string): "Always" | "IfNotPresent" {
  if (image.includes("@")) return "IfNotPresent";
  const last = image.slice(image.lastIndexOf("/") + 1);
  const tag = last.includes(":") ? last.slice(last.indexOf(":") + 1) : "latest";
  return tag === "latest" ? "Always" : "IfNotPresent";
}

/** What the ServiceAccount admission plugin adds when the token is mounted: the kube-api-access volume and its mount. */
function withServiceAccountToken(pod: StoredPod): void {
  const name = `kube-api-access-${nameSuffix()}`;
  pod.spec.volumes = [
    ...(pod.spec.volumes ?? []),
    {
      name,
      projected: {
        defaultMode: 0o644,
        sources: [
          { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
          { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
          { downwardAPI: { items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }] } },
        ],
      },
    },
  ];
  for (const c of pod.spec.containers) c.volumeMounts = [...(c.volumeMounts ?? []), { name, readOnly: true, mountPath: SERVICE_ACCOUNT_DIR }];
}

/** The imitated enforcement: true when the policies selecting the pod for Egress all deny every destination. */
function egressDenied(labels: Record<string, string> | undefined, policies: StoredPolicy[]): boolean {
  const selecting = policies.filter((p) => (p.spec.policyTypes ?? []).includes("Egress") && selects(selectorRequirements(p.spec.podSelector), labels));
  return selecting.length > 0 && selecting.every((p) => (p.spec.egress ?? []).length === 0);
}

// ---------------------------------------------------------------------------------------------
// Network policies: decoding, validation, defaults
// ---------------------------------------------------------------------------------------------

function decodePolicy(body: Record<string, unknown>, namespace: string): INetworkPolicy & { metadata: ObjectMeta; spec: INetworkPolicySpec } {
  if (body.kind !== undefined && body.kind !== "NetworkPolicy") throw badRequest(`the kind in the data (${String(body.kind)}) does not match the expected kind (NetworkPolicy)`);
  if (body.apiVersion !== undefined && body.apiVersion !== "networking.k8s.io/v1") {
    throw badRequest(`the API version in the data (${String(body.apiVersion)}) does not match the expected API version (networking.k8s.io/v1)`);
  }
  const metadata = (body.metadata ?? {}) as ObjectMeta;
  if (metadata.namespace && metadata.namespace !== namespace) throw badRequest("the namespace of the provided object does not match the namespace sent on the request");
  const spec = (body.spec ?? {}) as INetworkPolicySpec;
  if (typeof spec !== "object" || Array.isArray(spec)) throw badRequest('NetworkPolicy in version "v1" cannot be handled as a NetworkPolicy: spec must be an object');
  return { apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", metadata, spec };
}

function policyErrors(policy: { metadata: ObjectMeta; spec: INetworkPolicySpec }, name: string): FieldError[] {
  if (!name) return [{ type: "Required", field: "metadata.name", detail: "name or generateName is required" }];
  const errors = [...subdomainErrors(name, "metadata.name"), ...labelsErrors(policy.metadata.labels, "metadata.labels")];
  errors.push(...selectorErrors(policy.spec.podSelector, "spec.podSelector"));
  const types = policy.spec.policyTypes ?? [];
  for (const [i, type] of types.entries()) {
    if (type !== "Ingress" && type !== "Egress") errors.push({ type: "NotSupported", field: `spec.policyTypes[${i}]`, value: type, detail: 'supported values: "Egress", "Ingress"' });
  }
  if (types.length > 2) errors.push({ type: "Invalid", field: "spec.policyTypes", value: types, detail: "may not specify more than two policyTypes" });
  return errors;
}

function selectorErrors(selector: LabelSelector | undefined, at: string): FieldError[] {
  const errors = labelsErrors(selector?.matchLabels, `${at}.matchLabels`);
  for (const [i, e] of (selector?.matchExpressions ?? []).entries()) {
    const field = `${at}.matchExpressions[${i}]`;
    if (!["In", "NotIn", "Exists", "DoesNotExist"].includes(e.operator)) {
      errors.push({ type: "NotSupported", field: `${field}.operator`, value: e.operator, detail: 'supported values: "DoesNotExist", "Exists", "In", "NotIn"' });
    } else if ((e.operator === "In" || e.operator === "NotIn") && !(e.values ?? []).length) {
      errors.push({ type: "Required", field: `${field}.values`, detail: "must be specified when `operator` is 'In' or 'NotIn'" });
    } else if ((e.operator === "Exists" || e.operator === "DoesNotExist") && (e.values ?? []).length) {
      errors.push({ type: "Forbidden", field: `${field}.values`, detail: "may not be specified when `operator` is 'Exists' or 'DoesNotExist'" });
    }
  }
  return errors;
}

/** policyTypes as the API server defaults them: Ingress, and Egress when egress rules are given. */
function withPolicyDefaults(spec: INetworkPolicySpec): INetworkPolicySpec {
  const policyTypes = spec.policyTypes ?? ["Ingress", ...((spec.egress ?? []).length > 0 ? (["Egress"] as const) : [])];
  return { ...spec, podSelector: spec.podSelector ?? {}, policyTypes };
}

// ---------------------------------------------------------------------------------------------
// Pod status, read from Docker
// ---------------------------------------------------------------------------------------------

/** Why the container does not run yet, as the kubelet reports a waiting container. */
interface Waiting {
  reason: string;
  message?: string;
}

/** One pod: what is stored, and the kubelet's side of it (its container, why it waits, its end). */
class PodRecord {
  readonly key: string;
  readonly object: StoredPod;
  container: Docker.Container | undefined;
  waiting: Waiting = { reason: "ContainerCreating" };
  /** The imitated egress enforcement, decided when the pod is created: "none" when a policy denies all egress. */
  network: "bridge" | "none" = "bridge";
  /** The Docker volumes made for its volumes (emptyDirs, the service account token): pod volume name → Docker volume name. */
  readonly volumes = new Map<string, string>();
  /** Settles once the kubelet's part is done: the container started, or the pod left waiting. */
  started: Promise<void> = Promise.resolve();
  /** Set by delete: settles once the container is gone. */
  terminating: Promise<void> | undefined;

  constructor(object: StoredPod) {
    this.object = object;
    this.key = `${object.metadata.namespace}/${object.metadata.name}`;
  }

  get container0(): IContainer {
    return this.object.spec.containers[0];
  }
}

/** What Docker says of the container: the kubelet's view of it. */
interface Observed {
  phase: Phase;
  ready: boolean;
  running: boolean;
  state: IContainerState;
  lastState: IContainerState;
  restartCount: number;
  containerID?: string;
  imageID: string;
  podIP?: string;
  startedAt?: string;
}

/** The pod's container as Docker has it: undefined before it exists, null once it vanished. */
function observe(record: PodRecord, info: Docker.ContainerInspectInfo | null | undefined): Observed {
  if (info === undefined) return { phase: "Pending", ready: false, running: false, state: { waiting: record.waiting }, lastState: {}, restartCount: 0, imageID: "" };
  if (info === null) {
    const terminated = { exitCode: 137, reason: "ContainerStatusUnknown", message: "The container could not be located when the pod was terminated" };
    return { phase: "Failed", ready: false, running: false, state: { terminated }, lastState: {}, restartCount: 0, imageID: "" };
  }
  const base = { restartCount: info.RestartCount ?? 0, containerID: `docker://${info.Id}`, imageID: info.Image, lastState: {} };
  const s = info.State;
  if (s.Running && !s.Restarting) {
    const startedAt = kubeTime(s.StartedAt);
    return { ...base, phase: "Running", ready: true, running: true, state: { running: { startedAt } }, podIP: podIP(info), startedAt };
  }
  if (s.Status === "created") return { ...base, phase: "Pending", ready: false, running: false, state: { waiting: record.waiting } };
  const terminated = terminatedState(info);
  if (s.Restarting || (record.terminating === undefined && restartsAfter(record.object.spec.restartPolicy, s.ExitCode))) {
    const { metadata } = record.object;
    const message = `back-off restarting failed container ${record.container0.name} in pod ${metadata.name}_${metadata.namespace}(${metadata.uid})`;
    return { ...base, phase: "Running", ready: false, running: false, state: { waiting: { reason: "CrashLoopBackOff", message } }, lastState: { terminated } };
  }
  return { ...base, phase: s.ExitCode === 0 ? "Succeeded" : "Failed", ready: false, running: false, state: { terminated } };
}

function restartsAfter(policy: string | undefined, exitCode: number): boolean {
  return policy === "Always" || (policy === "OnFailure" && exitCode !== 0);
}

function terminatedState(info: Docker.ContainerInspectInfo): NonNullable<IContainerState["terminated"]> {
  const s = info.State;
  const reason = s.OOMKilled ? "OOMKilled" : s.ExitCode === 0 ? "Completed" : "Error";
  return { exitCode: s.ExitCode, reason, startedAt: kubeTime(s.StartedAt), finishedAt: kubeTime(s.FinishedAt), containerID: `docker://${info.Id}` };
}

function podIP(info: Docker.ContainerInspectInfo): string | undefined {
  const networks = Object.values(info.NetworkSettings?.Networks ?? {});
  const legacy = (info.NetworkSettings as { IPAddress?: string } | undefined)?.IPAddress;
  return networks.map((n) => n.IPAddress).find(Boolean) || legacy || undefined;
}

/** The pod's status as the kubelet would have posted it. */
function podStatus(record: PodRecord, seen: Observed): IPodStatus {
  const { metadata } = record.object;
  const c = record.container0;
  const created = metadata.creationTimestamp;
  const terminal = seen.phase === "Succeeded" || seen.phase === "Failed";
  const notReady = { reason: terminal ? "PodCompleted" : "ContainersNotReady", message: terminal ? undefined : `containers with unready status: [${c.name}]` };
  const readiness = (type: string): IPodCondition => ({ type, status: seen.ready ? "True" : "False", lastTransitionTime: seen.startedAt ?? created, ...(seen.ready ? {} : notReady) });
  return {
    phase: seen.phase,
    conditions: [
      { type: "PodReadyToStartContainers", status: seen.containerID ? "True" : "False", lastTransitionTime: created },
      { type: "Initialized", status: "True", lastTransitionTime: created },
      readiness("Ready"),
      readiness("ContainersReady"),
      { type: "PodScheduled", status: "True", lastTransitionTime: created },
    ],
    hostIP: "127.0.0.1",
    hostIPs: [{ ip: "127.0.0.1" }],
    ...(seen.podIP ? { podIP: seen.podIP, podIPs: [{ ip: seen.podIP }] } : {}),
    startTime: created,
    containerStatuses: [
      {
        name: c.name,
        image: c.image ?? "",
        imageID: seen.imageID,
        ...(seen.containerID ? { containerID: seen.containerID } : {}),
        ready: seen.ready,
        started: seen.running,
        restartCount: seen.restartCount,
        state: seen.state,
        lastState: seen.lastState,
      },
    ],
    qosClass: qosClass(c),
  };
}

/** Guaranteed when cpu and memory limits equal their requests, BestEffort with neither, else Burstable. */
function qosClass(c: IContainer): "Guaranteed" | "Burstable" | "BestEffort" {
  const limits = c.resources?.limits ?? {};
  const requests = c.resources?.requests ?? {};
  if (Object.keys(limits).length === 0 && Object.keys(requests).length === 0) return "BestEffort";
  const guaranteed = ["cpu", "memory"].every((r) => limits[r] !== undefined && parseQuantity(limits[r]) === parseQuantity(requests[r] ?? limits[r]));
  return guaranteed ? "Guaranteed" : "Burstable";
}

// ---------------------------------------------------------------------------------------------
// The container a pod becomes
// ---------------------------------------------------------------------------------------------

/** What the container needs beyond the pod: the stand-in's label, the runtime, the network decision, the token volume. */
interface ContainerPlan {
  instance: string;
  runtime: string | undefined;
  network: "bridge" | "none";
  volumes: Map<string, string>;
  imageUser: string;
}

/** The Docker container for a pod's (one) container. */
function containerOptions(pod: StoredPod, plan: ContainerPlan): Docker.ContainerCreateOptions {
  const { metadata, spec } = pod;
  const c = spec.containers[0];
  const env = containerEnv(c);
  const expand = (list: string[] | undefined) => list?.map((arg) => expandReferences(arg, env));
  const user = containerUser(spec.securityContext ?? {}, c.securityContext ?? {}, plan.imageUser);
  return {
    name: `k8s-standin-${metadata.namespace}-${metadata.name}-${metadata.uid.slice(0, 8)}`,
    Image: c.image,
    Hostname: hostnameOf(spec.hostname ?? metadata.name),
    ...(c.command ? { Entrypoint: expand(c.command), Cmd: expand(c.args) ?? [] } : c.args ? { Cmd: expand(c.args) } : {}),
    Env: [...env].map(([name, value]) => `${name}=${value}`),
    ...(c.workingDir ? { WorkingDir: c.workingDir } : {}),
    ...(user ? { User: user } : {}),
    Tty: c.tty ?? false,
    OpenStdin: c.stdin ?? false,
    StdinOnce: c.stdinOnce ?? false,
    Labels: { [LABEL]: plan.instance, [`${LABEL}.pod`]: `${metadata.namespace}/${metadata.name}`, [`${LABEL}.uid`]: metadata.uid },
    HostConfig: {
      NetworkMode: plan.network,
      ...(plan.runtime ? { Runtime: plan.runtime } : {}),
      ...resourceLimits(c),
      ...securityOptions(spec.securityContext ?? {}, c.securityContext ?? {}),
      Mounts: volumeMounts(c, plan.volumes),
      RestartPolicy: RESTART_POLICIES[spec.restartPolicy ?? "Always"],
      // One container sharing the pod's process namespace has the pause process as pid 1, which
      // reaps orphans and is not the command; Docker's init (tini) is that. Otherwise pid 1 is the command.
      Init: spec.shareProcessNamespace === true,
    },
  };
}

/** The container's environment in order, each value with $(VAR) references to earlier ones expanded. */
function containerEnv(c: IContainer): Map<string, string> {
  const env = new Map<string, string>();
  for (const e of c.env ?? []) env.set(e.name, expandReferences(e.value ?? "", env));
  return env;
}

/** The kubelet's expansion: $(NAME) of a defined variable → its value, $$ → $, anything else as written. */
function expandReferences(text: string, env: Map<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][-._A-Za-z0-9]*)\)/g, (match, name: string | undefined) => (name === undefined ? "$" : (env.get(name) ?? match)));
}

/** The pod's hostname: at most 63 characters, not ending in '-' or '.' (the kubelet truncates it so). */
function hostnameOf(name: string): string {
  return name.slice(0, 63).replace(/[-.]+$/, "");
}

/** runAsUser/runAsGroup (container first, then pod) as Docker's User; undefined keeps the image's. */
function containerUser(pod: PodSecurityContext, c: SecurityContext, imageUser: string): string | undefined {
  const uid = c.runAsUser ?? pod.runAsUser;
  const gid = c.runAsGroup ?? pod.runAsGroup;
  if (uid === undefined && gid === undefined) return undefined;
  const user = uid !== undefined ? String(uid) : imageUser.split(":")[0] || "0";
  return gid !== undefined ? `${user}:${gid}` : user;
}

/** The kubelet's refusal to start a runAsNonRoot container that would run as root, or undefined. */
function nonRootRefusal(pod: StoredPod, imageUser: string): string | undefined {
  const c = pod.spec.containers[0];
  const sc = c.securityContext ?? {};
  const podSc = pod.spec.securityContext ?? {};
  if (!(sc.runAsNonRoot ?? podSc.runAsNonRoot)) return undefined;
  const where = `(pod: "${pod.metadata.name}_${pod.metadata.namespace}(${pod.metadata.uid})", container: ${c.name})`;
  const uid = sc.runAsUser ?? podSc.runAsUser;
  if (uid !== undefined) return uid === 0 ? `container's runAsUser breaks non-root policy ${where}` : undefined;
  const imageUid = imageUser.split(":")[0] || "0";
  if (!/^\d+$/.test(imageUid)) return `container has runAsNonRoot and image has non-numeric user (${imageUid}), cannot verify user is non-root ${where}`;
  return Number(imageUid) === 0 ? `container has runAsNonRoot and image will run as root ${where}` : undefined;
}

/** limits.cpu → NanoCpus, limits.memory → Memory (no swap, as on a Kubernetes node), requests.cpu → CpuShares. */
function resourceLimits(c: IContainer): Partial<Docker.HostConfig> {
  const cpu = parseQuantity(c.resources?.limits?.cpu);
  const memory = parseQuantity(c.resources?.limits?.memory);
  const cpuRequest = parseQuantity(c.resources?.requests?.cpu);
  return {
    ...(cpu !== undefined ? { NanoCpus: Math.round(cpu * 1e9) } : {}),
    ...(memory !== undefined ? { Memory: Math.ceil(memory), MemorySwap: Math.ceil(memory) } : {}),
    ...(cpuRequest ? { CpuShares: Math.max(2, Math.round(cpuRequest * 1024)) } : {}),
  };
}

/** Capabilities, read-only root, no-new-privileges, seccomp and groups. */
function securityOptions(pod: PodSecurityContext, c: SecurityContext): Partial<Docker.HostConfig> {
  const securityOpt: string[] = [];
  if (c.allowPrivilegeEscalation === false) securityOpt.push("no-new-privileges");
  // The kubelet runs a container unconfined unless a profile is asked for (its --seccomp-default is off).
  if ((c.seccompProfile?.type ?? pod.seccompProfile?.type ?? "Unconfined") === "Unconfined") securityOpt.push("seccomp=unconfined");
  const groups = [...(pod.supplementalGroups ?? []), ...(pod.fsGroup !== undefined ? [pod.fsGroup] : [])].map(String);
  return {
    ReadonlyRootfs: c.readOnlyRootFilesystem === true,
    ...(c.capabilities?.add?.length ? { CapAdd: c.capabilities.add } : {}),
    ...(c.capabilities?.drop?.length ? { CapDrop: c.capabilities.drop } : {}),
    ...(securityOpt.length ? { SecurityOpt: securityOpt } : {}),
    ...(groups.length ? { GroupAdd: groups } : {}),
  };
}

/**
 * The container's volumeMounts on the pod's Docker volumes, nocopy: Docker copies the image's
 * files into an empty volume otherwise, and an emptyDir starts empty.
 */
function volumeMounts(c: IContainer, volumes: Map<string, string>): Docker.MountConfig {
  return (c.volumeMounts ?? []).map((m) => ({
    Type: "volume",
    Source: volumes.get(m.name) ?? "",
    Target: m.mountPath,
    ReadOnly: m.readOnly === true,
    // The typings want Labels and DriverConfig too; they only matter when a mount makes its volume.
    VolumeOptions: { NoCopy: true } as Docker.MountSettings["VolumeOptions"],
  }));
}

/** An emptyDir's tmpfs: mode 0777 as the kubelet makes it (setgid and the fsGroup's group with one), sizeLimit as its size. */
function emptyDirDriverOptions(emptyDir: NonNullable<Volume["emptyDir"]>, fsGroup: number | undefined): Record<string, string> {
  const size = parseQuantity(emptyDir.sizeLimit);
  const options = [fsGroup !== undefined ? `mode=2777,gid=${fsGroup}` : "mode=0777", ...(size ? [`size=${Math.ceil(size)}`] : [])];
  return { type: "tmpfs", device: "tmpfs", o: options.join(",") };
}

/** A tar of small regular files owned by root, mode 0644. */
function tarOf(files: Record<string, string>): Buffer {
  const blocks: Buffer[] = [];
  for (const [name, content] of Object.entries(files)) {
    const data = Buffer.from(content);
    const header = new Header({ path: name, mode: 0o644, size: data.length, type: "File", mtime: new Date(), uid: 0, gid: 0 });
    header.encode();
    blocks.push(header.block ?? Buffer.alloc(512), data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** A token that looks like a service account's JWT; nothing accepts it. */
function fakeServiceAccountToken(pod: StoredPod): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const { namespace, name, uid } = pod.metadata;
  const account = pod.spec.serviceAccountName ?? "default";
  const claims = {
    aud: ["https://kubernetes.default.svc"],
    iss: "https://kubernetes.default.svc",
    sub: `system:serviceaccount:${namespace}:${account}`,
    "kubernetes.io": { namespace, pod: { name, uid }, serviceaccount: { name: account } },
  };
  return `${part({ alg: "RS256", kid: "k8s-standin" })}.${part(claims)}.${randomBytes(32).toString("base64url")}`;
}

// ---------------------------------------------------------------------------------------------
// Exec: the channel protocol over a WebSocket, a Docker exec below
// ---------------------------------------------------------------------------------------------

/** The channels of the k8s.io channel protocols: the first byte of every binary message. */
const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, status: 3, resize: 4, close: 255 } as const;
const V5 = "v5.channel.k8s.io";
const V4 = "v4.channel.k8s.io";

/** The protocol spoken: the first of the client's that the stand-in knows (client-node offers v5 first). */
function pickProtocol(offered: Iterable<string>): string | undefined {
  for (const protocol of offered) if (protocol === V5 || protocol === V4) return protocol;
  return undefined;
}

/** What an exec asked for (the query parameters). */
interface ExecFlags {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

/** Go's strconv.ParseBool, as the API server reads the flags. */
function queryFlag(query: URLSearchParams, name: string): boolean {
  const value = query.get(name);
  if (value === null || value === "") return false;
  if (["1", "t", "T", "true", "TRUE", "True"].includes(value)) return true;
  if (["0", "f", "F", "false", "FALSE", "False"].includes(value)) return false;
  throw badRequest(`strconv.ParseBool: parsing "${value}": invalid syntax`);
}

/**
 * One exec: a Docker exec already created, run once a WebSocket is up. Output goes out in the
 * pieces Docker delivers it, read from Docker only while the WebSocket keeps up; input is written
 * to Docker with the WebSocket paused whenever Docker's side is full.
 */
class ExecSession {
  readonly #exec: Docker.Exec;
  readonly #flags: ExecFlags;
  readonly #command: string[];

  constructor(exec: Docker.Exec, flags: ExecFlags, command: string[]) {
    this.#exec = exec;
    this.#flags = flags;
    this.#command = command;
  }

  async run(ws: WebSocket): Promise<void> {
    ws.on("error", () => {});
    const sender = new ChannelSender(ws);
    // Listening from the first moment: the client sends stdin as soon as the socket is open.
    const input = new ExecInput(ws, this.#flags, this.#exec);
    let stream: Duplex;
    try {
      stream = (await this.#exec.start({ hijack: true, stdin: this.#flags.stdin, Tty: this.#flags.tty })) as unknown as Duplex;
    } catch (err) {
      await sender.send(statusMessage(internalStatus(err)));
      return void ws.close(1000);
    }
    stream.on("error", () => {});
    // The client went away: EOF on stdin once what it sent is written; the command may go on.
    const leave = () => stream.end(() => stream.destroy());
    if (ws.readyState === WebSocket.OPEN) ws.on("close", leave);
    else leave();
    input.attach(stream);
    // As the kubelet does: an empty message on the lowest writable channel says the streams are up.
    await sender.send(Buffer.of(this.#flags.stdout ? CHANNEL.stdout : this.#flags.stderr ? CHANNEL.stderr : CHANNEL.status));
    try {
      for await (const [channel, data] of this.#flags.tty ? raw(stream) : demultiplex(stream)) await sender.send(Buffer.concat([Buffer.of(channel), data]));
    } catch {
      // Docker cut the stream: the container went away, or the client did.
    }
    // Input may have been held back for a stdin nobody reads any more; the close handshake needs reading.
    ws.resume();
    if (ws.readyState !== WebSocket.OPEN) return;
    await sender.send(statusMessage(await exitStatus(this.#exec, this.#command)));
    ws.close(1000);
  }
}

/**
 * An exec's input from the WebSocket: stdin written to Docker (the WebSocket paused whenever
 * Docker's side is full, so a fast writer is held back by TCP, not buffered here), resize, and
 * v5's close of stdin. What arrives before Docker's stream exists is queued, with the WebSocket
 * paused meanwhile.
 */
class ExecInput {
  readonly #ws: WebSocket;
  readonly #flags: ExecFlags;
  readonly #exec: Docker.Exec;
  #stream: Duplex | undefined;
  #queued: Buffer[] = [];
  #awaitingDrain = false;

  constructor(ws: WebSocket, flags: ExecFlags, exec: Docker.Exec) {
    this.#ws = ws;
    this.#flags = flags;
    this.#exec = exec;
    ws.pause();
    ws.on("message", (message: RawData, isBinary: boolean) => {
      if (!isBinary || !Buffer.isBuffer(message) || message.length === 0) return;
      if (this.#stream) this.#take(this.#stream, message);
      else this.#queued.push(message);
    });
  }

  attach(stream: Duplex): void {
    this.#stream = stream;
    for (const message of this.#queued) this.#take(stream, message);
    this.#queued = [];
    if (!this.#awaitingDrain) this.#ws.resume();
  }

  #take(stream: Duplex, message: Buffer): void {
    switch (message[0]) {
      case CHANNEL.stdin:
        return this.#write(stream, message.subarray(1));
      case CHANNEL.resize:
        if (this.#flags.tty) void this.#resize(message.subarray(1));
        return;
      case CHANNEL.close:
        if (this.#ws.protocol === V5 && message[1] === CHANNEL.stdin && this.#flags.stdin) stream.end();
        return;
    }
  }

  #write(stream: Duplex, data: Buffer): void {
    if (!this.#flags.stdin || stream.writableEnded || stream.destroyed) return;
    if (stream.write(data) || this.#awaitingDrain) return;
    this.#awaitingDrain = true;
    this.#ws.pause();
    stream.once("drain", () => {
      this.#awaitingDrain = false;
      this.#ws.resume();
    });
  }

  async #resize(data: Buffer): Promise<void> {
    try {
      const size = JSON.parse(data.toString("utf8")) as { Width?: number; Height?: number };
      await this.#exec.resize({ w: Number(size.Width), h: Number(size.Height) });
    } catch {
      // A resize that cannot be applied is dropped, as the kubelet logs and drops it.
    }
  }
}

/** Sends channel messages, waiting while too much is handed to the socket and not yet written out. */
class ChannelSender {
  readonly #ws: WebSocket;
  #inFlight = 0;
  #room: (() => void) | undefined;

  constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on("close", () => this.#wake());
  }

  async send(message: Buffer): Promise<void> {
    if (this.#ws.readyState !== WebSocket.OPEN) return;
    this.#inFlight += message.length;
    this.#ws.send(message, { binary: true }, () => {
      this.#inFlight -= message.length;
      if (this.#inFlight <= EXEC_HIGH_WATER / 2) this.#wake();
    });
    while (this.#inFlight > EXEC_HIGH_WATER && this.#ws.readyState === WebSocket.OPEN) {
      await new Promise<void>((resolve) => (this.#room = resolve));
    }
  }

  #wake(): void {
    const room = this.#room;
    this.#room = undefined;
    room?.();
  }
}

function statusMessage(status: object): Buffer {
  return Buffer.concat([Buffer.of(CHANNEL.status), Buffer.from(JSON.stringify(status))]);
}

/** Docker's multiplexed exec output (8-byte frame headers) as [channel, bytes] pieces. */
async function* demultiplex(stream: AsyncIterable<Buffer>): AsyncGenerator<[number, Buffer]> {
  let pending: Buffer = Buffer.alloc(0);
  for await (const chunk of stream) {
    pending = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 8) {
      const size = pending.readUInt32BE(4);
      if (pending.length < 8 + size) break;
      if (size > 0) yield [pending[0] === 2 ? CHANNEL.stderr : CHANNEL.stdout, pending.subarray(8, 8 + size)];
      pending = pending.subarray(8 + size);
    }
  }
}

/** A TTY's output, all of it stdout. */
async function* raw(stream: AsyncIterable<Buffer>): AsyncGenerator<[number, Buffer]> {
  for await (const chunk of stream) yield [CHANNEL.stdout, chunk];
}

/**
 * The exec's end as the kubelet reports it on the status channel: Success, or Failure with reason
 * NonZeroExitCode and the code as the ExitCode cause (containerd's message), or an internal error
 * when the container went away.
 */
async function exitStatus(exec: Docker.Exec, command: string[]): Promise<object> {
  for (let wait = 5; ; wait = Math.min(wait * 2, 200)) {
    const info = await exec.inspect().catch(() => undefined);
    if (!info) return internalStatus(new Error("error executing command in container: container not found"));
    if (!info.Running) {
      const code = info.ExitCode ?? -1;
      if (code === 0) return { metadata: {}, status: "Success" };
      const message = `command terminated with non-zero exit code: error executing command [${command.join(" ")}], exit code ${code}`;
      return { metadata: {}, status: "Failure", message, reason: "NonZeroExitCode", details: { causes: [{ reason: "ExitCode", message: String(code) }] } };
    }
    await delay(wait);
  }
}

// ---------------------------------------------------------------------------------------------
// The stand-in: serving, routing, handlers
// ---------------------------------------------------------------------------------------------

interface StandInDeps {
  docker: Docker;
  instance: string;
  token: string;
  namespaces: string[];
  runtimeClasses: Map<string, string>;
  caPem: Buffer;
}

/** A handler's answer: the HTTP code and the JSON body. */
interface Reply {
  code: number;
  body: unknown;
}

type Handler = (req: IncomingMessage, url: URL, params: string[]) => Promise<Reply>;

const EXEC_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/;
/** Paths of the resources the stand-in knows, for 405 rather than 404 when a method or subresource is not served. */
const KNOWN_RESOURCE = /^\/(api\/v1|apis\/(networking|node)\.k8s\.io\/v1)\/(namespaces\/[^/]+\/)?(pods|networkpolicies|namespaces|runtimeclasses)(\/|$)/;

class StandIn {
  readonly token: string;
  readonly #deps: StandInDeps;
  readonly #pods = new Map<string, PodRecord>();
  readonly #policies = new Map<string, StoredPolicy>();
  readonly #created = new Date();
  /** Kubelet work and terminations in flight, which close() waits for. */
  readonly #inFlight = new Set<Promise<void>>();
  readonly #sockets = new Set<net.Socket>();
  readonly #wss = new WebSocketServer({ noServer: true, handleProtocols: (offered) => pickProtocol(offered) ?? false });
  #front: net.Server | undefined;
  #https: https.Server | undefined;
  #resourceVersion = FIRST_RESOURCE_VERSION;
  #failures = 0;
  #stalled: PromiseWithResolvers<void> | undefined;
  #closed = false;
  /** The API's routes: method ("*" for any), path, handler (the path's groups are its parameters). */
  readonly #routes: [string, RegExp, Handler][] = [
    ["GET", /^\/version\/?$/, async () => ({ code: 200, body: VERSION })],
    ["GET", /^\/api\/?$/, async () => ({ code: 200, body: this.#apiVersions() })],
    ["GET", /^\/apis\/?$/, async () => ({ code: 200, body: API_GROUPS })],
    ["GET", /^\/api\/v1\/namespaces$/, async () => this.#listNamespaces()],
    ["GET", /^\/api\/v1\/namespaces\/([^/]+)$/, async (_req, _url, [ns]) => this.#getNamespace(ns)],
    ["GET", /^\/api\/v1\/pods$/, (_req, url) => this.#listPods(url, undefined)],
    ["GET", /^\/api\/v1\/namespaces\/([^/]+)\/pods$/, (_req, url, [ns]) => this.#listPods(url, ns)],
    ["POST", /^\/api\/v1\/namespaces\/([^/]+)\/pods$/, (req, url, [ns]) => this.#createPod(req, url, ns)],
    ["GET", /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/, (_req, _url, [ns, name]) => this.#getPod(ns, name)],
    ["DELETE", /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/, (req, url, [ns, name]) => this.#deletePod(req, url, ns, name)],
    ["*", EXEC_PATH, async () => Promise.reject(badRequest("Upgrade request required"))],
    ["GET", /^\/apis\/networking\.k8s\.io\/v1\/networkpolicies$/, async (_req, url) => this.#listPolicies(url, undefined)],
    ["GET", /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies$/, async (_req, url, [ns]) => this.#listPolicies(url, ns)],
    ["POST", /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies$/, (req, url, [ns]) => this.#createPolicy(req, url, ns)],
    ["GET", /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies\/([^/]+)$/, async (_req, _url, [ns, name]) => this.#getPolicy(ns, name)],
    ["DELETE", /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies\/([^/]+)$/, (req, url, [ns, name]) => this.#deletePolicy(req, url, ns, name)],
    ["GET", /^\/apis\/node\.k8s\.io\/v1\/runtimeclasses$/, async () => this.#listRuntimeClasses()],
    ["GET", /^\/apis\/node\.k8s\.io\/v1\/runtimeclasses\/([^/]+)$/, async (_req, _url, [name]) => this.#getRuntimeClass(name)],
  ];

  constructor(deps: StandInDeps) {
    this.#deps = deps;
    this.token = deps.token;
  }

  /**
   * Listens on 127.0.0.1 and returns the port. A plain TCP server accepts and hands each
   * connection to the HTTPS server, so that stall() can hold connections before TLS even starts.
   */
  async listen(credentials: { key: Buffer; cert: Buffer }): Promise<number> {
    this.#https = https.createServer({ key: credentials.key, cert: credentials.cert, requestTimeout: 0 }, this.#onRequest);
    this.#https.on("upgrade", this.#onUpgrade);
    this.#front = net.createServer((socket) => void this.#accept(socket));
    this.#front.listen(0, "127.0.0.1");
    await once(this.#front, "listening");
    return (this.#front.address() as AddressInfo).port;
  }

  podContainers(): Map<string, string> {
    return new Map([...this.#pods.values()].filter((r) => r.container).map((r) => [r.key, r.container?.id ?? ""]));
  }

  policyCopies(): Map<string, unknown> {
    return new Map([...this.#policies].map(([key, policy]) => [key, structuredClone(policy)]));
  }

  failNext(n: number): void {
    this.#failures = n;
  }

  stall(): void {
    this.#stalled ??= Promise.withResolvers<void>();
  }

  unstall(): void {
    this.#stalled?.resolve();
    this.#stalled = undefined;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#front?.close();
    this.#https?.close();
    for (const ws of this.#wss.clients) ws.terminate();
    for (const socket of this.#sockets) socket.destroy();
    this.unstall();
    // Work in flight may still make a container; it is swept with the rest once it is done.
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
    const { docker, instance } = this.#deps;
    const filters = { label: [`${LABEL}=${instance}`] };
    const containers = await docker.listContainers({ all: true, filters });
    await Promise.all(containers.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch(ignoreNotFound)));
    const volumes = (await docker.listVolumes({ filters })).Volumes ?? [];
    await Promise.all(volumes.map((v) => docker.getVolume(v.Name).remove().catch(ignoreNotFound)));
    this.#pods.clear();
  }

  // --- serving ---

  async #accept(socket: net.Socket): Promise<void> {
    this.#sockets.add(socket);
    socket.once("close", () => this.#sockets.delete(socket));
    socket.on("error", () => {});
    while (this.#stalled) await this.#stalled.promise;
    if (!socket.destroyed && !this.#closed) this.#https?.emit("connection", socket);
  }

  /**
   * What every request meets before its handler, in this order: a stall (held until unstall;
   * dropped if its client left meanwhile), an armed failure (503), the bearer token (401).
   */
  async #gate(req: IncomingMessage): Promise<Status | "dropped" | undefined> {
    while (this.#stalled) await this.#stalled.promise;
    if (req.socket.destroyed || this.#closed) return "dropped";
    if (this.#failures > 0) {
      this.#failures--;
      return failure(503, "ServiceUnavailable", "the local Kubernetes stand-in was told to refuse this request (failNext)");
    }
    const authorization = req.headers.authorization ?? "";
    if (authorization !== `Bearer ${this.token}`) return failure(401, "Unauthorized", "Unauthorized");
    return undefined;
  }

  readonly #onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    this.#respond(req, res).catch((err: unknown) => {
      if (res.headersSent) res.destroy();
      else sendJson(res, statusOfError(err).code ?? 500, statusOfError(err));
    });
  };

  async #respond(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const gate = await this.#gate(req);
    if (gate === "dropped") return void res.destroy();
    if (gate) {
      req.resume();
      return sendJson(res, gate.code ?? 500, gate);
    }
    const url = new URL(req.url ?? "/", "https://k8s-standin");
    const reply = await this.#route(req, url);
    sendJson(res, reply.code, reply.body);
  }

  async #route(req: IncomingMessage, url: URL): Promise<Reply> {
    for (const [method, pattern, handler] of this.#routes) {
      const match = method === "*" || method === req.method ? pattern.exec(url.pathname) : null;
      if (match) return handler(req, url, match.slice(1).map(decodeURIComponent));
    }
    req.resume();
    throw KNOWN_RESOURCE.test(url.pathname) ? unsupportedRoute() : unknownRoute();
  }

  readonly #onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    socket.on("error", () => {});
    this.#upgrade(req, socket, head).catch((err: unknown) => refuseUpgrade(socket, statusOfError(err)));
  };

  /** An exec's WebSocket: checked like any request, then the exec prepared, then the upgrade. */
  async #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const gate = await this.#gate(req);
    if (gate === "dropped") return void socket.destroy();
    if (gate) return refuseUpgrade(socket, gate);
    const url = new URL(req.url ?? "/", "https://k8s-standin");
    const match = EXEC_PATH.exec(url.pathname);
    if (!match) throw KNOWN_RESOURCE.test(url.pathname) ? unsupportedRoute() : unknownRoute();
    const offered = String(req.headers["sec-websocket-protocol"] ?? "").split(",").map((p) => p.trim());
    if (!pickProtocol(offered)) throw badRequest(`the local Kubernetes stand-in speaks only ${V5} and ${V4}; offered: ${offered.join(", ") || "none"}`);
    const session = await this.#prepareExec(decodeURIComponent(match[1]), decodeURIComponent(match[2]), url.searchParams);
    this.#wss.handleUpgrade(req, socket, head, (ws) => void session.run(ws));
  }

  // --- discovery, namespaces, runtime classes ---

  #apiVersions() {
    const address = this.#front?.address() as AddressInfo | undefined;
    return { kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: `127.0.0.1:${address?.port ?? 0}` }] };
  }

  #listNamespaces(): Reply {
    return { code: 200, body: this.#list("NamespaceList", "v1", this.#deps.namespaces.map((ns) => this.#namespace(ns))) };
  }

  #getNamespace(name: string): Reply {
    if (!this.#deps.namespaces.includes(name)) throw notFound(NAMESPACES, name);
    return { code: 200, body: { apiVersion: "v1", kind: "Namespace", ...this.#namespace(name) } };
  }

  #namespace(name: string) {
    const metadata = this.#fixedMeta(name);
    return { metadata: { ...metadata, labels: { "kubernetes.io/metadata.name": name } }, spec: { finalizers: ["kubernetes"] }, status: { phase: "Active" } };
  }

  #requireNamespace(name: string): void {
    if (!this.#deps.namespaces.includes(name)) throw notFound(NAMESPACES, name);
  }

  #listRuntimeClasses(): Reply {
    const items = [...this.#deps.runtimeClasses].map(([name, handler]) => ({ metadata: this.#fixedMeta(name), handler }));
    return { code: 200, body: this.#list("RuntimeClassList", "node.k8s.io/v1", items) };
  }

  #getRuntimeClass(name: string): Reply {
    const handler = this.#deps.runtimeClasses.get(name);
    if (handler === undefined) throw notFound(RUNTIME_CLASSES, name);
    return { code: 200, body: { apiVersion: "node.k8s.io/v1", kind: "RuntimeClass", metadata: this.#fixedMeta(name), handler } };
  }

  /** Metadata of the objects that exist from the start (namespaces, runtime classes). */
  #fixedMeta(name: string) {
    return { name, uid: fixedUid(name), resourceVersion: String(FIRST_RESOURCE_VERSION), creationTimestamp: kubeTime(this.#created) };
  }

  #list(kind: string, apiVersion: string, items: unknown[], next?: string) {
    return { kind, apiVersion, metadata: { resourceVersion: String(this.#resourceVersion), ...(next ? { continue: next } : {}) }, items };
  }

  #nextResourceVersion(): string {
    this.#resourceVersion += 1;
    return String(this.#resourceVersion);
  }

  // --- pods ---

  /** Create: admission, defaults, validation, storage; the kubelet's part starts after the answer. */
  async #createPod(req: IncomingMessage, url: URL, ns: string): Promise<Reply> {
    refuseDryRun(url);
    const pod = decodePod(await readObject(req), ns);
    this.#requireNamespace(ns);
    const name = nameFor(pod.metadata);
    this.#admitPod(pod, name, ns);
    const errors = podErrors(pod, name);
    if (errors.length > 0) throw invalid(PODS, name, errors);
    if (this.#pods.has(`${ns}/${name}`)) throw alreadyExists(PODS, name);
    const identity = { name, namespace: ns, uid: randomUUID(), resourceVersion: this.#nextResourceVersion(), creationTimestamp: kubeTime(new Date()) };
    const stored = withPodDefaults(pod as IPod & { metadata: ObjectMeta; spec: IPodSpec }, identity);
    if (stored.spec.automountServiceAccountToken !== false) withServiceAccountToken(stored);
    const record = new PodRecord(stored);
    record.network = egressDenied(stored.metadata.labels, this.#policiesIn(ns)) ? "none" : "bridge";
    this.#pods.set(record.key, record);
    record.started = this.#track(this.#runPod(record));
    return { code: 201, body: await this.#podView(record) };
  }

  /** The admission plugins that can refuse a pod before validation: ServiceAccount (only "default" exists), RuntimeClass. */
  #admitPod(pod: IPod, name: string, ns: string): void {
    const account = pod.spec?.serviceAccountName ?? pod.spec?.serviceAccount ?? "default";
    if (account !== "default") throw forbidden(PODS, name, `error looking up service account ${ns}/${account}: serviceaccount "${account}" not found`);
    const runtimeClass = pod.spec?.runtimeClassName;
    if (runtimeClass !== undefined && !this.#deps.runtimeClasses.has(runtimeClass)) throw forbidden(PODS, name, `pod rejected: RuntimeClass "${runtimeClass}" not found`);
  }

  /**
   * The kubelet's part: the image (never pulled), runAsNonRoot, the token volume, the container,
   * its start. Whatever stops it leaves the pod waiting with the kubelet's reason.
   */
  async #runPod(record: PodRecord): Promise<void> {
    if (this.#closed) return;
    try {
      const imageUser = await this.#imageUser(record);
      if (imageUser === undefined) return;
      const refusal = nonRootRefusal(record.object, imageUser);
      if (refusal) return void (record.waiting = { reason: "CreateContainerConfigError", message: refusal });
      await this.#makeVolumes(record);
      record.container = await this.#deps.docker.createContainer(containerOptions(record.object, this.#plan(record, imageUser))).catch((err: unknown) => {
        record.waiting = { reason: "CreateContainerError", message: errorMessage(err) };
        return undefined;
      });
      await record.container?.start().catch((err: unknown) => {
        record.waiting = { reason: "RunContainerError", message: errorMessage(err) };
      });
    } catch (err) {
      record.waiting = { reason: "CreateContainerError", message: errorMessage(err) };
    }
  }

  /** The image's user ("" for root), or undefined when the engine has no such image (the pod then waits in ErrImagePull). */
  async #imageUser(record: PodRecord): Promise<string | undefined> {
    const image = record.container0.image ?? "";
    const found = await this.#deps.docker.getImage(image).inspect().catch((err: unknown) => (statusOf(err) === 404 ? undefined : Promise.reject(err)));
    if (!found) record.waiting = { reason: "ErrImagePull", message: `Failed to pull image "${image}": the local Kubernetes stand-in pulls nothing, and the Docker engine has no image "${image}"` };
    return found ? (found.Config?.User ?? "") : undefined;
  }

  /** What the container needs beyond the pod. */
  #plan(record: PodRecord, imageUser: string): ContainerPlan {
    const { spec } = record.object;
    return {
      instance: this.#deps.instance,
      runtime: spec.runtimeClassName ? this.#deps.runtimeClasses.get(spec.runtimeClassName) : undefined,
      network: record.network,
      volumes: record.volumes,
      imageUser,
    };
  }

  /** A Docker volume for each emptyDir the container mounts, and the token's when it is mounted. */
  async #makeVolumes(record: PodRecord): Promise<void> {
    const { spec, metadata } = record.object;
    const mounted = new Set((record.container0.volumeMounts ?? []).map((m) => m.name));
    for (const volume of spec.volumes ?? []) {
      if (!mounted.has(volume.name)) continue;
      const name = `k8s-standin-${metadata.uid}-${volume.name}`;
      if (volume.emptyDir) {
        const options = emptyDirDriverOptions(volume.emptyDir, spec.securityContext?.fsGroup);
        await this.#deps.docker.createVolume({ Name: name, Driver: "local", DriverOpts: options, Labels: { [LABEL]: this.#deps.instance } });
      } else if (volume.projected) {
        await this.#serviceAccountVolume(record, name);
      }
      record.volumes.set(volume.name, name);
    }
  }

  /**
   * The token, CA and namespace, put into a Docker volume through a container that is created and
   * never started (a running container's read-only mount cannot be written), then removed.
   */
  async #serviceAccountVolume(record: PodRecord, name: string): Promise<void> {
    const { docker, instance, caPem } = this.#deps;
    const pod = record.object;
    await docker.createVolume({ Name: name, Labels: { [LABEL]: instance } });
    const helper = await docker.createContainer({
      Image: record.container0.image,
      Entrypoint: ["/k8s-standin-never-started"],
      Cmd: [],
      Labels: { [LABEL]: instance },
      NetworkDisabled: true,
      HostConfig: { Mounts: [{ Type: "volume", Source: name, Target: "/token" }] },
    });
    try {
      const files = { token: fakeServiceAccountToken(pod), "ca.crt": caPem.toString("utf8"), namespace: pod.metadata.namespace };
      await helper.putArchive(tarOf(files), { path: "/token" });
    } finally {
      await helper.remove({ force: true }).catch(ignoreNotFound);
    }
  }

  async #getPod(ns: string, name: string): Promise<Reply> {
    return { code: 200, body: await this.#podView(this.#pod(ns, name)) };
  }

  #pod(ns: string, name: string): PodRecord {
    const record = this.#pods.get(`${ns}/${name}`);
    if (!record) throw notFound(PODS, name);
    return record;
  }

  /** The stored pod with its status read from Docker now. */
  async #podView(record: PodRecord): Promise<StoredPod> {
    const info = record.container ? await record.container.inspect().catch((err: unknown) => (statusOf(err) === 404 ? null : Promise.reject(err))) : undefined;
    return { ...structuredClone(record.object), status: podStatus(record, observe(record, info)) };
  }

  async #listPods(url: URL, ns: string | undefined): Promise<Reply> {
    refuseWatch(url);
    const requirements = parseLabelSelector(url.searchParams.get("labelSelector"));
    const matching = [...this.#pods.values()].filter((r) => (ns === undefined || r.object.metadata.namespace === ns) && selects(requirements, r.object.metadata.labels));
    const views = await Promise.all(matching.map((r) => this.#podView(r)));
    const byField = fieldSelector<StoredPod>(url.searchParams.get("fieldSelector"), {
      "metadata.name": (p) => p.metadata.name,
      "metadata.namespace": (p) => p.metadata.namespace,
      "spec.nodeName": (p) => p.spec.nodeName,
      "status.phase": (p) => p.status?.phase,
    });
    const { page, next } = paginate(views.filter(byField).map((p) => [`${p.metadata.namespace}/${p.metadata.name}`, withoutTypeMeta(p)] as [string, unknown]), url);
    return { code: 200, body: this.#list("PodList", "v1", page, next) };
  }

  /**
   * Delete: deletionTimestamp set and the pod answered; the container stopped with the grace
   * period and removed, the object gone after it (at once with a grace period of 0).
   */
  async #deletePod(req: IncomingMessage, url: URL, ns: string, name: string): Promise<Reply> {
    const options = await readObject(req, true);
    refuseDryRun(url, options);
    const record = this.#pod(ns, name);
    checkPreconditions(options, record.object.metadata, PODS);
    const grace = gracePeriod(url, options, record.object.spec.terminationGracePeriodSeconds ?? 30);
    if (!record.terminating) {
      record.object.metadata.deletionTimestamp = kubeTime(new Date(Date.now() + grace * 1000));
      record.object.metadata.deletionGracePeriodSeconds = grace;
      record.object.metadata.resourceVersion = this.#nextResourceVersion();
      record.terminating = this.#track(this.#terminate(record, grace));
    }
    const view = await this.#podView(record);
    if (grace === 0 && this.#pods.get(record.key) === record) this.#pods.delete(record.key);
    return { code: 200, body: view };
  }

  /** The kubelet's part of a delete: stop (SIGTERM, SIGKILL after the grace period), remove, then forget the pod. */
  async #terminate(record: PodRecord, grace: number): Promise<void> {
    await record.started;
    try {
      await record.container?.stop({ t: grace }).catch(() => {});
      await record.container?.remove({ force: true, v: true }).catch(ignoreNotFound);
      for (const volume of record.volumes.values()) await this.#deps.docker.getVolume(volume).remove().catch(ignoreNotFound);
    } finally {
      if (this.#pods.get(record.key) === record) this.#pods.delete(record.key);
    }
  }

  /** Keeps `work` among what close() waits for, until it settles. */
  #track(work: Promise<void>): Promise<void> {
    const tracked = work.catch(() => {});
    this.#inFlight.add(tracked);
    void tracked.then(() => this.#inFlight.delete(tracked));
    return tracked;
  }

  // --- network policies ---

  async #createPolicy(req: IncomingMessage, url: URL, ns: string): Promise<Reply> {
    refuseDryRun(url);
    const policy = decodePolicy(await readObject(req), ns);
    this.#requireNamespace(ns);
    const name = nameFor(policy.metadata);
    const errors = policyErrors(policy, name);
    if (errors.length > 0) throw invalid(NETWORK_POLICIES, name, errors);
    if (this.#policies.has(`${ns}/${name}`)) throw alreadyExists(NETWORK_POLICIES, name);
    const { uid: _uid, resourceVersion: _rv, creationTimestamp: _ct, ...metadata } = policy.metadata;
    const identity = { name, namespace: ns, uid: randomUUID(), resourceVersion: this.#nextResourceVersion(), creationTimestamp: kubeTime(new Date()) };
    const stored: StoredPolicy = { ...policy, metadata: { ...metadata, ...identity, generation: 1 }, spec: withPolicyDefaults(policy.spec) };
    this.#policies.set(`${ns}/${name}`, stored);
    return { code: 201, body: structuredClone(stored) };
  }

  #getPolicy(ns: string, name: string): Reply {
    const policy = this.#policies.get(`${ns}/${name}`);
    if (!policy) throw notFound(NETWORK_POLICIES, name);
    return { code: 200, body: structuredClone(policy) };
  }

  #listPolicies(url: URL, ns: string | undefined): Reply {
    refuseWatch(url);
    const requirements = parseLabelSelector(url.searchParams.get("labelSelector"));
    const byField = fieldSelector<StoredPolicy>(url.searchParams.get("fieldSelector"), { "metadata.name": (p) => p.metadata.name, "metadata.namespace": (p) => p.metadata.namespace });
    const matching = [...this.#policies].filter(([, p]) => (ns === undefined || p.metadata.namespace === ns) && selects(requirements, p.metadata.labels) && byField(p));
    const { page, next } = paginate(matching.map(([key, p]) => [key, withoutTypeMeta(structuredClone(p))] as [string, unknown]), url);
    return { code: 200, body: this.#list("NetworkPolicyList", "networking.k8s.io/v1", page, next) };
  }

  #policiesIn(ns: string): StoredPolicy[] {
    return [...this.#policies.values()].filter((p) => p.metadata.namespace === ns);
  }

  /** Delete: the object goes at once; pods made while it existed keep what it decided. */
  async #deletePolicy(req: IncomingMessage, url: URL, ns: string, name: string): Promise<Reply> {
    const options = await readObject(req, true);
    refuseDryRun(url, options);
    const policy = this.#policies.get(`${ns}/${name}`);
    if (!policy) throw notFound(NETWORK_POLICIES, name);
    checkPreconditions(options, policy.metadata, NETWORK_POLICIES);
    this.#policies.delete(`${ns}/${name}`);
    const details = compact({ ...objectDetails(NETWORK_POLICIES, name), uid: policy.metadata.uid });
    return { code: 200, body: { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", details } };
  }

  // --- exec ---

  /** Checks the pod, its container and the flags, and creates the Docker exec; refusals are HTTP answers, before the upgrade. */
  async #prepareExec(ns: string, name: string, query: URLSearchParams): Promise<ExecSession> {
    const record = this.#pod(ns, name);
    const c = record.container0;
    const wanted = query.get("container") || c.name;
    if (wanted !== c.name) throw badRequest(`container ${wanted} is not valid for pod ${name}`);
    const command = query.getAll("command");
    if (command.length === 0) throw badRequest("you must specify at least 1 command");
    const flags = { stdin: queryFlag(query, "stdin"), stdout: queryFlag(query, "stdout"), stderr: queryFlag(query, "stderr"), tty: queryFlag(query, "tty") };
    if (!flags.stdin && !flags.stdout && !flags.stderr) throw badRequest("you must specify at least 1 of stdin, stdout, stderr");
    const view = await this.#podView(record);
    const phase = view.status?.phase;
    if (phase === "Succeeded" || phase === "Failed") throw badRequest(`cannot exec into a container in a completed pod; current phase is ${phase}`);
    if (!record.container || !view.status?.containerStatuses?.[0]?.state?.running) throw badRequest(`unable to upgrade connection: container not found ("${c.name}")`);
    // No User: an exec runs as the container's user, as Kubernetes always does.
    const exec = await record.container.exec({ Cmd: command, AttachStdin: flags.stdin, AttachStdout: flags.stdout, AttachStderr: flags.stderr && !flags.tty, Tty: flags.tty });
    return new ExecSession(exec, flags, command);
  }
}

/** /apis: the groups served besides core v1. */
const API_GROUPS = {
  kind: "APIGroupList",
  apiVersion: "v1",
  groups: ["networking.k8s.io", "node.k8s.io"].map((name) => {
    const version = { groupVersion: `${name}/v1`, version: "v1" };
    return { name, versions: [version], preferredVersion: version };
  }),
};

/** A stable uid for the objects that exist from the start. */
function fixedUid(name: string): string {
  const hex = Buffer.from(name.padEnd(16, "\0")).subarray(0, 16).toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** List items carry no kind and apiVersion, as the API server sends them. */
function withoutTypeMeta<T extends { kind?: string; apiVersion?: string }>(object: T): Omit<T, "kind" | "apiVersion"> {
  const { kind: _kind, apiVersion: _apiVersion, ...rest } = object;
  return rest;
}

function refuseDryRun(url: URL, options: Record<string, unknown> = {}): void {
  if (url.searchParams.has("dryRun") || isSet(options.dryRun)) throw badRequest(`dryRun is ${NOT_IMPLEMENTED}`);
}

function refuseWatch(url: URL): void {
  const watch = url.searchParams.get("watch");
  if (watch !== null && watch !== "false" && watch !== "0") throw badRequest(`watch is ${NOT_IMPLEMENTED}`);
}

/** DeleteOptions.preconditions: a uid or resourceVersion that does not match → 409 Conflict. */
function checkPreconditions(options: Record<string, unknown>, metadata: StoredMeta, kind: Kind): void {
  const preconditions = (options.preconditions ?? {}) as { uid?: string; resourceVersion?: string };
  for (const field of ["uid", "resourceVersion"] as const) {
    const wanted = preconditions[field];
    if (wanted !== undefined && wanted !== metadata[field]) {
      const words = field === "uid" ? "UID" : "ResourceVersion";
      const why = `Precondition failed: ${words} in precondition: ${wanted}, ${words} in object meta: ${metadata[field]}`;
      throw new ApiRefusal(409, "Conflict", `Operation cannot be fulfilled on ${qualifiedResource(kind)} "${metadata.name}": ${why}`, objectDetails(kind, metadata.name));
    }
  }
}

/** The grace period of a delete: the query's, else the body's, else the pod's own. */
function gracePeriod(url: URL, options: Record<string, unknown>, fallback: number): number {
  const raw = url.searchParams.get("gracePeriodSeconds") ?? options.gracePeriodSeconds;
  if (raw === null || raw === undefined) return fallback;
  const seconds = Number(raw);
  if (!Number.isInteger(seconds)) throw badRequest(`invalid gracePeriodSeconds: ${String(raw)}`);
  return Math.max(0, seconds);
}

// ---------------------------------------------------------------------------------------------
// TLS and the kubeconfig
// ---------------------------------------------------------------------------------------------

const run = promisify(execFile);

/** A CA and a server certificate for 127.0.0.1 and localhost, made with the openssl CLI in `dir`. */
async function makeCertificates(dir: string): Promise<{ ca: Buffer; cert: Buffer; key: Buffer }> {
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  await run("openssl", ["req", "-x509", ...ec, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "7", "-subj", "/CN=k8s-standin-ca"], { cwd: dir });
  await run("openssl", ["req", ...ec, "-keyout", "key.pem", "-out", "server.csr", "-subj", "/CN=kube-apiserver"], { cwd: dir });
  await writeFile(path.join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n");
  await run("openssl", ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-out", "cert.pem", "-days", "7", "-extfile", "server.ext"], { cwd: dir });
  const [ca, cert, key] = await Promise.all(["ca.pem", "cert.pem", "key.pem"].map((file) => readFile(path.join(dir, file))));
  return { ca, cert, key };
}

function kubeconfigText(server: string, ca: Buffer, token: string, namespace: string): string {
  return toYaml({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "k8s-standin", cluster: { server, "certificate-authority-data": ca.toString("base64") } }],
    users: [{ name: "k8s-standin", user: { token } }],
    contexts: [{ name: "k8s-standin", context: { cluster: "k8s-standin", user: "k8s-standin", namespace } }],
    "current-context": "k8s-standin",
    preferences: {},
  });
}

// ---------------------------------------------------------------------------------------------
// HTTP plumbing
// ---------------------------------------------------------------------------------------------

function sendJson(res: ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(text)), "Cache-Control": "no-cache, private" }).end(text);
}

/** Answers a WebSocket upgrade request with a Status instead of 101, on the raw socket. */
function refuseUpgrade(socket: Duplex, status: Status): void {
  if (socket.destroyed) return;
  const code = status.code ?? 500;
  const text = JSON.stringify(status);
  socket.end(`HTTP/1.1 ${code} ${STATUS_CODES[code] ?? ""}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
}

/** The request's JSON object (an empty body is {} when `optional`); 413, 415 and 400 as the API server refuses them. */
async function readObject(req: IncomingMessage, optional = false): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) throw new ApiRefusal(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728");
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8").trim();
  if (text === "" && optional) return {};
  const media = (req.headers["content-type"] ?? "application/json").split(";")[0].trim().toLowerCase();
  if (media !== "application/json") {
    throw new ApiRefusal(415, "UnsupportedMediaType", `the body of the request was in an unknown format - accepted media types include: application/json (${NOT_IMPLEMENTED}: ${media})`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw badRequest(`couldn't get version/kind; json parse error: ${errorMessage(err)}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw badRequest("couldn't get version/kind; json parse error: the body is not a JSON object");
  return parsed as Record<string, unknown>;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function statusOf(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}

function ignoreNotFound(err: unknown): void {
  if (statusOf(err) !== 404) throw err;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
