/**
 * Prepared images: for each base image, the image workspaces under a command allowlist run in,
 * where every program may be run only by its own group (executor/programs.ts,
 * executor/prepare-image.ts). Built once per base image (and preparation version) by running the
 * preparation in a container of the base image (root, no network, the server's Node and executor
 * mounted read-only as in every sandbox) and committing it; later workspaces reuse it, and so
 * does a restarted server (the tag names the base image's id and the version).
 *
 * No registry is involved: the engine builds it from what it has.
 */
import type Docker from "dockerode";
import { DomainError } from "../core/errors.ts";
import { createHash } from "node:crypto";
import { normalRules, PREPARE_VERSION, type ProgramRules } from "./executor/programs.ts";
import { EXECUTOR_NODE_FLAGS, type ExecutorBuild } from "./executor-build.ts";
import type { ProviderLog } from "./types.ts";

/** The repository prepared images are tagged in. */
export const PREPARED_REPOSITORY = "agent-workspace-prepared";
/** Label on a prepared image: the base image id it was made from. */
const FROM_LABEL = "agent-workspace.prepared-from";

/** Builds and finds prepared images on one engine. */
export class PreparedImages {
  readonly #docker: Docker;
  readonly #executor: ExecutorBuild;
  readonly #nodeBinary: () => Promise<string>;
  readonly #log: ProviderLog;
  readonly #building = new Map<string, Promise<string>>();

  constructor(docker: Docker, executor: ExecutorBuild, nodeBinary: () => Promise<string>, log: ProviderLog) {
    this.#docker = docker;
    this.#executor = executor;
    this.#nodeBinary = nodeBinary;
    this.#log = log;
  }

  /**
   * The prepared image for `base` (a name or id the engine knows), built now if there is none.
   * Concurrent calls for one base share one build. Throws INVALID_ARGUMENT (field `image`) when the
   * base image cannot be prepared (no setpriv, say), with what the preparation said.
   */
  async imageFor(base: string, rules?: ProgramRules): Promise<string> {
    const info = await this.#docker.getImage(base).inspect();
    const tag = `${info.Id.replace(/^sha256:/, "").slice(0, 16)}-v${PREPARE_VERSION}`;
    const prepared = await this.#once(`${PREPARED_REPOSITORY}:${tag}`, () => this.#ensure(`${PREPARED_REPOSITORY}:${tag}`, tag, info, []));
    if (rules === undefined) return prepared;
    // A layer per allowlist: its programs' commands start without setpriv (prepare-image.ts).
    const normal = normalRules(rules);
    const encoded = Buffer.from(JSON.stringify(normal)).toString("base64url");
    const layerTag = `${tag}-p${createHash("sha256").update(JSON.stringify(normal)).digest("hex").slice(0, 12)}`;
    const from = await this.#docker.getImage(prepared).inspect();
    return this.#once(`${PREPARED_REPOSITORY}:${layerTag}`, () => this.#ensure(`${PREPARED_REPOSITORY}:${layerTag}`, layerTag, from, ["--policy", encoded], info));
  }

  /** One build per image reference at a time; concurrent callers share it. */
  #once(ref: string, build: () => Promise<string>): Promise<string> {
    let pending = this.#building.get(ref);
    if (pending === undefined) {
      pending = build().finally(() => this.#building.delete(ref));
      this.#building.set(ref, pending);
    }
    return pending;
  }

  /**
   * The image `ref` made from `base` by the preparation with `args`, built unless it exists;
   * `original` is the base image a layer is ultimately made from (its configuration is kept).
   */
  async #ensure(ref: string, tag: string, base: Docker.ImageInspectInfo, args: string[], original: Docker.ImageInspectInfo = base): Promise<string> {
    const existing = await this.#docker.getImage(ref).inspect().catch(() => undefined);
    if (existing?.Config?.Labels?.[FROM_LABEL] === base.Id) return ref;
    const started = Date.now();
    const mount = "/opt/agent-workspace";
    const container = await this.#docker.createContainer({
      Image: base.Id,
      Entrypoint: [],
      Cmd: [`${mount}/node`, ...EXECUTOR_NODE_FLAGS, `${mount}/executor/${this.#executor.main.replace(/main\.(ts|js)$/, "prepare-image.$1")}`, ...args],
      User: "0:0",
      Env: ["NODE_OPTIONS="],
      NetworkDisabled: true,
      HostConfig: {
        NetworkMode: "none",
        Binds: [`${await this.#nodeBinary()}:${mount}/node:ro`, `${this.#executor.dir}:${mount}/executor:ro`],
        CapDrop: ["ALL"],
        // Changing owners and modes of every program, whoever owns it.
        CapAdd: ["CHOWN", "FOWNER", "DAC_OVERRIDE", "DAC_READ_SEARCH"],
        SecurityOpt: ["no-new-privileges"],
      },
    });
    try {
      await container.start();
      const result = (await container.wait()) as { StatusCode: number };
      const logs = (await container.logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
      const text = demux(logs);
      if (result.StatusCode !== 0) {
        throw new DomainError("INVALID_ARGUMENT", `The image cannot run commands under an allowlist: ${text.stderr.trim().slice(-500) || `its preparation exited with ${result.StatusCode}`}`, {
          metadata: { field: "image" },
        });
      }
      // The image keeps the base image's configuration (the engine fills an empty command from the
      // preparation's, so a base without one gets a shell); workspace containers name their own.
      const cmd = original.Config?.Cmd?.length ? original.Config.Cmd : ["bash"];
      await container.commit({
        _query: { container: container.id, repo: PREPARED_REPOSITORY, tag, comment: "agent-workspace: programs runnable by their own group only", changes: [`LABEL ${FROM_LABEL}=${base.Id}`] },
        _body: { ...original.Config, Cmd: cmd, Entrypoint: original.Config?.Entrypoint ?? [], Env: original.Config?.Env?.length ? original.Config.Env : ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] },
      });
      this.#log.info("prepared a workspace image for allowlists", { image: ref, from: base.Id, duration_ms: Date.now() - started, result: text.stdout.trim().slice(0, 300) });
      await this.#pruneStale().catch(() => undefined);
      return ref;
    } finally {
      await container.remove({ force: true }).catch(() => undefined);
    }
  }

  /**
   * Removes prepared images (and their layers) made from a base image that no longer has a name:
   * one scripts/build-base-image.sh replaced. Best effort: an image a container still uses stays
   * until the next build.
   */
  async #pruneStale(): Promise<void> {
    const images = await this.#docker.listImages({ filters: { reference: [`${PREPARED_REPOSITORY}`] } });
    const named = async (id: string) => ((await this.#docker.getImage(id).inspect().catch(() => undefined))?.RepoTags?.length ?? 0) > 0;
    const byId = new Map(images.map((i) => [i.Id, i]));
    /** The base image a prepared image or layer was ultimately made from. */
    const root = (id: string): string => {
      const from = byId.get(id)?.Labels?.[FROM_LABEL];
      return from !== undefined && byId.has(from) ? root(from) : (from ?? id);
    };
    const ours = images.filter((i) => i.Labels?.[FROM_LABEL] !== undefined);
    const isLayer = (i: Docker.ImageInfo) => byId.has(i.Labels?.[FROM_LABEL] ?? "");
    // Layers first, then the prepared images under them.
    for (const image of [...ours.filter(isLayer), ...ours.filter((i) => !isLayer(i))]) {
      if (await named(root(image.Id))) continue;
      for (const tag of image.RepoTags ?? []) await this.#docker.getImage(tag).remove().catch(() => undefined);
      this.#log.info("removed a prepared image of a replaced base image", { image: image.RepoTags?.[0] ?? image.Id });
    }
  }
}

/** Splits Docker's multiplexed log stream (8-byte frame headers) into stdout and stderr text. */
function demux(buf: Buffer): { stdout: string; stderr: string } {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let at = 0;
  while (at + 8 <= buf.length) {
    const len = buf.readUInt32BE(at + 4);
    const chunk = buf.subarray(at + 8, at + 8 + len);
    (buf[at] === 2 ? err : out).push(chunk);
    at += 8 + len;
  }
  return { stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") };
}
