/**
 * Tunables of the tools, with the defaults the contract promises. The server config can change
 * the command timeout ceiling; everything else is fixed by the API documentation.
 */
export interface ToolLimits {
  /** Timeout when a request gives none. */
  defaultTimeoutMs: number;
  /** Largest timeout a request may ask for. */
  maxTimeoutMs: number;
  /** Grace between SIGTERM and SIGKILL. */
  killGraceMs: number;
  /** Bytes of stdout/stderr kept by unary Bash. */
  maxOutputBytes: number;
  /** Largest file ReadFile, EditFile and PatchFile load. */
  maxFileBytes: number;
  /** Lines ReadFile returns when no limit is given. */
  defaultReadLines: number;
  /** Characters after which ReadFile and Grep cut a line. */
  maxLineChars: number;
  /** Timeout of a ripgrep search. */
  grepTimeoutMs: number;
}

/** The documented defaults. */
export const DEFAULT_TOOL_LIMITS: ToolLimits = {
  defaultTimeoutMs: 120_000,
  maxTimeoutMs: 600_000,
  killGraceMs: 5_000,
  maxOutputBytes: 50 * 1024,
  maxFileBytes: 20 * 1024 * 1024,
  defaultReadLines: 2000,
  maxLineChars: 2000,
  grepTimeoutMs: 60_000,
};
