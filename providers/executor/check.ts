/** Validation of the requests arriving at the executor: it trusts no frame's JSON blindly. */
import { envProblem } from "./env.ts";
import type { ExecRequest, OpRequest } from "./protocol.ts";

const isString = (v: unknown): v is string => typeof v === "string";
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
/** A terminal's rows or columns. */
const isSize = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 1000;

function checkRel(v: unknown, what: string): string {
  if (!isString(v) || v.startsWith("/") || v.includes("\0") || v.split("/").some((p) => p === "..")) throw new Error(`${what} must be a workspace-relative path`);
  return v;
}

/** Returns the EXEC request if well-formed, throws otherwise. */
export function checkExecRequest(v: unknown): ExecRequest {
  const r = v as ExecRequest;
  if (typeof r !== "object" || r === null) throw new Error("not an object");
  if (!Array.isArray(r.argv) || r.argv.length === 0 || !r.argv.every(isString)) throw new Error("argv");
  if (!isString(r.root) || !r.root.startsWith("/")) throw new Error("root");
  checkRel(r.cwd, "cwd");
  if (typeof r.env !== "object" || r.env === null || !Object.values(r.env).every(isString)) throw new Error("env");
  for (const [name, value] of Object.entries(r.env)) {
    const problem = envProblem(name, value);
    if (problem !== undefined) throw new Error(problem);
  }
  if (!isCount(r.timeoutMs) || !isCount(r.killGraceMs)) throw new Error("timeouts");
  if (r.programs !== undefined && !(Array.isArray(r.programs) && r.programs.length <= 16 && r.programs.every((p) => isString(p) && p.length > 0 && p.length <= 256))) throw new Error("programs");
  if (r.sweep !== undefined && r.sweep !== false) throw new Error("sweep");
  if (r.started !== undefined && r.started !== false) throw new Error("started");
  if (r.passStdout !== undefined && r.passStdout !== true) throw new Error("passStdout");
  if (r.stdin !== undefined && r.stdin !== true) throw new Error("stdin");
  if (r.pty !== undefined && !(typeof r.pty === "object" && r.pty !== null && isSize(r.pty.rows) && isSize(r.pty.cols))) throw new Error("pty");
  if (r.limits !== undefined && !(Array.isArray(r.limits) && r.limits.length <= 8 && r.limits.every(isString))) throw new Error("limits");
  return r;
}

/** Returns the OP request if well-formed, throws otherwise. */
export function checkOpRequest(v: unknown): OpRequest {
  const r = v as OpRequest;
  if (typeof r !== "object" || r === null) throw new Error("not an object");
  if (!isString(r.root) || !r.root.startsWith("/")) throw new Error("root");
  checkRel(r.rel, "rel");
  switch (r.op) {
    case "list":
      if (r.namesOnly !== undefined && typeof r.namesOnly !== "boolean") throw new Error("namesOnly");
      return r;
    case "resolve":
    case "stat":
    case "write":
    case "remove":
    case "release":
    case "seal":
    case "forget":
      return r;
    case "walk":
      if (r.all !== undefined && typeof r.all !== "boolean") throw new Error("all");
      if (r.prune !== undefined && !(Array.isArray(r.prune) && r.prune.length <= 64 && r.prune.every((n) => isString(n) && n.length > 0 && n.length <= 255 && !n.includes("/") && !n.includes("\0")))) {
        throw new Error("prune");
      }
      return r;
    case "read":
    case "readFile":
      if (!isCount(r.maxBytes)) throw new Error("maxBytes");
      return r;
    case "readRanges":
      if (!Array.isArray(r.ranges) || r.ranges.length > 100_000 || !r.ranges.every((x) => Array.isArray(x) && x.length === 2 && isCount(x[0]) && isCount(x[1]))) {
        throw new Error("ranges");
      }
      return r;
    default:
      throw new Error(`unknown op '${String((r as { op: unknown }).op).slice(0, 40)}'`);
  }
}
