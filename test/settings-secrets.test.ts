/**
 * No secret-bearing setting is ever echoed: every setting that carries a credential (API keys,
 * git tokens, the GitHub App's key and ids, OTLP headers and client key, URLs that may carry a
 * password, the TLS key, the OTLP client key) is fed a malformed value holding a planted secret, to the real server
 * binary, and the start must fail with exit code 2 and a message naming the setting, while
 * neither that message nor any other line on stderr (the logs included) contains the secret. Git
 * credentials may be given inline.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { isInlineCredentials, parseSettings } from "../server/settings.ts";
import { startGitServer } from "./helpers/git-server.ts";
import { refusedStart } from "./helpers/process.ts";
import { LOCAL_ONLY, startServer } from "./helpers/server.ts";
import { bashOk, clientsWithToken, watchUntilReady } from "./helpers/sessions.ts";

/** A secret of its own for each case, so a hit names the case that leaked it. */
const planted = (tag: string) => `PLANTED${tag}${randomBytes(12).toString("hex")}`;

/** A PEM-looking private key whose body is the planted secret. */
const pem = (secret: string) => `-----BEGIN PRIVATE KEY-----\n${secret}\n-----END PRIVATE KEY-----\n`;

interface Case {
  name: string;
  /** The setting the message must name. */
  names: string;
  env?: Record<string, string>;
  args?: string[];
  secret: string;
}

function cases(certFile: string, appKey: string): Case[] {
  const out: Case[] = [];
  const add = (name: string, names: string, make: (secret: string) => { env?: Record<string, string>; args?: string[] }) => {
    const secret = planted(String(out.length));
    out.push({ name, names, secret, ...make(secret) });
  };
  add("an API key with a space in it", "AGENT_WORKSPACE_API_KEYS", (s) => ({ env: { AGENT_WORKSPACE_API_KEYS: `${s} and more` } }));
  add("an API key where the keys file's path belongs", "AGENT_WORKSPACE_API_KEYS_FILE", (s) => ({ env: { AGENT_WORKSPACE_API_KEYS_FILE: s } }));
  add("an API key given to --api-keys-file", "--api-keys-file", (s) => ({ args: ["--api-keys-file", s] }));
  add("inline git credentials that do not parse", "AGENT_WORKSPACE_GIT_CREDENTIALS", (s) => ({ env: { AGENT_WORKSPACE_GIT_CREDENTIALS: `{"github.com": "${s}"` } }));
  add("inline git credentials with a URL (and its token) for a host", "AGENT_WORKSPACE_GIT_CREDENTIALS", (s) => ({ env: { AGENT_WORKSPACE_GIT_CREDENTIALS: `{"https://x-access-token:${s}@github.com": "abcd1234"}` } }));
  add("inline git credentials whose token has a space", "AGENT_WORKSPACE_GIT_CREDENTIALS", (s) => ({ env: { AGENT_WORKSPACE_GIT_CREDENTIALS: `{"github.com": {"username": "bot", "token": "${s} x"}}` } }));
  add("inline git credentials with a bad user name", "AGENT_WORKSPACE_GIT_CREDENTIALS", (s) => ({ env: { AGENT_WORKSPACE_GIT_CREDENTIALS: `{"github.com": {"username": "bot:${s}", "token": "abcd1234"}}` } }));
  add("git credentials on one YAML line (read as a path)", "AGENT_WORKSPACE_GIT_CREDENTIALS", (s) => ({ env: { AGENT_WORKSPACE_GIT_CREDENTIALS: `github.com: ${s}` } }));
  add("git credentials that are a list", "AGENT_WORKSPACE_GIT_CREDENTIALS", (s) => ({ env: { AGENT_WORKSPACE_GIT_CREDENTIALS: `{"github.com": ["${s}"]}` } }));
  add("inline git credentials given to --git-credentials", "--git-credentials", (s) => ({ args: ["--git-credentials", `{"github.com": "${s}"`] }));
  add("git credentials split by the shell into two arguments", "argument", (s) => ({ args: ["--git-credentials", "{github.com:", `${s}}`] }));
  add("a GitHub App id that is not a number", "AGENT_WORKSPACE_GITHUB_APP_ID", (s) => ({ env: { AGENT_WORKSPACE_GITHUB_APP_ID: s, AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: "/nonexistent.pem" } }));
  add("the GitHub App's key where its file's path belongs", "AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE", (s) => ({ env: { AGENT_WORKSPACE_GITHUB_APP_ID: "42", AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: pem(s) } }));
  add("a GitHub App installation id that is not a number", "AGENT_WORKSPACE_GITHUB_APP_INSTALLATION_ID", (s) => ({ env: { AGENT_WORKSPACE_GITHUB_APP_ID: "42", AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: appKey, AGENT_WORKSPACE_GITHUB_APP_INSTALLATION_ID: s } }));
  add("a GitHub API URL with a password", "AGENT_WORKSPACE_GITHUB_API_URL", (s) => ({ env: { AGENT_WORKSPACE_GITHUB_APP_ID: "42", AGENT_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE: appKey, AGENT_WORKSPACE_GITHUB_API_URL: `https://app:${s}@ghe.example:99999/api/v3` } }));
  add("OTLP headers without '='", "OTEL_EXPORTER_OTLP_HEADERS", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318", OTEL_EXPORTER_OTLP_HEADERS: `api-key:${s}` } }));
  add("OTLP headers with bad percent-encoding", "OTEL_EXPORTER_OTLP_HEADERS", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318", OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer%20${s}%zz` } }));
  add("OTLP trace headers with bad percent-encoding", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318", OTEL_EXPORTER_OTLP_TRACES_HEADERS: `x-key=${s}%` } }));
  add("an OTLP endpoint with a password that is not a URL", "OTEL_EXPORTER_OTLP_ENDPOINT", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://collector:${s}@otel.example:99999` } }));
  add("an OTLP trace endpoint with a password that is not a URL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", (s) => ({ env: { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `https://collector:${s}@otel.example:99999/v1/traces` } }));
  add("an OTLP endpoint with a password", "OTEL_EXPORTER_OTLP_ENDPOINT", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://collector:${s}@otel.example:4318` } }));
  add("the OTLP client key itself where its file's path belongs", "OTEL_EXPORTER_OTLP_CLIENT_KEY", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: "https://127.0.0.1:4318", OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: certFile, OTEL_EXPORTER_OTLP_CLIENT_KEY: pem(s) } }));
  add("the OTLP trace client key itself where its file's path belongs", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", (s) => ({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: "https://127.0.0.1:4318", OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE: certFile, OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: pem(s) } }));
  add("a database URL of another scheme, with a password", "AGENT_WORKSPACE_DATABASE_URL", (s) => ({ env: { AGENT_WORKSPACE_DATABASE_URL: `mysql://root:${s}@db.example/aw` } }));
  add("a PostgreSQL URL with a password and a port out of range", "AGENT_WORKSPACE_DATABASE_URL", (s) => ({ env: { AGENT_WORKSPACE_DATABASE_URL: `postgres://agent:${s}@db.example:99999/aw` } }));
  add("a PostgreSQL URL with a password, nothing listening", "AGENT_WORKSPACE_DATABASE_URL", (s) => ({ env: { AGENT_WORKSPACE_DATABASE_URL: `postgresql://agent:${s}@127.0.0.1:1/aw` } }));
  add("a Docker host with a password that is not a URL", "DOCKER_HOST", (s) => ({ env: { DOCKER_HOST: `tcp://engine:${s}@docker.example:99999` } }));
  add("the TLS key itself where its file's path belongs", "AGENT_WORKSPACE_TLS_KEY", (s) => ({ env: { AGENT_WORKSPACE_TLS_CERT: certFile, AGENT_WORKSPACE_TLS_KEY: pem(s) } }));
  add("the TLS key given to --tls-key", "--tls-key", (s) => ({ args: ["--tls-cert", certFile, "--tls-key", pem(s)] }));
  add("an E2B API key with a space in it", "E2B_API_KEY", (s) => ({ env: { E2B_API_KEY: `${s} x` } }));
  add("an E2B API URL with a password", "AGENT_WORKSPACE_E2B_API_URL", (s) => ({ env: { E2B_API_KEY: "e2b_0123456789abcdef", AGENT_WORKSPACE_E2B_API_URL: `https://key:${s}@e2b.example` } }));
  add("an E2B sandbox URL with a password that is not a URL", "AGENT_WORKSPACE_E2B_SANDBOX_URL", (s) => ({ env: { E2B_API_KEY: "e2b_0123456789abcdef", AGENT_WORKSPACE_E2B_SANDBOX_URL: `https://key:${s}@e2b.example:99999` } }));
  return out;
}

test("every secret-bearing setting fed a malformed value stops the start naming the setting, and its secret is on no line of stderr", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-secrets-"));
  try {
    const certFile = path.join(dir, "cert.pem");
    await writeFile(certFile, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    const appKey = path.join(dir, "app.pem");
    await writeFile(appKey, generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs8", format: "pem" }).toString());
    const all = cases(certFile, appKey);
    // Every case is checked before the verdict, so a failure lists all that leak, not the first.
    const problems: string[] = [];
    // Two at a time: each is a whole server process.
    for (let i = 0; i < all.length; i += 2) {
      await Promise.all(
        all.slice(i, i + 2).map(async (c) => {
          const { code, stderr } = await refusedStart([...(c.args ?? []), "--port", "0"], { AGENT_WORKSPACE_DATA_DIR: path.join(dir, `data-${i}`), ...c.env });
          if (code !== 2) problems.push(`${c.name}: exit code ${code}`);
          if (!stderr.includes(c.names)) problems.push(`${c.name}: the message does not name ${c.names}: ${stderr.trim()}`);
          if (stderr.includes(c.secret) || stderr.includes(c.secret.slice(7, 31))) problems.push(`${c.name}: the planted secret is on stderr: ${stderr.trim()}`);
        }),
      );
    }
    t.deepEqual(problems, []);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("git credentials given inline, as JSON or as YAML over several lines, are read like a file's; a session clones with them", async (t) => {
  const token = `inline-token-${randomBytes(8).toString("hex")}`;
  const git = await startGitServer({ token });
  try {
    await git.createRepo("svc", { branches: { main: { "svc.txt": "svc\n" } } });
    const host = new URL(git.url).host;
    for (const inline of [JSON.stringify({ [host]: token }), `# the server's tokens\n"${host}":\n  username: x-access-token\n  token: ${token}\n`]) {
      t.true(isInlineCredentials(inline));
      t.deepEqual([...parseSettings({ AGENT_WORKSPACE_GIT_CREDENTIALS: inline }).git.credentials], [[host, { username: "x-access-token", token }]]);
      const server = await startServer({ env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: inline } });
      try {
        const op = server.clients.connect;
        await op.config.createAgentType({ agentType: { id: "inline", workspace: { enabled: true, tools: ["bash"], repoSource: { type: "fixed", url: git.repoUrl("svc") } } } });
        const started = await op.workspaces.startSession({ agentType: "inline", task: {} });
        const { session } = await watchUntilReady(op, started.session?.id ?? "");
        t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
        t.is(await bashOk(clientsWithToken(server.url, started.sessionToken), "cat svc.txt"), "svc\n");
      } finally {
        await server.close();
      }
    }
    t.false(isInlineCredentials("/etc/agent-workspace/git-credentials.yaml"));
    t.false(isInlineCredentials("github.com: ghp_x"), "one YAML line is a path: a file name may hold ': '");
  } finally {
    await git.close();
  }
});
