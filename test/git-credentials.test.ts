/**
 * The push-credential provider against a real HTTP server playing the GitHub API (JWTs verified
 * with the app's public key): installation tokens are minted with a JWT the server accepted,
 * cached, renewed near their expiry and shared by concurrent callers; installations are looked up
 * per repository; a GitHub Enterprise API under /api/v3 works; the bot identity is looked up once
 * (a failure is not remembered); static tokens serve their hosts; ssh and file URLs get nothing;
 * and no failure ever shows the private key, a JWT or a token.
 */
import { createPrivateKey } from "node:crypto";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { DomainError } from "../core/errors.ts";
import { createCredentialProvider, type CredentialProvider, type GitHubAppSettings } from "../server/git/credentials.ts";
import type { GitCredential } from "../server/sessions/clone.ts";
import { type AppKeyPair, generateAppKeys, type GitHubAppServer, type GitHubAppServerOptions, startGitHubAppServer } from "./helpers/github-app-server.ts";

interface Ctx {
  keys: AppKeyPair;
  wrongKeys: AppKeyPair;
}
const test = anyTest as TestFn<Ctx>;

const FALLBACK = { name: "Agent Workspace", email: "agent-workspace@example.com" };
const NO_STATIC: ReadonlyMap<string, GitCredential> = new Map();

test.before((t) => {
  t.context.keys = generateAppKeys();
  t.context.wrongKeys = generateAppKeys();
});

// @octokit/auth-app shares in-flight token requests process-wide by installation id, so the
// servers of concurrent tests never reuse one.
let lastInstallationId = 5000;
const nextInstallationId = () => ++lastInstallationId;

/** A fake GitHub API for one test, closed when the test ends. */
async function apiServer(t: ExecutionContext<Ctx>, options: GitHubAppServerOptions = {}): Promise<GitHubAppServer> {
  const server = await startGitHubAppServer({ keys: t.context.keys, ...options });
  t.teardown(() => server.close());
  return server;
}

/** The app settings pointing at `server`. */
function appSettings(server: GitHubAppServer, extra: Partial<GitHubAppSettings> = {}): GitHubAppSettings {
  return { appId: String(server.appId), privateKey: server.privateKeyPem, apiUrl: server.url, hosts: ["github.com"], ...extra };
}

function appProvider(server: GitHubAppServer, extra: Partial<GitHubAppSettings> = {}, now?: () => number): CredentialProvider {
  return createCredentialProvider({ staticCredentials: NO_STATIC, githubApp: appSettings(server, extra), fallbackIdentity: FALLBACK, now });
}

/** The requests of `server` to `method path` (path without the query string, prefix included). */
const calls = (server: GitHubAppServer, method: string, path: string | RegExp) =>
  server.requests.filter((r) => r.method === method && (typeof path === "string" ? r.path === path : path.test(r.path)));

/** Asserts `err` is GIT_CREDENTIAL_UNAVAILABLE and that neither its message nor its metadata holds a secret. */
function assertUnavailable(t: ExecutionContext<Ctx>, err: unknown, server: GitHubAppServer, privateKey = server.privateKeyPem): DomainError {
  t.true(err instanceof DomainError);
  const e = err as DomainError;
  t.is(e.reason, "GIT_CREDENTIAL_UNAVAILABLE");
  const shown = `${e.message}\n${JSON.stringify(e.metadata)}`;
  t.false(shown.includes(privateKey));
  for (const line of privateKey.split("\n").filter((l) => l.length >= 16 && !l.startsWith("-----"))) t.false(shown.includes(line));
  for (const { token } of server.issued) t.false(shown.includes(token));
  t.notRegex(shown, /eyJ[\w-]+\.[\w-]+/);
  return e;
}

test("an installation token is minted with a JWT the server verified, and the second call reuses it", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId } });
  const provider = appProvider(server, { installationId });

  const first = await provider.credentialFor("https://github.com/acme/widgets.git");
  const second = await provider.credentialFor("https://github.com/acme/widgets.git");
  t.truthy(first);
  t.deepEqual(second, first);
  t.is(first?.username, "x-access-token");
  t.is(first?.origin, "https://github.com");
  t.is(server.issued.length, 1);
  t.is(first?.token, server.issued[0].token);
  t.is(first?.expiresAt, server.issued[0].expiresAt);
  t.is(server.issued[0].installationId, installationId);
  t.true(server.isValid(first?.token ?? ""));
  // One app-authenticated call, answered 201; no lookup, since the installation is configured.
  t.deepEqual(
    server.requests.map((r) => ({ method: r.method, path: r.path, status: r.status, appAuthenticated: r.appAuthenticated })),
    [{ method: "POST", path: `/app/installations/${installationId}/access_tokens`, status: 201, appAuthenticated: true }],
  );
  // What octokit sends: GitHub's v3 media type, and our User-Agent (GitHub refuses requests without one).
  t.is(server.requests[0].accept, "application/vnd.github.v3+json");
  t.is(server.requests[0].userAgent, "agent-workspace");
  t.deepEqual(provider.liveSecrets(), [first?.token]);
});

test("a token near its expiry is renewed, and expired tokens leave the live secrets", async (t) => {
  const installationId = nextInstallationId();
  // 40 s tokens: the renewal margin is a quarter of the lifetime the provider saw, from its clock at
  // the request to the expiry the API gave, which counts the real time the first request took (over
  // 667 ms in a loaded CI run, which pushed the renewal past a fixed +3.5 s). The clock is set from that expiry, so the test is about the rule,
  // not about how fast the host is.
  const server = await apiServer(t, { installations: { "acme/widgets": installationId }, tokenLifetimeMs: 40_000 });
  const requestedAt = Date.now();
  let clock = requestedAt;
  const provider = appProvider(server, { installationId }, () => clock);
  const url = "https://github.com/acme/widgets";

  const first = await provider.credentialFor(url);
  const expiresAt = server.issued[0]!.expiresAt;
  const renewAt = expiresAt - (expiresAt - requestedAt) / 4;
  clock = renewAt - 1_000;
  t.is((await provider.credentialFor(url))?.token, first?.token, "reused while more than the margin is left");
  clock = renewAt + 1_000;
  const renewed = await provider.credentialFor(url);
  t.not(renewed?.token, first?.token, "renewed within the last quarter of its lifetime");
  t.is(server.issued.length, 2);
  t.true(server.isValid(renewed?.token ?? ""));
  // The old token may still be printing in a push that started with it.
  t.deepEqual(new Set(provider.liveSecrets()), new Set([first?.token, renewed?.token]));
  clock += 60_000;
  t.deepEqual(provider.liveSecrets(), []);
});

test("a token that has expired on the server is never handed out again", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId }, tokenLifetimeMs: 1_500 });
  const provider = appProvider(server, { installationId });
  const url = "https://github.com/acme/widgets.git";

  const first = await provider.credentialFor(url);
  t.true(server.isValid(first?.token ?? ""));
  const deadline = Date.now() + 10_000;
  while (server.isValid(first?.token ?? "") && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  t.false(server.isValid(first?.token ?? ""));

  const next = await provider.credentialFor(url);
  t.not(next?.token, first?.token);
  t.true(server.isValid(next?.token ?? ""));
  t.false(provider.liveSecrets().includes(first?.token ?? ""));
});

test("concurrent calls for one repository share one lookup and one token request", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId } });
  server.delayMs = 100;
  const provider = appProvider(server);

  const results = await Promise.all(Array.from({ length: 8 }, () => provider.credentialFor("https://github.com/acme/widgets.git")));
  t.is(new Set(results.map((r) => r?.token)).size, 1);
  t.is(calls(server, "GET", "/repos/acme/widgets/installation").length, 1);
  t.is(calls(server, "POST", `/app/installations/${installationId}/access_tokens`).length, 1);
  t.is(server.issued.length, 1);
});

test("installations are looked up per repository, and each lookup is remembered", async (t) => {
  const one = nextInstallationId();
  const two = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/one": one, "other/two": two } });
  const provider = appProvider(server);

  const a = await provider.credentialFor("https://github.com/acme/one.git");
  const b = await provider.credentialFor("https://github.com/other/two");
  // Same repository, other spelling: GitHub's names are case-insensitive.
  const c = await provider.credentialFor("https://github.com/ACME/One.git");
  t.not(a?.token, b?.token);
  t.is(c?.token, a?.token);
  t.deepEqual(server.issued.map((i) => i.installationId), [one, two]);
  t.deepEqual(calls(server, "GET", /\/installation$/).map((r) => [r.path, r.status, r.appAuthenticated]), [
    ["/repos/acme/one/installation", 200, true],
    ["/repos/other/two/installation", 200, true],
  ]);
  t.deepEqual(new Set(provider.liveSecrets()), new Set([a?.token, b?.token]));
});

test("a repository the app is not installed on is GIT_CREDENTIAL_UNAVAILABLE, naming no secret", async (t) => {
  const server = await apiServer(t, { installations: { "acme/widgets": nextInstallationId() } });
  const provider = appProvider(server);
  await provider.credentialFor("https://github.com/acme/widgets.git");

  const err = assertUnavailable(t, await t.throwsAsync(provider.credentialFor("https://github.com/acme/missing.git")), server);
  t.regex(err.message, /acme\/missing/);
  t.regex(err.message, /404/);
  t.is(err.metadata.status, "404");
  t.is(err.metadata.repository, "acme/missing");
  // A failed lookup is not remembered: once the app is installed, the same repository works.
  server.addInstallation("acme/missing", nextInstallationId());
  t.truthy(await provider.credentialFor("https://github.com/acme/missing.git"));
});

test("an API failure carries its status and the API's message, scrubbed of token strings", async (t) => {
  const server = await apiServer(t, { installations: { "acme/one": nextInstallationId(), "acme/two": nextInstallationId() } });
  const provider = appProvider(server);
  const live = await provider.credentialFor("https://github.com/acme/one.git");
  const token = live?.token ?? "";

  server.failNext = { status: 403, message: `token ${token} and ghs_${"Z".repeat(36)} hit a secondary rate limit`, path: /access_tokens$/ };
  const forbidden = assertUnavailable(t, await t.throwsAsync(provider.credentialFor("https://github.com/acme/two.git")), server);
  t.is(forbidden.metadata.status, "403");
  t.regex(forbidden.message, /HTTP 403: token \*\*\* and \*\*\* hit a secondary rate limit/);
  t.false(forbidden.message.includes("Z".repeat(36)));

  server.failNext = { status: 500, message: "Server Error", path: /access_tokens$/ };
  const broken = assertUnavailable(t, await t.throwsAsync(provider.credentialFor("https://github.com/acme/two.git")), server);
  t.is(broken.metadata.status, "500");
  t.regex(broken.message, /HTTP 500: Server Error/);
  // Neither failure was cached.
  t.truthy(await provider.credentialFor("https://github.com/acme/two.git"));
});

test("a GitHub Enterprise API under /api/v3 serves its own host, port included", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId } });
  const provider = appProvider(server, { apiUrl: `${server.url}/api/v3`, hosts: ["ghe.example.com:8443"] });

  const credential = await provider.credentialFor("https://ghe.example.com:8443/acme/widgets.git");
  t.is(credential?.origin, "https://ghe.example.com:8443");
  t.true(server.isValid(credential?.token ?? ""));
  t.is((await provider.botIdentity()).name, "aw-test-app[bot]");
  // The same host on another port is not the app's.
  t.is(await provider.credentialFor("https://ghe.example.com/acme/widgets.git"), undefined);
  t.deepEqual(server.requests.map((r) => `${r.method} ${r.path} ${r.status}`), [
    "GET /api/v3/repos/acme/widgets/installation 200",
    `POST /api/v3/app/installations/${installationId}/access_tokens 201`,
    "GET /api/v3/app 200",
    "GET /api/v3/users/aw-test-app%5Bbot%5D 200",
  ]);
});

test("the bot identity is looked up once and has GitHub's shape", async (t) => {
  const server = await apiServer(t, { slug: "aw-pusher", botUserId: 41898282 });
  const provider = appProvider(server);

  const concurrent = await Promise.all([provider.botIdentity(), provider.botIdentity()]);
  const later = await provider.botIdentity();
  const expected = { name: "aw-pusher[bot]", email: "41898282+aw-pusher[bot]@users.noreply.github.com" };
  t.deepEqual(concurrent, [expected, expected]);
  t.deepEqual(later, expected);
  t.deepEqual(calls(server, "GET", "/app").map((r) => r.appAuthenticated), [true]);
  t.is(calls(server, "GET", "/users/aw-pusher%5Bbot%5D").length, 1);
});

test("a failed bot identity lookup is GIT_CREDENTIAL_UNAVAILABLE and is not cached", async (t) => {
  const server = await apiServer(t);
  const provider = appProvider(server);

  server.failNext = { status: 500, message: "Server Error", path: /^\/app$/ };
  const err = assertUnavailable(t, await t.throwsAsync(provider.botIdentity()), server);
  t.is(err.metadata.status, "500");
  t.regex(err.message, /GET \/app.*HTTP 500: Server Error/);

  t.is((await provider.botIdentity()).name, "aw-test-app[bot]");
  t.is(calls(server, "GET", "/app").length, 2);
});

test("without an app the identity is the fallback, and no request is made", async (t) => {
  const provider = createCredentialProvider({ staticCredentials: NO_STATIC, fallbackIdentity: FALLBACK });
  t.deepEqual(await provider.botIdentity(), FALLBACK);
  t.deepEqual(provider.liveSecrets(), []);
});

test("static tokens serve their host (port included), and a host with nothing configured gets undefined", async (t) => {
  const staticCredentials = new Map<string, GitCredential>([
    ["127.0.0.1:8443", { username: "x-access-token", token: "static-token-with-port-0123" }],
    ["git.example.com", { username: "bot", token: "static-token-by-hostname-4567" }],
  ]);
  const provider = createCredentialProvider({ staticCredentials, fallbackIdentity: FALLBACK });

  t.deepEqual(await provider.credentialFor("https://127.0.0.1:8443/acme/widgets.git"), {
    username: "x-access-token",
    token: "static-token-with-port-0123",
    origin: "https://127.0.0.1:8443",
    expiresAt: undefined,
  });
  // A key without a port matches the hostname on any port; the origin keeps the port.
  t.deepEqual(await provider.credentialFor("http://git.example.com:8080/widgets.git"), {
    username: "bot",
    token: "static-token-by-hostname-4567",
    origin: "http://git.example.com:8080",
    expiresAt: undefined,
  });
  t.is(await provider.credentialFor("https://127.0.0.1:9443/acme/widgets.git"), undefined);
  t.is(await provider.credentialFor("https://127.0.0.1/acme/widgets.git"), undefined);
  t.is(await provider.credentialFor("https://elsewhere.example.com/acme/widgets.git"), undefined);
  t.deepEqual(new Set(provider.liveSecrets()), new Set(["static-token-with-port-0123", "static-token-by-hostname-4567"]));
});

test("an app host takes precedence over a static token for the same host", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId } });
  const provider = createCredentialProvider({
    staticCredentials: new Map([["github.com", { username: "x-access-token", token: "static-github-token-89ab" }]]),
    githubApp: appSettings(server, { installationId }),
    fallbackIdentity: FALLBACK,
  });
  const credential = await provider.credentialFor("https://github.com/acme/widgets.git");
  t.is(credential?.token, server.issued[0]?.token);
  t.not(credential?.token, "static-github-token-89ab");
});

test("ssh, git, file and malformed URLs get no credential and cause no request", async (t) => {
  const server = await apiServer(t, { installations: { "acme/widgets": nextInstallationId() } });
  const provider = createCredentialProvider({
    staticCredentials: new Map([["github.com", { username: "x-access-token", token: "static-github-token-cdef" }]]),
    githubApp: appSettings(server),
    fallbackIdentity: FALLBACK,
  });
  for (const url of ["ssh://git@github.com/acme/widgets.git", "git@github.com:acme/widgets.git", "git://github.com/acme/widgets.git", "file:///srv/git/widgets.git", "not a url", ""]) {
    t.is(await provider.credentialFor(url), undefined, url);
  }
  t.deepEqual(server.requests, []);
});

test("an app token needs an owner/repo URL when the installation is looked up", async (t) => {
  const server = await apiServer(t);
  const provider = appProvider(server);
  const err = assertUnavailable(t, await t.throwsAsync(provider.credentialFor("https://github.com/acme")), server);
  t.regex(err.message, /owner\/repo/);
  t.deepEqual(server.requests, []);
});

test("a wrong private key is GIT_CREDENTIAL_UNAVAILABLE: the server answers 401", async (t) => {
  const server = await apiServer(t, { installations: { "acme/widgets": nextInstallationId() } });
  const wrongKey = t.context.wrongKeys.privateKeyPem;
  const provider = appProvider(server, { privateKey: wrongKey });

  const err = assertUnavailable(t, await t.throwsAsync(provider.credentialFor("https://github.com/acme/widgets.git")), server, wrongKey);
  t.is(err.metadata.status, "401");
  t.regex(err.message, /HTTP 401/);
  const identity = assertUnavailable(t, await t.throwsAsync(provider.botIdentity()), server, wrongKey);
  t.is(identity.metadata.status, "401");
  t.deepEqual(server.requests.map((r) => [r.status, r.appAuthenticated]), [[401, false], [401, false]]);
  t.deepEqual(server.issued, []);
});

test("a PKCS#1 private key signs as well as a PKCS#8 one", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId } });
  const pkcs1 = createPrivateKey(server.privateKeyPem).export({ type: "pkcs1", format: "pem" }).toString();
  t.regex(pkcs1, /BEGIN RSA PRIVATE KEY/);
  const provider = appProvider(server, { privateKey: pkcs1, installationId });
  t.true(server.isValid((await provider.credentialFor("https://github.com/acme/widgets.git"))?.token ?? ""));
});

test("malformed app settings are refused when the provider is built, without echoing the key", (t) => {
  const build = (githubApp: GitHubAppSettings) => () => createCredentialProvider({ staticCredentials: NO_STATIC, githubApp, fallbackIdentity: FALLBACK });
  const base: GitHubAppSettings = { appId: "4242", privateKey: t.context.keys.privateKeyPem, apiUrl: "https://api.github.com", hosts: ["github.com"] };
  const notAKey = "-----BEGIN RSA PRIVATE KEY-----\nTm90QVJlYWxLZXlCdXRTZWNyZXRBbnl3YXk=\n-----END RSA PRIVATE KEY-----";
  const keyErr = t.throws(build({ ...base, privateKey: notAKey }));
  t.regex(keyErr?.message ?? "", /githubApp\.privateKey/);
  t.false(keyErr?.message.includes("Tm90QVJlYWxLZXlCdXRTZWNyZXRBbnl3YXk="));
  t.throws(build({ ...base, appId: "my-app" }), { message: /githubApp\.appId/ });
  t.throws(build({ ...base, apiUrl: "ftp://api.github.com" }), { message: /githubApp\.apiUrl/ });
  t.throws(build({ ...base, hosts: [] }), { message: /githubApp\.hosts/ });
  t.throws(build({ ...base, installationId: 0 }), { message: /githubApp\.installationId/ });
});

test("a caller's abort ends its wait with CANCELLED while the shared request completes for the others", async (t) => {
  const installationId = nextInstallationId();
  const server = await apiServer(t, { installations: { "acme/widgets": installationId } });
  server.delayMs = 300;
  const provider = appProvider(server, { installationId });

  const aborted = AbortSignal.timeout(20);
  const other = provider.credentialFor("https://github.com/acme/widgets.git");
  const err = await t.throwsAsync(provider.credentialFor("https://github.com/acme/widgets.git", aborted));
  t.is((err as DomainError).reason, "CANCELLED");
  t.true(server.isValid((await other)?.token ?? ""));
  t.is(server.issued.length, 1);
  const preAborted = AbortSignal.abort();
  t.is(((await t.throwsAsync(provider.credentialFor("https://github.com/acme/widgets.git", preAborted))) as DomainError).reason, "CANCELLED");
});
