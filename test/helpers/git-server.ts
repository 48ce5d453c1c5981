/**
 * Test fixture: a real git smart-HTTP server on 127.0.0.1 (port 0). Every request runs the real
 * `git http-backend` CGI against a temporary project root, so clients speak the genuine protocol
 * (v0 and v2, gzipped requests included) to genuine repositories built with real git commands.
 * Repositories need `Authorization: Basic base64(username:token)` unless declared public; the
 * server logs every request (and whether it was authorised) so tests can assert what a client
 * sent. Nothing leaves the loopback interface, no credential is ever written to a file, and
 * `close()` ends open connections, kills running CGIs and removes every temporary directory.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";

/** Options of `startGitServer`. */
export interface GitServerOptions {
  /** The token (password) of Basic authentication. */
  token: string;
  /**
   * Accepts further tokens (a GitHub App's installation tokens, valid until they expire); the
   * request is authorised when its Basic password is `token` or this says yes.
   */
  acceptToken?: (token: string) => boolean;
  /** The user name of Basic authentication; default "x-access-token", as GitHub's installation tokens use. */
  username?: string;
  /** Names of repositories (as given to `createRepo`) anyone may read without credentials. */
  publicRepos?: string[];
}

/** One file of a branch: its content, or its content and git mode ("120000" is a symlink whose target is `content`). */
export type RepoFile = string | { content: string; mode: "100644" | "100755" | "120000" };

/** The contents of a repository to create. */
export interface RepoSpec {
  /** The branch the bare repository's HEAD points at; default "main". It must be a key of `branches`. */
  defaultBranch?: string;
  /**
   * Branch name → the exact set of files (path relative to the root, `/`-separated) at the tip of
   * that branch. The default branch is one root commit; every other branch is one commit whose
   * parent is the default branch's commit (its tree is exactly the files listed, nothing inherited).
   */
  branches: Record<string, Record<string, RepoFile>>;
  /**
   * Optional extra setup run in the work tree of each branch after its files are written and
   * before the commit (e.g. to add a `.gitmodules` or run `git update-index`); everything it
   * leaves in the work tree is committed.
   */
  setup?: (workTree: string, branch: string) => void | Promise<void>;
}

/** One request the server answered (or that ended before an answer). */
export interface GitRequestRecord {
  method: string;
  /** The URL path, without the query string. */
  path: string;
  /** Whether the request carried valid credentials (independent of whether the repository needed them). */
  authorized: boolean;
  /** The HTTP status sent; 0 if the client went away (or the server closed) before an answer. */
  status: number;
  /** The raw Authorization header, if any. */
  authorization: string | undefined;
}

/** A running git server. */
export interface GitServer {
  /** http://127.0.0.1:PORT */
  url: string;
  /** URL of a repository: `${url}/${name}.git` */
  repoUrl(name: string): string;
  /** The bare repository behind repoUrl(name) on disk, for tests that tamper with it. */
  repoPath(name: string): string;
  /** Creates a bare repository served at repoUrl(name); returns the commit sha of every branch tip. */
  createRepo(name: string, spec: RepoSpec): Promise<{ commits: Record<string, string> }>;
  /** Every request served so far, in the order their answers started. */
  readonly requests: ReadonlyArray<GitRequestRecord>;
  /** Delay in ms applied to every request before answering (to make clones slow in tests); settable at any time. */
  delayMs: number;
  /** Ends open connections, kills running CGIs and removes the temporary directories. Idempotent. */
  close(): Promise<void>;
}

/** Upper bound of one `git` subprocess (a CGI request or a repository-building command). */
const GIT_TIMEOUT_MS = 60_000;
/** At most this much of a CGI's stderr is kept for the body of a 500. */
const STDERR_LIMIT = 16 * 1024;
/** Repository names: path segments of safe characters, none of them `.` or `..`. */
const REPO_NAME = /^(?!.*(?:^|\/)\.\.?(?:\/|$))[A-Za-z0-9._-]+(?:\/[A-Za-z0-9._-]+)*$/;

/**
 * Starts a git smart-HTTP server on 127.0.0.1:0. Its CGIs and repository-building commands run
 * with a clean environment (PATH, an empty HOME, no system config), so the host's git
 * configuration and credentials never take part.
 */
/** SIGKILL to a CGI child and everything it started (its process group). */
function killGroup(child: ChildProcess): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
  } catch {
    // already gone
  }
}

export async function startGitServer(options: GitServerOptions): Promise<GitServer> {
  const base = await mkdtemp(path.join(tmpdir(), "aw-git-server-"));
  const root = path.join(base, "root");
  const home = path.join(base, "home");
  const scratch = path.join(base, "scratch");
  await Promise.all([mkdir(root), mkdir(home), mkdir(scratch)]);

  const expected = `Basic ${Buffer.from(`${options.username ?? "x-access-token"}:${options.token}`).toString("base64")}`;
  const publicRepos = new Set(options.publicRepos ?? []);
  const username = options.username ?? "x-access-token";
  /** Whether `authorization` is Basic for `username` with a token `acceptToken` takes. */
  const acceptedByCallback = (authorization: string | undefined): boolean => {
    if (options.acceptToken === undefined || authorization === undefined || !authorization.startsWith("Basic ")) return false;
    const decoded = Buffer.from(authorization.slice(6), "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    return colon > 0 && decoded.slice(0, colon) === username && options.acceptToken(decoded.slice(colon + 1));
  };
  const cleanEnv = { PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin", HOME: home, GIT_CONFIG_NOSYSTEM: "1" };
  const log: GitRequestRecord[] = [];
  const children = new Set<ChildProcess>();
  let closed = false;

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => fail(res, `git server: ${String(err)}`));
  });

  /** Answers with 500 if nothing was sent yet, else cuts the response (the client sees a broken transfer). */
  function fail(res: http.ServerResponse, message: string): void {
    if (!res.headersSent) {
      res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
      res.end(`${message}\n`);
    } else {
      res.destroy();
    }
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://git.invalid");
    const authorization = req.headers.authorization;
    const entry: GitRequestRecord = { method: req.method ?? "GET", path: url.pathname, authorized: authorization === expected || acceptedByCallback(authorization), status: 0, authorization };
    // Logged when the head goes out, so a client that has exited already finds its requests here.
    const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => http.ServerResponse;
    res.writeHead = ((...args: unknown[]) => {
      entry.status = typeof args[0] === "number" ? args[0] : res.statusCode;
      log.push(entry);
      return writeHead(...args);
    }) as typeof res.writeHead;
    res.on("close", () => {
      if (!res.headersSent) log.push(entry);
    });
    req.on("error", () => res.destroy());
    res.on("error", () => undefined);

    if (gitServer.delayMs > 0) {
      // Unref'd: a delayed request never keeps the test process alive after close().
      await new Promise((resolve) => setTimeout(resolve, gitServer.delayMs).unref());
      if (closed || res.destroyed) return;
    }

    let pathInfo: string;
    try {
      pathInfo = decodeURIComponent(url.pathname);
    } catch {
      res.writeHead(400, { "content-type": "text/plain" }).end("bad path\n");
      return;
    }
    const repo = /^\/(.+?)\.git(?:\/|$)/.exec(pathInfo)?.[1];
    if (repo === undefined || !REPO_NAME.test(repo)) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    if (!entry.authorized && !publicRepos.has(repo)) {
      res.writeHead(401, { "www-authenticate": 'Basic realm="git"', "content-type": "text/plain" }).end("authentication required\n");
      return;
    }
    runBackend(req, res, pathInfo, url.search.slice(1), entry.authorized);
  }

  /** Runs one `git http-backend` for `req` and relays its CGI response. */
  function runBackend(req: http.IncomingMessage, res: http.ServerResponse, pathInfo: string, query: string, authorized: boolean): void {
    const env: Record<string, string> = {
      ...cleanEnv,
      GIT_PROJECT_ROOT: root,
      GIT_HTTP_EXPORT_ALL: "1",
      GATEWAY_INTERFACE: "CGI/1.1",
      SERVER_PROTOCOL: `HTTP/${req.httpVersion}`,
      REQUEST_METHOD: req.method ?? "GET",
      PATH_INFO: pathInfo,
      QUERY_STRING: query,
      CONTENT_TYPE: req.headers["content-type"] ?? "",
      REMOTE_ADDR: req.socket.remoteAddress ?? "127.0.0.1",
    };
    // Without CONTENT_LENGTH (a chunked request) http-backend reads its stdin to EOF.
    if (req.headers["content-length"] !== undefined) env.CONTENT_LENGTH = req.headers["content-length"];
    if (authorized) env.REMOTE_USER = options.username ?? "x-access-token";
    const protocol = req.headers["git-protocol"];
    // http-backend does not map the Git-Protocol header itself; without GIT_PROTOCOL every client gets v0.
    if (typeof protocol === "string") env.GIT_PROTOCOL = protocol;
    const encoding = req.headers["content-encoding"];
    // git gzips larger upload-pack requests; http-backend inflates them only when told.
    if (typeof encoding === "string") env.HTTP_CONTENT_ENCODING = encoding;

    // Its own process group: http-backend runs upload-pack as a child, which must die with it.
    const child = spawn("git", ["http-backend"], { env, stdio: ["pipe", "pipe", "pipe"], detached: true });
    children.add(child);
    const timer = setTimeout(() => killGroup(child), GIT_TIMEOUT_MS);
    let stderr = "";
    let head: Buffer | undefined = Buffer.alloc(0);

    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      if (stderr.length < STDERR_LIMIT) stderr += d;
    });
    // The CGI may exit (an error answer) before reading the whole body: EPIPE is expected then.
    child.stdin.on("error", () => undefined);
    req.pipe(child.stdin);
    // A client that goes away takes its CGI with it.
    res.on("close", () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    });

    child.stdout.on("data", (chunk: Buffer) => {
      if (head === undefined) {
        if (!res.write(chunk)) {
          child.stdout.pause();
          res.once("drain", () => child.stdout.resume());
        }
        return;
      }
      head = Buffer.concat([head, chunk]);
      const crlf = head.indexOf("\r\n\r\n");
      const lf = head.indexOf("\n\n");
      const end = crlf >= 0 && (lf < 0 || crlf < lf) ? { at: crlf, len: 4 } : lf >= 0 ? { at: lf, len: 2 } : undefined;
      if (!end) return;
      const headers = head.subarray(0, end.at).toString("latin1").split(/\r?\n/);
      const rest = head.subarray(end.at + end.len);
      head = undefined;
      let status = 200;
      const out: Record<string, string> = {};
      for (const line of headers) {
        const colon = line.indexOf(":");
        if (colon <= 0) continue;
        const name = line.slice(0, colon).trim();
        const value = line.slice(colon + 1).trim();
        if (name.toLowerCase() === "status") status = Number.parseInt(value, 10) || 500;
        else out[name] = value;
      }
      if (res.destroyed) return;
      res.writeHead(status, out);
      if (rest.length > 0) res.write(rest);
    });
    child.on("error", (err) => {
      clearTimeout(timer);
      children.delete(child);
      fail(res, `git http-backend did not start: ${err.message}`);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      if (res.destroyed) return;
      if (head !== undefined) fail(res, `git http-backend ended (code ${code}, signal ${signal}) without a complete CGI header\n${stderr}`);
      else if (code !== 0) res.destroy(); // A body cut short: the client must see a failed transfer, not a short one.
      else res.end();
    });
  }

  /** Runs `git args` in `cwd` with the clean environment; rejects with its stderr on failure. */
  function git(cwd: string, args: string[], extraEnv: Record<string, string> = {}): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile("git", args, { cwd, env: { ...cleanEnv, ...extraEnv }, timeout: GIT_TIMEOUT_MS, killSignal: "SIGKILL", maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
        if (err) reject(new Error(`git ${args.join(" ")} failed in ${cwd}: ${err.message}\n${stderr}`));
        else resolve(stdout);
      });
    });
  }

  /** Writes the files of one branch into `work` (whose contents, apart from .git, were removed). */
  async function writeFiles(work: string, files: Record<string, RepoFile>): Promise<void> {
    for (const [rel, file] of Object.entries(files)) {
      const parts = rel.split("/");
      if (rel === "" || path.isAbsolute(rel) || parts.some((p) => p === "" || p === "." || p === ".." || p === ".git")) {
        throw new Error(`bad file path in RepoSpec: ${JSON.stringify(rel)}`);
      }
      const target = path.join(work, ...parts);
      await mkdir(path.dirname(target), { recursive: true });
      const { content, mode } = typeof file === "string" ? { content: file, mode: "100644" as const } : file;
      if (mode === "120000") {
        await symlink(content, target);
      } else {
        await writeFile(target, content);
        await chmod(target, mode === "100755" ? 0o755 : 0o644);
      }
    }
  }

  /** Commits everything in `work` (author and dates fixed, so equal specs give equal shas) and returns the sha. */
  async function commitAll(work: string, message: string): Promise<string> {
    await git(work, ["add", "-A"]);
    const date = "2024-01-01T00:00:00Z";
    await git(work, ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "--no-verify", "-m", message], {
      GIT_AUTHOR_DATE: date,
      GIT_COMMITTER_DATE: date,
    });
    return (await git(work, ["rev-parse", "HEAD"])).trim();
  }

  async function createRepo(name: string, spec: RepoSpec): Promise<{ commits: Record<string, string> }> {
    if (closed) throw new Error("git server is closed");
    if (!REPO_NAME.test(name)) throw new Error(`bad repository name: ${JSON.stringify(name)}`);
    const defaultBranch = spec.defaultBranch ?? "main";
    const defaultFiles = spec.branches[defaultBranch];
    if (defaultFiles === undefined) throw new Error(`RepoSpec of ${name} has no files for its default branch ${defaultBranch}`);
    const bare = path.join(root, `${name}.git`);
    const work = await mkdtemp(path.join(scratch, "work-"));
    try {
      // core.symlinks/fileMode are pinned so the commit records symlinks and exec bits whatever git guesses.
      await git(work, ["-c", "core.symlinks=true", "init", "-q", "-b", defaultBranch, "."]);
      await git(work, ["config", "core.symlinks", "true"]);
      await git(work, ["config", "core.fileMode", "true"]);
      const commits: Record<string, string> = {};
      await writeFiles(work, defaultFiles);
      await spec.setup?.(work, defaultBranch);
      commits[defaultBranch] = await commitAll(work, defaultBranch);
      for (const [branch, files] of Object.entries(spec.branches)) {
        if (branch === defaultBranch) continue;
        await git(work, ["checkout", "-q", "-B", branch, commits[defaultBranch]]);
        for (const entry of await readdir(work)) {
          if (entry !== ".git") await rm(path.join(work, entry), { recursive: true, force: true });
        }
        await writeFiles(work, files);
        await spec.setup?.(work, branch);
        commits[branch] = await commitAll(work, branch);
      }
      await mkdir(path.dirname(bare), { recursive: true });
      await git(root, ["init", "-q", "--bare", "-b", defaultBranch, bare]);
      await git(work, ["push", "-q", bare, "refs/heads/*:refs/heads/*"]);
      await git(bare, ["symbolic-ref", "HEAD", `refs/heads/${defaultBranch}`]);
      return { commits };
    } finally {
      await rm(work, { recursive: true, force: true });
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
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const gitServer: GitServer = {
    url,
    repoUrl: (name) => `${url}/${name}.git`,
    repoPath: (name) => path.join(root, `${name}.git`),
    createRepo,
    get requests() {
      return log;
    },
    delayMs: 0,
    async close() {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      const exits = [...children].map((c) => new Promise<void>((resolve) => {
        c.stdout?.destroy();
        c.stderr?.destroy();
        c.stdin?.destroy();
        killGroup(c);
        if (c.exitCode !== null || c.signalCode !== null) return resolve();
        c.once("exit", () => resolve());
      }));
      await Promise.all([stopped, ...exits]);
      await rm(base, { recursive: true, force: true });
    },
  };
  return gitServer;
}
