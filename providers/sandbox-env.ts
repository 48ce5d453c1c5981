/**
 * The environment a workspace command starts with. Nothing is inherited from the server, so
 * server secrets (tokens, credentials in the server's environment) never reach a command.
 */
import { DomainError } from "../core/errors.ts";

/** Variables a caller may not set: they would let a command escape or confuse supervision. */
const RESERVED = new Set(["AGENT_WORKSPACE_EXEC_ID", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"]);
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The minimal environment for a command whose home and workspace is `home`, plus caller variables. */
export function sandboxEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {
    PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: home,
    LANG: "C.UTF-8",
    LC_ALL: "C.UTF-8",
    TERM: "dumb",
    PAGER: "cat",
    GIT_PAGER: "cat",
    GIT_TERMINAL_PROMPT: "0",
    CI: "1",
  };
  for (const [name, value] of Object.entries(extra)) {
    if (!NAME.test(name)) {
      throw new DomainError("INVALID_ARGUMENT", `Invalid environment variable name '${name.slice(0, 100)}'`, {
        metadata: { field: "env", name: name.slice(0, 100) },
      });
    }
    if (RESERVED.has(name)) {
      throw new DomainError("INVALID_ARGUMENT", `Environment variable '${name}' may not be set`, {
        metadata: { field: "env", name },
      });
    }
    if (value.includes("\0")) {
      throw new DomainError("INVALID_ARGUMENT", `Environment variable '${name}' contains a NUL byte`, {
        metadata: { field: "env", name },
      });
    }
    env[name] = value;
  }
  return env;
}
