/**
 * Sealing what the server put in a workspace (a clone, a checkout, setup commands, host mounts):
 * the sandbox makes the sensitive files root's (WorkspaceHandle.seal, executor/seal.ts). When git
 * tracks some of them, its index is refreshed first, in a later second than the files were
 * written: git re-reads a file whose recorded time is not older than the index (its "racy" check),
 * which it cannot do once the file is sealed, and it would then report the file as changed for
 * ever. A repository without sensitive tracked files costs one `git ls-files`.
 */
import type { WorkspaceHandle } from "../../providers/types.ts";
import { DEFAULT_DENY, type FileGuard, type FileRules, guardFor } from "../../providers/executor/sensitive-files.ts";
import { gitToolEnv, GIT_PROGRAMS } from "./sandbox-git.ts";

/**
 * git pathspecs for the never-read patterns (sensitive-files.ts): a pattern names trailing path
 * components at any depth, case-insensitively, as the rules do; exemptions are the guard's to apply.
 */
export function sensitivePathspecs(rules: FileRules | undefined): string[] {
  return [...DEFAULT_DENY, ...(rules?.deny ?? [])].map((p) => `:(glob,icase)**/${p.replace(/^\/+/, "")}`);
}

/** The never-read paths among those git printed (NUL-separated), confirmed by the guard, at most `max`. */
export function deniedPaths(out: string, guard: FileGuard, max: number): string[] {
  const paths = [...new Set(out.split("\0").filter((p) => p !== ""))];
  return paths.filter((p) => guard.check(p, "read")?.list === "deny").slice(0, max);
}

/** Runs git at the workspace root, hardened as the git tools run it; stdout, or undefined when it failed. */
async function git(handle: WorkspaceHandle, args: string[], signal: AbortSignal): Promise<string | undefined> {
  let out = "";
  let code = -1;
  for await (const ev of handle.exec({ argv: ["git", ...args], cwd: "", env: gitToolEnv(handle), timeoutMs: 120_000, signal, programs: GIT_PROGRAMS, sweep: false })) {
    if (ev.type === "stdout" && out.length < 1024 * 1024) out += Buffer.from(ev.data).toString("utf8");
    else if (ev.type === "exited") code = ev.exit.exitCode;
  }
  return code === 0 ? out : undefined;
}

/**
 * Seals the workspace behind `handle` after files were put in place, the last of them at
 * `placedAt` (epoch ms). Does nothing where the provider seals nothing.
 */
export async function sealPlaced(handle: WorkspaceHandle, rules: FileRules | undefined, signal: AbortSignal, placedAt = Date.now()): Promise<void> {
  if (!handle.seal) return;
  if (handle.processes !== false) {
    const tracked = await git(handle, ["ls-files", "-z", "--", ...sensitivePathspecs(rules)], signal);
    if (tracked !== undefined && deniedPaths(tracked, guardFor(rules), 1).length > 0) {
      const wait = (Math.floor(placedAt / 1000) + 1) * 1000 + 50 - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      await git(handle, ["update-index", "-q", "--refresh"], signal);
    }
  }
  await handle.seal();
}
