/**
 * Test fixture: a real HTTP server on 127.0.0.1 (port 0) playing the GitHub REST API for one
 * GitHub App. It holds the app's RSA key pair and verifies every app-authenticated request's
 * `Authorization: Bearer <JWT>` with the PUBLIC key, as GitHub does (RS256 signature, `iss` the
 * app id, `exp` in the future and at most 10 minutes ahead, `iat` not more than 60 s in the
 * future), answering 401 otherwise. It mints installation tokens with a configurable lifetime and
 * remembers each, so tests can ask whether a token is still valid; it logs every request (with
 * the headers a client sent) and can be told to fail. The API is served at the root and under
 * `/api/v3`, GitHub Enterprise's prefix. Nothing leaves the loopback interface.
 *
 * Endpoints:
 * - `GET /app` (JWT) → `{ id, slug }`
 * - `GET /users/{slug}[bot]` → `{ id, login, type: "Bot" }`
 * - `GET /repos/{owner}/{repo}/installation` (JWT) → `{ id }` for repositories it was told about, 404 otherwise
 * - `POST /app/installations/{id}/access_tokens` (JWT) → 201 `{ token: "ghs_…", expires_at }`, 404 for unknown installations
 */
import { createPublicKey, generateKeyPairSync, randomBytes, verify } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

/** An RSA key pair in PEM. */
export interface AppKeyPair {
  /** PKCS#8 (or PKCS#1) PEM. */
  privateKeyPem: string;
  /** SPKI PEM. */
  publicKeyPem: string;
}

/** Options of `startGitHubAppServer`. */
export interface GitHubAppServerOptions {
  /** The app's id; default 4242. */
  appId?: number;
  /** The app's slug; default "aw-test-app". */
  slug?: string;
  /** The user id of the app's bot user `<slug>[bot]`; default 9_000_001. */
  botUserId?: number;
  /** The key pair; default a fresh 2048-bit pair. */
  keys?: AppKeyPair;
  /** "owner/repo" → installation id (case-insensitive names). */
  installations?: Record<string, number>;
  /** Lifetime of minted tokens in ms; default one hour. Settable later on the server. */
  tokenLifetimeMs?: number;
}

/** One minted installation token. */
export interface IssuedToken {
  token: string;
  /** Epoch ms. */
  expiresAt: number;
  installationId: number;
}

/** One request the server answered. */
export interface ApiRequestRecord {
  method: string;
  /** The URL path as requested (prefix included), without the query string. */
  path: string;
  status: number;
  /** Whether the request carried a JWT that verified with the app's public key. */
  appAuthenticated: boolean;
  /** The headers the client sent that GitHub cares about. */
  accept: string | undefined;
  userAgent: string | undefined;
}

/** A failure to answer with instead of the real answer. */
export interface ApiFailure {
  status: 500 | 403;
  /** The JSON `message` of the answer. */
  message: string;
  /** Only requests whose un-prefixed path matches fail; default every request. */
  path?: RegExp;
}

/** A running fake GitHub API. */
export interface GitHubAppServer {
  /** http://127.0.0.1:PORT */
  url: string;
  appId: number;
  slug: string;
  botUserId: number;
  privateKeyPem: string;
  publicKeyPem: string;
  /** Every token minted so far, oldest first. */
  readonly issued: ReadonlyArray<IssuedToken>;
  /** Whether `token` was minted here and has not expired. */
  isValid(token: string): boolean;
  /** Every request answered so far, in order. */
  readonly requests: ReadonlyArray<ApiRequestRecord>;
  /** Makes `repository` ("owner/repo") part of installation `id`. */
  addInstallation(repository: string, id: number): void;
  /** Lifetime of tokens minted from now on, in ms. */
  tokenLifetimeMs: number;
  /** Delay in ms before every answer (to keep a request in flight); settable at any time. */
  delayMs: number;
  /** The next matching request fails this way (then the setting clears itself). */
  failNext: ApiFailure | undefined;
  /** Every matching request fails this way while set. */
  fail: ApiFailure | undefined;
  close(): Promise<void>;
}

/** A fresh 2048-bit RSA key pair (PKCS#8 private key, SPKI public key). */
export function generateAppKeys(): AppKeyPair {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
    publicKeyEncoding: { type: "spki", format: "pem" },
  });
  return { privateKeyPem: privateKey, publicKeyPem: publicKey };
}

const json = (res: http.ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8" }).end(JSON.stringify(body));
};

/** Starts the fake API on 127.0.0.1:0. */
export async function startGitHubAppServer(options: GitHubAppServerOptions = {}): Promise<GitHubAppServer> {
  const keys = options.keys ?? generateAppKeys();
  const publicKey = createPublicKey(keys.publicKeyPem);
  const appId = options.appId ?? 4242;
  const slug = options.slug ?? "aw-test-app";
  const botUserId = options.botUserId ?? 9_000_001;
  const installations = new Map<string, number>(Object.entries(options.installations ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
  const issued: IssuedToken[] = [];
  const log: ApiRequestRecord[] = [];

  /** Whether `authorization` is `Bearer <JWT>` with a JWT GitHub would accept from this app. */
  function verifyJwt(authorization: string | undefined): boolean {
    const match = /^bearer (.+)$/i.exec(authorization ?? "");
    if (!match) return false;
    const parts = match[1].split(".");
    if (parts.length !== 3) return false;
    try {
      const header = JSON.parse(Buffer.from(parts[0], "base64url").toString("utf8")) as { alg?: unknown };
      if (header.alg !== "RS256") return false;
      const signed = verify("RSA-SHA256", Buffer.from(`${parts[0]}.${parts[1]}`), publicKey, Buffer.from(parts[2], "base64url"));
      if (!signed) return false;
      const claims = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8")) as { iss?: unknown; exp?: unknown; iat?: unknown };
      const nowSec = Math.floor(Date.now() / 1000);
      if (String(claims.iss) !== String(appId)) return false;
      if (typeof claims.exp !== "number" || claims.exp <= nowSec || claims.exp > nowSec + 600) return false;
      if (typeof claims.iat !== "number" || claims.iat > nowSec + 60) return false;
      return true;
    } catch {
      return false;
    }
  }

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://api.invalid");
    const method = req.method ?? "GET";
    const appAuthenticated = verifyJwt(req.headers.authorization);
    const entry: ApiRequestRecord = { method, path: url.pathname, status: 0, appAuthenticated, accept: req.headers.accept, userAgent: req.headers["user-agent"] };
    const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => http.ServerResponse;
    res.writeHead = ((...args: unknown[]) => {
      entry.status = typeof args[0] === "number" ? args[0] : res.statusCode;
      log.push(entry);
      return writeHead(...args);
    }) as typeof res.writeHead;
    req.resume();
    req.on("end", () => {
      const route = url.pathname.replace(/^\/api\/v3(?=\/)/, "");
      if (fake.delayMs <= 0) return answer(req, res, method, route, appAuthenticated);
      // Unref'd: a delayed answer never keeps the test process alive after close().
      setTimeout(() => {
        if (!res.destroyed) answer(req, res, method, route, appAuthenticated);
      }, fake.delayMs).unref();
    });
  });

  function answer(req: http.IncomingMessage, res: http.ServerResponse, method: string, route: string, appAuthenticated: boolean): void {
    // GitHub refuses requests without a User-Agent.
    if (!req.headers["user-agent"]) {
      json(res, 403, { message: "Request forbidden by administrative rules. Please make sure your request has a User-Agent header" });
      return;
    }
    const failure = [fake.failNext, fake.fail].find((f) => f !== undefined && (f.path === undefined || f.path.test(route)));
    if (failure !== undefined) {
      if (failure === fake.failNext) fake.failNext = undefined;
      json(res, failure.status, { message: failure.message, documentation_url: "https://docs.github.com/rest" });
      return;
    }
    let segments: string[];
    try {
      segments = route.split("/").filter((s) => s !== "").map((s) => decodeURIComponent(s));
    } catch {
      json(res, 400, { message: "Bad path" });
      return;
    }
    const needsApp = () => {
      if (appAuthenticated) return false;
      json(res, 401, { message: "A JSON web token could not be decoded", documentation_url: "https://docs.github.com/rest" });
      return true;
    };
    const [a, b, c, d] = segments;
    if (method === "GET" && segments.length === 1 && a === "app") {
      if (needsApp()) return;
      json(res, 200, { id: appId, slug, name: slug });
    } else if (method === "GET" && segments.length === 2 && a === "users") {
      if (b.toLowerCase() !== `${slug}[bot]`.toLowerCase()) return json(res, 404, { message: "Not Found" });
      json(res, 200, { id: botUserId, login: `${slug}[bot]`, type: "Bot" });
    } else if (method === "GET" && segments.length === 4 && a === "repos" && d === "installation") {
      if (needsApp()) return;
      const id = installations.get(`${b}/${c}`.toLowerCase());
      if (id === undefined) return json(res, 404, { message: "Not Found", documentation_url: "https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app" });
      json(res, 200, { id, app_id: appId, app_slug: slug });
    } else if (method === "POST" && segments.length === 4 && a === "app" && b === "installations" && d === "access_tokens") {
      if (needsApp()) return;
      const id = Number(c);
      if (!Number.isSafeInteger(id) || ![...installations.values()].includes(id)) return json(res, 404, { message: "Not Found" });
      const token = `ghs_${randomBytes(27).toString("base64url").replace(/[-_]/g, "x")}`;
      const expiresAt = Date.now() + fake.tokenLifetimeMs;
      issued.push({ token, expiresAt, installationId: id });
      json(res, 201, { token, expires_at: new Date(expiresAt).toISOString(), permissions: { contents: "write" }, repository_selection: "all" });
    } else {
      json(res, 404, { message: "Not Found" });
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  server.on("error", () => undefined);

  let closed = false;
  const fake: GitHubAppServer = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    appId,
    slug,
    botUserId,
    privateKeyPem: keys.privateKeyPem,
    publicKeyPem: keys.publicKeyPem,
    get issued() {
      return issued;
    },
    isValid: (token) => issued.some((t) => t.token === token && t.expiresAt > Date.now()),
    get requests() {
      return log;
    },
    addInstallation: (repository, id) => void installations.set(repository.toLowerCase(), id),
    tokenLifetimeMs: options.tokenLifetimeMs ?? 60 * 60_000,
    delayMs: 0,
    failNext: undefined,
    fail: undefined,
    async close() {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await stopped;
    },
  };
  return fake;
}
