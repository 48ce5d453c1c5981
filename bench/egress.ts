/**
 * Section (n): the egress proxy (issue 16). A 100 MB download from a local HTTP server with curl,
 * straight and through the proxy (CONNECT-less plain HTTP, absolute form, and a CONNECT tunnel),
 * interleaved; and the time to first byte of a small file both ways. The proxy runs in this
 * process with an allowlist naming the server. Then the whole path, with container providers: curl
 * inside a docker or gvisor workspace of an allowlist agent type (the executor's listener, the
 * workspace's egress socket or the tunnel over its channel, the server's proxy) against the same
 * curl on the host, straight; also over the channel on a second server, in the same run.
 * A minimal Node relay (one hop) gives the machine's ceiling for any path with a process in it.
 *
 * Goals: throughput through the proxy at least 0.5× the straight download (the goal); the
 * extra time to first byte is reported for information.
 */
import { execFile, spawn } from "node:child_process";
import { type AddressInfo, createServer as createTcpServer } from "node:net";
import { promisify } from "node:util";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { type ServerProcess, startServerProcess } from "./server-process.ts";
import { EgressPolicy, parseRule } from "../server/egress/destinations.ts";
import { EgressProxy, type EgressWorkspace } from "../server/egress/proxy.ts";
import { createLogger } from "../server/logger.ts";
import type { BenchContext, SectionResult } from "./context.ts";
import type { Row } from "./report.ts";
import { round, summarize } from "./stats.ts";

const run = promisify(execFile);

/** Options of section (n). */
export interface EgressOptions {
  /** Downloads per way. */
  downloads: number;
  /** Small requests per way, for the time to first byte. */
  requests: number;
}

const BIG = 100 * 1024 * 1024;

/** The destination: 100 MB at /big, a few bytes elsewhere; prints its port. */
const SOURCE_SERVER = `
const [host, big] = process.argv.slice(1);
const size = Number(big);
const chunk = Buffer.alloc(1024 * 1024, 97);
const server = require("node:http").createServer((req, res) => {
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
});
server.listen(0, host, () => console.log(server.address().port));
`;
const HOST = "127.0.0.2";

/** curl's own timings of one transfer: seconds to first byte, bytes per second. */
async function curl(url: string, proxy?: string, tunnel = false): Promise<{ ttfb: number; speed: number; size: number }> {
  const args = ["-sS", "-o", "/dev/null", "-w", "%{time_starttransfer} %{speed_download} %{size_download}", ...(proxy ? ["-x", proxy] : []), ...(tunnel ? ["-p"] : []), url];
  const { stdout } = await run("curl", args, { maxBuffer: 1 << 20 });
  const [ttfb, speed, size] = stdout.trim().split(" ").map(Number);
  return { ttfb, speed, size };
}

/** Server settings the whole-path part needs: the destination's name and its (loopback) address allowed. */
export const EGRESS_BENCH_ENV = { AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: `${HOST}/32`, AGENT_WORKSPACE_EGRESS_HOSTS: `files.bench=${HOST}` };

/** Runs `fn` against a server started with EGRESS_BENCH_ENV. */
export type WithServer = (fn: (ctx: BenchContext) => Promise<SectionResult>) => Promise<SectionResult>;

/** A minimal relay, one hop, no proxy logic: every connection piped to the destination both ways. */
const RELAY = `
const [to, toPort] = process.argv.slice(1);
const net = require("node:net");
const server = net.createServer((c) => {
  const u = net.connect(Number(toPort), to);
  c.on("error", () => u.destroy());
  u.on("error", () => c.destroy());
  c.pipe(u);
  u.pipe(c);
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
`;

/** Starts a node child running `script` with `args`; resolves with the port it prints. */
async function child(script: string, args: string[]): Promise<{ port: number; kill(): void }> {
  const c = spawn(process.execPath, ["-e", script, ...args], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise<number>((resolve, reject) => {
    c.stdout.once("data", (d: Buffer) => resolve(Number(d.toString().trim())));
    c.once("exit", (code) => reject(new Error(`a bench helper exited (${code})`)));
  });
  return { port, kill: () => c.kill() };
}

/**
 * The whole path: downloads by curl inside a workspace of each container provider, interleaved
 * with the same download by curl on the host, straight. The same downloads also go
 * through a second server with AGENT_WORKSPACE_EGRESS_PATH=channel (the attach stream, the way
 * before the egress socket), interleaved with the rest.
 */
async function throughSandboxes(ctx: BenchContext, port: number, providers: string[], options: EgressOptions): Promise<SectionResult> {
  const rows: Row[] = [];
  const skipped: string[] = [];
  const data: Record<string, unknown> = {};
  const opened: Array<{ close(): Promise<void> }> = [];
  /** An allowlist workspace of `provider` on the server at `url`, and curl in it; undefined when it cannot be made. */
  const sandbox = async (url: string, provider: string) => {
    const sessions = new Http2SessionManager(url);
    const transport = createGrpcTransport({ baseUrl: url, sessionManager: sessions });
    const config = createClient(ConfigService, transport);
    const workspaces = createClient(WorkspaceService, transport);
    const tools = createClient(ToolService, transport);
    const id = `bench-egress-${provider}`;
    await config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: ["bash"], network: { mode: "allowlist", allow: [`files.bench:${port}`] } } } });
    let workspaceId = "";
    try {
      workspaceId = (await workspaces.createWorkspace({ agentType: id })).workspace?.id ?? "";
    } catch (err) {
      sessions.abort();
      skipped.push(`(n) ${provider}: ${String(err).slice(0, 200)}`);
      return undefined;
    }
    opened.push({
      close: async () => {
        await workspaces.deleteWorkspace({ id: workspaceId }).catch(() => undefined);
        sessions.abort();
      },
    });
    return async (tunnel: boolean) => {
      const r = await tools.bash({
        workspaceId,
        command: `curl -sS -o /dev/null ${tunnel ? "-p " : ""}-w '%{speed_download} %{size_download}' http://files.bench:${port}/big`,
        timeoutMs: 300_000n,
      });
      const [speed, size] = r.stdout.trim().split(" ").map(Number);
      if (r.exitCode !== 0 || size !== BIG) throw new Error(`a download in the ${provider} workspace failed: exit ${r.exitCode}, ${size} bytes, ${r.stderr.slice(0, 300)}`);
      return speed;
    };
  };
  let channelServer: ServerProcess | undefined;
  try {
    for (const provider of providers) {
      const inside = await sandbox(ctx.server.url, provider);
      if (!inside) continue;
      const ways: Array<[string, (tunnel: boolean) => Promise<number>]> = [["", inside]];
      if (provider === "docker" || provider === "gvisor") {
        if (!channelServer) {
          const dataDir = path.join(ctx.dataDir, "channel");
          await mkdir(dataDir, { recursive: true });
          channelServer = await startServerProcess({ dataDir, env: { ...EGRESS_BENCH_ENV, AGENT_WORKSPACE_EGRESS_PATH: "channel" } });
        }
        const overChannel = await sandbox(channelServer.url, provider);
        if (overChannel) ways.push([" over the attach stream (AGENT_WORKSPACE_EGRESS_PATH=channel)", overChannel]);
      }
      const straight: number[] = [];
      const samples = ways.map(() => ({ plain: [] as number[], tunnelled: [] as number[] }));
      for (const [, way] of ways) await way(true); // warm-up: the executor's connection and the tunnel's first use
      for (let i = 0; i < options.downloads; i++) {
        straight.push((await curl(`http://${HOST}:${port}/big`)).speed);
        for (const [w, [, way]] of ways.entries()) {
          samples[w].plain.push(await way(false));
          samples[w].tunnelled.push(await way(true));
        }
      }
      const base = summarize(straight);
      for (const [w, [suffix]] of ways.entries()) {
        for (const [label, list] of [["absolute-form HTTP", samples[w].plain], ["CONNECT tunnel", samples[w].tunnelled]] as const) {
          const s = summarize(list);
          const ratio = s.p50 / base.p50;
          rows.push({ section: "n egress", metric: `${provider}: 100 MB download p50 by curl in the sandbox, ${label}${suffix}`, server: round(s.p50 / 2 ** 20, 1), baseline: round(base.p50 / 2 ** 20, 1), unit: "MiB/s", ratio: round(ratio, 2), goal: "≥ 0.5× straight on the host", pass: ratio >= 0.5 });
        }
      }
      data[provider] = { straightBytesPerSecond: base, ways: ways.map(([suffix], w) => ({ way: suffix.trim() || "default", plainBytesPerSecond: summarize(samples[w].plain), tunnelBytesPerSecond: summarize(samples[w].tunnelled) })) };
    }
  } finally {
    for (const o of opened) await o.close();
    await channelServer?.stop();
  }
  return { rows, data, skipped };
}

/** Runs section (n); with `sandboxes`, also the whole path through workspaces of `providers`. */
export async function benchEgress(options: EgressOptions, sandboxes?: { withServer: WithServer; providers: string[] }): Promise<SectionResult> {
  // The destination runs in a process of its own, as a remote server would: the proxy's event
  // loop (in this process) is then the only thing between curl and it.
  const source = await child(SOURCE_SERVER, [HOST, String(BIG)]);
  const { port } = source;
  const policy = new EgressPolicy([parseRule(`files.bench:${port}`, "bench")], { privateAllow: [`${HOST}/32`], ownEndpoints: [] });
  const ws: EgressWorkspace = { workspaceId: "ws-bench", policy, usage: { connections: 0, bytes: 0 } };
  const proxy = new EgressProxy({
    limits: { maxConnections: 64, idleTimeoutMs: 60_000, maxBytes: Number.MAX_SAFE_INTEGER },
    logger: createLogger({ level: "error", sink: () => undefined }),
    lookup: async (host) => (host === "files.bench" ? [{ address: HOST, family: 4 }] : []),
  });
  const relay = await child(RELAY, [HOST, String(port)]);
  const front = createTcpServer((socket) => proxy.accept(socket, ws));
  await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
  const proxyUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}`;
  try {
    const direct: number[] = [];
    const viaProxy: number[] = [];
    const viaTunnel: number[] = [];
    const viaRelay: number[] = [];
    for (let i = 0; i < options.downloads; i++) {
      const d = await curl(`http://${HOST}:${port}/big`);
      const p = await curl(`http://files.bench:${port}/big`, proxyUrl);
      const c = await curl(`http://files.bench:${port}/big`, proxyUrl, true);
      const r1 = await curl(`http://127.0.0.1:${relay.port}/big`);
      for (const r of [d, p, c, r1]) if (r.size !== BIG) throw new Error(`a download got ${r.size} bytes, not ${BIG}`);
      direct.push(d.speed);
      viaProxy.push(p.speed);
      viaTunnel.push(c.speed);
      viaRelay.push(r1.speed);
    }
    const ttfbDirect: number[] = [];
    const ttfbProxy: number[] = [];
    for (let i = 0; i < options.requests; i++) {
      ttfbDirect.push((await curl(`http://${HOST}:${port}/small`)).ttfb * 1000);
      ttfbProxy.push((await curl(`http://files.bench:${port}/small`, proxyUrl, true)).ttfb * 1000);
    }
    const mb = (bps: number) => round(bps / (1024 * 1024), 1);
    const base = summarize(direct);
    const rows: Row[] = [];
    for (const [label, samples] of [["absolute-form HTTP", viaProxy], ["CONNECT tunnel", viaTunnel]] as const) {
      const s = summarize(samples);
      const ratio = s.p50 / base.p50;
      rows.push({ section: "n egress", metric: `100 MB download p50 through the proxy, ${label}`, server: mb(s.p50), baseline: mb(base.p50), unit: "MiB/s", ratio: round(ratio, 2), goal: "≥ 0.5× straight", pass: ratio >= 0.5 });
    }
    // What one process in the path costs on this machine, whatever it does: the ceiling of any
    // path with a relaying process in it (the sandbox's executor, the server's proxy).
    const relayed = summarize(viaRelay);
    rows.push({ section: "n egress", metric: "100 MB download p50 through a minimal Node relay (one hop, pipe both ways): the machine's ceiling per hop", server: mb(relayed.p50), baseline: mb(base.p50), unit: "MiB/s", ratio: round(relayed.p50 / base.p50, 2), goal: "info", pass: true });
    const td = summarize(ttfbDirect);
    const tp = summarize(ttfbProxy);
    rows.push({ section: "n egress", metric: "time to first byte p50, small file, CONNECT tunnel", server: round(tp.p50, 2), baseline: round(td.p50, 2), unit: "ms", ratio: round(tp.p50 / td.p50, 2), goal: `info (+${round(tp.p50 - td.p50, 2)} ms)`, pass: true });
    const data: Record<string, unknown> = { directBytesPerSecond: base, proxyBytesPerSecond: summarize(viaProxy), tunnelBytesPerSecond: summarize(viaTunnel), ttfbDirectMs: td, ttfbProxyMs: tp };
    const skipped: string[] = [];
    if (sandboxes && sandboxes.providers.length > 0) {
      const whole = await sandboxes.withServer((ctx) => throughSandboxes(ctx, port, sandboxes.providers, options));
      rows.push(...whole.rows);
      skipped.push(...whole.skipped);
      data.sandboxes = whole.data;
    }
    return { rows, data, skipped };
  } finally {
    proxy.close();
    front.close();
    relay.kill();
    source.kill();
  }
}
