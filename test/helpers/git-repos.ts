/**
 * The git tools' test fixtures: a repository on a test git server (with a sensitive `.env` and a
 * branch that changes it, for getting such a change into a workspace without the shell naming the
 * file), a session of a new agent type cloned from it, and the test's own view of what a push left
 * in the server's bare repository.
 */
import { execFileSync } from "node:child_process";
import type { ExecutionContext } from "ava";
import { SessionStatus } from "../../gen/agentworkspace/v1/workspace_pb.js";
import type { GitServer } from "./git-server.ts";
import type { ClientSet } from "./server.ts";
import { readyGuardMs, watchUntilReady } from "./sessions.ts";

/** The repository every git test starts from. */
export const SVC_BRANCHES = {
  main: { "src/server.ts": "export const port = 3000;\n", "README.md": "# svc\n", ".env": "SECRET=repo-secret-value\n" },
  // A change to the sensitive file that the shell may not write itself, for cherry-picking.
  "env-change": { "src/server.ts": "export const port = 3000;\n", "README.md": "# svc\nmore\n", ".env": "SECRET=changed-secret-value\n" },
};

let serial = 0;
/** A fresh name for a repository or agent type. */
export const freshId = (hint: string) => `${hint}-${process.pid}-${++serial}`;

/** Options of `repoSession`. */
export interface RepoSessionOptions {
  /** The agent type's tools. */
  tools: string[];
  protectedBranches?: string[];
  /** The task's base branch (fetched beside the default branch). */
  baseBranch?: string;
}

/** A new repository of SVC_BRANCHES on `git`, and an ACTIVE session of a new agent type cloned from it. */
export async function repoSession(t: ExecutionContext<unknown>, op: ClientSet, git: GitServer, provider: string, options: RepoSessionOptions) {
  const repo = freshId(`repo-${provider}`);
  const { commits } = await git.createRepo(repo, { branches: SVC_BRANCHES });
  const type = freshId(`git-${provider}`);
  await op.config.createAgentType({
    agentType: {
      id: type,
      workspace: {
        enabled: true,
        provider,
        tools: options.tools,
        repoSource: { type: "task_context" },
        checkoutOnStart: true,
        ...(options.protectedBranches ? { git: { protectedBranches: options.protectedBranches } } : {}),
      },
    },
  });
  const started = await op.workspaces.startSession({ agentType: type, task: { repositoryUrl: git.repoUrl(repo), baseBranch: options.baseBranch ?? "" } });
  const { session } = await watchUntilReady(op, started.session!.id, readyGuardMs(provider));
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  return { c: op, ws: session.workspaceId, repo, url: git.repoUrl(repo), bare: git.repoPath(repo), sessionId: session.id, commits, started, session };
}

/** `git args` in a server's bare repository (the test's view of what was pushed). */
export function remoteGit(bare: string, ...args: string[]): string {
  return execFileSync("git", ["-C", bare, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { PATH: process.env.PATH ?? "/usr/bin:/bin", GIT_CONFIG_NOSYSTEM: "1", HOME: bare } }).trim();
}

/** The commit of `branch` in the bare repository, or undefined when it has none. */
export function remoteTip(bare: string, branch: string): string | undefined {
  try {
    return remoteGit(bare, "rev-parse", "--verify", "--quiet", `refs/heads/${branch}`);
  } catch {
    return undefined;
  }
}
