/**
 * The MCP bridge: an MCP server whose tools are ToolService RPCs (catalog.ts), bound to one
 * workspace and one caller. A tool call is parsed with protobuf-es `fromJson` into the RPC's
 * request message and sent as that RPC through a Connect transport carrying the caller's own
 * credential, so it meets the server's whole interceptor chain: authentication, the policy table,
 * the agent type's tools, the command policy and sensitive files, the error table, and the audit
 * span. The bridge decides nothing itself; it only lists fewer tools when it knows which ones the
 * agent type enables (a call to another still goes to the server, which refuses it).
 *
 * Used by both transports: streamable HTTP on the server's own port (http.ts, an in-process
 * transport over the server's routes) and stdio (stdio.ts, a gRPC client of a server).
 */
import { create, type DescMessage, fromJson, type JsonValue, type Message, toJson } from "@bufbuild/protobuf";
import { ConnectError, type Transport } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, type CallToolResult, ListToolsRequestSchema, type Tool } from "@modelcontextprotocol/sdk/types.js";
import { BashResponseSchema, type StreamBashResponse } from "../../gen/agentworkspace/v1/tool_pb.js";
import { DomainError } from "../../core/errors.ts";
import { toConnectError } from "../interceptors/error-interceptor.ts";
import { DEFAULT_TOOL_LIMITS } from "../tools/tool-limits.ts";
import { BOUND_FIELD, type BridgedTool, bridgeCatalog } from "./catalog.ts";
import { errorResult, toolResult } from "./results.ts";

/** The MCP server's name and version, as it introduces itself. */
export const BRIDGE_INFO = { name: "agent-workspace", version: "0.1.0" } as const;

/** Bytes of each stream a streamed bash call keeps for its final result: what unary Bash keeps. */
const KEPT_BYTES = DEFAULT_TOOL_LIMITS.maxOutputBytes;
/** Bytes of each stream a streamed bash call forwards as progress; the command runs on past it. */
export const PROGRESS_MAX_BYTES = 1024 * 1024;

/** How the bridge reaches ToolService, and as whom. */
export interface ToolCaller {
  /** A Connect transport to the server (in-process or over the network). */
  transport: Transport;
  /** The headers of every call: the caller's `authorization`, trace context. */
  header(): Headers;
}

/** Options of `createBridge`. */
export interface BridgeOptions {
  caller: ToolCaller;
  /** The workspace calls run in; "" with a session token, whose own workspace the server fills in. */
  workspaceId: string;
  /** Registry tools to list (an agent type's); undefined lists every tool. */
  enabledTools?: readonly string[];
  /** The tools; default: `bridgeCatalog()`. */
  catalog?: readonly BridgedTool[];
  /** Hears of failures that are not the server's answers (a bug, a broken connection), for the log. */
  onUnexpected?(err: unknown): void;
  /** Instructions for the client, sent at initialization. */
  instructions?: string;
}

let defaultCatalog: BridgedTool[] | undefined;
/** The bridge's catalog (ToolService's tools, then ProcessService's), built once per process. */
export function catalog(): readonly BridgedTool[] {
  return (defaultCatalog ??= bridgeCatalog());
}

/** The part of a protobuf-es JSON parse error worth showing, as INVALID_ARGUMENT naming the field. */
function inputError(err: unknown): DomainError {
  const message = err instanceof Error ? err.message : String(err);
  const field = /key "([^"]{1,100})" is unknown/.exec(message)?.[1] ?? /field (?:\w+\.)*(\w+)/.exec(message)?.[1];
  return new DomainError("INVALID_ARGUMENT", `The tool's arguments do not fit: ${message.replace(/^cannot decode message [\w.]+ from JSON: /, "")}`, {
    metadata: field === undefined ? { field: "arguments" } : { field },
  });
}

/** The request message of a call: the arguments by the proto3 JSON mapping, the workspace bound. */
export function parseArguments(schema: DescMessage, args: unknown, workspaceId: string): Message {
  if (args !== undefined && (args === null || typeof args !== "object" || Array.isArray(args))) {
    throw new DomainError("INVALID_ARGUMENT", "The tool's arguments must be a JSON object", { metadata: { field: "arguments" } });
  }
  const json = (args ?? {}) as Record<string, JsonValue>;
  for (const key of [BOUND_FIELD, "workspaceId"]) {
    if (Object.hasOwn(json, key)) throw new DomainError("INVALID_ARGUMENT", `key "${key}" is unknown: this MCP server is bound to its workspace`, { metadata: { field: key } });
  }
  let message: Message;
  try {
    message = fromJson(schema, json, { ignoreUnknownFields: false });
  } catch (err) {
    throw inputError(err);
  }
  (message as unknown as { workspaceId: string }).workspaceId = workspaceId;
  return message;
}

/** Keeps the first `max` bytes of a stream, and decodes chunks for progress messages. */
class Kept {
  readonly #chunks: Buffer[] = [];
  #size = 0;
  readonly #decoder = new TextDecoder();
  readonly max: number;
  constructor(max: number) {
    this.max = max;
  }
  /** Keeps what fits; returns the chunk as text (a character split across chunks waits for its end). */
  add(chunk: Uint8Array): string {
    if (this.#size < this.max) {
      const part = Buffer.from(chunk.subarray(0, this.max - this.#size));
      this.#chunks.push(part);
      this.#size += part.length;
    }
    return this.#decoder.decode(chunk, { stream: true });
  }
  /** The kept bytes as text, cut at a character boundary; and whether anything was cut. */
  text(total: bigint): { text: string; cut: boolean } {
    let bytes = Buffer.concat(this.#chunks);
    const cut = total > BigInt(bytes.length);
    if (cut) {
      let end = bytes.length;
      while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
      bytes = bytes.subarray(0, end);
    }
    return { text: bytes.toString("utf8"), cut };
  }
}

type Progress = (progress: number, message: string) => Promise<void>;

/**
 * A bash call streamed with StreamBash: each chunk of output is a progress notification, and the
 * result is what Bash would have returned (its first 50 KiB of each stream); a command that timed
 * out is an error result with its output, as Bash's COMMAND_TIMEOUT is.
 */
async function streamBash(tool: BridgedTool & { stream: NonNullable<BridgedTool["stream"]> }, input: Message, caller: ToolCaller, signal: AbortSignal, progress: Progress): Promise<CallToolResult> {
  const request = fromJson(tool.stream.input, toJson(tool.method.input, input), { ignoreUnknownFields: false });
  (request as unknown as { maxOutputBytes: bigint }).maxOutputBytes = BigInt(PROGRESS_MAX_BYTES);
  const res = await caller.transport.stream(tool.stream, signal, undefined, caller.header(), createAsyncIterable([request]));
  const out = { stdout: new Kept(KEPT_BYTES), stderr: new Kept(KEPT_BYTES) };
  let sent = 0;
  let exited: Extract<StreamBashResponse["event"], { case: "exited" }>["value"] | undefined;
  for await (const m of res.message as AsyncIterable<StreamBashResponse>) {
    const ev = m.event;
    if (ev.case === "stdout" || ev.case === "stderr") {
      const text = out[ev.case].add(ev.value);
      sent += ev.value.length;
      if (text !== "") await progress(sent, ev.case === "stderr" ? `[stderr] ${text}` : text);
    } else if (ev.case === "exited") {
      exited = ev.value;
    }
  }
  if (!exited) throw new DomainError("INTERNAL", "The command's stream ended without its exit", {});
  const stdout = out.stdout.text(exited.stdoutTotalBytes);
  const stderr = out.stderr.text(exited.stderrTotalBytes);
  const response = create(BashResponseSchema, {
    stdout: stdout.text,
    stderr: stderr.text,
    exitCode: exited.exitCode,
    durationMs: exited.durationMs,
    stdoutTruncated: exited.stdoutTruncated || stdout.cut,
    stderrTruncated: exited.stderrTruncated || stderr.cut,
    stdoutTotalBytes: exited.stdoutTotalBytes,
    stderrTotalBytes: exited.stderrTotalBytes,
    signal: exited.signal,
    oomKilled: exited.oomKilled,
  });
  const result = toolResult(tool.method.localName, BashResponseSchema, response, { timedOut: exited.timedOut });
  if (!exited.timedOut) return result;
  const error = errorResult(toConnectError(new DomainError("COMMAND_TIMEOUT", `The command timed out after ${exited.durationMs} ms and was killed`, {})));
  return { ...error, content: [...error.content, ...result.content] };
}

/** An MCP server for one caller and workspace; connect it to a transport. */
export function createBridge(options: BridgeOptions): Server {
  const tools = options.catalog ?? catalog();
  const byName = new Map(tools.map((t) => [t.name, t]));
  const enabled = options.enabledTools;
  const listed: Tool[] = tools
    .filter((t) => enabled === undefined || enabled.includes(t.tool))
    .map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema as Tool["inputSchema"] }));
  const server = new Server(BRIDGE_INFO, { capabilities: { tools: {} }, ...(options.instructions ? { instructions: options.instructions } : {}) });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
    const tool = byName.get(request.params.name);
    if (!tool) {
      return errorResult(toConnectError(new DomainError("UNKNOWN_TOOL", `No tool '${request.params.name.slice(0, 100)}'; tools/list names them`, { metadata: { tool: request.params.name.slice(0, 100) } })));
    }
    let input: Message;
    try {
      input = parseArguments(tool.method.input, request.params.arguments, options.workspaceId);
    } catch (err) {
      return errorResult(toConnectError(err));
    }
    try {
      const token = request.params._meta?.progressToken;
      if (tool.stream && tool.name === "bash" && token !== undefined) {
        const progress: Progress = (n, message) => extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: n, message } });
        return await streamBash(tool as BridgedTool & { stream: NonNullable<BridgedTool["stream"]> }, input, options.caller, extra.signal, progress);
      }
      const res = await options.caller.transport.unary(tool.method, extra.signal, undefined, options.caller.header(), input);
      return toolResult(tool.method.localName, tool.method.output, res.message);
    } catch (err) {
      if (!(err instanceof ConnectError) && !(err instanceof DomainError)) options.onUnexpected?.(err);
      return errorResult(toConnectError(err));
    }
  });
  return server;
}
