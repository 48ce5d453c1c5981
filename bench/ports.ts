/**
 * Section (v): background processes and exposed ports (issue 31). In a workspace of each provider,
 * a Node application started with StartProcess serves 100 MB at /big and a few bytes elsewhere;
 * ExposePort puts it at /ports/{workspace}/{port}/ on the server. curl downloads through the
 * proxy, interleaved with the same download straight from the same application on the host's
 * loopback (a local workspace's, the only one the host can reach: a container's has no route from
 * the host, which is the point). Also the time to first byte of a small request both ways, and
 * StartProcess + WaitProcess of `true` against a no-op Bash (what the background path costs).
 *
 * Goals: throughput through the proxy at least 0.5× straight (the egress proxy's goal: the same
 * tunnels carry it); the rest is reported for information.
 */
import { execFile } from "node:child_process";
import { randomInt } from "node:crypto";
import { promisify } from "node:util";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ProcessService } from "../gen/agentworkspace/v1/process_pb.js";
import { type BenchContext, createWorkspace, type SectionResult } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

const run = promisify(execFile);

/** Options of section (v). */
export interface PortsOptions {
  providers: string[];
  /** 100 MB downloads per way. */
  downloads: number;
  /** Small requests per way (time to first byte), and StartProcess / Bash calls. */
  requests: number;
}

const BIG = 100 * 1024 * 1024;

/** The application: 100 MB at /big, "small" elsewhere; prints "up" once it listens. */
const APP = `
const size = ${BIG};
const chunk = Buffer.alloc(1024 * 1024, 97);
require("node:http").createServer((req, res) => {
  if (req.url !== "/big") return res.end("small");
  res.writeHead(200, { "content-length": String(size) });
  let sent = 0;
  const pump = () => {
    while (sent < size) {
      sent += chunk.length;
      if (!res.write(chunk)) return void res.once("drain", pump);
    }
    res.end();
  };
  pump();
}).listen(Number(process.argv[2]), "127.0.0.1", () => console.log("up"));
`;

/** curl's own timings of one transfer: seconds to first byte, bytes per second, bytes. */
async function curl(url: string): Promise<{ ttfb: number; speed: number; size: number }> {
  const { stdout } = await run("curl", ["-sS", "-o", "/dev/null", "-w", "%{time_starttransfer} %{speed_download} %{size_download}", url], { maxBuffer: 1 << 20 });
  const [ttfb, speed, size] = stdout.trim().split(" ").map(Number);
  return { ttfb, speed, size };
}

export async function benchPorts(ctx: BenchContext, options: PortsOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = {};
  const sessions = new Http2SessionManager(ctx.server.url);
  const procs = createClient(ProcessService, createGrpcTransport({ baseUrl: ctx.server.url, sessionManager: sessions }));
  const { tools } = ctx.clients.grpc;
  /** The local workspace's application: the straight baseline every provider's proxy is put against. */
  let straight: string | undefined;
  /** Deleting a workspace ends its application; the local one's goes last. */
  let local: { delete(): Promise<void> } | undefined;
  try {
    for (const provider of ["local", ...options.providers.filter((p) => p !== "local")]) {
      const made = await createWorkspace(ctx, provider);
      if (!made.ok) {
        skipped.push(`(v) ${provider}: ${made.reason}`);
        continue;
      }
      const ws = made.workspace;
      if (provider === "local") local = ws;
      try {
        const node = provider === "local" ? process.execPath : "/opt/agent-workspace/node";
        const port = provider === "local" ? 20_000 + randomInt(20_000) : 3000;
        await tools.writeFile({ workspaceId: ws.id, path: "app.cjs", content: APP });
        const started = await procs.startProcess({ workspaceId: ws.id, command: `exec ${node} app.cjs ${port}` });
        const processId = started.process?.processId ?? "";
        for (let i = 0; i < 600; i++) {
          const out = await procs.readProcessOutput({ workspaceId: ws.id, processId });
          if (Buffer.from(out.stdout).toString().includes("up")) break;
          if (i === 599) throw new Error(`the application did not start: ${Buffer.from(out.stderr).toString().slice(0, 300)}`);
          await new Promise((r) => setTimeout(r, 50));
        }
        const exposed = await procs.exposePort({ workspaceId: ws.id, port });
        const proxied = `${ctx.server.url}${exposed.port?.path ?? ""}`;
        if (provider === "local") straight = `http://127.0.0.1:${port}/`;
        if (straight === undefined) throw new Error("no straight baseline");

        // Downloads, interleaved: straight, then through the proxy.
        const ways = { straight: [] as number[], proxy: [] as number[] };
        for (let i = 0; i < options.downloads; i++) {
          for (const [way, url] of [["straight", straight], ["proxy", proxied]] as const) {
            const r = await curl(`${url}big`);
            if (r.size !== BIG) throw new Error(`a ${way} download got ${r.size} bytes`);
            ways[way].push(r.speed / 1e6);
          }
        }
        const s = summarize(ways.straight);
        const p = summarize(ways.proxy);
        rows.push({ section: "v ports", metric: `100 MB through /ports/ (${provider}), p50`, server: round(p.p50, 1), baseline: round(s.p50, 1), unit: "MB/s", ratio: round(p.p50 / s.p50), goal: "≥ 0.5×", pass: p.p50 / s.p50 >= 0.5, note: "baseline: straight from the local workspace's application" });

        // Time to first byte of a small answer.
        const ttfb = { straight: [] as number[], proxy: [] as number[] };
        for (let i = 0; i < options.requests; i++) {
          for (const [way, url] of [["straight", straight], ["proxy", proxied]] as const) ttfb[way].push((await curl(`${url}small`)).ttfb * 1000);
        }
        const ts = summarize(ttfb.straight);
        const tp = summarize(ttfb.proxy);
        rows.push({ section: "v ports", metric: `small request through /ports/ (${provider}), time to first byte p50`, server: round(tp.p50, 2), baseline: round(ts.p50, 2), unit: "ms", ratio: round(tp.p50 / ts.p50), goal: "info", note: "a new tunnel per request, dialled inside the sandbox" });

        // StartProcess + WaitProcess of `true` vs a no-op Bash, interleaved.
        const calls = { bash: [] as number[], process: [] as number[] };
        for (let i = 0; i < options.requests; i++) {
          let t0 = performance.now();
          await tools.bash({ workspaceId: ws.id, command: "true" });
          calls.bash.push(performance.now() - t0);
          t0 = performance.now();
          const proc = await procs.startProcess({ workspaceId: ws.id, command: "true" });
          await procs.waitProcess({ workspaceId: ws.id, processId: proc.process?.processId ?? "", timeoutMs: 30_000n });
          calls.process.push(performance.now() - t0);
        }
        const cb = summarize(calls.bash);
        const cp = summarize(calls.process);
        rows.push({ section: "v ports", metric: `StartProcess + WaitProcess of true (${provider}), p50`, server: round(cp.p50, 2), baseline: round(cb.p50, 2), unit: "ms", ratio: round(cp.p50 / cb.p50), goal: "info", note: "baseline: a no-op Bash" });
        data[provider] = { download: { straight: s, proxy: p }, ttfb: { straight: ts, proxy: tp }, calls: { bash: cb, process: cp } };
      } catch (err) {
        skipped.push(`(v) ${provider}: ${String(err).slice(0, 300)}`);
      } finally {
        // The local application is the baseline of the providers after it: it stays until the end.
        if (provider !== "local") await ws.delete();
      }
    }
  } finally {
    await local?.delete();
    sessions.abort();
  }
  return { rows, data, skipped };
}
