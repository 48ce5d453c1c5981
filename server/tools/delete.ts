/** The delete tool: one file or symlink, never a directory and never a link's target. */
import type { ToolContext } from "./context.ts";
import { inTurn } from "./file-queue.ts";
import { jailPath } from "./paths.ts";

export interface DeleteInput {
  path: string;
}

/** Deletes one file or symlink; IS_DIRECTORY for directories, FILE_NOT_FOUND if absent. */
export async function deleteFile(ctx: ToolContext, input: DeleteInput): Promise<Record<string, never>> {
  const rel = jailPath(input.path, "path", true);
  await inTurn(ctx, rel, () => ctx.workspace.fs.remove(rel));
  return {};
}
