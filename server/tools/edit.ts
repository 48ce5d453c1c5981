/**
 * The edit tool: exact string replacement, read-modify-write through the atomic write primitive,
 * so a failed edit leaves the file untouched; edits of one file take turns (file-queue.ts).
 */
import { DomainError } from "../../core/errors.ts";
import type { ToolContext } from "./context.ts";
import { inTurn } from "./file-queue.ts";
import { countOccurrences, linesChanged, loadText, notFoundError } from "./find-replace.ts";
import { jailPath } from "./paths.ts";

/** Exact messages of the edit contract (OpenCode's wording). */
export const NOT_FOUND_MESSAGE = "oldString not found in content";
export const NOT_UNIQUE_MESSAGE =
  "Found multiple matches for oldString. Provide more surrounding lines in oldString to identify the correct match, or set replace_all to replace every occurrence.";

export interface EditInput {
  path: string;
  oldString: string;
  newString: string;
  replaceAll: boolean;
}

/** Replaces one unique occurrence (or all) of oldString. */
export async function editFile(ctx: ToolContext, input: EditInput): Promise<{ replacements: number; linesChanged: number }> {
  const ws = ctx.workspace;
  if (input.oldString === "") throw new DomainError("INVALID_ARGUMENT", "oldString must not be empty", { metadata: { field: "old_string" } });
  if (input.oldString === input.newString) {
    throw new DomainError("INVALID_ARGUMENT", "oldString and newString must be different", { metadata: { field: "new_string" } });
  }
  return inTurn(ctx, jailPath(input.path, "path", true), async () => {
    const { rel, text } = await loadText(ws, input.path, ctx.limits);
    const count = countOccurrences(text, input.oldString);
    if (count === 0) throw notFoundError(rel, text, input.oldString, NOT_FOUND_MESSAGE, {});
    if (count > 1 && !input.replaceAll) {
      throw new DomainError("FIND_NOT_UNIQUE", NOT_UNIQUE_MESSAGE, { metadata: { path: rel, occurrences: String(count) } });
    }
    const updated = text.split(input.oldString).join(input.newString);
    await ws.fs.writeFile(rel, new TextEncoder().encode(updated));
    return { replacements: count, linesChanged: linesChanged(text, updated) };
  });
}
