/**
 * The tool registry: the tool name each ToolService RPC declares with the `(agentworkspace.v1.tool)`
 * method option, mapped to the implementation of each of its RPCs. Every implementation has the
 * one shape `(ctx, input) → Promise<result>` or `(ctx, input) → AsyncIterable<event>`. The
 * service adapter, and later permissions, audit and the MCP bridge, all find tools here; a new
 * tool is a file plus an entry, and `checkToolRegistry` refuses to start a server whose proto and
 * registry disagree.
 */
import { type DescMethod, type DescService, getOption } from "@bufbuild/protobuf";
import { tool as toolOption } from "../../gen/agentworkspace/v1/options_pb.js";
import { runBash, streamBash } from "./bash.ts";
import type { ToolContext } from "./context.ts";
import { deleteFile } from "./delete.ts";
import { editFile } from "./edit.ts";
import { gitCheckout, gitCommit, gitDiff, gitPush, gitStatus } from "./git.ts";
import { glob } from "./glob.ts";
import { grep, grepAll } from "./grep.ts";
import { listFiles } from "./list.ts";
import { patchFile } from "./patch.ts";
import { readFile } from "./read.ts";
import { writeFile } from "./write.ts";

/** Tool names mapped to their RPCs (by the proto method's local name) and implementations. */
export const TOOL_REGISTRY = {
  bash: { bash: runBash, streamBash },
  read: { readFile },
  write: { writeFile },
  edit: { editFile },
  patch: { patchFile },
  delete: { deleteFile },
  list: { listFiles },
  glob: { glob },
  grep: { grep: grepAll, streamGrep: grep },
  git: { gitStatus, gitDiff, gitCommit, gitCheckout, gitPush },
} as const satisfies Record<string, Record<string, (ctx: ToolContext, input: never) => Promise<unknown> | AsyncIterable<unknown>>>;

/** Every tool name an agent type's configuration may list. */
export const TOOL_NAMES: readonly string[] = Object.keys(TOOL_REGISTRY);

/** A tool name, as the proto option spells it. */
export type ToolName = keyof typeof TOOL_REGISTRY;

/** The tool an RPC belongs to, from its `(agentworkspace.v1.tool)` option; "" when it has none. */
export function toolNameOf(method: DescMethod): string {
  // Read from the descriptor once per method: every call asks, and reading an option decodes it.
  let name = toolNames.get(method);
  if (name === undefined) {
    name = getOption(method, toolOption);
    toolNames.set(method, name);
  }
  return name;
}
const toolNames = new WeakMap<DescMethod, string>();

/**
 * Proves that `service` and `registry` agree: every method carries the tool option and the
 * registry has an implementation for it under that tool, and every registry entry belongs to a
 * method that declares that tool. Throws an Error listing every mismatch.
 */
export function checkToolRegistry(service: DescService, registry: Record<string, Record<string, unknown>> = TOOL_REGISTRY): void {
  const problems: string[] = [];
  const declared = new Set<string>();
  for (const method of service.methods) {
    const name = toolNameOf(method);
    if (name === "") {
      problems.push(`${service.typeName}/${method.name} has no (agentworkspace.v1.tool) option`);
      continue;
    }
    declared.add(`${name}.${method.localName}`);
    if (typeof registry[name]?.[method.localName] !== "function") {
      problems.push(`${service.typeName}/${method.name} declares tool "${name}", but the registry has no ${name}.${method.localName}`);
    }
  }
  for (const [name, methods] of Object.entries(registry)) {
    for (const localName of Object.keys(methods)) {
      if (!declared.has(`${name}.${localName}`)) problems.push(`registry entry ${name}.${localName} belongs to no ${service.typeName} method declaring tool "${name}"`);
    }
  }
  if (problems.length > 0) throw new Error(`tool registry and ${service.typeName} disagree:\n- ${problems.join("\n- ")}`);
}
