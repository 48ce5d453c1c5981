/**
 * Prepares an image for workspaces whose command policy is an allowlist (see programs.ts). Run
 * once per base image by the server (providers/enforced-image.ts), as root, with no network, in
 * a container of that image whose result becomes the prepared image:
 *
 * - every program file gets a group of its own (hard links share it), owner root, mode 0750: only
 *   root and that group may read or execute it. Programs are the real files behind the entries of
 *   the PATH directories, ELF executables anywhere (shared libraries and the dynamic loader
 *   excepted: every program needs them), and scripts in the libexec directories. Set-id bits go
 *   (no-new-privileges makes them inert anyway);
 * - /opt/agent-workspace, where the server mounts its Node binary, the executor and ripgrep, is
 *   reachable only by root and one group (the grep tool's ripgrep gets it): an agent never runs
 *   the server's Node;
 * - the manifest (programs.ts, MANIFEST_PATH) records each program's group, each script's
 *   interpreter, and setpriv, which starts commands with their groups; an image without setpriv
 *   (util-linux) cannot be prepared.
 *
 * Prints one JSON line with what it did; exits non-zero with a message on stderr when the image
 * cannot be prepared.
 */
import { appendFileSync, chmodSync, chownSync, closeSync, existsSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, realpathSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { loadManifest, MANIFEST_PATH, normalRules, PATH_DIRS, POLICY_GID, POLICY_PATH, type PolicyLayer, PREPARE_VERSION, type ProgramManifest, type ProgramRules, ProgramSet, TOOLS_GID } from "./programs.ts";

/** The first group given to a program; the tools' group is the one below. */
const FIRST_GID = 61001;
/** Where the server mounts its own files into sandboxes (docker.ts MOUNT). */
const SERVER_MOUNT = "/opt/agent-workspace";
/** Trees never walked: kernel filesystems, the server's mounts, the workspace and scratch space. */
const SKIP = new Set(["/proc", "/sys", "/dev", SERVER_MOUNT, "/workspace", "/tmp", "/var/tmp", "/run"]);
/** Directories whose executable scripts are programs too (helpers other programs run by path). */
const LIBEXEC = [/^\/usr\/lib\/git-core\//, /^\/usr\/libexec\//, /^\/usr\/local\/libexec\//, /^\/usr\/lib\/[^/]+\/libexec\//];

function fail(message: string): never {
  process.stderr.write(`prepare-image: ${message}\n`);
  process.exit(1);
}

if (process.getuid?.() !== 0) fail("must run as root");

/** The first bytes of a file (its ELF header or its #! line). */
function head(file: string, bytes = 512): Buffer {
  const fd = openSync(file, "r");
  try {
    const buf = Buffer.alloc(bytes);
    return buf.subarray(0, readSync(fd, buf, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

/** What an executable file is: a program, or something every program needs (a library, the loader). */
function kind(file: string, start: Buffer): "program" | "script" | "library" | "other" {
  if (start.length >= 4 && start[0] === 0x7f && start.toString("latin1", 1, 4) === "ELF") {
    const base = path.posix.basename(file);
    if (/\.so(\.|$)/.test(base) || /^ld[-.]/.test(base)) return "library";
    // ET_EXEC (2) is a program; ET_DYN (3) is one when it names an interpreter (a PIE), a library otherwise.
    const little = start[5] === 1;
    const type = little ? start.readUInt16LE(16) : start.readUInt16BE(16);
    if (type === 2) return "program";
    if (type === 3 && hasInterpreter(start, little)) return "program";
    return "library";
  }
  return start.toString("latin1", 0, 2) === "#!" ? "script" : "other";
}

/** True when a 64- or 32-bit ELF header lists a PT_INTERP program header (within the bytes read). */
function hasInterpreter(h: Buffer, little: boolean): boolean {
  const is64 = h[4] === 2;
  const u16 = (o: number) => (little ? h.readUInt16LE(o) : h.readUInt16BE(o));
  const u32 = (o: number) => (little ? h.readUInt32LE(o) : h.readUInt32BE(o));
  const phoff = is64 ? Number(little ? h.readBigUInt64LE(32) : h.readBigUInt64BE(32)) : u32(28);
  const phentsize = u16(is64 ? 54 : 42);
  const phnum = u16(is64 ? 56 : 44);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > h.length) return true; // Beyond what was read: count it as a program (the safe side).
    if (u32(at) === 3) return true;
  }
  return false;
}

/** A script's interpreter: its real path, or `env:NAME` for `#!/usr/bin/env [-S] NAME`. */
function interpreterOf(start: Buffer): string | undefined {
  const line = start.toString("latin1").split("\n")[0].slice(2).trim();
  const [prog, ...args] = line.split(/\s+/);
  if (!prog) return undefined;
  if (path.posix.basename(prog) === "env") {
    const name = args.find((a) => !a.startsWith("-") && !a.includes("="));
    return name ? `env:${name}` : undefined;
  }
  try {
    return realpathSync(prog);
  } catch {
    return prog;
  }
}


/** The full preparation of a base image (see the module comment). */
function prepare(): void {
  const rootDev = statSync("/").dev;
  const programs = new Map<string, "program" | "script">();

  /** Collects executable regular files below `dir`, on the root filesystem only. */
  function walk(dir: string): void {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      const full = dir === "/" ? `/${name}` : `${dir}/${name}`;
      if (SKIP.has(full)) continue;
      let st;
      try {
        st = lstatSync(full);
      } catch {
        continue;
      }
      // Another filesystem (a mount) is not the image's; overlayfs reports files' own devices, so only directories are compared.
      if (st.isDirectory()) {
        if (st.dev === rootDev) walk(full);
      } else if (st.isFile() && (st.mode & 0o111) !== 0) {
        const k = kind(full, head(full));
        if (k === "program") programs.set(full, "program");
        else if (k === "script" && LIBEXEC.some((re) => re.test(full))) programs.set(full, "script");
      }
    }
  }
  walk("/");

  // Whatever a PATH directory offers is a program, scripts included, wherever its real file lives.
  for (const dir of PATH_DIRS) {
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      try {
        const real = realpathSync(path.posix.join(dir, name));
        const st = statSync(real);
        if (st.isFile() && (st.mode & 0o111) !== 0 && !programs.has(real)) {
          const k = kind(real, head(real));
          if (k === "program" || k === "script") programs.set(real, k);
        }
      } catch {
        // A dangling link.
      }
    }
  }

  const manifest: ProgramManifest = { version: PREPARE_VERSION, groups: {}, interpreters: {}, toolsGid: TOOLS_GID, setpriv: "" };
  const byInode = new Map<string, number>();
  const groupLines: string[] = [`aw-tools:x:${TOOLS_GID}:`];
  const usedNames = new Set<string>();
  let next = FIRST_GID;
  for (const [file, k] of [...programs].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const st = statSync(file);
    const inode = `${st.dev}:${st.ino}`;
    let gid = byInode.get(inode);
    if (gid === undefined) {
      gid = next++;
      byInode.set(inode, gid);
      let name = `aw-${path.posix.basename(file).replace(/[^A-Za-z0-9_.-]/g, "_")}`.slice(0, 28);
      while (usedNames.has(name)) name = `${name.slice(0, 22)}-${gid}`;
      usedNames.add(name);
      groupLines.push(`${name}:x:${gid}:`);
    }
    // Every name, hard links included: overlayfs copies a file up on its first change, after which
    // its other names no longer share its inode.
    chownSync(file, 0, gid);
    chmodSync(file, 0o750);
    manifest.groups[file] = gid;
    if (k === "script") {
      const interp = interpreterOf(head(file));
      if (interp !== undefined) manifest.interpreters[file] = interp;
    }
  }

  for (const dir of PATH_DIRS) {
    try {
      const real = realpathSync(path.posix.join(dir, "setpriv"));
      if (manifest.groups[real] !== undefined) {
        manifest.setpriv = real;
        break;
      }
    } catch {
      // Not in this directory.
    }
  }
  if (manifest.setpriv === "") fail("the image has no setpriv (util-linux), which starts a command with the groups of its allowed programs");

  // Named groups, so that `id` and `ls -l` in a sandbox say which program a group is for.
  if (existsSync("/etc/group")) {
    const existing = readFileSync("/etc/group", "utf8");
    const taken = new Set(existing.split("\n").map((l) => l.split(":")[2]));
    const lines = groupLines.filter((l) => !taken.has(l.split(":")[2]));
    if (lines.length > 0) appendFileSync("/etc/group", `${existing.endsWith("\n") || existing === "" ? "" : "\n"}${lines.join("\n")}\n`);
  }

  mkdirSync(SERVER_MOUNT, { recursive: true });
  chownSync(SERVER_MOUNT, 0, TOOLS_GID);
  chmodSync(SERVER_MOUNT, 0o710);
  mkdirSync(path.posix.dirname(MANIFEST_PATH), { recursive: true, mode: 0o755 });
  writeFileSync(MANIFEST_PATH, `${JSON.stringify(manifest)}\n`, { mode: 0o644 });
  process.stdout.write(`${JSON.stringify({ programs: Object.keys(manifest.groups).length, groups: byInode.size, setpriv: manifest.setpriv })}\n`);
}

/**
 * A policy layer over a prepared image (`--policy <base64url JSON ProgramRules>`): the programs
 * that policy allows (programs.ts, with what they need) change to POLICY_GID, every name of each,
 * so that its commands start with that one group and no setpriv. The rest stays as prepared.
 */
function layer(encoded: string): void {
  const rules = normalRules(JSON.parse(Buffer.from(encoded, "base64url").toString("utf8")) as ProgramRules);
  const set = new ProgramSet(loadManifest(), rules);
  for (const file of set.allowed) chownSync(file, 0, POLICY_GID);
  const record: PolicyLayer = { version: PREPARE_VERSION, rules, gid: POLICY_GID };
  writeFileSync(POLICY_PATH, `${JSON.stringify(record)}\n`, { mode: 0o644 });
  if (existsSync("/etc/group") && !readFileSync("/etc/group", "utf8").split("\n").some((l) => l.split(":")[2] === String(POLICY_GID))) {
    appendFileSync("/etc/group", `aw-allowed:x:${POLICY_GID}:\n`);
  }
  process.stdout.write(`${JSON.stringify({ allowed: set.allowed.length })}\n`);
}

const at = process.argv.indexOf("--policy");
if (at >= 0) layer(process.argv[at + 1] ?? fail("--policy needs its rules"));
else prepare();
