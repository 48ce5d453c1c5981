/** Settings parsing, table-driven: defaults, flags over variables, and a named error for every bad value. */
import path from "node:path";
import test from "ava";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isLoopback, parseSettings, SettingsError } from "../server/settings.ts";

const KEY = "k-0123456789abcdef0123";

test("defaults start the embedded server: local provider, port 8080, ./.data, info logs", (t) => {
  const s = parseSettings({}, []);
  t.is(s.host, "127.0.0.1");
  t.is(s.port, 8080);
  t.is(s.defaultProvider, "local");
  t.is(s.providers.dataDir, path.resolve(".data"));
  t.is(s.logLevel, "info");
  t.is(s.compression, "none");
  t.deepEqual(s.providers.docker.connection, { socketPath: "/var/run/docker.sock" });
  t.is(s.providers.docker.mode, "auto");
  t.deepEqual(s.providers.docker.user, { uid: 1000, gid: 1000 });
  t.deepEqual(s.workspaceDefaults, { cpu: "", memory: "", disk: "", pids: 1024 });
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

test("the Docker engine comes from DOCKER_SOCKET, then DOCKER_HOST", (t) => {
  const cases: Array<[Record<string, string>, unknown]> = [
    [{ DOCKER_HOST: "unix:///run/other.sock" }, { socketPath: "/run/other.sock" }],
    [{ DOCKER_HOST: "tcp://10.0.0.5:2375" }, { host: "10.0.0.5", port: 2375, tlsCertDir: undefined }],
    [{ DOCKER_HOST: "tcp://engine", DOCKER_TLS_VERIFY: "1", DOCKER_CERT_PATH: "/certs" }, { host: "engine", port: 2376, tlsCertDir: "/certs" }],
    [{ DOCKER_HOST: "tcp://engine:2375", DOCKER_SOCKET: "/s.sock" }, { socketPath: "/s.sock" }],
  ];
  for (const [env, want] of cases) t.deepEqual(parseSettings(env).providers.docker.connection, want, JSON.stringify(env));
});

test("a bad value is a SettingsError naming the variable or flag and what it accepts", (t) => {
  const cases: Array<[Record<string, string>, string[], RegExp]> = [
    [{ AGENT_WORKSPACE_DOCKER: "yes" }, [], /^AGENT_WORKSPACE_DOCKER must be one of auto, on, off; got 'yes'$/],
    [{ AGENT_WORKSPACE_COMPRESSION: "zstd" }, [], /^AGENT_WORKSPACE_COMPRESSION must be one of none, gzip; got 'zstd'$/],
    [{ AGENT_WORKSPACE_DEFAULT_PROVIDER: "firecracker" }, [], /^AGENT_WORKSPACE_DEFAULT_PROVIDER must be one of local, docker, gvisor/],
    [{}, ["--default-provider", "k8s"], /^--default-provider must be one of local, docker, gvisor; got 'k8s'$/],
    [{ AGENT_WORKSPACE_LOG_LEVEL: "loud" }, [], /^AGENT_WORKSPACE_LOG_LEVEL must be one of debug, info, warn, error; got 'loud'$/],
    [{ PORT: "-1" }, [], /^PORT must be a whole number from 0 to 65535; got '-1'$/],
    [{ PORT: "8080.5" }, [], /^PORT must be/],
    [{ AGENT_WORKSPACE_MAX_TIMEOUT_MS: "10" }, [], /^AGENT_WORKSPACE_MAX_TIMEOUT_MS must be a whole number from 1000/],
    [{ AGENT_WORKSPACE_CONTAINER_UID: "root" }, [], /^AGENT_WORKSPACE_CONTAINER_UID must be a whole number/],
    [{ AGENT_WORKSPACE_CLEANUP_ORPHANS: "maybe" }, [], /^AGENT_WORKSPACE_CLEANUP_ORPHANS must be 1 or 0/],
    [{ WORKSPACE_DEFAULT_CPU: "two" }, [], /^WORKSPACE_DEFAULT_CPU 'two' is not a positive number of cores$/],
    [{ WORKSPACE_DEFAULT_DISK: "10 parsecs" }, [], /^WORKSPACE_DEFAULT_DISK '10 parsecs' is not a size/],
    [{ AGENT_WORKSPACE_TLS_CERT: "/c.pem" }, [], /must be given together/],
    [{ DOCKER_HOST: "npipe:////./pipe/docker_engine" }, [], /^DOCKER_HOST must be unix:\/\/\/path or tcp:\/\/host:port; 'npipe:' is not supported$/],
    [{ DOCKER_HOST: "tcp://engine", DOCKER_TLS_VERIFY: "1" }, [], /needs DOCKER_CERT_PATH/],
    [{}, ["--port"], /argument missing/],
    [{}, ["serve"], /Unexpected argument 'serve'/],
    [{ HOST: "0.0.0.0" }, [], /^refusing to listen on 0\.0\.0\.0 without an API key/],
    [{}, ["--host", "::"], /^refusing to listen on :: without an API key/],
    [{}, ["--host", "10.1.2.3"], /^refusing to listen on 10\.1\.2\.3 without an API key/],
    [{ AGENT_WORKSPACE_API_KEYS: "short" }, [], /^the API key on key 1 of AGENT_WORKSPACE_API_KEYS must be at least 16 characters/],
    [{}, ["--api-keys-file", "/nonexistent/keys"], /^--api-keys-file: cannot read \/nonexistent\/keys \(ENOENT\)$/],
  ];
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

test("only loopback addresses run open", (t) => {
  for (const h of ["127.0.0.1", "127.0.0.53", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"]) t.true(isLoopback(h), h);
  for (const h of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", "::ffff:10.0.0.1"]) t.false(isLoopback(h), h);
  t.deepEqual(parseSettings({}).apiKeys, []);
});
