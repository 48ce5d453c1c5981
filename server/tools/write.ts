/** The write tool: whole-file replacement, atomic, creating parent directories, in turn with the file's other changes (file-queue.ts). */
import type { ToolContext } from "./context.ts";
import { inTurn } from "./file-queue.ts";
import { jailPath } from "./paths.ts";

export interface WriteInput {
  path: string;
  content: string;
}

/** Writes `content` to `path` atomically; reports the bytes written and whether the file is new. */
export async function writeFile(ctx: ToolContext, input: WriteInput): Promise<{ bytesWritten: number; created: boolean }> {
  const rel = jailPath(input.path, "path", true);
  const bytes = new TextEncoder().encode(input.content);
  const { created } = await inTurn(ctx, rel, () => ctx.workspace.fs.writeFile(rel, bytes));
  return { bytesWritten: bytes.length, created };
}
