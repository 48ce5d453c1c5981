/** The delete tool: one file or symlink, never a directory and never a link's target. */
import type { ToolContext } from "./context.ts";
import { jailPath } from "./paths.ts";

export interface DeleteInput {
  path: string;
}

/** Deletes one file or symlink; IS_DIRECTORY for directories, FILE_NOT_FOUND if absent. */
export async function deleteFile(ctx: ToolContext, input: DeleteInput): Promise<Record<string, never>> {
  await ctx.workspace.fs.remove(jailPath(input.path, "path", true));
  return {};
}
