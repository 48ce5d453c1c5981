/**
 * What a sandbox on a remote Docker engine runs the executor from. An engine on this host gets
 * the server's Node binary, the executor and ripgrep as read-only bind mounts (docker.ts); a
 * remote engine shares no filesystem with the server, so the server copies them once per engine
 * and version into a Docker volume of that engine (PAYLOAD_VOLUME), through the engine's own
 * archive API, and sandboxes mount the volume read-only:
 *
 *   <volume>/<version>/node, executor/, bin/rg, READY    one directory per payload version
 *   <volume>/current -> <version>                         what containers start from
 *
 * A version's directory is never rewritten once its READY file exists (it is the last entry of
 * the archive), so a running sandbox never sees its binaries change; `current` is switched by
 * one more archive once the directory is complete, and a container restarted to update its
 * executor (docker.ts) starts from the new one.
 */
import { randomBytes } from "node:crypto";
import { mkdir, realpath, rename, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Readable } from "node:stream";
import type Docker from "dockerode";
import { rgPath } from "@vscode/ripgrep";
import { create as tarCreate } from "tar";
import type { ExecutorBuild } from "./executor-build.ts";
import type { ProviderLog } from "./types.ts";

/** The volume holding the payload on each remote engine. */
export const PAYLOAD_VOLUME = "agent-workspace-payload";

/** Where a helper container mounts the volume while the payload is written. */
const TARGET = "/target";

/** Copies the payload to remote engines. */
export class EnginePayload {
  readonly #executor: ExecutorBuild;
  readonly #stageRoot: string;
  readonly #log: ProviderLog;
  /** The payload's version: the executor's, Node's and ripgrep's. */
  readonly version: string;
  #staged: Promise<void> | undefined;
  /** Engines this server made sure of (once each, unless it failed). */
  readonly #ensured = new WeakMap<Docker, Promise<void>>();

  constructor(executor: ExecutorBuild, stageRoot: string, log: ProviderLog) {
    this.#executor = executor;
    this.#stageRoot = stageRoot;
    this.#log = log;
    this.version = `${executor.version}-node${process.versions.node}`.replace(/[^a-zA-Z0-9._-]/g, "_");
  }

  /**
   * A directory of links to what the archive holds, made once: the archive is written with links
   * followed, so it carries the files themselves.
   */
  #stage(): Promise<void> {
    this.#staged ??= (async () => {
      const dir = path.join(this.#stageRoot, this.version);
      const tmp = `${dir}.${randomBytes(6).toString("hex")}.tmp`;
      await mkdir(path.join(tmp, "bin"), { recursive: true });
      await symlink(await realpath(process.execPath), path.join(tmp, "node"));
      await symlink(this.#executor.dir, path.join(tmp, "executor"));
      await symlink(await realpath(rgPath), path.join(tmp, "bin", "rg"));
      await writeFile(path.join(tmp, "READY"), `${this.version}\n`);
      await rm(dir, { recursive: true, force: true });
      await rename(tmp, dir);
    })().catch((err: unknown) => {
      this.#staged = undefined;
      throw err;
    });
    return this.#staged;
  }

  /**
   * Makes sure the engine's volume holds this version and `current` names it. `image` is one the
   * engine has (the workspace's): the helper container is made from it, never started.
   */
  ensure(docker: Docker, image: string): Promise<void> {
    let done = this.#ensured.get(docker);
    if (done === undefined) {
      done = this.#ensure(docker, image).catch((err: unknown) => {
        this.#ensured.delete(docker);
        throw err;
      });
      this.#ensured.set(docker, done);
    }
    return done;
  }

  async #ensure(docker: Docker, image: string): Promise<void> {
    await this.#stage();
    await docker.createVolume({ Name: PAYLOAD_VOLUME, Labels: { "agent-workspace.managed": "true" } });
    const helper = await docker.createContainer({
      Image: image,
      Entrypoint: [],
      Cmd: ["true"],
      NetworkDisabled: true,
      Labels: { "agent-workspace.managed": "payload" },
      HostConfig: { NetworkMode: "none", Mounts: [{ Type: "volume", Source: PAYLOAD_VOLUME, Target: TARGET }] },
    });
    try {
      if ((await readSmallFile(helper, `${TARGET}/current/READY`))?.trim() === this.version) return;
      if ((await readSmallFile(helper, `${TARGET}/${this.version}/READY`))?.trim() !== this.version) {
        const started = Date.now();
        const v = this.version;
        // READY last: a directory without it is incomplete, and is written again.
        const archive = tarCreate({ cwd: this.#stageRoot, follow: true, portable: true }, [`${v}/bin`, `${v}/executor`, `${v}/node`, `${v}/READY`]);
        await helper.putArchive(archive as unknown as Readable, { path: TARGET });
        this.#log.info("copied the executor to a remote engine", { version: v, duration_ms: Date.now() - started });
      }
      // `current` is a link of its own, in an archive of its own (links not followed).
      const links = path.join(this.#stageRoot, `links-${randomBytes(6).toString("hex")}`);
      await mkdir(links, { recursive: true });
      try {
        await symlink(this.version, path.join(links, "current"));
        await helper.putArchive(tarCreate({ cwd: links, portable: true }, ["current"]) as unknown as Readable, { path: TARGET });
      } finally {
        await rm(links, { recursive: true, force: true });
      }
    } finally {
      await helper.remove({ force: true, v: false }).catch(() => undefined);
    }
  }
}

/** The content of a small regular file in a container, or undefined when there is none. */
async function readSmallFile(container: Docker.Container, file: string): Promise<string | undefined> {
  let stream: NodeJS.ReadableStream;
  try {
    stream = (await container.getArchive({ path: file })) as unknown as NodeJS.ReadableStream;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return undefined;
    throw err;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 1 << 20) return undefined;
    chunks.push(chunk);
  }
  // One tar entry: a 512-byte header (the size in octal at 124), then the content.
  const tar = Buffer.concat(chunks);
  if (tar.length < 512 || (tar[156] !== 0x30 && tar[156] !== 0)) return undefined;
  const length = Number.parseInt(tar.subarray(124, 136).toString("ascii").replace(/\0.*$/s, "").trim(), 8);
  if (!Number.isFinite(length)) return undefined;
  return tar.subarray(512, 512 + length).toString("utf8");
}
