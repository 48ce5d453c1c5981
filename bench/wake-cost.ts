/**
 * `node bench/wake-cost.ts [--calls=N] [--sleep-ms=N]`: what this host charges for running code
 * right after its thread slept. The same fixed piece of work is timed three ways, in this process:
 * back to back; each time after the thread slept `--sleep-ms` on a timer (as a server's main thread
 * sleeps between a request and the next, and while a command runs); and so again while niced
 * spinners keep every core busy, so that no core goes idle while this thread sleeps.
 *
 * Two pieces of work: the server's own audit path of a no-op `Bash` (the audit trail's two
 * interceptors around a handler that answers at once: the summary, the redaction, the span, the
 * record; its store only counts) and a neutral one (a 1 KiB JSON document stringified and parsed
 * ten times). Both allocate and run JIT-compiled code, as a call does.
 *
 * Why: a server's CPU per call is the time its threads run after being woken, at least twice per
 * `Bash` (the request, the launcher's answer; `bench/thread-cpu.ts` counts the sleeps). On a host
 * where a thread runs several times slower just after a sleep (cold caches and TLB, or a virtual
 * CPU the hypervisor descheduled while it idled), the CPU per call says more about the host than
 * about the code; its instruction count (`bench/instr-count.ts`) does not move with that.
 */
import { spawn, type ChildProcess } from "node:child_process";
import os from "node:os";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { createContextValues, type UnaryRequest } from "@connectrpc/connect";
import { BashRequestSchema, BashResponseSchema, ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { AuditTrail } from "../server/audit/audit-trail.ts";
import { Redactor } from "../server/audit/redact.ts";
import { PRINCIPAL, type Principal } from "../server/auth/principal.ts";
import type { Logger } from "../server/logger.ts";
import type { AuditStore } from "../server/store/store.ts";
import { summarize } from "./stats.ts";

const { values } = parseArgs({ options: { calls: { type: "string", default: "2000" }, "sleep-ms": { type: "string", default: "1" } } });
const calls = Number(values.calls);
const sleepMs = Number(values["sleep-ms"]);
if (!Number.isInteger(calls) || calls < 10 || !(sleepMs > 0)) throw new Error("--calls: a whole number ≥ 10; --sleep-ms: a positive number");

let records = 0;
const store: AuditStore = {
  append: async (rows) => {
    records += rows.length;
  },
  query: async () => [],
  prune: async () => 0,
};
const quiet = { debug() {}, info() {}, warn() {}, error() {} } as unknown as Logger;
const trail = new AuditTrail({
  settings: { maxAgeMs: 0, maxRows: 0, watchBuffer: 100, changeScan: { maxEntries: 1000, maxMs: 100 }, otlp: undefined },
  store,
  logger: quiet,
  redactor: new Redactor(["a-server-api-key-0123456789"]),
  describe: () => ({ provider: "local", agentType: "default", sessionId: "" }),
  workspaceOfSession: () => "",
});
const response = create(BashResponseSchema, { exitCode: 0, durationMs: 3n, stdoutTotalBytes: 0n });
const handler = trail.outer(
  trail.inner(async (req) => ({ stream: false, service: req.service, method: req.method, header: new Headers(), trailer: new Headers(), message: response }) as never),
);
const header = new Headers({ "content-type": "application/grpc" });
const operator: Principal = { kind: "operator", id: "bench" } as Principal;

async function auditPath(): Promise<void> {
  const contextValues = createContextValues();
  contextValues.set(PRINCIPAL, operator);
  const message = create(BashRequestSchema, { workspaceId: "ws-0123456789abcdef", command: "true" });
  const req = { stream: false, service: ToolService, method: ToolService.method.bash, requestMethod: "POST", url: "/agentworkspace.v1.ToolService/Bash", header, contextValues, signal: new AbortController().signal, message };
  await handler(req as unknown as UnaryRequest);
}

const document = { entries: Array.from({ length: 12 }, (_, i) => ({ name: `file-${i}.ts`, size: 1000 + i, modified: "2026-12-03T18:00:00Z", mode: "0644", kind: "file" })) };
let sink = 0;
async function json(): Promise<void> {
  for (let i = 0; i < 10; i++) sink += (JSON.parse(JSON.stringify(document)) as typeof document).entries.length;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The elapsed microseconds of each of `calls` runs of `work`, each after `gapMs` of sleep (0: back
 * to back). Elapsed, not the thread's CPU clock: on a kernel that accounts CPU time by its tick
 * (the AMD EPYC guest of 2026-12-03: the thread's clock moves in steps of 4 ms), a run of 50 µs
 * reads as 0 or 4,000.
 */
async function timeIt(work: () => Promise<void>, gapMs: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < calls; i++) {
    if (gapMs > 0) await sleep(gapMs);
    const t0 = process.hrtime.bigint();
    await work();
    out.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return out;
}

/** Spinners still running: killed however this process ends, and each bounded in time by `timeout` besides. */
const spinning = new Set<ChildProcess>();
/** Kills each spinner's process group: `timeout` leads one (it does so unless told `--foreground`), the loop in it. */
const stopSpinners = () => {
  for (const p of spinning) {
    try {
      process.kill(-(p.pid as number), "SIGKILL");
    } catch {
      // Already gone.
    }
  }
  spinning.clear();
};
process.once("exit", stopSpinners);
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    stopSpinners();
    process.exit(130);
  });
}

/**
 * Niced busy loops, one per core, so no core idles while this thread sleeps. Each ends by itself
 * after ten times the series' expected length (at least a minute), should this process be killed
 * outright.
 */
function spinners(): void {
  const bound = Math.max(60, Math.ceil((calls * (sleepMs + 1) * 10) / 1000));
  for (let i = 0; i < os.availableParallelism(); i++) {
    const p = spawn("timeout", ["-s", "KILL", String(bound), "nice", "-n", "19", "sh", "-c", "while :; do :; done"], { stdio: "ignore" });
    spinning.add(p);
    p.once("exit", () => spinning.delete(p));
  }
}

const works: [string, () => Promise<void>][] = [
  ["the audit path of a no-op Bash", auditPath],
  ["1 KiB JSON, stringified and parsed 10 times", json],
];
// Warm up: every piece compiled before anything is timed.
for (const [, work] of works) for (let i = 0; i < 20_000; i++) await work();

const us = (n: number) => `${n.toFixed(1).padStart(7)} µs`;
console.log(`${calls} runs each, elapsed p50 (mean); load ${os.loadavg()[0].toFixed(2)} at the start`);
for (const [name, work] of works) {
  const hot = await timeIt(work, 0);
  const cold = await timeIt(work, sleepMs);
  spinners();
  let warmCores;
  try {
    warmCores = await timeIt(work, sleepMs);
  } finally {
    stopSpinners();
  }
  const base = summarize(hot).p50;
  console.log(`${name}:`);
  for (const [label, r] of [
    ["back to back", hot],
    [`after a ${sleepMs} ms sleep`, cold],
    [`after a ${sleepMs} ms sleep, every core kept busy`, warmCores],
  ] as const) {
    const { p50, mean } = summarize(r);
    console.log(`  ${label.padEnd(44)} ${us(p50)} (${us(mean)})  ${(p50 / base).toFixed(1)}× back to back`);
  }
}
await trail.close();
if (records === 0 || sink === 0) throw new Error("the work did nothing");
