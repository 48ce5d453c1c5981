/**
 * What the command policy knows about programs, as data: which builtins run nothing, which
 * programs only read the files they name, which options take a value, which options and
 * configuration keys make a program run a command of the caller's choosing, and which variables
 * change what runs. The walker (command-policy.ts) reads these tables; a program's behaviour is
 * one entry here, never a branch there.
 */

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

/** Programs that only read their file arguments: may name write-protected files. */
export const READERS = new Set(["cat", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "diff", "cmp", "wc", "file", "stat", "md5sum", "sha1sum", "sha256sum", "od", "xxd", "hexdump", "strings", "nl", "sort", "uniq", "git"]);

/** Shells whose `-c` string (or literal stdin) is a script to check. */
export const SHELLS = new Set(["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash"]);

/** Directories a program named by path may come from under an allowlist without a rule naming that path. */
export const SYSTEM_DIRS = new Set(["/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"]);

export const set = (...xs: string[]) => new Set(xs);
export const ENV_VALUE = set("-u", "--unset", "-C", "--chdir", "-S", "--split-string");
export const TIMEOUT_VALUE = set("-s", "--signal", "-k", "--kill-after");
export const NICE_VALUE = set("-n", "--adjustment");
export const STDBUF_VALUE = set("-i", "-o", "-e", "--input", "--output", "--error");
export const IONICE_VALUE = set("-c", "-n", "--class", "--classdata");
export const XARGS_VALUE = set("-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var");
export const EXEC_VALUE = set("-a");
export const TIME_VALUE = set("-o", "-f", "--output", "--format");
export const FLOCK_VALUE = set("-w", "--timeout", "-E", "--conflict-exit-code");
export const WATCH_VALUE = set("-n", "--interval", "-q", "--equexit");
export const SHELL_VALUE = set("-o", "+o", "-O", "+O", "--rcfile", "--init-file");
/** Options of git config that take the next argument. */
export const GIT_CONFIG_VALUE = set("-f", "--file", "--blob", "--type", "--default", "--comment", "--value");
/** git config's subcommands (git 2.46 and later) before the key. */
export const GIT_CONFIG_VERBS = set("set", "get", "unset", "rename-section", "remove-section", "get-color", "get-colorbool");
/** Options whose value is a command a program runs (see #optionCommands). */
export interface CommandOptions {
  long: string[];
  short: string[];
  /** The value must be attached (`-Ocmd`, `--open-files-in-pager=cmd`); alone the option takes none. */
  attachedOnly?: boolean;
  /** Options matched whole, their value the next argument (zip's `-TT`). */
  exact?: string[];
  /** The command within a value, or null when the value names none. */
  pick?: (value: string) => string | null;
  /** A computed argument is refused under an allowlist (it could be one of the options). */
  computedRefused?: boolean;
}

/** Programs with options that run a command or a program of the caller's choosing. */
export const PROGRAM_COMMAND_OPTIONS: Record<string, CommandOptions> = {
  tar: { long: ["--to-command", "--use-compress-program", "--info-script", "--new-volume-script", "--rsh-command"], short: ["-I", "-F"] },
  // --checkpoint-action=exec=CMD
  "tar-checkpoint": { long: ["--checkpoint-action"], short: [], pick: (v) => (v.startsWith("exec=") ? v.slice(5) : null) },
  sort: { long: ["--compress-program"], short: [] },
  rsync: { long: ["--rsh", "--rsync-path"], short: ["-e"] },
  zip: { long: ["--unzip-command"], short: [], exact: ["-TT"] },
  man: { long: ["--pager"], short: ["-P"] },
  // ripgrep's preprocessor, run on every file it searches.
  rg: { long: ["--pre"], short: [] },
  ssh: { long: [], short: ["-o"], pick: (v) => /^(proxycommand|localcommand|knownhostscommand)\s*[= ]\s*(.*)$/is.exec(v)?.[2] ?? null },
};

/** Option letters of mapfile/readarray that take a value (C: the callback). */
export const MAPFILE_VALUE = "dnOsucC";
/** git's own options before the subcommand that take the next argument (git.c reads them whole, never abbreviated). */
export const GIT_GLOBAL_VALUE = set("-c", "-C", "--config-env", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source", "--shallow-file");
/** git's own options before the subcommand that take no argument. */
export const GIT_GLOBAL_FLAGS = set(
  "-p", "--paginate", "-P", "--no-pager", "--no-replace-objects", "--no-lazy-fetch", "--no-optional-locks", "--no-advice", "--bare",
  "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "-h", "--help", "-v", "--version",
  "--html-path", "--man-path", "--info-path", "--exec-path",
);
/**
 * Options of git subcommands whose value is a command git runs through the shell. `attachedOnly`:
 * the value must be attached (`-Ocmd`, `--open-files-in-pager=cmd`); alone the option takes none.
 */
export const GIT_COMMAND_OPTIONS: Record<string, CommandOptions> = {
  rebase: { long: ["--exec"], short: ["-x"] },
  difftool: { long: ["--extcmd"], short: ["-x"] },
  grep: { long: ["--open-files-in-pager"], short: ["-O"], attachedOnly: true },
  "filter-branch": { long: ["--setup", "--env-filter", "--tree-filter", "--index-filter", "--parent-filter", "--msg-filter", "--commit-filter", "--tag-name-filter"], short: [] },
  clone: { long: ["--upload-pack"], short: ["-u"] },
  fetch: { long: ["--upload-pack"], short: [] },
  pull: { long: ["--upload-pack"], short: [] },
  "ls-remote": { long: ["--upload-pack"], short: [] },
  push: { long: ["--receive-pack", "--exec"], short: [] },
  "send-pack": { long: ["--receive-pack", "--exec"], short: [] },
  "fetch-pack": { long: ["--upload-pack", "--exec"], short: [] },
  archive: { long: ["--exec"], short: [] },
  instaweb: { long: ["--httpd", "--browser"], short: ["-d", "-b"] },
  "send-email": { long: ["--smtp-server", "--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"], short: [] },
};

/** Reserved words: bash never runs a program for one of these written bare as a command name. */
export const RESERVED_WORDS = new Set(["if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done", "in", "function", "time", "{", "}", "!", "[[", "]]", "coproc"]);

/** git configuration keys that run a program or another git command. */
export const RUNS_COMMANDS =
  /^(alias\.|core\.(fsmonitor|pager|sshcommand|editor|hookspath|askpass|gitproxy)$|(diff|merge|filter)\.|credential\.|gpg\.|sequence\.editor$|pager\.|uploadpack\.|receive\.|ssh\.|protocol\.|url\.|include\.|includeif\.|remote\..*\.(uploadpack|receivepack|proxy)$|sendemail\.|web\.browser$|browser\.|man\.|instaweb\.|init\.templatedir$)/i;
