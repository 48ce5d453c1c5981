/**
 * Section (e): our file tools on the local provider against the reference MCP filesystem server
 * (@modelcontextprotocol/server-filesystem), run side by side on this machine on the same files:
 * the peer is spawned with this Node and the workspace's host directory as its allowed directory.
 * Ours is called as the issue that set the goal measured it, Connect JSON over one HTTP/2
 * connection from a harness of its own (lean-client.ts), and again over gRPC through connect-node's
 * client (for information: that client adds about 0.6 ms to a call here), the peer over
 * stdio with the official MCP SDK client; each operation is an interleaved round-robin of our
 * calls and the peer's:
 * - read a 4 KiB text file: ReadFile vs `read_text_file` (`read_file` in older versions);
 * - write a 4 KiB file: WriteFile vs `write_file`;
 * - replace one unique line: EditFile vs `edit_file`, alternating between two contents so that
 *   every edit, whoever makes it, succeeds;
 * - list a 200-entry directory: ListFiles (which returns sizes and mtimes) vs
 *   `list_directory_with_sizes`; and the names alone vs `list_directory`, whose answer is one text
 *   listing ("[FILE] name" lines): ours in that form is ReadFile of the directory (a name per line,
 *   "/" after a directory's), held to the goal; ListFiles with `names_only`, 200 structured
 *   FileInfo records (each a path and a type, about 3.5 times the bytes), is measured beside it for
 *   information.
 * Goal: ours at most 1.0× the peer at p50.
 *
 * First, for information, each side's floor: a no-op round trip on its transport, interleaved the
 * same way: the peer's MCP `ping` over its stdio, against a bare `node:http2` server in a child
 * process (bare-grpc.ts: nothing decoded or checked) called by the lean client, and our own health
 * check. Each operation then gets an information row of what it costs beyond its side's floor
 * (ours through the lean client less the bare server's round trip, against the peer's call less its
 * ping): the part of the call that is the server's work rather than the transport's.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { type BenchContext, type Measure, type SectionResult, createTextFiles, createWorkspace, interleave, localWorkspaceDir, serverCpuMs, timed } from "./context.ts";
import type { Row } from "./report.ts";
import { round, roundSummary, summarize, type Summary } from "./stats.ts";
import { textOfSize } from "./tree.ts";
import { LeanUnary } from "./lean-client.ts";
import { startBareHttp2 } from "./latency.ts";

/** Options of section (e). */
export interface PeerOptions {
  /** Measured calls per series. */
  iterations: number;
  /** Unmeasured calls per series before measuring. */
  warmup: number;
}

const GOAL_RATIO = 1.0;
const PEER_PACKAGE = "@modelcontextprotocol/server-filesystem";
const SMALL = textOfSize(4 * 1024);
/** The edit target: SMALL with one unique line that the edits flip between two values. */
const MARKERS = ["marker: alpha", "marker: omega"] as const;
const EDITABLE = `${SMALL.slice(0, 2048)}\n${MARKERS[0]}\n${SMALL.slice(2048)}`;
const LIST_ENTRIES = 200;
/** Ours through a lean Connect JSON client over HTTP/2 (lean-client.ts): the series held to the goal. */
const LEAN = "ours, Connect JSON/h2, lean client";
/** The series "ours": gRPC through connect-node's client, for information. */
const CONNECT_NODE = "ours, gRPC, connect-node's client";
/** The floors: a no-op round trip on each side's transport. */
const FLOOR = "no-op round trip";
const PING = "MCP ping";
const BARE = "bare node:http2 server, lean client";
/** Ours as structured records: ListFiles with names_only through the lean client (information). */
const STRUCTURED = "ours as 200 FileInfo records: ListFiles names_only, Connect JSON/h2, lean client";

/** A running peer server and its MCP client. */
export interface Peer {
  version: string;
  tools: Set<string>;
  /** Calls one tool; an `isError` result throws. */
  call(name: string, args: Record<string, unknown>): Promise<void>;
  /** MCP's `ping`: a round trip that does nothing. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** Spawns the peer's entry point (its package.json `bin`) with `allowedDir`, over stdio. */
export async function startPeer(allowedDir: string): Promise<Peer> {
  const manifest = createRequire(import.meta.url).resolve(`${PEER_PACKAGE}/package.json`);
  const pkg = JSON.parse(readFileSync(manifest, "utf8")) as { version: string; bin: Record<string, string> };
  const entry = path.join(path.dirname(manifest), Object.values(pkg.bin)[0]);
  const transport = new StdioClientTransport({ command: process.execPath, args: [entry, allowedDir], stderr: "pipe" });
  const stderr: string[] = [];
  transport.stderr?.on("data", (chunk: Buffer) => {
    stderr.push(...chunk.toString().split("\n").filter(Boolean));
    stderr.splice(0, stderr.length - 20);
  });
  const client = new Client({ name: "agent-workspace-bench", version: "1" });
  try {
    await client.connect(transport);
  } catch (err) {
    throw new Error(`the peer did not start: ${String(err)}\n${stderr.join("\n")}`);
  }
  const { tools } = await client.listTools();
  return {
    version: pkg.version,
    tools: new Set(tools.map((t) => t.name)),
    async call(name, args) {
      const r = await client.callTool({ name, arguments: args });
      if (r.isError) throw new Error(`peer ${name}: ${JSON.stringify(r.content)}`);
    },
    async ping() {
      await client.ping();
    },
    close: () => client.close(),
  };
}

/** The p50 row (held to the goal unless `info`) and the p99 row of ours against one peer tool. */
function rowsFor(label: string, peerTool: string, ours: Summary, peer: Summary, { info = false, note }: { info?: boolean; note?: string } = {}): Row[] {
  const common = { section: "e peer", unit: "ms" };
  const p50Ratio = ours.p50 / peer.p50;
  return [
    {
      ...common,
      metric: `${label} p50, vs ${peerTool}`,
      server: ours.p50,
      baseline: peer.p50,
      ratio: p50Ratio,
      note,
      ...(info ? { goal: "" } : { goal: `≤ ${GOAL_RATIO.toFixed(1)}× peer`, pass: p50Ratio <= GOAL_RATIO }),
    },
    { ...common, metric: `${label} p99, vs ${peerTool}`, server: ours.p99, baseline: peer.p99, ratio: ours.p99 / peer.p99, goal: "" },
  ];
}

/** Runs section (e) on one local workspace and one peer server over its directory. */
export async function benchPeer(ctx: BenchContext, options: PeerOptions): Promise<SectionResult> {
  const created = await createWorkspace(ctx, "local");
  if (!created.ok) return { rows: [], data: {}, skipped: [`(e) ${created.reason}`] };
  const ws = created.workspace;
  let peer: Peer | undefined;
  let lean: LeanUnary | undefined;
  let bare: Awaited<ReturnType<typeof startBareHttp2>> | undefined;
  let bareLean: LeanUnary | undefined;
  try {
    const tools = ctx.clients.grpc.tools;
    const workspaceId = ws.id;
    await tools.writeFile({ workspaceId, path: "read.txt", content: SMALL });
    await tools.writeFile({ workspaceId, path: "edit.txt", content: EDITABLE });
    await createTextFiles(ctx, workspaceId, ["list"], LIST_ENTRIES);

    const dir = localWorkspaceDir(ctx, workspaceId);
    const p = (peer = await startPeer(dir));
    const readTool = p.tools.has("read_text_file") ? "read_text_file" : "read_file";
    const missing = [readTool, "write_file", "edit_file", "list_directory", "list_directory_with_sizes"].filter((t) => !p.tools.has(t));
    if (missing.length > 0) throw new Error(`${PEER_PACKAGE} ${p.version} lacks the tools ${missing.join(", ")}`);
    const at = (name: string) => path.join(dir, name);
    const l = (lean = await LeanUnary.connect(ctx.server.url));
    const tool = (method: string, request: Record<string, unknown>) => l.call(`/agentworkspace.v1.ToolService/${method}`, JSON.stringify({ workspaceId, ...request })) as Promise<Record<string, unknown>>;

    /** Which marker edit.txt holds; every edit (ours or the peer's) flips it. */
    let edits = 0;
    const flip = () => [MARKERS[edits % 2], MARKERS[++edits % 2]] as const;

    const b = (bare = await startBareHttp2());
    const bl = (bareLean = await LeanUnary.connect(`http://127.0.0.1:${b.port}`));
    const operations: Record<string, Record<string, Measure>> = {
      [FLOOR]: {
        ours: timed(() => ctx.clients.grpc.health.check({})),
        [PING]: timed(() => p.ping()),
        [BARE]: timed(() => bl.call("/grpc.health.v1.Health/Check", "{}")),
        [LEAN]: timed(() => l.call("/grpc.health.v1.Health/Check", "{}")),
      },
      "read 4 KiB": {
        ours: timed(
          () => tools.readFile({ workspaceId, path: "read.txt" }),
          (r) => {
            if (r.size !== BigInt(SMALL.length)) throw new Error(`ReadFile: size ${r.size}, expected ${SMALL.length}`);
          },
        ),
        [readTool]: timed(() => p.call(readTool, { path: at("read.txt") })),
        [LEAN]: timed(
          () => tool("ReadFile", { path: "read.txt" }),
          (r) => {
            if (r.size !== String(SMALL.length) || typeof r.content !== "string") throw new Error(`ReadFile (lean): ${JSON.stringify(r).slice(0, 200)}`);
          },
        ),
      },
      "write 4 KiB": {
        ours: timed(() => tools.writeFile({ workspaceId, path: "write.txt", content: SMALL })),
        write_file: timed(() => p.call("write_file", { path: at("write.txt"), content: SMALL })),
        [LEAN]: timed(() => tool("WriteFile", { path: "write.txt", content: SMALL })),
      },
      "edit one line": {
        ours: timed(
          () => {
            const [oldString, newString] = flip();
            return tools.editFile({ workspaceId, path: "edit.txt", oldString, newString });
          },
          (r) => {
            if (r.replacements !== 1) throw new Error(`EditFile: ${r.replacements} replacements`);
          },
        ),
        edit_file: timed(() => {
          const [oldText, newText] = flip();
          return p.call("edit_file", { path: at("edit.txt"), edits: [{ oldText, newText }] });
        }),
        [LEAN]: timed(
          () => {
            const [oldString, newString] = flip();
            return tool("EditFile", { path: "edit.txt", oldString, newString });
          },
          (r) => {
            if (r.replacements !== 1) throw new Error(`EditFile (lean): ${JSON.stringify(r).slice(0, 200)}`);
          },
        ),
      },
      [`list ${LIST_ENTRIES} entries`]: {
        ours: timed(
          () => tools.listFiles({ workspaceId, path: "list" }),
          (r) => {
            if (r.files.length !== LIST_ENTRIES) throw new Error(`ListFiles: ${r.files.length} entries, expected ${LIST_ENTRIES}`);
          },
        ),
        list_directory_with_sizes: timed(() => p.call("list_directory_with_sizes", { path: at("list") })),
        [LEAN]: timed(
          () => tool("ListFiles", { path: "list" }),
          (r) => {
            if ((r.files as unknown[] | undefined)?.length !== LIST_ENTRIES) throw new Error(`ListFiles (lean): ${JSON.stringify(r).slice(0, 200)}`);
          },
        ),
      },
      [`list ${LIST_ENTRIES} names`]: {
        // The peer's answer is one text listing ("[FILE] name" lines); ours in the same form is
        // ReadFile of the directory (a name per line, "/" after a directory's). ListFiles with
        // names_only, 200 structured FileInfo messages, is measured beside it for information.
        ours: timed(
          () => tools.readFile({ workspaceId, path: "list" }),
          (r) => {
            if (r.totalLines !== LIST_ENTRIES) throw new Error(`ReadFile of the directory: ${r.totalLines} entries, expected ${LIST_ENTRIES}`);
          },
        ),
        list_directory: timed(() => p.call("list_directory", { path: at("list") })),
        [LEAN]: timed(
          () => tool("ReadFile", { path: "list" }),
          (r) => {
            if (r.kind !== "FILE_KIND_DIRECTORY" || r.totalLines !== LIST_ENTRIES) throw new Error(`ReadFile of the directory (lean): ${JSON.stringify(r).slice(0, 200)}`);
          },
        ),
        [STRUCTURED]: timed(
          () => tool("ListFiles", { path: "list", namesOnly: true }),
          (r) => {
            if ((r.files as unknown[] | undefined)?.length !== LIST_ENTRIES) throw new Error(`ListFiles names_only (lean): ${JSON.stringify(r).slice(0, 200)}`);
          },
        ),
      },
    };

    const rows: Row[] = [];
    const data: Record<string, Record<string, unknown>> = {};
    for (const [label, series] of Object.entries(operations)) {
      ctx.log(`(e) ${label}: ${options.warmup} warmup + ${options.iterations} calls per series (${Object.keys(series).join(", ")})`);
      const before = await ctx.server.stats();
      const samples = await interleave(series, options.warmup, options.iterations);
      const cpuPerCallMs = serverCpuMs(before, await ctx.server.stats()) / (options.warmup + options.iterations);
      const stats = Object.fromEntries(Object.entries(samples).map(([name, v]) => [name, summarize(v)]));
      // The first peer series is the comparison held to the goal; any other is a p50 for information.
      const [peerTool, ...others] = Object.keys(series).filter((n) => n !== "ours" && n !== LEAN && n !== STRUCTURED);
      const floor = label === FLOOR;
      if (floor) {
        rows.push(
          rowsFor(`${FLOOR}: our health check`, PING, stats.ours, stats[PING], { info: true, note: `peer: ${PEER_PACKAGE} ${p.version} over stdio (MCP SDK client); ours: gRPC, one HTTP/2 connection` })[0],
          rowsFor(`${FLOOR}: ${BARE}`, PING, stats[BARE], stats[PING], { info: true, note: "the least an HTTP/2 round trip costs here, against the peer's stdio" })[0],
        );
        rows.push(rowsFor(`${FLOOR}: our health check (${LEAN})`, PING, stats[LEAN], stats[PING], { info: true })[0]);
      } else {
        rows.push(...rowsFor(label, peerTool, stats[LEAN], stats[peerTool], { note: `ours: ${LEAN}; our server's CPU ${cpuPerCallMs.toFixed(2)} ms/call (all series)` }));
        rows.push(rowsFor(`${label} (${CONNECT_NODE})`, peerTool, stats.ours, stats[peerTool], { info: true })[0]);
        for (const other of others) rows.push(rowsFor(label, other, stats[LEAN], stats[other], { info: true })[0]);
        if (stats[STRUCTURED]) rows.push(rowsFor(`${label} (${STRUCTURED})`, peerTool, stats[STRUCTURED], stats[peerTool], { info: true })[0]);
      }
      data[label] = { serverCpuMsPerCall: round(cpuPerCallMs), ...Object.fromEntries(Object.entries(stats).map(([name, s]) => [name, roundSummary(s)])) };
      if (!floor) {
        // Beyond each side's floor: the lean call less the bare server's round trip, the peer's call less its ping.
        const f = data[FLOOR] as Record<string, Summary>;
        const ours = stats[LEAN].p50 - f[BARE].p50;
        const theirs = stats[peerTool].p50 - f[PING].p50;
        rows.push({ section: "e peer", unit: "ms", metric: `${label} beyond each transport's floor (${LEAN} − ${BARE}), vs ${peerTool} − ${PING}`, server: ours, baseline: theirs, ratio: ours / theirs, goal: "" });
        data[label].beyondFloorMs = { ours: round(ours), peer: round(theirs) };
      }
    }
    return { rows, data: { peer: `${PEER_PACKAGE}@${p.version}`, iterations: options.iterations, warmup: options.warmup, stats: data }, skipped: [] };
  } finally {
    lean?.close();
    bareLean?.close();
    bare?.close();
    await peer?.close().catch(() => undefined);
    await ws.delete();
  }
}
