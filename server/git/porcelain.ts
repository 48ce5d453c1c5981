/**
 * Readers of git's machine formats: `status --porcelain=v2 --branch -z` and `diff --numstat -z`.
 * Pure functions over git's bytes, so they are tested on their own.
 */

/** What happened to a file on one side of the index. */
export type Change = "" | "modified" | "added" | "deleted" | "renamed" | "copied" | "type_changed" | "unmerged";

const CHANGES: Record<string, Change> = { ".": "", M: "modified", A: "added", D: "deleted", R: "renamed", C: "copied", T: "type_changed", U: "unmerged" };

/** One path of a status. */
export interface StatusEntry {
  path: string;
  staged: Change;
  unstaged: Change;
  untracked: boolean;
  renamedFrom: string;
}

/** A parsed status. */
export interface Status {
  /** "" when detached. */
  branch: string;
  detached: boolean;
  /** "" before the first commit. */
  commit: string;
  upstream: string;
  ahead: number;
  behind: number;
  entries: StatusEntry[];
}

/** The XY pair of a status line; both sides of an unmerged entry are "unmerged". */
function sides(xy: string, unmerged: boolean): Pick<StatusEntry, "staged" | "unstaged"> {
  if (unmerged) return { staged: "unmerged", unstaged: "unmerged" };
  return { staged: CHANGES[xy[0]] ?? "modified", unstaged: CHANGES[xy[1]] ?? "modified" };
}

/**
 * Parses `git status --porcelain=v2 --branch -z` output (fields are NUL-terminated records; a
 * rename's record is followed by its original path as a record of its own).
 */
export function parseStatus(records: string[]): Status {
  const s: Status = { branch: "", detached: false, commit: "", upstream: "", ahead: 0, behind: 0, entries: [] };
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    if (r.startsWith("# ")) {
      const [key, ...rest] = r.slice(2).split(" ");
      const value = rest.join(" ");
      if (key === "branch.oid") s.commit = value === "(initial)" ? "" : value;
      else if (key === "branch.head") {
        s.detached = value === "(detached)";
        s.branch = s.detached ? "" : value;
      } else if (key === "branch.upstream") s.upstream = value;
      else if (key === "branch.ab") {
        const m = /^\+(\d+) -(\d+)$/.exec(value);
        if (m) {
          s.ahead = Number(m[1]);
          s.behind = Number(m[2]);
        }
      }
      continue;
    }
    const kind = r[0];
    if (kind === "?") {
      s.entries.push({ path: r.slice(2), staged: "", unstaged: "", untracked: true, renamedFrom: "" });
    } else if (kind === "1") {
      // 1 XY sub mH mI mW hH hI path
      const f = splitN(r, 9);
      s.entries.push({ path: f[8], ...sides(f[1], false), untracked: false, renamedFrom: "" });
    } else if (kind === "2") {
      // 2 XY sub mH mI mW hH hI Xscore path, then the original path as the next record
      const f = splitN(r, 10);
      const from = records[++i] ?? "";
      s.entries.push({ path: f[9], ...sides(f[1], false), untracked: false, renamedFrom: from });
    } else if (kind === "u") {
      // u XY sub m1 m2 m3 mW h1 h2 h3 path
      const f = splitN(r, 11);
      s.entries.push({ path: f[10], ...sides(f[1], true), untracked: false, renamedFrom: "" });
    }
    // "!" (ignored) is never asked for.
  }
  return s;
}

/** `line` split on its first n-1 spaces (the last field, a path, may contain spaces). */
function splitN(line: string, n: number): string[] {
  const out: string[] = [];
  let at = 0;
  for (let i = 0; i < n - 1; i++) {
    const sp = line.indexOf(" ", at);
    if (sp < 0) break;
    out.push(line.slice(at, sp));
    at = sp + 1;
  }
  out.push(line.slice(at));
  return out;
}

/** One file of `diff --numstat`. */
export interface NumstatEntry {
  path: string;
  oldPath: string;
  added: number;
  removed: number;
  binary: boolean;
}

/**
 * Parses `git diff --numstat -z`: "added\tremoved\tpath\0", or for a rename
 * "added\tremoved\t\0old\0new\0"; a binary file counts "-" and "-".
 */
export function parseNumstat(records: string[]): NumstatEntry[] {
  const out: NumstatEntry[] = [];
  for (let i = 0; i < records.length; i++) {
    const m = /^(-|\d+)\t(-|\d+)\t(.*)$/s.exec(records[i]);
    if (!m) continue;
    const binary = m[1] === "-";
    let path = m[3];
    let oldPath = "";
    if (path === "") {
      oldPath = records[++i] ?? "";
      path = records[++i] ?? "";
    }
    out.push({ path, oldPath, added: binary ? 0 : Number(m[1]), removed: binary ? 0 : Number(m[2]), binary });
  }
  return out;
}

/**
 * Whether `name` is a branch name this server accepts: git's ref-name rules
 * (`git check-ref-format --branch`) plus no leading "-", ASCII printable only, at most 255 bytes.
 */
export function branchNameProblem(name: string): string | undefined {
  if (name === "") return "a branch name is required";
  if (name.length > 255) return "a branch name has at most 255 characters";
  if (name.startsWith("-")) return "a branch name may not start with '-'";
  if (!/^[\x21-\x7e]+$/.test(name)) return "a branch name has printable ASCII characters only, no spaces";
  if (/[~^:?*[\\]/.test(name)) return "a branch name may not contain ~ ^ : ? * [ or \\";
  if (name.includes("..")) return "a branch name may not contain '..'";
  if (name.includes("@{") || name === "@") return "a branch name may not contain '@{' or be '@'";
  if (name.includes("//") || name.startsWith("/") || name.endsWith("/")) return "a branch name may not start or end with '/' or contain '//'";
  if (name.endsWith(".")) return "a branch name may not end with '.'";
  for (const part of name.split("/")) {
    if (part.startsWith(".")) return "no part of a branch name may start with '.'";
    if (part.endsWith(".lock")) return "no part of a branch name may end with '.lock'";
  }
  if (name === "HEAD") return "'HEAD' is not a branch name";
  return undefined;
}
