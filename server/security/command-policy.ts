/**
 * The command policy: which commands a script given to bash, StreamBash or a setup command may
 * run, decided on the syntax tree of a real bash parser (shell-parser.ts) before anything runs.
 *
 * Every simple command in the script is checked, wherever it sits: lists (`;`, `&&`, `||`, `&`,
 * newlines), pipelines, subshells and groups, `$(…)` and backticks, process substitution,
 * conditionals and loops, function bodies, heredocs fed to a shell, `eval`, `trap` and `alias`
 * strings, and the commands that wrappers run (`bash -c`, `sh -c`, `env`, `timeout`, `nice`,
 * `nohup`, `xargs`, `find -exec`, `busybox`, `command`, `exec`, `stdbuf`, `setsid`, `flock`,
 * `watch`, …), whose inner command is checked in their place. Command names are taken after quote
 * removal (`r''m`, `"rm"`, `\rm`, `$'\x72m'` are `rm`) and path normalisation (`/bin/./rm`).
 *
 * Rules are a program and argument patterns (command-rules.ts); denials win, and the server's deny
 * list cannot be removed. What programs do with their options, operands and environment is data
 * (program-table.ts), each command line read as the program reads it, abbreviated long options
 * included (options.ts), by the walker here. File names are judged against the sensitive-file rules
 * where the script may be (every literal cd, env -C, git -C), globs and brace expansions by what they
 * can name (path-patterns.ts), destinations by what lands in them, directories as the trees they are.
 *
 * Under an allowlist (default "deny") what cannot be known before the run is refused: a command
 * name computed at run time, `eval` or `bash -c` of computed text, a shell reading a script from a
 * pipe, and assignments of variables that change what runs (PATH, LD_PRELOAD, BASH_ENV, GIT_*…).
 * Unparseable input is refused under every policy, and there is no size above which checks stop.
 *
 * The policy is a convenience layer that stops an agent's mistakes and the obvious attacks; a
 * shell always has another way (an interpreter, a script file). The sandbox is the boundary.
 */
import { posix } from "node:path";
import { DomainError } from "../../core/errors.ts";
import type { FileRules } from "../../providers/executor/sensitive-files.ts";
import type { AgentTypeBinding } from "../../providers/types.ts";
import { allowMatches, compileRule, DEFAULT_DENY_RULES, denyMatches, programPath, type Rule } from "./command-rules.ts";
import { callGraph, forkBomb } from "./fork-bomb.ts";
import { type GivenOption, given, readArgs } from "./options.ts";
import { PathRules } from "./path-patterns.ts";
import {
  type Copier,
  COPIERS,
  ENV_OPTIONS,
  FLOCK_OPTIONS,
  GIT_CONFIG_VERBS,
  GIT_GLOBAL_FLAGS,
  GIT_GLOBAL_VALUE,
  GIT_SUBCOMMANDS,
  type GitSubcommand,
  HARMLESS_OPTION_FILES,
  isRestrictedVariable,
  MAPFILE_VALUE,
  NON_READERS,
  OPTION_VARIABLES,
  type ProgramEntry,
  PROGRAMS,
  READERS,
  RESERVED_WORDS,
  REVISION_PATHS,
  RUNS_COMMANDS,
  SAFE_BUILTINS,
  SHELL_VALUE,
  SHELLS,
  SYSTEM_DIRS,
  WATCH_OPTIONS,
  WRAPPERS,
  XARGS_OPTIONS,
} from "./program-table.ts";
import { escapeGlob, literal, MAX_PARSE_MS, type Node, parseShell, redirectOperator, sourceText, word } from "./shell-parser.ts";

export { ruleProblem } from "./command-rules.ts";

/** An agent type's command policy, as configured. */
export interface CommandPolicyConfig {
  /** "allow", "deny", or "" (deny when `allow` has rules, else allow). */
  defaultAction: string;
  allow: string[];
  deny: string[];
}

/** Deepest nesting of wrappers and shell strings checked; deeper is refused, never skipped. */
const MAX_DEPTH = 24;
/**
 * Most parses, and parsed characters, one check may take (its readings, its lines, its nested
 * strings). A real script takes a few; a script built to cost the server minutes is refused.
 */
const MAX_PARSES = 4000;
const MAX_PARSED_CHARS = 4 * 1024 * 1024;

/** Why a command was refused (the `why` of the error metadata). */
export type RefusalKind =
  | "denied_by_server"
  | "denied_by_agent_type"
  | "not_in_allowlist"
  | "computed_at_run_time"
  | "restricted_variable"
  | "sensitive_file"
  | "unparseable"
  | "fork_bomb"
  | "too_deep"
  | "too_complex";

/** A refusal: the offending command, the rule, and why. */
export interface Refusal {
  command: string;
  rule: string;
  why: RefusalKind;
  message: string;
}

/** A simple command as the policy sees it: its name and arguments after quote removal. */
interface SimpleCommand {
  /** undefined: computed at run time. */
  name: string | undefined;
  /** Each argument's value; undefined where computed at run time. */
  args: Array<string | undefined>;
  /** Each argument as a pattern of the file names it stands for (see shell-parser.ts `Word.glob`), in step with `args`. */
  globs: Array<string | undefined>;
  /** The source text, for messages. */
  text: string;
  /** Where it stands in the script (wrapped commands keep their wrapper's), for `cd`'s reach. */
  node?: Node;
  /** What the command reads on stdin when the script says so literally (a heredoc, a here-string); "pipe" when it is computed or fed by a pipe. */
  stdin?: { text: string } | "pipe";
}

/** Builtins that only split their input with IFS: an `IFS=…` prefix of theirs changes nothing else. */
const IFS_READERS = new Set(["read", "mapfile", "readarray"]);

/**
 * The index of the subcommand among the arguments of a program that has subcommands (git: after
 * its own options), -1 when there is none; undefined for other programs, and where the subcommand
 * cannot be told (a computed word or an option the table does not know stands before it).
 */
function subcommandAt(base: string, args: Array<string | undefined>): number | undefined {
  if (base !== "git") return undefined;
  for (let i = 0; i < args.length; i++) {
    const v = args[i];
    if (v === undefined) return undefined;
    if (!v.startsWith("-")) return i;
    if (GIT_GLOBAL_VALUE.has(v)) i++;
    else if (!GIT_GLOBAL_FLAGS.has(v) && !/^--(?:exec-path|list-cmds|config-env|git-dir|work-tree|namespace|super-prefix|attr-source)=/.test(v)) return undefined;
  }
  return -1;
}

/**
 * Decisions of every policy by policy, script, env and workdir, the least recently used first (see
 * `CommandPolicy.check`), bounded by their keys' total length; the longest script kept.
 */
const decisions = new Map<string, Refusal | undefined>();
let decisionChars = 0;
const DECISION_CACHE_CHARS = 1 << 20;
const DECISION_CACHE_SCRIPT_MAX = 4096;
let policies = 0;

/** A compiled policy: the server's deny list, an agent type's rules, the sensitive-file rules. */
export class CommandPolicy {
  readonly #serverDeny: Rule[];
  readonly #deny: Rule[];
  readonly #allow: Rule[];
  readonly #allowlist: boolean;
  readonly #files: PathRules;
  /**
   * Directories the script may be in when it names a file: the request's workdir and every
   * literal `cd`/`pushd` target in it. Relative names are judged in each (over-approximating
   * control flow, so `cd .git/hooks && echo x > pre-commit` is seen). State of one check only:
   * `check` runs on a copy.
   */
  readonly #dirs = new Map<string, { tree: unknown; at: number }>();
  /**
   * Whether the script may make wildcards match a leading dot (`shopt -s dotglob`, GLOBIGNORE),
   * so that `*` names `.env` too. State of one check only.
   */
  #dotglob = false;
  /** This policy's part of the decision cache's keys (the checks' copies share it). */
  readonly #id: number;
  /** Parses and parsed characters of this check so far, bounded: see MAX_PARSES. */
  #parses = 0;
  #parsed = 0;

  constructor(config: CommandPolicyConfig = { defaultAction: "", allow: [], deny: [] }, files: FileRules = { deny: [], writeProtected: [] }, from?: CommandPolicy) {
    this.#serverDeny = from ? from.#serverDeny : DEFAULT_DENY_RULES.map(compileRule);
    this.#deny = from ? from.#deny : config.deny.map(compileRule);
    this.#allow = from ? from.#allow : config.allow.map(compileRule);
    this.#allowlist = from ? from.#allowlist : config.defaultAction === "deny" || (config.defaultAction === "" && config.allow.length > 0);
    this.#files = from ? from.#files : new PathRules(files);
    this.#id = from ? from.#id : ++policies;
  }

  /** True when commands no rule names are refused. */
  get allowlist(): boolean {
    return this.#allowlist;
  }

  /**
   * Checks `script` (and the variables a request sets for it); resolves to the first refusal, or
   * undefined when everything in it may run.
   */
  async check(script: string, env: Record<string, string> = {}, workdir = ""): Promise<Refusal | undefined> {
    // The decision is a function of the policy and these three alone (nothing else is read), so
    // it is kept by their text: an agent repeats its commands, and a parse costs more than the rest
    // of a no-op call. A parse that ran out of time is not kept (it depends on the machine's load).
    const cacheable = script.length <= DECISION_CACHE_SCRIPT_MAX;
    const key = cacheable ? `${this.#id}\0${JSON.stringify([script, env, workdir])}` : "";
    if (cacheable && decisions.has(key)) {
      const hit = decisions.get(key);
      // Most recently used last, so the oldest goes first when the cache is full.
      decisions.delete(key);
      decisions.set(key, hit);
      return hit === undefined ? undefined : { ...hit };
    }
    const decision = await this.#decide(script, env, workdir);
    if (cacheable && decision?.why !== "too_complex") {
      decisions.set(key, decision === undefined ? undefined : { ...decision });
      decisionChars += key.length;
      for (const old of decisions.keys()) {
        if (decisionChars <= DECISION_CACHE_CHARS) break;
        decisions.delete(old);
        decisionChars -= old.length;
      }
    }
    return decision;
  }

  async #decide(script: string, env: Record<string, string>, workdir: string): Promise<Refusal | undefined> {
    const run = new CommandPolicy(undefined, undefined, this);
    for (const [name, value] of Object.entries(env)) {
      const r = await run.#setsVariable(`env ${name}=…`, name, value, 0);
      if (r !== undefined) return r;
    }
    if (workdir !== "" && workdir !== ".") run.#dirs.set(workdir, { tree: undefined, at: -1 });
    run.#dotglob = /dotglob|GLOBIGNORE/.test(script);
    return run.#checkScript(script, 0);
  }

  /** As `check`, throwing COMMAND_NOT_ALLOWED (PERMISSION_DENIED) on a refusal. */
  async enforce(script: string, env: Record<string, string> = {}, workdir = ""): Promise<void> {
    const refusal = await this.check(script, env, workdir);
    if (refusal !== undefined) throw commandNotAllowed(refusal);
  }

  /**
   * Why a file name the script uses (a pattern: see shell-parser.ts `Word.glob`) may not be used
   * so, in any directory it may be in. `tree`: the name is a directory whose contents are read or
   * written.
   */
  #fileHit(glob: string, access: "read" | "write", where?: Node, tree = false) {
    const one = (g: string) => this.#files.hit(g, access, { tree, dotglob: this.#dotglob });
    const hit = one(glob);
    if (hit !== undefined || glob.startsWith("/") || glob.startsWith("~")) return hit;
    for (const [dir, from] of this.#dirs) {
      // A `cd` reaches what comes after it in its own script, and everything in scripts it starts.
      if (where !== undefined && where.tree === from.tree && where.startIndex < from.at) continue;
      const h = one(posix.normalize(`${escapeGlob(dir)}/${glob}`));
      if (h !== undefined) return h;
    }
    return undefined;
  }

  #refuse(command: string, rule: string, why: RefusalKind, reason: string): Refusal {
    const shown = command.length > 200 ? `${command.slice(0, 200)}…` : command;
    return { command: shown, rule, why, message: `Command '${shown.replace(/[\u0000-\u001f]/g, " ")}' is not allowed: ${reason}` };
  }

  /**
   * Checks a script in every reading that could differ from the parser's: bash joins a word
   * across a backslash-newline (`r\<newline>m` is `rm`, where the grammar sees two words), and a
   * carriage return is part of a word to bash but a line break to a script written elsewhere.
   * Each reading must pass.
   */
  async #checkScript(script: string, depth: number, known: ReadonlySet<string> = new Set()): Promise<Refusal | undefined> {
    const readings = new Set([script]);
    if (script.includes("\\\n")) readings.add(script.replace(/\\\n/g, ""));
    if (script.includes("\r")) for (const r of [...readings]) readings.add(r.replace(/\r\n?/g, "\n"));
    for (const r of readings) {
      const refusal = await this.#checkReading(r, depth, known);
      if (refusal !== undefined) return refusal;
    }
    return undefined;
  }

  async #checkReading(script: string, depth: number, known: ReadonlySet<string> = new Set()): Promise<Refusal | undefined> {
    if (depth > MAX_DEPTH) return this.#refuse(script, "", "too_deep", `wrappers and shell strings are nested more than ${MAX_DEPTH} deep`);
    // Every reading is checked in full, but the work one call may cost the server is bounded:
    // past it the script is refused, never waved through.
    this.#parses++;
    this.#parsed += script.length;
    if (this.#parses > MAX_PARSES || this.#parsed > MAX_PARSED_CHARS) {
      return this.#refuse(script, "", "too_complex", "it takes more work to check than one call may cost; split it, or write it to a file and run that");
    }
    // A long check leaves room for other calls between its parses.
    if (this.#parses % 64 === 0) await new Promise((r) => setImmediate(r));
    const parsed = await parseShell(script);
    if ("error" in parsed) {
      if (parsed.error === "time") return this.#refuse(script, "", "too_complex", `parsing it took more than ${MAX_PARSE_MS} ms; split it, or write it to a file and run that`);
      const near = parsed.offset >= 0 ? script.slice(0, parsed.offset + 1) : "";
      const where = parsed.offset >= 0 ? ` (line ${near.split("\n").length}: '${near.split("\n").at(-1)?.slice(-40) ?? ""}')` : "";
      return this.#refuse(script, "", "unparseable", `it could not be parsed as bash${where}; nothing runs that cannot be checked`);
    }
    const tree = parsed.tree;
    try {
      const root = tree.rootNode;
      const graph = callGraph(root);
      const functions = new Set<string>([...known, ...graph.definitions.keys()]);
      const bomb = forkBomb(graph);
      if (bomb !== undefined) {
        const { name, cycle } = bomb;
        const how = cycle.length > 1 ? `calls ${cycle.slice(1).map((c) => `'${c}'`).join(" → ")}, which calls it back,` : "calls itself";
        return this.#refuse(graph.definitions.get(name) ?? script, name, "fork_bomb", `function '${name}' ${how} without waiting (in the background or a pipeline), the shape of a fork bomb`);
      }
      for (const c of root.descendantsOfType("command")) {
        const name = c?.childForFieldName("name");
        const program = name ? literal(name) : undefined;
        if (!c || program === undefined) continue;
        const args = c.childrenForFieldName("argument").map((a) => (a === null ? undefined : literal(a)));
        // The directories a command may run in: a literal cd's or pushd's, env -C's, git -C's.
        const targets =
          program === "cd" || program === "pushd"
            ? [args.find((a) => a === undefined || !a.startsWith("-"))]
            : program === "env"
              ? given(readArgs(args, ENV_OPTIONS), "-C", "--chdir").map((o) => o.value ?? undefined)
              : program === "git"
                ? args.flatMap((a, i) => (a === "-C" ? [args[i + 1]] : []))
                : [];
        for (const target of targets) {
          if (target !== undefined && target !== "" && target !== "." && this.#dirs.size < 64 && !this.#dirs.has(target)) this.#dirs.set(target, { tree: c.tree, at: c.startIndex });
        }
      }
      const refusal = await this.#walk(root, depth, functions);
      if (refusal !== undefined || !script.includes("\n")) return refusal;
      return await this.#lineByLine(script, root, depth, functions);
    } finally {
      tree.delete();
    }
  }

  /**
   * A second look at a multi-line script, one line at a time: the grammar and bash disagree on
   * some line starts (a line beginning with a backslash, a list after a long pipeline), so each
   * line outside strings, heredocs and comments must also pass on its own. Lines that mean nothing
   * alone (`then`, `done`, `}`) are unparseable alone and pass here; the whole script was parsed.
   */
  async #lineByLine(script: string, root: Node, depth: number, functions: ReadonlySet<string>): Promise<Refusal | undefined> {
    const quoted: Array<[number, number, boolean]> = [];
    // A case item's patterns up to its `)` (`Linux) echo linux ;;`): words, never a command.
    const heads: Array<[number, number]> = [];
    const collect = (n: Node) => {
      const paren = n.type === "case_item" ? n.children.find((c) => c?.type === ")") : undefined;
      if (paren) heads.push([n.startIndex, paren.endIndex]);
      if (["heredoc_body", "heredoc_end", "string", "raw_string", "ansi_c_string", "translated_string", "comment", "heredoc_content"].includes(n.type)) {
        quoted.push([n.startIndex, n.endIndex, n.type.startsWith("heredoc")]);
        return;
      }
      for (const c of n.namedChildren) if (c !== null) collect(c);
    };
    collect(root);
    // Offsets are in UTF-16 units in web-tree-sitter's JavaScript API, as string indices are. A
    // heredoc's body starts at a line start; a string or comment that starts one is not inside.
    const inside = (at: number) => quoted.some(([a, b, heredoc]) => (heredoc ? at >= a : at > a) && at < b);
    // A line break inside a string (not a heredoc) does not end the line the string starts on.
    const inString = (at: number) => quoted.some(([a, b, heredoc]) => !heredoc && at > a && at < b);
    const lines = script.split("\n");
    let start = 0;
    for (let i = 0; i < lines.length; i++) {
      const at = start;
      let line = lines[i];
      start += line.length + 1;
      for (;;) {
        if (i + 1 >= lines.length) break;
        // A string that spans lines belongs to its first: `bash -c 'ls⏎rm -rf /'` is one line, so
        // its script is checked even where the whole script was misparsed around it.
        if (inString(start - 1)) {
          line = `${line}\n${lines[++i]}`;
          start += lines[i].length + 1;
          continue;
        }
        // A line continued by a backslash-newline is one line to bash.
        if (/(^|[^\\])(\\\\)*\\$/.test(line)) {
          line = `${line.slice(0, -1)}${lines[++i]}`;
          start += lines[i].length + 1;
          continue;
        }
        break;
      }
      // A script that is one line (its strings spanning the rest) was checked whole already.
      if (inside(at) || line.length === script.length) continue;
      // Words that only close or continue a compound command (`fi`, `done`, `then`, `}`) mean
      // nothing alone; what follows them on the line is what must pass.
      let rest = line.replace(LEADING_KEYWORDS, "");
      const head = heads.find(([a, b]) => a <= at + line.length - rest.length && at + line.length - rest.length < b);
      if (head !== undefined) rest = rest.slice(head[1] - (at + line.length - rest.length)).replace(LEADING_KEYWORDS, "");
      if (rest.trim() === "") continue;
      const skipped = line.length - rest.length;
      const refusal = await this.#checkLine(rest, depth, functions, (i) => inside(at + skipped + i));
      if (refusal !== undefined) return refusal;
    }
    return undefined;
  }

  /** Checks every node below `node`, depth first, in source order. */
  async #walk(node: Node, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    const r = await this.#visit(node, depth, functions);
    if (r !== undefined) return r;
    for (const child of node.namedChildren) {
      if (child === null) continue;
      const rc = await this.#walk(child, depth, functions);
      if (rc !== undefined) return rc;
    }
    return undefined;
  }

  async #visit(node: Node, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    switch (node.type) {
      case "command":
        return this.#command(node, depth, functions);
      case "variable_assignment":
        return this.#assignment(node, depth);
      case "declaration_command":
        return this.#declaration(node);
      case "expansion":
        // ${PATH:=…} and ${PATH=…} assign.
        if (this.#allowlist) {
          const name = node.namedChildren.find((c) => c?.type === "variable_name")?.text;
          if (name !== undefined && isRestrictedVariable(name) && /^\$\{[A-Za-z_][A-Za-z0-9_]*:?=/.test(node.text)) {
            return this.#refuse(node.text, name, "restricted_variable", `assigning ${name} is not allowed under an allowlist: it changes what runs`);
          }
        }
        if (this.#allowlist) {
          // ${x@P} expands x's value as a prompt, running its substitutions; ${!x} takes the name of
          // the variable to expand from x's value, and a name with a subscript runs its $(…).
          // ${!prefix*}, ${!prefix@} and ${!a[@]} only list names.
          if (/^\$\{[^}]*@P\}$/.test(node.text)) {
            return this.#refuse(node.text, "", "computed_at_run_time", "${…@P} runs the substitutions of a value known only at run time");
          }
          if (/^\$\{!/.test(node.text) && !/^\$\{![A-Za-z_][A-Za-z0-9_]*(\*|@|\[[@*]\])\}$/.test(node.text)) {
            return this.#refuse(node.text, "", "computed_at_run_time", "${!x} expands a variable named at run time, and a name with a subscript runs its substitution");
          }
        }
        // The grammar reads a backtick substitution in a word of ${…} (${x:-`cmd`}) and any
        // substitution in a pattern (${x#$(cmd)}) as plain text; bash runs them. Such text is checked
        // again as an argument at the top of a script, where the grammar sees its substitutions.
        for (const child of node.namedChildren) {
          if ((child?.type === "word" || child?.type === "regex") && /`|\$\(|[<>]\(/.test(child.text)) {
            const r = await this.#checkScript(`echo ${child.text}`, depth + 1);
            if (r !== undefined) return r;
          }
        }
        return undefined;
      case "for_statement":
      case "select_statement": {
        // `for PATH in …` assigns PATH.
        const v = node.childForFieldName("variable")?.text;
        if (this.#allowlist && v !== undefined && isRestrictedVariable(v)) {
          return this.#refuse(node.text, v, "restricted_variable", `assigning ${v} is not allowed under an allowlist: it changes what runs`);
        }
        return undefined;
      }
      case "raw_string":
      case "string":
      case "word":
      case "concatenation": {
        // bash evaluates an array subscript's $(…) wherever a name is taken from text: $((x)),
        // printf -v, test -v, read. Text of that shape is code, computed at run time.
        const v = node.type === "concatenation" ? undefined : literal(node);
        if (this.#allowlist && v !== undefined && /\[[^\]]*(\$\(|`)/.test(v)) {
          return this.#refuse(node.parent?.text ?? node.text, "", "computed_at_run_time", "it holds an array subscript with a command substitution, which bash runs wherever the text is used as a name");
        }
        return undefined;
      }
      case "file_redirect":
        return this.#redirect(node);
      default:
        return undefined;
    }
  }

  async #assignment(node: Node, depth: number): Promise<Refusal | undefined> {
    const name = node.childForFieldName("name")?.text ?? node.text.split(/[+]?=/)[0];
    // `IFS=, read -r a b`: the assignment lasts for that builtin, which only splits its input with it.
    const command = node.parent?.type === "command" ? node.parent.childForFieldName("name") : null;
    if (name === "IFS" && command !== null && IFS_READERS.has(literal(command) ?? "")) return undefined;
    const value = node.childForFieldName("value");
    return this.#setsVariable(sourceText(node), name, value === null ? "" : literal(value), depth);
  }

  #declaration(node: Node): Refusal | undefined {
    if (!this.#allowlist) return undefined;
    const words = node.namedChildren.filter((c): c is Node => c !== null);
    const nameref = words.some((w) => w.type === "word" && /^-[a-zA-Z]*n/.test(w.text));
    for (const w of words) {
      const name = w.type === "variable_assignment" ? (w.childForFieldName("name")?.text ?? "") : w.type === "variable_name" || w.type === "word" ? w.text : "";
      // `declare -n ref=PATH` makes every later `ref=…` an assignment of PATH.
      const valueNode = nameref && w.type === "variable_assignment" ? w.childForFieldName("value") : null;
      const target = valueNode === null ? "" : (literal(valueNode) ?? valueNode.text);
      for (const n of [name, target]) {
        if (n !== "" && isRestrictedVariable(n) && (w.type === "variable_assignment" || nameref)) {
          return this.#refuse(node.text, n, "restricted_variable", `assigning ${n} is not allowed under an allowlist: it changes what runs`);
        }
      }
    }
    return undefined;
  }

  /** A redirection: writing to a sensitive or write-protected file, or reading a sensitive one. */
  #redirect(node: Node): Refusal | undefined {
    const dest = node.childForFieldName("destination") ?? node.namedChildren.find((c) => c?.type !== "file_descriptor") ?? null;
    if (dest === null) return undefined;
    const w = word(dest);
    if (w === undefined || /^\d+$|^-$/.test(w.value)) return undefined;
    const op = redirectOperator(node) ?? ">";
    const writing = op !== "<" && op !== "<&";
    const hit = this.#fileHit(w.glob, writing ? "write" : "read", node);
    if (hit === undefined) return undefined;
    const does = op === "<>" ? "opens for reading and writing" : writing ? "writes" : "reads";
    return this.#refuse(sourceText(node.parent ?? node), hit.pattern, "sensitive_file", `it ${does} '${w.value}', a ${hit.list === "deny" ? "sensitive" : "write-protected"} file (rule '${hit.pattern}')`);
  }

  /** A command node of the tree: its words, its literal stdin, then the shared check. */
  async #command(node: Node, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    const nameNode = node.childForFieldName("name");
    if (nameNode === null) return undefined; // assignments or redirections alone
    // A bare `fi`, `done`, `}` seen as a command (a line read alone) is a keyword to bash, never a program.
    if (RESERVED_WORDS.has(nameNode.text) && nameNode.text !== "time" && nameNode.text !== "coproc") return undefined;
    const args: Array<string | undefined> = [];
    const globs: Array<string | undefined> = [];
    let afterName = false;
    for (const child of node.namedChildren) {
      if (child === null) continue;
      if (child.id === nameNode.id) {
        afterName = true;
        continue;
      }
      if (!afterName || child.type === "file_redirect" || child.type === "herestring_redirect" || child.type === "heredoc_redirect") continue;
      const w = word(child);
      args.push(w?.value);
      globs.push(w?.glob);
    }
    const cmd: SimpleCommand = { name: literal(nameNode), args, globs, text: sourceText(node), stdin: stdinOf(node), node };
    return this.#simple(cmd, depth, functions);
  }

  /** The check of one simple command, from the tree or from a wrapper's arguments. */
  async #simple(cmd: SimpleCommand, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    if (depth > MAX_DEPTH) return this.#refuse(cmd.text, "", "too_deep", `wrappers and shell strings are nested more than ${MAX_DEPTH} deep`);
    if (cmd.name === undefined) {
      if (!this.#allowlist) return undefined;
      return this.#refuse(cmd.text, "", "computed_at_run_time", "its program is computed at run time, which an allowlist cannot check");
    }
    // A carriage return ending a name (a CRLF script) only makes bash look for a program that no
    // PATH directory the sandbox user cannot write holds; it is judged without it.
    const bare = cmd.name.replace(/\r+$/, "");
    if (bare === "") return undefined;
    const name = bare.includes("/") ? programPath(bare) : bare;
    const base = posix.basename(name);
    const args = cmd.args;

    for (const [rules, why, whose] of [[this.#serverDeny, "denied_by_server", "the server's"], [this.#deny, "denied_by_agent_type", "the agent type's"]] as const) {
      const sub = name === base ? subcommandAt(base, args) : undefined;
      const rule = rules.find((r) => denyMatches(r, name, base, args, sub));
      if (rule !== undefined) return this.#refuse(cmd.text, rule.text, why, `it matches ${whose} deny rule '${rule.text}'`);
    }

    const files = this.#sensitiveArgs(cmd, base);
    if (files !== undefined) return files;

    // Commands that run other commands: check what they run.
    const inner = await this.#wrapped(cmd, base, depth, functions);
    if (inner !== "not a wrapper") return inner;

    if (!this.#allowlist) return undefined;
    // A program named by path is what an allow rule names only when it comes from the system's
    // directories (a "git" the agent wrote elsewhere is not git) or the rule names that path.
    if (name !== base && !SYSTEM_DIRS.has(posix.dirname(name))) {
      if (this.#allow.some((r) => r.byPath && allowMatches(r, name, base, args))) return undefined;
      return this.#refuse(cmd.text, "", "not_in_allowlist", `'${name}' is run by path from outside the system directories, and no allow rule names that path`);
    }
    if (this.#allow.some((r) => allowMatches(r, name, base, args))) return undefined;
    if (name === base && (SAFE_BUILTINS.has(base) || functions.has(base))) {
      if (base === "hash" && args.some((a) => a === undefined || /^-[a-zA-Z]*p/.test(a))) {
        return this.#refuse(cmd.text, "", "not_in_allowlist", "'hash -p' makes a name run another program");
      }
      if (base === "read" || base === "mapfile" || base === "readarray" || base === "printf" || base === "getopts" || base === "let") {
        // A variable a program reads as its options, set from input, is computed too.
        const target = args.map((a) => (base === "let" ? a?.split(/[-+*/%&|^]?=/)[0] : a)).find((a) => a !== undefined && (isRestrictedVariable(a) || Object.hasOwn(OPTION_VARIABLES, a)));
        if (target !== undefined) return this.#refuse(cmd.text, target, "restricted_variable", `setting ${target} is not allowed under an allowlist: it changes what runs`);
      }
      return undefined;
    }
    return this.#refuse(cmd.text, "", "not_in_allowlist", `'${base}' is not in the agent type's allowlist`);
  }

  /**
   * Arguments naming sensitive files (as `cat .env`, `cp .env x`), where the parser can see them.
   * Copies, moves and links are judged by what they read and write (#copies); `git show REV:PATH`
   * reads PATH.
   */
  #sensitiveArgs(cmd: SimpleCommand, base: string): Refusal | undefined {
    if (NON_READERS.has(base) || Object.hasOwn(COPIERS, base)) return undefined;
    // A search pattern is text (`grep -n .env .gitignore` searches for the text ".env").
    const entry = PROGRAMS[base];
    let pattern = -1;
    if (entry?.pattern !== undefined) {
      const read = readArgs(cmd.args, entry.options);
      if (given(read, ...entry.pattern).length === 0 && read.operands.length > 0 && read.computed.length === 0) pattern = read.operands[0].at;
    }
    for (const [k, glob] of cmd.globs.entries()) {
      if (glob === undefined || glob === "" || k === pattern) continue;
      const values = [glob];
      const eq = glob.indexOf("=");
      if (eq > 0) values.push(glob.slice(eq + 1));
      const value = cmd.args[k] as string;
      const rev = REVISION_PATHS.has(base) ? /^(?::[0-3]:|[^:]*:)(.+)$/.exec(value) : null;
      if (rev !== null) {
        const hit = this.#fileHit(escapeGlob(rev[1]), "read", cmd.node);
        if (hit !== undefined) return this.#refuse(cmd.text, hit.pattern, "sensitive_file", `it reads '${rev[1]}' from git's objects, a sensitive file (rule '${hit.pattern}')`);
      }
      for (const v of values) {
        const access = READERS.has(base) ? "read" : "write";
        const hit = this.#fileHit(v, access, cmd.node);
        if (hit !== undefined) {
          const kind = hit.list === "deny" ? "a sensitive file" : "a write-protected file";
          return this.#refuse(cmd.text, hit.pattern, "sensitive_file", `it names '${cmd.args[k]}', ${kind} (rule '${hit.pattern}')`);
        }
      }
    }
    return undefined;
  }

  /**
   * Checks a script held in a word (bash -c, eval, trap, watch): computed text is refused under an
   * allowlist. `functions`: the script's functions, for text the same shell runs (eval, trap, an
   * alias, a callback); another process (bash -c) never sees them, so a name there is a program.
   */
  async #script(text: string | undefined, cmd: SimpleCommand, depth: number, what: string, functions?: ReadonlySet<string>): Promise<Refusal | undefined> {
    if (text === undefined) {
      if (!this.#allowlist) return undefined;
      return this.#refuse(cmd.text, "", "computed_at_run_time", `${what} is computed at run time, which an allowlist cannot check`);
    }
    return this.#checkScript(text, depth + 1, functions);
  }

  /** Checks the command a wrapper runs at `i` (its name and the rest of the arguments). */
  #runs(cmd: SimpleCommand, i: number, depth: number, functions: Set<string>, extraArgs = false): Promise<Refusal | undefined> {
    if (i >= cmd.args.length) return Promise.resolve(undefined);
    const rest = cmd.args.slice(i + 1);
    const globs = cmd.globs.slice(i + 1);
    if (extraArgs) {
      rest.push(undefined);
      globs.push(undefined);
    }
    return this.#simple({ name: cmd.args[i], args: rest, globs, text: cmd.text, node: cmd.node }, depth + 1, functions);
  }

  /**
   * The commands a wrapper runs, checked in its place: a result (undefined = allowed) for a
   * wrapper, "not a wrapper" otherwise. A wrapper is transparent: `timeout 60 npm test` needs
   * only `npm test` allowed.
   */
  async #wrapped(cmd: SimpleCommand, base: string, depth: number, functions: Set<string>): Promise<Refusal | undefined | "not a wrapper"> {
    const a = cmd.args;
    const wrapper = WRAPPERS[base];
    if (wrapper !== undefined) {
      const read = readArgs(a, wrapper.options);
      if (given(read, ...(wrapper.noCommand ?? [])).length > 0) return base === "command" ? undefined : "not a wrapper";
      return this.#runs(cmd, read.firstOperand + (wrapper.skip ?? 0), depth, functions);
    }
    const program = PROGRAMS[base];
    if (program !== undefined) {
      const r = await this.#programOptions(cmd, program, base, depth);
      if (r !== undefined) return r;
    }
    const copier = COPIERS[base];
    if (copier !== undefined) {
      const r = this.#copies(cmd, copier, base);
      if (r !== undefined) return r;
    }
    switch (base) {
      case "env":
        return this.#env(cmd, depth, functions);
      case "flock":
        return this.#flock(cmd, depth, functions);
      case "watch":
        return this.#watch(cmd, depth, functions);
      case "xargs":
        return this.#xargs(cmd, depth, functions);
      case "find":
        return this.#find(cmd, depth, functions);
      case "eval": {
        return this.#script(a.includes(undefined) ? undefined : a.join(" "), cmd, depth, "eval's text", functions);
      }
      case "trap": {
        const read = readArgs(a, { short: "+lpP", optionsFirst: true });
        const i = read.firstOperand;
        if (i >= a.length || given(read, "-p", "-l", "-P").length > 0) return undefined;
        return this.#script(a[i], cmd, depth, "trap's command", functions);
      }
      case "alias": {
        for (const v of a) {
          if (v === undefined) {
            if (this.#allowlist) return this.#refuse(cmd.text, "", "computed_at_run_time", "an alias computed at run time cannot be checked");
            continue;
          }
          const eq = v.indexOf("=");
          if (eq > 0) {
            const r = await this.#checkScript(v.slice(eq + 1), depth + 1, functions);
            if (r) return r;
          }
        }
        return "not a wrapper";
      }
      case "git": {
        const r = await this.#git(cmd, depth);
        if (r !== undefined) return r;
        return "not a wrapper";
      }
      case "tar": {
        const r = this.#tar(cmd);
        return r ?? "not a wrapper";
      }
      case "mapfile":
      case "readarray":
        return this.#mapfile(cmd, base, depth, functions);
      case "enable":
        if (this.#allowlist) return this.#refuse(cmd.text, "", "not_in_allowlist", "'enable' loads or replaces shell builtins");
        return "not a wrapper";
      default:
        break;
    }
    if (SHELLS.has(base)) return this.#shell(cmd, depth);
    return "not a wrapper";
  }

  /** env [options] [NAME=VALUE…] [COMMAND…]: -S's command line, each assignment, then the command. */
  async #env(cmd: SimpleCommand, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    const a = cmd.args;
    const read = readArgs(a, ENV_OPTIONS);
    // -S / --split-string: the value is a command line.
    for (const o of given(read, "-S", "--split-string")) {
      const r = await this.#script(o.value ?? undefined, cmd, depth, "env -S's command");
      if (r) return r;
    }
    let i = read.firstOperand;
    for (; i < a.length; i++) {
      const v = a[i];
      if (v === undefined || !/^[A-Za-z_][A-Za-z0-9_]*=/.test(v)) break;
      const r = await this.#setsVariable(cmd.text, v.slice(0, v.indexOf("=")), v.slice(v.indexOf("=") + 1), depth);
      if (r) return r;
    }
    if (a[i] === undefined && i < a.length && this.#allowlist) return this.#refuse(cmd.text, "", "computed_at_run_time", "its program is computed at run time, which an allowlist cannot check");
    return this.#runs(cmd, i, depth, functions);
  }

  /** flock [options] FILE -c COMMAND | flock [options] FILE COMMAND…: the command. */
  async #flock(cmd: SimpleCommand, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    const a = cmd.args;
    // flock [options] FILE -c COMMAND | flock [options] FILE COMMAND…
    const read = readArgs(a, FLOCK_OPTIONS);
    for (const o of given(read, "-c", "--command")) return this.#script(a[o.at + 1], cmd, depth, "flock -c's command");
    const i = read.firstOperand;
    if (a[i + 1] === "-c" || a[i + 1] === "--command") return this.#script(a[i + 2], cmd, depth, "flock -c's command");
    return this.#runs(cmd, i + 1, depth, functions);
  }

  /** watch [options] COMMAND…: the operands are one shell command line, unless -x. */
  async #watch(cmd: SimpleCommand, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    const a = cmd.args;
    const read = readArgs(a, WATCH_OPTIONS);
    if (given(read, "-x", "--exec").length > 0) return this.#runs(cmd, read.firstOperand, depth, functions);
    const rest = a.slice(read.firstOperand);
    return this.#script(rest.includes(undefined) ? undefined : rest.join(" "), cmd, depth, "watch's command");
  }

  /** xargs [options] [COMMAND…]: the command, run with input appended, or in place of the replacement string (-I) and then not appended. */
  async #xargs(cmd: SimpleCommand, depth: number, functions: Set<string>): Promise<Refusal | undefined> {
    const a = cmd.args;
    const read = readArgs(a, XARGS_OPTIONS);
    const i = read.firstOperand;
    if (i >= a.length) return undefined; // echo
    // With -I/-i/--replace, the replacement string stands for input: whatever holds it is computed,
    // and a computed replacement string could be in any word.
    const replace = given(read, "-I", "-i", "--replace").at(-1);
    const token = replace === undefined ? null : replace.value === null ? "{}" : replace.value;
    const placeholder = (k: number) => token !== null && k >= i && (token === undefined || (token !== "" && cmd.args[k]?.includes(token) === true));
    return this.#runs({ ...cmd, args: a.map((v, k) => (placeholder(k) ? undefined : v)), globs: cmd.globs.map((v, k) => (placeholder(k) ? undefined : v)) }, i, depth, functions, replace === undefined);
  }

  /** find: the files its -fprint* actions write, and the commands its -exec/-ok actions run. */
  async #find(cmd: SimpleCommand, depth: number, functions: Set<string>): Promise<Refusal | undefined | "not a wrapper"> {
    const a = cmd.args;
    // find lists names freely; once it runs a command on what it finds, its tests name files that are read.
    let r: Refusal | undefined = a.some((v) => v === "-exec" || v === "-execdir" || v === "-ok" || v === "-okdir") ? this.#sensitiveArgs(cmd, "cat") : undefined;
    if (r) return r;
    // -fprint, -fprint0, -fprintf and -fls write a file of their choosing (content too, with -fprintf).
    for (let i = 0; i < a.length; i++) {
      if (!["-fprint", "-fprint0", "-fprintf", "-fls"].includes(a[i] ?? "")) continue;
      r = this.#sensitiveArgs({ ...cmd, args: [a[i + 1]], globs: [cmd.globs[i + 1]] }, "tee");
      if (r) return r;
    }
    for (let i = 0; i < a.length; i++) {
      if (a[i] === "-exec" || a[i] === "-execdir" || a[i] === "-ok" || a[i] === "-okdir") {
        let end = i + 1;
        while (end < a.length && a[end] !== ";" && a[end] !== "+") end++;
        // "{}" is the file found: computed at run time.
        const found = (k: number) => (a[k]?.includes("{}") ? undefined : a[k]);
        const ks = Array.from({ length: Math.max(0, end - i - 2) }, (_, n) => i + 2 + n);
        const args = ks.map(found);
        const globs = ks.map((k) => (found(k) === undefined ? undefined : cmd.globs[k]));
        r = await this.#simple({ name: found(i + 1), args, globs, text: cmd.text, node: cmd.node }, depth + 1, functions);
        if (r) return r;
        i = end;
      }
    }
    return "not a wrapper";
  }

  /** mapfile/readarray: -C names code bash runs every -c lines (the callback, with an index and the line). */
  async #mapfile(cmd: SimpleCommand, base: string, depth: number, functions: Set<string>): Promise<Refusal | undefined | "not a wrapper"> {
    const a = cmd.args;
    // -C names code bash runs every -c lines (the callback, with an index and the line).
    for (let k = 0; k < a.length; k++) {
      const v = a[k];
      if (v === undefined) {
        if (this.#allowlist) return this.#refuse(cmd.text, "", "computed_at_run_time", `an argument of ${base} is computed at run time, and could name a callback (-C) an allowlist cannot check`);
        continue;
      }
      if (v === "--" || !v.startsWith("-") || v === "-") break;
      // A cluster of letters; the first that takes a value takes the rest of it, or the next argument.
      for (let c = 1; c < v.length; c++) {
        if (!MAPFILE_VALUE.includes(v[c])) continue;
        const value = c + 1 < v.length ? v.slice(c + 1) : a[++k];
        if (v[c] === "C") {
          const r = await this.#script(value, cmd, depth, `${base}'s callback`, functions);
          if (r) return r;
        }
        break;
      }
    }
    return "not a wrapper";
  }

  /** The glob of an option's value: the word's own when it stands alone, its literal text when attached (bash globs the whole word). */
  #valueGlob(cmd: SimpleCommand, o: GivenOption, offset = 0): string | undefined {
    if (typeof o.value !== "string" || o.valueAt === undefined) return undefined;
    return o.valueAt === o.at ? escapeGlob(o.value) : cmd.globs[o.valueAt + offset];
  }

  /** A file a command writes (or a tree it writes into), judged where the script may be. */
  #writes(cmd: SimpleCommand, glob: string | undefined, shown: string | undefined, tree = false): Refusal | undefined {
    if (glob === undefined || glob === "") return undefined;
    const hit = this.#fileHit(glob, "write", cmd.node, tree);
    if (hit === undefined) return undefined;
    const kind = hit.list === "deny" ? "a sensitive file" : tree ? "a write-protected tree" : "a write-protected file";
    return this.#refuse(cmd.text, hit.pattern, "sensitive_file", `it writes ${tree ? "into " : ""}'${shown ?? glob}', ${kind} (rule '${hit.pattern}')`);
  }

  /** A file a command reads, or a tree (a recursive copy's source, an archive's member): refused when it is, or holds, what a rule makes sensitive. */
  #reads(cmd: SimpleCommand, glob: string | undefined, shown: string | undefined, tree = false): Refusal | undefined {
    if (glob === undefined || glob === "") return undefined;
    const hit = this.#fileHit(glob, "read", cmd.node, tree);
    if (hit === undefined) return undefined;
    return this.#refuse(cmd.text, hit.pattern, "sensitive_file", `it reads ${tree ? "the tree " : ""}'${shown ?? glob}', ${tree ? "which holds sensitive files" : "a sensitive file"} (rule '${hit.pattern}')`);
  }

  /**
   * What a program's options say (PROGRAMS): commands it runs (checked as the script they are),
   * files and trees it writes, files of its own options (unseen: computed). `args`/`globs`: the
   * words to read, the command's own by default (git passes a subcommand's).
   */
  async #programOptions(cmd: SimpleCommand, entry: ProgramEntry | GitSubcommand, what: string, depth: number, from = 0, computedRefused = false): Promise<Refusal | undefined> {
    const aliases = "aliases" in entry ? (entry.aliases ?? {}) : {};
    const args = cmd.args.slice(from).map((v) => (v !== undefined && Object.hasOwn(aliases, v) ? aliases[v] : v));
    const read = readArgs(args, entry.options);
    const commands: Record<string, true | ((v: string) => string | null)> = Array.isArray(entry.commands) ? Object.fromEntries(entry.commands.map((c) => [c, true as const])) : (entry.commands ?? {});
    if (computedRefused && this.#allowlist && read.computed.length > 0 && Object.keys(commands).length > 0) {
      return this.#refuse(cmd.text, "", "computed_at_run_time", `an argument of ${what} is computed at run time, and could be an option that runs a command, which an allowlist cannot check`);
    }
    for (const o of read.options) {
      for (const n of o.names) {
        const c = commands[n];
        if (c !== undefined && o.value !== null) {
          const script = o.value === undefined || c === true ? o.value : c(o.value);
          if (script === null) continue;
          const r = await this.#script(script, cmd, depth, `${what}'s command`);
          if (r) return r;
        }
        const shown = typeof o.value === "string" ? o.value : undefined;
        if (entry.writes?.includes(n)) {
          const r = this.#writes(cmd, this.#valueGlob(cmd, o, from), shown);
          if (r) return r;
        }
        if (entry.writesTree?.includes(n)) {
          const r = this.#writes(cmd, this.#valueGlob(cmd, o, from), shown, true);
          if (r) return r;
        }
        if ("optionFiles" in entry && entry.optionFiles?.includes(n) && this.#allowlist && !(typeof o.value === "string" && HARMLESS_OPTION_FILES.has(o.value))) {
          return this.#refuse(cmd.text, n, "computed_at_run_time", `${what} ${n} reads more of its options from a file, which the policy cannot see`);
        }
      }
    }
    if ("writtenOperands" in entry) {
      for (const k of entry.writtenOperands ?? []) {
        const op = read.operands[k];
        if (op === undefined) continue;
        const r = this.#writes(cmd, cmd.globs[from + op.at], op.value);
        if (r) return r;
      }
    }
    if ("readsTrees" in entry && entry.readsTrees !== undefined && (entry.readsTrees === "always" || given(read, ...entry.readsTrees).length > 0)) {
      const files = "pattern" in entry && entry.pattern !== undefined && given(read, ...entry.pattern).length === 0 ? read.operands.slice(1) : read.operands;
      for (const op of files) {
        const r = this.#reads(cmd, cmd.globs[from + op.at], op.value, true);
        if (r) return r;
      }
    }
    if ("treeOperands" in entry && given(read, ...(entry.treeOperands ?? [])).length > 0) {
      for (const op of read.operands) {
        const r = this.#writes(cmd, cmd.globs[from + op.at], op.value, true);
        if (r) return r;
      }
    }
    return undefined;
  }

  /**
   * What a copy, a move or a link writes (COPIERS): each source lands in the destination under its
   * own name when the destination is (or may be) a directory, or is the destination itself; a
   * recursive one writes a tree there, which a rule may protect the contents of (`cp -r x .git/`,
   * `mv hooks .git/`, `mv .g .git`). Sources are read (cp) or written (mv moves them away; ln gives
   * them a new name, a way in).
   */
  #copies(cmd: SimpleCommand, copier: Copier, base: string): Refusal | undefined {
    const read = readArgs(cmd.args, copier.options);
    const recursive = copier.recursive === "always" || given(read, ...copier.recursive).length > 0;
    const target = given(read, ...copier.target).at(-1);
    const sources = [...read.operands];
    let dest: { glob: string | undefined; shown: string | undefined } | undefined;
    let into: "yes" | "no" | "maybe";
    if (target !== undefined) {
      dest = { glob: this.#valueGlob(cmd, target), shown: target.value ?? undefined };
      into = "yes";
    } else if (sources.length >= 2) {
      const last = sources.pop() as { value: string | undefined; at: number };
      dest = { glob: cmd.globs[last.at], shown: last.value };
      into = given(read, ...copier.noTarget).length > 0 ? "no" : sources.length > 1 || last.value?.endsWith("/") ? "yes" : "maybe";
    } else {
      // `ln -s TARGET`: the link lands in the working directory under the target's name.
      dest = base === "ln" ? { glob: ".", shown: "." } : undefined;
      into = "yes";
    }
    for (const s of sources) {
      const glob = cmd.globs[s.at];
      if (glob === undefined) {
        // A source named at run time lands under a name the policy cannot know: any name, which
        // only a rule taking every name there can refuse (`find … -exec cp {} .git/hooks/ \;`).
        if (dest?.glob === undefined || into === "no") continue;
        const r = this.#writes(cmd, `${dest.glob.replace(/\/+$/, "")}/*`, `${(dest.shown ?? dest.glob).replace(/\/+$/, "")}/…`, recursive);
        if (r) return r;
        continue;
      }
      const r = copier.sources === "read" ? this.#reads(cmd, glob, s.value, recursive) : this.#writes(cmd, glob, s.value, recursive);
      if (r) return r;
      if (dest?.glob === undefined) continue;
      if (into !== "no") {
        const landed = `${dest.glob.replace(/\/+$/, "")}/${posix.basename(glob)}`;
        const r2 = this.#writes(cmd, landed, `${(dest.shown ?? dest.glob).replace(/\/+$/, "")}/${posix.basename(s.value ?? glob)}`, recursive);
        if (r2) return r2;
      }
    }
    if (dest?.glob !== undefined && (into !== "yes" || recursive)) return this.#writes(cmd, dest.glob, dest.shown, recursive);
    return undefined;
  }

  /**
   * What tar reads and writes besides its command options: extracting, the directories of -C and
   * the members named are written (a tree under each -C); creating, they are read as trees, and the
   * archive (-f) is written. What an archive holds is not seen.
   */
  #tar(cmd: SimpleCommand): Refusal | undefined {
    const read = readArgs(cmd.args, PROGRAMS.tar.options);
    const extracting = given(read, "-x", "--extract", "--get").length > 0;
    const creating = given(read, "-c", "--create", "-r", "--append", "-u", "--update", "-A", "--catenate", "--concatenate").length > 0;
    if (!extracting && !creating) return undefined;
    const dirs = given(read, "-C", "--directory");
    for (const o of dirs) {
      const glob = this.#valueGlob(cmd, o);
      const r = extracting ? this.#writes(cmd, glob, o.value ?? undefined, true) : this.#reads(cmd, glob, o.value ?? undefined, true);
      if (r) return r;
    }
    for (const o of given(read, "-f", "--file")) {
      if (!creating) continue;
      const r = this.#writes(cmd, this.#valueGlob(cmd, o), o.value ?? undefined);
      if (r) return r;
    }
    for (const m of read.operands) {
      const glob = cmd.globs[m.at];
      if (glob === undefined) continue;
      for (const at of ["", ...dirs.map((o) => this.#valueGlob(cmd, o)).filter((g): g is string => g !== undefined)]) {
        const g = at === "" ? glob : posix.normalize(`${at}/${glob}`);
        const r = extracting ? this.#writes(cmd, g, m.value, true) : this.#reads(cmd, g, m.value, true);
        if (r) return r;
      }
    }
    return undefined;
  }

  /**
   * An assignment of a variable (a prefix, `export`, `env X=…`, the request's env): refused under an
   * allowlist when it changes what runs (isRestrictedVariable), and, when a program reads it as its
   * own options or command (OPTION_VARIABLES: TAR_OPTIONS, RIPGREP_CONFIG_PATH, RSYNC_RSH…),
   * checked as that program would read it; `value` undefined: computed at run time.
   */
  async #setsVariable(text: string, name: string, value: string | undefined, depth: number): Promise<Refusal | undefined> {
    if (this.#allowlist && isRestrictedVariable(name)) return this.#refuse(text, name, "restricted_variable", `setting ${name} is not allowed under an allowlist: it changes what runs`);
    const reader = OPTION_VARIABLES[name];
    if (reader === undefined) return undefined;
    if (value === undefined || reader.holds === "file") {
      if (!this.#allowlist) return undefined;
      return this.#refuse(text, name, "computed_at_run_time", `${reader.program} reads ${name} as its own ${reader.holds === "command" ? "command" : "options"}, and ${value === undefined ? "its value is computed at run time" : "the file it names is not seen"}, which an allowlist cannot check`);
    }
    if (reader.holds === "command") return this.#checkScript(value, depth + 1);
    // The program reads the value as words ahead of its own arguments, shell-like.
    return this.#checkScript(`${reader.program} ${value}`, depth + 1);
  }

  /**
   * One line alone; a line that closes what an earlier one opened (`… )`, `… }`, `…; done`,
   * `… ); ls`) is unparseable alone, so it is also checked in the pieces around each `)` and `}`.
   * Only a refusal for what a piece runs counts, never one for being unparseable.
   */
  async #checkLine(line: string, depth: number, functions: ReadonlySet<string>, quoted: (i: number) => boolean): Promise<Refusal | undefined> {
    const whole = await this.#checkReading(line, depth, functions);
    if (whole === undefined || (whole.why !== "unparseable" && whole.why !== "too_deep")) return whole;
    if (whole.why === "too_deep") return whole;
    const pieces = [line.replace(TRAILING_CLOSERS, "")];
    for (let i = 0, cuts = 0; i < line.length && cuts < 32; i++) {
      // A `)` or `}` inside a string or heredoc closes nothing.
      if ((line[i] !== ")" && line[i] !== "}") || quoted(i)) continue;
      cuts++;
      pieces.push(line.slice(0, i).replace(TRAILING_CLOSERS, ""), line.slice(i + 1).replace(LEADING_KEYWORDS, ""));
    }
    for (const piece of new Set(pieces)) {
      if (piece.trim() === "") continue;
      const refusal = await this.#checkReading(piece, depth, functions);
      if (refusal !== undefined && refusal.why !== "unparseable") return refusal;
    }
    return undefined;
  }

  /** Whether rules limit git: an allowlist, or a deny rule naming git (`git push`). */
  #limitsGit(): boolean {
    return this.#allowlist || [...this.#serverDeny, ...this.#deny].some((r) => r.program.test("git"));
  }

  /**
   * git, as far as its command line decides what it runs. Wherever rules limit git (an allowlist,
   * or a deny rule for git), configuration that makes git run a command or another subcommand
   * (`-c alias.p=push`, `-c core.fsmonitor=…`, `git config core.hooksPath …`, `clone -c …`) is
   * refused, since what git then runs is decided at run time, and so is taking configuration and
   * hooks from where the file rules do not look (`--template`, `--separate-git-dir`, a `--git-dir`
   * not called `.git`). Under every policy, commands git runs from its command line (`rebase
   * --exec`, `difftool -x`, `grep -O`, `--upload-pack`, `submodule foreach`, `bisect run`…) are
   * checked as the scripts they are; under an allowlist `--exec-path=DIR`, a computed subcommand
   * and a computed argument of a subcommand that takes a command are refused. Long options are
   * read as git reads them, abbreviations included (`--exe`, `--upload-pac`, `--templ`).
   */
  async #git(cmd: SimpleCommand, depth: number): Promise<Refusal | undefined> {
    const a = cmd.args;
    const limited = this.#limitsGit();
    const keys: Array<string | undefined> = [];
    const configRefusal = (): Refusal | undefined => {
      if (!limited) return undefined;
      for (const key of keys) {
        if (key === undefined || RUNS_COMMANDS.test(key)) {
          const shown = key ?? "(computed)";
          return this.#refuse(cmd.text, shown, "computed_at_run_time", `git configuration '${shown}' decides at run time what git runs, which the policy cannot check`);
        }
      }
      return undefined;
    };
    let i = 0;
    for (; i < a.length; i++) {
      const v = a[i];
      if (v === undefined || !v.startsWith("-")) break;
      const eq = v.indexOf("=");
      const name = eq < 0 ? v : v.slice(0, eq);
      const value = eq >= 0 ? v.slice(eq + 1) : GIT_GLOBAL_VALUE.has(v) ? a[++i] : null;
      if (name === "-c" || name === "--config-env") keys.push(value?.split("=")[0]);
      else if (v.startsWith("-c")) keys.push(v.slice(2).split("=")[0]);
      else if (name === "--exec-path" && eq >= 0 && this.#allowlist) {
        return this.#refuse(cmd.text, "--exec-path", "not_in_allowlist", "'git --exec-path=…' runs git's programs from a directory of the caller's choosing");
      } else if (name === "--git-dir" && limited && (typeof value !== "string" || posix.basename(posix.normalize(value)) !== ".git")) {
        return this.#refuse(cmd.text, "--git-dir", "computed_at_run_time", `'git --git-dir' takes the repository's configuration and hooks from ${typeof value === "string" ? `'${value}'` : "a directory computed at run time"}, where the file rules do not look`);
      }
    }
    const sub = a[i];
    if (i >= a.length || sub === undefined) {
      if (i < a.length && this.#allowlist) return this.#refuse(cmd.text, "", "computed_at_run_time", "git's subcommand is computed at run time, and some run commands an allowlist cannot check");
      return configRefusal();
    }
    const rest = a.slice(i + 1);
    if (sub === "submodule" || sub === "bisect") {
      const r = configRefusal();
      if (r) return r;
      // git submodule [--quiet] foreach [--recursive] CMD…; git bisect run CMD…
      const at = rest.findIndex((v) => v === undefined || !v.startsWith("-"));
      if (at < 0 || rest[at] !== (sub === "submodule" ? "foreach" : "run")) return at >= 0 && rest[at] === undefined ? this.#script(undefined, cmd, depth, `git ${sub}'s command`) : undefined;
      const words = rest.slice(at + 1);
      while (words[0]?.startsWith("-")) words.shift();
      return this.#script(words.includes(undefined) ? undefined : words.join(" "), cmd, depth, `git ${sub}'s command`);
    }
    const spec = GIT_SUBCOMMANDS[sub];
    if (spec === undefined) return configRefusal();
    const read = readArgs(rest, spec.options);
    for (const o of given(read, ...(spec.config ?? []))) keys.push(typeof o.value === "string" ? o.value.split("=")[0] : undefined);
    if (sub === "config") {
      // git config [--global|--local|-f FILE…] [set] KEY VALUE: the first operand is the key; none: a listing.
      const operands = read.operands.map((o) => o.value);
      const key = operands[0] !== undefined && GIT_CONFIG_VERBS.has(operands[0]) ? 1 : 0;
      if (key < operands.length) keys.push(operands[key]);
    }
    const r = configRefusal();
    if (r) return r;
    if (limited) {
      for (const o of given(read, ...(spec.elsewhere ?? []))) {
        const option = o.names.find((n) => spec.elsewhere?.includes(n) && n.startsWith("--")) ?? o.names[0];
        const why =
          option === "--template"
            ? `'git ${sub} --template' copies hooks from a directory of the caller's choosing into the new repository, where git runs them`
            : `'git ${sub} ${option}' puts the repository's configuration and hooks in a directory the file rules do not protect`;
        return this.#refuse(cmd.text, option, "computed_at_run_time", why);
      }
    }
    return this.#programOptions(cmd, spec, `git ${sub}`, depth, i + 1, true);
  }

  /** A shell: its -c string, or the script it reads from a literal heredoc; a pipe is computed. */
  async #shell(cmd: SimpleCommand, depth: number): Promise<Refusal | undefined | "not a wrapper"> {
    const a = cmd.args;
    let i = 0;
    let dashC = false;
    while (i < a.length) {
      const v = a[i];
      if (v === undefined || v === "--" || v === "-") break;
      if (!(v.startsWith("-") || v.startsWith("+"))) break;
      if (SHELL_VALUE.has(v)) {
        i += 2;
        continue;
      }
      if (!v.startsWith("--") && v.slice(1).includes("c")) dashC = true;
      i++;
    }
    if (a[i] === "--") i++;
    if (dashC) return this.#script(a[i], cmd, depth, `${cmd.name}'s -c string`);
    if (i < a.length) return "not a wrapper"; // runs a script file: checked as the program itself
    if (cmd.stdin === undefined) return "not a wrapper";
    if (cmd.stdin === "pipe") {
      if (!this.#allowlist) return undefined;
      return this.#refuse(cmd.text, "", "computed_at_run_time", "a shell reading its script from a pipe runs text an allowlist cannot check");
    }
    const r = await this.#checkScript(cmd.stdin.text, depth + 1);
    return r ?? "not a wrapper";
  }
}

/** COMMAND_NOT_ALLOWED for a refusal. */
export function commandNotAllowed(r: Refusal): DomainError {
  return new DomainError("COMMAND_NOT_ALLOWED", r.message, { metadata: { command: r.command, rule: r.rule, why: r.why } });
}


/**
 * What a command reads on stdin, as far as the script says: the text of a heredoc or here-string
 * given to it (or to the statement it ends), "pipe" when a pipe feeds it, else undefined.
 */
function stdinOf(node: Node): { text: string } | "pipe" | undefined {
  const literalIn = (redirect: Node): { text: string } | "pipe" | undefined => {
    if (redirect.type === "heredoc_redirect") return { text: redirect.namedChildren.find((c) => c?.type === "heredoc_body")?.text ?? "" };
    if (redirect.type === "herestring_redirect") {
      const w = redirect.namedChildren.find((c) => c !== null);
      const text = w ? literal(w) : undefined;
      return text === undefined ? "pipe" : { text };
    }
    return undefined;
  };
  for (const c of node.namedChildren) {
    if (c === null) continue;
    const t = literalIn(c);
    if (t !== undefined) return t;
  }
  // Walk up while the command is the last part of what a redirection applies to.
  let at: Node = node;
  for (let parent = node.parent; parent !== null; at = parent, parent = parent.parent) {
    if (parent.type === "pipeline") {
      const parts = parent.namedChildren.filter((c): c is Node => c !== null);
      if (parts[0]?.id !== at.id) return "pipe";
      continue;
    }
    if (parent.type === "redirected_statement") {
      for (const c of parent.namedChildren) {
        if (c === null || c.id === at.id) continue;
        const t = literalIn(c);
        if (t !== undefined) return t;
      }
    }
    break;
  }
  return undefined;
}

/** Compiled policies by their configuration, so that each is compiled once. */
const compiled = new Map<string, CommandPolicy>();

/**
 * The command policy of a workspace: the server's deny list, plus the rules and sensitive-file
 * patterns its agent type had when it was made (none for a workspace made without one).
 */
export function commandPolicyOf(binding: AgentTypeBinding | undefined): CommandPolicy {
  const cfg = binding?.commandPolicy ?? { defaultAction: "", allow: [], deny: [] };
  const files = binding?.sensitiveFiles ?? { deny: [], writeProtected: [] };
  const key = JSON.stringify([cfg.defaultAction, cfg.allow, cfg.deny, files.deny, files.writeProtected]);
  let policy = compiled.get(key);
  if (policy === undefined) {
    if (compiled.size > 512) compiled.clear();
    policy = new CommandPolicy(cfg, files);
    compiled.set(key, policy);
  }
  return policy;
}

/** Reserved words and separators that can open a line without starting a command there. */
const LEADING_KEYWORDS = /^(?:\s*(?:(?:then|else|elif|do|done|fi|esac|in)(?=[\s;&|)]|$)|[{}()]|;;|;|&&|\|\||&|\|))*\s*/;

/** Closers and separators that can end a line without ending a command begun on it. */
const TRAILING_CLOSERS = /(?:\s*(?:[;&|]+|\)|\}|`|;;|(?<=^|[\s;&|])(?:done|fi|esac)))+\s*$/;

