/**
 * Resource limits of local workspaces, as far as a host process can be limited without a sandbox.
 *
 * - Memory, processes and CPU: a cgroup per workspace, where the server may make one (it runs as
 *   root, or was delegated its cgroup). cgroup v1 (a hierarchy per controller): beneath the
 *   server's own cgroup in each hierarchy, so commands stay inside whatever bounds the server.
 *   cgroup v2: beneath `agent-workspace-<tag>` at the root of the unified hierarchy, because v2
 *   forbids controllers below a cgroup that holds processes (the server's own). The kernel then
 *   OOM-kills a command past its memory (exit 137, reported as `oom_killed`), fails forks past
 *   the process limit, and throttles CPU to the quota.
 * - File size: RLIMIT_FSIZE at the disk limit, so no single file a command writes grows past it
 *   (the write fails with EFBIG and SIGXFSZ). The total a workspace writes is not bounded here.
 * - Without a memory cgroup: RLIMIT_DATA at the memory limit, per process.
 *
 * Commands run in their cgroups under their rlimits from their first instruction: the executor
 * starts the workspace's launcher (executor/launcher.ts) once through `/bin/sh -c '<join>; ulimit
 * …; exec "$@"'` (`prefix`), and every command is a fork of the launcher, born there. Without a
 * launcher each command goes through that shell itself (one more exec, under a millisecond, and on
 * cgroup v1 about 0.7 ms per hierarchy joined). A cgroup or limit that cannot be applied stops the
 * launcher or the command (exit 125) rather than running it unbounded.
 *
 * Not isolated here, and documented as such: a command runs as the server's user, so it could
 * move itself to another cgroup the user may write, and raise nothing but lower its rlimits.
 */
import { accessSync, closeSync, constants as fsConstants, openSync, readFileSync, readSync } from "node:fs";
import { mkdir, readFile, rmdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { errnoCode } from "../core/errors.ts";
import type { Limits } from "./types.ts";

/** The controllers used, by their v1/v2 names. */
const CONTROLLERS = ["memory", "pids", "cpu"] as const;
type Controller = (typeof CONTROLLERS)[number];

/** Where workspace cgroups go, per controller (v1) or for all (v2). */
type Layout =
  | { version: 1; parents: Partial<Record<Controller, string>> }
  | { version: 2; parent: string; controllers: Set<Controller> };

/** What this host lets the local provider enforce. */
export interface LocalEnforcement {
  memory: "cgroup" | "rlimit-data";
  pids: "cgroup" | "none";
  cpu: "cgroup" | "none";
  /** Per file, never in total. */
  disk: "rlimit-fsize";
  /** Why cgroups are not used, when they are not. */
  reason: string;
}

/** One workspace's limits as commands get them. */
export interface WorkspaceLimits {
  /**
   * The command that runs its arguments under the workspace's limits ([] when there are none): the
   * executor starts the workspace's launcher through it (or, without one, each command; see
   * `wrapCommand` in executor/launcher.ts).
   */
  prefix(): string[];
  /** The workspace's cumulative OOM-kill count (0 without a memory cgroup). */
  oomKills(): number;
}

/**
 * Cgroups and rlimits of the local provider's workspaces. A workspace's cgroups live as long as
 * its open handle (made by `prepare` when it is opened, removed by `remove` when it is closed or
 * deleted), so a server that stops leaves none behind; this server's parent cgroups are made on
 * first use and removed by `dispose`.
 */
export class LocalLimits {
  readonly #layout: Layout | undefined;
  #parents: Promise<void> | undefined;
  readonly enforcement: LocalEnforcement;
  /** Open descriptors of workspaces' OOM counters, by workspace. */
  readonly #oomFds = new Map<string, number>();

  #closeOom(id: string): void {
    const fd = this.#oomFds.get(id);
    this.#oomFds.delete(id);
    if (fd !== undefined) closeSync(fd);
  }

  /** `tag` names this server's cgroups (one data directory's workspaces). */
  constructor(tag: string, cgroupRoot = "/sys/fs/cgroup", proc = "/proc/self") {
    const found = findLayout(`agent-workspace-${tag}`, cgroupRoot, proc);
    this.#layout = found.layout;
    const has = (c: Controller) => (found.layout?.version === 1 ? found.layout.parents[c] !== undefined : found.layout?.controllers.has(c) === true);
    this.enforcement = {
      memory: has("memory") ? "cgroup" : "rlimit-data",
      pids: has("pids") ? "cgroup" : "none",
      cpu: has("cpu") ? "cgroup" : "none",
      disk: "rlimit-fsize",
      reason: found.reason,
    };
  }

  /**
   * Makes (or finds again, after a restart) workspace `id`'s cgroups with `limits`; idempotent.
   * Throws when a cgroup the host offers cannot be made: commands must not run unbounded.
   */
  async prepare(id: string, limits: Limits): Promise<WorkspaceLimits> {
    checkId(id);
    const layout = this.#layout;
    if (layout !== undefined) await this.#makeParents();
    const dirs: string[] = [];
    let memoryDir: string | undefined;
    const wanted: Record<Controller, boolean> = { memory: limits.memoryBytes > 0, pids: limits.pids > 0, cpu: limits.cpus > 0 };
    const quota = Math.max(1000, Math.round(limits.cpus * 100_000));
    if (layout?.version === 1) {
      for (const c of CONTROLLERS) {
        const parent = layout.parents[c];
        if (!parent || !wanted[c]) continue;
        const dir = path.join(parent, id);
        await mkdir(dir, { recursive: true });
        if (c === "memory") {
          await writeFile(path.join(dir, "memory.limit_in_bytes"), String(limits.memoryBytes));
          await writeOptional(path.join(dir, "memory.memsw.limit_in_bytes"), String(limits.memoryBytes));
          memoryDir = dir;
        } else if (c === "pids") {
          await writeFile(path.join(dir, "pids.max"), String(limits.pids));
        } else {
          await writeFile(path.join(dir, "cpu.cfs_period_us"), "100000");
          await writeFile(path.join(dir, "cpu.cfs_quota_us"), String(quota));
        }
        dirs.push(dir);
      }
    } else if (layout?.version === 2 && CONTROLLERS.some((c) => wanted[c] && layout.controllers.has(c))) {
      const dir = path.join(layout.parent, id);
      await mkdir(dir, { recursive: true });
      if (wanted.memory && layout.controllers.has("memory")) {
        await writeFile(path.join(dir, "memory.max"), String(limits.memoryBytes));
        await writeOptional(path.join(dir, "memory.swap.max"), "0");
        memoryDir = dir;
      }
      if (wanted.pids && layout.controllers.has("pids")) await writeFile(path.join(dir, "pids.max"), String(limits.pids));
      if (wanted.cpu && layout.controllers.has("cpu")) await writeFile(path.join(dir, "cpu.max"), `${quota} 100000`);
      dirs.push(dir);
    }
    // v1: the shell moves its own (only) thread, `echo 0 > tasks`, which spares the kernel the
    // global lock a whole-process move takes (an RCU grace period, milliseconds on a busy host);
    // what it execs and forks is then born there. v2 moves whole processes only.
    const steps = dirs.map((d) => (layout?.version === 1 ? `echo 0 >${quote(path.join(d, "tasks"))}` : `echo $$ >${quote(path.join(d, "cgroup.procs"))}`));
    // POSIX sh counts -f in 512-byte blocks; -d (dash, bash) in KiB.
    if (limits.diskBytes > 0) steps.push(`ulimit -f ${Math.ceil(limits.diskBytes / 512)}`);
    if (limits.memoryBytes > 0 && memoryDir === undefined) steps.push(`ulimit -d ${Math.ceil(limits.memoryBytes / 1024)}`);
    const script = steps.length === 0 ? "" : `${steps.join(" && ")} && exec "$@"; echo "agent-workspace: the workspace's resource limits could not be applied" >&2; exit 125`;
    const oomFile = memoryDir === undefined ? undefined : path.join(memoryDir, layout?.version === 1 ? "memory.oom_control" : "memory.events");
    return {
      prefix() {
        return script === "" ? [] : ["/bin/sh", "-c", script, "agent-workspace-limits"];
      },
      oomKills: () => {
        if (oomFile === undefined) return 0;
        // Read before every command: kept open and read again from its start (one system call).
        try {
          let fd = this.#oomFds.get(id);
          if (fd === undefined) {
            fd = openSync(oomFile, "r");
            this.#oomFds.set(id, fd);
          }
          const n = readSync(fd, oomBuffer, 0, oomBuffer.length, 0);
          return Number(/^oom_kill (\d+)$/m.exec(oomBuffer.toString("latin1", 0, n))?.[1] ?? 0);
        } catch {
          this.#closeOom(id);
          return 0;
        }
      },
    };
  }

  /**
   * Kills whatever still runs in workspace `id`'s cgroups (commands that escaped their call
   * included) and removes them. Idempotent.
   */
  async remove(id: string): Promise<void> {
    checkId(id);
    this.#closeOom(id);
    for (const dir of this.#dirs(id)) {
      for (let round = 0; ; round++) {
        const pids = await readFile(path.join(dir, "cgroup.procs"), "utf8").then(
          (text) => text.split("\n").filter((l) => l !== "").map(Number),
          (err: unknown) => (errnoCode(err) === "ENOENT" ? undefined : []),
        );
        if (pids === undefined) break; // No such cgroup.
        for (const pid of pids) {
          try {
            process.kill(pid, "SIGKILL");
          } catch {
            // Gone already.
          }
        }
        try {
          await rmdir(dir);
          break;
        } catch (err) {
          const code = errnoCode(err);
          if (code === "ENOENT") break;
          // EBUSY: the killed processes are still exiting.
          if (code !== "EBUSY" || round >= 100) throw err;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    }
  }

  /**
   * The processes in workspace `id`'s cgroup (every command of the workspace and what it started),
   * or undefined where this host gives workspaces no cgroup.
   */
  async processes(id: string): Promise<number[] | undefined> {
    checkId(id);
    const dir = this.#dirs(id)[0];
    if (dir === undefined) return undefined;
    return readFile(path.join(dir, "cgroup.procs"), "utf8").then(
      (text) => text.split("\n").filter((l) => l !== "").map(Number),
      (err: unknown) => {
        if (errnoCode(err) === "ENOENT") return [];
        throw err;
      },
    );
  }

  /** Removes this server's parent cgroups when no workspace cgroup is left in them. */
  async dispose(): Promise<void> {
    for (const id of [...this.#oomFds.keys()]) this.#closeOom(id);
    const layout = this.#layout;
    if (layout === undefined || this.#parents === undefined) return;
    this.#parents = undefined;
    for (const parent of layout.version === 1 ? Object.values(layout.parents) : [layout.parent]) await rmdir(parent).catch(() => undefined);
  }

  /** Makes this server's parent cgroups once (on v2 with the controllers enabled below them). */
  #makeParents(): Promise<void> {
    const layout = this.#layout!;
    this.#parents ??= (async () => {
      if (layout.version === 1) {
        for (const parent of Object.values(layout.parents)) await mkdir(parent, { recursive: true });
      } else {
        await mkdir(layout.parent, { recursive: true });
        await writeFile(path.join(layout.parent, "cgroup.subtree_control"), [...layout.controllers].map((c) => `+${c}`).join(" "));
      }
    })();
    this.#parents.catch(() => (this.#parents = undefined));
    return this.#parents;
  }

  #dirs(id: string): string[] {
    const layout = this.#layout;
    if (layout === undefined) return [];
    if (layout.version === 2) return [path.join(layout.parent, id)];
    return Object.values(layout.parents).map((p) => path.join(p, id));
  }
}

function checkId(id: string): void {
  if (!/^[A-Za-z0-9_-]+$/.test(id)) throw new Error(`not a workspace id: ${id}`);
}

async function writeOptional(file: string, value: string): Promise<void> {
  await writeFile(file, value).catch((err: unknown) => {
    // No swap accounting on this kernel: there is no swap limit to set.
    if (errnoCode(err) !== "ENOENT") throw err;
  });
}

/** Where OOM counters are read into (a few short lines). */
const oomBuffer = Buffer.alloc(4096);

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Finds where this process may make workspace cgroups below a parent named `name`: the v1
 * hierarchies of the controllers where the server's own cgroup is writable, or the v2 hierarchy
 * when its root is writable and offers the controllers. Creates nothing; what is not usable is
 * left out, with the reason.
 */
function findLayout(name: string, cgroupRoot: string, proc: string): { layout: Layout | undefined; reason: string } {
  let mountinfo: string;
  let membership: string;
  try {
    mountinfo = readFileSync(path.join(proc, "mountinfo"), "utf8");
    membership = readFileSync(path.join(proc, "cgroup"), "utf8");
  } catch {
    return { layout: undefined, reason: "cgroups are not visible (/proc/self/cgroup)" };
  }
  const mounts = mountinfo
    .split("\n")
    .map((line) => {
      const [left, right] = line.split(" - ");
      if (right === undefined) return undefined;
      const fields = left.split(" ");
      const [fstype, , superOptions] = right.split(" ");
      return { root: unescape(fields[3]), point: unescape(fields[4]), fstype, options: (superOptions ?? "").split(",") };
    })
    .filter((m): m is NonNullable<typeof m> => m !== undefined && (m.fstype === "cgroup" || m.fstype === "cgroup2") && m.point.startsWith(cgroupRoot));
  const own = new Map<string, string>();
  for (const line of membership.split("\n")) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    if (m[1] === "") own.set("", m[2]);
    for (const c of m[1].split(",")) own.set(c, m[2]);
  }
  const v1 = CONTROLLERS.filter((c) => mounts.some((m) => m.fstype === "cgroup" && m.options.includes(c)));
  if (v1.length > 0) {
    const parents: Partial<Record<Controller, string>> = {};
    const problems: string[] = [];
    for (const c of v1) {
      const mount = mounts.find((m) => m.fstype === "cgroup" && m.options.includes(c))!;
      const mine = own.get(c);
      const rel = mine === undefined ? undefined : relativeTo(mine, mount.root);
      if (rel === undefined) {
        problems.push(`${c}: the server's cgroup is outside the visible hierarchy`);
        continue;
      }
      try {
        accessSync(path.join(mount.point, rel), fsConstants.W_OK);
        parents[c] = path.join(mount.point, rel, name);
      } catch (err) {
        problems.push(`${c}: ${errnoCode(err) ?? String(err)}`);
      }
    }
    return { layout: Object.keys(parents).length > 0 ? { version: 1, parents } : undefined, reason: problems.length > 0 ? `cgroup v1 ${problems.join(", ")}` : "" };
  }
  const unified = mounts.find((m) => m.fstype === "cgroup2" && m.root === "/");
  if (!unified) return { layout: undefined, reason: "no cgroup hierarchy is mounted" };
  try {
    // What the root hands down to its children (systemd enables memory, pids and cpu there).
    const available = readFileSync(path.join(unified.point, "cgroup.subtree_control"), "utf8").trim().split(/\s+/);
    const controllers = new Set(CONTROLLERS.filter((c) => available.includes(c)));
    if (controllers.size === 0) return { layout: undefined, reason: "cgroup v2 offers none of memory, pids, cpu" };
    accessSync(unified.point, fsConstants.W_OK);
    return { layout: { version: 2, parent: path.join(unified.point, name), controllers }, reason: "" };
  } catch (err) {
    return { layout: undefined, reason: `cgroup v2: ${errnoCode(err) ?? String(err)} (the server needs root, or a delegated cgroup)` };
  }
}

/** `p` relative to the mount's root, or undefined when it lies outside it. */
function relativeTo(p: string, root: string): string | undefined {
  if (root === "/") return p;
  if (p === root) return "/";
  return p.startsWith(`${root}/`) ? p.slice(root.length) : undefined;
}

/** mountinfo escapes spaces, tabs, newlines and backslashes as octal. */
function unescape(s: string | undefined): string {
  return (s ?? "").replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
}
