/**
 * Command lines read as the programs read them: short options clustered (`-xzf x.tar`, `-ixCMD`),
 * long options with `=` or the next argument as their value, `--` ending the options, and long
 * options shortened as GNU getopt_long (and argp, and git's parse-options, and Perl's Getopt::Long)
 * accept them: any prefix of a long option that is not the prefix of another (`--to-comm` is tar's
 * `--to-command`, `--split-s` is env's `--split-string`, `--upload-pac` is git's `--upload-pack`).
 *
 * A prefix shared by several long options is ambiguous, and the program refuses it; the policy
 * reads it as every option it could be, so that a table missing some of a program's options can only
 * make the policy refuse more, never less. A word computed at run time where an option could stand
 * is reported, since it could be any option.
 */

/** Whether an option takes a value: never, always (attached or the next argument), or only attached. */
export type Arity = "none" | "required" | "optional";

/** How a program reads its command line. */
export interface OptionGrammar {
  /** Short options as getopt's optstring: a letter, then `:` when it takes a value, `::` when only an attached one. */
  short?: string;
  /** Long options by name (no dashes). */
  long?: Record<string, Arity>;
  /** Long options may be any unambiguous prefix (getopt_long, argp, parse-options, Getopt::Long). */
  abbreviations?: boolean;
  /** Options end at the first operand, which starts a command (getopt's `+`: env, timeout, xargs…). */
  optionsFirst?: boolean;
  /** `-5` is an option (nice -5, head -20). */
  numeric?: boolean;
  /** A first argument without a dash is a cluster of short options (`tar xzf a.tgz`). */
  oldStyle?: boolean;
}

/** One option as given: every name it could be (`-x`, `--to-command`), its value, where they stand. */
export interface GivenOption {
  names: string[];
  /** The value; null when it has none, undefined when it is computed at run time. */
  value: string | null | undefined;
  /** Index of the word holding the option. */
  at: number;
  /** Index of the word holding the value: `at` when attached (`-Cdir`, `--directory=dir`), the next word's otherwise. */
  valueAt?: number;
}

/** A command line read with a grammar. */
export interface ReadArgs {
  options: GivenOption[];
  /** Operands in order, with their indices. */
  operands: Array<{ value: string | undefined; at: number }>;
  /** Index of the first operand (with `optionsFirst`: where the command starts), or the length. */
  firstOperand: number;
  /** Indices of computed words that stand where an option could (they could be any option). */
  computed: number[];
}

/** Parses getopt's optstring into letter → arity. */
function shortTable(optstring: string): Map<string, Arity> {
  const table = new Map<string, Arity>();
  const s = optstring.replace(/^[+-]/, "");
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === ":") continue;
    const arity: Arity = s[i + 1] === ":" ? (s[i + 2] === ":" ? "optional" : "required") : "none";
    table.set(c, arity);
  }
  return table;
}

const shortTables = new WeakMap<OptionGrammar, Map<string, Arity>>();

/** The long options `name` may stand for in `grammar` (itself when exact; none when unknown). */
export function longCandidates(name: string, grammar: OptionGrammar): string[] {
  const long = grammar.long ?? {};
  if (Object.hasOwn(long, name)) return [name];
  if (!grammar.abbreviations || name === "") return [];
  return Object.keys(long).filter((l) => l.startsWith(name));
}

/** Reads `args` (undefined where computed at run time) as `grammar` says. */
export function readArgs(args: ReadonlyArray<string | undefined>, grammar: OptionGrammar): ReadArgs {
  let shorts = shortTables.get(grammar);
  if (shorts === undefined) {
    shorts = shortTable(grammar.short ?? "");
    shortTables.set(grammar, shorts);
  }
  const out: ReadArgs = { options: [], operands: [], firstOperand: args.length, computed: [] };
  const operand = (i: number) => {
    if (out.operands.length === 0) out.firstOperand = i;
    out.operands.push({ value: args[i], at: i });
  };
  let onlyOperands = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (onlyOperands) {
      operand(i);
      continue;
    }
    if (a === undefined) {
      if (grammar.optionsFirst) {
        onlyOperands = true;
      } else out.computed.push(i);
      operand(i);
      continue;
    }
    if (a === "--") {
      onlyOperands = true;
      if (grammar.optionsFirst) out.firstOperand = i + 1;
      continue;
    }
    if (i === 0 && grammar.oldStyle && /^[A-Za-z]+$/.test(a)) {
      // An old-style cluster (`tar cfC x.tgz dir`): each letter that takes a value takes the next argument, in order.
      let next = i + 1;
      for (const letter of a) {
        if (shorts.get(letter) === "required") out.options.push({ names: [`-${letter}`], value: args[next], at: i, valueAt: next++ });
        else out.options.push({ names: [`-${letter}`], value: null, at: i });
      }
      i = next - 1;
      continue;
    }
    if (!a.startsWith("-") || a === "-") {
      if (grammar.optionsFirst) onlyOperands = true;
      operand(i);
      continue;
    }
    if (grammar.numeric && /^-\d+$/.test(a)) {
      out.options.push({ names: [a], value: null, at: i });
      continue;
    }
    if (a.startsWith("--")) {
      const eq = a.indexOf("=");
      const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
      const candidates = longCandidates(name, grammar);
      const arities = candidates.map((c) => (grammar.long ?? {})[c]);
      const names = candidates.length > 0 ? candidates.map((c) => `--${c}`) : [`--${name}`];
      if (eq >= 0) out.options.push({ names, value: a.slice(eq + 1), at: i, valueAt: i });
      else if (arities.includes("required")) {
        out.options.push({ names, value: args[i + 1], at: i, valueAt: i + 1 });
        i++;
      } else out.options.push({ names, value: null, at: i });
      continue;
    }
    // A cluster: letters up to the first that takes a value, which takes the rest of the cluster, or the next argument.
    for (let k = 1; k < a.length; k++) {
      const letter = a[k];
      const arity = shorts.get(letter) ?? "none";
      if (arity === "none") {
        out.options.push({ names: [`-${letter}`], value: null, at: i });
        continue;
      }
      const rest = a.slice(k + 1);
      if (rest !== "") out.options.push({ names: [`-${letter}`], value: rest, at: i, valueAt: i });
      else if (arity === "required") {
        out.options.push({ names: [`-${letter}`], value: args[i + 1], at: i, valueAt: i + 1 });
        i++;
      } else out.options.push({ names: [`-${letter}`], value: null, at: i });
      break;
    }
  }
  return out;
}

/** The given options that may be one of `names` (`-x`, `--exec`). */
export function given(read: ReadArgs, ...names: string[]): GivenOption[] {
  return read.options.filter((o) => o.names.some((n) => names.includes(n)));
}
