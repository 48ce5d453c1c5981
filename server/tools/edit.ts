/**
 * The edit and patch tools: exact string replacement, read-modify-write through the atomic
 * write primitive, so a failed edit or patch leaves the file untouched.
 */
import { DomainError } from "../../core/errors.ts";
import type { ClosestMatchInfo } from "../../core/errors.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";
import type { ToolLimits } from "./tool-limits.ts";
import { displayPath, jailPath } from "./paths.ts";
import { looksBinary, splitLines } from "./text.ts";

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

async function loadText(ws: WorkspaceHandle, path: string, limits: ToolLimits): Promise<{ rel: string; text: string }> {
  const rel = jailPath(path, "path", true);
  const bytes = await ws.fs.readFile(rel, limits.maxFileBytes);
  if (looksBinary(bytes)) {
    throw new DomainError("UNSUPPORTED_FILE_TYPE", `'${displayPath(rel)}' is a binary file and cannot be edited as text`, { metadata: { path: rel } });
  }
  return { rel, text: new TextDecoder().decode(bytes) };
}

function countOccurrences(text: string, needle: string): number {
  let count = 0;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count++;
  return count;
}

/** Lines that differ between two texts, after removing their common leading and trailing lines. */
export function linesChanged(before: string, after: string): number {
  const a = splitLines(before);
  const b = splitLines(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  return Math.max(endA - start, endB - start);
}

/** Replaces one unique occurrence (or all) of oldString. */
export async function editFile(ws: WorkspaceHandle, input: EditInput, limits: ToolLimits): Promise<{ replacements: number; linesChanged: number }> {
  if (input.oldString === "") throw new DomainError("INVALID_ARGUMENT", "oldString must not be empty", { metadata: { field: "old_string" } });
  if (input.oldString === input.newString) {
    throw new DomainError("INVALID_ARGUMENT", "oldString and newString must be different", { metadata: { field: "new_string" } });
  }
  const { rel, text } = await loadText(ws, input.path, limits);
  const count = countOccurrences(text, input.oldString);
  if (count === 0) throw notFound(rel, text, input.oldString, NOT_FOUND_MESSAGE, {});
  if (count > 1 && !input.replaceAll) {
    throw new DomainError("FIND_NOT_UNIQUE", NOT_UNIQUE_MESSAGE, { metadata: { path: rel, occurrences: String(count) } });
  }
  const updated = text.split(input.oldString).join(input.newString);
  await ws.fs.writeFile(rel, new TextEncoder().encode(updated));
  return { replacements: count, linesChanged: linesChanged(text, updated) };
}

/** Applies patches in order, each to the result of the previous; all or nothing. */
export async function patchFile(
  ws: WorkspaceHandle,
  path: string,
  patches: Array<{ find: string; replace: string }>,
  limits: ToolLimits,
): Promise<{ patchesApplied: number }> {
  if (patches.length === 0) throw new DomainError("INVALID_ARGUMENT", "patches must not be empty", { metadata: { field: "patches" } });
  patches.forEach((p, i) => {
    if (p.find === "") {
      throw new DomainError("INVALID_ARGUMENT", `patch ${i + 1}: find must not be empty`, { metadata: { field: "patches", patch_index: String(i) } });
    }
  });
  const { rel, text } = await loadText(ws, path, limits);
  let current = text;
  for (const [i, p] of patches.entries()) {
    const meta = { path: rel, patch_index: String(i) };
    const count = countOccurrences(current, p.find);
    if (count === 0) {
      throw notFound(rel, current, p.find, `Patch ${i + 1} of ${patches.length}: find text not found in content; no patch was applied`, meta);
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
  await ws.fs.writeFile(rel, new TextEncoder().encode(current));
  return { patchesApplied: patches.length };
}

function notFound(rel: string, text: string, needle: string, message: string, meta: Record<string, string>): DomainError {
  const closest = closestMatch(text, needle);
  return new DomainError("FIND_NOT_FOUND", message, {
    metadata: { path: rel, ...meta, ...(closest ? { closest_lines: `${closest.startLine}-${closest.endLine}` } : {}) },
    payload: closest ? { case: "closestMatch", value: closest } : undefined,
  });
}

function bigrams(s: string): Map<string, number> {
  const m = new Map<string, number>();
  const t = s.trim().replace(/\s+/g, " ");
  for (let i = 0; i < t.length - 1; i++) {
    const g = t.slice(i, i + 2);
    m.set(g, (m.get(g) ?? 0) + 1);
  }
  return m;
}

function dice(a: Map<string, number>, b: Map<string, number>, aKey: string, bKey: string): number {
  if (aKey.trim() === bKey.trim()) return 1;
  let sizeA = 0;
  let sizeB = 0;
  let common = 0;
  for (const v of a.values()) sizeA += v;
  for (const [g, v] of b) {
    sizeB += v;
    common += Math.min(v, a.get(g) ?? 0);
  }
  return sizeA + sizeB === 0 ? 0 : (2 * common) / (sizeA + sizeB);
}

/**
 * Finds the window of lines (as many as the needle has) most similar to the needle, by the mean
 * bigram similarity of corresponding lines (whitespace-insensitive). Bounded work: skipped for
 * very large files or needles. Returns undefined when nothing is at least 40% similar.
 */
export function closestMatch(text: string, needle: string): ClosestMatchInfo | undefined {
  const lines = splitLines(text);
  const want = splitLines(needle);
  if (want.length === 0 || lines.length === 0 || lines.length > 20000 || want.length > 200) return undefined;
  const wantGrams = want.map(bigrams);
  const lineGrams = lines.map(bigrams);
  let best = { score: 0, start: -1 };
  const windows = Math.max(1, lines.length - want.length + 1);
  for (let s = 0; s < windows; s++) {
    let sum = 0;
    for (let j = 0; j < want.length && s + j < lines.length; j++) {
      sum += dice(wantGrams[j], lineGrams[s + j], want[j], lines[s + j]);
    }
    const score = sum / want.length;
    if (score > best.score) best = { score, start: s };
  }
  if (best.start < 0 || best.score < 0.4) return undefined;
  const end = Math.min(lines.length, best.start + want.length);
  return {
    startLine: best.start + 1,
    endLine: end,
    text: lines.slice(best.start, end).join("\n"),
    similarity: Math.round(best.score * 1000) / 1000,
  };
}
