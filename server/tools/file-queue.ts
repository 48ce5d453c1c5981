/**
 * The file tools that change a file (WriteFile, EditFile, PatchFile, DeleteFile) take turns per
 * path and workspace. EditFile and PatchFile read, change and write back: two of them on one file
 * at once would each write what they read, and the first one's change would be lost although its
 * call succeeded. Queued, every call sees the file as the one before it left it.
 *
 * The queue is the server's: it orders tool calls, not commands, which may still write the file
 * between a tool's read and its write (as they may in any editor). Its key is the path as the jail
 * normalised it, so `a/../b.txt` and `b.txt` share a turn; two names of one file through a link do
 * not. A workspace handle lives as long as the server knows the workspace, and its queues with it.
 * A call whose caller cancelled while it waited gives up its turn unrun: CANCELLED, nothing changed.
 */
import { DomainError } from "../../core/errors.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";
import type { ToolContext } from "./context.ts";

const queues = new WeakMap<WorkspaceHandle, Map<string, Promise<void>>>();

/**
 * Runs `change` once every earlier change of `rel` in the call's workspace has settled, and before
 * any later one; not at all when the call was cancelled by then.
 */
export function inTurn<T>(ctx: Pick<ToolContext, "workspace" | "signal" | "changes">, rel: string, change: () => Promise<T>): Promise<T> {
  const ws = ctx.workspace;
  let byPath = queues.get(ws);
  if (!byPath) {
    byPath = new Map();
    queues.set(ws, byPath);
  }
  const previous = byPath.get(rel) ?? Promise.resolve();
  const result = previous.then(() => {
    if (ctx.signal.aborted) throw new DomainError("CANCELLED", `The call was cancelled before it changed '${rel}'`);
    return ctx.changes ? ctx.changes.fileChange(rel, change) : change();
  });
  const settled = result.then(
    () => undefined,
    () => undefined,
  );
  byPath.set(rel, settled);
  void settled.then(() => {
    if (byPath.get(rel) === settled) byPath.delete(rel);
  });
  return result;
}
