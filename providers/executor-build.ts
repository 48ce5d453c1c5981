/**
 * The executor as plain JavaScript. At start the server writes a type-stripped copy of
 * providers/executor/ (Node's own `module.stripTypeScriptTypes`, positions kept, `./x.ts`
 * imports pointed at `./x.js`) into `<data-dir>/executor/`, with the source folder's version in
 * a VERSION file. The local provider runs that copy and container providers mount it: a process
 * that does not load the TypeScript stripper is about half the size, which makes every command's
 * fork cheaper and every idle sandbox lighter.
 *
 * The path is fixed and replaced whole when the version changes, so a container restarted to
 * update its executor mounts the new copy (a running one keeps the directory it mounted).
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { copyFile, mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { stripTypeScriptTypes } from "node:module";
import path from "node:path";
import { errnoCode } from "../core/errors.ts";
import { EXECUTOR_DIR, executorVersion } from "./executor/version.ts";

/**
 * Node flags of every executor: no inspector on SIGUSR1 (a command must not be able to open a
 * debugger port into it), no experimental-feature warnings on its stderr, and a small young
 * generation (it allocates little, and a smaller heap is cheaper to fork and to keep).
 */
export const EXECUTOR_NODE_FLAGS = ["--disable-sigusr1", "--disable-warning=ExperimentalWarning", "--max-semi-space-size=1"];

/** A built executor: the directory that holds it, and its version (the source folder's). */
export interface ExecutorBuild {
  dir: string;
  /** The entry point inside `dir`. */
  main: string;
  version: string;
}

/** The executor run from its sources (tests and embedders that build no copy). */
export const SOURCE_EXECUTOR: ExecutorBuild = { dir: EXECUTOR_DIR, main: "main.ts", version: executorVersion() };

/**
 * Runs `fn` without Node's one-time "experimental feature" warning on stderr: the stripper is the
 * one Node itself uses to run this server's TypeScript, and the warning would only be noise in
 * the server's log.
 */
function quietly<T>(fn: () => T): T {
  const emit = process.emitWarning;
  process.emitWarning = () => undefined;
  try {
    return fn();
  } finally {
    process.emitWarning = emit;
  }
}

/**
 * Puts the directory `tmp` in place of `dir` whole: the old copy is moved aside, the new one put in
 * place, the old one dropped. A sandbox that bind-mounted the old copy keeps its files until then.
 */
export async function replaceWhole(dir: string, tmp: string): Promise<void> {
  const old = `${dir}.${randomBytes(6).toString("hex")}.old`;
  await rename(dir, old).catch((err: unknown) => {
    if (errnoCode(err) !== "ENOENT") throw err;
  });
  await rename(tmp, dir);
  await rm(old, { recursive: true, force: true });
}

/** Builds (or reuses) the JavaScript executor under `dataDir`. */
export async function buildExecutor(dataDir: string): Promise<ExecutorBuild> {
  const version = SOURCE_EXECUTOR.version;
  const dir = path.join(dataDir, "executor");
  const built = await readFile(path.join(dir, "VERSION"), "utf8").then((v) => v.trim(), () => "");
  if (built === version) return { dir, main: "main.js", version };
  const tmp = `${dir}.${randomBytes(6).toString("hex")}.tmp`;
  await mkdir(tmp, { recursive: true });
  try {
    for (const name of await readdir(EXECUTOR_DIR)) {
      const from = path.join(EXECUTOR_DIR, name);
      if (name.endsWith(".ts")) {
        const js = quietly(() => stripTypeScriptTypes(readFileSync(from, "utf8"), { mode: "strip" })).replace(/(from\s+"\.\/[^"]+)\.ts"/g, '$1.js"');
        await writeFile(path.join(tmp, name.replace(/\.ts$/, ".js")), js);
      } else {
        await copyFile(from, path.join(tmp, name));
      }
    }
    await writeFile(path.join(tmp, "VERSION"), `${version}\n`);
    await replaceWhole(dir, tmp);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
  return { dir, main: "main.js", version };
}
