/**
 * Whether a word of a script can name a file the sensitive-file rules protect, when the word is a
 * pattern of names rather than one name: a glob (`*`, `?`, `[…]`, `[[:class:]]`), a brace expansion
 * (`{a,b}`, `{u..w}`), or both. A literal name is judged exactly as the jail judges it (the same
 * FileGuard, templates exempt); a pattern is judged by intersection: the word and each rule are
 * read as automata over characters, and the word is refused when some name matches both. No
 * expansion is enumerated past a small bound, so no count of alternatives hides the last one.
 *
 * How the shell expands, as far as it changes the answer: `*`, `?` and bracket expressions never
 * match `/`, nor a leading `.` of a component unless the script turns `dotglob` (or GLOBIGNORE) on.
 * A component of wildcards alone (`*`, `??`) stands for every name and is not judged as naming any
 * one file (`cat *` and `grep x *` are everyday use; `cat .ssh/*` is refused, since `.ssh/**` names
 * everything in `.ssh`). Rules match case-insensitively on the canonical path (sensitive-files.ts),
 * so the automata fold case, take full-width forms as their NFKC equivalents, and let a component
 * end with dots or spaces.
 *
 * A word may also stand for a tree (`cp -r DIR`, `tar -C DIR -x`, `mv hooks .git/`): then it is
 * refused when it is, or lies in, a directory some rule protects the contents of (`.git`, `.ssh`,
 * `.vscode` for its `settings.json`), since the tree's contents are the caller's choice.
 */
import {
  canonicalForMatch,
  compile as compilePattern,
  DEFAULT_DENY,
  DEFAULT_WRITE_PROTECTED,
  type FileAccess,
  type FileGuard,
  type FileRules,
  guardFor,
  type SensitiveMatch,
} from "../../providers/executor/sensitive-files.ts";

/** Most literal words one brace expansion is enumerated into; past it, the word is judged as a pattern. */
const MAX_ENUMERATED = 256;
/** Most characters one bracket expression or character range is spelled out into; past it, any character. */
const MAX_SET = 1024;

/** A set of characters (folded to lower case), never holding `/`. */
interface CharSet {
  negated: boolean;
  chars: Set<string>;
}
const ANY: CharSet = { negated: true, chars: new Set() };
const admits = (s: CharSet, c: string) => c !== "/" && s.chars.has(c) !== s.negated;
const nonEmpty = (s: CharSet) => s.negated || s.chars.size > 0;
function meet(a: CharSet, b: CharSet): boolean {
  if (a.negated && b.negated) return true;
  const [pos, other] = a.negated ? [b, a] : [a, b];
  for (const c of pos.chars) if (admits(other, c)) return true;
  return false;
}
function without(s: CharSet, c: string): CharSet {
  if (s.negated) return { negated: true, chars: new Set([...s.chars, c]) };
  const chars = new Set(s.chars);
  chars.delete(c);
  return { negated: false, chars };
}

/** One character as the canonical form reads it: NFKC, lower case (may be several characters). */
const fold = (c: string) => c.normalize("NFKC").toLowerCase();

/** A word as a pattern: a sequence of tokens. */
type Token =
  | { t: "chr"; c: string }
  | { t: "set"; s: CharSet }
  | { t: "star" }
  | { t: "slash" }
  /** A component of wildcards alone: every name (see the module comment). */
  | { t: "wild" }
  /** One or more characters of a set (a numeric brace range). */
  | { t: "plus"; s: CharSet }
  | { t: "alt"; alts: Token[][] };

const POSIX_CLASSES: Record<string, string> = {
  alpha: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  upper: "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
  lower: "abcdefghijklmnopqrstuvwxyz",
  digit: "0123456789",
  xdigit: "0123456789abcdefABCDEF",
  alnum: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
  word: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
  punct: "!\"#$%&'()*+,-.:;<=>?@[\\]^_`{|}~",
  space: " \t\n\r\f\v",
  blank: " \t",
  cntrl: Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)).join("") + "\x7f",
};
POSIX_CLASSES.graph = POSIX_CLASSES.alnum + POSIX_CLASSES.punct;
POSIX_CLASSES.print = `${POSIX_CLASSES.graph} `;

/** The characters from `a` to `b` (code points), or undefined when there are too many. */
function range(a: string, b: string): string[] | undefined {
  const [x, y] = [a.codePointAt(0) as number, b.codePointAt(0) as number];
  const [lo, hi] = x <= y ? [x, y] : [y, x];
  if (hi - lo > MAX_SET) return undefined;
  return Array.from({ length: hi - lo + 1 }, (_, i) => String.fromCodePoint(lo + i));
}

/** A set from raw characters: folded; a negated set only excludes what folding cannot reach. */
function charSet(raw: Iterable<string>, negated: boolean): CharSet {
  const chars = new Set<string>();
  for (const c of raw) {
    if (negated && c.toLowerCase() !== c.toUpperCase()) continue;
    for (const f of fold(c)) chars.add(f);
  }
  return { negated, chars };
}

/**
 * A bracket expression at `glob[i]` (`[`): the set and the index after its `]`, or undefined when
 * there is no closing `]` (then bash reads the `[` as itself).
 */
function bracket(glob: string, i: number): { s: CharSet; end: number } | undefined {
  let k = i + 1;
  let negated = false;
  if (glob[k] === "!" || glob[k] === "^") {
    negated = true;
    k++;
  }
  const raw: string[] = [];
  let unbounded = false;
  let first = true;
  for (; k < glob.length; k++) {
    let c = glob[k];
    // A set too large to spell out (a wide range, an unknown class) is read as any character.
    if (c === "]" && !first) return { s: unbounded ? ANY : charSet(raw, negated), end: k + 1 };
    first = false;
    if (c === "[" && (glob[k + 1] === ":" || glob[k + 1] === "=" || glob[k + 1] === ".")) {
      const kind = glob[k + 1];
      const close = glob.indexOf(`${kind}]`, k + 2);
      if (close > 0) {
        const name = glob.slice(k + 2, close);
        if (kind === ":") {
          if (POSIX_CLASSES[name] === undefined) unbounded = true;
          else raw.push(...POSIX_CLASSES[name]);
        } else raw.push(...name);
        k = close + 1;
        continue;
      }
    }
    if (c === "\\" && k + 1 < glob.length) c = glob[++k];
    if (glob[k + 1] === "-" && k + 2 < glob.length && glob[k + 2] !== "]") {
      let to = glob[k + 2];
      k += 2;
      if (to === "\\" && k + 1 < glob.length) to = glob[++k];
      const r = range(c, to);
      if (r === undefined) unbounded = true;
      else raw.push(...r);
      continue;
    }
    raw.push(c);
  }
  return undefined;
}

/**
 * A brace expansion at `glob[i]` (`{`): its alternatives as raw text, or a sequence expression as
 * tokens, and the text after its `}`; undefined when bash reads the `{` as itself.
 */
function brace(glob: string, i: number): ({ alts: string[] } | { seq: Token[] }) & { rest: string } | undefined {
  let depth = 0;
  const commas: number[] = [];
  for (let k = i; k < glob.length; k++) {
    const c = glob[k];
    if (c === "\\") {
      k++;
      continue;
    }
    if (c === "," && depth === 1) commas.push(k);
    if (c === "{") depth++;
    if (c !== "}" || --depth > 0) continue;
    const rest = glob.slice(k + 1);
    if (commas.length > 0) {
      const alts: string[] = [];
      let from = i + 1;
      for (const at of [...commas, k]) {
        alts.push(glob.slice(from, at));
        from = at + 1;
      }
      return { alts, rest };
    }
    const body = glob.slice(i + 1, k);
    // {a..e}: the letters between; {1..20}, {-3..3..2}: digits (and a sign), any number of them.
    const letters = /^([^\\\d])\.\.([^\\\d])(?:\.\.-?\d+)?$/.exec(body);
    if (letters) {
      const r = range(letters[1], letters[2]);
      return { seq: [{ t: "set", s: r === undefined ? ANY : charSet(r, false) }], rest };
    }
    if (/^[+-]?\d+\.\.[+-]?\d+(?:\.\.[+-]?\d+)?$/.test(body)) return { seq: [{ t: "plus", s: charSet("-0123456789", false) }], rest };
    return undefined;
  }
  return undefined;
}

/** Parses an escaped glob (see shell-parser.ts `Word.glob`) into tokens. */
function tokens(glob: string): Token[] {
  const out: Token[] = [];
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "\\" && i + 1 < glob.length) {
      for (const f of fold(glob[++i])) out.push(f === "/" ? { t: "slash" } : { t: "chr", c: f });
    } else if (c === "/") out.push({ t: "slash" });
    else if (c === "*") out.push({ t: "star" });
    else if (c === "?") out.push({ t: "set", s: ANY });
    else if (c === "[" && bracket(glob, i) !== undefined) {
      const b = bracket(glob, i) as { s: CharSet; end: number };
      out.push({ t: "set", s: b.s });
      i = b.end - 1;
    } else if (c === "{" && brace(glob, i) !== undefined) {
      const b = brace(glob, i) as NonNullable<ReturnType<typeof brace>>;
      // The rest of the word follows each alternative (bash: preamble, alternatives, postscript).
      if ("alts" in b) out.push({ t: "alt", alts: b.alts.map((a) => tokens(a + b.rest)) });
      else out.push(...b.seq, ...tokens(b.rest));
      return out;
    } else for (const f of fold(c)) out.push(f === "/" ? { t: "slash" } : { t: "chr", c: f });
  }
  return out;
}

/** Components of wildcards alone become one `wild` token (top level only). */
function markWild(ts: Token[]): Token[] {
  const out: Token[] = [];
  let start = 0;
  for (let i = 0; i <= ts.length; i++) {
    if (i < ts.length && ts[i].t !== "slash") continue;
    const comp = ts.slice(start, i);
    const wild = comp.length > 0 && comp.every((t) => t.t === "star" || (t.t === "set" && t.s === ANY));
    out.push(...(wild ? [{ t: "wild" } as Token] : comp));
    if (i < ts.length) out.push(ts[i]);
    start = i + 1;
  }
  return out;
}

/** Whether the tokens hold anything but characters and slashes (top level and within alternatives). */
const isPattern = (ts: Token[]): boolean => ts.some((t) => t.t === "star" || t.t === "set" || t.t === "wild" || t.t === "plus" || (t.t === "alt" && t.alts.some(isPattern)));

/** The literal words of alternation-only tokens, or undefined past MAX_ENUMERATED. */
function enumerate(ts: Token[]): string[] | undefined {
  let words = [""];
  for (const t of ts) {
    if (t.t === "chr") words = words.map((w) => w + t.c);
    else if (t.t === "slash") words = words.map((w) => `${w}/`);
    else if (t.t === "alt") {
      const next: string[] = [];
      for (const a of t.alts) {
        const tails = enumerate(a);
        if (tails === undefined) return undefined;
        for (const w of words) for (const tail of tails) next.push(w + tail);
        if (next.length > MAX_ENUMERATED) return undefined;
      }
      words = next;
    } else return undefined;
  }
  return words;
}

// ── Automata ─────────────────────────────────────────────────────────────────────────────────

/**
 * An edge: a character set, a slash, a whole wild component (words only), or nothing (ε). A set's
 * role: a literal character of the word or the rule (`lit`), a wildcard (`free`), or, on a rule's
 * side, what only places a match (leading directories, `**`, the dots and spaces the canonical form
 * drops: `neutral`).
 */
type Role = "lit" | "free" | "neutral";
type Label = { k: "set"; s: CharSet; role: Role; lead?: boolean; multi?: boolean } | { k: "slash" } | { k: "wild" } | null;
interface Nfa {
  edges: Array<Array<{ to: number; label: Label }>>;
  start: number;
  accept: Set<number>;
  /** Each state's ε-closure, computed on first use. */
  closures?: number[][];
}

class Builder {
  edges: Array<Array<{ to: number; label: Label }>> = [];
  state(): number {
    this.edges.push([]);
    return this.edges.length - 1;
  }
  edge(from: number, to: number, label: Label): void {
    this.edges[from].push({ to, label });
  }
}

/**
 * The automaton of a word's tokens from `from`; returns its end state. `dot`: whether a wildcard
 * may match a component's leading `.` (dotglob).
 */
function buildWord(b: Builder, ts: Token[], from: number, dot: boolean, atStart: boolean): number {
  let at = from;
  let start = atStart;
  for (const t of ts) {
    const next = b.state();
    const lead = (s: CharSet) => (start && !dot ? without(s, ".") : s);
    switch (t.t) {
      case "chr":
        b.edge(at, next, { k: "set", s: { negated: false, chars: new Set([t.c]) }, role: "lit", lead: start });
        break;
      case "slash":
        b.edge(at, next, { k: "slash" });
        break;
      case "set":
        b.edge(at, next, { k: "set", s: lead(t.s), role: "free" });
        break;
      case "plus": {
        b.edge(at, next, { k: "set", s: lead(t.s), role: "free", multi: true });
        b.edge(next, next, { k: "set", s: t.s, role: "free", multi: true });
        break;
      }
      case "star": {
        b.edge(at, next, null);
        const body = b.state();
        b.edge(at, body, { k: "set", s: lead(ANY), role: "free", multi: true });
        b.edge(body, body, { k: "set", s: ANY, role: "free", multi: true });
        b.edge(body, next, null);
        break;
      }
      case "wild":
        b.edge(at, next, { k: "wild" });
        break;
      case "alt":
        for (const a of t.alts) b.edge(buildWord(b, a, at, dot, start), next, null);
        break;
    }
    start = t.t === "slash";
    at = next;
  }
  return at;
}

function wordNfa(ts: Token[], dot: boolean): Nfa {
  const b = new Builder();
  const start = b.state();
  const end = buildWord(b, ts, start, dot, true);
  return { edges: b.edges, start, accept: new Set([end]) };
}

/**
 * The automaton of a rule's pattern (canonical form), matching the raw paths whose canonical form
 * the rule matches: any leading directories, `.` and empty components between, a component's
 * trailing dots and spaces. Only wildcard and neutral edges may take a wild component of a word.
 */
function patternNfa(pattern: string): Nfa {
  const b = new Builder();
  const dotsOrSpaces = { negated: false, chars: new Set([".", " "]) };
  const dotOnly = { negated: false, chars: new Set(["."]) };
  // Leading directories: the rule names trailing components at any depth.
  const top = b.state();
  const inName = b.state();
  b.edge(top, inName, { k: "set", s: ANY, role: "neutral" });
  b.edge(inName, inName, { k: "set", s: ANY, role: "neutral" });
  b.edge(inName, top, { k: "slash" });
  b.edge(top, top, { k: "slash" });
  let at = b.state();
  b.edge(top, at, null);
  const parts = canonicalForMatch(pattern).split("/");
  parts.forEach((part, i) => {
    const last = i === parts.length - 1;
    if (part === "**") {
      const body = b.state();
      const end = b.state();
      if (last) {
        // Anything below: at least one character.
        b.edge(at, body, { k: "set", s: ANY, role: "neutral" });
        b.edge(at, body, { k: "slash" });
        b.edge(body, body, { k: "set", s: ANY, role: "neutral" });
        b.edge(body, body, { k: "slash" });
        at = body;
        return;
      }
      // Any number of whole components.
      b.edge(at, end, null);
      b.edge(at, body, { k: "set", s: ANY, role: "neutral" });
      b.edge(body, body, { k: "set", s: ANY, role: "neutral" });
      b.edge(body, at, { k: "slash" });
      at = end;
      return;
    }
    for (const c of part) {
      const next = b.state();
      if (c === "*") {
        b.edge(at, next, null);
        b.edge(at, at, { k: "set", s: ANY, role: "free" });
      } else if (c === "?") b.edge(at, next, { k: "set", s: ANY, role: "free" });
      else b.edge(at, next, { k: "set", s: { negated: false, chars: new Set([c]) }, role: "lit" });
      at = next;
    }
    // A component may end with dots and spaces the canonical form drops.
    b.edge(at, at, { k: "set", s: dotsOrSpaces, role: "neutral" });
    if (!last) {
      const next = b.state();
      b.edge(at, next, { k: "slash" });
      // `./` and `/` between components are no components at all.
      const dot = b.state();
      b.edge(next, next, { k: "slash" });
      b.edge(next, dot, { k: "set", s: dotOnly, role: "neutral" });
      b.edge(dot, next, { k: "slash" });
      at = next;
    }
  });
  return { edges: b.edges, start: top, accept: new Set([at]) };
}

/** The ε-closure of one state, cached on the automaton. */
function closureOf(nfa: Nfa, state: number): number[] {
  nfa.closures ??= [];
  let c = nfa.closures[state];
  if (c === undefined) {
    const out = new Set([state]);
    const stack = [state];
    while (stack.length > 0) {
      const s = stack.pop() as number;
      for (const e of nfa.edges[s]) {
        if (e.label === null && !out.has(e.to)) {
          out.add(e.to);
          stack.push(e.to);
        }
      }
    }
    c = [...out];
    nfa.closures[state] = c;
  }
  return c;
}

function closure(nfa: Nfa, states: Iterable<number>): Set<number> {
  const out = new Set<number>();
  for (const s of states) for (const c of closureOf(nfa, s)) out.add(c);
  return out;
}

/** Pattern states reachable from `p` through one or more characters of wildcard or neutral edges, no slash: what a wild component may take. */
function wildReach(pat: Nfa, p: number, dot: boolean): Set<number> {
  const takes = (l: Label, first: boolean) => l?.k === "set" && l.role !== "lit" && nonEmpty(first && !dot ? without(l.s, ".") : l.s);
  const out = new Set<number>();
  let frontier = new Set<number>();
  for (const s of closure(pat, [p])) for (const e of pat.edges[s]) if (takes(e.label, true)) frontier.add(e.to);
  frontier = closure(pat, frontier);
  while (frontier.size > 0) {
    const next = new Set<number>();
    for (const s of frontier) {
      if (out.has(s)) continue;
      out.add(s);
      for (const e of pat.edges[s]) if (takes(e.label, false) && !out.has(e.to)) next.add(e.to);
    }
    frontier = closure(pat, next);
  }
  return out;
}

/**
 * Whether some name is accepted by both the word's automaton and the rule's, in a way that means
 * the rule: every literal character of the word meets a literal of the rule (or a neutral edge), or
 * no literal of the rule is taken by a `*` of the word. So `.e*` and `x.pe?` mean `.env` and
 * `*.pem`, and `cat .ssh/id_*` means `.ssh/**`, while `*.md` does not mean `id_rsa*`, nor `a.*`
 * `*.ppk` (names in both exist, but only by each side's wildcard taking the other's literal text). A component's leading `.` is matched only by a literal `.` first in the
 * word's component (bash's rule for globs, unless dotglob), so `*.env` does not mean `.env`.
 */
function intersects(word: Nfa, pat: Nfa, dot: boolean): boolean {
  const width = pat.edges.length;
  const seen = new Uint16Array(word.edges.length * width);
  const stack: Array<[number, number, number]> = [];
  // Bit 1: a literal of the word met a wildcard of the rule; bit 2: a literal of the rule met a `*`
  // of the word; bit 8: at the start of a component.
  // `seen` holds, per pair of states, the states of those bits already met (one bit each).
  const push = (ws: Iterable<number>, ps: Iterable<number>, flags: number) => {
    const pc = closure(pat, ps);
    for (const w0 of ws) {
      for (const w of closureOf(word, w0)) {
        for (const p of pc) {
          const at = w * width + p;
          if (seen[at] & (1 << flags)) continue;
          seen[at] |= 1 << flags;
          stack.push([w, p, flags]);
        }
      }
    }
  };
  const means = (flags: number) => (flags & 3) !== 3;
  push([word.start], [pat.start], 8);
  while (stack.length > 0) {
    const [w, p, flags] = stack.pop() as [number, number, number];
    if (word.accept.has(w) && pat.accept.has(p) && means(flags)) return true;
    const start = (flags & 8) !== 0;
    for (const we of word.edges[w]) {
      const wl = we.label;
      if (wl === null) continue;
      if (wl.k === "wild") {
        push([we.to], wildReach(pat, p, dot), flags & 7);
        continue;
      }
      for (const pe of pat.edges[p]) {
        const pl = pe.label;
        if (pl === null || pl.k === "wild") continue;
        if (wl.k === "slash" || pl.k === "slash") {
          if (wl.k === "slash" && pl.k === "slash") push([we.to], [pe.to], flags | 8);
          continue;
        }
        const ws = start && !dot && !(wl.role === "lit" && wl.lead) ? without(wl.s, ".") : wl.s;
        if (!meet(ws, pl.s)) continue;
        let f = flags & 7;
        // A bracket expression of one character (`[m]`, `[Mm]` once folded) is that character.
        const wordLiteral = wl.role === "lit" || (!wl.s.negated && wl.s.chars.size === 1);
        if (wordLiteral && pl.role === "free") f |= 1;
        if (pl.role === "lit" && !wordLiteral && wl.multi) f |= 2;
        if (means(f)) push([we.to], [pe.to], f);
      }
    }
  }
  return false;
}

/**
 * The literal text a name's last component must start and end with: a cheap necessary condition
 * for a word and a rule to meet, checked before the automata. Undefined: no constraint known.
 */
interface Affixes {
  prefix: string;
  suffix: string;
}
const compatible = (w: Affixes | undefined, r: Affixes | undefined) =>
  w === undefined || r === undefined || ((w.prefix.startsWith(r.prefix) || r.prefix.startsWith(w.prefix)) && (w.suffix.endsWith(r.suffix) || r.suffix.endsWith(w.suffix)));

/** A rule's last component's affixes (canonical: no trailing dots or spaces), none for `**`. */
function patternAffixes(pattern: string): Affixes | undefined {
  const last = pattern.split("/").at(-1) as string;
  if (last === "**") return undefined;
  const first = last.search(/[*?]/);
  return first < 0 ? { prefix: last, suffix: last } : { prefix: last.slice(0, first), suffix: last.slice(Math.max(last.lastIndexOf("*"), last.lastIndexOf("?")) + 1) };
}

/** A word's last component's affixes, when it is plain characters and wildcards (no alternatives, not wild). */
function wordAffixes(ts: Token[]): Affixes | undefined {
  let from = ts.length;
  while (from > 0 && ts[from - 1].t !== "slash") from--;
  const comp = ts.slice(from);
  if (comp.length === 0 || comp.some((t) => t.t === "alt" || t.t === "wild")) return undefined;
  const literal = (t: Token) => (t.t === "chr" ? t.c : undefined);
  let prefix = "";
  for (const t of comp) {
    const c = literal(t);
    if (c === undefined) break;
    prefix += c;
  }
  let suffix = "";
  for (let i = comp.length - 1; i >= 0; i--) {
    const c = literal(comp[i]);
    if (c === undefined) break;
    suffix = c + suffix;
  }
  // The canonical form drops a component's trailing dots and spaces.
  const whole = prefix.length === comp.length;
  const trimmed = (x: string) => x.replace(/[. ]+$/u, (tail) => (tail.length === x.length ? tail : ""));
  return whole ? { prefix: trimmed(prefix), suffix: trimmed(suffix) } : { prefix, suffix: suffix.replace(/[. ]+$/u, "") };
}

/** A rule, compiled once: its pattern, its automaton, and the directories it protects the contents of. */
interface CompiledRule {
  list: SensitiveMatch["list"];
  pattern: string;
  nfa: Nfa;
  affixes: Affixes | undefined;
  /** `c1`, `c1/c2`, … of a pattern `c1/…/cn` (n ≥ 2): a tree there can hold what the rule names. */
  dirs: Array<{ nfa: Nfa; re: RegExp; affixes: Affixes | undefined }>;
}

/** A canonical pattern as a regular expression over canonical paths: the jail's own (sensitive-files.ts). */
const patternRe = (canonical: string): RegExp => compilePattern(canonical);

function compileRule(list: SensitiveMatch["list"], pattern: string): CompiledRule {
  const canonical = canonicalForMatch(pattern);
  const parts = canonical.split("/");
  const dirs: CompiledRule["dirs"] = [];
  for (let k = 1; k < parts.length; k++) {
    const dir = parts.slice(0, k).join("/");
    dirs.push({ nfa: patternNfa(dir), re: patternRe(dir), affixes: patternAffixes(dir) });
  }
  return { list, pattern, nfa: patternNfa(pattern), affixes: patternAffixes(canonical), dirs };
}

/** The sensitive-file rules as the command policy applies them to the words of a script. */
export class PathRules {
  readonly #guard: FileGuard;
  readonly #deny: CompiledRule[];
  readonly #protected: CompiledRule[];

  constructor(rules: FileRules = { deny: [], writeProtected: [] }) {
    // A worktree's own configuration (.git/**/config.worktree) is on the server's list now.
    this.#guard = guardFor(rules);
    this.#deny = [...DEFAULT_DENY, ...rules.deny].map((p) => compileRule("deny", p));
    this.#protected = [...DEFAULT_WRITE_PROTECTED, ...rules.writeProtected].map((p) => compileRule("write_protected", p));
  }

  /**
   * Why a word (an escaped glob: see shell-parser.ts `Word.glob`) used for `access` may name a
   * protected file, or undefined. `tree`: the word names a directory whose contents are read or
   * written. `dotglob`: the script may have made wildcards match leading dots.
   */
  hit(glob: string, access: FileAccess, options: { tree?: boolean; dotglob?: boolean } = {}): SensitiveMatch | undefined {
    // Most words are plain names: judged as the jail judges them, without building anything.
    if (!options.tree && !/[\\*?[{]/.test(glob)) return this.#guard.check(glob, access);
    const ts = tokens(glob);
    const words = isPattern(ts) ? undefined : enumerate(ts);
    const rules = access === "write" ? [...this.#deny, ...this.#protected] : this.#deny;
    if (words !== undefined) {
      for (const w of words) {
        const h = this.#guard.check(w, access);
        if (h !== undefined) return h;
      }
      if (!options.tree) return undefined;
    }
    // A literal tree: each of its names against the directories the rules protect, as regular expressions.
    if (words !== undefined) {
      for (const w of words) {
        const canonical = canonicalForMatch(w);
        if (canonical === "") continue;
        for (const r of rules) if (r.dirs.some((d) => d.re.test(canonical))) return { list: r.list, pattern: r.pattern };
      }
      return undefined;
    }
    const marked = markWild(ts);
    const nfa = wordNfa(marked, options.dotglob ?? false);
    const affixes = wordAffixes(marked);
    const dot = options.dotglob ?? false;
    for (const r of rules) {
      if (compatible(affixes, r.affixes) && intersects(nfa, r.nfa, dot)) return { list: r.list, pattern: r.pattern };
      if (options.tree && r.dirs.some((d) => compatible(affixes, d.affixes) && intersects(nfa, d.nfa, dot))) return { list: r.list, pattern: r.pattern };
    }
    return undefined;
  }
}
