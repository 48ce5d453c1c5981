/**
 * git on the server's own side (clones into a private bare repository, pushes from the server's
 * mirror): no system or user configuration, no prompts, no hooks, no helpers, only network
 * transports, every object verified, bounded in size by RLIMIT_FSIZE and in time by a signal. A
 * credential travels only as an HTTP header scoped to its origin, in git's environment (never on
 * the command line or in a file), and everything git prints is redacted before anyone sees it.
 * This git never reads a repository the agent controls: only bare repositories the server made
 * and bundles it checks as it fetches them.
 */
import { spawn } from "node:child_process";

/** Output handed on as it comes (already redacted). */
export type GitProgress = (data: Uint8Array, stderr: boolean) => void;

/** Replaces every occurrence of the secrets in `text`. */
export function redactor(secrets: string[]): (text: string) => string {
  const live = secrets.filter((s) => s.length >= 4);
  return (text) => live.reduce((t, s) => t.split(s).join("***"), text);
}

/**
 * The environment of every server-side git: no system or user configuration, no prompts, no
 * helpers, the hardening as GIT_CONFIG_* entries (never on the command line), and the
 * credential's header scoped to its host.
 */
export function hostGitEnv(home: string, header: { origin: string; value: string } | undefined, options: { fromBundleFile?: boolean } = {}): NodeJS.ProcessEnv {
  const config: Array<[string, string]> = [
    ["core.hooksPath", "/dev/null"],
    ["protocol.allow", "never"],
    ["protocol.https.allow", "always"],
    ["protocol.http.allow", "always"],
    ["protocol.ssh.allow", "always"],
    ["protocol.git.allow", "always"],
    // Local paths only for a bundle file the server wrote itself.
    ["protocol.file.allow", options.fromBundleFile ? "always" : "never"],
    ["protocol.ext.allow", "never"],
    ["transfer.fsckObjects", "true"],
    ["fetch.fsckObjects", "true"],
    ["submodule.recurse", "false"],
    ["credential.helper", ""],
    ["http.followRedirects", header ? "false" : "initial"],
    ["core.askPass", "/bin/false"],
  ];
  if (header) config.push([`http.${header.origin}/.extraHeader`, header.value]);
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    LANG: "C",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_TERMINAL_PROMPT: "0",
    GIT_ASKPASS: "/bin/false",
    SSH_ASKPASS: "/bin/false",
    GIT_SSH_COMMAND: "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes",
    GIT_ALLOW_PROTOCOL: options.fromBundleFile ? "file" : "https:http:ssh:git",
    GIT_CONFIG_COUNT: String(config.length),
  };
  config.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

export interface GitRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs git with `args` under RLIMIT_FSIZE (bash's `ulimit -f`, inherited by index-pack), until
 * `signal` aborts; stderr goes to `progress` as it comes, redacted.
 */
export function hostGit(args: string[], options: { env: NodeJS.ProcessEnv; maxBytes: number; signal: AbortSignal; redact: (s: string) => string; progress?: GitProgress }): Promise<GitRun> {
  const blocks = Math.max(1, Math.ceil(options.maxBytes / 1024));
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", `ulimit -f ${blocks} && exec git "$@"`, "git", ...args], {
      env: options.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let stdout = "";
    let stderr = "";
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    };
    options.signal.addEventListener("abort", kill, { once: true });
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      if (stdout.length < 64 * 1024) stdout += d;
    });
    child.stderr.on("data", (d: Buffer) => {
      const text = options.redact(d.toString("utf8"));
      if (stderr.length < 64 * 1024) stderr += text;
      options.progress?.(Buffer.from(text), true);
    });
    child.on("error", (err) => {
      options.signal.removeEventListener("abort", kill);
      reject(err);
    });
    child.on("close", (code, sig) => {
      options.signal.removeEventListener("abort", kill);
      resolve({ code, signal: sig, stdout, stderr });
    });
  });
}

/** The last meaningful line git printed, for an error message. */
export function lastLine(text: string): string {
  const lines = text.split(/[\r\n]+/).map((l) => l.trim()).filter((l) => l !== "" && !/^(remote: )?(Counting|Compressing|Receiving|Resolving|Enumerating)/.test(l));
  return (lines.at(-1) ?? "").slice(0, 500);
}

