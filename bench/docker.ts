/**
 * Raw Docker access for the container baselines (dockerode, no server in between): the engine
 * client, a workspace's container, a raw exec, a bare `sleep infinity` container of the same image
 * and runtime as the providers', and a container's memory as `docker stats` reports it.
 */
import { randomBytes } from "node:crypto";
import { PassThrough, type Duplex } from "node:stream";
import Docker from "dockerode";
import { parseSettings } from "../server/settings.ts";

/** Label the container providers put on each workspace container. */
export const WORKSPACE_LABEL = "agent-workspace.workspace-id";
/** Label of the raw containers and volumes the benchmark creates itself. */
const RAW_LABEL = "agent-workspace.bench-raw";
/** Where a workspace's files are inside its container. */
export const CONTAINER_WORKSPACE = "/workspace";
/** ripgrep as the providers mount it into each workspace container. */
export const CONTAINER_RG = "/opt/agent-workspace/bin/rg";

/** The engine client, found as the server finds it (DOCKER_SOCKET, DOCKER_HOST, the default socket). */
export function dockerClient(): Docker {
  return process.env.DOCKER_HOST && !process.env.DOCKER_SOCKET ? new Docker() : new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });
}

/** What a container provider runs its workspaces with: image, OCI runtime, sandbox user. */
export function providerContainerSpec(provider: string): { image: string; runtime: string | undefined; user: string } {
  const { docker } = parseSettings(process.env, []).providers;
  return { image: docker.image, runtime: provider === "gvisor" ? "runsc" : undefined, user: `${docker.user.uid}:${docker.user.gid}` };
}

/** The container of a workspace, found by its label; undefined when there is none. */
export async function findContainer(docker: Docker, workspaceId: string): Promise<Docker.Container | undefined> {
  try {
    const list = await docker.listContainers({ all: true, filters: { label: [`${WORKSPACE_LABEL}=${workspaceId}`] } });
    return list[0] ? docker.getContainer(list[0].Id) : undefined;
  } catch {
    return undefined;
  }
}

/** A raw Docker exec (create, start attached, drain, inspect); resolves to its exit code and stdout. */
export async function dockerExec(container: Docker.Container, cmd: string[], options: { user?: string; workdir?: string } = {}): Promise<{ exitCode: number; stdout: string }> {
  const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true, User: options.user, WorkingDir: options.workdir });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  const stdout = new PassThrough();
  const chunks: Buffer[] = [];
  stdout.on("data", (c: Buffer) => chunks.push(c));
  (container.modem as { demuxStream(s: Duplex, out: PassThrough, err: PassThrough): void }).demuxStream(stream, stdout, new PassThrough().resume());
  await new Promise<void>((resolve, reject) => {
    stream.once("end", () => resolve());
    stream.once("close", () => resolve());
    stream.once("error", reject);
  });
  const info = await exec.inspect();
  stream.destroy();
  return { exitCode: info.ExitCode ?? -1, stdout: Buffer.concat(chunks).toString("utf8") };
}

/** A raw container the benchmark made; `remove` deletes it and its volume and never throws. */
export interface RawContainer {
  id: string;
  remove(): Promise<void>;
}

/** Raw containers not yet removed, so an interrupted run can still remove them. */
export const liveRawContainers = new Set<RawContainer>();

/**
 * Creates and starts a bare container of `image` on `runtime` running `sleep infinity`, with the
 * providers' essentials: no network and a fresh named volume on /workspace.
 */
export async function startRawContainer(docker: Docker, spec: { image: string; runtime: string | undefined }): Promise<RawContainer> {
  const name = `aw-bench-raw-${randomBytes(6).toString("hex")}`;
  const labels = { [RAW_LABEL]: "true" };
  await docker.createVolume({ Name: name, Labels: labels });
  let container: Docker.Container | undefined;
  const raw: RawContainer = {
    id: "",
    async remove() {
      liveRawContainers.delete(raw);
      await container?.remove({ force: true, v: true }).catch(() => undefined);
      await docker.getVolume(name).remove().catch(() => undefined);
    },
  };
  liveRawContainers.add(raw);
  try {
    container = await docker.createContainer({
      name,
      Image: spec.image,
      Cmd: ["sleep", "infinity"],
      Entrypoint: [],
      Labels: labels,
      NetworkDisabled: true,
      HostConfig: { NetworkMode: "none", Runtime: spec.runtime, Mounts: [{ Type: "volume", Source: name, Target: CONTAINER_WORKSPACE }] },
    });
    raw.id = container.id;
    await container.start();
  } catch (err) {
    await raw.remove();
    throw err;
  }
  return raw;
}

/** A container's memory as `docker stats` counts it: usage minus page cache (one-shot stats). */
export async function containerMemoryBytes(container: Docker.Container): Promise<number> {
  const { memory_stats: m } = await container.stats({ stream: false, "one-shot": true });
  const stats = (m.stats ?? {}) as Record<string, number | undefined>;
  // cgroup v1 reports `cache`; under cgroup v2 the CLI subtracts `inactive_file` instead.
  const cache = stats.cache ?? stats.inactive_file ?? 0;
  return m.usage - cache;
}
