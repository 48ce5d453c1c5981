/**
 * What every benchmark section gets (the server child, clients, options) and returns (rows for
 * the table, raw data for the JSON report), plus workspace and measurement helpers shared by the
 * sections.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import type { Row } from "./report.ts";
import type { ServerStats } from "./server-child.ts";
import type { Clients, ServerProcess } from "./server-process.ts";

/** Shared state of one benchmark run. */
export interface BenchContext {
  server: ServerProcess;
  clients: Clients;
  /** The server's data directory (local workspaces live in `<dataDir>/workspaces/<id>`). */
  dataDir: string;
  quick: boolean;
  /** Progress output (stderr), so stdout keeps only the table. */
  log(msg: string): void;
}

/** What a section produces. */
export interface SectionResult {
  rows: Row[];
  /** Raw measurements for bench/results/latest.json. */
  data: Record<string, unknown>;
  /** Human-readable reasons for parts that did not run. */
  skipped: string[];
}

/** A workspace created for a section; `delete` is idempotent and never throws. */
export interface BenchWorkspace {
  id: string;
  provider: string;
  delete(): Promise<void>;
}

/** Workspaces created and not yet deleted, so an interrupted run can still remove them. */
export const liveWorkspaces = new Set<BenchWorkspace>();

/** Outcome of trying to create a workspace on a provider. */
export type CreateOutcome = { ok: true; workspace: BenchWorkspace } | { ok: false; reason: string };

/**
 * Creates a workspace on `provider` through the gRPC client. A provider the server does not
 * configure (UNKNOWN_PROVIDER), or one that fails, is reported as a reason instead of thrown.
 */
export async function createWorkspace(ctx: BenchContext, provider: string): Promise<CreateOutcome> {
  try {
    const res = await ctx.clients.grpc.workspaces.createWorkspace({ provider, labels: { purpose: "bench" } });
    const id = res.workspace?.id ?? "";
    let deleted = false;
    const workspace: BenchWorkspace = {
      id,
      provider,
      async delete() {
        if (deleted) return;
        deleted = true;
        liveWorkspaces.delete(workspace);
        try {
          await ctx.clients.grpc.workspaces.deleteWorkspace({ id });
        } catch (err) {
          ctx.log(`warning: could not delete workspace ${id}: ${String(err)}`);
        }
      },
    };
    liveWorkspaces.add(workspace);
    return { ok: true, workspace };
  } catch (err) {
    const ce = ConnectError.from(err);
    const reason = ce.findDetails(ErrorDetailSchema)[0]?.reason;
    if (reason === ErrorReason.UNKNOWN_PROVIDER) return { ok: false, reason: `provider '${provider}' is not configured on the server (${ce.rawMessage})` };
    return { ok: false, reason: `creating a '${provider}' workspace failed: ${ce.rawMessage}` };
  }
}

/**
 * Creates `count` workspaces on `provider`, `concurrency` at a time. If any creation fails, the
 * ones made are deleted and the first failure's reason is returned.
 */
export async function createWorkspaces(ctx: BenchContext, provider: string, count: number, concurrency = 4): Promise<{ ok: true; workspaces: BenchWorkspace[] } | { ok: false; reason: string }> {
  const outcomes = await mapLimit(Array.from({ length: count }), concurrency, () => createWorkspace(ctx, provider));
  const workspaces = outcomes.flatMap((o) => (o.ok ? [o.workspace] : []));
  const failed = outcomes.find((o) => !o.ok);
  if (!failed) return { ok: true, workspaces };
  await mapLimit(workspaces, concurrency, (w) => w.delete());
  return { ok: false, reason: failed.reason };
}

/** Runs `fn` over `items`, `concurrency` at a time; the results keep the items' order. */
export async function mapLimit<T, R>(items: readonly T[], concurrency: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}

/** Host directory of a local-provider workspace. */
export function localWorkspaceDir(ctx: BenchContext, id: string): string {
  return path.join(ctx.dataDir, "workspaces", id);
}

/** CPU time (user + system) the server spent between two of its stats, in milliseconds. */
export function serverCpuMs(before: ServerStats, after: ServerStats): number {
  return (after.cpuUserUs + after.cpuSystemUs - before.cpuUserUs - before.cpuSystemUs) / 1000;
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Bytes to mebibytes. */
export function mib(bytes: number): number {
  return bytes / (1024 * 1024);
}

/** One timed call: resolves to its duration in milliseconds (after checking its result). */
export type Measure = () => Promise<number>;

/** Times `call`, then hands its result to `check`, which throws if the call did not do its job. */
export function timed<T>(call: () => Promise<T>, check?: (result: T) => void): Measure {
  return async () => {
    const t0 = performance.now();
    const result = await call();
    const ms = performance.now() - t0;
    check?.(result);
    return ms;
  };
}

/** Runs every series round-robin (rotating the order each round) and returns their samples. */
export async function interleave(series: Record<string, Measure>, warmup: number, iterations: number): Promise<Record<string, number[]>> {
  const names = Object.keys(series);
  const out: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  for (let i = 0; i < warmup + iterations; i++) {
    for (let j = 0; j < names.length; j++) {
      const name = names[(i + j) % names.length];
      const ms = await series[name]();
      if (i >= warmup) out[name].push(ms);
    }
  }
  return out;
}

/**
 * Creates `perDir` one-line text files (`f00.txt`, `f01.txt`, …, zero-padded) in each of `dirs`
 * (plain workspace-relative names) with a single `Bash` call, so it works alike on every provider.
 */
export async function createTextFiles(ctx: BenchContext, workspaceId: string, dirs: string[], perDir: number): Promise<void> {
  const command = `set -e; for d in ${dirs.join(" ")}; do mkdir -p $d; for i in $(seq -w 0 ${perDir - 1}); do echo "file $d/$i" > $d/f$i.txt; done; done`;
  const res = await ctx.clients.grpc.tools.bash({ workspaceId, command });
  if (res.exitCode !== 0) throw new Error(`creating ${dirs.length * perDir} files failed (exit ${res.exitCode}): ${res.stderr}`);
}

/** Spawns `command args…` (no shell, default pipes) and runs it to its end; resolves to its exit code and stdout. */
export function run(command: string, args: string[], options: { cwd?: string } = {}): Promise<{ code: number | null; stdout: string }> {
  const child = spawn(command, args, { cwd: options.cwd });
  const chunks: Buffer[] = [];
  child.stdout.on("data", (c: Buffer) => chunks.push(c));
  child.stderr.resume();
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout: Buffer.concat(chunks).toString("utf8") }));
  });
}

/**
 * A spawn baseline taken where a user's own `spawn` would run: a minimal Node process (this Node,
 * nothing loaded but `child_process`) that times `spawn(command, args)` to its exit itself, on
 * request. A big process forks slowly (its page tables are copied), so the same spawn timed inside
 * the bench process costs several times more and flatters whatever it is compared with.
 */
export interface MinimalSpawner {
  /** Times one spawn to its exit, in the minimal process; rejects if the command failed. */
  measure: Measure;
  close(): void;
}

/** Starts a minimal process that spawns `command args` each time it is asked (see MinimalSpawner). */
export function minimalSpawner(command: string, args: string[]): MinimalSpawner {
  const script = `
    const { spawn } = require("node:child_process");
    const [command, ...args] = JSON.parse(process.argv[1]);
    let buf = "";
    process.stdin.on("data", (d) => {
      buf += d;
      while (buf.includes("\\n")) {
        buf = buf.slice(buf.indexOf("\\n") + 1);
        const t0 = process.hrtime.bigint();
        const child = spawn(command, args, { stdio: "ignore" });
        child.on("exit", (code) => process.stdout.write(Number(process.hrtime.bigint() - t0) / 1e6 + " " + code + "\\n"));
      }
    });`;
  const child = spawn(process.execPath, ["-e", script, JSON.stringify([command, ...args])], { stdio: ["pipe", "pipe", "inherit"] });
  const waiting: Array<{ resolve: (ms: number) => void; reject: (err: Error) => void }> = [];
  let out = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    out += d;
    let at: number;
    while ((at = out.indexOf("\n")) >= 0) {
      const [ms, code] = out.slice(0, at).split(" ");
      out = out.slice(at + 1);
      const w = waiting.shift();
      if (code !== "0") w?.reject(new Error(`${command} exited ${code} in the minimal process`));
      else w?.resolve(Number(ms));
    }
  });
  let exited = false;
  child.once("exit", () => {
    exited = true;
    for (const w of waiting.splice(0)) w.reject(new Error("the minimal spawner exited"));
  });
  return {
    measure: () =>
      new Promise<number>((resolve, reject) => {
        if (exited) return reject(new Error("the minimal spawner exited"));
        waiting.push({ resolve, reject });
        child.stdin.write("\n");
      }),
    close: () => child.kill(),
  };
}

/** One call of a closed-loop load: by worker (0 … concurrency−1) and that worker's call number. */
export type LoadCall = (worker: number, n: number) => Promise<unknown>;

/** What a closed-loop load measured for one series. */
export interface LoadResult {
  /** Calls that succeeded. */
  ok: number;
  /** Calls that threw. */
  errors: number;
  /** The first few error messages. */
  firstErrors: string[];
  /** Wall time of the measured slices, each up to its last call's end, in seconds. */
  seconds: number;
  /** Successful calls per second. */
  rate: number;
  /** Every measured call's latency (failed ones included), in milliseconds. */
  latenciesMs: number[];
}

/** Options of `interleaveLoad`. */
export interface LoadOptions {
  /** Calls in flight: workers calling back to back. */
  concurrency: number;
  /** Measured slices per series. */
  rounds: number;
  /** Length of a slice, in ms: no call starts after it; the calls in flight finish and count. */
  sliceMs: number;
  /** One unmeasured slice per series of this length first (0 for none). */
  warmupMs?: number;
}

const FIRST_ERRORS = 5;

/**
 * Closed-loop load for several series, taking turns: each round gives every series (order rotating
 * each round) a slice of `sliceMs` with `concurrency` workers calling back to back, so background
 * load hits every series alike. A failed call is counted, its message kept (the first few), and the
 * worker goes on. A worker's call number keeps counting across slices.
 */
export async function interleaveLoad(series: Record<string, LoadCall>, options: LoadOptions): Promise<Record<string, LoadResult>> {
  const names = Object.keys(series);
  const out: Record<string, LoadResult> = Object.fromEntries(names.map((n) => [n, { ok: 0, errors: 0, firstErrors: [], seconds: 0, rate: 0, latenciesMs: [] }]));
  const counters: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, new Array<number>(options.concurrency).fill(0)]));
  const slice = async (name: string, ms: number, into?: LoadResult) => {
    const t0 = performance.now();
    const end = t0 + ms;
    const worker = async (w: number) => {
      while (performance.now() < end) {
        const n = counters[name][w]++;
        const t = performance.now();
        try {
          await series[name](w, n);
          if (into) into.ok++;
        } catch (err) {
          if (!into) continue;
          into.errors++;
          if (into.firstErrors.length < FIRST_ERRORS) into.firstErrors.push(err instanceof Error ? err.message : String(err));
        } finally {
          into?.latenciesMs.push(performance.now() - t);
        }
      }
    };
    await Promise.all(Array.from({ length: options.concurrency }, (_, w) => worker(w)));
    if (into) into.seconds += (performance.now() - t0) / 1000;
  };
  if (options.warmupMs) for (const name of names) await slice(name, options.warmupMs);
  for (let round = 0; round < options.rounds; round++) {
    for (let j = 0; j < names.length; j++) {
      const name = names[(round + j) % names.length];
      await slice(name, options.sliceMs, out[name]);
    }
  }
  for (const r of Object.values(out)) r.rate = r.ok / r.seconds;
  return out;
}
