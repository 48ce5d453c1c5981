/**
 * The executor's version: a hash of every file in this folder (names and contents, in a fixed
 * order). A running executor reports the version it started with, so the server notices an
 * executor left over from other code and restarts it; since the whole folder is hashed, a file
 * added to the executor can never leave stale executors running.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** This folder: what sandboxes mount and what the version covers. */
export const EXECUTOR_DIR = path.dirname(fileURLToPath(import.meta.url));

/**
 * The version of the executor in `dir` (default: this one), 16 hex digits: the hash of the
 * folder's files, or, for a built copy (providers/executor-build.ts), the source version it
 * recorded in its VERSION file.
 */
export function executorVersion(dir: string = EXECUTOR_DIR): string {
  try {
    return readFileSync(path.join(dir, "VERSION"), "utf8").trim();
  } catch {
    // The sources themselves: hash them.
  }
  const hash = createHash("sha256");
  const files = (readdirSync(dir, { recursive: true, withFileTypes: true }) as Array<{ name: string; parentPath: string; isFile(): boolean }>)
    .filter((d) => d.isFile())
    .map((d) => path.relative(dir, path.join(d.parentPath, d.name)))
    .sort();
  for (const f of files) {
    hash.update(`${f}\0`);
    hash.update(readFileSync(path.join(dir, f)));
    hash.update("\0");
  }
  return hash.digest("hex").slice(0, 16);
}
