/**
 * The `e2b` provider through the real server, its real SDK in front of a local stand-in of E2B's
 * API (helpers/e2b-standin.ts; no run against the E2B service was possible here): a sandbox from a
 * bare template gets the executor copied in; the API key reaches neither the sandbox, nor a log
 * line, nor an error; a refused key and a sandbox killed outside the server are reported, not
 * retried forever; pause and resume map to E2B's, files kept; a sandbox left by a server is found
 * by its metadata and removed; a sandbox is kept alive while used and ends when it is not.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import anyTest, { type TestFn } from "ava";
import { Sandbox } from "e2b";
import { ErrorDetailSchema, ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { E2B_TEMPLATE, e2bEnv, startStandIn } from "./helpers/e2b.ts";
import type { E2bStandIn } from "./helpers/e2b-standin.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import { startServer } from "./helpers/server.ts";

const test = anyTest as TestFn<{ standIn: E2bStandIn }>;
const available = gate(test, await probeEngines(), "docker", "e2b provider (its stand-in's sandboxes are containers)");

/** Polls `read` every 200 ms for up to `ms` until `done` holds; returns the last value. */
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
}

if (available) {
  test.before(async (t) => {
    t.context.standIn = await startStandIn();
  });
  test.after.always(async (t) => {
    await t.context.standIn?.close();
  });

  test.serial("a sandbox from a bare template gets the executor copied in; every tool works in it; the API key reaches no sandbox, log line or reply", async (t) => {
    const { standIn } = t.context;
    const logs: string[] = [];
    const server = await startServer({ env: e2bEnv(standIn, "base"), onLog: (l) => logs.push(l) });
    try {
      const c = server.clients.grpc;
      const { workspace } = await c.workspaces.createWorkspace({ provider: "e2b" });
      const ws = workspace!.id;
      t.true(logs.some((l) => l.includes('"msg":"copied the executor into an E2B sandbox"')));
      const details = (await c.workspaces.getWorkspace({ id: ws })).workspace?.providerDetails ?? {};
      t.true(standIn.sandboxes().has(details.sandboxId ?? ""), "the workspace names its sandbox");
      t.is(details.template, "base");
      await c.tools.writeFile({ workspaceId: ws, path: "a.txt", content: "alpha\nbeta\n" });
      const r = await c.tools.bash({ workspaceId: ws, command: "id -u; pwd; cat a.txt | wc -l; env" });
      const [uid, cwd, lines] = r.stdout.split("\n");
      t.deepEqual([uid, cwd, lines], ["1000", "/workspace", "2"]);
      t.false(r.stdout.includes(standIn.apiKey), "the key is not in the sandbox's environment");
      const grep = await c.tools.grep({ workspaceId: ws, pattern: "bet" });
      t.is(grep.matches.length, 1);
      // Binary-safe both ways across the text channel.
      const big = await c.tools.bash({ workspaceId: ws, command: "head -c 3000000 /dev/urandom > r.bin && sha256sum r.bin | cut -c1-64 && base64 -w0 r.bin | head -c 8" });
      t.regex(big.stdout, /^[0-9a-f]{64}\n/);
      t.is((await c.tools.readFile({ workspaceId: ws, path: "a.txt" })).content, "1: alpha\n2: beta");
      await c.workspaces.deleteWorkspace({ id: ws });
      t.false(standIn.sandboxes().has(details.sandboxId ?? ""), "deleting the workspace kills its sandbox");
      t.false(logs.join("\n").includes(standIn.apiKey), "the key is in no log line");
    } finally {
      await server.close();
    }
  });

  test.serial("a key E2B refuses: CreateWorkspace is UNAVAILABLE / PROVIDER_UNAVAILABLE saying so, without the key; the server keeps serving", async (t) => {
    const { standIn } = t.context;
    const wrong = "e2b_wrong_key_0123456789";
    const logs: string[] = [];
    const server = await startServer({ env: { ...e2bEnv(standIn), E2B_API_KEY: wrong }, onLog: (l) => logs.push(l) });
    try {
      const c = server.clients.grpc;
      const err = await t.throwsAsync(c.workspaces.createWorkspace({ provider: "e2b" }));
      const e = err as unknown as { code: number; message: string; findDetails: (s: unknown) => Array<{ reason: number }> };
      t.is(e.code, Code.Unavailable);
      t.is(e.findDetails(ErrorDetailSchema)[0]?.reason, ErrorReason.PROVIDER_UNAVAILABLE);
      t.regex(e.message, /E2B refused the server's API key/);
      t.false(e.message.includes(wrong));
      t.false(logs.join("\n").includes(wrong), "the key is in no log line");
      t.truthy((await c.workspaces.createWorkspace({ provider: "local" })).workspace?.id);
    } finally {
      await server.close();
    }
  });

  test.serial("pause and resume are E2B's: the paused sandbox's container is frozen, the next call resumes it with its files; a sandbox killed outside the server is reported gone", async (t) => {
    const { standIn } = t.context;
    const server = await startServer({ env: e2bEnv(standIn) });
    try {
      const c = server.clients.grpc;
      const ws = (await c.workspaces.createWorkspace({ provider: "e2b" })).workspace!.id;
      const sandboxId = (await c.workspaces.getWorkspace({ id: ws })).workspace!.providerDetails.sandboxId;
      await c.tools.writeFile({ workspaceId: ws, path: "kept.txt", content: "kept\n" });
      t.is((await c.workspaces.pauseWorkspace({ id: ws })).workspace?.status, WorkspaceStatus.PAUSED);
      t.is((await Sandbox.getInfo(sandboxId, standIn.sdkOptions)).state, "paused");
      t.is((await c.tools.bash({ workspaceId: ws, command: "cat kept.txt" })).stdout, "kept\n");
      t.is((await Sandbox.getInfo(sandboxId, standIn.sdkOptions)).state, "running");
      // Killed behind the server's back: its status says so, and calls fail at once.
      await Sandbox.kill(sandboxId, standIn.sdkOptions);
      const view = await until(
        async () => (await c.workspaces.getWorkspace({ id: ws })).workspace,
        (w) => w?.status === WorkspaceStatus.FAILED,
        5000,
      );
      t.is(view?.status, WorkspaceStatus.FAILED);
      t.regex(view?.statusMessage ?? "", /E2B sandbox is gone/);
      await c.workspaces.deleteWorkspace({ id: ws });
    } finally {
      await server.close();
    }
  });

  test.serial("a sandbox a server left behind (its metadata names this server and a workspace it has no record of) is removed at start with AGENT_WORKSPACE_CLEANUP_ORPHANS=1", async (t) => {
    const { standIn } = t.context;
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-e2b-orphans-"));
    const instance = "0123456789abcdef";
    await writeFile(path.join(dataDir, "instance-id"), `${instance}\n`);
    const left = await Sandbox.create(E2B_TEMPLATE, { ...standIn.sdkOptions, metadata: { "agent-workspace.instance": instance, "agent-workspace.workspace": "ws-0000000000000000" } });
    const other = await Sandbox.create(E2B_TEMPLATE, { ...standIn.sdkOptions, metadata: { "agent-workspace.instance": "fedcba9876543210", "agent-workspace.workspace": "ws-1111111111111111" } });
    const logs: string[] = [];
    const server = await startServer({ dataDir, env: { ...e2bEnv(standIn), AGENT_WORKSPACE_CLEANUP_ORPHANS: "1" }, onLog: (l) => logs.push(l) });
    try {
      t.false(await until(async () => standIn.sandboxes().has(left.sandboxId), (v) => !v, 10_000), "this server's orphan is removed");
      t.true(standIn.sandboxes().has(other.sandboxId), "another server's sandbox is left alone");
      t.true(logs.some((l) => l.includes('"msg":"removing orphaned workspace sandbox"') && l.includes("ws-0000000000000000")));
    } finally {
      await server.close();
      await Sandbox.kill(other.sandboxId, standIn.sdkOptions).catch(() => undefined);
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  test.serial("a sandbox is kept alive while it is used, beyond its timeout, and ends once unused for longer; the workspace then reports it gone", async (t) => {
    const { standIn } = t.context;
    const server = await startServer({ env: { ...e2bEnv(standIn), AGENT_WORKSPACE_E2B_TIMEOUT_MS: "10000" } });
    try {
      const c = server.clients.grpc;
      const ws = (await c.workspaces.createWorkspace({ provider: "e2b" })).workspace!.id;
      const sandboxId = (await c.workspaces.getWorkspace({ id: ws })).workspace!.providerDetails.sandboxId;
      const until15 = Date.now() + 15_000;
      while (Date.now() < until15) {
        t.is((await c.tools.bash({ workspaceId: ws, command: "echo on" })).stdout, "on\n");
        await new Promise((r) => setTimeout(r, 2000));
      }
      t.true(standIn.sandboxes().has(sandboxId), "used past its 10 s timeout, it lives");
      t.false(await until(async () => standIn.sandboxes().has(sandboxId), (v) => !v, 20_000), "unused, it ends");
      const view = (await c.workspaces.getWorkspace({ id: ws })).workspace;
      t.is(view?.status, WorkspaceStatus.FAILED);
      await c.workspaces.deleteWorkspace({ id: ws });
    } finally {
      await server.close();
    }
  });
}
