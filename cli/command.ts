/**
 * The shape every command of the command line has: its usage line, what it does, its options (in
 * `node:util` parseArgs form) and how many positional arguments it takes, and a `run` that gets the
 * parsed arguments and a context and returns the exit status. Global options (`--server`,
 * `--protocol`, `--json`, `--help`) are accepted by every command, anywhere on the line.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import type { AgentWorkspace } from "@agent-workspace/client";
import { type Io, UsageError } from "./output.ts";

/** What a command runs with. */
export interface Context {
  io: Io;
  env: NodeJS.ProcessEnv;
  /** `--json`: print JSON for scripts instead of text for people. */
  json: boolean;
  /** The server's client, made on first use. */
  aw: () => AgentWorkspace;
  /** The server's URL, for messages. */
  url: string;
  /** Aborted on the first Ctrl-C (SIGINT) or SIGTERM; a command stops its call and exits. */
  signal: AbortSignal;
}

type Options = NonNullable<ParseArgsConfig["options"]>;

/** Values of parsed options: strings, booleans and string lists. */
export type Values = Record<string, string | boolean | string[] | undefined>;

/** One command. */
export interface Command {
  /** The words after `agent-workspace` and the arguments, for usage text ("ws show WS"). */
  usage: string;
  /** One line: what it does. */
  summary: string;
  /** Its own options. */
  options?: Options;
  /** Option descriptions for --help, by option name. */
  help?: Record<string, string>;
  /** Positional arguments: at least `min`, at most `max` (Infinity for a list). */
  positionals: [min: number, max: number];
  /** Whether arguments after `--` are taken verbatim (exec's command). */
  rest?: boolean;
  run(ctx: Context, args: { values: Values; positionals: string[]; rest: string[] }): Promise<number>;
}

/** The options every command accepts. */
export const GLOBAL_OPTIONS = {
  server: { type: "string" },
  protocol: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const satisfies Options;

export const GLOBAL_HELP: Record<string, string> = {
  server: "server URL (default: $AGENT_WORKSPACE_URL, else http://127.0.0.1:8080)",
  protocol: "connect (default), grpc or grpc-web",
  json: "print JSON for scripts",
};

/** Parses a command's arguments; unknown options and a wrong number of arguments are usage errors. */
export function parse(command: Command, argv: string[]): { values: Values; positionals: string[]; rest: string[] } {
  let args = argv;
  let rest: string[] = [];
  if (command.rest) {
    const at = argv.indexOf("--");
    if (at >= 0) {
      args = argv.slice(0, at);
      rest = argv.slice(at + 1);
    }
  }
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args, options: { ...GLOBAL_OPTIONS, ...command.options }, allowPositionals: true, strict: true }) as { values: Values; positionals: string[] };
  } catch (err) {
    throw new UsageError(`${command.usage}: ${(err as Error).message.replace(/\. To specify a positional argument.*$/s, "")}`);
  }
  if (parsed.values.help) return { ...parsed, rest };
  const [min, max] = command.positionals;
  if (parsed.positionals.length < min) throw new UsageError(`usage: agent-workspace ${command.usage}`);
  if (parsed.positionals.length > max) throw new UsageError(`${command.usage}: unexpected argument '${parsed.positionals[max]}'`);
  return { ...parsed, rest };
}

/** The help text of one command. */
export function commandHelp(command: Command): string {
  const lines = [`usage: agent-workspace ${command.usage}`, "", command.summary, ""];
  const all = { ...command.help, ...GLOBAL_HELP };
  const options = { ...command.options, ...GLOBAL_OPTIONS } as Options;
  for (const [name, text] of Object.entries(all)) {
    const o = options[name];
    if (!o) continue;
    const flag = `${o.short ? `-${o.short}, ` : "    "}--${name}${o.type === "string" ? ` ${name.toUpperCase().replace(/-/g, "_")}` : ""}`;
    lines.push(`  ${flag.padEnd(30)} ${text}`);
  }
  return `${lines.join("\n")}\n`;
}

/** A string option's value ("" when absent). */
export function str(values: Values, name: string): string {
  const v = values[name];
  return typeof v === "string" ? v : "";
}

/** A non-negative integer option (undefined when absent); anything else is a usage error. */
export function int(values: Values, name: string): number | undefined {
  const v = str(values, name);
  if (v === "") return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError(`--${name} ${v}: expected a whole number`);
  return Number(v);
}

/** `key=value` options (repeatable) as a record; a value without `=` is a usage error. */
export function pairs(values: Values, name: string): Record<string, string> {
  const out: Record<string, string> = {};
  const v = values[name];
  for (const item of Array.isArray(v) ? v : typeof v === "string" ? [v] : []) {
    const at = item.indexOf("=");
    if (at <= 0) throw new UsageError(`--${name} ${item}: expected key=value`);
    out[item.slice(0, at)] = item.slice(at + 1);
  }
  return out;
}

/** A duration like `90s`, `15m`, `2h`, `1d` (or plain milliseconds) in milliseconds. */
export function duration(text: string, name: string): number {
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(text);
  if (!m) throw new UsageError(`--${name} ${text}: expected a duration such as 500ms, 30s, 15m, 2h or 1d`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] ?? "ms"] ?? 1;
  return Number(m[1]) * unit;
}
