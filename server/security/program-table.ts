/**
 * What the command policy knows about programs, as data: which builtins run nothing, which
 * programs only read the files they name, which options take a value, which options and
 * configuration keys make a program run a command of the caller's choosing, and which variables
 * change what runs. The walker (command-policy.ts) reads these tables; a program's behaviour is
 * one entry here, never a branch there.
 */
import type { Arity, OptionGrammar } from "./options.ts";

/** Names that change what later commands run; refused as assignments under an allowlist. */
const RESTRICTED_VARIABLES = [
  /^PATH$/,
  /^LD_/,
  /^DYLD_/,
  /^BASH_ENV$/,
  /^ENV$/,
  /^BASH_FUNC_/,
  /^SHELLOPTS$/,
  /^BASHOPTS$/,
  /^PS4$/,
  /^PROMPT_COMMAND$/,
  /^IFS$/,
  /^CDPATH$/,
  /^GLOBIGNORE$/,
  /^GIT_/,
  /^GCONV_PATH$/,
  /^HOME$/,
  // Read as the working directory by the file checks (shell-parser.ts).
  /^PWD$/,
  /^OLDPWD$/,
  /^XDG_CONFIG_HOME$/,
  /^NODE_OPTIONS$/,
  /^PYTHONPATH$/,
  /^PYTHONSTARTUP$/,
  /^PYTHONHOME$/,
  /^PERL5OPT$/,
  /^PERL5LIB$/,
  /^PERLLIB$/,
  /^RUBYOPT$/,
  /^RUBYLIB$/,
  /^JAVA_TOOL_OPTIONS$/,
  /^_JAVA_OPTIONS$/,
  /^NPM_CONFIG_/i,
  /^EDITOR$/,
  /^VISUAL$/,
  /^PAGER$/,
  /^MANPAGER$/,
  /^LESSOPEN$/,
  /^LESSCLOSE$/,
  /^SSH_ASKPASS$/,
];

/** True when assigning `name` can change what runs. */
export function isRestrictedVariable(name: string): boolean {
  return RESTRICTED_VARIABLES.some((re) => re.test(name));
}

/** Builtins that run nothing by themselves; allowed under every allowlist (their arguments are still checked). */
export const SAFE_BUILTINS = new Set([
  "cd", "echo", "printf", "true", "false", "test", "[", "pwd", "export", "set", "unset", "shift", "local", "declare", "typeset",
  "readonly", "read", "return", "exit", "wait", ":", "break", "continue", "let", "type", "hash", "umask", "ulimit", "shopt", "alias",
  "unalias", "trap", "getopts", "mapfile", "readarray", "dirs", "pushd", "popd", "jobs", "times",
]);

/** Programs whose arguments are text or names, not files they open: exempt from the sensitive-file check. */
export const NON_READERS = new Set(["echo", "printf", "test", "[", "ls", "find", "cd", "pushd", "popd", "type", "which", "basename", "dirname", "mkdir", "touch", "command", "hash", "alias", "export", "declare", "local", "typeset", "readonly", "unset", "read"]);

/** Programs that read a file's content from a `REV:PATH` word (`git show HEAD:.env`): the path is judged as a read. */
export const REVISION_PATHS = new Set(["git"]);

/** Programs that only read their file arguments: may name write-protected files. */
export const READERS = new Set(["cat", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "diff", "cmp", "wc", "file", "stat", "md5sum", "sha1sum", "sha256sum", "od", "xxd", "hexdump", "strings", "nl", "sort", "uniq", "git"]);

/** Shells whose `-c` string (or literal stdin) is a script to check. */
export const SHELLS = new Set(["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash"]);

/** Directories a program named by path may come from under an allowlist without a rule naming that path. */
export const SYSTEM_DIRS = new Set(["/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"]);

export const set = (...xs: string[]) => new Set(xs);
/** Options of a shell that take the next argument. */
export const SHELL_VALUE = set("-o", "+o", "-O", "+O", "--rcfile", "--init-file");
/** Option letters of mapfile/readarray that take a value (C: the callback). */
export const MAPFILE_VALUE = "dnOsucC";

// ── Option grammars: how each program reads its command line (options.ts) ─────────────────────

/** A GNU-style grammar: long options abbreviate, options may follow operands. */
const gnu = (short: string, long: Record<string, Arity>, extra: Partial<OptionGrammar> = {}): OptionGrammar => ({ short, long, abbreviations: true, ...extra });
/** A wrapper's grammar: options end at the first operand, where the command starts. */
const wrapper = (short: string, long: Record<string, Arity> = {}, extra: Partial<OptionGrammar> = {}): OptionGrammar => gnu(short, { help: "none", version: "none", ...long }, { optionsFirst: true, ...extra });

/** A program that runs the command its operands name (`timeout 60 npm test` runs `npm test`). */
export interface Wrapper {
  options: OptionGrammar;
  /** Operands before the command (timeout's duration, taskset's mask). */
  skip?: number;
  /** Options with which it runs no command (`command -v`, `taskset -p`). */
  noCommand?: string[];
}

/** The wrappers whose command is their operands, checked in their place. */
export const WRAPPERS: Record<string, Wrapper> = {
  timeout: { options: wrapper("+fk:ps:v", { foreground: "none", "kill-after": "required", "preserve-status": "none", signal: "required", verbose: "none" }), skip: 1 },
  nice: { options: wrapper("+n:", { adjustment: "required" }, { numeric: true }) },
  nohup: { options: wrapper("+") },
  setsid: { options: wrapper("+cfw", { ctty: "none", fork: "none", wait: "none" }) },
  builtin: { options: { optionsFirst: true } },
  command: { options: { short: "+pvV", optionsFirst: true }, noCommand: ["-v", "-V"] },
  exec: { options: { short: "+cla:", optionsFirst: true } },
  time: { options: wrapper("+agqvf:o:pV", { append: "none", format: "required", output: "required", portability: "none", verbose: "none", quiet: "none" }) },
  stdbuf: { options: wrapper("+i:o:e:", { input: "required", output: "required", error: "required" }) },
  ionice: {
    options: wrapper("+c:n:p:P:u:tVh", { class: "required", classdata: "required", pid: "required", pgid: "required", uid: "required", ignore: "none" }),
    noCommand: ["-p", "-P", "-u", "--pid", "--pgid", "--uid"],
  },
  taskset: { options: wrapper("+acphV", { "all-tasks": "none", pid: "none", "cpu-list": "none" }), skip: 1, noCommand: ["-p", "--pid"] },
  coproc: { options: { optionsFirst: true } },
  busybox: { options: { optionsFirst: true } },
  toybox: { options: { optionsFirst: true } },
};

/** env: options, then NAME=VALUE assignments, then the command; -S/--split-string is a command line. */
export const ENV_OPTIONS = wrapper("+a:C:iS:u:v0", {
  "ignore-environment": "none", null: "none", unset: "required", chdir: "required", "split-string": "required", "block-signal": "optional",
  "default-signal": "optional", "ignore-signal": "optional", "list-signal-handling": "none", debug: "none", argv0: "required",
});
/** flock [options] FILE (-c COMMAND | COMMAND…): util-linux reads -c/--command after the file. */
export const FLOCK_OPTIONS = wrapper("+sexnoFuw:E:hV", {
  shared: "none", exclusive: "none", unlock: "none", nonblock: "none", nb: "none", timeout: "required", wait: "required",
  "conflict-exit-code": "required", close: "none", "no-fork": "none", verbose: "none",
});
/** watch [options] COMMAND…: the operands joined are a shell command line, unless -x/--exec. */
export const WATCH_OPTIONS = wrapper("+bCcd::eghn:pq:rtvwx", {
  beep: "none", color: "none", "no-color": "none", differences: "optional", errexit: "none", chgexit: "none", interval: "required", precise: "none",
  equexit: "required", "no-rerun": "none", "no-title": "none", "no-wrap": "none", "no-linewrap": "none", exec: "none",
});
/** xargs [options] [COMMAND…]: -I/-i/--replace make a placeholder that stands for input. */
export const XARGS_OPTIONS = wrapper("+0a:E:e::i::I:l::L:n:prs:txP:d:o", {
  null: "none", "arg-file": "required", delimiter: "required", eof: "optional", replace: "optional", "max-lines": "optional", "max-args": "required",
  "open-tty": "none", "max-procs": "required", interactive: "none", "max-chars": "required", verbose: "none", "show-limits": "none", exit: "none",
  "no-run-if-empty": "none", "process-slot-var": "required",
});

/**
 * What a program does with some of its options and operands, as the policy needs to know it: the
 * options whose value is a command it runs (checked as that script, wrapper-transparent: `tar -I gzip`
 * needs gzip allowed), the files and directories options and operands make it write, and the files of
 * its own options it reads (content the policy cannot see: computed, so refused under an allowlist).
 */
export interface ProgramEntry {
  options: OptionGrammar;
  /** Options whose value is a command: `true`, or how to take the command out of the value (null when it names none). */
  commands?: Record<string, true | ((value: string) => string | null)>;
  /** Options whose value is a file the program writes. */
  writes?: string[];
  /** Options whose value is a directory the program writes a tree into. */
  writesTree?: string[];
  /** Options whose value is a file of the program's own options (or commands), except the values in `harmless`. */
  optionFiles?: string[];
  /** Operands, by position, that are files the program writes (`uniq IN OUT`). */
  writtenOperands?: number[];
  /** Options that make every operand a tree the program changes (`rm -r`, `chmod -R`). */
  treeOperands?: string[];
  /** Options that make every operand a tree the program reads (`grep -r`, `zip -r`), or "always" (rg). */
  readsTrees?: string[] | "always";
  /** The first operand is a pattern, not a file, unless one of these options gives the pattern (`grep -e`). */
  pattern?: string[];
  /** Options whose value is the directory the program runs in (`env -C`, `git -C`). */
  chdir?: string[];
  /** Whole words read as a long option (zip's two-letter `-TT` is `--unzip-command`). */
  aliases?: Record<string, string>;
}

/** Values of an option file that name no file of options (`ssh -F /dev/null`). */
export const HARMLESS_OPTION_FILES = set("/dev/null", "none", "-");

/** ssh's `-o Name=Value` (or `-o 'Name Value'`) for the options that run a command locally. */
const sshCommand = (v: string) => /^(proxycommand|localcommand|knownhostscommand)\s*[= ]\s*(.*)$/is.exec(v)?.[2] ?? null;
const SSH_SHORT = "46AaCfGgKkMNnqsTtVvXxYyB:b:c:D:E:e:F:I:i:J:L:l:m:O:o:P:p:Q:R:S:W:w:";

export const PROGRAMS: Record<string, ProgramEntry> = {
  tar: {
    options: gnu(
      "Ab:BcC:df:F:g:GhH:iI:jJkK:lL:mMnN:oOpPrRsStT:uUvV:wWxX:zZ",
      {
        "to-command": "required", "to-stdout": "none", "use-compress-program": "required", "info-script": "required", "new-volume-script": "required",
        "rsh-command": "required", "rmt-command": "required", "checkpoint-action": "required", checkpoint: "optional", directory: "required", file: "required",
        "files-from": "required", exclude: "required", "exclude-from": "required", "exclude-vcs": "none", "exclude-caches": "none", "exclude-tag": "required",
        extract: "none", get: "none", create: "none", list: "none", append: "none", update: "none", catenate: "none", concatenate: "none", delete: "none",
        diff: "none", compare: "none", gzip: "none", gunzip: "none", ungzip: "none", bzip2: "none", xz: "none", zstd: "none", lzma: "none", lzip: "none",
        lzop: "none", compress: "none", uncompress: "none", "auto-compress": "none", verbose: "none", transform: "required", xform: "required",
        "strip-components": "required", "one-top-level": "optional", "same-owner": "none", "no-same-owner": "none", "same-permissions": "none",
        "preserve-permissions": "none", "keep-old-files": "none", "keep-newer-files": "none", overwrite: "none", "overwrite-dir": "none",
        "remove-files": "none", "skip-old-files": "none", "unlink-first": "none", "recursive-unlink": "none", "absolute-names": "none",
        dereference: "none", "hard-dereference": "none", owner: "required", group: "required", mode: "required", mtime: "required", sort: "required",
        format: "required", "listed-incremental": "required", incremental: "none", label: "required", "tape-length": "required", "multi-volume": "none",
        "blocking-factor": "required", "record-size": "required", "index-file": "required", totals: "optional", wildcards: "none", "no-wildcards": "none",
        null: "none", warning: "required", "numeric-owner": "none", "atime-preserve": "optional", touch: "none", suffix: "required", backup: "optional",
        "volno-file": "required", newer: "required", "newer-mtime": "required", "after-date": "required", "starting-file": "required", verify: "none",
        "pax-option": "required", acls: "none", xattrs: "none", selinux: "none", sparse: "none", "force-local": "none", "quoting-style": "required",
        utc: "none", "ignore-zeros": "none", "ignore-failed-read": "none", "no-recursion": "none", recursion: "none", interactive: "none",
        "keep-directory-symlink": "none", "show-transformed-names": "none", "delay-directory-restore": "none", "full-time": "none", "add-file": "required",
      },
      { oldStyle: true },
    ),
    commands: {
      "--to-command": true, "--use-compress-program": true, "-I": true, "--info-script": true, "--new-volume-script": true, "-F": true, "--rsh-command": true,
      "--rmt-command": true, "--checkpoint-action": (v) => (/^exec[=:]/.test(v) ? v.slice(5) : null),
    },
    writes: ["--index-file", "--volno-file", "-g", "--listed-incremental"],
  },
  sort: {
    options: gnu("bcCdfghik:mMno:rsS:t:T:uVyz", {
      "compress-program": "required", output: "required", "files0-from": "required", key: "required", "field-separator": "required",
      "temporary-directory": "required", "buffer-size": "required", "batch-size": "required", parallel: "required", "random-source": "required",
      sort: "required", check: "optional", debug: "none", "general-numeric-sort": "none", "human-numeric-sort": "none", "ignore-case": "none",
      "ignore-leading-blanks": "none", "ignore-nonprinting": "none", merge: "none", "month-sort": "none", "numeric-sort": "none", random: "none",
      "random-sort": "none", reverse: "none", stable: "none", unique: "none", "version-sort": "none", "zero-terminated": "none", "dictionary-order": "none",
    }),
    commands: { "--compress-program": true },
    writes: ["-o", "--output"],
  },
  rsync: {
    options: gnu("B:e:f:M:T:", {
      rsh: "required", "rsync-path": "required", "remote-option": "required", filter: "required", exclude: "required", include: "required",
      "exclude-from": "required", "include-from": "required", "files-from": "required", "temp-dir": "required", "log-file": "required",
      "log-file-format": "required", "write-batch": "required", "only-write-batch": "required", "read-batch": "required", "password-file": "required",
      "out-format": "required", "partial-dir": "required", "backup-dir": "required", "compare-dest": "required", "copy-dest": "required",
      "link-dest": "required", chmod: "required", chown: "required", timeout: "required", port: "required", "block-size": "required",
      "max-size": "required", "min-size": "required", bwlimit: "required", suffix: "required", info: "required", debug: "required",
    }),
    commands: { "-e": true, "--rsh": true, "--rsync-path": true },
    writes: ["--log-file", "--write-batch", "--only-write-batch"],
  },
  zip: {
    options: gnu("b:n:t:P:O:", { "unzip-command": "required", "temp-path": "required", "output-file": "required", password: "required", suffixes: "required", "recurse-paths": "none" }),
    readsTrees: ["-r", "--recurse-paths"],
    commands: { "--unzip-command": true },
    writes: ["-O", "--output-file"],
    aliases: { "-TT": "--unzip-command" },
  },
  unzip: { options: gnu("d:", {}), writesTree: ["-d"] },
  man: {
    options: gnu("C:H::P:p:M:m:S:e:L:R:r:E:T::X::", {
      "config-file": "required", pager: "required", html: "optional", preprocessor: "required", manpath: "required", systems: "required",
      sections: "required", extension: "required", locale: "required", recode: "required", prompt: "required", encoding: "required",
      troff: "none", "troff-device": "optional", gxditview: "optional",
    }),
    commands: { "-P": true, "--pager": true, "-H": true, "--html": true },
    optionFiles: ["-C", "--config-file"],
  },
  // ripgrep's preprocessor runs on every file it searches; ripgrep takes long options whole.
  rg: {
    options: { short: "A:B:C:d:e:E:f:g:j:m:M:r:t:T:", long: { pre: "required", "pre-glob": "required", "no-config": "none", regexp: "required", file: "required", glob: "required", type: "required", replace: "required" } },
    commands: { "--pre": true },
    readsTrees: "always",
    pattern: ["-e", "--regexp", "-f", "--file"],
  },
  grep: {
    options: gnu("A:B:C:D:d:e:f:m:", {
      "after-context": "required", "before-context": "required", context: "required", devices: "required", directories: "required", regexp: "required",
      file: "required", "max-count": "required", include: "required", exclude: "required", "exclude-dir": "required", "exclude-from": "required",
      label: "required", color: "optional", colour: "optional", recursive: "none", "dereference-recursive": "none", "line-number": "none",
      "ignore-case": "none", "files-with-matches": "none", count: "none", "only-matching": "none", quiet: "none", silent: "none",
      "extended-regexp": "none", "fixed-strings": "none", "perl-regexp": "none", "invert-match": "none", "word-regexp": "none", "line-regexp": "none",
    }),
    readsTrees: ["-r", "-R", "--recursive", "--dereference-recursive"],
    pattern: ["-e", "--regexp", "-f", "--file"],
  },
  ssh: { options: { short: SSH_SHORT }, commands: { "-o": sshCommand }, optionFiles: ["-F"] },
  scp: { options: { short: "346ABCOpqRrsTvc:D:F:i:J:l:o:P:S:X:" }, commands: { "-o": sshCommand, "-S": true }, optionFiles: ["-F"] },
  sftp: { options: { short: "46AaCfNpqrvB:b:c:D:F:i:J:l:o:P:R:S:s:X:" }, commands: { "-o": sshCommand, "-S": true, "-D": true }, optionFiles: ["-F", "-b"] },
  less: {
    options: gnu("b:h:j:k:o:O:p:P:T:x:y:z:", { "log-file": "required", "LOG-FILE": "required", "lesskey-file": "required", pattern: "required", prompt: "required", tag: "required" }),
    writes: ["-o", "-O", "--log-file", "--LOG-FILE"],
    optionFiles: ["-k", "--lesskey-file"],
  },
  curl: { options: gnu("K:o:", { config: "required", output: "required", "output-dir": "required" }), optionFiles: ["-K", "--config"], writesTree: ["--output-dir"] },
  wget: {
    options: gnu("e:O:P:", { "use-askpass": "required", config: "required", execute: "required", "directory-prefix": "required", "output-document": "required" }),
    commands: { "--use-askpass": true },
    optionFiles: ["--config"],
    writesTree: ["-P", "--directory-prefix"],
  },
  uniq: { options: gnu("f:s:w:", { "skip-fields": "required", "skip-chars": "required", "check-chars": "required", group: "optional", "all-repeated": "optional" }), writtenOperands: [1] },
  xxd: { options: { short: "c:g:l:o:s:n:C" }, writtenOperands: [1] },
  rm: { options: gnu("dfirRvI", { recursive: "none", force: "none", dir: "none", interactive: "optional", verbose: "none", "one-file-system": "none", "preserve-root": "optional", "no-preserve-root": "none" }), treeOperands: ["-r", "-R", "--recursive"] },
  chmod: { options: gnu("cfvR", { recursive: "none", changes: "none", silent: "none", quiet: "none", verbose: "none", reference: "required", "preserve-root": "none" }), treeOperands: ["-R", "--recursive"] },
  chown: { options: gnu("cfhvRHLP", { recursive: "none", changes: "none", silent: "none", quiet: "none", verbose: "none", reference: "required", from: "required", dereference: "none", "no-dereference": "none" }), treeOperands: ["-R", "--recursive"] },
};

/**
 * Variables a program reads as its own command line, or as the file of it, or as a command it runs:
 * an assignment anywhere in the script (a prefix, `export`, `env X=…`, the request's `env`) is
 * checked as that program would read it. A value computed at run time, or a file, is refused under
 * an allowlist: the policy cannot see what it holds.
 */
export const OPTION_VARIABLES: Record<string, { program: string; holds: "options" | "file" | "command" }> = {
  TAR_OPTIONS: { program: "tar", holds: "options" },
  ZIPOPT: { program: "zip", holds: "options" },
  UNZIP: { program: "unzip", holds: "options" },
  UNZIPOPT: { program: "unzip", holds: "options" },
  MANOPT: { program: "man", holds: "options" },
  LESS: { program: "less", holds: "options" },
  RIPGREP_CONFIG_PATH: { program: "rg", holds: "file" },
  CURL_HOME: { program: "curl", holds: "file" },
  WGETRC: { program: "wget", holds: "file" },
  RSYNC_RSH: { program: "rsync", holds: "command" },
  RSYNC_CONNECT_PROG: { program: "rsync", holds: "command" },
  BROWSER: { program: "man", holds: "command" },
};

/**
 * Programs that copy, move or link their operands to a destination: `-t DIR`, or the last operand,
 * which is a directory when there are several sources or it ends in `/` and may be one otherwise
 * (then each source lands in it under its own name). A destination tree is judged as a tree (see
 * path-patterns.ts) when the sources may be directories.
 */
export interface Copier {
  options: OptionGrammar;
  /** Options naming the destination directory. */
  target: string[];
  /** Options saying the destination is the target itself, never a directory to land in. */
  noTarget: string[];
  /** Options making a copy recursive; "always" when sources may always be directories (mv, rsync). */
  recursive: string[] | "always";
  /** What happens to the sources: read (cp), moved away (mv: written), or given a new name (ln: written, as a way into them). */
  sources: "read" | "write";
}

export const COPIERS: Record<string, Copier> = {
  cp: {
    options: gnu("abdfHiklLnPprRsS:t:TuvxZ", {
      archive: "none", backup: "optional", "copy-contents": "none", force: "none", interactive: "none", link: "none", dereference: "none",
      "no-clobber": "none", "no-dereference": "none", preserve: "optional", "no-preserve": "required", parents: "none", recursive: "none",
      "reflink": "optional", "remove-destination": "none", sparse: "required", "strip-trailing-slashes": "none", "symbolic-link": "none",
      suffix: "required", "target-directory": "required", "no-target-directory": "none", update: "optional", verbose: "none", "one-file-system": "none",
      context: "optional", "attributes-only": "none", debug: "none", "keep-directory-symlink": "none",
    }),
    target: ["-t", "--target-directory"],
    noTarget: ["-T", "--no-target-directory"],
    recursive: ["-r", "-R", "-a", "--recursive", "--archive"],
    sources: "read",
  },
  mv: {
    options: gnu("bfinS:t:TuvZ", {
      backup: "optional", force: "none", interactive: "none", "no-clobber": "none", "no-copy": "none", "strip-trailing-slashes": "none",
      suffix: "required", "target-directory": "required", "no-target-directory": "none", update: "optional", verbose: "none", context: "none",
      exchange: "none", debug: "none",
    }),
    target: ["-t", "--target-directory"],
    noTarget: ["-T", "--no-target-directory"],
    recursive: "always",
    sources: "write",
  },
  ln: {
    options: gnu("bdfFinLPrsS:t:Tv", {
      backup: "optional", directory: "none", force: "none", interactive: "none", logical: "none", "no-dereference": "none", physical: "none",
      relative: "none", symbolic: "none", suffix: "required", "target-directory": "required", "no-target-directory": "none", verbose: "none",
    }),
    target: ["-t", "--target-directory"],
    noTarget: ["-T", "--no-target-directory"],
    recursive: "always",
    sources: "write",
  },
  install: {
    options: gnu("bcCdDg:m:o:pPsS:t:TvZ", {
      backup: "optional", compare: "none", directory: "none", group: "required", mode: "required", owner: "required", "preserve-timestamps": "none",
      strip: "none", "strip-program": "required", suffix: "required", "target-directory": "required", "no-target-directory": "none", verbose: "none",
      context: "optional", "preserve-context": "none", debug: "none",
    }),
    target: ["-t", "--target-directory"],
    noTarget: ["-T", "--no-target-directory"],
    recursive: [],
    sources: "read",
  },
  rsync: { options: PROGRAMS.rsync.options, target: [], noTarget: [], recursive: "always", sources: "read" },
};

// ── git ───────────────────────────────────────────────────────────────────────────────────────

/** git's own options before the subcommand that take the next argument (git.c reads them whole, never abbreviated). */
export const GIT_GLOBAL_VALUE = set("-c", "-C", "--config-env", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source", "--shallow-file");
/** git's own options before the subcommand that take no argument. */
export const GIT_GLOBAL_FLAGS = set(
  "-p", "--paginate", "-P", "--no-pager", "--no-replace-objects", "--no-lazy-fetch", "--no-optional-locks", "--no-advice", "--bare",
  "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "-h", "--help", "-v", "--version",
  "--html-path", "--man-path", "--info-path", "--exec-path",
);

/** What the policy knows of a git subcommand's options (git's parse-options: long options abbreviate). */
export interface GitSubcommand {
  options: OptionGrammar;
  /** Options whose value is a command git runs through the shell. */
  commands?: string[];
  /** Options whose value is `KEY=VALUE` configuration (clone -c). */
  config?: string[];
  /**
   * Options that make git take its hooks or configuration from a place the file rules do not
   * protect (a template directory, a git directory not called `.git`): refused where rules limit git.
   */
  elsewhere?: string[];
  /** Options whose value is a file git writes. */
  writes?: string[];
  /** Options whose value is a directory git writes files into. */
  writesTree?: string[];
}

const po = (short: string, long: Record<string, Arity>): OptionGrammar => ({ short, long, abbreviations: true });
const FETCH_LONG: Record<string, Arity> = {
  "upload-pack": "required", all: "none", append: "none", atomic: "none", depth: "required", deepen: "required", "shallow-since": "required",
  "shallow-exclude": "required", unshallow: "none", "update-shallow": "none", "negotiation-tip": "required", "dry-run": "none", force: "none",
  keep: "none", multiple: "none", prune: "none", "prune-tags": "none", tags: "none", "no-tags": "none", refetch: "none", refmap: "required",
  "recurse-submodules": "optional", jobs: "required", "set-upstream": "none", "update-head-ok": "none", progress: "none", "server-option": "required",
  quiet: "none", verbose: "none", filter: "required", "write-fetch-head": "none", porcelain: "none", rebase: "optional", strategy: "required",
  "strategy-option": "required", "ff-only": "none", "no-ff": "none", ff: "none", squash: "none", "no-rebase": "none", autostash: "none",
};

export const GIT_SUBCOMMANDS: Record<string, GitSubcommand> = {
  rebase: {
    options: po("x:s:X:S::C:ivqmfnkr", {
      exec: "required", empty: "required", "edit-todo": "none", onto: "required", strategy: "required", "strategy-option": "required", root: "none",
      interactive: "none", autosquash: "none", "no-autosquash": "none", continue: "none", abort: "none", skip: "none", quit: "none", "update-refs": "none",
      "keep-base": "none", "rebase-merges": "optional", "gpg-sign": "optional", "committer-date-is-author-date": "none", "reset-author-date": "none",
      autostash: "none", "fork-point": "none", "no-fork-point": "none", "keep-empty": "none", "reapply-cherry-picks": "none", "allow-empty-message": "none",
      "ignore-whitespace": "none", "whitespace": "required", "no-verify": "none", verify: "none", "show-current-patch": "none", apply: "none", merge: "none",
    }),
    commands: ["-x", "--exec"],
  },
  difftool: {
    options: po("x:t:ydg", { extcmd: "required", tool: "required", "tool-help": "none", "no-prompt": "none", prompt: "none", "dir-diff": "none", gui: "none", "trust-exit-code": "none", symlinks: "none" }),
    commands: ["-x", "--extcmd"],
  },
  grep: { options: po("e:f:A:B:C:m:O::", { "open-files-in-pager": "optional", "max-depth": "required", threads: "required", "max-count": "required", context: "required" }), commands: ["-O", "--open-files-in-pager"] },
  "filter-branch": {
    // A shell script reading its options whole, never abbreviated.
    options: {
      short: "d:f",
      long: {
        setup: "required", "env-filter": "required", "tree-filter": "required", "index-filter": "required", "parent-filter": "required", "msg-filter": "required",
        "commit-filter": "required", "tag-name-filter": "required", "subdirectory-filter": "required", original: "required", "state-branch": "required",
        "prune-empty": "none", force: "none",
      },
    },
    commands: ["--setup", "--env-filter", "--tree-filter", "--index-filter", "--parent-filter", "--msg-filter", "--commit-filter", "--tag-name-filter"],
  },
  clone: {
    options: po("u:c:o:b:j:lsnqv", {
      "upload-pack": "required", template: "required", config: "required", "separate-git-dir": "required", bare: "none", mirror: "none", origin: "required",
      branch: "required", depth: "required", reference: "required", "reference-if-able": "required", "shallow-since": "required", "shallow-exclude": "required",
      jobs: "required", filter: "required", "server-option": "required", "recurse-submodules": "optional", "single-branch": "none", "no-checkout": "none",
      quiet: "none", verbose: "none", progress: "none", "no-tags": "none", "shallow-submodules": "none", "remote-submodules": "none", sparse: "none",
      "bundle-uri": "required", "ref-format": "required", dissociate: "none", local: "none", "no-hardlinks": "none", shared: "none",
    }),
    commands: ["-u", "--upload-pack"],
    config: ["-c", "--config"],
    elsewhere: ["--template", "--separate-git-dir"],
  },
  init: {
    options: po("qb:", { template: "required", "separate-git-dir": "required", bare: "none", shared: "optional", quiet: "none", "initial-branch": "required", "object-format": "required", "ref-format": "required" }),
    elsewhere: ["--template", "--separate-git-dir"],
  },
  fetch: { options: po("aAfkpPtnj:uo:qv46", FETCH_LONG), commands: ["--upload-pack"] },
  pull: { options: po("vqrnfs:X:j:o:46", FETCH_LONG), commands: ["--upload-pack"] },
  "ls-remote": { options: po("htqo:", { "upload-pack": "required", exec: "required", heads: "none", tags: "none", branches: "none", refs: "none", "get-url": "none", symref: "none", sort: "required", quiet: "none", "server-option": "required" }), commands: ["--upload-pack", "--exec"] },
  push: {
    options: po("nfo:uvq46d", {
      "receive-pack": "required", exec: "required", repo: "required", all: "none", branches: "none", mirror: "none", delete: "none", tags: "none", "dry-run": "none",
      porcelain: "none", force: "none", "force-with-lease": "optional", "force-if-includes": "none", "recurse-submodules": "required", verbose: "none",
      quiet: "none", progress: "none", prune: "none", "no-verify": "none", verify: "none", "follow-tags": "none", signed: "optional", atomic: "none",
      "push-option": "required", "set-upstream": "none", thin: "none",
    }),
    commands: ["--receive-pack", "--exec"],
  },
  "send-pack": { options: po("", { "receive-pack": "required", exec: "required", all: "none", "dry-run": "none", force: "none", verbose: "none", thin: "none", atomic: "none", "stateless-rpc": "none", signed: "optional", "push-option": "required" }), commands: ["--receive-pack", "--exec"] },
  "fetch-pack": { options: po("qkv", { "upload-pack": "required", exec: "required", all: "none", stdin: "none", quiet: "none", keep: "none", thin: "none", "include-tag": "none", depth: "required" }), commands: ["--upload-pack", "--exec"] },
  archive: {
    options: po("o:lv0123456789", { exec: "required", remote: "required", output: "required", format: "required", prefix: "required", list: "none", verbose: "none", "worktree-attributes": "none", "add-file": "required", "add-virtual-file": "required", mtime: "required" }),
    commands: ["--exec"],
    writes: ["-o", "--output"],
  },
  instaweb: { options: po("d:b:p:m:l", { httpd: "required", browser: "required", port: "required", "module-path": "required", local: "none", start: "none", stop: "none", restart: "none" }), commands: ["-d", "--httpd", "-b", "--browser"] },
  "send-email": {
    options: po("", {
      "smtp-server": "required", "sendmail-cmd": "required", "to-cmd": "required", "cc-cmd": "required", "header-cmd": "required", "smtp-server-option": "required",
      "smtp-server-port": "required", "smtp-user": "required", "smtp-pass": "optional", "smtp-encryption": "required", "smtp-domain": "required",
      to: "required", cc: "required", bcc: "required", from: "required", subject: "required", "in-reply-to": "required", "reply-to": "required",
      annotate: "none", compose: "none", identity: "required", "dry-run": "none", confirm: "required", quiet: "none", "suppress-cc": "required",
    }),
    commands: ["--smtp-server", "--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"],
  },
  config: {
    options: po("f:lez", {
      file: "required", blob: "required", type: "required", default: "required", comment: "required", value: "required", global: "none", system: "none",
      local: "none", worktree: "none", add: "none", get: "none", "get-all": "none", "get-regexp": "none", "get-urlmatch": "none", "replace-all": "none",
      unset: "none", "unset-all": "none", "rename-section": "none", "remove-section": "none", list: "none", edit: "none", null: "none", "name-only": "none",
      includes: "none", "show-origin": "none", "show-scope": "none", bool: "none", int: "none", "bool-or-int": "none", path: "none", "expiry-date": "none",
      "fixed-value": "none", all: "none", regexp: "none", url: "required",
    }),
  },
  diff: { options: po("", { output: "required" }), writes: ["--output"] },
  log: { options: po("n:", { output: "required" }), writes: ["--output"] },
  show: { options: po("", { output: "required" }), writes: ["--output"] },
  "format-patch": { options: po("o:v:n", { "output-directory": "required", output: "required" }), writes: ["--output"], writesTree: ["-o", "--output-directory"] },
};

/** git config's subcommands (git 2.46 and later) before the key. */
export const GIT_CONFIG_VERBS = set("set", "get", "unset", "rename-section", "remove-section", "get-color", "get-colorbool");

/** Reserved words: bash never runs a program for one of these written bare as a command name. */
export const RESERVED_WORDS = new Set(["if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done", "in", "function", "time", "{", "}", "!", "[[", "]]", "coproc"]);

/**
 * git configuration keys that run a program or another git command, or move git's configuration
 * and hooks where the file rules do not look (`extensions.worktreeConfig` makes git read
 * `config.worktree`; `core.worktree`, `core.bare` and `safe.bareRepository` change which directory
 * git treats as the repository).
 */
export const RUNS_COMMANDS =
  /^(alias\.|core\.(fsmonitor|pager|sshcommand|editor|hookspath|askpass|gitproxy|alternaterefscommand|worktree|bare)$|(diff|merge|filter|difftool|mergetool)\.|credential\.|gpg\.|sequence\.editor$|pager\.|uploadpack\.|receive\.|ssh\.|protocol\.|url\.|include\.|includeif\.|remote\..*\.(uploadpack|receivepack|proxy)$|sendemail\.|web\.browser$|browser\.|man\.|instaweb\.|init\.templatedir$|extensions\.worktreeconfig$|hook\.|trailer\..*\.(command|cmd)$|imap\.tunnel$|interactive\.difffilter$|submodule\..*\.update$|safe\.barerepository$)/i;
