/**
 * Bash, parsed by a real parser: tree-sitter's bash grammar, run as WebAssembly through
 * web-tree-sitter (no native build; about 0.1 ms for a typical command). The command policy reads
 * the syntax tree, never the text split by regular expressions.
 *
 * Also here: the literal value a word has once the shell has removed its quoting (`r''m`,
 * `"rm"`, `\rm` and `$'\x72m'` are all `rm`), or `undefined` when the value is only known at run
 * time (an expansion, a substitution, a brace expansion).
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
 */
export async function parseShell(script: string): Promise<ParseOutcome> {
  const parser = await loadShellParser();
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const giveUpAt = cpu() + MAX_PARSE_MS;
  let stopped: ParseOutcome | undefined;
  const tree = parser.parse(script, null, {
    progressCallback: (state) => {
      if (state.hasError) stopped = { error: "syntax", offset: state.currentOffset };
      else if (cpu() > giveUpAt) stopped = { error: "time" };
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
 * What `$HOME` stands for: the sandbox's home is the workspace root, which the checks call `~`
 * (under an allowlist HOME cannot be reassigned; without one, reading it as `~` only refuses more).
 */
const HOME = "~";

/** The value of a word node after quote removal, or undefined when it is computed at run time. */
export function literal(node: Node): string | undefined {
  switch (node.type) {
    case "word":
      return unescapeWord(node.text);
    case "number":
      return node.text;
    case "raw_string":
      return node.text.slice(1, -1);
    case "ansi_c_string":
      return ansiC(node.text.slice(2, -1));
    case "string":
    case "translated_string": {
      // Anything but plain text inside the quotes (an expansion, a substitution) is computed, but
      // $HOME. The text between the quotes, not the string_content pieces: the grammar leaves a
      // line break between two pieces out of both ("ls⏎rm" would read as "lsrm").
      const homes: Node[] = [];
      for (const child of node.namedChildren) {
        if (child === null || child.type === "string_content") continue;
        if (literal(child) !== HOME) return undefined;
        homes.push(child);
      }
      let out = "";
      let at = node.startIndex + (node.type === "string" ? 1 : 2);
      for (const home of homes) {
        out += unescapeDouble(node.text.slice(at - node.startIndex, home.startIndex - node.startIndex)) + HOME;
        at = home.endIndex;
      }
      return out + unescapeDouble(node.text.slice(at - node.startIndex, -1));
    }
    case "simple_expansion":
    case "expansion":
      return node.text === "$HOME" || node.text === "${HOME}" ? HOME : undefined;
    case "concatenation": {
      let out = "";
      for (const child of node.children) {
        if (child === null) continue;
        const part = literal(child);
        if (part === undefined) return undefined;
        out += part;
      }
      return out;
    }
    case "command_name": {
      const child = node.namedChild(0);
      return child === null ? undefined : literal(child);
    }
    default:
      return undefined;
  }
}
