/**
 * What the e2b tests share: a local stand-in of E2B's API (e2b-standin.ts) with two templates, and
 * the server settings that point the e2b provider at it. Template "base" is the plain sandbox image
 * (the provider copies the executor in); "agent-workspace" is that image with the executor already
 * unpacked at /opt/agent-workspace/<version>, as an operator's template would have it, made once
 * per payload version by committing a container the archive was copied into.
 */
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import Docker from "dockerode";
import { create as tarCreate } from "tar";
import { PAYLOAD_DIR as E2B_PAYLOAD_DIR, SandboxPayload } from "../../providers/remote-sandbox.ts";
import { buildExecutor } from "../../providers/executor-build.ts";
import { type E2bStandIn, startE2bStandIn } from "./e2b-standin.ts";

/** The sandbox image both templates start from. */
export const E2B_BASE_IMAGE = "agent-workspace-base:bookworm";
/** The template with the executor in it. */
export const E2B_TEMPLATE = "agent-workspace";

/**
 * Makes (once per payload version) the sandbox image with the executor unpacked in it: the E2B
 * template's image here, and the image of pods that need no copy (kubernetes tests).
 */
export async function payloadImage(docker: Docker): Promise<string> {
  const stage = await mkdtemp(path.join(tmpdir(), "aw-e2b-template-"));
  const payload = new SandboxPayload(await buildExecutor(stage), stage);
  const tag = `agent-workspace-e2b-template:${payload.version.toLowerCase()}`;
  const exists = await docker
    .getImage(tag)
    .inspect()
    .then(
      () => true,
      () => false,
    );
  if (exists) return tag;
  const container = await docker.createContainer({ Image: E2B_BASE_IMAGE, Cmd: ["true"], Entrypoint: [], NetworkDisabled: true });
  try {
    // The payload directory first (the engine copies into existing directories only).
    const dirs = await mkdtemp(path.join(tmpdir(), "aw-e2b-dirs-"));
    await mkdir(path.join(dirs, path.basename(E2B_PAYLOAD_DIR)));
    await container.putArchive(tarCreate({ cwd: dirs, portable: true }, [path.basename(E2B_PAYLOAD_DIR)]) as unknown as NodeJS.ReadableStream, { path: path.dirname(E2B_PAYLOAD_DIR) });
    // The archive's paths are relative to the payload directory: copied there (the engine unpacks gzip).
    await container.putArchive(Readable.from([await payload.archive()]) as unknown as NodeJS.ReadableStream, { path: E2B_PAYLOAD_DIR });
    const readyDir = await mkdtemp(path.join(tmpdir(), "aw-e2b-ready-"));
    await mkdir(path.join(readyDir, payload.version), { recursive: true });
    await writeFile(path.join(readyDir, payload.version, "READY"), `${payload.version}\n`);
    await container.putArchive(tarCreate({ cwd: readyDir, portable: true }, [`${payload.version}/READY`]) as unknown as NodeJS.ReadableStream, { path: E2B_PAYLOAD_DIR });
    await container.commit({ repo: tag.split(":")[0], tag: tag.split(":")[1] });
  } finally {
    await container.remove({ force: true }).catch(() => undefined);
  }
  return tag;
}

/** A stand-in with the "base" and "agent-workspace" templates. */
export async function startStandIn(): Promise<E2bStandIn> {
  const docker = new Docker();
  return startE2bStandIn({ image: E2B_BASE_IMAGE, docker, templates: { [E2B_TEMPLATE]: await payloadImage(docker) } });
}

/** The server's environment for the e2b provider on `standIn`, template `template`. */
export function e2bEnv(standIn: E2bStandIn, template = E2B_TEMPLATE): Record<string, string> {
  return {
    E2B_API_KEY: standIn.apiKey,
    AGENT_WORKSPACE_E2B_API_URL: standIn.apiUrl,
    AGENT_WORKSPACE_E2B_SANDBOX_URL: standIn.sandboxUrl,
    AGENT_WORKSPACE_E2B_TEMPLATE: template,
  };
}
