/**
 * Benchmark harness: `npm run bench [-- --quick] [--only=a,b,c] [--providers=local,docker,gvisor] [--profile]`.
 *
 * Starts the server in a child process (bench/server-child.ts) with a fresh data directory, runs
 * the selected sections against raw baselines measured in the same run, prints a table with each
 * ratio, its goal and PASS/MISS, and writes everything to bench/results/latest.json. A MISS is
 * information, not a failure: the exit code is 0 unless the harness itself failed.
 *
 * Sections: (a) `latency` — no-op Bash vs spawn / docker exec; (b) `grep` — Grep and
 * StreamGrep vs ripgrep; (c) `stream` — StreamBash throughput and server memory under a slow
 * reader; (d) `files` — ReadFile, WriteFile and Glob on each provider vs the local provider;
 * (e) `peer` — our file tools vs the reference MCP filesystem server on the same files;
 * (f) `reads` — ReadFile vs a no-op RPC (health check), latency and rate at 16 in flight;
 * (g) `mixed` — 16 workspaces under a mixed load vs the same work done directly;
 * (h) `memory` — memory per idle workspace (server RSS; containers vs raw `sleep` containers);
 * (i) `kill` — how fast a timed-out command tree dies; (j) `create` — cold CreateWorkspace vs
 * mkdir / raw docker create+start; (k) `sessions` — StartSession to ACTIVE, cold and from a warm
 * pool, vs the same raw baseline; (l) `policy` — the command policy's parse-and-check vs spawning
 * `bash -c true`; (m) `audit` — a tool call unwatched, with a live WatchEvents reader and with a
 * stalled one; (n) `egress` — a 100 MB download and the time to first byte through the egress
 * proxy vs straight (and through docker and gvisor workspaces); (o) `git`; (p) `mounts`; (q) `enforcement` — a no-op Bash under
 * an allowlist (setpriv, program groups) and in a workspace of 20,000 files (the sweep) vs a plain one, on
 * docker and gvisor; (r) `client-ts` — the TypeScript client's per-call overhead over raw connect-es; (s) `mcp` — the MCP bridge's file tools (stdio and /mcp) vs the reference MCP filesystem server; (t) `changes` — a no-op Bash with and without the change scan that follows a watched command, in 10 and in 10,000 files; (u) `microvm` — the microvm provider against gvisor (create restored from a template, and a cold boot with snapshots off; small operations, a 100 MB stream, idle memory); (v) `ports` — downloads and small requests through the port proxy vs straight, StartProcess vs Bash. `--providers` applies to (a), (d), (g), (h), (i), (j), (k), (n), (p), (q) and (t).
 * `--profile` runs the server with `--cpu-prof` (profiles in bench/results/profiles).
 * `node bench/table.ts` turns bench/results/latest.json into a Markdown table for the README.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { type BenchContext, type SectionResult, liveWorkspaces, sleep } from "./context.ts";
import { benchAudit } from "./audit.ts";
import { benchChanges } from "./changes.ts";
import { benchClientTs } from "./client-ts.ts";
import { benchCreate } from "./create.ts";
import { benchMicrovm } from "./microvm.ts";
import { liveRawContainers } from "./docker.ts";
import { benchFiles } from "./files.ts";
import { benchGrep } from "./grep.ts";
import { benchKill } from "./kill.ts";
import { benchLatency } from "./latency.ts";
import { benchMemory } from "./memory.ts";
import { benchMixed } from "./mixed.ts";
import { benchPeer } from "./peer.ts";
import { benchMcp } from "./mcp.ts";
import { benchReads } from "./reads.ts";
import { benchPolicy } from "./policy.ts";
import { benchEgress, EGRESS_BENCH_ENV } from "./egress.ts";
import { benchPorts } from "./ports.ts";
import { benchDatabase } from "./database.ts";
import { benchEnforcement } from "./enforcement.ts";
import { benchGit } from "./git.ts";
import { benchMounts, MOUNT_ROOT } from "./mounts.ts";
import { benchSessions } from "./sessions.ts";
import { formatTable, type Row } from "./report.ts";
import { type Clients, type ServerProcess, createClients, startServerProcess } from "./server-process.ts";
import { benchThroughput } from "./throughput.ts";

const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
const RESULTS_DIR = path.join(BENCH_DIR, "results");
const ROOT = path.join(BENCH_DIR, "..");
const KNOWN_PROVIDERS = ["local", "docker", "gvisor", "microvm"];
/** Section letters and their names, in running order. */
const NAMES = { a: "latency", b: "grep", c: "stream", d: "files", e: "peer", f: "reads", g: "mixed", h: "memory", i: "kill", j: "create", k: "sessions", l: "policy", m: "audit", n: "egress", o: "git", p: "mounts", q: "enforcement", r: "client-ts", s: "mcp", t: "changes", u: "microvm", v: "ports", w: "database" } as const;
type Section = keyof typeof NAMES;
/** What `--only` accepts: letters, names, and an alias. */
const SECTIONS: Record<string, Section> = { throughput: "c" };
for (const [letter, name] of Object.entries(NAMES) as Array<[Section, string]>) SECTIONS[letter] = SECTIONS[name] = letter;

const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

function parseOptions() {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      only: { type: "string" },
      providers: { type: "string", default: "local" },
      profile: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(
      "usage: npm run bench -- [--quick] [--only=a,b,…,w] [--providers=local,docker,gvisor] [--profile]\n" +
        "  a|latency   no-op Bash latency vs spawn (and docker exec for container providers)\n" +
        "  b|grep      Grep/StreamGrep vs ripgrep on a generated tree\n" +
        "  c|stream    StreamBash throughput and server RSS under a slow reader\n" +
        "  d|files     ReadFile 4 KiB, WriteFile 1 MiB, Glob over 1,000 files on each provider vs local\n" +
        "  e|peer      read/write/edit/list vs the reference MCP filesystem server (local provider)\n" +
        "  f|reads     ReadFile 4 KiB vs a no-op RPC (health check): p50/p99, and rate at 16 in flight (local)\n" +
        "  g|mixed     16 workspaces, mixed bash/read/write/edit/grep loop vs the same work done directly\n" +
        "  h|memory    server RSS and container memory per idle workspace vs raw sleep containers\n" +
        "  i|kill      time for a timed-out command tree (setsid, nohup, TERM-ignoring) to die\n" +
        "  j|create    cold CreateWorkspace vs mkdir / raw docker create+start\n" +
        "  k|sessions  StartSession to ACTIVE, cold and from a warm pool, vs mkdir / raw docker create+start\n" +
        "  l|policy    the command policy's check vs spawning bash -c true\n" +
        "  m|audit     a tool call unwatched, with a live and with a stalled WatchEvents reader\n" +
        "  n|egress    downloads through the egress proxy vs straight\n" +
        "  o|git       the git tools vs raw git\n" +
        "  p|mounts    host mounts' share of CreateWorkspace vs cp -a\n" +
        "  q|enforcement  no-op Bash under an allowlist and with a large tree (the sweep) vs plain (docker, gvisor)\n" +
        "  r|client-ts  the TypeScript client's per-call overhead over raw connect-es (ReadFile, no-op Bash)\n" +
        "  s|mcp       the MCP bridge's read/write/edit/list (stdio and /mcp) vs the reference MCP filesystem server\n" +
        "  t|changes   a no-op Bash with and without the change scan of a watched command\n" +
        "  u|microvm   the microvm provider vs gvisor: create (restored, and cold with snapshots off), no-op Bash, ReadFile, WriteFile, a 100 MB stream, idle memory\n" +
        "  v|ports     background processes: downloads and small requests through /ports/ vs straight, StartProcess vs Bash\n" +
        "  --providers applies to a, d, g, h, i, j, k, n, p, q, t and v\n",
    );
    process.exit(0);
  }
  const only = new Set<Section>();
  for (const name of (values.only ?? Object.keys(NAMES).join(",")).split(",").map((s) => s.trim()).filter(Boolean)) {
    const s = SECTIONS[name];
    if (!s) throw new Error(`unknown section '${name}' (use ${Object.entries(NAMES).map(([l, n]) => `${l}|${n}`).join(", ")})`);
    only.add(s);
  }
  const providers: string[] = [];
  const notes: string[] = [];
  for (const p of values.providers.split(",").map((s) => s.trim()).filter(Boolean)) {
    if (KNOWN_PROVIDERS.includes(p)) providers.push(p);
    else notes.push(`unknown provider '${p}' skipped (known: ${KNOWN_PROVIDERS.join(", ")})`);
  }
  for (const n of notes) log(n);
  return { quick: values.quick, only, providers, profile: values.profile, notes };
}

function gitInfo(): { commit: string; dirty: boolean } | undefined {
  try {
    const commit = execFileSync("git", ["rev-parse", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain"], { cwd: ROOT, encoding: "utf8" }).trim() !== "";
    return { commit, dirty };
  } catch {
    return undefined;
  }
}

function countProcesses(): number | undefined {
  try {
    return readdirSync("/proc").filter((e) => /^\d+$/.test(e)).length;
  } catch {
    return undefined;
  }
}

/** Settings per section, scaled down by --quick. */
function sectionSettings(quick: boolean, providers: string[]) {
  return {
    a: { providers, iterations: quick ? 200 : 2000, containerIterations: quick ? 50 : 300, warmup: quick ? 20 : 100 },
    b: {
      tree: quick ? { files: 4000, totalBytes: 20_000_000, needles: 7, seed: 42 } : { files: 20_000, totalBytes: 100_000_000, needles: 7, seed: 42 },
      runs: quick ? 2 : 5,
      limitWarmup: quick ? 5 : 20,
      limitRuns: quick ? 10 : 40,
      maxResults: 100,
    },
    c: { bytes: quick ? 20_000_000 : 200_000_000, runs: quick ? 1 : 3, slowBytes: quick ? 10_000_000 : 50_000_000, slowDelayMs: 5 },
    d: { providers, iterations: quick ? 50 : 300, warmup: quick ? 10 : 30 },
    e: { iterations: quick ? 100 : 500, warmup: quick ? 20 : 50 },
    f: { iterations: quick ? 200 : 1000, warmup: quick ? 20 : 100, concurrency: 16, rateMs: quick ? 1000 : 3000 },
    g: { providers, workspaces: 16, rounds: quick ? 2 : 5, sliceMs: quick ? 1500 : 2000 },
    h: { providers, workspaces: quick ? 10 : 50, settleMs: quick ? 1000 : 3000, executorIdleMs: 0 },
    i: { providers, runs: quick ? 3 : 10 },
    j: { providers, iterations: quick ? 3 : 8 },
    k: { providers, iterations: quick ? { local: 5, docker: 3, gvisor: 2, microvm: 3 } : { local: 20, docker: 10, gvisor: 6, microvm: 10 }, poolSize: 3 },
    l: { iterations: quick ? 200 : 2000, warmup: quick ? 20 : 200 },
    m: { iterations: quick ? 200 : 1000, warmup: quick ? 20 : 100 },
    n: { downloads: quick ? 2 : 5, requests: quick ? 20 : 100 },
    o: { iterations: quick ? 30 : 200, warmup: quick ? 5 : 20, commits: quick ? 10 : 50 },
    p: { providers, iterations: quick ? 3 : 10, files: 2000, totalBytes: 20_000_000 },
    q: { providers, iterations: quick ? 20 : 100, warmup: quick ? 3 : 10 },
    r: { iterations: quick ? 300 : 2000, warmup: quick ? 50 : 200 },
    s: { iterations: quick ? 100 : 500, warmup: quick ? 20 : 50 },
    t: { providers, iterations: quick ? 20 : 100, warmup: quick ? 3 : 10 },
    u: { creations: quick ? 5 : 20, coldBoots: quick ? 1 : 3, iterations: quick ? 20 : 100, drains: quick ? 1 : 3 },
    v: { providers, downloads: quick ? 2 : 5, requests: quick ? 20 : 100 },
    w: { iterations: quick ? 30 : 200, warmup: quick ? 5 : 20, rounds: quick ? 2 : 4, sliceMs: quick ? 1500 : 3000, workers: 8 },
  };
}

async function main(): Promise<void> {
  const opts = parseOptions();
  const root = await mkdtemp(path.join(os.tmpdir(), "aw-bench-"));
  const nodeArgs = opts.profile ? ["--cpu-prof", `--cpu-prof-dir=${path.join(RESULTS_DIR, "profiles")}`] : [];
  const settings = sectionSettings(opts.quick, opts.providers);

  let server: ServerProcess | undefined;
  let clients: Clients | undefined;
  const stopServer = async () => {
    if (liveWorkspaces.size > 0) await Promise.race([Promise.allSettled([...liveWorkspaces].map((w) => w.delete())), sleep(15_000)]);
    if (liveRawContainers.size > 0) await Promise.race([Promise.allSettled([...liveRawContainers].map((c) => c.remove())), sleep(15_000)]);
    clients?.close();
    clients = undefined;
    await server?.stop();
    server = undefined;
  };
  let cleaning: Promise<void> | undefined;
  const cleanup = () =>
    (cleaning ??= (async () => {
      await stopServer();
      await rm(root, { recursive: true, force: true }).catch(() => undefined);
    })());
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => {
      log(`${sig}: cleaning up`);
      void cleanup().finally(() => process.exit(130));
    });
  }

  /** Runs one section against a fresh server child, so sections do not inherit each other's memory. */
  const withServer = async (section: string, containers: boolean, fn: (ctx: BenchContext) => Promise<SectionResult>, env: Record<string, string> = {}) => {
    const dataDir = path.join(root, section);
    await mkdir(dataDir, { recursive: true });
    server = await startServerProcess({ dataDir, env: { ...(containers ? {} : { AGENT_WORKSPACE_DOCKER: "off" }), ...env }, nodeArgs });
    log(`[${section}] server pid ${server.pid} at ${server.url}, providers: ${server.providers.join(", ")}, rss ${Math.round((await server.stats()).rss / 2 ** 20)} MiB`);
    clients = createClients(server.url);
    try {
      return await fn({ server, clients, dataDir, quick: opts.quick, log });
    } catch (err) {
      const tail = server.stderrTail();
      if (tail.length > 0) log(`server stderr (last ${tail.length} lines):\n${tail.join("\n")}`);
      throw err;
    } finally {
      await stopServer();
    }
  };

  try {
    const startedAt = new Date();
    const loadBefore = os.loadavg();
    log(`load average ${loadBefore.map((x) => x.toFixed(2)).join(" ")} on ${os.cpus().length} CPUs${opts.profile ? "; server runs with --cpu-prof" : ""}`);
    const results: Record<string, SectionResult> = {};
    if (opts.only.has("a")) results.latency = await withServer("latency", opts.providers.some((p) => p !== "local"), (ctx) => benchLatency(ctx, settings.a));
    if (opts.only.has("b")) results.grep = await withServer("grep", false, (ctx) => benchGrep(ctx, settings.b));
    if (opts.only.has("c")) results.stream = await withServer("stream", false, (ctx) => benchThroughput(ctx, settings.c));
    if (opts.only.has("d")) results.files = await withServer("files", opts.providers.some((p) => p !== "local"), (ctx) => benchFiles(ctx, settings.d));
    if (opts.only.has("e")) results.peer = await withServer("peer", false, (ctx) => benchPeer(ctx, settings.e));
    const containers = opts.providers.some((p) => p !== "local");
    if (opts.only.has("f")) results.reads = await withServer("reads", false, (ctx) => benchReads(ctx, settings.f));
    if (opts.only.has("g")) results.mixed = await withServer("mixed", containers, (ctx) => benchMixed(ctx, settings.g));
    if (opts.only.has("h")) {
      results.memory = await withServer("memory", containers, (ctx) => benchMemory(ctx, settings.h), { AGENT_WORKSPACE_EXECUTOR_IDLE_MS: "0" });
      // The same with executors that exit when idle: settled past their idle time.
      const idle = { ...settings.h, executorIdleMs: 1000, settleMs: settings.h.settleMs + 3000 };
      results.memoryIdleExit = await withServer("memory", containers, (ctx) => benchMemory(ctx, idle), { AGENT_WORKSPACE_EXECUTOR_IDLE_MS: String(idle.executorIdleMs) });
    }
    if (opts.only.has("i")) results.kill = await withServer("kill", containers, (ctx) => benchKill(ctx, settings.i));
    if (opts.only.has("j")) results.create = await withServer("create", containers, (ctx) => benchCreate(ctx, settings.j));
    // Pools refill every tick: 50 ms (the minimum) rather than 1 s, so a new pool fills at once.
    if (opts.only.has("k")) results.sessions = await withServer("sessions", containers, (ctx) => benchSessions(ctx, settings.k), { AGENT_WORKSPACE_SESSION_TICK_MS: "50" });

    if (opts.only.has("l")) results.policy = await benchPolicy(settings.l);
    if (opts.only.has("m")) results.audit = await withServer("audit", false, (ctx) => benchAudit(ctx, settings.m));
    if (opts.only.has("n")) {
      const sandboxes = opts.providers.filter((p) => p === "docker" || p === "gvisor");
      results.egress = await benchEgress(settings.n, { providers: sandboxes, withServer: (fn) => withServer("egress", true, fn, EGRESS_BENCH_ENV) });
    }
    if (opts.only.has("o")) results.git = await withServer("git", false, (ctx) => benchGit(ctx, settings.o));
    if (opts.only.has("p")) {
      await mkdir(MOUNT_ROOT, { recursive: true });
      results.mounts = await withServer("mounts", containers, (ctx) => benchMounts(ctx, settings.p), { AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: MOUNT_ROOT });
    }
    if (opts.only.has("q")) results.enforcement = await withServer("enforcement", true, (ctx) => benchEnforcement(ctx, settings.q));
    if (opts.only.has("r")) results.clientTs = await withServer("client-ts", false, (ctx) => benchClientTs(ctx, settings.r));
    if (opts.only.has("s")) results.mcp = await withServer("mcp", false, (ctx) => benchMcp(ctx, settings.s));
    if (opts.only.has("t")) results.changes = await withServer("changes", true, (ctx) => benchChanges(ctx, settings.t));
    if (opts.only.has("u")) results.microvm = await withServer("microvm", true, (ctx) => benchMicrovm(ctx, settings.u));
    if (opts.only.has("v")) results.ports = await withServer("ports", containers, (ctx) => benchPorts(ctx, settings.v));
    if (opts.only.has("w")) results.database = await benchDatabase(settings.w, root, log);

    const rows: Row[] = Object.values(results).flatMap((r) => r.rows);
    const skipped = [...opts.notes, ...Object.values(results).flatMap((r) => r.skipped)];
    const loadAfter = os.loadavg();
    process.stdout.write(`\n${formatTable(rows)}\n`);
    if (skipped.length > 0) process.stdout.write(`\nskipped:\n${skipped.map((s) => `  - ${s}`).join("\n")}\n`);
    const passed = rows.filter((r) => r.pass === true).length;
    const missed = rows.filter((r) => r.pass === false).length;
    process.stdout.write(`\n${passed} PASS, ${missed} MISS (a MISS is information, not a failure)\n`);
    process.stdout.write(`load average before ${loadBefore.map((x) => x.toFixed(2)).join(" ")}, after ${loadAfter.map((x) => x.toFixed(2)).join(" ")} (${os.cpus().length} CPUs)\n`);
    // The run itself keeps about two CPUs busy, so only the load found before it tells of other work.
    if (loadBefore[0] > os.cpus().length / 2) {
      process.stdout.write("warning: the host was already busy when the run started; ratios are less reliable than usual\n");
    }

    const report = {
      startedAt: startedAt.toISOString(),
      finishedAt: new Date().toISOString(),
      quick: opts.quick,
      sections: [...opts.only].map((s) => NAMES[s]),
      providers: opts.providers,
      git: gitInfo(),
      host: {
        node: process.version,
        platform: `${os.platform()} ${os.release()}`,
        cpus: os.cpus().length,
        cpuModel: os.cpus()[0]?.model,
        memoryMiB: Math.round(os.totalmem() / 2 ** 20),
        /** Processes on the host: the server's per-exec /proc sweep scales with this. */
        processes: countProcesses(),
        loadavgBefore: loadBefore,
        loadavgAfter: loadAfter,
      },
      settings: Object.fromEntries([...opts.only].map((s) => [NAMES[s], settings[s]])),
      rows,
      skipped,
      data: Object.fromEntries(Object.entries(results).map(([k, r]) => [k, r.data])),
    };
    mkdirSync(RESULTS_DIR, { recursive: true });
    const out = path.join(RESULTS_DIR, "latest.json");
    writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    log(`wrote ${path.relative(process.cwd(), out)}`);
  } finally {
    await cleanup();
  }
}

main().catch((err: unknown) => {
  log(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exitCode = 1;
});
