/**
 * The git tools: status, diff, commit and checkout run git inside the workspace (server/git/
 * sandbox-git.ts); push hands over to the server's push path (server/git/push.ts), which holds
 * the credential. All five are the one tool "git" for permissions and audit.
 *
 * Sensitive files (the server's lists plus the agent type's) keep their promise here too: a diff
 * counts their lines and never shows their text, and a commit refuses to include one, since a
 * commit is the way a file would leave the workspace.
 */
import { DomainError } from "../../core/errors.ts";
import { guardFor } from "../../providers/executor/sensitive-files.ts";
import { type Change, type NumstatEntry, branchNameProblem, parseNumstat, parseStatus } from "../git/porcelain.ts";
import { type GitOutput, gitMessage, literal, mustSucceed, nulFields, runGit } from "../git/sandbox-git.ts";
import { sealPlaced, sensitivePathspecs } from "../git/seal-placed.ts";
import type { GitContext, PushResult, ToolContext } from "./context.ts";
import { jailPath } from "./paths.ts";

/** The git context of a tool call; every ToolService call has one. */
function gitOf(ctx: ToolContext): GitContext {
  if (ctx.git === undefined) throw new Error("git tools called without a git context");
  return ctx.git;
}

/**
 * The refusal of a workspace that runs no processes (memory), as its own exec words it
 * (PROCESSES_UNSUPPORTED, naming the provider). Every git tool asks first, before it checks its
 * request or looks for a repository: there no git RPC can ever work, and any other answer (a
 * missing repository, a bad branch name) would send the caller after the wrong fix.
 */
async function needProcesses(ctx: ToolContext): Promise<void> {
  if (ctx.workspace.processes !== false) return;
  for await (const _ of ctx.workspace.exec({ argv: ["git", "--version"], cwd: "", timeoutMs: 1000, signal: ctx.signal })) void _;
  throw new Error("a workspace without processes ran one");
}

/** Most files a status lists. */
const MAX_STATUS_FILES = 10_000;
/** Bytes of unified diff text returned per comparison. */
const MAX_DIFF_BYTES = 256 * 1024;
/** Longest commit message. */
const MAX_MESSAGE_BYTES = 64 * 1024;

export interface GitFileStatus {
  path: string;
  staged: Change;
  unstaged: Change;
  untracked: boolean;
  renamedFrom: string;
}

export interface GitStatusResult {
  branch: string;
  commit: string;
  upstream: string;
  ahead: number;
  behind: number;
  files: GitFileStatus[];
  detached: boolean;
  truncated: boolean;
}

/** Branch, upstream, ahead/behind and every changed, staged or untracked file. */
export async function gitStatus(ctx: ToolContext, _input: Record<string, never>): Promise<GitStatusResult> {
  await needProcesses(ctx);
  const out = mustSucceed(await runGit(ctx, ["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--renames", "--ignore-submodules=dirty"]), "git status");
  const s = parseStatus(nulFields(out.stdout));
  const files = s.entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return {
    branch: s.branch,
    commit: s.commit,
    upstream: s.upstream,
    ahead: s.ahead,
    behind: s.behind,
    detached: s.detached,
    files: files.slice(0, MAX_STATUS_FILES),
    truncated: files.length > MAX_STATUS_FILES,
  };
}

export interface GitDiffInput {
  paths: string[];
  ref: string;
  contextLines: number | undefined;
}

export interface GitFileDiff extends NumstatEntry {
  sensitive: boolean;
}

export interface GitDiffSet {
  diff: string;
  files: GitFileDiff[];
  truncated: boolean;
  totalBytes: number;
  linesAdded: number;
  linesRemoved: number;
}

export interface GitDiffResult {
  staged?: GitDiffSet;
  unstaged?: GitDiffSet;
  againstRef?: GitDiffSet;
}

/** Pathspecs for caller paths, each through the jail. */
function pathspecs(paths: string[], field: string): string[] {
  return paths.map((p) => literal(jailPath(p, field, true)));
}

/** Resolves a caller's revision to a commit id, or REVISION_NOT_FOUND. */
async function resolveRevision(ctx: ToolContext, rev: string, field: string): Promise<string> {
  if (rev.startsWith("-") || rev.includes("\0") || rev.length > 255) {
    throw new DomainError("INVALID_ARGUMENT", `${field} '${rev.slice(0, 100)}' is not a revision`, { metadata: { field } });
  }
  const out = await runGit(ctx, ["rev-parse", "--verify", "--quiet", "--end-of-options", `${rev}^{commit}`]);
  const sha = out.stdout.toString("utf8").trim();
  if (out.exitCode !== 0 || !/^[0-9a-f]{40,64}$/.test(sha)) {
    throw new DomainError("REVISION_NOT_FOUND", `No commit, branch or tag '${rev}' in the workspace's repository`, { metadata: { revision: rev } });
  }
  return sha;
}

/**
 * `out` of a git diff unless it failed. Outside a repository git diff does not say so: it falls
 * back to comparing two paths and complains about the options (`unknown option 'cached'`), so a
 * failure first asks git whether there is a repository (NOT_A_GIT_REPOSITORY when not).
 */
async function diffSucceeded(ctx: ToolContext, out: GitOutput): Promise<GitOutput> {
  if (out.exitCode !== 0) await runGit(ctx, ["rev-parse", "--git-dir"]);
  return mustSucceed(out, "git diff");
}

/** One comparison (`against` is the diff arguments: ["--cached"], [], or [commit]). */
async function diffSet(ctx: ToolContext, against: string[], specs: string[], context: string[]): Promise<GitDiffSet> {
  const rules = gitOf(ctx).fileRules;
  const guard = guardFor(rules);
  const common = ["--no-color", "--no-ext-diff", "--no-textconv", "-M", ...context];
  const first = await runGit(ctx, ["diff", "--numstat", "-z", ...common, ...against, "--", ...specs]);
  let entries: NumstatEntry[];
  if (first.exitCode !== 0 && /Permission denied|cannot hash/.test(first.stderr)) {
    // A sealed file in the working tree (executor/seal.ts) is unreadable, to git as to anyone:
    // the rest is counted as usual, and a sealed file's change listed by name, its lines uncounted.
    const base = specs.length > 0 ? specs : [":/"];
    const sealed = sensitivePathspecs(rules).map((spec) => spec.replace(":(glob,icase)", ":(exclude,glob,icase)"));
    const rest = await diffSucceeded(ctx, await runGit(ctx, ["diff", "--numstat", "-z", ...common, ...against, "--", ...base, ...sealed]));
    const named = await diffSucceeded(ctx, await runGit(ctx, ["diff", "--name-only", "--no-renames", "-z", ...against, "--", ...base]));
    entries = parseNumstat(nulFields(rest.stdout));
    const counted = new Set(entries.map((e) => e.path));
    for (const path of nulFields(named.stdout)) {
      if (!counted.has(path) && guard.check(path, "read") !== undefined) entries.push({ path, oldPath: "", added: 0, removed: 0, binary: false });
    }
  } else {
    entries = parseNumstat(nulFields((await diffSucceeded(ctx, first)).stdout));
  }
  const files: GitFileDiff[] = entries.map((f) => ({
    ...f,
    sensitive: guard.check(f.path, "read") !== undefined || (f.oldPath !== "" && guard.check(f.oldPath, "read") !== undefined),
  }));
  // Sensitive files are counted above and left out of the text.
  const hidden = files.filter((f) => f.sensitive).flatMap((f) => [f.path, f.oldPath]).filter((p) => p !== "");
  const excludes = hidden.map((p) => `:(exclude,literal)${p}`);
  let diff = "";
  let truncated = false;
  let totalBytes = 0;
  if (files.some((f) => !f.sensitive)) {
    const base = specs.length > 0 ? specs : excludes.length > 0 ? [":/"] : [];
    const text = await diffSucceeded(ctx, await runGit(ctx, ["diff", "--patch", ...common, ...against, "--", ...base, ...excludes], { maxStdout: MAX_DIFF_BYTES + 1 }));
    totalBytes = text.stdoutTotal;
    let bytes = text.stdout;
    if (text.stdoutTotal > MAX_DIFF_BYTES) {
      truncated = true;
      bytes = bytes.subarray(0, MAX_DIFF_BYTES);
      const nl = bytes.lastIndexOf(0x0a);
      if (nl >= 0) bytes = bytes.subarray(0, nl + 1);
    }
    diff = bytes.toString("utf8");
  }
  return {
    diff,
    files,
    truncated,
    totalBytes,
    linesAdded: files.reduce((n, f) => n + f.added, 0),
    linesRemoved: files.reduce((n, f) => n + f.removed, 0),
  };
}

/** Staged and unstaged diffs, or the working tree against a ref. */
export async function gitDiff(ctx: ToolContext, input: GitDiffInput): Promise<GitDiffResult> {
  await needProcesses(ctx);
  const specs = pathspecs(input.paths, "paths");
  const lines = input.contextLines ?? 0;
  if (!Number.isInteger(lines) || lines < 0 || lines > 100) {
    throw new DomainError("INVALID_ARGUMENT", "context_lines must be between 0 and 100", { metadata: { field: "context_lines" } });
  }
  const context = lines === 0 ? [] : [`--unified=${lines}`];
  if (input.ref !== "") {
    const commit = await resolveRevision(ctx, input.ref, "ref");
    return { againstRef: await diffSet(ctx, [commit], specs, context) };
  }
  // Two read-only comparisons (optional locks are off): side by side.
  const [staged, unstaged] = await Promise.all([diffSet(ctx, ["--cached"], specs, context), diffSet(ctx, [], specs, context)]);
  return { staged, unstaged };
}

export interface GitCommitInput {
  message: string;
  files: string[];
  all: boolean;
}

export interface GitCommitResult {
  commit: string;
  branch: string;
  author: string;
  filesChanged: number;
}

/** SENSITIVE_FILE for the first of `paths` a commit must not carry. */
function refuseSensitive(ctx: ToolContext, paths: Iterable<string>): void {
  const guard = guardFor(gitOf(ctx).fileRules);
  for (const p of paths) {
    const hit = guard.check(p, "read");
    if (hit) {
      throw new DomainError("SENSITIVE_FILE", `'${p}' is a sensitive file and is never committed (rule ${hit.pattern})`, {
        metadata: { path: p, rule: hit.pattern, list: hit.list },
      });
    }
  }
}

/** Stages exactly the given files (or every tracked change) and commits them as the bot. */
export async function gitCommit(ctx: ToolContext, input: GitCommitInput): Promise<GitCommitResult> {
  await needProcesses(ctx);
  if (input.message.trim() === "") throw new DomainError("INVALID_ARGUMENT", "message is required", { metadata: { field: "message" } });
  if (Buffer.byteLength(input.message) > MAX_MESSAGE_BYTES || input.message.includes("\0")) {
    throw new DomainError("INVALID_ARGUMENT", `message must be at most ${MAX_MESSAGE_BYTES} bytes of text`, { metadata: { field: "message" } });
  }
  if (input.all === (input.files.length > 0)) {
    throw new DomainError("INVALID_ARGUMENT", input.all ? "give files or all, not both" : "files is required (or set all to commit every tracked change)", { metadata: { field: "files" } });
  }
  const rels = input.files.map((f) => jailPath(f, "files", true));
  const specs = rels.map(literal);
  refuseSensitive(ctx, rels);
  // What the commit would carry: staged changes and changed tracked files (and, for listed
  // paths, new files below them), each checked before anything is staged.
  const [staged, changed] = await Promise.all([
    runGit(ctx, ["diff", "--cached", "--name-only", "--no-renames", "-z", "--", ...specs]).then((r) => mustSucceed(r, "git diff")),
    runGit(ctx, ["ls-files", "-z", "--modified", "--deleted", ...(input.all ? [] : ["--others", "--exclude-standard"]), "--", ...specs]).then((r) => mustSucceed(r, "git ls-files")),
  ]);
  refuseSensitive(ctx, new Set([...nulFields(staged.stdout), ...nulFields(changed.stdout)]));

  if (input.all) {
    mustSucceed(await runGit(ctx, ["add", "--update"]), "git add");
  } else {
    const add = await runGit(ctx, ["add", "--all", "--", ...specs]);
    if (add.exitCode !== 0) {
      const m = /pathspec ':\(literal\)(.*)' did not match any files/.exec(add.stderr);
      if (m) throw new DomainError("FILE_NOT_FOUND", `'${m[1]}' is neither a file in the workspace nor tracked by git`, { metadata: { path: m[1] } });
      mustSucceed(add, "git add");
    }
  }
  const pending = await runGit(ctx, ["diff", "--cached", "--quiet", "--", ...specs]);
  if (pending.exitCode === 0) {
    throw new DomainError("NOTHING_TO_COMMIT", input.all ? "No tracked file has changed; nothing to commit" : "The listed files have no changes; nothing to commit", {});
  }
  if (pending.exitCode !== 1) mustSucceed(pending, "git diff");

  const id = await gitOf(ctx).identity();
  const env = { GIT_AUTHOR_NAME: id.name, GIT_AUTHOR_EMAIL: id.email, GIT_COMMITTER_NAME: id.name, GIT_COMMITTER_EMAIL: id.email };
  // With paths, --only (git's default then) commits exactly them, whatever else is staged.
  const args = ["commit", "--quiet", "--no-verify", "--no-edit", "--cleanup=strip", "-m", input.message];
  mustSucceed(await runGit(ctx, input.all ? args : [...args, "--only", "--", ...specs], { env }), "git commit");
  // What was committed: three reads side by side.
  const [head, branch, tree] = await Promise.all([
    runGit(ctx, ["rev-parse", "HEAD"]).then((r) => mustSucceed(r, "git rev-parse")),
    runGit(ctx, ["symbolic-ref", "--quiet", "--short", "HEAD"]),
    runGit(ctx, ["diff-tree", "-r", "--root", "--no-commit-id", "--name-only", "-z", "HEAD"]).then((r) => mustSucceed(r, "git diff-tree")),
  ]);
  return {
    commit: head.stdout.toString("utf8").trim(),
    branch: branch.exitCode === 0 ? branch.stdout.toString("utf8").trim() : "",
    author: `${id.name} <${id.email}>`,
    filesChanged: nulFields(tree.stdout).length,
  };
}

export interface GitCheckoutInput {
  branch: string;
  create: boolean;
}

export interface GitCheckoutResult {
  branch: string;
  commit: string;
  created: boolean;
}

/** INVALID_ARGUMENT unless `branch` is a name this server accepts. */
export function checkBranchName(branch: string, field = "branch"): void {
  const problem = branchNameProblem(branch);
  if (problem) throw new DomainError("INVALID_ARGUMENT", `'${branch.slice(0, 100)}' is not a valid branch name: ${problem}`, { metadata: { field, branch: branch.slice(0, 255) } });
}

/** Switches to a branch, creating it at HEAD first when asked. */
export async function gitCheckout(ctx: ToolContext, input: GitCheckoutInput): Promise<GitCheckoutResult> {
  await needProcesses(ctx);
  checkBranchName(input.branch);
  const exists = (await runGit(ctx, ["rev-parse", "--verify", "--quiet", `refs/heads/${input.branch}`])).exitCode === 0;
  if (input.create && exists) {
    throw new DomainError("BRANCH_EXISTS", `A branch named '${input.branch}' already exists; switch to it without create`, { metadata: { branch: input.branch } });
  }
  const out = await runGit(ctx, input.create ? ["checkout", "--quiet", "-b", input.branch] : ["switch", "--quiet", input.branch]);
  if (out.exitCode !== 0) {
    if (/would be overwritten by (checkout|switch)/.test(out.stderr)) {
      const paths = out.stderr.split("\n").filter((l) => l.startsWith("\t")).map((l) => l.trim());
      throw new DomainError("CHECKOUT_CONFLICT", `Switching to '${input.branch}' would overwrite uncommitted changes to ${paths.length} file(s); commit them first`, {
        metadata: { branch: input.branch, paths: paths.slice(0, 20).join("\n") },
      });
    }
    if (/invalid reference|did not match any|not a commit/.test(out.stderr)) {
      throw new DomainError("REVISION_NOT_FOUND", `No branch '${input.branch}' in the workspace's repository; set create to make it`, { metadata: { revision: input.branch, branch: input.branch } });
    }
    throw new DomainError("GIT_FAILED", `Switching to '${input.branch}' failed: ${gitMessage(out.stderr)}`, { metadata: { branch: input.branch } });
  }
  // The branch's files are in place: its sensitive ones are sealed like a clone's.
  await sealPlaced(ctx.workspace, ctx.git?.fileRules, ctx.signal);
  const head = await runGit(ctx, ["rev-parse", "--verify", "--quiet", "HEAD"]);
  return { branch: input.branch, commit: head.exitCode === 0 ? head.stdout.toString("utf8").trim() : "", created: input.create };
}

export interface GitPushInput {
  branch: string;
  force: boolean;
}

/** Pushes the current or named branch to the workspace's repository, from the server's side. */
export async function gitPush(ctx: ToolContext, input: GitPushInput): Promise<PushResult> {
  await needProcesses(ctx);
  if (input.force) {
    throw new DomainError("FORCE_PUSH_DENIED", "Force pushes are refused: they rewrite the repository's history. Push new commits on top of the branch instead", {
      metadata: { branch: input.branch },
    });
  }
  let branch = input.branch;
  if (branch === "") {
    const head = await runGit(ctx, ["symbolic-ref", "--quiet", "--short", "HEAD"]);
    branch = head.stdout.toString("utf8").trim();
    if (head.exitCode !== 0 || branch === "") throw new DomainError("INVALID_ARGUMENT", "HEAD is detached; name the branch to push", { metadata: { field: "branch" } });
  }
  checkBranchName(branch);
  return gitOf(ctx).push(ctx, { branch, force: false });
}
