/**
 * Grep where no process can run ripgrep (the memory provider): the same search done in the
 * server over the provider's walk and reads, with the same results as ripgrep gives: matches per
 * line with the same context blocks, the same truncation at max_results, the same faults.
 *
 * Patterns are compiled with re2js, a pure JavaScript port of RE2. ripgrep's default engine is
 * Rust's `regex`, of the same family: the same syntax (Perl classes, `\pL`, `[[:alpha:]]`, inline
 * flags such as `(?i)`), no backreferences or look-around (refused here as there, INVALID_PATTERN),
 * and matching in time linear in the input, so no pattern can stall the server. The differences
 * from ripgrep, which the README lists:
 * - ignore files (`.gitignore`, `.ignore`, `.rgignore`) are not read; hidden files and
 *   directories are skipped as ripgrep skips them;
 * - a `\n` in a pattern simply never matches (ripgrep refuses it); matching is per line either way;
 * - the glob is matched with picomatch (as ListFiles and Glob do), where ripgrep uses gitignore
 *   rules: a glob without `/` matches a file's name at any depth in both, `!glob` excludes;
 * - files are searched in the walk's fixed order (ripgrep's order varies between runs).
 */
import picomatch from "picomatch";
import { RE2JS } from "re2js";
import { DomainError } from "../../core/errors.ts";
import type { ToolContext } from "./context.ts";
import { remainingMs } from "./context.ts";
import { ContextAssembler, clean, DEFAULT_MAX_RESULTS, type GrepEvent, type GrepInput, type GrepMatch, searchTimedOut } from "./grep.ts";

/** The most bytes of one file searched: more than any memory workspace file holds (48,000 characters). */
const MAX_FILE_BYTES = 1024 * 1024;

/** Which files a search visits, by the glob as ripgrep's --glob would choose them. */
function fileFilter(glob: string): (path: string) => boolean {
  const hidden = (p: string) => p.split("/").some((seg) => seg.startsWith("."));
  if (glob === "") return (p) => !hidden(p);
  const negated = glob.startsWith("!");
  const body = negated ? glob.slice(1) : glob;
  let matches: (p: string) => boolean;
  try {
    matches = picomatch(body.startsWith("/") ? body.slice(1) : body, { dot: true, basename: !body.includes("/") });
  } catch (err) {
    throw new DomainError("INVALID_PATTERN", `Invalid pattern: glob '${glob.slice(0, 200)}' cannot be parsed`, { metadata: { field: "glob" }, cause: err });
  }
  // A hidden directory is never entered; a hidden file is searched only when the glob names it.
  const inHiddenDir = (p: string) => p.split("/").slice(0, -1).some((seg) => seg.startsWith("."));
  return negated ? (p) => !hidden(p) && !matches(p) : (p) => !inHiddenDir(p) && matches(p);
}

function compile(input: GrepInput): RE2JS {
  try {
    return RE2JS.compile(input.pattern, input.caseSensitive ? 0 : RE2JS.CASE_INSENSITIVE);
  } catch (err) {
    throw new DomainError("INVALID_PATTERN", `Invalid pattern: ${String((err as Error).message).slice(0, 500)}`, { metadata: { field: "pattern" }, cause: err });
  }
}

/**
 * The search for a workspace without processes; `rel` and `type` are the search path as grep()
 * resolved and checked it.
 */
export async function* grepInServer(ctx: ToolContext, input: GrepInput, rel: string, type: "file" | "directory"): AsyncGenerator<GrepEvent> {
  const { workspace: ws, limits, signal } = ctx;
  const re = compile(input);
  const wanted = fileFilter(input.glob);
  const max = input.maxResults === 0 ? DEFAULT_MAX_RESULTS : input.maxResults;
  const left = remainingMs(ctx);
  const deadlineBound = left !== undefined && left < limits.grepTimeoutMs;
  const timeoutMs = deadlineBound ? (left as number) : limits.grepTimeoutMs;
  const deadline = performance.now() + timeoutMs;
  const cut = rel === "" ? 0 : rel.length + 1;
  const asm = new ContextAssembler(input.contextLines);
  let sent = 0;
  const files: Iterable<{ path: string }> | AsyncIterable<{ path: string }> = type === "file" ? [{ path: rel }] : ws.fs.walk(rel);
  for await (const file of files) {
    if (signal.aborted) return;
    if (performance.now() > deadline) throw searchTimedOut(timeoutMs, sent, deadlineBound);
    // An explicit file is searched whatever the glob says, as ripgrep does.
    if (type === "directory" && !wanted(file.path.slice(cut))) continue;
    let bytes: Uint8Array;
    try {
      bytes = await ws.fs.readFile(file.path, MAX_FILE_BYTES);
    } catch (err) {
      // Gone or refused since the walk saw it (a sensitive file): not searched, as ripgrep skips unreadable files.
      if (err instanceof DomainError && err.reason !== "INTERNAL") continue;
      throw err;
    }
    const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
    asm.begin(file.path);
    let offset = 0;
    const lines = text.split("\n");
    if (lines.at(-1) === "") lines.pop();
    const ready = function* (): Generator<GrepMatch> {
      for (let i = 0; i < lines.length; i++) {
        const raw = Buffer.from(`${lines[i]}\n`);
        const line = { text: clean(raw, limits.maxLineChars), raw, offset };
        offset += raw.length;
        for (const c of asm.add(i + 1, line, re.matcher(lines[i]).find())) yield c.match;
      }
      for (const c of asm.end()) yield c.match;
    };
    for (const match of ready()) {
      // One match past max_results says the search was truncated.
      if (sent === max) {
        yield { type: "done", matchCount: sent, truncated: true };
        return;
      }
      sent++;
      yield { type: "match", match };
    }
  }
  yield { type: "done", matchCount: sent, truncated: false };
}
