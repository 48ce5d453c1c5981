/**
 * Which programs a sandbox's commands may execute, enforced by the sandbox's kernel: in a
 * workspace whose agent type has a command allowlist, every program file of the image belongs to
 * a group of its own and may be read and executed only by that group (root:gN, mode 0750; the
 * image is prepared once per base image by prepare-image.ts, which writes the manifest below).
 * A command's processes carry, as supplementary groups, exactly the groups of the programs its
 * policy allows, so an `execve` of anything else fails with EACCES however it is reached (a git
 * hook, `find -exec`, `xargs`, `env -S`, `TAR_OPTIONS`, an fsmonitor, a script), and the dynamic
 * loader cannot run it either (`ld.so /usr/bin/x` needs to read it). Code written into the
 * workspace never runs: the writable filesystems are mounted noexec on the host, which refuses
 * both an `execve` and an executable mapping of their files (under gVisor the host's mapping is
 * what faults).
 *
 * Always allowed besides the list: the shell that runs the command, the pure exec wrappers the
 * command policy treats as transparent (`timeout 60 npm test` needs `npm` allowed, and `timeout`
 * to run), the interpreters of allowed scripts (`#!/usr/bin/env node` needs env and node), and a
 * few programs allowed programs run as part of their own work (HELPERS: git's own programs, tar's
 * compressors). A program denied by a rule without arguments is never allowed (deny wins).
 *
 * Imports only node: modules: it runs inside sandboxes.
 */
import { readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import path from "node:path";

/** Where prepare-image.ts writes the manifest in a prepared image. */
export const MANIFEST_PATH = "/etc/agent-workspace/programs.json";
/** Version of the manifest's format and of the image preparation (bumped when either changes). */
export const PREPARE_VERSION = 1;

/** The group a prepared image gives the server's mount (/opt/agent-workspace): the grep tool's ripgrep runs with it. */
export const TOOLS_GID = 61000;

/** What a prepared image says about its programs. */
export interface ProgramManifest {
  version: number;
  /** Every program file by its real path, and the group that may run it (hard links share one). */
  groups: Record<string, number>;
  /** Scripts' interpreters by the script's real path: the interpreter's real path, or `env:NAME` for `#!/usr/bin/env NAME`. */
  interpreters: Record<string, string>;
  /** The group that may traverse the server's mounts (/opt/agent-workspace): the grep tool's ripgrep. */
  toolsGid: number;
  /** setpriv's real path: it starts every command with its groups. */
  setpriv: string;
}

/**
 * Where a policy layer (prepare-image.ts `--policy`) says which policy it was made for: an image
 * derived from a prepared one for one allowlist, in which the allowed programs belong to POLICY_GID
 * instead of their own groups. A command then runs with that one group as its primary group,
 * started by the spawn itself, without setpriv and its extra exec.
 */
export const POLICY_PATH = "/etc/agent-workspace/policy.json";
/** The group of the allowed programs in a policy layer. */
export const POLICY_GID = 60999;

/** What a policy layer records. */
export interface PolicyLayer {
  version: number;
  rules: ProgramRules;
  gid: number;
}

/** How a command is started: as the user with one primary group (no setpriv), or through setpriv with supplementary groups. */
export type Launch = { gid: number } | { groups: number[] };

/** The policy layer of this image when it was made for `rules`, else undefined. */
export function loadPolicyLayer(rules: ProgramRules, file = POLICY_PATH): PolicyLayer | undefined {
  try {
    const layer = JSON.parse(readFileSync(file, "utf8")) as PolicyLayer;
    if (layer.version !== PREPARE_VERSION || layer.gid !== POLICY_GID) return undefined;
    return JSON.stringify(normalRules(layer.rules)) === JSON.stringify(normalRules(rules)) ? layer : undefined;
  } catch {
    return undefined;
  }
}

/** Rules in one canonical form (sorted, without duplicates), for comparing and naming layers. */
export function normalRules(rules: ProgramRules): ProgramRules {
  return { allow: [...new Set(rules.allow)].sort(), deny: [...new Set(rules.deny)].sort() };
}

/** The program patterns of a command policy: the first word of its allow rules and of its argument-less deny rules. */
export interface ProgramRules {
  allow: string[];
  deny: string[];
}

/** Directories a bare program name is looked up in (the sandbox's PATH). */
export const PATH_DIRS = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];
/** The shells a command runs in. */
const SHELLS = ["/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"];
/** Programs that only run another program (the command policy judges the program they run). */
const WRAPPERS = ["env", "timeout", "nice", "nohup", "stdbuf", "setsid", "ionice", "taskset", "flock", "xargs"];
/** Programs an allowed program runs as part of its own work; patterns of names or paths. */
const HELPERS: Record<string, string[]> = {
  git: ["/usr/lib/git-core/*", "/usr/libexec/git-core/*"],
  tar: ["gzip", "gunzip", "zcat", "bzip2", "bunzip2", "xz", "unxz", "lzma", "lzip", "lzop", "zstd", "unzstd", "compress", "uncompress"],
};

/** A policy's pattern (`*` and `?`; `\*` is a literal star) as a regular expression over a whole name or path. */
export function programPattern(pattern: string): RegExp {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\" && i + 1 < pattern.length) re += pattern[++i].replace(/[.+^${}()|[\]\\*?/]/g, "\\$&");
    else if (c === "*") re += pattern.includes("/") ? "[^/]*" : ".*";
    else if (c === "?") re += ".";
    else re += c.replace(/[.+^${}()|[\]\\/]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

/** Reads and checks a prepared image's manifest; throws when it is missing or not of this version. */
export function loadManifest(file = MANIFEST_PATH): ProgramManifest {
  const m = JSON.parse(readFileSync(file, "utf8")) as ProgramManifest;
  if (m.version !== PREPARE_VERSION || typeof m.groups !== "object" || typeof m.setpriv !== "string" || !Number.isInteger(m.toolsGid)) {
    throw new Error(`program manifest ${file} is not of version ${PREPARE_VERSION}`);
  }
  return m;
}

/** The programs of one workspace's policy, resolved against its image. */
export class ProgramSet {
  readonly #manifest: ProgramManifest;
  /** Groups every command of the workspace gets. */
  readonly #base: number[];
  readonly #denied: Set<string>;
  readonly #extra = new Map<string, number[]>();
  /** The allowed programs' real paths, each name of them (hard links) included. */
  readonly allowed: string[];
  /** The policy layer's group when the image has a layer for these rules. */
  readonly #policyGid: number | undefined;

  constructor(manifest: ProgramManifest, rules: ProgramRules, policyGid?: number) {
    this.#manifest = manifest;
    this.#policyGid = policyGid;
    this.#denied = new Set(rules.deny.flatMap((p) => this.#match(p)));
    const allowed = new Set<string>();
    for (const shell of SHELLS) this.#add(allowed, this.#real(shell));
    for (const w of WRAPPERS) for (const p of this.#match(w)) this.#add(allowed, p);
    for (const pattern of rules.allow) for (const p of this.#match(pattern)) this.#add(allowed, p);
    this.#base = policyGid !== undefined ? [policyGid] : this.#gids(allowed, true);
    const gids = new Set(this.#gids(allowed, true));
    this.allowed = Object.entries(manifest.groups).filter(([, gid]) => gids.has(gid)).map(([p]) => p);
  }

  /**
   * How a command that may also run `extra` starts: with the policy layer's group as its primary
   * group when it needs nothing else (the common case, no setpriv), with the tools' group alone
   * for the grep tool's ripgrep, and otherwise through setpriv with supplementary groups.
   */
  launch(extra: readonly string[] = []): Launch {
    if (this.#policyGid !== undefined && extra.length === 0) return { gid: this.#policyGid };
    if (extra.length > 0 && extra.every((e) => e.startsWith("/opt/agent-workspace/"))) return { gid: this.#manifest.toolsGid };
    return { groups: this.groups(extra) };
  }

  /** The supplementary groups of a command that may also run `extra` (names or paths the server's own tools need). */
  groups(extra: readonly string[] = []): number[] {
    if (extra.length === 0) return this.#base;
    const key = extra.join("\0");
    let gids = this.#extra.get(key);
    if (gids === undefined) {
      const more = new Set<string>();
      let tools = false;
      for (const e of extra) {
        // The server's own mounts (the grep tool's ripgrep) are reached through their directory's group.
        if (e.startsWith("/opt/agent-workspace/")) tools = true;
        else for (const p of this.#match(e)) this.#add(more, p);
      }
      // A tool's own program runs even where a deny rule names it: the tool, not the agent, runs it.
      gids = [...new Set([...this.#base, ...this.#gids(more, false), ...(tools ? [this.#manifest.toolsGid] : [])])];
      if (this.#extra.size < 16) this.#extra.set(key, gids);
    }
    return gids;
  }

  /** setpriv's path in the image. */
  get setpriv(): string {
    return this.#manifest.setpriv;
  }

  /** env(1)'s path in the image (always allowed: a wrapper), or plain "env" to be looked up. */
  get env(): string {
    this.#envPath ??= this.#match("env")[0] ?? "env";
    return this.#envPath;
  }
  #envPath: string | undefined;

  #gids(paths: Set<string>, applyDeny: boolean): number[] {
    const out = new Set<number>();
    for (const p of paths) {
      if (applyDeny && this.#denied.has(p) && !SHELLS.some((s) => this.#real(s) === p)) continue;
      const gid = this.#manifest.groups[p];
      if (gid !== undefined) out.add(gid);
    }
    return [...out];
  }

  /** Adds a program, its interpreters and its helpers. */
  #add(into: Set<string>, real: string | undefined): void {
    if (real === undefined || into.has(real) || this.#manifest.groups[real] === undefined) return;
    into.add(real);
    const interp = this.#manifest.interpreters[real];
    if (interp !== undefined) {
      if (interp.startsWith("env:")) {
        for (const p of this.#match("env")) this.#add(into, p);
        for (const p of this.#match(interp.slice(4))) this.#add(into, p);
      } else {
        this.#add(into, this.#real(interp));
      }
    }
    for (const [name, helpers] of Object.entries(HELPERS)) {
      if (!this.#match(name).includes(real)) continue;
      for (const h of helpers) for (const p of this.#match(h)) this.#add(into, p);
    }
  }

  /** Real paths of the programs a pattern names: a bare name in the PATH directories, a path anywhere. */
  #match(pattern: string): string[] {
    const re = programPattern(pattern);
    const out = new Set<string>();
    if (pattern.includes("/")) {
      const literal = !/[*?]/.test(pattern.replace(/\\./g, ""));
      if (literal) {
        const r = this.#real(pattern.replace(/\\(.)/g, "$1"));
        if (r !== undefined) out.add(r);
      } else {
        for (const dir of new Set([path.posix.dirname(pattern)])) {
          for (const name of listDir(dir)) {
            const full = path.posix.join(dir, name);
            if (re.test(full)) {
              const r = this.#real(full);
              if (r !== undefined) out.add(r);
            }
          }
        }
      }
    } else {
      for (const dir of PATH_DIRS) {
        for (const name of listDir(dir)) {
          if (!re.test(name)) continue;
          const r = this.#real(path.posix.join(dir, name));
          if (r !== undefined) out.add(r);
        }
      }
    }
    return [...out].filter((r) => this.#manifest.groups[r] !== undefined);
  }

  #real(p: string): string | undefined {
    try {
      const r = realpathSync(p);
      return statSync(r).isFile() ? r : undefined;
    } catch {
      return undefined;
    }
  }
}

/** Names in a directory, none when it cannot be read. */
function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
