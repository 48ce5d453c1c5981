/**
 * Test fixtures of the MCP bridge: the official SDK client over streamable HTTP (`/mcp` on the
 * test server) and over stdio (the real `agent-workspace mcp` process), and one walk through every
 * tool the bridge exposes, shared by both transports.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { ExecutionContext } from "ava";
import { ROOT } from "./process.ts";

/** A connected MCP client over streamable HTTP, as `authorization: Bearer <credential>`. */
export async function httpClient(serverUrl: string, options: { credential?: string; workspace?: string } = {}): Promise<Client> {
  const url = new URL(`${serverUrl}/mcp`);
  if (options.workspace) url.searchParams.set("workspace", options.workspace);
  const headers: Record<string, string> = options.credential ? { authorization: `Bearer ${options.credential}` } : {};
  const client = new Client({ name: "agent-workspace-test", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));
  return client;
}

/** A stdio bridge process and its client. */
export interface StdioBridge {
  client: Client;
  transport: StdioClientTransport;
  /** What the bridge wrote to stderr so far. */
  stderr(): string;
  /** Errors the client's transport saw (a line on stdout that was not protocol would be one). */
  errors: Error[];
}

/** Spawns `agent-workspace mcp args…` with this Node and connects the SDK client to it over stdio. */
export async function stdioBridge(args: string[], env: Record<string, string> = {}): Promise<StdioBridge> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ["--liftoff-only", "bin/agent-workspace.js", "mcp", ...args],
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
    stderr: "pipe",
  });
  let err = "";
  transport.stderr?.on("data", (chunk: Buffer) => (err += chunk.toString()));
  const client = new Client({ name: "agent-workspace-test", version: "1" });
  const errors: Error[] = [];
  client.onerror = (e) => errors.push(e);
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(`the stdio bridge did not start: ${String(e)}\n${err}`);
  }
  return { client, transport, stderr: () => err, errors };
}

/** The text of a result's first content block. */
export function textOf(result: unknown): string {
  const content = (result as CallToolResult).content;
  const first = content[0];
  return first?.type === "text" ? first.text : "";
}

/** The structured error of an `isError` result. */
export function errorOf(result: unknown): { code: string; reason: string; message: string; metadata: Record<string, string> } {
  const r = result as CallToolResult;
  if (!r.isError) throw new Error(`expected a tool error, got: ${textOf(r)}`);
  return (r.structuredContent as { error: { code: string; reason: string; message: string; metadata: Record<string, string> } }).error;
}

/** Calls a tool that must succeed; returns its result. */
export async function ok(t: ExecutionContext<unknown>, client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
  t.falsy(r.isError, `${name} failed: ${textOf(r)}`);
  return r;
}

/**
 * Runs every tool of the bridge once, each doing real work in the workspace (git against a
 * repository made with bash), and asserts what each returns. Resolves to the names of the tools it
 * called, so a caller can prove none was left out.
 */
/** The bridge's ProcessService tools, in their order (all of the `bash` tool: listed with it). */
export const PROCESS_TOOL_NAMES = [
  "start_process",
  "list_processes",
  "get_process",
  "read_process_output",
  "write_process_stdin",
  "resize_process",
  "signal_process",
  "wait_process",
  "expose_port",
  "unexpose_port",
  "list_exposed_ports",
];

export async function exerciseTools(t: ExecutionContext<unknown>, client: Client): Promise<Set<string>> {
  const called = new Set<string>();
  const call = async (name: string, args: Record<string, unknown>) => {
    called.add(name);
    return ok(t, client, name, args);
  };
  const structured = (r: CallToolResult) => r.structuredContent as Record<string, unknown>;

  const written = await call("write", { path: "src/app.txt", content: "alpha\nbeta\n" });
  t.deepEqual(structured(written), { bytes_written: "11", created: true });
  t.regex(textOf(await call("read", { path: "src/app.txt" })), /^1: alpha\n2: beta/);
  t.is(structured(await call("edit", { path: "src/app.txt", old_string: "beta", new_string: "gamma" })).replacements, 1);
  await call("patch", { path: "src/app.txt", patches: [{ find: "alpha", replace: "ALPHA" }] });
  t.true(textOf(await call("list", { path: "src" })).includes("src/app.txt"));
  t.deepEqual(structured(await call("glob", { pattern: "**/*.txt" })).paths, ["src/app.txt"]);
  t.is(textOf(await call("grep", { pattern: "gam+a", path: "src" })), "src/app.txt:2: gamma");
  const bash = await call("bash", { command: "cat src/app.txt; echo oops >&2; exit 3" });
  t.is(textOf(bash), "[exit code 3, " + String(structured(bash).duration_ms ?? 0) + " ms]\n--- stdout ---\nALPHA\ngamma\n--- stderr ---\noops");
  t.is(structured(bash).exit_code, 3);

  await call("bash", { command: "git init -q -b main" });
  const status = structured(await call("git_status", {}));
  t.is(status.branch, "main");
  t.true(JSON.stringify(status.files).includes("src/app.txt"));
  const commit = structured(await call("git_commit", { message: "first", files: ["src/app.txt"] }));
  t.regex(String(commit.commit), /^[0-9a-f]{40}$/);
  t.is(structured(await call("git_checkout", { branch: "feature", create: true })).branch, "feature");
  await call("write", { path: "src/app.txt", content: "ALPHA\ngamma\ndelta\n" });
  const diff = structured(await call("git_diff", { paths: ["src"] }));
  t.true(JSON.stringify(diff.unstaged).includes("+delta"));
  // No repository to push to (the workspace was not cloned): the server's own refusal, as a tool error.
  called.add("git_push");
  const push = await client.callTool({ name: "git_push", arguments: {} });
  t.is(errorOf(push).reason, "ERROR_REASON_NO_REPOSITORY");

  // Background processes: a REPL fed text on stdin, its output as text, a terminal resized and
  // killed, a port exposed and taken back.
  const procOf = (r: CallToolResult) => (structured(r).process ?? {}) as { process_id: string; state: string; exit_code: number; signal: string };
  const repl = procOf(await call("start_process", { command: 'while read -r l; do echo "got $l"; done', stdin: true }));
  t.is(repl.state, "PROCESS_STATE_RUNNING");
  t.is(structured(await call("write_process_stdin", { process_id: repl.process_id, text: "hello\n", close: true })).bytes_written, "6");
  t.is(procOf(await call("wait_process", { process_id: repl.process_id, timeout_ms: 30_000 })).state, "PROCESS_STATE_EXITED");
  t.regex(textOf(await call("read_process_output", { process_id: repl.process_id })), /^\[process proc_\S+ exited, exit code 0; next stdout_offset 10, stderr_offset 0\]\n--- stdout ---\ngot hello$/);
  t.is(procOf(await call("get_process", { process_id: repl.process_id })).exit_code, 0);
  t.true(JSON.stringify(structured(await call("list_processes", {}))).includes(repl.process_id));
  const term = procOf(await call("start_process", { command: "exec sleep 600", pty: { rows: 10, cols: 40 } }));
  await call("resize_process", { process_id: term.process_id, size: { rows: 20, cols: 80 } });
  await call("signal_process", { process_id: term.process_id, signal: "KILL" });
  t.is(procOf(await call("wait_process", { process_id: term.process_id, timeout_ms: 30_000 })).signal, "SIGKILL");
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const exposed = structured(await call("expose_port", { port }));
  t.like(exposed, { listening: false, port: { port } });
  t.regex(String((exposed.port as { path: string }).path), new RegExp(`^/ports/[^/]+/${port}/$`));
  t.deepEqual((structured(await call("list_exposed_ports", {})).ports as Array<{ port: number }>).map((p) => p.port), [port]);
  t.is(structured(await call("unexpose_port", { port })).closed_connections, 0);

  await call("delete", { path: "src/app.txt" });
  const gone = await client.callTool({ name: "read", arguments: { path: "src/app.txt" } });
  t.like(errorOf(gone), { code: "not_found", reason: "ERROR_REASON_FILE_NOT_FOUND" });
  t.regex(textOf(gone), /^Error ERROR_REASON_FILE_NOT_FOUND \(not_found\): /);
  return called;
}
