/**
 * `<data-dir>/sandbox` (providers/sandbox-dir.ts): what a container on this host mounts at
 * /opt/agent-workspace. Its layout, hard links where the data directory shares the files'
 * filesystem, reuse while nothing changed, and replacement whole when the executor changes.
 */
import { mkdtemp, readdir, realpath, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import { rgPath } from "@vscode/ripgrep";
import { buildExecutor } from "../providers/executor-build.ts";
import { stageSandboxDir } from "../providers/sandbox-dir.ts";

test("the sandbox directory holds Node, ripgrep, the executor and the egress mount point; it is reused while nothing changed and made again whole when the executor changes", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-sandbox-dir-"));
  try {
    const executor = await buildExecutor(dataDir);
    const dir = await stageSandboxDir(dataDir, executor);
    t.is(dir, path.join(dataDir, "sandbox"));
    t.deepEqual((await readdir(dir)).sort(), ["VERSION", "bin", "egress", "executor", "node"]);
    t.deepEqual(await readdir(path.join(dir, "egress")), []);
    t.deepEqual((await readdir(path.join(dir, "executor"))).sort(), (await readdir(executor.dir)).sort());
    const [node, rg, nodeHere, rgHere, dataDev] = await Promise.all([
      stat(await realpath(process.execPath)),
      stat(await realpath(rgPath)),
      stat(path.join(dir, "node")),
      stat(path.join(dir, "bin", "rg")),
      stat(dataDir),
    ]);
    t.is(nodeHere.size, node.size);
    t.is(rgHere.size, rg.size);
    // Hard links where the data directory shares the files' filesystem (no 100 MB copy per server).
    if (node.dev === dataDev.dev) t.is(nodeHere.ino, node.ino, "Node is linked, not copied");
    t.true((nodeHere.mode & 0o111) !== 0 && (rgHere.mode & 0o111) !== 0, "both stay executable");

    // Nothing changed: the same directory, untouched.
    const before = await stat(dir);
    t.is(await stageSandboxDir(dataDir, executor), dir);
    t.is((await stat(dir)).ino, before.ino);

    // Another executor version: a new directory in its place, no leftovers beside it.
    const changed = { ...executor, version: `${executor.version}-next` };
    await writeFile(path.join(executor.dir, "extra.js"), "// a file of the next version\n");
    await stageSandboxDir(dataDir, changed);
    t.not((await stat(dir)).ino, before.ino);
    t.true((await readdir(path.join(dir, "executor"))).includes("extra.js"));
    t.deepEqual((await readdir(dataDir)).filter((n) => n.startsWith("sandbox")), ["sandbox"]);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});
