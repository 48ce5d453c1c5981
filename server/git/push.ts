/**
 * GitPush, done by the server so the credential never enters the workspace.
 *
 * 1. The server keeps a bare mirror per repository URL in its data directory (its own repository:
 *    no configuration or hooks of the agent's) and brings it up to date with the repository's
 *    branch and base branch, fetching with a short-lived token sent as an HTTP header.
 * 2. In the workspace, git (as the sandbox's user) writes a bundle of the branch, leaving out what
 *    the mirror already has, to stdout; the server streams it into a file of its own, bounded in
 *    size. The agent's `.git` is read only by the agent's git, inside the sandbox.
 * 3. The server's git fetches the bundle into the mirror, verifying every object, then checks
 *    that the push is a fast-forward (anything else would rewrite history: refused like a force
 *    push), that no new commit adds a sensitive file, and pushes the commit to the branch of the
 *    same name in the configured repository, with a fresh token.
 *
 * So remotes, `pushurl`, `insteadOf`, credential helpers, hooks or `core.sshCommand` in the
 * workspace's configuration decide nothing: the URL is the workspace's configured repository and
 * the only git that holds the token runs on the server, with the server's configuration. Pushes
 * to one repository are serialised on its mirror. A mirror no push used for the operator's idle
 * time is deleted (`prune`), under the same lock; the next push to its repository makes it again.
 */
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { once } from "node:events";
import picomatch from "picomatch";
import { DomainError } from "../../core/errors.ts";
import { guardFor } from "../../providers/executor/sensitive-files.ts";
import type { FileRules } from "../../providers/executor/sensitive-files.ts";
import { type PushResult, remainingMs, type ToolContext } from "../tools/context.ts";
import type { CredentialProvider } from "./credentials.ts";
import { type GitRun, hostGit, hostGitEnv, lastLine, redactor } from "./host-git.ts";
import { GIT_PROGRAMS, gitArgv, gitMessage, gitToolEnv, runGit } from "./sandbox-git.ts";

/** Where a mirror keeps the repository's default branch as last fetched. */
const REMOTE_HEAD = "refs/agent-workspace/remote-head";

/** A file in each mirror whose modification time is when a push last used it. */
const LAST_USED = "agent-workspace-last-push";

/** How the server pushes. */
export interface PushSettings {
  /** Where the mirrors live (a directory the server owns). */
  mirrorDir: string;
  /** Largest bundle a push may carry, and largest pack a mirror fetch may write, in bytes. */
  maxBytes: number;
  /** How long one push may take in all, in milliseconds. */
  timeoutMs: number;
  credentials: CredentialProvider;
}

/** What decides where a workspace pushes and what it may not push to. */
export interface PushTarget {
  /** The workspace's configured repository; "" when it has none. */
  repositoryUrl: string;
  /** Branch patterns pushes are refused to ("main", "release/*"). */
  protectedBranches: string[];
  /** Also refuse the repository's default branch (as the repository names it at push time). */
  protectDefaultBranch: boolean;
  /** Sensitive-file patterns the agent type adds to the server's. */
  fileRules: FileRules | undefined;
}

/** The first protected pattern `branch` matches (picomatch: `*` within one segment, `**` across), or undefined. */
export function protectedRule(branch: string, patterns: string[]): string | undefined {
  return patterns.find((p) => picomatch.isMatch(branch, p, { dot: true }));
}

/** A chain of promises per key: one push per mirror at a time. */
class KeyedLock {
  readonly #tails = new Map<string, Promise<unknown>>();
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.#tails.get(key) ?? Promise.resolve()).then(fn, fn);
    const tail = run.catch(() => undefined);
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return run;
  }
}

/** Pushes of workspaces' branches to their repositories, through the server's mirrors. */
export class Pusher {
  readonly #s: PushSettings;
  readonly #locks = new KeyedLock();

  constructor(settings: PushSettings) {
    this.#s = settings;
  }

  /** Pushes `branch` of the workspace behind `ctx` to `target.repositoryUrl`. */
  async push(ctx: ToolContext, target: PushTarget, branch: string): Promise<PushResult> {
    if (target.repositoryUrl === "") {
      throw new DomainError("NO_REPOSITORY", "This workspace was not made from a repository (no repo_source), so there is nowhere to push", {});
    }
    const rule = protectedRule(branch, target.protectedBranches);
    if (rule !== undefined) {
      throw new DomainError("PROTECTED_BRANCH", `'${branch}' is a protected branch (rule ${rule}); push to a branch of your own and open a pull request`, {
        metadata: { branch, rule },
      });
    }
    // The branch's commit in the workspace (the agent's git, in the sandbox).
    const tip = await runGit(ctx, ["rev-parse", "--verify", "--quiet", `refs/heads/${branch}^{commit}`]);
    const commit = tip.stdout.toString("utf8").trim();
    if (tip.exitCode !== 0 || !/^[0-9a-f]{40}$/.test(commit)) {
      throw new DomainError("REVISION_NOT_FOUND", `No branch '${branch}' with commits in the workspace's repository`, { metadata: { revision: branch, branch } });
    }
    const mirror = path.join(this.#s.mirrorDir, `${createHash("sha256").update(target.repositoryUrl).digest("hex").slice(0, 24)}.git`);
    return this.#locks.run(mirror, () => this.#push(ctx, target, branch, commit, mirror));
  }

  /**
   * Deletes every mirror no push has used for `maxIdleMs` (nothing when 0), each under its push
   * lock so no push loses its mirror halfway; returns the names of those deleted. A mirror made
   * before pushes were stamped counts from its HEAD's last change.
   */
  async prune(maxIdleMs: number, now = Date.now()): Promise<string[]> {
    if (maxIdleMs <= 0) return [];
    const gone: string[] = [];
    for (const name of await readdir(this.#s.mirrorDir)) {
      if (!name.endsWith(".git")) continue;
      const mirror = path.join(this.#s.mirrorDir, name);
      await this.#locks.run(mirror, async () => {
        const used = (await stat(path.join(mirror, LAST_USED)).catch(() => stat(path.join(mirror, "HEAD"))).catch(() => undefined))?.mtimeMs;
        if (used !== undefined && now - used < maxIdleMs) return;
        await rm(mirror, { recursive: true, force: true });
        gone.push(name);
      });
    }
    return gone;
  }

  async #push(ctx: ToolContext, target: PushTarget, branch: string, commit: string, mirror: string): Promise<PushResult> {
    const url = target.repositoryUrl;
    // The push's own limit, the client's deadline, and the client going away all stop it.
    const left = remainingMs(ctx);
    const stop = AbortSignal.any([ctx.signal, AbortSignal.timeout(left === undefined ? this.#s.timeoutMs : Math.min(left, this.#s.timeoutMs))]);
    const scratch = await mkdtemp(path.join(this.#s.mirrorDir, "push-"));
    const incoming = `refs/agent-workspace/incoming/${randomBytes(8).toString("hex")}`;
    let secrets: string[] = [scratch, mirror];
    const redact = (text: string) => redactor([...secrets, ...this.#s.credentials.liveSecrets()])(text);
    try {
      // Always named by --git-dir: git never looks for a repository around the mirror (the data
      // directory may well sit inside someone's work tree).
      const local = (args: string[], bundle = false) => hostGit(["--git-dir", mirror, ...args], { env: hostGitEnv(scratch, undefined, { fromBundleFile: bundle }), maxBytes: this.#s.maxBytes, signal: stop, redact });
      if (!(await exists(path.join(mirror, "HEAD")))) {
        must(await hostGit(["init", "--quiet", "--bare", "--", mirror], { env: hostGitEnv(scratch, undefined), maxBytes: this.#s.maxBytes, signal: stop, redact }), "Preparing the server's mirror", redact);
      }
      // When a push last used the mirror, for prune. Not worth failing a push over: without it the
      // mirror only counts from an older stamp (or its HEAD) and may be fetched afresh sooner.
      await writeFile(path.join(mirror, LAST_USED), "").catch(() => undefined);

      // A fresh credential for each conversation with the repository (fetch now, push at the end).
      const remote = async (args: string[]): Promise<GitRun> => {
        const cred = await this.#s.credentials.credentialFor(url, stop);
        let header: { origin: string; value: string } | undefined;
        if (cred) {
          const basic = Buffer.from(`${cred.username}:${cred.token}`).toString("base64");
          secrets = [...secrets, cred.token, basic];
          header = { origin: cred.origin, value: `Authorization: Basic ${basic}` };
        }
        return hostGit(["--git-dir", mirror, ...args], { env: hostGitEnv(scratch, header), maxBytes: this.#s.maxBytes, signal: stop, redact });
      };

      // 1. What the repository has now: its default branch, and the branch's tip (absent for a new branch).
      const listed = await remote(["ls-remote", "--symref", "--", url, "HEAD", `refs/heads/${branch}`]);
      if (listed.code !== 0) throw remoteFailed(`Reaching ${url} failed: ${lastLine(listed.stderr) || `git exited with ${listed.code}`}`, stop, ctx.signal);
      const defaultBranch = /^ref: refs\/heads\/(\S+)\tHEAD$/m.exec(listed.stdout)?.[1];
      if (target.protectDefaultBranch && defaultBranch === branch) {
        throw new DomainError("PROTECTED_BRANCH", `'${branch}' is the repository's default branch, which is protected; push to a branch of your own and open a pull request`, {
          metadata: { branch, rule: "default branch" },
        });
      }
      const remoteTip = new RegExp(`^([0-9a-f]{40})\\trefs/heads/${branch.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`, "m").exec(listed.stdout)?.[1];
      if (remoteTip === commit) return { branch, commit, repositoryUrl: url, created: false, commitsPushed: 0 };
      if (remoteTip !== undefined) {
        const fetched = await remote(["fetch", "--quiet", "--no-tags", "--", url, `+refs/heads/${branch}:refs/remotes/origin/${branch}`]);
        if (fetched.code !== 0) throw remoteFailed(`Fetching ${branch} from ${url} failed: ${lastLine(fetched.stderr)}`, stop, ctx.signal);
      } else {
        // A new branch grows from something the repository has: its default branch, at least.
        // An empty repository has none, and everything is new.
        await remote(["fetch", "--quiet", "--no-tags", "--", url, `+HEAD:${REMOTE_HEAD}`]);
      }

      // 2. The bundle, from the workspace: the branch, without what the mirror already has. Only
      // the mirror's word counts for what the repository has (the workspace's own
      // refs/remotes are the agent's to forge).
      const known = parseRefs((await local(["for-each-ref", "--format=%(objectname)", "refs/remotes/origin/", REMOTE_HEAD])).stdout);
      const have: string[] = [];
      for (const sha of known) {
        if ((await runGit(ctx, ["cat-file", "-e", `${sha}^{commit}`])).exitCode === 0) have.push(sha);
      }
      const bundle = path.join(scratch, "push.bundle");
      await this.#bundleFromWorkspace(ctx, bundle, [`refs/heads/${branch}`, ...have.map((s) => `^${s}`)], stop);

      // 3. Into the mirror, every object checked; then the rules.
      must(await local(["fetch", "--quiet", "--no-tags", "--", bundle, `+refs/heads/${branch}:${incoming}`], true), "Reading the workspace's commits", redact);
      const got = (await local(["rev-parse", "--verify", `${incoming}^{commit}`])).stdout.trim();
      if (got !== commit) throw new DomainError("GIT_FAILED", `The branch moved while it was being pushed (${commit.slice(0, 12)} became ${got.slice(0, 12)}); push again`, { metadata: { branch } });
      if (remoteTip !== undefined && (await local(["merge-base", "--is-ancestor", remoteTip, commit])).code !== 0) {
        throw new DomainError("FORCE_PUSH_DENIED", `'${branch}' in the repository has commits the workspace's branch lacks, so this push would rewrite its history; force pushes are refused`, {
          metadata: { branch, remote_commit: remoteTip, commit },
        });
      }
      const exclude = known.map((sha) => `^${sha}`);
      // -m: a merge's changes against each parent too, so a change made in the merge commit alone
      // (an "evil merge") is listed like any other.
      const added = await local(["log", "-m", "--format=", "--name-only", "--no-renames", "-z", commit, ...exclude]);
      must(added, "Listing the pushed files", redact);
      const guard = guardFor(target.fileRules);
      for (const file of added.stdout.split("\0").filter((f) => f.trim() !== "")) {
        const hit = guard.check(file.trim(), "read");
        if (hit) {
          throw new DomainError("SENSITIVE_FILE", `A commit on '${branch}' adds or changes '${file.trim()}', a sensitive file, and is not pushed (rule ${hit.pattern})`, {
            metadata: { path: file.trim(), rule: hit.pattern, list: hit.list },
          });
        }
      }
      const count = Number((await local(["rev-list", "--count", commit, ...exclude])).stdout.trim()) || 0;

      // 4. The push: the commit to the same branch, never forced.
      const pushed = await remote(["push", "--quiet", "--porcelain", "--", url, `${commit}:refs/heads/${branch}`]);
      if (pushed.code !== 0) {
        const why = /non-fast-forward|fetch first|\[rejected\]/.test(pushed.stdout + pushed.stderr)
          ? `the repository's '${branch}' moved while pushing; push again`
          : lastLine(`${pushed.stderr}\n${pushed.stdout}`) || `git exited with ${pushed.code}`;
        throw remoteFailed(`Pushing to ${url} failed: ${why}`, stop, ctx.signal);
      }
      await local(["update-ref", `refs/remotes/origin/${branch}`, commit]);
      // The workspace learns where its branch now is, as after a push of its own.
      await runGit(ctx, ["update-ref", `refs/remotes/origin/${branch}`, commit]);
      return { branch, commit, repositoryUrl: url, created: remoteTip === undefined, commitsPushed: count };
    } finally {
      await hostGit(["--git-dir", mirror, "update-ref", "-d", incoming], { env: hostGitEnv(scratch, undefined), maxBytes: 1 << 20, signal: AbortSignal.timeout(10_000), redact }).catch(() => undefined);
      await rm(scratch, { recursive: true, force: true });
    }
  }

  /** Streams `git bundle create - <revs>` from the workspace into `file`, at most maxBytes. */
  async #bundleFromWorkspace(ctx: ToolContext, file: string, revs: string[], stop: AbortSignal): Promise<void> {
    const out = createWriteStream(file, { mode: 0o600 });
    let bytes = 0;
    let stderr = "";
    let exitCode = -1;
    const kill = new AbortController();
    const signal = AbortSignal.any([stop, kill.signal]);
    try {
      const argv = gitArgv(["bundle", "create", "--quiet", "-", ...revs]);
      for await (const ev of ctx.workspace.exec({ argv, cwd: "", env: gitToolEnv(ctx.workspace), timeoutMs: this.#s.timeoutMs, signal, directStdout: true, programs: GIT_PROGRAMS, sweep: false })) {
        if (ev.type === "stdout") {
          bytes += ev.data.length;
          if (bytes > this.#s.maxBytes) {
            kill.abort();
            break;
          }
          if (!out.write(ev.data)) await once(out, "drain");
        } else if (ev.type === "stderr") {
          if (stderr.length < 8192) stderr += Buffer.from(ev.data).toString("utf8");
        } else if (ev.type === "exited") {
          exitCode = ev.exit.exitCode;
        }
      }
    } finally {
      out.end();
      await once(out, "close").catch(() => undefined);
    }
    if (bytes > this.#s.maxBytes) {
      throw new DomainError("RESOURCE_EXHAUSTED", `The commits to push exceed the push size limit (${this.#s.maxBytes} bytes)`, { metadata: { limit_bytes: String(this.#s.maxBytes) } });
    }
    if (stop.aborted) throw remoteFailed("The push was cancelled or took too long", stop, ctx.signal);
    if (exitCode !== 0) throw new DomainError("GIT_FAILED", `Bundling the workspace's commits failed: ${gitMessage(stderr) || `git exited with ${exitCode}`}`, { metadata: { branch: revs[0] ?? "" } });
    if ((await stat(file)).size === 0) throw new DomainError("GIT_FAILED", "The workspace's git wrote an empty bundle", {});
  }
}

/** Whether `p` exists. */
async function exists(p: string): Promise<boolean> {
  return stat(p).then(() => true, () => false);
}

/** Commit ids, one per line. */
function parseRefs(text: string): string[] {
  return text.split("\n").map((l) => l.trim()).filter((l) => /^[0-9a-f]{40}$/.test(l));
}

/** GIT_FAILED with git's last words unless `r` succeeded. */
function must(r: GitRun, what: string, redact: (s: string) => string): GitRun {
  if (r.code !== 0) throw new DomainError("GIT_FAILED", `${what} failed: ${redact(lastLine(r.stderr)) || `git exited with ${r.code ?? r.signal}`}`, {});
  return r;
}

/** GIT_REMOTE_FAILED (already redacted text); CANCELLED when the client went away, a timeout when `stop` fired. */
function remoteFailed(message: string, stop: AbortSignal, client?: AbortSignal): DomainError {
  if (client?.aborted) return new DomainError("CANCELLED", "The push was cancelled by the client");
  if (stop.aborted) return new DomainError("COMMAND_TIMEOUT", "The push ran past its time limit (AGENT_WORKSPACE_PUSH_TIMEOUT_MS or the call's deadline) and was stopped", {});
  return new DomainError("GIT_REMOTE_FAILED", message, {});
}
