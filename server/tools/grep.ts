/**
 * The grep tool: ripgrep run through the provider's exec primitive, its --json output turned into
 * matches as it arrives. The pattern goes in with -e and the path after "--", so neither can be
 * read as a flag. ripgrep respects .gitignore and skips hidden files, as agents expect.
 *
 * The search path is resolved by the jail first and ripgrep starts in that directory, opened by
 * descriptor (or, for one file, in its parent with the file's name as argument); FIFOs, sockets
 * and devices are refused before anything opens them. ripgrep itself walks by name, so a command
 * racing it could swap a directory for a link to somewhere else mid-walk. Therefore nothing
 * ripgrep reports is passed on unchecked: every line of a match (its context included) is read
 * again, at the byte offset ripgrep gives, from the file the workspace holds at that path,
 * opened through the jail, and a match whose bytes differ or whose file is not there is dropped.
 * What a search returns is thus always the workspace's own content under the workspace's own
 * names.
 */
import { DomainError } from "../../core/errors.ts";
import { MAX_ARG_BYTES } from "./bash.ts";
import { remainingMs, type ToolContext } from "./context.ts";
import { grepInServer } from "./grep-memory.ts";
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

/** The raw bytes ripgrep reports for a path or line (UTF-8 text, or base64 when not valid UTF-8). */
function rgBytes(t: RgText | undefined): Buffer {
  if (!t) return Buffer.alloc(0);
  if (t.text !== undefined) return Buffer.from(t.text, "utf8");
  return t.bytes !== undefined ? Buffer.from(t.bytes, "base64") : Buffer.alloc(0);
}

export function clean(raw: Buffer, max: number): string {
  let s = raw.toString("utf8");
  if (s.endsWith("\n")) s = s.slice(0, -1);
  if (s.endsWith("\r")) s = s.slice(0, -1);
  return s.length > max ? `${s.slice(0, max)}… [line truncated]` : s;
}

/** One line of a file as ripgrep reported it. */
interface Line {
  text: string;
  raw: Buffer;
  /** Byte offset of the line's start in the file. */
  offset: number;
}

/** A complete match: what is sent, and the lines it was built from (to check them). */
interface Candidate {
  match: GrepMatch;
  lines: Line[];
}

/**
 * Accumulates the lines of one file and releases each match once its after-context is known, so
 * matches stream in order with their own context block.
 */
export class ContextAssembler {
  readonly #context: number;
  readonly #lines = new Map<number, Line>();
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
  add(n: number, line: Line, isMatch: boolean): Candidate[] {
    const ready = this.#release(n);
    this.#lines.set(n, line);
    if (isMatch) {
      if (this.#context === 0) ready.push({ match: { path: this.#path, line: n, content: line.text }, lines: [line] });
      else this.#pending.push(n);
    }
    // Forget lines no pending or future match can need.
    const keepFrom = Math.min(this.#pending[0] ?? n, n) - this.#context;
    for (const k of this.#lines.keys()) {
      if (k < keepFrom) this.#lines.delete(k);
      else break;
    }
    return ready;
  }

  /** Releases everything at the end of the file. */
  end(): Candidate[] {
    return this.#release(Number.POSITIVE_INFINITY);
  }

  #release(upcoming: number): Candidate[] {
    const out: Candidate[] = [];
    while (this.#pending.length > 0 && upcoming > this.#pending[0] + this.#context) {
      const m = this.#pending.shift() as number;
      const block: string[] = [];
      const lines: Line[] = [];
      for (let l = m - this.#context; l <= m + this.#context; l++) {
        const t = this.#lines.get(l);
        if (t === undefined) continue;
        block.push(l === m ? `--> ${t.text}` : `    ${t.text}`);
        lines.push(t);
      }
      out.push({ match: { path: this.#path, line: m, content: block.join("\n") }, lines });
    }
    return out;
  }
}

function validate(input: GrepInput): void {
  if (input.pattern === "") throw new DomainError("INVALID_ARGUMENT", "pattern is required", { metadata: { field: "pattern" } });
  for (const [field, value] of [["pattern", input.pattern], ["glob", input.glob]] as const) {
    if (Buffer.byteLength(value) >= MAX_ARG_BYTES) {
      throw new DomainError("INVALID_ARGUMENT", `${field} is longer than ${MAX_ARG_BYTES - 1} bytes`, { metadata: { field, max_bytes: String(MAX_ARG_BYTES - 1) } });
    }
  }
  if (input.pattern.includes("\0")) throw new DomainError("INVALID_PATTERN", "pattern contains a NUL byte", { metadata: { field: "pattern" } });
  if (input.contextLines < 0 || input.contextLines > MAX_CONTEXT_LINES) {
    throw new DomainError("INVALID_ARGUMENT", `context_lines must be between 0 and ${MAX_CONTEXT_LINES}`, { metadata: { field: "context_lines" } });
  }
  if (input.maxResults < 0) throw new DomainError("INVALID_ARGUMENT", "max_results must not be negative", { metadata: { field: "max_results" } });
}

/**
 * Bytes of each line that are checked: enough for everything a match shows of it (a line is cut
 * at maxLineChars characters of at most 4 bytes each), so what is sent is always what was checked.
 */
const checkedBytes = (limits: { maxLineChars: number }) => limits.maxLineChars * 4 + 2;
/** Candidates checked together at first, and at most (the batch grows fourfold each time). */
const FIRST_BATCH = 4;
const MAX_BATCH = 1024;
/** Lines checked per read of byte ranges (bounded requests, whatever a batch holds). */
const RANGES_PER_READ = 512;

/**
 * Keeps the candidates whose every line is, byte for byte, what the workspace's file holds at the
 * offset ripgrep gave (as far as the match shows it): reads of byte ranges per file. A file that
 * cannot be read through the jail (gone, outside, not a regular file) loses its candidates.
 */
async function verified(ctx: ToolContext, candidates: Candidate[]): Promise<GrepMatch[]> {
  const limit = checkedBytes(ctx.limits);
  const byPath = new Map<string, Candidate[]>();
  for (const c of candidates) byPath.set(c.match.path, [...(byPath.get(c.match.path) ?? []), c]);
  const good = new Set<Candidate>();
  for (const [path, list] of byPath) {
    const lines = list.flatMap((c) => c.lines);
    const read: Uint8Array[] = [];
    try {
      for (let i = 0; i < lines.length; i += RANGES_PER_READ) {
        const ranges = lines.slice(i, i + RANGES_PER_READ).map((l): [number, number] => [l.offset, Math.min(l.raw.length, limit)]);
        read.push(...(await ctx.workspace.fs.readRanges(path, ranges)));
      }
    } catch (err) {
      if (err instanceof DomainError && err.reason !== "INTERNAL" && err.reason !== "WORKSPACE_NOT_READY") continue;
      throw err;
    }
    let at = 0;
    for (const c of list) {
      if (c.lines.every((l) => Buffer.compare(l.raw.subarray(0, limit), read[at++]) === 0)) good.add(c);
    }
  }
  return candidates.filter((c) => good.has(c)).map((c) => c.match);
}

/**
 * Runs the search and yields matches as ripgrep reports them (each checked as described above).
 * Once max_results matches are out and one more is seen (or ripgrep ends), ripgrep is stopped and
 * `done` reports truncation.
 */
export async function* grep(ctx: ToolContext, input: GrepInput): AsyncGenerator<GrepEvent> {
  const { workspace: ws, limits, signal } = ctx;
  validate(input);
  const rel = await ws.fs.resolve(jailPath(input.path, "path", false));
  const st = await ws.fs.stat(rel); // FILE_NOT_FOUND before ripgrep would report it as an I/O error
  if (st.type !== "file" && st.type !== "directory") {
    throw new DomainError("UNSUPPORTED_FILE_TYPE", `'${rel === "" ? "." : rel}' is not a regular file or directory (FIFO, socket or device)`, {
      metadata: { path: rel },
    });
  }
  if (ws.processes === false) {
    yield* grepInServer(ctx, input, rel, st.type);
    return;
  }
  if (!ws.ripgrepPath) throw new DomainError("RIPGREP_NOT_FOUND", "ripgrep is not available in this workspace");
  // ripgrep runs in the search directory (a file's parent) and reports paths relative to it.
  const slash = rel.lastIndexOf("/");
  const cwd = st.type === "directory" ? rel : slash < 0 ? "" : rel.slice(0, slash);
  const target = st.type === "directory" ? "." : rel.slice(slash + 1);
  const toWorkspace = (p: string) => {
    const local = p.startsWith("./") ? p.slice(2) : p;
    return cwd === "" ? local : `${cwd}/${local}`;
  };
  const max = input.maxResults === 0 ? DEFAULT_MAX_RESULTS : input.maxResults;
  const argv = [ws.ripgrepPath, "--json", "--no-config", input.caseSensitive ? "--case-sensitive" : "--ignore-case"];
  if (input.contextLines > 0) argv.push("--context", String(input.contextLines));
  if (input.glob !== "") argv.push("--glob", input.glob);
  argv.push("-e", input.pattern, "--", target);

  const left = remainingMs(ctx);
  const deadlineBound = left !== undefined && left < limits.grepTimeoutMs;
  const timeoutMs = deadlineBound ? (left as number) : limits.grepTimeoutMs;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal.addEventListener("abort", onAbort, { once: true });
  const asm = new ContextAssembler(input.contextLines);
  const record = (line: string): Candidate[] => {
    if (line === "") return [];
    let rec: { type: string; data: { path?: RgText; lines?: RgText; line_number?: number; absolute_offset?: number } };
    try {
      rec = JSON.parse(line);
    } catch {
      return [];
    }
    switch (rec.type) {
      case "begin":
        asm.begin(toWorkspace(rgBytes(rec.data.path).toString("utf8")));
        return [];
      case "match":
      case "context": {
        const { line_number: n, absolute_offset: offset } = rec.data;
        if (n === undefined || offset === undefined) return [];
        const raw = rgBytes(rec.data.lines);
        return asm.add(n, { text: clean(raw, limits.maxLineChars), raw, offset }, rec.type === "match");
      }
      case "end":
        return asm.end();
      default:
        return [];
    }
  };
  let sent = 0;
  let batch = FIRST_BATCH;
  let truncated = false;
  let stderr = "";
  let exitCode = 0;
  let timedOut = false;
  let spawnError: string | undefined;
  try {
    const events = ws.exec({ argv, cwd, timeoutMs, killGraceMs: 1000, signal: stop.signal, programs: [ws.ripgrepPath], sweep: false });
    const out = new TextDecoder("utf-8", { fatal: false });
    const err = new TextDecoder("utf-8", { fatal: false });
    let partial = "";
    outer: for await (const ev of events) {
      if (ev.type === "stderr") {
        if (stderr.length < 8192) stderr += err.decode(ev.data, { stream: true });
        continue;
      }
      if (ev.type === "exited") {
        exitCode = ev.exit.exitCode;
        timedOut = ev.exit.timedOut;
        spawnError = ev.exit.spawnError;
        continue;
      }
      if (ev.type !== "stdout") continue;
      partial += out.decode(ev.data, { stream: true });
      const complete = partial.lastIndexOf("\n");
      if (complete < 0) continue;
      const lines = partial.slice(0, complete).split("\n");
      partial = partial.slice(complete + 1);
      // Lines are parsed and checked only as far as matches are still wanted (max_results, plus
      // one to know the search was truncated): a chunk of rg's output can hold hundreds. Batches
      // start small, so the first matches go out at once, and grow (each costs a read per file).
      for (let i = 0; i < lines.length; ) {
        const candidates: Candidate[] = [];
        const want = Math.min(max - sent + 1, batch);
        batch = Math.min(batch * 4, MAX_BATCH);
        while (i < lines.length && candidates.length < want) candidates.push(...record(lines[i++]));
        for (const m of await verified(ctx, candidates)) {
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
      for (const m of await verified(ctx, asm.end())) {
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
  if (timedOut && !truncated) throw searchTimedOut(timeoutMs, sent, deadlineBound);
  if (!truncated && exitCode > 2 && !signal.aborted) {
    throw new DomainError("INTERNAL", "ripgrep failed", { cause: stderr });
  }
  yield { type: "done", matchCount: sent, truncated };
}

/** COMMAND_TIMEOUT for a search stopped after `timeoutMs` (the call's deadline, or the grep timeout). */
export function searchTimedOut(timeoutMs: number, found: number, deadlineBound: boolean): DomainError {
  const message = deadlineBound
    ? `The call's deadline passed after ${timeoutMs} ms; the search was stopped`
    : `The search ran past ${timeoutMs} ms and was stopped; narrow the path or the glob`;
  return new DomainError("COMMAND_TIMEOUT", message, { metadata: { timeout_ms: String(timeoutMs), matches_found: String(found), deadline: String(deadlineBound) } });
}

function firstError(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("rg: regex parse error"));
  return (lines.find((l) => /error/i.test(l)) ?? lines.join(" ")).slice(0, 500);
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
