/**
 * `node bench/idle-memory-timeline.ts [--provider=gvisor|docker] [--workspaces=5] [--seconds=240] [--every=15]`:
 * how the memory of idle container workspaces develops over minutes, next to bare sandboxes, where
 * section (h) takes one snapshot seconds after creation. A server with
 * AGENT_WORKSPACE_EXECUTOR_IDLE_MS=1000 creates the workspaces (their executors exit after a
 * second); beside them run as many raw `sleep infinity` containers of the same image and runtime
 * (what (h) compares with), and as many `sleep infinity` containers given the first workspace's
 * mounts (its binds and bind mounts besides the volume), which tells the sandbox's cost for those
 * mounts from what the executor's run left behind. Prints each sample (docker stats usage − cache,
 * the mean per container). Everything it made is removed at the end, also on a failure.
 */
import type Docker from "dockerode";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { containerMemoryBytes, dockerClient, findContainer, providerContainerSpec, type RawContainer, startRawContainer } from "./docker.ts";
import { createClients, startServerProcess } from "./server-process.ts";

const { values } = parseArgs({ options: { provider: { type: "string", default: "gvisor" }, workspaces: { type: "string", default: "5" }, seconds: { type: "string", default: "240" }, every: { type: "string", default: "15" } } });
const provider = values.provider!;
const n = Number(values.workspaces);

const data = await mkdtemp(path.join(os.tmpdir(), "aw-idle-timeline-"));
const server = await startServerProcess({ dataDir: data, env: { AGENT_WORKSPACE_EXECUTOR_IDLE_MS: "1000" } });
const clients = createClients(server.url);
const docker = dockerClient();
const ids: string[] = [];
const raws: RawContainer[] = [];
const mounted: Docker.Container[] = [];
const meanMiB = async (containers: Docker.Container[]) => (await Promise.all(containers.map(containerMemoryBytes))).reduce((a, b) => a + b, 0) / containers.length / 2 ** 20;
try {
  for (let i = 0; i < n; i++) ids.push((await clients.grpc.workspaces.createWorkspace({ provider })).workspace!.id);
  const ours = await Promise.all(
    ids.map(async (id) => {
      const c = await findContainer(docker, id);
      if (!c) throw new Error(`container of workspace ${id} not found`);
      return c;
    }),
  );
  for (let i = 0; i < n; i++) raws.push(await startRawContainer(docker, providerContainerSpec(provider)));
  const info = await ours[0].inspect();
  const binds = info.HostConfig.Binds ?? [];
  const mounts = (info.Mounts ?? [])
    .filter((m) => m.Type === "bind" && !binds.some((b) => b.split(":")[1] === m.Destination))
    .map((m) => ({ Type: "bind" as const, Source: m.Source, Target: m.Destination, ReadOnly: !m.RW }));
  console.log(`mounts given to the third set: binds ${JSON.stringify(binds.map((b) => b.split(":")[1]))}, bind mounts ${JSON.stringify(mounts.map((m) => m.Target))}`);
  for (let i = 0; i < n; i++) {
    const c = await docker.createContainer({
      Image: info.Config.Image,
      Cmd: ["sleep", "infinity"],
      Entrypoint: [],
      NetworkDisabled: true,
      Labels: { "agent-workspace.bench-raw": "true" },
      HostConfig: { NetworkMode: "none", Runtime: info.HostConfig.Runtime, ReadonlyRootfs: info.HostConfig.ReadonlyRootfs, Binds: binds, Mounts: mounts },
    });
    mounted.push(c);
    await c.start();
  }
  const t0 = Date.now();
  for (let s = 0; s <= Number(values.seconds); s += Number(values.every)) {
    await new Promise((r) => setTimeout(r, Math.max(0, t0 + s * 1000 - Date.now())));
    const [o, r, m] = [await meanMiB(ours), await meanMiB(raws.map((x) => docker.getContainer(x.id))), await meanMiB(mounted)];
    console.log(`${provider} ${String(s).padStart(4)} s: workspace ${o.toFixed(2)} MiB, raw sleep ${r.toFixed(2)}, sleep with our mounts ${m.toFixed(2)}; beyond raw ${(o - r).toFixed(2)}, beyond sleep with mounts ${(o - m).toFixed(2)}`);
  }
} finally {
  for (const c of mounted) await c.remove({ force: true }).catch(() => undefined);
  for (const r of raws) await r.remove();
  for (const id of ids) await clients.grpc.workspaces.deleteWorkspace({ id }).catch(() => undefined);
  clients.close();
  await server.stop();
  await rm(data, { recursive: true, force: true });
}
