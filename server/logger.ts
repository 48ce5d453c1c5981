/**
 * A minimal structured logger: one JSON object per line on stderr. Callers pass metadata, never
 * file contents, command output or secrets.
 */

/** Log sink used across the server. */
export interface Logger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** A logger writing JSON lines to stderr; `quiet` drops info lines (tests). */
export function createLogger(options: { quiet?: boolean } = {}): Logger {
  const write = (level: string, msg: string, fields?: Record<string, unknown>) => {
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
  };
  return {
    info: (msg, fields) => {
      if (!options.quiet) write("info", msg, fields);
    },
    warn: (msg, fields) => write("warn", msg, fields),
    error: (msg, fields) => write("error", msg, fields),
  };
}
