/**
 * The tools' entry into the jail: every caller-supplied path goes through `jailPath` before a
 * provider primitive sees it.
 */
import { DomainError } from "../../core/errors.ts";
import { displayPath, toWorkspacePath } from "../../providers/executor/jail.ts";
import { domain } from "../../providers/faults.ts";
import type { WorkspaceHandle } from "../../providers/types.ts";

export { displayPath };

/** Lexically jails a caller path; `required` turns an empty path into INVALID_ARGUMENT. */
export function jailPath(input: string, field: string, required: boolean): string {
  if (required && input.trim() === "") {
    throw new DomainError("INVALID_ARGUMENT", `${field} is required`, { metadata: { field } });
  }
  return domain(() => toWorkspacePath(input));
}

/** Jails and canonicalises a directory path, requiring that it exists and is a directory. */
export async function jailDirectory(ws: WorkspaceHandle, input: string, field: string): Promise<string> {
  const rel = await ws.fs.resolve(jailPath(input, field, false));
  const st = await ws.fs.stat(rel);
  if (st.type !== "directory") {
    throw new DomainError("NOT_A_DIRECTORY", `'${displayPath(rel)}' is not a directory`, { metadata: { path: rel, field } });
  }
  return rel;
}
