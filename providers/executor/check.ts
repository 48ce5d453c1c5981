/** Validation of EXEC requests arriving at the sandbox executor. */
import { envProblem } from "./env.ts";
import type { ExecRequest } from "./protocol.ts";

/** Returns the request if well-formed, throws otherwise. */
export function checkExecRequest(v: unknown): ExecRequest {
  const r = v as ExecRequest;
  if (typeof r !== "object" || r === null) throw new Error("not an object");
  if (!Array.isArray(r.argv) || r.argv.length === 0 || !r.argv.every((a) => typeof a === "string")) throw new Error("argv");
  if (typeof r.cwd !== "string" || !r.cwd.startsWith("/")) throw new Error("cwd");
  if (typeof r.env !== "object" || r.env === null || !Object.values(r.env).every((x) => typeof x === "string")) throw new Error("env");
  for (const [name, value] of Object.entries(r.env)) {
    const problem = envProblem(name, value);
    if (problem !== undefined) throw new Error(problem);
  }
  if (typeof r.timeoutMs !== "number" || typeof r.killGraceMs !== "number") throw new Error("timeouts");
  return r;
}
