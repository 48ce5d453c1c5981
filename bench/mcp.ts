/**
 * Section (s): the MCP bridge's file tools against the reference MCP filesystem server
 * (@modelcontextprotocol/server-filesystem), same files, same run, both driven by the official MCP
 * SDK client. Ours as an MCP client sees it: `agent-workspace mcp --workspace` over stdio (the same
 * transport as the peer's), whose calls then go to the server over gRPC, and `/mcp` on the
 * server's port over streamable HTTP (for information: a different transport). Each operation
 * is an interleaved round-robin of the three:
 * - read a 4 KiB text file: `read` vs `read_text_file`;
 * - write a 4 KiB file: `write` vs `write_file`;
 * - replace one unique line: `edit` vs `edit_file`, alternating between two contents;
 * - list a 200-entry directory: `list` (sizes, types) vs `list_directory_with_sizes`.
 * Goal: the stdio bridge at most 1.0× the peer at p50.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { type BenchContext, type Measure, type SectionResult, createTextFiles, createWorkspace, interleave, localWorkspaceDir, serverCpuMs, timed } from "./context.ts";
import { startPeer } from "./peer.ts";
import type { Row } from "./report.ts";
import { round, roundSummary, summarize } from "./stats.ts";
import { textOfSize } from "./tree.ts";

/** Options of section (s). */
export interface McpOptions {
  iterations: number;
  warmup: number;
}

const GOAL_RATIO = 1.0;
const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SMALL = textOfSize(4 * 1024);
const MARKERS = ["marker: alpha", "marker: omega"] as const;
const EDITABLE = `${SMALL.slice(0, 2048)}\n${MARKERS[0]}\n${SMALL.slice(2048)}`;
const LIST_ENTRIES = 200;

/** Calls one of our tools; a tool error throws (a bench of failures would measure nothing). */
async function call(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
  if (r.isError) throw new Error(`bridge ${name}: ${JSON.stringify(r.content)}`);
  return r;
}

/** Runs section (s). */
export async function benchMcp(ctx: BenchContext, options: McpOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(s) ${created.reason}`] };
  const ws = created.workspace;
  const closers: Array<() => Promise<void>> = [];
  try {
    const tools = ctx.clients.grpc.tools;
    const workspaceId = ws.id;
    await tools.writeFile({ workspaceId, path: "read.txt", content: SMALL });
    await tools.writeFile({ workspaceId, path: "edit.txt", content: EDITABLE });
    await createTextFiles(ctx, workspaceId, ["list"], LIST_ENTRIES);
    const dir = localWorkspaceDir(ctx, workspaceId);

    const peer = await startPeer(dir);
    closers.push(() => peer.close());
    const stdio = new Client({ name: "agent-workspace-bench", version: "1" });
    await stdio.connect(new StdioClientTransport({ command: process.execPath, args: ["--liftoff-only", "bin/agent-workspace.js", "mcp", "--workspace", workspaceId, "--server", ctx.server.url], cwd: ROOT, stderr: "ignore" }));
    closers.push(() => stdio.close());
    const http = new Client({ name: "agent-workspace-bench", version: "1" });
    await http.connect(new StreamableHTTPClientTransport(new URL(`${ctx.server.url}/mcp?workspace=${workspaceId}`)));
    closers.push(() => http.close());

    const readTool = peer.tools.has("read_text_file") ? "read_text_file" : "read_file";
    const at = (name: string) => path.join(dir, name);
    let edits = 0;
    const flip = () => [MARKERS[edits % 2], MARKERS[++edits % 2]] as const;
    const ours = (client: Client): Record<string, Measure> => ({
      "read 4 KiB": timed(() => call(client, "read", { path: "read.txt" })),
      "write 4 KiB": timed(() => call(client, "write", { path: "write.txt", content: SMALL })),
      "edit one line": timed(() => {
        const [old_string, new_string] = flip();
        return call(client, "edit", { path: "edit.txt", old_string, new_string });
      }),
      [`list ${LIST_ENTRIES} entries`]: timed(
        () => call(client, "list", { path: "list" }),
        (r) => {
          const n = ((r.structuredContent as { files?: unknown[] }).files ?? []).length;
          if (n !== LIST_ENTRIES) throw new Error(`list: ${n} entries, expected ${LIST_ENTRIES}`);
        },
      ),
    });
    const theirs: Record<string, [string, Measure]> = {
      "read 4 KiB": [readTool, timed(() => peer.call(readTool, { path: at("read.txt") }))],
      "write 4 KiB": ["write_file", timed(() => peer.call("write_file", { path: at("write.txt"), content: SMALL }))],
      "edit one line": [
        "edit_file",
        timed(() => {
          const [oldText, newText] = flip();
          return peer.call("edit_file", { path: at("edit.txt"), edits: [{ oldText, newText }] });
        }),
      ],
      [`list ${LIST_ENTRIES} entries`]: ["list_directory_with_sizes", timed(() => peer.call("list_directory_with_sizes", { path: at("list") }))],
    };
    const viaStdio = ours(stdio);
    const viaHttp = ours(http);

    const rows: Row[] = [];
    const data: Record<string, unknown> = {};
    for (const [label, [peerTool, peerMeasure]] of Object.entries(theirs)) {
      ctx.log(`(s) ${label}: ${options.warmup} warmup + ${options.iterations} calls per series (bridge stdio, bridge http, ${peerTool})`);
      const before = await ctx.server.stats();
      const samples = await interleave({ stdio: viaStdio[label], http: viaHttp[label], peer: peerMeasure }, options.warmup, options.iterations);
      const cpuPerCallMs = serverCpuMs(before, await ctx.server.stats()) / (2 * (options.warmup + options.iterations));
      const s = { stdio: summarize(samples.stdio), http: summarize(samples.http), peer: summarize(samples.peer) };
      const common = { section: "s mcp", unit: "ms" };
      const p50 = s.stdio.p50 / s.peer.p50;
      rows.push(
        { ...common, metric: `${label} p50, bridge (stdio) vs ${peerTool}`, server: s.stdio.p50, baseline: s.peer.p50, ratio: p50, goal: `≤ ${GOAL_RATIO.toFixed(1)}× peer`, pass: p50 <= GOAL_RATIO, note: `our server's CPU ${cpuPerCallMs.toFixed(2)} ms/call` },
        { ...common, metric: `${label} p99, bridge (stdio) vs ${peerTool}`, server: s.stdio.p99, baseline: s.peer.p99, ratio: s.stdio.p99 / s.peer.p99, goal: "" },
        { ...common, metric: `${label} p50, bridge (/mcp, HTTP) vs ${peerTool} (stdio)`, server: s.http.p50, baseline: s.peer.p50, ratio: s.http.p50 / s.peer.p50, goal: "" },
      );
      data[label] = { serverCpuMsPerCall: round(cpuPerCallMs), stdio: roundSummary(s.stdio), http: roundSummary(s.http), [peerTool]: roundSummary(s.peer) };
    }
    rows[0].note = `${rows[0].note}; peer: @modelcontextprotocol/server-filesystem ${peer.version} over stdio; ours: agent-workspace mcp over stdio → gRPC, and /mcp over HTTP/1.1`;
    return { rows, data: { peer: peer.version, iterations: options.iterations, warmup: options.warmup, stats: data }, skipped: [] };
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    await ws.delete();
  }
}
