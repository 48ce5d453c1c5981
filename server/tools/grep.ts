/**
 * The grep tool: ripgrep run through the provider's exec primitive, its --json output turned into
 * matches as it arrives. The pattern goes in with -e and the path after "--", so neither can be
 * read as a flag; the search root is canonicalised by the jail first, because ripgrep follows a
 * symlink given as its root. ripgrep respects .gitignore and skips hidden files, as agents expect.
 */
import { DomainError } from "../../core/errors.ts";
import { remainingMs, type ToolContext } from "./context.ts";
import { jailPath } from "./paths.ts";

export interface GrepInput {
  pattern: string;
  path: string;
  glob: string;
  caseSensitive: boolean;
  contextLines: number;
  maxResults: number;
}

export interface GrepMatch {
  path: string;
  line: number;
  content: string;
}

/** Events of a search: matches as they are complete, then one `done`. */
export type GrepEvent = { type: "match"; match: GrepMatch } | { type: "done"; matchCount: number; truncated: boolean };

export const DEFAULT_MAX_RESULTS = 100;
export const MAX_CONTEXT_LINES = 20;

interface RgText {
  text?: string;
  bytes?: string;
}

function rgText(t: RgText | undefined): string {
  if (!t) return "";
  if (t.text !== undefined) return t.text;
  return t.bytes !== undefined ? Buffer.from(t.bytes, "base64").toString("utf8") : "";
}

function clean(line: string, max: number): string {
  let s = line.endsWith("\n") ? line.slice(0, -1) : line;
  if (s.endsWith("\r")) s = s.slice(0, -1);
  return s.length > max ? `${s.slice(0, max)}… [line truncated]` : s;
}

function relPath(p: string): string {
  return p.startsWith("./") ? p.slice(2) : p;
}

/**
 * Accumulates the lines of one file and releases each match once its after-context is known, so
 * matches stream in order with their own context block.
 */
class ContextAssembler {
  readonly #context: number;
  readonly #lines = new Map<number, string>();
  #pending: number[] = [];
  #path = "";

  constructor(context: number) {
    this.#context = context;
  }

  begin(path: string): void {
    this.#path = path;
    this.#lines.clear();
    this.#pending = [];
  }

  /** Records a line; returns matches whose context is now complete. */
  add(line: number, text: string, isMatch: boolean): GrepMatch[] {
    const ready = this.#release(line);
    this.#lines.set(line, text);
    if (isMatch) {
      if (this.#context === 0) ready.push({ path: this.#path, line, content: text });
      else this.#pending.push(line);
    }
    // Forget lines no pending or future match can need.
    const keepFrom = Math.min(this.#pending[0] ?? line, line) - this.#context;
    for (const k of this.#lines.keys()) {
      if (k < keepFrom) this.#lines.delete(k);
      else break;
    }
    return ready;
  }

  /** Releases everything at the end of the file. */
  end(): GrepMatch[] {
    return this.#release(Number.POSITIVE_INFINITY);
  }

  #release(upcoming: number): GrepMatch[] {
    const out: GrepMatch[] = [];
    while (this.#pending.length > 0 && upcoming > this.#pending[0] + this.#context) {
      const m = this.#pending.shift() as number;
      const block: string[] = [];
      for (let l = m - this.#context; l <= m + this.#context; l++) {
        const t = this.#lines.get(l);
        if (t === undefined) continue;
        block.push(l === m ? `--> ${t}` : `    ${t}`);
      }
      out.push({ path: this.#path, line: m, content: block.join("\n") });
    }
    return out;
  }
}

function validate(input: GrepInput): void {
  if (input.pattern === "") throw new DomainError("INVALID_ARGUMENT", "pattern is required", { metadata: { field: "pattern" } });
  if (input.pattern.includes("\0")) throw new DomainError("INVALID_PATTERN", "pattern contains a NUL byte", { metadata: { field: "pattern" } });
  if (input.contextLines < 0 || input.contextLines > MAX_CONTEXT_LINES) {
    throw new DomainError("INVALID_ARGUMENT", `context_lines must be between 0 and ${MAX_CONTEXT_LINES}`, { metadata: { field: "context_lines" } });
  }
  if (input.maxResults < 0) throw new DomainError("INVALID_ARGUMENT", "max_results must not be negative", { metadata: { field: "max_results" } });
}

/**
 * Runs the search and yields matches as ripgrep reports them. Once max_results matches are out
 * and one more is seen (or ripgrep ends), ripgrep is stopped and `done` reports truncation.
 */
export async function* grep(ctx: ToolContext, input: GrepInput): AsyncGenerator<GrepEvent> {
  const { workspace: ws, limits, signal } = ctx;
  validate(input);
  const rel = await ws.fs.resolve(jailPath(input.path, "path", false));
  await ws.fs.stat(rel); // FILE_NOT_FOUND before ripgrep would report it as an I/O error
  if (!ws.ripgrepPath) throw new DomainError("RIPGREP_NOT_FOUND", "ripgrep is not available in this workspace");
  const max = input.maxResults === 0 ? DEFAULT_MAX_RESULTS : input.maxResults;
  const argv = [ws.ripgrepPath, "--json", "--no-config", input.caseSensitive ? "--case-sensitive" : "--ignore-case"];
  if (input.contextLines > 0) argv.push("--context", String(input.contextLines));
  if (input.glob !== "") argv.push("--glob", input.glob);
  argv.push("-e", input.pattern, "--", rel === "" ? "." : rel);

  const left = remainingMs(ctx);
  const deadlineBound = left !== undefined && left < limits.grepTimeoutMs;
  const timeoutMs = deadlineBound ? (left as number) : limits.grepTimeoutMs;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal.addEventListener("abort", onAbort, { once: true });
  const asm = new ContextAssembler(input.contextLines);
  let sent = 0;
  let truncated = false;
  let stderr = "";
  let partial = "";
  let exitCode = 0;
  let timedOut = false;
  let spawnError: string | undefined;
  try {
    const events = ws.exec({ argv, cwd: "", timeoutMs, killGraceMs: 1000, signal: stop.signal });
    const decoder = new TextDecoder();
    outer: for await (const ev of events) {
      if (ev.type === "stderr") {
        if (stderr.length < 8192) stderr += decoder.decode(ev.data);
        continue;
      }
      if (ev.type === "exited") {
        exitCode = ev.exit.exitCode;
        timedOut = ev.exit.timedOut;
        spawnError = ev.exit.spawnError;
        continue;
      }
      if (ev.type !== "stdout") continue;
      partial += Buffer.from(ev.data).toString("utf8");
      let nl: number;
      while ((nl = partial.indexOf("\n")) >= 0) {
        const line = partial.slice(0, nl);
        partial = partial.slice(nl + 1);
        for (const m of parseRecord(line, asm, limits.maxLineChars)) {
          if (sent === max) {
            truncated = true;
            break outer;
          }
          sent++;
          yield { type: "match", match: m };
        }
      }
    }
    if (!truncated) {
      for (const m of asm.end()) {
        if (sent === max) {
          truncated = true;
          break;
        }
        sent++;
        yield { type: "match", match: m };
      }
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    stop.abort();
  }
  if (spawnError === "ENOENT" || spawnError === "EACCES") {
    throw new DomainError("RIPGREP_NOT_FOUND", "ripgrep is not available in this workspace");
  }
  if (!truncated && exitCode === 2 && /regex parse error|error parsing glob|regex.*(syntax|invalid)|unclosed/i.test(stderr)) {
    throw new DomainError("INVALID_PATTERN", `Invalid pattern: ${firstError(stderr)}`, { metadata: { field: /glob/i.test(stderr) ? "glob" : "pattern" } });
  }
  if (timedOut && !truncated) {
    const message = deadlineBound
      ? `The call's deadline passed after ${timeoutMs} ms; the search was stopped`
      : `The search ran past ${timeoutMs} ms and was stopped; narrow the path or the glob`;
    throw new DomainError("COMMAND_TIMEOUT", message, {
      metadata: { timeout_ms: String(timeoutMs), matches_found: String(sent), deadline: String(deadlineBound) },
    });
  }
  if (!truncated && exitCode > 2 && !signal.aborted) {
    throw new DomainError("INTERNAL", "ripgrep failed", { cause: stderr });
  }
  yield { type: "done", matchCount: sent, truncated };
}

function firstError(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("rg: regex parse error"));
  return (lines.find((l) => /error/i.test(l)) ?? lines.join(" ")).slice(0, 500);
}

function parseRecord(line: string, asm: ContextAssembler, maxChars: number): GrepMatch[] {
  if (line === "") return [];
  let rec: { type: string; data: { path?: RgText; lines?: RgText; line_number?: number } };
  try {
    rec = JSON.parse(line);
  } catch {
    return [];
  }
  switch (rec.type) {
    case "begin":
      asm.begin(relPath(rgText(rec.data.path)));
      return [];
    case "match":
    case "context":
      return rec.data.line_number === undefined ? [] : asm.add(rec.data.line_number, clean(rgText(rec.data.lines), maxChars), rec.type === "match");
    case "end":
      return asm.end();
    default:
      return [];
  }
}

/** Collects a whole search into one result. */
export async function grepAll(ctx: ToolContext, input: GrepInput): Promise<{ matches: GrepMatch[]; truncated: boolean }> {
  const matches: GrepMatch[] = [];
  let truncated = false;
  for await (const ev of grep(ctx, input)) {
    if (ev.type === "match") matches.push(ev.match);
    else truncated = ev.truncated;
  }
  return { matches, truncated };
}
