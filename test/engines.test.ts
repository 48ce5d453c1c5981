/**
 * Several Docker engines behind one server (AGENT_WORKSPACE_DOCKER_ENGINES), through real server
 * processes and real engines: two dockerds started by the tests (helpers/remote-engine.ts), each in
 * a network namespace of its own reached only over TCP with mutual TLS, and unable to see the
 * server's files. Placement by free capacity, by an agent type's engine labels and by the gVisor
 * runtime; the tools working without any of the server's files mounted; a client certificate of
 * another CA refused; an engine killed mid-command reported, never replaced, and served again once
 * back; and two replicas on PostgreSQL sharing the engines, one taking over the other's workspace.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import test, { type ExecutionContext } from "ava";
import Docker from "dockerode";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { Engine, placeWorkspace } from "../providers/docker-engines.ts";
import { probeEngines, required } from "./helpers/engines.ts";
import { postgresGate, startPostgres, type Postgres } from "./helpers/postgres.ts";
import { startServerProcess, type ServerProcess } from "./helpers/process.ts";
import { removeRemoteEngine, remoteEngineSupport, type RemoteEngine, startRemoteEngine } from "./helpers/remote-engine.ts";
import { clientsOf, kill9 } from "./helpers/store-crash.ts";

const support = remoteEngineSupport();
const engines = await probeEngines();
const usable = support === "" && engines.docker && engines.gvisor;
const GiB = 2 ** 30;

test("placement: the engine with the largest free share after the workspace, then the fewest workspaces, then the first", (t) => {
  const e = (name: string, reservedCpus: number, reservedMemoryBytes: number, workspaces = 0) => ({ name, cpus: 4, memoryBytes: 8 * GiB, reservedCpus, reservedMemoryBytes, workspaces });
  const want = { cpus: 1, memoryBytes: GiB };
  t.is(placeWorkspace([e("a", 2, 0), e("b", 0, 0)], want)?.name, "b");
  // The scarcer resource decides: b has CPUs to spare but almost no memory.
  t.is(placeWorkspace([e("a", 2, 2 * GiB), e("b", 0, 7 * GiB)], want)?.name, "a");
  t.is(placeWorkspace([e("a", 1, 0, 3), e("b", 1, 0, 1)], want)?.name, "b");
  t.is(placeWorkspace([e("a", 1, 0, 1), e("b", 1, 0, 1)], want)?.name, "a");
  // Overcommitted engines still compare (shares below zero), and an engine reporting nothing counts as free.
  t.is(placeWorkspace([e("a", 12, 0), e("b", 9, 0)], want)?.name, "b");
  t.is(placeWorkspace([{ ...e("a", 3, 0), cpus: 0, memoryBytes: 0 }, e("b", 0, 0)], want)?.name, "a");
  t.is(placeWorkspace([], want), undefined);
});

// The race a real engine's outage test cannot pin down (it retries while the engine restarts):
// a check begun while the engine was down, still in flight when a call comes after the engine is
// back. The call must not take that check's failure as its own answer. Only the engine's ping and
// info are played here, each answered when the test says.
test("ensureUp: a check begun before the engine came back fails, and the call checks again and goes through", async (t) => {
  const pings: Array<PromiseWithResolvers<void>> = [];
  const docker = {
    ping: () => {
      const p = Promise.withResolvers<void>();
      pings.push(p);
      return p.promise;
    },
    info: async () => ({ NCPU: 2, MemTotal: GiB, Runtimes: { runc: {} } }),
  } as unknown as Docker;
  const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
  const engine = new Engine("e1", {}, docker, "test", quiet);
  // Down: its first check is refused.
  const first = engine.check();
  pings[0].reject(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
  t.false(await first);
  t.false(engine.up);
  // A periodic check starts while it is still down ...
  const periodic = engine.check();
  // ... the engine comes back, and a call arrives while that check is still in flight.
  const call = engine.ensureUp();
  pings[1].reject(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
  t.false(await periodic);
  // The call's own check: a new ping, which the engine now answers.
  await new Promise((r) => setImmediate(r));
  t.is(pings.length, 3, "the call pinged again instead of sharing the failed check");
  pings[2].resolve();
  await t.notThrowsAsync(call);
  t.true(engine.up);
  t.is(engine.cpus, 2);
  // Up: a call costs no ping at all.
  await engine.ensureUp();
  t.is(pings.length, 3);
  // Down again, with no check in flight: the call checks, and fails with the engine's error.
  engine.markDown(new Error("gone"));
  const refused = engine.ensureUp();
  await new Promise((r) => setImmediate(r));
  pings[3].reject(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
  const err = await t.throwsAsync(refused);
  t.regex(String(err?.message), /The Docker engine 'e1' is not answering/);
});

if (!usable) {
  const why = support || engines.reason.gvisor || engines.reason.docker;
  if (required("docker")) test("remote engines can be started (required in CI)", (t) => t.fail(why));
  else test.skip(`remote engines (${why})`, () => {});
} else {
  let e2: RemoteEngine;
  let e3: RemoteEngine;
  test.before(async () => {
    [e2, e3] = await Promise.all([startRemoteEngine(2), startRemoteEngine(3, { runsc: true })]);
  });
  test.after.always(async () => {
    await Promise.all([e2 && removeRemoteEngine(e2, 2), e3 && removeRemoteEngine(e3, 3)]);
  });

  /** The engines' configuration: e2 (zone a), e3 (zone b, gVisor), and e2 again under a client certificate it must refuse (zone c). */
  const enginesEnv = () =>
    JSON.stringify([
      { name: "e2", host: e2.url, tls: e2.certDir, labels: { zone: "a" } },
      { name: "e3", host: e3.url, tls: e3.certDir, labels: { zone: "b", gvisor: "yes" } },
      { name: "impostor", host: e2.url, tls: e2.wrongCertDir, labels: { zone: "c" } },
    ]);

  async function withServers<T>(
    count: number,
    env: Record<string, string>,
    fn: (servers: ServerProcess[], clients: Array<ReturnType<typeof clientsOf>>) => Promise<T>,
    afterFirst?: (clients: ReturnType<typeof clientsOf>) => Promise<void>,
  ): Promise<T> {
    const dirs: string[] = [];
    const servers: ServerProcess[] = [];
    const clients: Array<ReturnType<typeof clientsOf>> = [];
    try {
      for (let i = 0; i < count; i++) {
        const dataDir = await mkdtemp(path.join(tmpdir(), "aw-engines-"));
        dirs.push(dataDir);
        servers.push(await startServerProcess({ dataDir, startTimeoutMs: 60_000, env: { AGENT_WORKSPACE_DOCKER: "on", AGENT_WORKSPACE_DOCKER_ENGINES: enginesEnv(), ...env } }));
        clients.push(clientsOf(servers[i]!.url));
        if (i === 0) await afterFirst?.(clients[0]!);
      }
      return await fn(servers, clients);
    } finally {
      for (const c of clients) c.close();
      for (const s of servers) await kill9(s);
      // The next test starts on empty engines (placement counts every workspace container).
      for (const engine of [e2, e3]) {
        for (const c of await engine.admin.listContainers({ all: true }).catch(() => [])) await engine.admin.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined);
      }
      for (const d of dirs) await rm(d, { recursive: true, force: true });
    }
  }

  const engineOf = (ws: { providerDetails: Record<string, string> } | undefined) => ws?.providerDetails.engine;

  function unavailable(t: ExecutionContext, err: unknown): Record<string, string> {
    t.true(err instanceof ConnectError, String(err));
    const e = err as ConnectError;
    t.is(e.code, Code.Unavailable, e.message);
    const detail = e.findDetails(ErrorDetailSchema)[0];
    t.is(detail?.reason, ErrorReason.PROVIDER_UNAVAILABLE, e.message);
    return detail?.metadata ?? {};
  }

  test.serial("two engines over mutual TLS: workspaces spread by free capacity, agent types' engine labels and the gVisor runtime constrain placement, and every tool works with none of the server's files mounted", async (t) => {
    await withServers(1, {}, async ([server], [c]) => {
      // Equal engines: the first; then the other, which has more room left.
      const first = (await c!.workspaces.createWorkspace({ provider: "docker", limits: { cpu: "2", memory: "512M" } })).workspace;
      const second = (await c!.workspaces.createWorkspace({ provider: "docker", limits: { cpu: "2", memory: "512M" } })).workspace;
      t.is(engineOf(first), "e2");
      t.is(engineOf(second), "e3");
      // The engines hold what the server says, and each container carries its reservation.
      const on = async (engine: RemoteEngine, id: string) => (await engine.admin.listContainers({ all: true, filters: { label: [`agent-workspace.workspace-id=${id}`] } }))[0];
      t.is((await on(e2, first!.id))?.Labels["agent-workspace.cpus"], "2");
      t.truthy(await on(e3, second!.id));
      t.falsy(await on(e3, first!.id));
      // An agent type pinned to zone b lands there even though e3 is the fuller one now (a third workspace on e2 first).
      await c!.workspaces.createWorkspace({ provider: "docker", limits: { cpu: "1" } });
      await c!.config.createAgentType({ agentType: { id: "zoned", workspace: { enabled: true, provider: "docker", tools: ["bash", "read", "write", "grep"], engineLabels: { zone: "b" } } } });
      const zoned = (await c!.workspaces.createWorkspace({ agentType: "zoned", limits: { cpu: "2" } })).workspace;
      t.is(engineOf(zoned), "e3");
      // gVisor only where runsc is registered.
      for (let i = 0; i < 2; i++) t.is(engineOf((await c!.workspaces.createWorkspace({ provider: "gvisor" })).workspace), "e3");
      // Labels no engine that answers carries: the impostor's certificate is refused by e2, so zone c has no engine up.
      await c!.config.createAgentType({ agentType: { id: "impostor", workspace: { enabled: true, provider: "docker", tools: ["bash"], engineLabels: { zone: "c" } } } });
      const refused = unavailable(t, await c!.workspaces.createWorkspace({ agentType: "impostor" }).catch((e: unknown) => e));
      t.is(refused.engines_down, "impostor");
      t.regex(server!.stderr(), /"msg":"docker engine down; its workspaces' calls fail until it answers again","engine":"impostor"/);
      await c!.config.createAgentType({ agentType: { id: "nowhere", workspace: { enabled: true, provider: "docker", tools: ["bash"], engineLabels: { zone: "z" } } } });
      t.regex(unavailable(t, await c!.workspaces.createWorkspace({ agentType: "nowhere" }).catch((e: unknown) => e)).engine_labels ?? "", /zone=z/);
      // The TLS refusal itself: e2 answers its own client, and refuses a certificate of another CA.
      const tls = (dir: string) => new Docker({ host: e2.url.replace(/^tcp:\/\/|:\d+$/g, ""), port: 2376, protocol: "https", ca: readFileSync(path.join(e2.certDir, "ca.pem")), cert: readFileSync(path.join(dir, "cert.pem")), key: readFileSync(path.join(dir, "key.pem")) });
      t.truthy(await tls(e2.certDir).ping());
      await t.throwsAsync(tls(e2.wrongCertDir).ping());

      // Every tool on a workspace of each engine: the executor, Node and ripgrep came through the
      // engine's API (a volume), since nothing of the server's host is visible to the engine.
      for (const ws of [first!, zoned!]) {
        const w = ws.id;
        await c!.tools.writeFile({ workspaceId: w, path: "src/a.txt", content: "needle here\n" });
        t.true((await c!.tools.readFile({ workspaceId: w, path: "src/a.txt" })).content.includes("needle here"));
        const grep = await c!.tools.grep({ workspaceId: w, pattern: "needle" });
        t.deepEqual(grep.matches.map((m) => m.path), ["src/a.txt"]);
        const bash = await c!.tools.bash({ workspaceId: w, command: "cat src/a.txt; id -u; ls /opt/agent-workspace/current" });
        t.is(bash.exitCode, 0, bash.stderr);
        t.regex(bash.stdout, /^needle here\n1000\nREADY\nbin\nexecutor\nnode\n$/);
        const container = await (ws === first ? e2 : e3).admin.getContainer((await on(ws === first ? e2 : e3, w))!.Id).inspect();
        t.deepEqual(container.HostConfig.Binds ?? [], [], "no bind mount of the server's host");
        t.deepEqual(container.Mounts.map((m) => m.Type).sort(), ["volume", "volume"]);
        // The payload is shared by every sandbox on the engine: none may change it for the others.
        const plant = await c!.tools.bash({ workspaceId: w, command: "cp /bin/true /opt/agent-workspace/current/node; touch /opt/agent-workspace/planted; ln -sfn /workspace /opt/agent-workspace/current; awk '$2 == \"/opt/agent-workspace\" {print $4}' /proc/mounts" });
        t.regex(plant.stderr, /cp: cannot create regular file '\/opt\/agent-workspace\/current\/node': (Permission denied|Read-only file system)/);
        t.regex(plant.stdout, /^ro,/);
        t.is(container.Mounts.find((m) => m.Destination === "/opt/agent-workspace")?.RW, false);
      }
      const gv = (await c!.workspaces.listWorkspaces({ provider: "gvisor" })).workspaces[0]!;
      t.regex((await c!.tools.bash({ workspaceId: gv.id, command: "dmesg | head -1" })).stdout, /gVisor/);
    });
  });

  test.serial("an engine killed mid-command: the command and later calls fail UNAVAILABLE naming it, the workspace is never made again elsewhere, new workspaces go to the other engine, and it is served again once the engine is back", async (t) => {
    await withServers(1, {}, async ([server], [c]) => {
      await c!.config.createAgentType({ agentType: { id: "zone-b", workspace: { enabled: true, provider: "docker", tools: ["bash", "read", "write"], engineLabels: { zone: "b" } } } });
      const ws = (await c!.workspaces.createWorkspace({ agentType: "zone-b" })).workspace!;
      t.is(engineOf(ws), "e3");
      await c!.tools.bash({ workspaceId: ws.id, command: "echo kept > kept.txt" });
      const running = c!.tools.bash({ workspaceId: ws.id, command: "sleep 30; echo finished" }).catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 1000));
      e3.kill();
      const mid = await running;
      t.true(mid instanceof ConnectError && mid.code === Code.Unavailable, String(mid));
      // Later calls: refused at once, naming the engine.
      const later = unavailable(t, await c!.tools.bash({ workspaceId: ws.id, command: "true" }).catch((e: unknown) => e));
      t.is(later.engine, "e3");
      for (let i = 0; i < 50 && !server!.stderr().includes('"msg":"docker engine down; its workspaces\' calls fail until it answers again","engine":"e3"'); i++) await new Promise((r) => setTimeout(r, 100));
      t.regex(server!.stderr(), /"msg":"docker engine down; its workspaces' calls fail until it answers again","engine":"e3"/);
      // New work goes to the engine that answers; the agent type pinned to the dead one is refused.
      t.is(engineOf((await c!.workspaces.createWorkspace({ provider: "docker" })).workspace), "e2");
      t.is(unavailable(t, await c!.workspaces.createWorkspace({ agentType: "zone-b" }).catch((e: unknown) => e)).engines_down, "e3");
      // Still one workspace, on e3: it was not made again anywhere.
      const listed = (await c!.workspaces.listWorkspaces({})).workspaces.filter((w) => w.agentType === "zone-b");
      t.deepEqual(listed.map((w) => [w.id, engineOf(w)]), [[ws.id, "e3"]]);
      // The engine is back: the next health check finds it, and the workspace is served with its files.
      await e3.start();
      let out: string | undefined;
      for (const deadline = Date.now() + 30_000; out === undefined && Date.now() < deadline; ) {
        out = await c!.tools.bash({ workspaceId: ws.id, command: "cat kept.txt" }).then((r) => r.stdout, () => undefined);
        if (out === undefined) await new Promise((r) => setTimeout(r, 500));
      }
      t.is(out, "kept\n");
      t.regex(server!.stderr(), /"msg":"docker engine up","engine":"e3"/);
    });
  });

  if (postgresGate(test, "two replicas on remote engines")) {
    let pg: Postgres | undefined;
    test.after.always(async () => {
      await pg?.stop();
    });
    test.serial("two replicas on PostgreSQL share the engines: a workspace on a remote engine is refused by the other replica while its server lives, and taken over with its files when it is killed", async (t) => {
      pg = await startPostgres();
      const url = await pg.createDatabase("replicas_on_engines");
      await withServers(2, { AGENT_WORKSPACE_DATABASE_URL: url }, async (servers, [a, b]) => {
        const ws = (await a!.workspaces.createWorkspace({ provider: "docker" })).workspace!;
        t.true(["e2", "e3"].includes(engineOf(ws) ?? ""));
        await a!.tools.bash({ workspaceId: ws.id, command: "echo from-a > a.txt" });
        const refused = await b!.tools.bash({ workspaceId: ws.id, command: "true" }).catch((e: unknown) => e as ConnectError);
        t.is((refused as ConnectError).findDetails(ErrorDetailSchema)[0]?.reason, ErrorReason.WORKSPACE_SERVED_ELSEWHERE);
        await kill9(servers[0]!);
        let out: string | undefined;
        for (const deadline = Date.now() + 40_000; out === undefined && Date.now() < deadline; ) {
          out = await b!.tools.bash({ workspaceId: ws.id, command: "cat a.txt" }).then((r) => r.stdout, () => undefined);
          if (out === undefined) await new Promise((r) => setTimeout(r, 250));
        }
        t.is(out, "from-a\n");
        t.is(engineOf((await b!.workspaces.getWorkspace({ id: ws.id })).workspace), engineOf(ws));
      });
    });

    test.serial("two replicas share one warm pool of remote-engine workspaces: it holds its size in all, the second server's sessions take the first's members, and sessions started on both at once never get the same workspace", async (t) => {
      pg ??= await startPostgres();
      const url = await pg.createDatabase("shared_warm_pool");
      const ready = async (c: ReturnType<typeof clientsOf>) =>
        (await c.workspaces.listWorkspaces({})).workspaces.filter((w) => w.agentType === "pooled" && w.sessionIds.length === 0 && w.status === WorkspaceStatus.READY);
      const filled = async (c: ReturnType<typeof clientsOf>) => {
        for (let i = 0; i < 150 && (await ready(c)).length < 2; i++) await new Promise((r) => setTimeout(r, 200));
        // Long enough for a second server's fill to show, had it started one.
        await new Promise((r) => setTimeout(r, 2000));
        return ready(c);
      };
      // The first server fills the pool before the second starts.
      const firsts = async (a: ReturnType<typeof clientsOf>) => {
        await a.config.createAgentType({ agentType: { id: "pooled", workspace: { enabled: true, provider: "docker", tools: ["bash"], warmPoolSize: 2 } } });
        t.is((await filled(a)).length, 2);
      };
      await withServers(
        2,
        { AGENT_WORKSPACE_DATABASE_URL: url },
        async (servers, [a, b]) => {
          const session = async (c: ReturnType<typeof clientsOf>, server: ServerProcess) => {
            const s = await c.workspaces.startSession({ agentType: "pooled" });
            const agent = clientsOf(server.url, s.sessionToken);
            try {
              t.is((await agent.tools.bash({ command: "echo served" })).stdout, "served\n");
            } finally {
              agent.close();
            }
            return s.session!;
          };
          // The second server made none, counts the first's, and fills nothing: two in all.
          const pool = await filled(b!);
          t.is(pool.length, 2, "no server fills the pool past its size");
          t.notRegex(servers[1]!.stderr(), /"msg":"warm-pool workspace ready"/);
          // Its sessions take the first server's members, and it serves them.
          const taken = [await session(b!, servers[1]!), await session(b!, servers[1]!)];
          t.true(taken.every((s) => s.fromWarmPool));
          t.deepEqual(taken.map((s) => s.workspaceId).sort(), pool.map((w) => w.id).sort());
          t.is((servers[1]!.stderr().match(/"msg":"warm-pool workspace taken from another server's pool"/g) ?? []).length, 2);
          // Refilled to two in all; then four sessions at once, two on each server, for a pool of two.
          const again = await filled(a!);
          t.is(again.length, 2);
          const raced = await Promise.all([a, b, a, b].map((c) => c!.workspaces.startSession({ agentType: "pooled" })));
          const fromPool = raced.filter((s) => s.session!.fromWarmPool).map((s) => s.session!.workspaceId);
          t.is(fromPool.length, 2, "each pooled workspace went to one session");
          t.deepEqual([...fromPool].sort(), again.map((w) => w.id).sort());
          const all = raced.map((s) => s.session!.workspaceId).filter((id) => id !== "");
          t.is(new Set(all).size, all.length, "no workspace went to two sessions");
          // Both servers found the pool short at once and refilled it: it may hold too many for a
          // while (each fills what it sees lacking), and the server whose member is beyond the size
          // drains it (a CI saw 3 members 2 s after the refills). It comes back to its size.
          // Settled: two members in all, none still being made (a fill in flight shows as one).
          const pooled = async () => (await a!.workspaces.listWorkspaces({})).workspaces.filter((w) => w.agentType === "pooled" && w.sessionIds.length === 0);
          let members = await pooled();
          for (let i = 0; i < 600 && !(members.length === 2 && members.every((w) => w.status === WorkspaceStatus.READY)); i++) {
            await new Promise((r) => setTimeout(r, 200));
            members = await pooled();
          }
          t.deepEqual(members.map((w) => WorkspaceStatus[w.status]), ["READY", "READY"], "the pool came back to its size");
        },
        firsts,
      );
    });
  }
}
