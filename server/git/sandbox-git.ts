/**
 * git as the git tools run it: inside the workspace, through the provider's exec (so every
 * provider behaves alike), as the sandbox's user, at the workspace root, in an environment that
 * can never wait for a person and that ignores what the repository says to run.
 *
 * - No prompt, editor or pager: stdin is /dev/null (the executor's), GIT_TERMINAL_PROMPT=0, the
 *   askpass programs are `false`, the editors `:` and the pagers `cat`.
 * - No system or global configuration (HOME is the workspace, whose `.gitconfig` the agent
 *   writes), and command-line configuration (GIT_CONFIG_COUNT, never argv) that turns off what
 *   would run a program of the repository's choosing: hooks, fsmonitor, signing, ssh commands,
 *   credential helpers, and, through the diff options, external diff and textconv drivers.
 *   Filter drivers (`filter.*.clean`) are the exception git offers no switch for: a repository
 *   that defines one runs it inside the sandbox, as a command the agent could run itself.
 * - Discovery stops at the workspace root (GIT_CEILING_DIRECTORIES is its parent, in every
 *   command's environment: providers/executor/env.ts), so a workspace without a repository is
 *   NOT_A_GIT_REPOSITORY, never a repository around it on the host. The tools' variables never set it.
 */
import { DomainError } from "../../core/errors.ts";
import { remainingMs, type ToolContext } from "../tools/context.ts";

/** Command-line configuration of every git the tools run. */
const HARDENING: Array<[string, string]> = [
  ["core.hooksPath", "/dev/null"],
  ["core.fsmonitor", "false"],
  ["core.sshCommand", "false"],
  ["core.askPass", "false"],
  ["core.editor", ":"],
  ["core.pager", "cat"],
  ["sequence.editor", ":"],
  ["credential.helper", ""],
  ["commit.gpgSign", "false"],
  ["tag.gpgSign", "false"],
  ["gpg.program", "false"],
  ["diff.external", ""],
  ["core.quotePath", "false"],
  ["color.ui", "false"],
  ["advice.detachedHead", "false"],
  ["protocol.allow", "never"],
  ["safe.directory", "*"],
];

/**
 * How git compares a file with its index entry where the sandbox seals files (executor/seal.ts):
 * sealed files changed owner and mode after git recorded them, which alone is no change to their
 * content, and git could not read them to find out; so only the whole-second mtime and the size
 * count. Only there: every git of such a sandbox reads the index so (scripts/git-harden.c), and
 * the tools' git and the agent's own must read it alike. Where they differ, an entry the agent's
 * git left unsmudged because its inode had changed (a file replaced in the second the index was
 * written, same size) passes as clean for a git that compares only seconds and sizes, and the
 * tools would miss the change (status, diff and commit alike).
 */
const SEALED_STAT: Array<[string, string]> = [
  ["core.trustCtime", "false"],
  ["core.checkStat", "minimal"],
];

/**
 * The environment of every tool git (added to the sandbox's minimal one) in `workspace`, whose
 * `seal` says whether its sandbox seals files (SEALED_STAT).
 */
export function gitToolEnv(workspace: { readonly seal?: unknown }, extra: Record<string, string> = {}): Record<string, string> {
  const config = workspace.seal === undefined ? HARDENING : [...HARDENING, ...SEALED_STAT];
  const env: Record<string, string> = {
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_TERMINAL_PROMPT: "0",
    GIT_ASKPASS: "false",
    SSH_ASKPASS: "false",
    GIT_EDITOR: ":",
    GIT_SEQUENCE_EDITOR: ":",
    GIT_PAGER: "cat",
    PAGER: "cat",
    GIT_OPTIONAL_LOCKS: "0",
    GIT_CONFIG_COUNT: String(config.length),
    ...extra,
  };
  config.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

/** What the git tools' exec may run besides the agent type's programs: git, however the allowlist reads. */
export const GIT_PROGRAMS = ["git"];

/** The argv that runs `git args…` (at the workspace root, where the tools' exec starts it). */
export function gitArgv(args: string[]): string[] {
  return ["git", ...args];
}

/** What one git run produced. */
export interface GitOutput {
  exitCode: number;
  /** stdout up to `maxStdout` bytes. */
  stdout: Buffer;
  /** All bytes git wrote to stdout. */
  stdoutTotal: number;
  /** stderr, at most 16 KiB. */
  stderr: string;
}

/** Options of one run. */
export interface GitRunOptions {
  /** Bytes of stdout kept (default 16 MiB); the rest is counted, not kept. */
  maxStdout?: number;
  /** Variables besides the hardening (an identity for commits). */
  env?: Record<string, string>;
  /** Milliseconds before git is stopped (default: the workspace's command timeout). */
  timeoutMs?: number;
}

const STDERR_KEPT = 16 * 1024;

/**
 * Runs `git args…` at the workspace root. Throws NOT_A_GIT_REPOSITORY when the root is no work
 * tree, COMMAND_TIMEOUT past the timeout, and WORKSPACE_NOT_READY when the sandbox has no git;
 * any other failure is the caller's to read from the exit code and stderr.
 */
export async function runGit(ctx: ToolContext, args: string[], options: GitRunOptions = {}): Promise<GitOutput> {
  const maxStdout = options.maxStdout ?? 16 * 1024 * 1024;
  // A client's deadline bounds git too: nothing keeps running for a caller that has given up.
  const timeoutMs = Math.min(options.timeoutMs ?? ctx.limits.defaultTimeoutMs, remainingMs(ctx) ?? Number.POSITIVE_INFINITY);
  const out: Buffer[] = [];
  let kept = 0;
  let total = 0;
  let stderr = "";
  let exit: { exitCode: number; timedOut: boolean; spawnError?: string } | undefined;
  for await (const ev of ctx.workspace.exec({ argv: gitArgv(args), cwd: "", env: gitToolEnv(ctx.workspace, options.env), timeoutMs, signal: ctx.signal, programs: GIT_PROGRAMS, sweep: false })) {
    if (ev.type === "stdout") {
      total += ev.data.length;
      if (kept < maxStdout) {
        const part = Buffer.from(ev.data.subarray(0, maxStdout - kept));
        out.push(part);
        kept += part.length;
      }
    } else if (ev.type === "stderr") {
      if (stderr.length < STDERR_KEPT) stderr += Buffer.from(ev.data).toString("utf8").slice(0, STDERR_KEPT - stderr.length);
    } else if (ev.type === "exited") {
      exit = ev.exit;
    }
  }
  if (ctx.signal.aborted) throw new DomainError("CANCELLED", "The git call was cancelled");
  if (!exit) throw new DomainError("WORKSPACE_NOT_READY", "git ended without an exit status");
  if (exit.spawnError || (exit.exitCode === 127 && /not found/.test(stderr))) {
    throw new DomainError("WORKSPACE_NOT_READY", "git is not installed in the workspace's image", { metadata: { program: "git" } });
  }
  if (exit.timedOut) {
    throw new DomainError("COMMAND_TIMEOUT", `git ${args[0]} ran longer than ${timeoutMs} ms and was stopped`, { metadata: { timeout_ms: String(timeoutMs) } });
  }
  if (exit.exitCode !== 0 && /not a git repository/i.test(stderr)) {
    throw new DomainError("NOT_A_GIT_REPOSITORY", "The workspace's root is not a git repository; clone one with the session's repo_source, or run `git init`", {});
  }
  return { exitCode: exit.exitCode, stdout: Buffer.concat(out), stdoutTotal: total, stderr };
}

/** The last meaningful line of git's stderr ("fatal: …"), for a message. */
export function gitMessage(stderr: string): string {
  const lines = stderr.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== "" && !/^hint:/.test(l));
  const fatal = lines.find((l) => /^(fatal|error):/.test(l));
  return (fatal ?? lines.at(-1) ?? "").slice(0, 500);
}

/** Throws GIT_FAILED with git's explanation unless `out` succeeded. */
export function mustSucceed(out: GitOutput, what: string): GitOutput {
  if (out.exitCode !== 0) throw new DomainError("GIT_FAILED", `${what} failed: ${gitMessage(out.stderr) || `git exited with ${out.exitCode}`}`, { metadata: { exit_code: String(out.exitCode) } });
  return out;
}

/** NUL-separated fields of `buf` (git's `-z` output), without the empty tail. */
export function nulFields(buf: Buffer): string[] {
  const fields = buf.toString("utf8").split("\0");
  if (fields.at(-1) === "") fields.pop();
  return fields;
}

/** A pathspec that matches `rel` exactly (no glob, no magic of its own). */
export function literal(rel: string): string {
  return `:(literal)${rel === "" ? "." : rel}`;
}
