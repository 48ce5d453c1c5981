/**
 * What a container on an engine of this host runs the executor from: one directory,
 * `<data-dir>/sandbox`, bind-mounted read-only at /opt/agent-workspace (docker.ts):
 *
 *   node, bin/rg            the server's Node binary and ripgrep (hard links, or copies across filesystems)
 *   executor/               the built executor (executor-build.ts), its files linked the same way
 *   egress/                 empty: where a workspace's egress directory is mounted (egress-socket.ts)
 *   VERSION                 what it was made from
 *
 * One mount where there were three (Node, the executor and ripgrep each bound on its own): under
 * gVisor every mount is state the sandbox's kernel keeps for as long as the sandbox lives, about
 * 0.3 MiB each (bench/idle-memory-timeline.ts). A workspace under a command allowlist still gets
 * the three files bound one by one, into its prepared image's /opt/agent-workspace, whose mode
 * keeps the agent out (docker.ts). A remote engine gets the same layout from a volume
 * (engine-payload.ts).
 *
 * Made again whole when its version changes (the executor's, or Node's or ripgrep's path, size or
 * time): the new one is put in place and the old one removed (`replaceWhole`), as buildExecutor
 * does with the executor's directory. A running container keeps the files it started from; its server sees
 * the executor's version change at its next connection and restarts it (docker.ts).
 */
import { createHash, randomBytes } from "node:crypto";
import { copyFile, link, mkdir, readdir, readFile, realpath, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { rgPath } from "@vscode/ripgrep";
import { errnoCode } from "../core/errors.ts";
import { type ExecutorBuild, replaceWhole } from "./executor-build.ts";

/** A hard link where `to` shares the file's filesystem (no bytes copied), a copy otherwise. */
async function place(from: string, to: string): Promise<void> {
  await link(from, to).catch(async (err: unknown) => {
    if (!["EXDEV", "EPERM", "EMLINK"].includes(errnoCode(err) ?? "")) throw err;
    await copyFile(from, to);
  });
}

/** Makes (or reuses) `<dataDir>/sandbox` for `executor`, and returns its path. */
export async function stageSandboxDir(dataDir: string, executor: ExecutorBuild): Promise<string> {
  const node = await realpath(process.execPath);
  const rg = await realpath(rgPath);
  const [nodeStat, rgStat] = await Promise.all([stat(node), stat(rg)]);
  const version = createHash("sha256")
    .update([executor.version, node, nodeStat.size, nodeStat.mtimeMs, rg, rgStat.size, rgStat.mtimeMs].join("\0"))
    .digest("hex")
    .slice(0, 16);
  const dir = path.join(dataDir, "sandbox");
  const made = await readFile(path.join(dir, "VERSION"), "utf8").then((v) => v.trim(), () => "");
  if (made === version) return dir;
  const tmp = `${dir}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    await mkdir(path.join(tmp, "bin"), { recursive: true });
    await mkdir(path.join(tmp, "executor"));
    await mkdir(path.join(tmp, "egress"));
    await place(node, path.join(tmp, "node"));
    await place(rg, path.join(tmp, "bin", "rg"));
    for (const name of await readdir(executor.dir)) await place(path.join(executor.dir, name), path.join(tmp, "executor", name));
    await writeFile(path.join(tmp, "VERSION"), `${version}\n`);
    await replaceWhole(dir, tmp);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
  return dir;
}
