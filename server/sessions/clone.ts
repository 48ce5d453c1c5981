/**
 * Puts a repository into a workspace whose sandbox has no network. The server fetches on its own
 * side, into a bare repository in a private temporary directory, then hands the history to the
 * sandbox as a git bundle written through the workspace's executor (the same jail as every file
 * tool), where git, running as the sandbox user, checks it out into /workspace. So:
 *
 * - nothing of the repository is ever checked out on the host: a hostile tree (symlinks, huge
 *   files, `.gitattributes` filters) meets only the sandbox, as the sandbox user;
 * - the server's fetch runs no hooks, no submodules, no `file://` or `ext::` transport, no
 *   configuration but its own (no system or user gitconfig), verifies every object
 *   (`transfer.fsckObjects`), and is bounded in time and in size (RLIMIT_FSIZE on git and its
 *   index-pack child caps the pack it writes);
 * - a credential (a token per host from the server's configuration) travels only as an HTTP
 *   header in git's environment, scoped to that host, with redirects refused: it never reaches
 *   the command line, a config file, the bundle, the sandbox's `.git/config` (whose origin is the
 *   bare URL), a log line or an error message (everything git prints is redacted).
 */
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import path from "node:path";
import { DomainError } from "../../core/errors.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";
import { type FileRules, guardFor } from "../../providers/executor/sensitive-files.ts";
import { deniedPaths, sensitivePathspecs } from "../git/seal-placed.ts";
import type { CredentialProvider, IssuedCredential } from "../git/credentials.ts";
import { type GitRun, hostGit as git, hostGitEnv as gitEnv, lastLine, redactor } from "../git/host-git.ts";

/** A token the server presents to one git host. */
export interface GitCredential {
  /** The HTTP basic user name; "x-access-token" suits GitHub and most forges. */
  username: string;
  token: string;
}

/** What to clone. */
export interface CloneTarget {
  url: string;
  /** The branch; "" for the repository's default branch. */
  branch: string;
  /** A second branch fetched beside it (a pull request's base); "" for none. */
  baseBranch: string;
}

/** Limits and credentials of server-side clones. */
export interface CloneSettings {
  /** Issues the credential for a repository's host (a static token, or a GitHub App's). */
  credentials: Pick<CredentialProvider, "credentialFor">;
  /** Where the temporary bare repositories go (a directory the server owns). */
  tmpDir: string;
  /** Largest pack (and bundle) a clone may produce, in bytes. */
  maxBytes: number;
  /** How long the whole clone may take, in milliseconds. */
  timeoutMs: number;
}

/** What was checked out. */
export interface Checkout {
  repositoryUrl: string;
  branch: string;
  commit: string;
  /** Something that did not stop the clone (a base branch the repository lacks). */
  warnings: string[];
  /**
   * Paths the never-read rules name: in the checked-out tree (sealed in the workspace), and
   * anywhere in the fetched history (readable by any command that can run git). At most
   * SENSITIVE_LISTED of each.
   */
  sensitive: { tracked: string[]; history: string[] };
}

/** Most sensitive paths a checkout lists of each kind. */
export const SENSITIVE_LISTED = 100;

/** The empty tree's id: a diff from it lists a commit's whole tree. */
const EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/** Receives git's progress and the checkout's output, already redacted. */
export type CloneOutput = (data: Uint8Array, stderr: boolean) => void;

const BUNDLE = ".git/agent-workspace-clone.bundle";

const cloneFailed = (message: string, cause?: unknown) =>
  new DomainError("WORKSPACE_NOT_READY", message, { metadata: { stage: "clone" }, cause });

/**
 * Clones `target` into the workspace behind `handle` (whose /workspace must be empty) and checks
 * out its branch. Throws WORKSPACE_NOT_READY with git's own explanation, redacted, on failure.
 */
export async function cloneInto(handle: WorkspaceHandle, target: CloneTarget, settings: CloneSettings, output: CloneOutput, signal: AbortSignal, fileRules?: FileRules): Promise<Checkout> {
  let scoped: IssuedCredential | undefined;
  try {
    scoped = await settings.credentials.credentialFor(target.url, signal);
  } catch (err) {
    throw cloneFailed(`No credential for ${target.url}: ${err instanceof Error ? err.message : String(err)}`, err);
  }
  const basic = scoped ? Buffer.from(`${scoped.username}:${scoped.token}`).toString("base64") : "";
  const header = scoped ? { origin: scoped.origin, value: `Authorization: Basic ${basic}` } : undefined;
  const dir = await mkdtemp(path.join(settings.tmpDir, "clone-"));
  // The server's own paths are nobody's business either (git names its target directory).
  const redact = redactor(scoped ? [scoped.token, basic, dir] : [dir]);
  const timeout = AbortSignal.timeout(settings.timeoutMs);
  const stop = AbortSignal.any([signal, timeout]);
  const env = gitEnv(dir, header);
  const run = (args: string[], progress?: CloneOutput) => git(args, { env, maxBytes: settings.maxBytes, signal: stop, redact, progress });
  const why = (r: GitRun, what: string) => {
    if (timeout.aborted) return cloneFailed(`Cloning ${target.url} took longer than ${settings.timeoutMs} ms and was stopped`);
    if (signal.aborted) return cloneFailed("The clone was cancelled");
    // RLIMIT_FSIZE kills index-pack silently (SIGXFSZ); git then reports only that its output was invalid.
    if (r.signal === "SIGXFSZ" || /signal 25|File too large|invalid index-pack output/i.test(r.stderr)) {
      return cloneFailed(`${target.url} is larger than the clone size limit (${settings.maxBytes} bytes)`);
    }
    return cloneFailed(`${what} failed: ${lastLine(r.stderr) || `git exited with ${r.code ?? r.signal}`}`);
  };
  const warnings: string[] = [];
  try {
    const bare = path.join(dir, "repo.git");
    const cloneArgs = ["clone", "--bare", "--no-tags", "--single-branch", "--progress"];
    if (target.branch !== "") cloneArgs.push("--branch", target.branch);
    const cloned = await run([...cloneArgs, "--", target.url, bare], output);
    if (cloned.code !== 0) throw why(cloned, `Cloning ${target.url}`);
    const branchRun = await run(["-C", bare, "symbolic-ref", "--short", "HEAD"]);
    const branch = branchRun.stdout.trim();
    if (branchRun.code !== 0 || branch === "") throw why(branchRun, "Finding the checked-out branch");
    // The repository names its default branch; it reaches git in the sandbox as an argument, so
    // one that could read as an option (or is otherwise odd) is refused.
    if (!/^[A-Za-z0-9_][A-Za-z0-9._\/-]{0,254}$/.test(branch) || branch.includes("..")) {
      throw cloneFailed(`${target.url} has a default branch name this server does not check out: '${branch.slice(0, 100)}'`);
    }
    if (target.baseBranch !== "" && target.baseBranch !== branch) {
      const base = await run(["-C", bare, "fetch", "--no-tags", "--progress", "origin", `+refs/heads/${target.baseBranch}:refs/heads/${target.baseBranch}`], output);
      if (base.code !== 0) {
        if (stop.aborted) throw why(base, "Fetching the base branch");
        warnings.push(`The base branch '${target.baseBranch}' could not be fetched: ${lastLine(base.stderr)}`);
      }
    }
    const commitRun = await run(["-C", bare, "rev-parse", "HEAD"]);
    const commit = commitRun.stdout.trim();
    if (commitRun.code !== 0) throw why(commitRun, "Reading the commit");
    // Secrets the repository holds: the checkout's are sealed in the workspace; its history's
    // cannot be hidden from a command that can run git, so they are reported.
    const guard = guardFor(fileRules);
    const specs = sensitivePathspecs(fileRules);
    const inTree = await run(["-C", bare, "diff", "--name-only", "-z", "--no-renames", EMPTY_TREE, "HEAD", "--", ...specs]);
    const inHistory = await run(["-C", bare, "log", "--all", "--format=", "--name-only", "-z", "--no-renames", "--diff-filter=A", "--", ...specs]);
    const listed = (r: GitRun) => (r.code === 0 ? deniedPaths(r.stdout, guard, SENSITIVE_LISTED) : []);
    const sensitive = { tracked: listed(inTree), history: listed(inHistory) };
    const bundle = path.join(dir, "repo.bundle");
    const bundled = await run(["-C", bare, "bundle", "create", "--quiet", bundle, "--branches"]);
    if (bundled.code !== 0) throw why(bundled, "Bundling the repository");
    if ((await stat(bundle)).size > settings.maxBytes) throw cloneFailed(`${target.url} is larger than the clone size limit (${settings.maxBytes} bytes)`);

    // In the sandbox, as its user: an empty repository, the bundle through the jail, a fetch from
    // it into origin's branches, the checkout, and the bundle gone again.
    await sandboxGit(handle, ["init", "-q", "-b", branch, "."], output, stop, settings.timeoutMs);
    await handle.fs.writeFile(BUNDLE, await readFile(bundle));
    const script = [
      "set -e",
      'git remote add origin "$1"',
      `git fetch -q --no-tags ${BUNDLE} '+refs/heads/*:refs/remotes/origin/*'`,
      'git checkout -q -B "$2" "refs/remotes/origin/$2"',
      'git branch -q --set-upstream-to="origin/$2" "$2"',
      `rm -f ${BUNDLE}`,
    ].join("\n");
    await sandboxExec(handle, ["bash", "-c", script, "bash", target.url, branch], output, stop, settings.timeoutMs, "Checking out the repository in the workspace");
    return { repositoryUrl: target.url, branch, commit, warnings, sensitive };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function sandboxGit(handle: WorkspaceHandle, args: string[], output: CloneOutput, signal: AbortSignal, timeoutMs: number): Promise<void> {
  return sandboxExec(handle, ["git", ...args], output, signal, timeoutMs, "Preparing the repository in the workspace");
}

/** Runs `argv` in the workspace; throws WORKSPACE_NOT_READY with its stderr when it fails. */
async function sandboxExec(handle: WorkspaceHandle, argv: string[], output: CloneOutput, signal: AbortSignal, timeoutMs: number, what: string): Promise<void> {
  let stderr = "";
  let exit: { exitCode: number; spawnError?: string } | undefined;
  // git and rm are the server's own steps here, whatever the agent type's allowlist says.
  // No sweep: what the clone places is sealed once git's index is settled (git/seal-placed.ts).
  for await (const ev of handle.exec({ argv, cwd: "", timeoutMs, signal, programs: ["git", "rm"], sweep: false })) {
    if (ev.type === "stderr" || ev.type === "stdout") {
      output(ev.data, ev.type === "stderr");
      if (ev.type === "stderr" && stderr.length < 16 * 1024) stderr += Buffer.from(ev.data).toString("utf8");
    } else if (ev.type === "exited") {
      exit = ev.exit;
    }
  }
  if (signal.aborted) throw cloneFailed("The clone was cancelled or took too long");
  if (!exit || exit.exitCode !== 0) {
    const detail = exit?.spawnError ? `${argv[0]} could not be started (${exit.spawnError}); the image needs git` : lastLine(stderr) || `exit ${exit?.exitCode}`;
    throw cloneFailed(`${what} failed: ${detail}`);
  }
}
