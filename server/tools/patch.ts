/**
 * The patch tool: ordered exact find/replace pairs applied to one file, all or nothing, through
 * the atomic write primitive, in turn with the file's other changes (file-queue.ts).
 */
import { DomainError } from "../../core/errors.ts";
import type { ToolContext } from "./context.ts";
import { inTurn } from "./file-queue.ts";
import { countOccurrences, loadText, notFoundError } from "./find-replace.ts";
import { jailPath } from "./paths.ts";

export interface PatchInput {
  path: string;
  patches: Array<{ find: string; replace: string }>;
}

/** Applies patches in order, each to the result of the previous; all or nothing. */
export async function patchFile(ctx: ToolContext, input: PatchInput): Promise<{ patchesApplied: number }> {
  const { patches } = input;
  if (patches.length === 0) throw new DomainError("INVALID_ARGUMENT", "patches must not be empty", { metadata: { field: "patches" } });
  patches.forEach((p, i) => {
    if (p.find === "") {
      throw new DomainError("INVALID_ARGUMENT", `patch ${i + 1}: find must not be empty`, { metadata: { field: "patches", patch_index: String(i) } });
    }
  });
  return inTurn(ctx, jailPath(input.path, "path", true), async () => {
    const { rel, text } = await loadText(ctx.workspace, input.path, ctx.limits);
    let current = text;
    for (const [i, p] of patches.entries()) {
      const meta = { path: rel, patch_index: String(i) };
      const count = countOccurrences(current, p.find);
      if (count === 0) {
        throw notFoundError(rel, current, p.find, `Patch ${i + 1} of ${patches.length}: find text not found in content; no patch was applied`, meta);
      }
      if (count > 1) {
        throw new DomainError(
          "FIND_NOT_UNIQUE",
          `Patch ${i + 1} of ${patches.length}: find text matches ${count} locations; add surrounding lines to make it unique. No patch was applied`,
          { metadata: { ...meta, occurrences: String(count) } },
        );
      }
      const at = current.indexOf(p.find);
      current = current.slice(0, at) + p.replace + current.slice(at + p.find.length);
    }
    await ctx.workspace.fs.writeFile(rel, new TextEncoder().encode(current));
    return { patchesApplied: patches.length };
  });
}
