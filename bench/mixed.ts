/**
 * Section (g): a mixed load on 16 workspaces at once. Each workspace has one worker calling back to
 * back, cycling through five operations (each worker starting at a different one, so every
 * operation is always in the mix): `Bash` of `echo x`, `ReadFile` of a 4 KiB file, `WriteFile` of
 * 4 KiB, `EditFile` flipping one line, and `Grep` of a word in a tree of 50 small files.
 *
 * The baseline is the same work done directly on the same files, with the same 16 workers:
 * - local: `child_process.spawn` of `bash -c 'echo x'`, `fs.readFile`, `fs.writeFile`, the edit as
 *   read + replace + write, and the ripgrep binary of @vscode/ripgrep (`rg --json`) on the tree;
 * - docker, gvisor: a raw dockerode exec into the workspace's own container, as the sandbox user:
 *   `bash -c 'echo x'`, `cat`, a `printf` redirect, `sed -i` on the line, and the container's rg.
 * The two series take turns in slices (~10 s each in all, 3 s with --quick), so background load
 * hits both alike. Goal: ours at least 0.8× the direct operations per second, and no errors (the
 * first few messages go into the note); the p99 of each side is information.
 */
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { rgPath } from "@vscode/ripgrep";
import type Docker from "dockerode";
import { type BenchContext, type BenchWorkspace, type LoadCall, type SectionResult, createTextFiles, createWorkspaces, interleaveLoad, localWorkspaceDir, mapLimit, run } from "./context.ts";
import { CONTAINER_RG, CONTAINER_WORKSPACE, dockerClient, dockerExec, findContainer, providerContainerSpec } from "./docker.ts";
import type { Row } from "./report.ts";
import { median, round, roundSummary, summarize } from "./stats.ts";
import type { ClientSet } from "./server-process.ts";
import { textOfSize } from "./tree.ts";

/** Options of section (g). */
export interface MixedOptions {
  /** Providers to load, in order (local always runs). */
  providers: string[];
  /** Workspaces, one worker each. */
  workspaces: number;
  /** Measured slices per series, and their length in ms. */
  rounds: number;
  sliceMs: number;
}

const GOAL_RATIO = 0.8;
const OPS = ["bash", "read", "write", "edit", "grep"] as const;
type Op = (typeof OPS)[number];
const SMALL = textOfSize(4 * 1024);
const MARKERS = ["marker: alpha", "marker: omega"] as const;
const EDITABLE = `${SMALL.slice(0, 2048)}\n${MARKERS[0]}\n${SMALL.slice(2048)}`;
const TREE_DIRS = Array.from({ length: 5 }, (_, i) => `tree/d${i}`);
const TREE_FILES = 50;
/** Every generated file's line reads "file tree/dN/NN". */
const WORD = "file";

/** One worker's workspace and where the direct baseline reaches its files. */
interface Worker {
  ws: BenchWorkspace;
  /** Host directory (local provider). */
  dir?: string;
  /** The workspace's container (container providers). */
  container?: Docker.Container;
  /** Successful edits so far, by either side: which marker edit.txt holds. */
  edits: number;
}

type Perform = (w: Worker, op: Op) => Promise<void>;

function expect(ok: boolean, what: string): void {
  if (!ok) throw new Error(what);
}

const countMatches = (rgJson: string) => rgJson.split("\n").filter((l) => l.startsWith('{"type":"match"')).length;

/** Flips edit.txt's marker with `edit(old, new)`; counts the edit once it succeeded. */
async function flip(w: Worker, edit: (oldText: string, newText: string) => Promise<void>): Promise<void> {
  await edit(MARKERS[w.edits % 2], MARKERS[(w.edits + 1) % 2]);
  w.edits++;
}

function throughServer(tools: ClientSet["tools"]): Perform {
  return async (w, op) => {
    const workspaceId = w.ws.id;
    switch (op) {
      case "bash": {
        const r = await tools.bash({ workspaceId, command: "echo x" });
        return expect(r.exitCode === 0 && r.stdout === "x\n", `Bash: exit ${r.exitCode}, stdout ${JSON.stringify(r.stdout)}`);
      }
      case "read": {
        const r = await tools.readFile({ workspaceId, path: "read.txt" });
        return expect(r.size === BigInt(SMALL.length), `ReadFile: size ${r.size}`);
      }
      case "write": {
        const r = await tools.writeFile({ workspaceId, path: "write.txt", content: SMALL });
        return expect(r.bytesWritten === BigInt(SMALL.length), `WriteFile: ${r.bytesWritten} bytes`);
      }
      case "edit":
        return flip(w, async (oldString, newString) => {
          const r = await tools.editFile({ workspaceId, path: "edit.txt", oldString, newString });
          expect(r.replacements === 1, `EditFile: ${r.replacements} replacements`);
        });
      case "grep": {
        const r = await tools.grep({ workspaceId, pattern: WORD, path: "tree" });
        return expect(r.matches.length === TREE_FILES, `Grep: ${r.matches.length} matches, expected ${TREE_FILES}`);
      }
    }
  };
}

const directLocal: Perform = async (w, op) => {
  const at = (name: string) => path.join(w.dir as string, name);
  switch (op) {
    case "bash": {
      const r = await run("bash", ["-c", "echo x"]);
      return expect(r.code === 0 && r.stdout === "x\n", `bash: exit ${r.code}`);
    }
    case "read":
      return expect((await readFile(at("read.txt"), "utf8")).length === SMALL.length, "readFile: wrong size");
    case "write":
      return writeFile(at("write.txt"), SMALL);
    case "edit":
      return flip(w, async (oldText, newText) => {
        const text = await readFile(at("edit.txt"), "utf8");
        expect(text.includes(oldText), `edit: '${oldText}' not found`);
        await writeFile(at("edit.txt"), text.replace(oldText, newText));
      });
    case "grep": {
      const r = await run(rgPath, ["--json", "--no-config", "--case-sensitive", "-e", WORD, "--", "tree"], { cwd: w.dir });
      return expect(r.code === 0 && countMatches(r.stdout) === TREE_FILES, `rg: exit ${r.code}, ${countMatches(r.stdout)} matches`);
    }
  }
};

function directExec(user: string): Perform {
  return async (w, op) => {
    const exec = async (cmd: string[], what: string) => {
      const r = await dockerExec(w.container as Docker.Container, cmd, { user, workdir: CONTAINER_WORKSPACE });
      expect(r.exitCode === 0, `docker exec ${what}: exit ${r.exitCode}`);
      return r.stdout;
    };
    switch (op) {
      case "bash":
        return expect((await exec(["bash", "-c", "echo x"], "echo")) === "x\n", "docker exec echo: wrong output");
      case "read":
        return expect((await exec(["cat", "read.txt"], "cat")).length === SMALL.length, "docker exec cat: wrong size");
      case "write":
        return void (await exec(["bash", "-c", 'printf %s "$1" > write.txt', "_", SMALL], "write"));
      case "edit":
        return flip(w, async (oldText, newText) => {
          await exec(["bash", "-c", 'grep -qxF -- "$1" edit.txt && sed -i "s/^$1\\$/$2/" edit.txt', "_", oldText, newText], "edit");
        });
      case "grep": {
        const out = await exec([CONTAINER_RG, "--json", "--no-config", "--case-sensitive", "-e", WORD, "--", "tree"], "rg");
        return expect(countMatches(out) === TREE_FILES, `docker exec rg: ${countMatches(out)} matches`);
      }
    }
  };
}

/** A load series: worker i works on workers[i], cycling through OPS; successful calls are timed by operation. */
function series(workers: Worker[], perform: Perform, byOp: Record<Op, number[]>): LoadCall {
  return async (worker, n) => {
    const op = OPS[(n + worker) % OPS.length];
    const t0 = performance.now();
    await perform(workers[worker], op);
    byOp[op].push(performance.now() - t0);
  };
}

/** Runs the load on one provider's workspaces; the workspaces are the caller's to delete. */
async function loadProvider(ctx: BenchContext, provider: string, workers: Worker[], options: MixedOptions): Promise<{ rows: Row[]; data: unknown }> {
  const tools = ctx.clients.grpc.tools;
  await mapLimit(workers, 4, async (w) => {
    await tools.writeFile({ workspaceId: w.ws.id, path: "read.txt", content: SMALL });
    await tools.writeFile({ workspaceId: w.ws.id, path: "edit.txt", content: EDITABLE });
    await createTextFiles(ctx, w.ws.id, TREE_DIRS, TREE_FILES / TREE_DIRS.length);
  });
  const local = provider === "local";
  const direct = local ? directLocal : directExec(providerContainerSpec(provider).user);
  const directName = local ? "direct" : "docker exec";
  // One cycle of every operation on each side first: warms both up and checks the setup.
  for (const perform of [throughServer(tools), direct]) {
    await Promise.all(workers.map(async (w) => {
      for (const op of OPS) await perform(w, op);
    }));
  }

  const timesByOp = () => Object.fromEntries(OPS.map((o) => [o, [] as number[]])) as Record<Op, number[]>;
  const byOp = { ours: timesByOp(), direct: timesByOp() };
  ctx.log(`(g) ${provider}: ${workers.length} workers, ours vs ${directName}, ${options.rounds} × ${options.sliceMs} ms slices each`);
  const load = await interleaveLoad(
    { ours: series(workers, throughServer(tools), byOp.ours), direct: series(workers, direct, byOp.direct) },
    { concurrency: workers.length, rounds: options.rounds, sliceMs: options.sliceMs },
  );
  const { ours, direct: raw } = load;
  const ratio = ours.rate / raw.rate;
  const p99 = { ours: summarize(ours.latenciesMs).p99, direct: summarize(raw.latenciesMs).p99 };
  const label = `${workers.length} workspaces (${provider})`;
  const rows: Row[] = [
    { section: "g mixed", metric: `mixed ops/s, ${label}`, server: ours.rate, baseline: raw.rate, unit: "ops/s", ratio, goal: `≥ ${GOAL_RATIO}× ${directName}`, pass: ratio >= GOAL_RATIO, note: `p50 ms ours/${directName}: ${OPS.map((op) => `${op} ${median(byOp.ours[op]).toFixed(0)}/${median(byOp.direct[op]).toFixed(0)}`).join(", ")}` },
    { section: "g mixed", metric: `mixed p99, ${label}`, server: p99.ours, baseline: p99.direct, unit: "ms", ratio: p99.ours / p99.direct, goal: "" },
    {
      section: "g mixed",
      metric: `mixed errors, ${label}`,
      server: ours.errors,
      baseline: raw.errors,
      unit: "errors",
      ratio: Number.NaN,
      goal: "0",
      pass: ours.errors === 0,
      note: ours.errors + raw.errors > 0 ? [...ours.firstErrors.map((e) => `ours: ${e}`), ...raw.firstErrors.map((e) => `${directName}: ${e}`)].slice(0, 4).join(" | ") : undefined,
    },
  ];
  const perOp = (side: "ours" | "direct") => Object.fromEntries(OPS.map((op) => [op, roundSummary(summarize(byOp[side][op]))]));
  const side = (r: typeof ours) => ({ perSecond: round(r.rate, 1), ok: r.ok, errors: r.errors, firstErrors: r.firstErrors, seconds: round(r.seconds) });
  return { rows, data: { baseline: directName, ours: { ...side(ours), perOpMs: perOp("ours") }, direct: { ...side(raw), perOpMs: perOp("direct") } } };
}

/** Runs section (g) on local and each requested container provider. */
export async function benchMixed(ctx: BenchContext, options: MixedOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = { workspaces: options.workspaces, rounds: options.rounds, sliceMs: options.sliceMs };
  const docker = options.providers.some((p) => p !== "local") ? dockerClient() : undefined;
  for (const provider of new Set(["local", ...options.providers])) {
    const created = await createWorkspaces(ctx, provider, options.workspaces);
    if (!created.ok) {
      skipped.push(`(g) ${provider}: ${created.reason}`);
      ctx.log(`(g) skipping ${provider}: ${created.reason}`);
      continue;
    }
    try {
      const workers: Worker[] = await Promise.all(
        created.workspaces.map(async (ws) => {
          if (provider === "local") return { ws, dir: localWorkspaceDir(ctx, ws.id), edits: 0 };
          const container = await findContainer(docker as Docker, ws.id);
          if (!container) throw new Error(`(g) container of workspace ${ws.id} not found`);
          return { ws, container, edits: 0 };
        }),
      );
      const result = await loadProvider(ctx, provider, workers, options);
      rows.push(...result.rows);
      data[provider] = result.data;
    } finally {
      await mapLimit(created.workspaces, 4, (w) => w.delete());
    }
  }
  return { rows, data, skipped };
}
