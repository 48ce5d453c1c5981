/**
 * Bash, parsed by a real parser: tree-sitter's bash grammar, run as WebAssembly through
 * web-tree-sitter (no native build; about 0.1 ms for a typical command). The command policy reads
 * the syntax tree, never the text split by regular expressions.
 *
 * Also here: the literal value a word has once the shell has removed its quoting (`r''m`,
 * `"rm"`, `\rm` and `$'\x72m'` are all `rm`), or `undefined` when the value is only known at run
 * time (an expansion, a substitution), with the pattern of file names the word expands to (its
 * unquoted glob and brace characters kept, quoted ones escaped).
 */
import { createRequire } from "node:module";
import { Language, type Node, Parser, type Tree } from "web-tree-sitter";

export type { Node, Tree };

let loading: Promise<Parser> | undefined;

/** The parser, loaded once (the grammar's .wasm ships in the tree-sitter-bash package). */
export function loadShellParser(): Promise<Parser> {
  loading ??= (async () => {
    await Parser.init();
    const wasm = createRequire(import.meta.url).resolve("tree-sitter-bash/tree-sitter-bash.wasm");
    const bash = await Language.load(wasm);
    const parser = new Parser();
    parser.setLanguage(bash);
    return parser;
  })();
  return loading;
}

/**
 * Most CPU time one parse may take, in milliseconds: it runs on the server's event loop. CPU time,
 * not wall time, so a loaded host that leaves the server unscheduled never fails a parse.
 */
export const MAX_PARSE_MS = 1000;

/** What parsing gave: a tree without errors (the caller must `delete()` it), or why not. */
export type ParseOutcome = { tree: Tree } | { error: "syntax"; offset: number } | { error: "time" };

/**
 * Parses `script`, stopping at the first syntax error: a script with one is refused whatever
 * else it holds, and tree-sitter's error recovery can cost minutes on hostile input (120 KB of
 * `a)` lines took 75 s), all of it on the server's event loop. A parse past MAX_PARSE_MS of CPU time stops too.
 *
 * The grammar has no `<>` (open a file for reading and writing: `exec 3<>/dev/tcp/h/p`, `cat <>f`),
 * so a script holding one is parsed with each `<>` written `> ` (same length, so every offset
 * stays), and each rewrite must land on a redirection's operator in the new tree; one that lands
 * anywhere else (a string, arithmetic, a word) is put back. The redirection is then read as a
 * write, which the file rules judge as strictly as read and write together. `sourceText` gives a
 * node's text as written.
 */
export async function parseShell(script: string): Promise<ParseOutcome> {
  if (!script.includes("<>")) return parseOnce(script);
  let rewrites: number[] = [];
  for (let at = script.indexOf("<>"); at >= 0; at = script.indexOf("<>", at + 2)) rewrites.push(at);
  // Each round keeps only rewrites that landed on an operator; two rounds settle every script
  // seen, and a bound keeps a contrived one from costing more.
  for (let round = 0; round < 4 && rewrites.length > 0; round++) {
    let text = script;
    for (const at of rewrites) text = `${text.slice(0, at)}> ${text.slice(at + 2)}`;
    const parsed = await parseOnce(text);
    if ("error" in parsed) return parsed;
    const root = parsed.tree.rootNode;
    const kept = rewrites.filter((at) => {
      const op = root.descendantForIndex(at, at + 1);
      return op !== null && !op.isNamed && op.type === ">" && op.startIndex === at && op.parent?.type === "file_redirect";
    });
    if (kept.length === rewrites.length) {
      written.set(parsed.tree, script);
      return parsed;
    }
    parsed.tree.delete();
    rewrites = kept;
  }
  return rewrites.length === 0 ? parseOnce(script) : { error: "syntax", offset: -1 };
}

/** Scripts whose trees were parsed from a rewritten text (see parseShell), by tree. */
const written = new WeakMap<Tree, string>();

/** A node's text as the script wrote it (`cat <>f`, not the `cat > f` its tree was parsed from). */
export function sourceText(node: Node): string {
  return written.get(node.tree)?.slice(node.startIndex, node.endIndex) ?? node.text;
}

/** A redirection's operator as written (`<>` included), or undefined when it has none. */
export function redirectOperator(redirect: Node): string | undefined {
  const op = redirect.children.find((c) => c !== null && !c.isNamed);
  if (!op) return undefined;
  const text = written.get(op.tree);
  return text?.slice(op.startIndex, op.startIndex + 2) === "<>" ? "<>" : op.text;
}

async function parseOnce(script: string): Promise<ParseOutcome> {
  const parser = await loadShellParser();
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const giveUpAt = cpu() + MAX_PARSE_MS;
  // Reading the CPU clock costs more than most parses: it is read once a quarter of the budget has
  // passed on the wall clock, which no parse of a real script reaches.
  const wallFrom = performance.now();
  let stopped: ParseOutcome | undefined;
  const tree = parser.parse(script, null, {
    progressCallback: (state) => {
      if (state.hasError) stopped = { error: "syntax", offset: state.currentOffset };
      else if (performance.now() - wallFrom > MAX_PARSE_MS / 4 && cpu() > giveUpAt) stopped = { error: "time" };
      // Returning true cancels the parse (the declared type says void; the runtime reads it).
      return (stopped !== undefined) as unknown as void;
    },
  });
  if (tree === null) {
    // A cancelled parse would otherwise resume on the next call, with the next script.
    parser.reset();
    return stopped ?? { error: "time" };
  }
  if (tree.rootNode.hasError) {
    // Errors the callback did not see (found in the last step): the same answer.
    tree.delete();
    return { error: "syntax", offset: -1 };
  }
  return { tree };
}

/** Decodes the body of `$'…'` as bash does. */
function ansiC(body: string): string {
  let out = "";
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c !== "\\" || i + 1 >= body.length) {
      out += c;
      continue;
    }
    const n = body[++i];
    const simple: Record<string, string> = { n: "\n", t: "\t", r: "\r", a: "\x07", b: "\b", e: "\x1b", E: "\x1b", f: "\f", v: "\v", "\\": "\\", "'": "'", '"': '"', "?": "?" };
    if (n in simple) {
      out += simple[n];
    } else if (n === "x") {
      const m = /^[0-9a-fA-F]{1,2}/.exec(body.slice(i + 1));
      if (!m) out += "\\x";
      else {
        out += String.fromCharCode(Number.parseInt(m[0], 16));
        i += m[0].length;
      }
    } else if (n === "u" || n === "U") {
      const m = (n === "u" ? /^[0-9a-fA-F]{1,4}/ : /^[0-9a-fA-F]{1,8}/).exec(body.slice(i + 1));
      if (!m) out += `\\${n}`;
      else {
        const cp = Number.parseInt(m[0], 16);
        out += cp <= 0x10ffff ? String.fromCodePoint(cp) : "";
        i += m[0].length;
      }
    } else if (/[0-7]/.test(n)) {
      const m = /^[0-7]{1,3}/.exec(body.slice(i)) as RegExpExecArray;
      out += String.fromCharCode(Number.parseInt(m[0], 8) & 0xff);
      i += m[0].length - 1;
    } else if (n === "c" && i + 1 < body.length) {
      out += String.fromCharCode(body.charCodeAt(++i) & 0x1f);
    } else {
      out += `\\${n}`;
    }
  }
  return out;
}

/** An unquoted word with its backslashes removed (`\rm` → `rm`, `\\` → `\`, `\<newline>` → ""). */
function unescapeWord(text: string): string {
  return text.replace(/\\(\n|.)/gsu, (_, c: string) => (c === "\n" ? "" : c));
}

/** A double-quoted string's text with the escapes bash honours there removed. */
function unescapeDouble(text: string): string {
  return text.replace(/\\([$`"\\\n])/gu, (_, c: string) => (c === "\n" ? "" : c));
}

/**
 * Expansions whose value the checks know. `$HOME` is the sandbox's home, the workspace root, which
 * the checks call `~`; `$PWD`, `$(pwd)` and `$OLDPWD` are a directory the script is in, which the
 * checks call `.` and judge relative names in each directory the script may be in (the request's
 * workdir, every literal `cd`). Under an allowlist none of them can be reassigned (restricted
 * variables); without one, reading them so only refuses more.
 */
const KNOWN_VARIABLES: Record<string, string> = { HOME: "~", PWD: ".", OLDPWD: "." };

/** Characters a glob or a brace expansion gives a meaning to, escaped where a word quotes them. */
const GLOB_SPECIAL = /[\\*?[\]{},]/g;

/** `text` with every glob and brace character escaped: what a quoted part of a word stands for. */
export function escapeGlob(text: string): string {
  return text.replace(GLOB_SPECIAL, "\\$&");
}

/**
 * A word's value after quote removal, and the same word as a pattern of the names it expands to
 * (`glob`): unquoted `*`, `?`, `[…]` and `{…}` keep their meaning there, quoted or escaped ones are
 * escaped with a backslash (`'*'.pem` is `\*.pem`), so `sed 's/x{1,2}/y/'` names no brace expansion
 * and `cat .e*` names `.env`.
 */
export interface Word {
  value: string;
  glob: string;
}

/** The value of a word node after quote removal, or undefined when it is computed at run time. */
export function literal(node: Node): string | undefined {
  return word(node)?.value;
}

/** A word node as value and pattern (see Word), or undefined when it is computed at run time. */
export function word(node: Node): Word | undefined {
  switch (node.type) {
    case "word": {
      // `~+` and `~-` are bash's tilde spellings of $PWD and $OLDPWD.
      const text = /^~[+-](\/|$)/.test(node.text) ? `.${node.text.slice(2)}` : node.text;
      return { value: unescapeWord(text), glob: text.replace(/\\(\n|.)/gsu, (_, c: string) => (c === "\n" ? "" : escapeGlob(c))) };
    }
    case "number":
      return { value: node.text, glob: node.text };
    case "raw_string":
      return quoted(node.text.slice(1, -1));
    case "ansi_c_string":
      return quoted(ansiC(node.text.slice(2, -1)));
    case "string":
    case "translated_string": {
      // Anything but plain text inside the quotes (an expansion, a substitution) is computed, but
      // the known expansions. The text between the quotes, not the string_content pieces: the
      // grammar leaves a line break between two pieces out of both ("ls⏎rm" would read as "lsrm").
      const known: Array<[Node, string]> = [];
      for (const child of node.namedChildren) {
        if (child === null || child.type === "string_content") continue;
        const v = knownValue(child);
        if (v === undefined) return undefined;
        known.push([child, v]);
      }
      let out = "";
      let at = node.startIndex + (node.type === "string" ? 1 : 2);
      for (const [child, v] of known) {
        out += unescapeDouble(node.text.slice(at - node.startIndex, child.startIndex - node.startIndex)) + v;
        at = child.endIndex;
      }
      return quoted(out + unescapeDouble(node.text.slice(at - node.startIndex, -1)));
    }
    case "simple_expansion":
    case "expansion":
    case "command_substitution": {
      const v = knownValue(node);
      return v === undefined ? undefined : { value: v, glob: v };
    }
    case "concatenation": {
      let value = "";
      let glob = "";
      for (const child of node.children) {
        if (child === null) continue;
        const part = word(child);
        if (part === undefined) return undefined;
        value += part.value;
        glob += part.glob;
      }
      return { value, glob };
    }
    case "command_name": {
      const child = node.namedChild(0);
      return child === null ? undefined : word(child);
    }
    default:
      return undefined;
  }
}

const quoted = (value: string): Word => ({ value, glob: escapeGlob(value) });

/** The value of an expansion or substitution the checks know (see KNOWN_VARIABLES), else undefined. */
function knownValue(node: Node): string | undefined {
  if (node.type === "simple_expansion" || node.type === "expansion") {
    const name = /^\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})$/.exec(node.text);
    return name === null ? undefined : KNOWN_VARIABLES[name[1] ?? name[2]];
  }
  // $(pwd), `pwd`, $(pwd -P): the directory the script is in.
  if (node.type === "command_substitution" && /^(?:\$\(|`)\s*pwd(?:\s+-[LP])?\s*(?:\)|`)$/.test(node.text)) return KNOWN_VARIABLES.PWD;
  return undefined;
}
