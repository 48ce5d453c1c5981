/**
 * The credentials the git tools push (and fetch) with, and the identity they commit as. A host is
 * served by a GitHub App (short-lived installation tokens, minted on demand) or by a static token
 * from the server's credentials file, or by nothing.
 *
 * - JWTs are signed by `@octokit/auth-app` (never by hand); every API call goes to the configured
 *   `apiUrl` through one `@octokit/request` instance, so GitHub Enterprise works the same way.
 * - Installation tokens are cached here, not in octokit: octokit is called with `refresh: true`
 *   and a cache that keeps nothing, so it never hands back a token this module considers stale
 *   and no token lives anywhere this module cannot list (`liveSecrets`). A token is reused until
 *   `expiresAt - margin`, margin = min(5 minutes, a quarter of its lifetime); concurrent requests
 *   for one installation share one API call.
 * - The private key, JWTs and tokens never reach an error message, its metadata or a log line:
 *   an API failure becomes GIT_CREDENTIAL_UNAVAILABLE with the HTTP status and the API's own
 *   message, scrubbed of every secret this module knows and of anything shaped like one.
 * - Every API request is bounded by a 30 s timeout. A caller's signal stops its wait (CANCELLED),
 *   not a request other callers share; that request still ends within its timeout.
 */
import { createPrivateKey } from "node:crypto";
import { createAppAuth } from "@octokit/auth-app";
import { request as octokitRequest } from "@octokit/request";
import { DomainError } from "../../core/errors.ts";
import type { GitCredential } from "../sessions/clone.ts";

/** A GitHub App whose installation tokens serve some git hosts. */
export interface GitHubAppSettings {
  /** The app's numeric id, as a string. */
  appId: string;
  /** The app's private key, PEM (PKCS#1 or PKCS#8). */
  privateKey: string;
  /** The REST API root: "https://api.github.com" or a GitHub Enterprise ".../api/v3". */
  apiUrl: string;
  /** Git hosts (URL host[:port]) whose repositories the app's tokens are for, e.g. ["github.com"]. */
  hosts: string[];
  /** The installation every repository belongs to; unset: looked up per repository (GET /repos/{owner}/{repo}/installation). */
  installationId?: number;
}

/** A credential for one repository, scoped to its origin. */
export interface IssuedCredential {
  /** The HTTP basic user name ("x-access-token" for app tokens). */
  username: string;
  token: string;
  /** "https://host[:port]" of the repository URL: the only origin the token may be sent to. */
  origin: string;
  /** When the token stops working (epoch ms); undefined for static tokens. */
  expiresAt: number | undefined;
}

/** Who commits: the user.name and user.email of the git tools' commits. */
export interface BotIdentity {
  name: string;
  email: string;
}

/** Hands out git credentials and the commit identity. */
export interface CredentialProvider {
  /**
   * A credential for pushing to (or fetching from) `repositoryUrl` (http/https only; others →
   * undefined), or undefined when none is configured for its host. Throws
   * GIT_CREDENTIAL_UNAVAILABLE when the host is an app's but no token can be had, CANCELLED when
   * `signal` aborts first.
   */
  credentialFor(repositoryUrl: string, signal?: AbortSignal): Promise<IssuedCredential | undefined>;
  /**
   * The commit identity: with an app, `<slug>[bot]` and `<user id>+<slug>[bot]@users.noreply.github.com`
   * (GET /app with the app JWT → slug; GET /users/{slug}[bot] → id), looked up once (a failed
   * lookup is not cached; it throws GIT_CREDENTIAL_UNAVAILABLE); without an app, `fallback`.
   */
  botIdentity(): Promise<BotIdentity>;
  /**
   * Every token string this provider has handed out and still caches (for redaction in logs and
   * errors): the static tokens, and each app token until it expires, even after it was renewed,
   * since a push that started with it may still be printing.
   */
  liveSecrets(): string[];
}

/** Options of `createCredentialProvider`. */
export interface CredentialProviderOptions {
  /** Static tokens by URL host ("git.example.com", "127.0.0.1:8443"), as the settings load them. */
  staticCredentials: ReadonlyMap<string, GitCredential>;
  /** The GitHub App serving `githubApp.hosts`, if any; its hosts take precedence over static tokens. */
  githubApp?: GitHubAppSettings;
  /** The commit identity when there is no app. */
  fallbackIdentity: BotIdentity;
  /** The clock token expiry is judged by (epoch ms); default Date.now. */
  now?: () => number;
}

/** Upper bound of one API request. */
const API_TIMEOUT_MS = 30_000;
/** The most a token's renewal is brought forward before its expiry. */
const MAX_RENEW_MARGIN_MS = 5 * 60_000;
/** How long a token without an expiry is kept among the live secrets. */
const UNKNOWN_LIFETIME_MS = 60 * 60_000;
/** The user name of installation tokens over HTTP basic authentication. */
const APP_USERNAME = "x-access-token";
/** Strings shaped like a GitHub token or a JWT, scrubbed even when this module never saw them. */
const SECRET_SHAPES = [/\bgh[pousr]_[A-Za-z0-9_]{16,}/g, /\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/g];

const unavailable = (message: string, metadata: Record<string, string>, cause?: unknown) =>
  new DomainError("GIT_CREDENTIAL_UNAVAILABLE", message, { metadata, cause });

const cancelled = () => new DomainError("CANCELLED", "Getting a git credential was cancelled");

/** The origin and host keys of an http(s) URL, or undefined for anything else. */
function parseRepositoryUrl(url: string): { parsed: URL; origin: string } | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") return undefined;
  return { parsed, origin: `${parsed.protocol}//${parsed.host}` };
}

/** `promise`, or CANCELLED as soon as `signal` aborts (the work behind `promise` goes on). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  if (signal.aborted) return Promise.reject(cancelled());
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(cancelled());
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

/**
 * Builds the provider. Throws a plain Error naming the setting when `githubApp` is malformed (an
 * app id that is not a number, a key that is not an RSA private key, an API URL that is not
 * http(s), no hosts); the message never contains the key.
 */
export function createCredentialProvider(options: CredentialProviderOptions): CredentialProvider {
  const now = options.now ?? Date.now;
  const app = options.githubApp ? createAppClient(options.githubApp, now) : undefined;
  const appHosts = new Set((options.githubApp?.hosts ?? []).map((h) => h.toLowerCase()));
  const fallback = { ...options.fallbackIdentity };
  let identity: Promise<BotIdentity> | undefined;

  return {
    async credentialFor(repositoryUrl, signal) {
      const target = parseRepositoryUrl(repositoryUrl);
      if (target === undefined) return undefined;
      const { parsed, origin } = target;
      if (app !== undefined && (appHosts.has(parsed.host) || appHosts.has(parsed.hostname))) {
        if (signal?.aborted) throw cancelled();
        const token = await untilAborted(app.tokenFor(parsed), signal);
        return { username: APP_USERNAME, token: token.token, origin, expiresAt: token.expiresAt };
      }
      const credential = options.staticCredentials.get(parsed.host) ?? options.staticCredentials.get(parsed.hostname);
      if (credential === undefined) return undefined;
      return { username: credential.username, token: credential.token, origin, expiresAt: undefined };
    },

    botIdentity() {
      if (app === undefined) return Promise.resolve({ ...fallback });
      if (identity === undefined) {
        const lookup = app.identity();
        identity = lookup;
        // A failure is not remembered: the next call asks again.
        lookup.catch(() => {
          if (identity === lookup) identity = undefined;
        });
      }
      return identity.then((id) => ({ ...id }));
    },

    liveSecrets() {
      const statics = [...options.staticCredentials.values()].map((c) => c.token);
      return [...new Set([...statics, ...(app?.liveTokens() ?? [])])].filter((s) => s !== "");
    },
  };
}

/** An installation token and when this module stops reusing it. */
interface CachedToken {
  token: string;
  expiresAt: number | undefined;
  /** Epoch ms from which the token is renewed instead of reused. */
  renewAt: number;
}

/** What the provider needs of a GitHub App. */
interface AppClient {
  tokenFor(repository: URL): Promise<CachedToken>;
  identity(): Promise<BotIdentity>;
  liveTokens(): string[];
}

/** The settings of `app`, checked; throws a plain Error naming the bad setting. */
function checkAppSettings(app: GitHubAppSettings): { privateKey: string; apiUrl: string } {
  if (!/^[1-9][0-9]*$/.test(app.appId)) throw new Error("githubApp.appId must be the app's numeric id");
  // Keys kept in environment variables often have their line breaks escaped.
  const privateKey = app.privateKey.replace(/\\n/g, "\n");
  let keyType: string | undefined;
  try {
    keyType = createPrivateKey(privateKey).asymmetricKeyType;
  } catch {
    keyType = undefined;
  }
  if (keyType !== "rsa") throw new Error("githubApp.privateKey must be the app's RSA private key in PEM (PKCS#1 or PKCS#8)");
  let api: URL;
  try {
    api = new URL(app.apiUrl);
  } catch {
    throw new Error("githubApp.apiUrl must be a URL such as https://api.github.com");
  }
  if (api.protocol !== "https:" && api.protocol !== "http:") throw new Error("githubApp.apiUrl must be an http(s) URL");
  if (api.username !== "" || api.password !== "") throw new Error("githubApp.apiUrl must not contain credentials");
  if (app.hosts.length === 0 || app.hosts.some((h) => h === "" || /[\s/@]/.test(h))) {
    throw new Error("githubApp.hosts must list git hosts (host or host:port)");
  }
  if (app.installationId !== undefined && !(Number.isSafeInteger(app.installationId) && app.installationId > 0)) {
    throw new Error("githubApp.installationId must be a positive integer");
  }
  return { privateKey, apiUrl: app.apiUrl.replace(/\/+$/, "") };
}

/** The fields of an octokit RequestError this module reads. */
interface ApiFailure {
  status: number;
  response?: { data?: unknown };
  cause?: unknown;
}

function isApiFailure(err: unknown): err is ApiFailure {
  return typeof err === "object" && err !== null && typeof (err as { status?: unknown }).status === "number" && "request" in err;
}

function createAppClient(settings: GitHubAppSettings, now: () => number): AppClient {
  const { privateKey, apiUrl } = checkAppSettings(settings);
  const apiHost = new URL(apiUrl).host;

  // Every request of this app, octokit's own included, goes to apiUrl and ends within the timeout.
  const timedFetch: typeof fetch = (input, init) => {
    const timeout = AbortSignal.timeout(API_TIMEOUT_MS);
    return fetch(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, timeout]) : timeout });
  };
  const request = octokitRequest.defaults({
    baseUrl: apiUrl,
    headers: { "user-agent": "agent-workspace" },
    request: { fetch: timedFetch },
  });
  const auth = createAppAuth({
    appId: settings.appId,
    privateKey,
    request,
    // Nothing is kept inside octokit: this module caches, and knows every token it holds.
    cache: { get: () => "", set: () => undefined },
    log: { warn: () => undefined },
  });

  const tokens = new Map<number, CachedToken>();
  const minting = new Map<number, Promise<CachedToken>>();
  const installations = new Map<string, number>();
  const lookingUp = new Map<string, Promise<number>>();
  /** Every token handed out → until when it counts as live. */
  const handedOut = new Map<string, number>();
  /** The JWTs signed for this module's own calls, until they expire (for scrubbing). */
  const jwts = new Map<string, number>();
  const keyLines = privateKey.split("\n").map((l) => l.trim()).filter((l) => l.length >= 16 && !l.startsWith("-----"));

  const prune = () => {
    const t = now();
    for (const [token, until] of handedOut) if (until <= t) handedOut.delete(token);
    for (const [jwt, until] of jwts) if (until <= Date.now()) jwts.delete(jwt);
  };

  /** `text` without any secret this module knows or anything shaped like a token or JWT, at most 300 characters. */
  const scrub = (text: string): string => {
    prune();
    const known = [privateKey, ...keyLines, ...handedOut.keys(), ...[...tokens.values()].map((t) => t.token), ...jwts.keys()].filter((s) => s.length >= 4);
    let out = known.reduce((acc, s) => acc.split(s).join("***"), text);
    for (const shape of SECRET_SHAPES) out = out.replace(shape, "***");
    return out.length > 300 ? `${out.slice(0, 300)}…` : out;
  };

  /** The GIT_CREDENTIAL_UNAVAILABLE for a failed `what`; never carries octokit's error (it holds request options). */
  const failure = (what: string, err: unknown, metadata: Record<string, string>): DomainError => {
    if (err instanceof DomainError) return err;
    if (isApiFailure(err)) {
      const cause = err.cause as { name?: unknown } | undefined;
      if (err.response === undefined) {
        const why = cause?.name === "TimeoutError" ? `the GitHub API did not answer within ${API_TIMEOUT_MS / 1000} s` : `the GitHub API could not be reached (${scrub(String((cause as Error | undefined)?.message ?? "network error"))})`;
        return unavailable(`${what} failed: ${why}`, { ...metadata, apiHost });
      }
      const data = err.response.data;
      const apiMessage = typeof data === "object" && data !== null && typeof (data as { message?: unknown }).message === "string" ? (data as { message: string }).message : typeof data === "string" ? data : "";
      const detail = apiMessage === "" ? "" : `: ${scrub(apiMessage)}`;
      return unavailable(`${what} failed: the GitHub API answered HTTP ${err.status}${detail}`, { ...metadata, apiHost, status: String(err.status) });
    }
    if (err instanceof Error && err.name === "AbortError") return unavailable(`${what} failed: the request was aborted`, { ...metadata, apiHost });
    // Anything else came from signing (the key) or from octokit itself: its text is not sent.
    return unavailable(`${what} failed: the GitHub App's JWT could not be signed or the request not made`, { ...metadata, apiHost }, new Error(scrub(err instanceof Error ? `${err.name}: ${err.message}` : String(err))));
  };

  /** A fresh app JWT (signed by octokit), remembered only for scrubbing until it expires. */
  const appJwt = async (): Promise<string> => {
    const { token, expiresAt } = await auth({ type: "app" });
    jwts.set(token, Date.parse(expiresAt) || Date.now() + 10 * 60_000);
    return token;
  };

  const mint = async (installationId: number): Promise<CachedToken> => {
    const meta = { installationId: String(installationId) };
    const requestedAt = now();
    let result: { token: unknown; expiresAt: unknown };
    try {
      // refresh: true skips octokit's cache read; its cache is a no-op anyway.
      result = await auth({ type: "installation", installationId, refresh: true });
    } catch (err) {
      throw failure(`Creating an installation token of the GitHub App (installation ${installationId})`, err, meta);
    }
    if (typeof result.token !== "string" || !/^[\x21-\x7e]+$/.test(result.token)) {
      throw unavailable(`The GitHub API answered the installation token request of installation ${installationId} without a usable token`, meta);
    }
    const expiresAt = typeof result.expiresAt === "string" ? Date.parse(result.expiresAt) : Number.NaN;
    if (Number.isNaN(expiresAt)) {
      handedOut.set(result.token, requestedAt + UNKNOWN_LIFETIME_MS);
      return { token: result.token, expiresAt: undefined, renewAt: Number.NEGATIVE_INFINITY };
    }
    const margin = Math.min(MAX_RENEW_MARGIN_MS, Math.max(0, expiresAt - requestedAt) / 4);
    handedOut.set(result.token, expiresAt);
    return { token: result.token, expiresAt, renewAt: expiresAt - margin };
  };

  const tokenOf = (installationId: number): Promise<CachedToken> => {
    const cached = tokens.get(installationId);
    if (cached !== undefined && now() < cached.renewAt) return Promise.resolve(cached);
    const pending = minting.get(installationId);
    if (pending !== undefined) return pending;
    const promise = mint(installationId)
      .then((token) => {
        tokens.set(installationId, token);
        return token;
      })
      .finally(() => minting.delete(installationId));
    minting.set(installationId, promise);
    return promise;
  };

  const lookUp = async (owner: string, repo: string): Promise<number> => {
    const what = `Finding the GitHub App's installation for ${owner}/${repo}`;
    const meta = { repository: `${owner}/${repo}` };
    let data: unknown;
    try {
      const jwt = await appJwt();
      ({ data } = await request("GET /repos/{owner}/{repo}/installation", { owner, repo, headers: { authorization: `bearer ${jwt}` } }));
    } catch (err) {
      if (isApiFailure(err) && err.status === 404 && err.response !== undefined) {
        throw unavailable(`The GitHub App is not installed on ${owner}/${repo} (or the repository does not exist): the GitHub API answered HTTP 404`, { ...meta, apiHost, status: "404" });
      }
      throw failure(what, err, meta);
    }
    const id = (data as { id?: unknown } | null)?.id;
    if (typeof id !== "number" || !Number.isSafeInteger(id) || id <= 0) throw unavailable(`${what} failed: the GitHub API's answer has no installation id`, meta);
    return id;
  };

  const installationOf = (repository: URL): Promise<number> => {
    if (settings.installationId !== undefined) return Promise.resolve(settings.installationId);
    const parts = repository.pathname.split("/").filter((p) => p !== "");
    const owner = parts[0];
    const repo = parts[1]?.replace(/\.git$/, "");
    if (parts.length !== 2 || !owner || !repo) {
      return Promise.reject(unavailable("A GitHub App token needs a repository URL of the form https://host/owner/repo(.git)", { host: repository.host }));
    }
    // GitHub's owner and repository names are case-insensitive.
    const key = `${owner}/${repo}`.toLowerCase();
    const known = installations.get(key);
    if (known !== undefined) return Promise.resolve(known);
    const pending = lookingUp.get(key);
    if (pending !== undefined) return pending;
    const promise = lookUp(owner, repo)
      .then((id) => {
        installations.set(key, id);
        return id;
      })
      .finally(() => lookingUp.delete(key));
    lookingUp.set(key, promise);
    return promise;
  };

  return {
    async tokenFor(repository) {
      return tokenOf(await installationOf(repository));
    },

    async identity() {
      const meta = { step: "bot-identity" };
      let slug: unknown;
      try {
        const jwt = await appJwt();
        const { data } = await request("GET /app", { headers: { authorization: `bearer ${jwt}` } });
        slug = (data as { slug?: unknown } | null)?.slug;
      } catch (err) {
        throw failure("Looking up the GitHub App (GET /app)", err, meta);
      }
      if (typeof slug !== "string" || !/^[A-Za-z0-9][A-Za-z0-9-]{0,99}$/.test(slug)) throw unavailable("The GitHub API's answer to GET /app has no usable slug", meta);
      const login = `${slug}[bot]`;
      let id: unknown;
      try {
        const { data } = await request("GET /users/{username}", { username: login });
        id = (data as { id?: unknown } | null)?.id;
      } catch (err) {
        throw failure(`Looking up the app's bot user ${login}`, err, meta);
      }
      if (typeof id !== "number" || !Number.isSafeInteger(id) || id <= 0) throw unavailable(`The GitHub API's answer for ${login} has no user id`, meta);
      return { name: login, email: `${id}+${login}@users.noreply.github.com` };
    },

    liveTokens() {
      prune();
      return [...handedOut.keys()];
    },
  };
}
