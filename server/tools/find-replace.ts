/**
 * What the edit and patch tools share: loading a text file within the tool limit, counting exact
 * occurrences, and the FIND_NOT_FOUND error that points at the closest matching lines.
 */
import { DomainError } from "../../core/errors.ts";
import type { ClosestMatchInfo } from "../../core/errors.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";
import type { ToolLimits } from "./tool-limits.ts";
import { displayPath, jailPath } from "./paths.ts";
import { looksBinary, splitLines } from "./text.ts";

export async function loadText(ws: WorkspaceHandle, path: string, limits: ToolLimits): Promise<{ rel: string; text: string }> {
  const rel = jailPath(path, "path", true);
  const bytes = await ws.fs.readFile(rel, limits.maxFileBytes);
  if (looksBinary(bytes)) {
    throw new DomainError("UNSUPPORTED_FILE_TYPE", `'${displayPath(rel)}' is a binary file and cannot be edited as text`, { metadata: { path: rel } });
  }
  return { rel, text: new TextDecoder().decode(bytes) };
}

export function countOccurrences(text: string, needle: string): number {
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

export function notFoundError(rel: string, text: string, needle: string, message: string, meta: Record<string, string>): DomainError {
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
