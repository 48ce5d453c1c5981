/**
 * The environment a workspace command starts with. Nothing is inherited from the server, so
 * server secrets (tokens, credentials in the server's environment) never reach a command.
 */

/** Variables a caller may not set: they would let a command escape or confuse supervision. */
export const RESERVED_ENV = new Set(["AGENT_WORKSPACE_EXEC_ID", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"]);
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Why a caller's variable cannot be set, or undefined when it can. */
export function envProblem(name: string, value: string): string | undefined {
  if (!NAME.test(name)) return `Invalid environment variable name '${name.slice(0, 100)}'`;
  if (RESERVED_ENV.has(name)) return `Environment variable '${name}' may not be set`;
  if (value.includes("\0")) return `Environment variable '${name}' contains a NUL byte`;
  return undefined;
}

/**
 * The minimal environment for a command whose home is `home` (the workspace root), plus the
 * caller's variables, which must already have passed `envProblem` (the server checks them with a
 * typed error; the executor checks them again). git's discovery stops at the root
 * (GIT_CEILING_DIRECTORIES is its parent): a workspace without a repository is no repository,
 * never one around it (a local workspace's data directory inside a checkout on the host). A
 * caller's variable may lift that for its own command; the git tools never do.
 */
export function sandboxEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: home,
    LANG: "C.UTF-8",
    LC_ALL: "C.UTF-8",
    TERM: "dumb",
    PAGER: "cat",
    GIT_PAGER: "cat",
    GIT_TERMINAL_PROMPT: "0",
    CI: "1",
    GIT_CEILING_DIRECTORIES: home.slice(0, home.lastIndexOf("/")) || "/",
    ...extra,
  };
}

/** Hosts a proxied command reaches directly: its own loopback. */
export const NO_PROXY = "localhost,127.0.0.1,::1";

/**
 * The proxy variables pointing a command at the egress proxy `url`, in both cases (curl reads
 * only lower-case http_proxy; others read either).
 */
export function proxyEnv(url: string): Record<string, string> {
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    NO_PROXY,
    http_proxy: url,
    https_proxy: url,
    no_proxy: NO_PROXY,
  };
}
