/**
 * A minimal structured logger: one JSON object per line. Callers pass metadata, never file
 * contents, command output or secrets.
 */

/** Severity of a log line, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Every level, lowest first; settings validate against this list. */
export const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];

/** Log sink used across the server. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** Options of `createLogger`. */
export interface LoggerOptions {
  /** Lines below this level are dropped (default "info"). */
  level?: LogLevel;
  /** Receives each line without its newline (default: stderr). */
  sink?: (line: string) => void;
}

/** A logger writing JSON lines at or above `level`. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const min = LOG_LEVELS.indexOf(options.level ?? "info");
  const sink = options.sink ?? ((line: string) => process.stderr.write(`${line}\n`));
  const at = (level: LogLevel) => {
    if (LOG_LEVELS.indexOf(level) < min) return () => undefined;
    return (msg: string, fields?: Record<string, unknown>) => sink(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }));
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}
