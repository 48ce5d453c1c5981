/** Settings parsing, table-driven: defaults, flags over variables, and a named error for every bad value. */
import path from "node:path";
import test from "ava";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { DomainError } from "../core/errors.ts";
import { isLoopback, parseSettings, SettingsError } from "../server/settings.ts";
import { generateKeyPairSync } from "node:crypto";
import { type LimitStrings, resolveLimits } from "../server/workspace-limits.ts";

const KEY = "k-0123456789abcdef0123";

test("defaults start the embedded server: local provider, port 8080, ./.data, info logs", (t) => {
  const s = parseSettings({}, []);
  t.is(s.host, "127.0.0.1");
  t.is(s.port, 8080);
  t.is(s.defaultProvider, "local");
  t.is(s.providers.dataDir, path.resolve(".data"));
  t.is(s.logLevel, "info");
  t.is(s.compression, "none");
  t.deepEqual(s.providers.docker.engines, [{ name: "default", connection: { socketPath: "/var/run/docker.sock" }, labels: {} }]);
  t.is(s.providers.docker.mode, "auto");
  t.deepEqual(s.providers.docker.user, { uid: 1000, gid: 1000 });
  t.is(s.providers.docker.executorIdleMs, 60_000);
  t.deepEqual(s.workspaceDefaults, { cpu: "2", memory: "2G", disk: "10G", pids: 1024 });
  t.is(s.toolLimits.maxTimeoutMs, 600_000);
});

test("flags win over variables, and each is read once, trimmed", (t) => {
  const s = parseSettings({ PORT: "9000", HOST: " 0.0.0.0 ", AGENT_WORKSPACE_LOG_LEVEL: "debug", AGENT_WORKSPACE_API_KEYS: KEY }, ["--port", "9001", "--log-level", "error"]);
  t.is(s.port, 9001);
  t.is(s.host, "0.0.0.0");
  t.is(s.logLevel, "error");
  t.is(parseSettings({ AGENT_WORKSPACE_QUIET: "1" }).logLevel, "warn");
  t.is(parseSettings({}, ["--quiet"]).logLevel, "warn");
  t.is(parseSettings({ AGENT_WORKSPACE_MAX_TIMEOUT_MS: "60000" }).toolLimits.defaultTimeoutMs, 60_000);
  t.is(parseSettings({ WORKSPACE_DEFAULT_PIDS: "0" }).workspaceDefaults.pids, 0);
});

test("workspace defaults are finite unless the operator switches one off with 0 or none", (t) => {
  const given = parseSettings({ WORKSPACE_DEFAULT_CPU: "0.5", WORKSPACE_DEFAULT_MEMORY: "512M", WORKSPACE_DEFAULT_DISK: "1G", WORKSPACE_DEFAULT_PIDS: "64" });
  t.deepEqual(given.workspaceDefaults, { cpu: "0.5", memory: "512M", disk: "1G", pids: 64 });
  const off = parseSettings({ WORKSPACE_DEFAULT_CPU: "0", WORKSPACE_DEFAULT_MEMORY: "none", WORKSPACE_DEFAULT_DISK: "0", WORKSPACE_DEFAULT_PIDS: "0" });
  t.deepEqual(off.workspaceDefaults, { cpu: "", memory: "", disk: "", pids: 0 });
  t.deepEqual(resolveLimits({ cpu: "", memory: "", disk: "", pids: 0 }, off.workspaceDefaults), { cpus: 0, memoryBytes: 0, diskBytes: 0, pids: 0 });
  // A request (or an agent type) leaving a limit empty gets the default.
  t.deepEqual(resolveLimits({ cpu: "", memory: "", disk: "", pids: 0 }, parseSettings({}).workspaceDefaults), {
    cpus: 2,
    memoryBytes: 2 * 1024 ** 3,
    diskBytes: 10 * 1024 ** 3,
    pids: 1024,
  });
});

test("push mirrors are kept 7 days unused unless the operator says otherwise; 0 keeps them forever", (t) => {
  t.is(parseSettings({}).git.mirrorMaxIdleMs, 7 * 24 * 3_600_000);
  t.is(parseSettings({ AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS: "0" }).git.mirrorMaxIdleMs, 0);
  t.is(parseSettings({ AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS: "86400000" }).git.mirrorMaxIdleMs, 86_400_000);
});

test("a request cannot switch a limit off or set one below what a sandbox needs", (t) => {
  const defaults = parseSettings({}).workspaceDefaults;
  const cases: Array<[Partial<LimitStrings>, string, RegExp]> = [
    [{ memory: "0" }, "limits.memory", /^limits\.memory '0' is below the minimum of 64M; leave it empty for the server's default$/],
    [{ memory: "32M" }, "limits.memory", /below the minimum of 64M/],
    [{ disk: "0" }, "limits.disk", /^limits\.disk '0' is below the minimum of 16M/],
    [{ cpu: "0" }, "limits.cpu", /^limits\.cpu '0' is not a positive number of cores$/],
  ];
  for (const [requested, field, message] of cases) {
    const err = t.throws(() => resolveLimits({ cpu: "", memory: "", disk: "", pids: 0, ...requested }, defaults), { instanceOf: DomainError });
    t.is(err?.reason, "INVALID_ARGUMENT");
    t.is(err?.metadata.field, field);
    t.regex(err?.message ?? "", message);
  }
  t.deepEqual(resolveLimits({ cpu: "4", memory: "8G", disk: "64M", pids: 10 }, defaults), { cpus: 4, memoryBytes: 8 * 1024 ** 3, diskBytes: 64 * 1024 ** 2, pids: 10 });
});

test("egress settings: defaults, and the operator's allowed addresses and names in canonical form", (t) => {
  t.deepEqual(parseSettings({}, []).egress, { privateAllow: [], maxConnections: 32, idleTimeoutMs: 120_000, maxBytes: 4 * 1024 ** 3, hosts: new Map() });
  const s = parseSettings({
    AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: " 10.20.0.0/16 , 192.168.1.7, [fd00::]/8 ",
    AGENT_WORKSPACE_EGRESS_HOSTS: "Mirror.Internal=10.20.0.5, registry.internal=fd00::1",
    AGENT_WORKSPACE_EGRESS_MAX_CONNECTIONS: "8",
    AGENT_WORKSPACE_EGRESS_MAX_BYTES: "512M",
  }, []).egress;
  t.deepEqual(s.privateAllow, ["10.20.0.0/16", "192.168.1.7/32", "fd00::/8"]);
  t.deepEqual([...s.hosts], [["mirror.internal", "10.20.0.5"], ["registry.internal", "fd00::1"]]);
  t.is(s.maxConnections, 8);
  t.is(s.maxBytes, 512 * 1024 ** 2);
});

test("the e2b provider is on with E2B_API_KEY, with the SDK's defaults unless the operator names a template, a timeout, a domain or URLs", (t) => {
  t.is(parseSettings({}, []).providers.e2b, undefined);
  t.deepEqual(parseSettings({ E2B_API_KEY: "e2b_0123456789abcdef" }, []).providers.e2b, { apiKey: "e2b_0123456789abcdef", domain: "", apiUrl: "", sandboxUrl: "", template: "base", timeoutMs: 3_600_000 });
  const e2b = parseSettings(
    {
      E2B_API_KEY: "e2b_0123456789abcdef",
      AGENT_WORKSPACE_E2B_TEMPLATE: "agent-workspace",
      AGENT_WORKSPACE_E2B_TIMEOUT_MS: "600000",
      AGENT_WORKSPACE_E2B_DOMAIN: "e2b.internal",
      AGENT_WORKSPACE_E2B_API_URL: "http://127.0.0.1:3000/",
      AGENT_WORKSPACE_E2B_SANDBOX_URL: "http://127.0.0.1:3001",
    },
    [],
  ).providers.e2b;
  t.deepEqual(e2b, { apiKey: "e2b_0123456789abcdef", domain: "e2b.internal", apiUrl: "http://127.0.0.1:3000", sandboxUrl: "http://127.0.0.1:3001", template: "agent-workspace", timeoutMs: 600_000 });
});

test("the kubernetes provider is on with AGENT_WORKSPACE_KUBERNETES_CLUSTERS: each cluster's kubeconfig, context, namespace and labels, and the pods' defaults", (t) => {
  t.is(parseSettings({}, []).providers.kubernetes, undefined);
  const k = parseSettings(
    {
      AGENT_WORKSPACE_KUBERNETES_CLUSTERS: '[{"name": "main", "kubeconfig": "/etc/aw/kubeconfig", "context": "prod", "namespace": "agents", "labels": {"pool": "main"}}, {"name": "spare"}]',
      AGENT_WORKSPACE_KUBERNETES_RUNTIME_CLASS: "gvisor",
    },
    [],
  ).providers.kubernetes;
  t.deepEqual(k, {
    clusters: [
      { name: "main", kubeconfig: "/etc/aw/kubeconfig", context: "prod", namespace: "agents", labels: { pool: "main" } },
      { name: "spare", kubeconfig: "", context: "", namespace: "default", labels: {} },
    ],
    image: "agent-workspace-base:bookworm",
    runtimeClass: "gvisor",
    startTimeoutMs: 180_000,
    requestTimeoutMs: 15_000,
  });
});

test("the Docker engine comes from DOCKER_SOCKET, then DOCKER_HOST", (t) => {
  const cases: Array<[Record<string, string>, unknown]> = [
    [{ DOCKER_HOST: "unix:///run/other.sock" }, { socketPath: "/run/other.sock" }],
    [{ DOCKER_HOST: "tcp://10.0.0.5:2375" }, { host: "10.0.0.5", port: 2375, tlsCertDir: undefined }],
    [{ DOCKER_HOST: "tcp://engine", DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: "/certs" }, { host: "engine", port: 2376, tlsCertDir: "/certs" }],
    [{ DOCKER_HOST: "tcp://engine:2375", DOCKER_SOCKET: "/s.sock" }, { socketPath: "/s.sock" }],
  ];
  for (const [env, want] of cases) t.deepEqual(parseSettings(env).providers.docker.engines[0]?.connection, want, JSON.stringify(env));
});

test("several Docker engines: a JSON list or a YAML file; a tcp:// engine needs mutual TLS", async (t) => {
  const engines = parseSettings({
    AGENT_WORKSPACE_DOCKER_ENGINES: JSON.stringify([
      { name: "here", host: "unix:///var/run/docker.sock" },
      { name: "east-1", host: "tcp://10.0.0.5:2376", tls: "/certs/east", labels: { zone: "east", gvisor: "yes" } },
    ]),
  }).providers.docker.engines;
  t.deepEqual(engines, [
    { name: "here", connection: { socketPath: "/var/run/docker.sock" }, labels: {} },
    { name: "east-1", connection: { host: "10.0.0.5", port: 2376, tlsCertDir: "/certs/east" }, labels: { zone: "east", gvisor: "yes" } },
  ]);
  const dir = await mkdtemp(path.join(tmpdir(), "aw-engines-"));
  const file = path.join(dir, "engines.yaml");
  await writeFile(file, "- name: west\n  host: tcp://west.internal\n  tls: /certs/west\n");
  t.deepEqual(parseSettings({ AGENT_WORKSPACE_DOCKER_ENGINES: file }).providers.docker.engines, [{ name: "west", connection: { host: "west.internal", port: 2376, tlsCertDir: "/certs/west" }, labels: {} }]);
  await rm(dir, { recursive: true });
  const bad: Array<[unknown, RegExp]> = [
    [[{ name: "a", host: "tcp://10.0.0.5:2375" }], /AGENT_WORKSPACE_DOCKER_ENGINES\[0\]: a tcp:\/\/ engine needs tls/],
    [[{ name: "a", host: "unix:///s" }, { name: "a", host: "unix:///t" }], /\[1\]\.name 'a' is given twice/],
    [[{ name: "A B", host: "unix:///s" }], /\[0\]\.name must be/],
    [[{ name: "a", host: "ssh://x" }], /\[0\]\.host must be unix:\/\/\/path or tcp:\/\/host:port; 'ssh:' is not supported/],
    [[{ name: "a", host: "unix:///s", labels: { zone: "East Coast" } }], /\[0\]\.labels: names and values/],
    [[{ name: "a", host: "unix:///s", password: "x" }], /unknown key 'password'/],
    [[], /must list at least one engine/],
  ];
  for (const [value, want] of bad) t.throws(() => parseSettings({ AGENT_WORKSPACE_DOCKER_ENGINES: JSON.stringify(value) }), { instanceOf: SettingsError, message: want }, JSON.stringify(value));
  t.throws(() => parseSettings({ AGENT_WORKSPACE_DOCKER_ENGINES: "/nonexistent/engines.yaml" }), { instanceOf: SettingsError, message: /cannot read \/nonexistent\/engines\.yaml \(ENOENT\)/ });
});

test("a bad value is a SettingsError naming the variable or flag and what it accepts", (t) => {
  const cases: Array<[Record<string, string>, string[], RegExp]> = [
    [{ AGENT_WORKSPACE_DOCKER: "yes" }, [], /^AGENT_WORKSPACE_DOCKER must be one of auto, on, off; got 'yes'$/],
    [{ AGENT_WORKSPACE_COMPRESSION: "zstd" }, [], /^AGENT_WORKSPACE_COMPRESSION must be one of none, gzip; got 'zstd'$/],
    [{ AGENT_WORKSPACE_DEFAULT_PROVIDER: "firecracker" }, [], /^AGENT_WORKSPACE_DEFAULT_PROVIDER must be one of local, docker, gvisor/],
    [{}, ["--default-provider", "k8s"], /^--default-provider must be one of local, docker, gvisor, microvm, e2b, kubernetes, memory; got 'k8s'$/],
    [{ AGENT_WORKSPACE_LOG_LEVEL: "loud" }, [], /^AGENT_WORKSPACE_LOG_LEVEL must be one of debug, info, warn, error; got 'loud'$/],
    [{ PORT: "-1" }, [], /^PORT must be a whole number from 0 to 65535; got '-1'$/],
    [{ PORT: "8080.5" }, [], /^PORT must be/],
    [{ AGENT_WORKSPACE_MAX_TIMEOUT_MS: "10" }, [], /^AGENT_WORKSPACE_MAX_TIMEOUT_MS must be a whole number from 1000/],
    [{ AGENT_WORKSPACE_CONTAINER_UID: "root" }, [], /^AGENT_WORKSPACE_CONTAINER_UID must be a whole number/],
    [{ AGENT_WORKSPACE_CLEANUP_ORPHANS: "maybe" }, [], /^AGENT_WORKSPACE_CLEANUP_ORPHANS must be 1 or 0/],
    [{ AGENT_WORKSPACE_EGRESS_PATH: "tcp" }, [], /^AGENT_WORKSPACE_EGRESS_PATH must be one of socket, channel; got 'tcp'$/],
    [{ AGENT_WORKSPACE_EXECUTOR_IDLE_MS: "soon" }, [], /^AGENT_WORKSPACE_EXECUTOR_IDLE_MS must be a whole number from 0/],
    [{ WORKSPACE_DEFAULT_CPU: "two" }, [], /^WORKSPACE_DEFAULT_CPU 'two' is not a positive number of cores$/],
    [{ WORKSPACE_DEFAULT_DISK: "10 parsecs" }, [], /^WORKSPACE_DEFAULT_DISK '10 parsecs' is not a size/],
    [{ WORKSPACE_DEFAULT_MEMORY: "8M" }, [], /^WORKSPACE_DEFAULT_MEMORY '8M' is below the minimum of 64M/],
    [{ WORKSPACE_DEFAULT_DISK: "1M" }, [], /^WORKSPACE_DEFAULT_DISK '1M' is below the minimum of 16M/],
    [{ WORKSPACE_DEFAULT_CPU: "-1" }, [], /^WORKSPACE_DEFAULT_CPU '-1' is not a positive number of cores$/],
    [{ AGENT_WORKSPACE_TLS_CERT: "/c.pem" }, [], /must be given together/],
    [{ DOCKER_HOST: "npipe:////./pipe/docker_engine" }, [], /^DOCKER_HOST must be unix:\/\/\/path or tcp:\/\/host:port; 'npipe:' is not supported$/],
    [{ DOCKER_HOST: "tcp://engine", DOCKER_TLS_VERIFY: "1" }, [], /needs DOCKER_CERT_PATH/],
    [{}, ["--port"], /argument missing/],
    [{}, ["serve"], /Unexpected argument 'serve'/],
    [{ HOST: "0.0.0.0" }, [], /^refusing to listen on 0\.0\.0\.0 without an API key/],
    [{}, ["--host", "::"], /^refusing to listen on :: without an API key/],
    [{}, ["--host", "10.1.2.3"], /^refusing to listen on 10\.1\.2\.3 without an API key/],
    [{ AGENT_WORKSPACE_API_KEYS: "short" }, [], /^the API key on key 1 of AGENT_WORKSPACE_API_KEYS must be at least 16 characters/],
    [{}, ["--api-keys-file", "/nonexistent/keys"], /^--api-keys-file must name a readable file \(ENOENT\); the value is not shown/],
    [{ AGENT_WORKSPACE_GITHUB_APP_ID: "my-app" }, [], /^AGENT_WORKSPACE_GITHUB_APP_ID must be the app's numeric id$/],
    [{ AGENT_WORKSPACE_GITHUB_APP_ID: "42" }, [], /^AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE is required/],
    [{ AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: "/k.pem" }, [], /^AGENT_WORKSPACE_GITHUB_APP_ID must be/],
    [{ AGENT_WORKSPACE_GITHUB_APP_ID: "42", AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: "/nonexistent/k.pem" }, [], /^AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE must name a readable file \(ENOENT\)/],
    [{ AGENT_WORKSPACE_GIT_BOT_EMAIL: "bot <evil>" }, [], /^AGENT_WORKSPACE_GIT_BOT_EMAIL must be one line/],
    [{ AGENT_WORKSPACE_PUSH_TIMEOUT_MS: "5" }, [], /^AGENT_WORKSPACE_PUSH_TIMEOUT_MS must be a whole number from 1000/],
    [{ AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS: "500" }, [], /^AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS must be 0 \(keep mirrors forever\) or at least 1000; got '500'$/],
    [{ AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS: "a week" }, [], /^AGENT_WORKSPACE_GIT_MIRROR_MAX_IDLE_MS must be a whole number from 0/],
    [{ AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: "/srv/ok:relative/dir" }, [], /^AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: 'relative\/dir' must be an absolute path without '\.\.'$/],
    [{ AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: "/srv/../etc" }, [], /must be an absolute path without '\.\.'$/],
    [{ AGENT_WORKSPACE_MOUNT_MAX_BYTES: "lots" }, [], /^AGENT_WORKSPACE_MOUNT_MAX_BYTES 'lots' is not a size/],
    [{ AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: "10.0.0.0/8,intranet" }, [], /^AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: 'intranet' is not an address or address\/prefix$/],
    [{ AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: "10.0.0.0/33" }, [], /^AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: '10\.0\.0\.0\/33'/],
    [{ AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: "10.0.0.0/" }, [], /^AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: '10\.0\.0\.0\/' is not an address/],
    [{ AGENT_WORKSPACE_EGRESS_HOSTS: "mirror.internal" }, [], /^AGENT_WORKSPACE_EGRESS_HOSTS: 'mirror\.internal' is not name=address$/],
    [{ AGENT_WORKSPACE_EGRESS_HOSTS: "mirror.internal=not-an-ip" }, [], /is not name=address$/],
    [{ AGENT_WORKSPACE_EGRESS_MAX_CONNECTIONS: "0" }, [], /^AGENT_WORKSPACE_EGRESS_MAX_CONNECTIONS must be a whole number from 1/],
    [{ AGENT_WORKSPACE_EGRESS_IDLE_TIMEOUT_MS: "5" }, [], /^AGENT_WORKSPACE_EGRESS_IDLE_TIMEOUT_MS must be a whole number from 1000/],
    [{ AGENT_WORKSPACE_EGRESS_MAX_BYTES: "much" }, [], /^AGENT_WORKSPACE_EGRESS_MAX_BYTES 'much' is not a size/],
  ];
  const otlp = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
  cases.push(
    [{ ...otlp, OTEL_BSP_SCHEDULE_DELAY: "soon" }, [], /^OTEL_BSP_SCHEDULE_DELAY must be a whole number from 0 to 3600000; got 'soon'$/],
    [{ ...otlp, OTEL_BSP_EXPORT_TIMEOUT: "0" }, [], /^OTEL_BSP_EXPORT_TIMEOUT must be a whole number from 1 /],
    [{ ...otlp, OTEL_BSP_MAX_QUEUE_SIZE: "-5" }, [], /^OTEL_BSP_MAX_QUEUE_SIZE must be a whole number from 1 /],
    [{ ...otlp, OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "1.5" }, [], /^OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be a whole number/],
    [{ ...otlp, OTEL_BSP_MAX_QUEUE_SIZE: "100", OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "200" }, [], /^OTEL_BSP_MAX_EXPORT_BATCH_SIZE \(200\) must not be above OTEL_BSP_MAX_QUEUE_SIZE \(100\)$/],
    [{ ...otlp, OTEL_EXPORTER_OTLP_COMPRESSION: "zstd" }, [], /^OTEL_EXPORTER_OTLP_COMPRESSION must be one of none, gzip; got 'zstd'$/],
    [{ ...otlp, OTEL_EXPORTER_OTLP_COMPRESSION: "gzip", OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: "brotli" }, [], /^OTEL_EXPORTER_OTLP_TRACES_COMPRESSION must be one of none, gzip/],
    [{ ...otlp, OTEL_RESOURCE_ATTRIBUTES: "team" }, [], /^OTEL_RESOURCE_ATTRIBUTES: expected key=value pairs/],
    [{ ...otlp, OTEL_RESOURCE_ATTRIBUTES: "team=a%zz" }, [], /^OTEL_RESOURCE_ATTRIBUTES: the value of 'team' is not valid percent-encoding$/],
    [{ ...otlp, OTEL_EXPORTER_OTLP_CERTIFICATE: "/nonexistent/ca.pem" }, [], /^OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read \/nonexistent\/ca\.pem \(ENOENT\)$/],
    [{ ...otlp, OTEL_EXPORTER_OTLP_CLIENT_KEY: "/nonexistent/key.pem" }, [], /^OTEL_EXPORTER_OTLP_CLIENT_KEY must name a readable file \(ENOENT\)/],
    [{ ...otlp, OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: "/dev/null" }, [], /^OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY must be given together$/],
  );
  cases.push(
    [{ AGENT_WORKSPACE_KUBERNETES_CLUSTERS: "[]" }, [], /^AGENT_WORKSPACE_KUBERNETES_CLUSTERS must list at least one cluster/],
    [{ AGENT_WORKSPACE_KUBERNETES_CLUSTERS: '[{"name": "a", "server": "https://k8s"}]' }, [], /^AGENT_WORKSPACE_KUBERNETES_CLUSTERS\[0\]: unknown key 'server'/],
    [{ AGENT_WORKSPACE_KUBERNETES_CLUSTERS: '[{"name": "a", "namespace": "Agents"}]' }, [], /^AGENT_WORKSPACE_KUBERNETES_CLUSTERS\[0\]\.namespace must be a Kubernetes namespace name$/],
    [{ AGENT_WORKSPACE_KUBERNETES_CLUSTERS: '[{"name": "a"}, {"name": "a"}]' }, [], /^AGENT_WORKSPACE_KUBERNETES_CLUSTERS\[1\]\.name 'a' is given twice$/],
    [{ AGENT_WORKSPACE_KUBERNETES_CLUSTERS: '[{"name": "a"}]', AGENT_WORKSPACE_KUBERNETES_RUNTIME_CLASS: "Run_SC" }, [], /^AGENT_WORKSPACE_KUBERNETES_RUNTIME_CLASS must be a RuntimeClass name$/],
    [{ E2B_API_KEY: "short" }, [], /^E2B_API_KEY is not an E2B API key \(the value is not shown\)$/],
    [{ E2B_API_KEY: "e2b_0123456789abcdef", AGENT_WORKSPACE_E2B_API_URL: "ftp://e2b.example" }, [], /^AGENT_WORKSPACE_E2B_API_URL must be an http\(s\) URL$/],
    [{ E2B_API_KEY: "e2b_0123456789abcdef", AGENT_WORKSPACE_E2B_SANDBOX_URL: "https://u:p@e2b.example" }, [], /^AGENT_WORKSPACE_E2B_SANDBOX_URL must not carry credentials/],
    [{ E2B_API_KEY: "e2b_0123456789abcdef", AGENT_WORKSPACE_E2B_TIMEOUT_MS: "5" }, [], /^AGENT_WORKSPACE_E2B_TIMEOUT_MS must be a whole number from 10000 /],
    [{ E2B_API_KEY: "e2b_0123456789abcdef", AGENT_WORKSPACE_E2B_TEMPLATE: "a b" }, [], /^AGENT_WORKSPACE_E2B_TEMPLATE must be an E2B template id or name$/],
  );
  for (const [env, argv, message] of cases) {
    const err = t.throws(() => parseSettings(env, argv), { instanceOf: SettingsError }, `${JSON.stringify(env)} ${argv.join(" ")}`);
    t.regex(err?.message ?? "", message);
  }
});

test("API keys come from AGENT_WORKSPACE_API_KEYS and the keys file; a bad key is named by place, never by value", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-keys-"));
  try {
    const file = path.join(dir, "keys");
    await writeFile(file, `# operators\n${KEY}-file   # ci\n\n${KEY}\n`);
    const s = parseSettings({ AGENT_WORKSPACE_API_KEYS: ` ${KEY} , ${KEY}-env`, HOST: "0.0.0.0" }, ["--api-keys-file", file]);
    t.deepEqual(s.apiKeys, [KEY, `${KEY}-env`, `${KEY}-file`]);
    t.is(s.host, "0.0.0.0");
    await writeFile(file, "tooshort-secret\n");
    const err = t.throws(() => parseSettings({}, ["--api-keys-file", file]), { instanceOf: SettingsError });
    t.regex(err?.message ?? "", /^the API key on line 1 of --api-keys-file must be at least 16 characters/);
    t.false(err?.message.includes("tooshort-secret"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a GitHub App: its key is read from a file and never echoed; its API URL and hosts are checked", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-app-"));
  try {
    const key = path.join(dir, "app.pem");
    const pem = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    await writeFile(key, pem);
    const base = { AGENT_WORKSPACE_GITHUB_APP_ID: "42", AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: key };
    const s = parseSettings({ ...base, AGENT_WORKSPACE_GITHUB_API_URL: "https://ghe.example.com/api/v3/", AGENT_WORKSPACE_GITHUB_APP_HOSTS: "ghe.example.com, git.example.com:8443" }, []);
    t.deepEqual(s.git.githubApp, { appId: "42", privateKey: pem, apiUrl: "https://ghe.example.com/api/v3", hosts: ["ghe.example.com", "git.example.com:8443"] });
    t.is(parseSettings(base, []).git.githubApp?.apiUrl, "https://api.github.com");
    t.deepEqual(parseSettings(base, []).git.githubApp?.hosts, ["github.com"]);
    t.is(parseSettings({}, []).git.githubApp, undefined);
    t.is(parseSettings({}, []).git.botName, "agent-workspace[bot]");
    for (const [env, message] of [
      [{ AGENT_WORKSPACE_GITHUB_API_URL: "ftp://x" }, /^AGENT_WORKSPACE_GITHUB_API_URL must be an http or https URL/],
      [{ AGENT_WORKSPACE_GITHUB_API_URL: "https://user:pw@x" }, /without credentials/],
      [{ AGENT_WORKSPACE_GITHUB_APP_HOSTS: "https://github.com" }, /is not a host name/],
      [{ AGENT_WORKSPACE_GITHUB_APP_INSTALLATION_ID: "one" }, /must be a numeric id/],
    ] as const) {
      const err = t.throws(() => parseSettings({ ...base, ...env }, []), { instanceOf: SettingsError });
      t.regex(err?.message ?? "", message);
    }
    await writeFile(key, "not a key at all, but secret-looking text\n");
    const err = t.throws(() => parseSettings(base, []), { instanceOf: SettingsError });
    t.regex(err?.message ?? "", /holds no RSA private key in PEM$/);
    t.false(err?.message.includes("secret-looking"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("OTLP export reads the SDK's variables with the SDK's meanings; a delay of 1 s and a queue of 8192 are this server's defaults", (t) => {
  t.is(parseSettings({ OTEL_BSP_SCHEDULE_DELAY: "soon" }).audit.otlp, undefined, "without export the OTEL_BSP_* variables are not read");
  const plain = parseSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }).audit.otlp;
  t.like(plain, { url: "http://collector:4318/v1/traces", compression: "none", tls: {}, resourceAttributes: {}, serviceName: "agent-workspace" });
  t.deepEqual(plain?.batch, { scheduledDelayMs: 1000, exportTimeoutMs: 30_000, maxQueueSize: 8192, maxExportBatchSize: 512 });
  t.deepEqual(parseSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_BSP_MAX_QUEUE_SIZE: "100" }).audit.otlp?.batch.maxExportBatchSize, 100, "the batch never outgrows the queue");
  const set = parseSettings({
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318",
    OTEL_BSP_SCHEDULE_DELAY: "5000",
    OTEL_BSP_EXPORT_TIMEOUT: "12000",
    OTEL_BSP_MAX_QUEUE_SIZE: "4096",
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "256",
    OTEL_EXPORTER_OTLP_COMPRESSION: "none",
    OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: "gzip",
    OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=prod,k8s.pod.name=aw-0 ,note=a%2Cb",
    OTEL_EXPORTER_OTLP_CERTIFICATE: "/dev/null",
  }).audit.otlp;
  t.deepEqual(set?.batch, { scheduledDelayMs: 5000, exportTimeoutMs: 12_000, maxQueueSize: 4096, maxExportBatchSize: 256 });
  t.is(set?.compression, "gzip", "the signal-specific variable wins");
  t.deepEqual(set?.resourceAttributes, { "deployment.environment": "prod", "k8s.pod.name": "aw-0", note: "a,b" });
  t.deepEqual(set?.tls, { ca: "" });
});

test("only loopback addresses run open", (t) => {
  for (const h of ["127.0.0.1", "127.0.0.53", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"]) t.true(isLoopback(h), h);
  for (const h of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", "::ffff:10.0.0.1"]) t.false(isLoopback(h), h);
  t.deepEqual(parseSettings({}).apiKeys, []);
});
