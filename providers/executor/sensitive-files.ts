/**
 * Sensitive files: paths the file tools never read or write (credentials, keys, env files), and
 * paths they may read but never change (code-execution vectors: git hooks and config, shell
 * start-up files). The server's lists below always apply; an agent type can add patterns, never
 * remove these.
 *
 * Matching is on a canonical form of the workspace-relative path, so that spellings a filesystem
 * or a later tool might treat as the same name cannot slip past: every component is NFKC-normalised
 * (full-width dots become dots), lower-cased, and loses trailing dots and spaces (`.ENV.`, `.env `
 * are `.env`); `./`, `a/../` and doubled slashes are gone already (`toWorkspacePath`).
 *
 * Patterns are a small glob language: `*` and `?` within one component, `**` for any number of
 * components. A pattern without a slash names the last component at any depth (`.env` matches
 * `.env` and `app/.env`, never a directory on the way, so a virtualenv called `.env/` stays
 * readable); a pattern with one names a run of trailing components at any depth
 * (`.aws/credentials`, `.git/hooks/**`).
 *
 * The jail applies these to both the path asked for and the path it resolved to (symlinks
 * followed), inside the sandbox, in the same synchronous step that opens the file: a link swapped
 * in later cannot redirect a checked operation. Imports only node: modules: it runs in sandboxes.
 */

/** What an operation does to a file. */
export type FileAccess = "read" | "write";

/** Patterns an agent type adds to the server's lists. */
export interface FileRules {
  /** No read, write, edit, patch or delete; no content in search results. */
  deny: string[];
  /** Readable, never written, edited, patched or deleted. */
  writeProtected: string[];
}

/** The server's never-read, never-written list. */
export const DEFAULT_DENY: readonly string[] = [
  // Environment files (templates below are exempt).
  ".env",
  ".env.*",
  // SSH and other private keys, certificates with keys, keystores.
  "id_rsa*",
  "id_dsa*",
  "id_ecdsa*",
  "id_ed25519*",
  "id_xmss*",
  "*.ppk",
  "*.pem",
  "*.key",
  "*.p12",
  "*.pfx",
  "*.jks",
  "*.keystore",
  "*.kdbx",
  ".ssh/**",
  ".gnupg/**",
  // Registry, cloud and tool credentials.
  ".npmrc",
  ".yarnrc.yml",
  ".pypirc",
  ".netrc",
  "_netrc",
  ".pgpass",
  ".git-credentials",
  ".aws/credentials",
  ".aws/config",
  ".azure/**",
  ".config/gcloud/**",
  "application_default_credentials.json",
  ".kube/config",
  ".docker/config.json",
  ".config/gh/hosts.yml",
  ".vault-token",
  ".terraform.d/credentials.tfrc.json",
  "credentials.tfrc.json",
  ".htpasswd",
];

/** Names that DEFAULT_DENY would catch but that hold no secrets by convention (templates). */
export const DEFAULT_EXEMPT: readonly string[] = [".env.example", ".env.sample", ".env.template", ".env.dist"];

/** The server's read-only list: files whose content is executed by git, shells or editors. */
export const DEFAULT_WRITE_PROTECTED: readonly string[] = [
  ".git/**/hooks/**",
  ".git/**/config",
  ".git/**/config.worktree",
  ".git/**/info/attributes",
  ".gitmodules",
  // The sandbox's HOME is the workspace root: these are the global configuration of the agent's own git.
  ".gitconfig",
  ".config/git/config",
  ".bashrc",
  ".bash_profile",
  ".bash_login",
  ".bash_logout",
  ".profile",
  ".zshrc",
  ".zshenv",
  ".zprofile",
  ".zlogin",
  ".zlogout",
  ".kshrc",
  ".cshrc",
  ".tcshrc",
  ".envrc",
  // HOME's configuration of curl and wget (proxies, output files, headers).
  ".curlrc",
  ".wgetrc",
  ".vscode/settings.json",
  ".vscode/tasks.json",
];

/** The canonical form a path is matched in (see the module comment). */
export function canonicalForMatch(path: string): string {
  return path
    .normalize("NFKC")
    .split("/")
    .map((c) => c.toLowerCase().replace(/[. ]+$/u, (tail) => (tail.length === c.length ? tail : "")))
    .filter((c) => c !== "" && c !== ".")
    .join("/");
}

/**
 * One compiled pattern: a regular expression over the canonical path that matches the pattern's
 * components as the path's last ones (at any depth). The command policy's file rules use the same
 * (server/security/path-patterns.ts).
 */
export function compile(pattern: string): RegExp {
  const parts = canonicalForMatch(pattern).split("/");
  let body = "";
  parts.forEach((part, i) => {
    const last = i === parts.length - 1;
    if (part === "**") {
      // Not last: any number of whole components, none included. Last: anything below.
      body += last ? ".+" : "(?:[^/]+/)*";
      return;
    }
    body += part.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(/\?/g, "[^/]");
    if (!last) body += "/";
  });
  return new RegExp(`(?:^|/)${body}$`, "u");
}

/**
 * For a pattern naming a whole tree (`.ssh/**`), a regular expression matching the tree's
 * directory and every directory below it; undefined for any other pattern.
 */
function compileTree(pattern: string): RegExp | undefined {
  const canonical = canonicalForMatch(pattern);
  if (!canonical.endsWith("/**") || canonical === "**") return undefined;
  const body = compile(canonical.slice(0, -3)).source.slice(0, -1);
  return new RegExp(`${body}(?:/.*)?$`, "u");
}

/** How many answers a FileGuard remembers, and the longest path it remembers one for. */
const MEMO_MAX = 2048;
const MEMO_PATH_MAX = 512;

/** Checks one compiled list. */
class PatternList {
  readonly #res: RegExp[];
  readonly #trees: Array<RegExp | undefined>;
  readonly patterns: readonly string[];
  constructor(patterns: readonly string[]) {
    this.patterns = patterns;
    this.#res = patterns.map(compile);
    this.#trees = patterns.map(compileTree);
  }
  /** The first pattern matching the canonical path, or undefined. */
  match(canonical: string): string | undefined {
    for (let i = 0; i < this.#res.length; i++) if (this.#res[i].test(canonical)) return this.patterns[i];
    return undefined;
  }
  /** The first tree pattern (`dir/**`) whose tree holds the canonical directory, or undefined. */
  matchTree(canonical: string): string | undefined {
    for (let i = 0; i < this.#trees.length; i++) if (this.#trees[i]?.test(canonical)) return this.patterns[i];
    return undefined;
  }
}

/** Why a path is refused: the list and the pattern that matched. */
export interface SensitiveMatch {
  list: "deny" | "write_protected";
  pattern: string;
}

/** The server's lists plus an agent type's additions, compiled. */
export class FileGuard {
  readonly #deny: PatternList;
  readonly #exempt: PatternList;
  readonly #protected: PatternList;

  constructor(extra: FileRules = { deny: [], writeProtected: [] }) {
    this.#deny = new PatternList([...DEFAULT_DENY, ...extra.deny]);
    this.#exempt = new PatternList(DEFAULT_EXEMPT);
    this.#protected = new PatternList([...DEFAULT_WRITE_PROTECTED, ...extra.writeProtected]);
  }

  /**
   * Answers of `check` by access and path: an agent reads and writes the same few paths over and
   * over, and the answer for a path never changes (the lists are fixed). Bounded: emptied when full,
   * long paths not kept.
   */
  readonly #memo = new Map<string, SensitiveMatch | null>();

  /** Why `path` (workspace-relative or absolute) may not be accessed for `access`, or undefined. */
  check(path: string, access: FileAccess): SensitiveMatch | undefined {
    if (path.length > MEMO_PATH_MAX) return this.#check(path, access);
    const key = `${access === "write" ? "w" : "r"}${path}`;
    const known = this.#memo.get(key);
    if (known !== undefined) return known ?? undefined;
    const answer = this.#check(path, access);
    if (this.#memo.size >= MEMO_MAX) this.#memo.clear();
    this.#memo.set(key, answer === undefined ? null : Object.freeze(answer));
    return answer;
  }

  #check(path: string, access: FileAccess): SensitiveMatch | undefined {
    const canonical = canonicalForMatch(path);
    if (canonical === "") return undefined;
    const denied = this.#deny.match(canonical);
    // An exemption names a template by its last component only; an added deny pattern that names
    // it still wins, since exemptions exist for the server's own ".env.*".
    if (denied !== undefined && !(this.#exempt.match(canonical) !== undefined && DEFAULT_DENY.includes(denied))) {
      return { list: "deny", pattern: denied };
    }
    if (access === "write") {
      const p = this.#protected.match(canonical);
      if (p !== undefined) return { list: "write_protected", pattern: p };
    }
    return undefined;
  }

  /**
   * The directories, from the workspace root (the sandbox's HOME), in which the never-read list
   * names files by a path (`.aws/credentials`, `.ssh/**`, `.config/gh/hosts.yml`): where credential
   * tools store what they obtain. Literal leading components only.
   */
  credentialDirs(): string[] {
    const dirs = new Set<string>();
    for (const pattern of this.#deny.patterns) {
      const parts = canonicalForMatch(pattern).split("/");
      const literal: string[] = [];
      for (const part of parts.slice(0, -1)) {
        if (/[*?[]/.test(part)) break;
        literal.push(part);
      }
      if (literal.length > 0) dirs.add(literal.join("/"));
    }
    return [...dirs];
  }

  /**
   * Why the directory `path` is part of a tree the lists name whole (`.ssh/**`: `.ssh` itself and
   * every directory below it), or undefined. For `write`, write-protected trees count too.
   */
  checkTree(path: string, access: FileAccess): SensitiveMatch | undefined {
    const canonical = canonicalForMatch(path);
    if (canonical === "") return undefined;
    const denied = this.#deny.matchTree(canonical);
    if (denied !== undefined) return { list: "deny", pattern: denied };
    if (access === "write") {
      const p = this.#protected.matchTree(canonical);
      if (p !== undefined) return { list: "write_protected", pattern: p };
    }
    return undefined;
  }

  /**
   * Whether a shell glob (`.e*`, `*.pem`, `~/.ssh/id_*`) could name a file of the lists: its last
   * component is tried against a sample of each pattern, in the directories the pattern needs. A
   * component of wildcards alone (`*`) is not judged: it names everything, and bash's `*` skips
   * dot files.
   */
  checkGlob(glob: string, access: FileAccess): SensitiveMatch | undefined {
    const slash = glob.lastIndexOf("/");
    const last = glob.slice(slash + 1);
    if (/^[*?]*$/.test(last)) return undefined;
    const dir = canonicalForMatch(slash < 0 ? "" : glob.slice(0, slash));
    const re = globComponentRe(last);
    const lists: Array<[SensitiveMatch["list"], readonly string[]]> = [["deny", this.#deny.patterns]];
    if (access === "write") lists.push(["write_protected", this.#protected.patterns]);
    for (const [list, patterns] of lists) {
      for (const pattern of patterns) {
        const sample = sampleOf(pattern);
        const cut = sample.lastIndexOf("/");
        const needDir = cut < 0 ? "" : sample.slice(0, cut);
        if (needDir !== "" && !(dir === needDir || dir.endsWith(`/${needDir}`) || /[*?[]/.test(dir))) continue;
        // A pattern ending in "/**" takes any name in its directory.
        if (!canonicalForMatch(pattern).endsWith("/**") && !re.test(sample.slice(cut + 1))) continue;
        if (list === "deny" && this.#exempt.match(sample) !== undefined) continue;
        return { list, pattern };
      }
    }
    return undefined;
  }
}

/** A concrete path a pattern matches, for testing globs against it (`*.pem` → `x.pem`). */
function sampleOf(pattern: string): string {
  return canonicalForMatch(pattern)
    .replace(/^\*\*\//, "")
    .replace(/\/\*\*\//g, "/")
    .replace(/\/\*\*$/, "/x")
    .replace(/[*?]/g, "x");
}

/** A shell glob's last component as a regular expression (case-insensitive, as the lists are). */
function globComponentRe(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else if (c === "[") {
      const end = glob.indexOf("]", i + 2);
      if (end < 0) re += "\\[";
      else {
        const body = glob.slice(i + 1, end).replace(/^!/, "^").replace(/\\/g, "\\\\");
        re += `[${body}]`;
        i = end;
      }
    } else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`, "iu");
}

/** Guards by their rules, so that a request's rules are compiled once per executor. */
const guards = new Map<string, FileGuard>();

/** The guard for `extra` (the server's lists alone when absent), compiled once and kept. */
export function guardFor(extra?: FileRules): FileGuard {
  const key = extra === undefined || (extra.deny.length === 0 && extra.writeProtected.length === 0) ? "" : JSON.stringify([extra.deny, extra.writeProtected]);
  let g = guards.get(key);
  if (g === undefined) {
    if (guards.size > 256) guards.clear();
    g = new FileGuard(key === "" ? undefined : extra);
    guards.set(key, g);
  }
  return g;
}
