/**
 * The rule language of the command policy: a rule is a program and argument patterns, and the
 * server's own deny list is written in it. A deny rule matches when its patterns occur, in order,
 * among the arguments (so `git push` catches `git -C . push`); an allow rule when they are the
 * first arguments (`npm test` allows `npm test -- --watch`, not `npm install test`). A short-option
 * bundle in a pattern (`-rf`) matches the arguments' short options in any spelling (`-r -f`, `-fr`).
 */
import { posix } from "node:path";

/**
 * The server's deny list: commands that destroy the machine or leave the sandbox. Always
 * applied; an agent type adds to it and can never remove from it.
 */
export const DEFAULT_DENY_RULES: readonly string[] = [
  // Privilege.
  "sudo",
  "su",
  "doas",
  "pkexec",
  // Mounts, namespaces, kernel.
  "mount",
  "umount",
  "chroot",
  "pivot_root",
  "unshare",
  "nsenter",
  "capsh",
  "setcap",
  "insmod",
  "rmmod",
  "modprobe",
  "kexec",
  "sysctl -w",
  // Disks and filesystems.
  "mkfs",
  "mkfs.*",
  "mke2fs",
  "mkswap",
  "swapon",
  "swapoff",
  "fdisk",
  "sfdisk",
  "parted",
  "wipefs",
  "dd of=/dev/*",
  // Power.
  "shutdown",
  "reboot",
  "halt",
  "poweroff",
  "telinit",
  "init",
  "systemctl poweroff",
  "systemctl reboot",
  "systemctl halt",
  // Deleting or opening up everything.
  "rm --no-preserve-root",
  "rm /",
  "rm /\\*",
  "rm ~",
  "rm ~/",
  "rm ~/\\*",
  "chmod /",
  "chown /",
  "chgrp /",
  "find / -delete",
  // Signalling every process.
  "kill -1",
  "killall5",
];

/** One argument pattern of a rule. */
type ArgPattern = { kind: "glob"; re: RegExp; text: string } | { kind: "bundle"; letters: string };

/** A compiled rule. */
export interface Rule {
  text: string;
  program: RegExp;
  /** True when the program pattern names a path (compared with the whole normalised name). */
  byPath: boolean;
  args: ArgPattern[];
}

/** A glob (`*`, `?`, `\*` for a literal star) as an anchored regular expression. */
function globRe(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "\\" && i + 1 < glob.length) re += glob[++i].replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
    else if (c === "*") re += ".*";
    else if (c === "?") re += ".";
    else re += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  }
  return new RegExp(`^${re}$`, "su");
}

/** Splits a rule into words and checks its shape; returns a message for a bad rule. */
export function ruleProblem(rule: string): string | undefined {
  const words = rule.trim().split(/\s+/);
  if (rule.trim() === "") return "is empty";
  if (rule.length > 200) return "is longer than 200 characters";
  if (/[\u0000-\u001f]/.test(rule)) return "holds a control character";
  if (words[0].startsWith("-")) return "must start with a program name, not an option";
  return undefined;
}

/**
 * A program named by path, normalised: `.`, `..` and doubled slashes go, and a name left without a
 * slash keeps its `./` (`./git` is a file in the working directory, never the `git` of PATH).
 */
export function programPath(name: string): string {
  const n = posix.normalize(name);
  return n.includes("/") ? n : `./${n}`;
}

export function compileRule(text: string): Rule {
  const [program, ...args] = text.trim().split(/\s+/);
  return {
    text: text.trim(),
    program: globRe(program.includes("/") ? programPath(program) : program),
    byPath: program.includes("/"),
    args: args.map((a): ArgPattern => (/^-[A-Za-z]{2,}$/.test(a) ? { kind: "bundle", letters: a.slice(1) } : { kind: "glob", re: globRe(a), text: a })),
  };
}

/** The normalised form of an argument for matching: paths from the root lose `.`, `..` and doubled slashes. */
function normaliseArg(arg: string): string {
  const eq = /^-{0,2}[A-Za-z0-9_.-]+=\//.test(arg) ? arg.indexOf("=") + 1 : 0;
  const path = arg.slice(eq);
  if (!path.startsWith("/")) return arg;
  const n = posix.normalize(path);
  return arg.slice(0, eq) + (n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n);
}

/** Short options of the arguments before `--` (`-rf` and `-r -f` both give r and f). */
function shortOptions(args: Array<string | undefined>): Set<string> {
  const letters = new Set<string>();
  for (const a of args) {
    if (a === "--") break;
    if (a !== undefined && /^-[A-Za-z]+$/.test(a)) for (const l of a.slice(1)) letters.add(l);
  }
  return letters;
}

function argMatches(p: ArgPattern, arg: string | undefined): boolean {
  if (arg === undefined) return false;
  if (p.kind === "glob") return p.re.test(arg) || p.re.test(normaliseArg(arg));
  return arg === `-${p.letters}`;
}

/**
 * Whether a deny rule matches: program, then its patterns in order anywhere among the arguments.
 * For a program with subcommands (`subcommand`: the index of the subcommand among the arguments,
 * after the program's own options), a rule whose first pattern is a word names the subcommand: `git
 * push` matches `git -C . push` but not `git stash push` or `git commit -m push`.
 */
export function denyMatches(rule: Rule, name: string, base: string, args: Array<string | undefined>, subcommand?: number): boolean {
  if (!rule.program.test(rule.byPath ? name : base)) return false;
  let at = 0;
  const letters = shortOptions(args);
  const first = rule.args[0];
  if (subcommand !== undefined && first?.kind === "glob" && !first.text.startsWith("-")) {
    if (subcommand < 0 || !argMatches(first, args[subcommand])) return false;
    at = subcommand + 1;
  }
  for (const p of rule.args.slice(at === 0 ? 0 : 1)) {
    if (p.kind === "bundle" && [...p.letters].every((l) => letters.has(l))) continue;
    while (at < args.length && !argMatches(p, args[at])) at++;
    if (at >= args.length) return false;
    at++;
  }
  return true;
}

/** Whether an allow rule matches: program, then its patterns as the first arguments. */
export function allowMatches(rule: Rule, name: string, base: string, args: Array<string | undefined>): boolean {
  if (!rule.program.test(rule.byPath ? name : base)) return false;
  return rule.args.every((p, i) => argMatches(p, args[i]));
}
