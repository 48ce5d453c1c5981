/**
 * The MCP bridge's tools, derived from ToolService's descriptors and the tool registry, never
 * from a list kept by hand: one MCP tool per unary RPC, named after the registry tool it belongs to
 * (`read`), or, for a registry tool with several RPCs, the tool and the RPC's own name (`git_status`,
 * `git_commit`). A server-streaming RPC named `Stream<X>` is the streamed form of X's tool
 * (`StreamBash` under `bash`, used when the client asks for progress). Descriptions and field
 * descriptions are the protos' comments; input schemas are the request messages' JSON Schemas
 * without `workspace_id`, which the bridge binds.
 *
 * ProcessService's RPCs (background processes and exposed ports, all of the `bash` tool) follow,
 * each named after its RPC (`start_process`, `read_process_output`, `expose_port`): listed and
 * allowed with `bash`. AttachProcess, a stream with no unary form, is not bridged;
 * `read_process_output` from the offsets it returns follows a process instead.
 */
import type { DescMethod, DescMethodServerStreaming, DescMethodUnary, DescService } from "@bufbuild/protobuf";
import { ProcessService } from "../../gen/agentworkspace/v1/process_pb.js";
import { ToolService } from "../../gen/agentworkspace/v1/tool_pb.js";
import { TOOL_NAMES, toolNameOf } from "../tools/registry.ts";
import { apiComments } from "./proto-comments.ts";
import { type JsonSchema, messageSchema } from "./schema.ts";

/** The request field the bridge fills in itself: the workspace it is bound to. */
export const BOUND_FIELD = "workspace_id";

/** One MCP tool over one ToolService RPC. */
export interface BridgedTool {
  /** The MCP tool name ("read", "git_status"). */
  name: string;
  /** The registry tool it belongs to, which permissions and the audit trail name ("git"). */
  tool: string;
  /** The unary RPC a call makes. */
  method: DescMethodUnary;
  /** The RPC's streamed form, when there is one (a call asking for progress uses it). */
  stream?: DescMethodServerStreaming;
  description: string;
  inputSchema: JsonSchema;
}

/** snake_case of a PascalCase name: "GitStatus" → "git_status". */
const snake = (name: string) => name.replace(/[A-Z]/g, (c, at: number) => (at === 0 ? "" : "_") + c.toLowerCase());

/** What every tool's description ends with: where its paths lead. */
const PATHS = "Paths are relative to the workspace, or absolute under /workspace.";

/**
 * The tools of `service`, in the registry's order. Throws when a streaming RPC has no unary form
 * of the same tool to belong to (the bridge would have no tool for it): a build fault, like a
 * registry mismatch.
 */
export function toolCatalog(service: DescService = ToolService, comments: ReadonlyMap<string, string> = apiComments()): BridgedTool[] {
  const byTool = new Map<string, DescMethod[]>();
  for (const method of service.methods) {
    const tool = toolNameOf(method);
    if (tool === "") continue;
    byTool.set(tool, [...(byTool.get(tool) ?? []), method]);
  }
  const order = (tool: string) => (TOOL_NAMES.includes(tool) ? TOOL_NAMES.indexOf(tool) : TOOL_NAMES.length);
  const out: BridgedTool[] = [];
  for (const [tool, methods] of [...byTool].sort(([a], [b]) => order(a) - order(b))) {
    const unary = methods.filter((m): m is DescMethodUnary => m.methodKind === "unary");
    for (const m of methods) {
      if (m.methodKind === "unary") continue;
      if (m.methodKind !== "server_streaming" || !m.name.startsWith("Stream") || !unary.some((u) => u.name === m.name.slice("Stream".length))) {
        throw new Error(`${service.typeName}/${m.name} (tool "${tool}") has no unary RPC it streams; the MCP bridge has no tool for it`);
      }
    }
    const prefix = tool.charAt(0).toUpperCase() + tool.slice(1);
    for (const method of unary) {
      const rest = method.name.startsWith(prefix) && method.name !== prefix ? method.name.slice(prefix.length) : method.name;
      const name = unary.length === 1 ? tool : `${tool}_${snake(rest)}`;
      const stream = methods.find((m): m is DescMethodServerStreaming => m.methodKind === "server_streaming" && m.name === `Stream${method.name}`);
      const own = comments.get(`${service.typeName}.${method.name}`) ?? `${method.name} (tool ${tool}).`;
      const description = [own, PATHS, stream && tool === "bash" ? "Send a progressToken to receive the output as progress notifications while the command runs." : ""].filter(Boolean).join(" ");
      const inputSchema = messageSchema(method.input, { omit: [BOUND_FIELD], describe: (fullName) => comments.get(fullName) });
      out.push({ name, tool, method, ...(stream ? { stream } : {}), description, inputSchema });
    }
  }
  return out;
}

/** ProcessService's unary RPCs as tools named after them (`start_process`), of the tool their option names. */
export function processCatalog(service: DescService = ProcessService, comments: ReadonlyMap<string, string> = apiComments()): BridgedTool[] {
  const out: BridgedTool[] = [];
  for (const method of service.methods.filter((m): m is DescMethodUnary => m.methodKind === "unary")) {
    const tool = toolNameOf(method);
    if (tool === "") continue;
    const description = comments.get(`${service.typeName}.${method.name}`) ?? `${method.name} (tool ${tool}).`;
    const inputSchema = messageSchema(method.input, { omit: [BOUND_FIELD], describe: (fullName) => comments.get(fullName) });
    out.push({ name: snake(method.name), tool, method, description, inputSchema });
  }
  return out;
}

/** Every tool the bridge offers: ToolService's, then ProcessService's. */
export function bridgeCatalog(): BridgedTool[] {
  const comments = apiComments();
  return [...toolCatalog(ToolService, comments), ...processCatalog(ProcessService, comments)];
}
