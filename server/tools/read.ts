/**
 * The read tool: numbered lines of a text file, a directory's listing, or a binary file's size
 * and MIME type (never its bytes).
 */
import { DomainError } from "../../core/errors.ts";
import type { ToolContext } from "./context.ts";
import { displayPath, jailPath } from "./paths.ts";
import { guessMime, looksBinary, splitLines } from "./text.ts";

export interface ReadInput {
  path: string;
  offset: number;
  limit: number;
}

export interface ReadResult {
  kind: "text" | "directory" | "binary";
  content: string;
  totalLines: number;
  truncated: boolean;
  size: number;
  mimeType: string;
  path: string;
}

/** Reads a file window, a directory listing or binary metadata, with one resolution of the path. */
export async function readFile(ctx: ToolContext, input: ReadInput): Promise<ReadResult> {
  const { workspace: ws, limits } = ctx;
  if (input.offset < 0) throw new DomainError("INVALID_ARGUMENT", "offset must be 1 or more", { metadata: { field: "offset" } });
  if (input.limit < 0) throw new DomainError("INVALID_ARGUMENT", "limit must not be negative", { metadata: { field: "limit" } });
  const found = await ws.fs.read(jailPath(input.path, "path", false), limits.maxFileBytes);
  const rel = found.rel;
  if (found.kind === "directory") {
    const entries = found.entries.map((e) => (e.directory ? `${e.name}/` : e.name)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return { kind: "directory", content: entries.join("\n"), totalLines: entries.length, truncated: false, size: found.size, mimeType: "inode/directory", path: rel };
  }
  const bytes = found.bytes;
  const name = rel.slice(rel.lastIndexOf("/") + 1);
  if (looksBinary(bytes)) {
    return { kind: "binary", content: "", totalLines: 0, truncated: false, size: bytes.length, mimeType: guessMime(name, bytes, true), path: rel };
  }
  const lines = splitLines(new TextDecoder().decode(bytes));
  const offset = input.offset === 0 ? 1 : input.offset;
  const limit = input.limit === 0 ? limits.defaultReadLines : input.limit;
  if (offset > Math.max(lines.length, 1)) {
    throw new DomainError("INVALID_ARGUMENT", `offset ${offset} is past the end of '${displayPath(rel)}' (${lines.length} lines)`, {
      metadata: { field: "offset", total_lines: String(lines.length) },
    });
  }
  const window = lines.slice(offset - 1, offset - 1 + limit);
  let cut = false;
  const numbered = window.map((line, i) => {
    let text = line;
    if (text.length > limits.maxLineChars) {
      text = `${text.slice(0, limits.maxLineChars)}… [line truncated]`;
      cut = true;
    }
    return `${offset + i}: ${text}`;
  });
  return {
    kind: "text",
    content: numbered.join("\n"),
    totalLines: lines.length,
    truncated: cut || offset - 1 + window.length < lines.length,
    size: bytes.length,
    mimeType: guessMime(name, bytes, false),
    path: rel,
  };
}
