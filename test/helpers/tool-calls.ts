/**
 * One call of every ToolService RPC, with a small valid request, so that tests about every tool
 * endpoint (permissions, a disabled workspace) cover each RPC the proto declares: a new RPC
 * without an entry here fails `everyToolCall`.
 */
import { ToolService } from "../../gen/agentworkspace/v1/tool_pb.js";
import type { ClientSet } from "./server.ts";

type Call = (clients: ClientSet, workspaceId: string, signal?: AbortSignal) => Promise<unknown>;

/** Drains a server stream, returning how many messages arrived. */
async function drain(stream: AsyncIterable<unknown>): Promise<number> {
  let n = 0;
  for await (const _ of stream) n++;
  return n;
}

const CALLS: Record<string, Call> = {
  bash: (c, workspaceId) => c.tools.bash({ workspaceId, command: "echo hi" }),
  streamBash: (c, workspaceId) => drain(c.tools.streamBash({ workspaceId, command: "echo hi" })),
  readFile: (c, workspaceId) => c.tools.readFile({ workspaceId, path: "README" }),
  writeFile: (c, workspaceId) => c.tools.writeFile({ workspaceId, path: "README", content: "hello\n" }),
  editFile: (c, workspaceId) => c.tools.editFile({ workspaceId, path: "README", oldString: "hello", newString: "hi" }),
  patchFile: (c, workspaceId) => c.tools.patchFile({ workspaceId, path: "README", patches: [{ find: "hi", replace: "hello" }] }),
  deleteFile: (c, workspaceId) => c.tools.deleteFile({ workspaceId, path: "gone" }),
  listFiles: (c, workspaceId) => c.tools.listFiles({ workspaceId, path: "" }),
  glob: (c, workspaceId) => c.tools.glob({ workspaceId, pattern: "*" }),
  grep: (c, workspaceId) => c.tools.grep({ workspaceId, pattern: "hello" }),
  streamGrep: (c, workspaceId) => drain(c.tools.streamGrep({ workspaceId, pattern: "hello" })),
  gitStatus: (c, workspaceId) => c.tools.gitStatus({ workspaceId }),
  gitDiff: (c, workspaceId) => c.tools.gitDiff({ workspaceId }),
  gitCommit: (c, workspaceId) => c.tools.gitCommit({ workspaceId, message: "m", files: ["README"] }),
  gitCheckout: (c, workspaceId) => c.tools.gitCheckout({ workspaceId, branch: "b", create: true }),
  gitPush: (c, workspaceId) => c.tools.gitPush({ workspaceId }),
};

/** Every ToolService RPC: its name, the tool it declares, and a call of it. */
export function everyToolCall(): Array<{ rpc: string; localName: string; call: Call }> {
  return ToolService.methods.map((m) => {
    const call = CALLS[m.localName];
    if (!call) throw new Error(`test/helpers/tool-calls.ts has no call for ToolService/${m.name}`);
    return { rpc: m.name, localName: m.localName, call };
  });
}
