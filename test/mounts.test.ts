/**
 * Host mounts (seed 001) through a real server on every provider: files copied in when a workspace
 * is made, with globs, byte caps, links and sensitive files handled as the seed's security rules
 * say. The attacks on them (prefix siblings, links in and out of the roots, "..", byte caps) are in
 * the red-team suite (test/red-team.test.ts).
 */
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { gate, microvmGate, probeEngines } from "./helpers/engines.ts";
import { type ClientSet, expectError, LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  dir: string;
  allowed: string;
  sibling: string;
  outside: string;
}
const test = anyTest as TestFn<Ctx>;
const engines = await probeEngines();
const PROVIDERS = ["local", ...(["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "host mounts")), ...(microvmGate(test, "host mounts") ? ["microvm"] : [])];

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-mounts-"));
  const allowed = path.join(dir, "allowed");
  const sibling = path.join(dir, "allowed-secrets");
  const outside = path.join(dir, "outside");
  for (const d of [allowed, sibling, outside, path.join(allowed, "project/src/deep"), path.join(allowed, "other")]) await mkdir(d, { recursive: true });
  await writeFile(path.join(allowed, "project/README.md"), "# project\n");
  await writeFile(path.join(allowed, "project/src/main.ts"), "export const main = 1;\n");
  await writeFile(path.join(allowed, "project/src/deep/util.ts"), "export const util = 2;\n");
  await writeFile(path.join(allowed, "project/src/main.test.ts"), "test\n");
  await writeFile(path.join(allowed, "project/.env"), "SECRET=mount-secret\n");
  await writeFile(path.join(allowed, "project/big.bin"), Buffer.alloc(64 * 1024, 7));
  await mkdir(path.join(allowed, "project/.git/hooks"), { recursive: true });
  await writeFile(path.join(allowed, "project/.git/HEAD"), "ref: refs/heads/main\n");
  await writeFile(path.join(allowed, "project/.git/config"), "[core]\n\tfsmonitor = touch /tmp/owned\n");
  await writeFile(path.join(allowed, "project/.git/hooks/pre-commit"), "#!/bin/sh\ntouch /tmp/owned\n");
  await writeFile(path.join(allowed, "other/shared.txt"), "shared inside the root\n");
  await writeFile(path.join(sibling, "token.txt"), "sibling secret\n");
  await writeFile(path.join(outside, "passwd"), "outside secret\n");
  await symlink(path.join(allowed, "other/shared.txt"), path.join(allowed, "project/link-in.txt"));
  await symlink(path.join(outside, "passwd"), path.join(allowed, "project/link-out.txt"));
  await symlink(outside, path.join(allowed, "project/dir-out"));
  await symlink("..", path.join(allowed, "project/loop"));
  execFileSync("mkfifo", [path.join(allowed, "project/pipe")]);
  // What a memory workspace cannot hold: binary content, more than 48,000 characters, odd paths.
  const deep = path.join(allowed, "textual", ...Array.from({ length: 16 }, (_, i) => `d${i}`));
  await mkdir(deep, { recursive: true });
  await writeFile(path.join(deep, "too-deep.txt"), "deep\n");
  await writeFile(path.join(allowed, "textual/ok.txt"), "plain text ✓\n");
  await writeFile(path.join(allowed, "textual/image.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00]));
  await writeFile(path.join(allowed, "textual/long.txt"), "x".repeat(48_001));
  await writeFile(path.join(allowed, "textual/café.txt"), "accent\n");
  await symlink(outside, path.join(allowed, "escape"));
  const server = await startServer({ env: { AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: allowed, AGENT_WORKSPACE_MOUNT_MAX_BYTES: "1M" } });
  t.context = { server, dir, allowed, sibling, outside };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

const mount = (m: { hostPath: string; mountPath?: string; includeGlob?: string[]; excludeGlob?: string[]; maxBytes?: bigint; followSymlinks?: boolean }) => ({
  mountPath: "",
  includeGlob: [],
  excludeGlob: [],
  maxBytes: 0n,
  followSymlinks: false,
  ...m,
});

async function read(c: ClientSet, ws: string, p: string): Promise<string> {
  return (await c.tools.bash({ workspaceId: ws, command: `cat ${p} 2>&1 || echo MISSING` })).stdout;
}

test("memory: a mount copies what a memory workspace can hold and lists the rest as skipped with its reason", async (t) => {
  const c = t.context.server.clients.grpc;
  const { workspace } = await c.workspaces.createWorkspace({ provider: "memory", mounts: [mount({ hostPath: path.join(t.context.allowed, "textual") })] });
  const ws = workspace!.id;
  try {
    const [preview] = workspace!.mounts;
    t.is(preview.filesCopied, 1);
    t.deepEqual(preview.skipped.map((s) => `${s.path}:${s.reason}`).sort(), [
      "café.txt:path_not_supported",
      `${Array.from({ length: 16 }, (_, i) => `d${i}`).join("/")}/too-deep.txt:path_not_supported`,
      "image.png:not_text",
      "long.txt:too_long",
    ]);
    t.is((await c.tools.readFile({ workspaceId: ws, path: "textual/ok.txt" })).content, "1: plain text ✓");
    await expectError(t, c.tools.readFile({ workspaceId: ws, path: "textual/long.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
  } finally {
    await c.workspaces.deleteWorkspace({ id: ws });
  }
});

for (const provider of PROVIDERS) {
  test(`${provider}: a directory is copied with its tree; links, FIFOs and sensitive files are skipped and listed in the preview`, async (t) => {
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider, mounts: [mount({ hostPath: path.join(t.context.allowed, "project"), excludeGlob: ["**/*.bin"] })] });
    const ws = workspace!.id;
    try {
      const [preview] = workspace!.mounts;
      t.is(preview.mountPath, "project");
      t.is(preview.hostPath, path.join(t.context.allowed, "project"));
      t.is(preview.filesCopied, 5);
      t.deepEqual(preview.skipped.map((s) => `${s.path}:${s.reason}`).sort(), [
        ".env:sensitive",
        ".git/config:write_protected",
        ".git/hooks/pre-commit:write_protected",
        "dir-out:symlink",
        "link-in.txt:symlink",
        "link-out.txt:symlink",
        "loop:symlink",
        "pipe:not_regular",
      ]);
      t.is(await read(c, ws, "project/.git/HEAD"), "ref: refs/heads/main\n");
      t.is(await read(c, ws, "project/src/deep/util.ts"), "export const util = 2;\n");
      t.is(await read(c, ws, "project/README.md"), "# project\n");
      t.false((await c.tools.bash({ workspaceId: ws, command: "ls -a project" })).stdout.split("\n").includes(".env"));
      t.regex(await read(c, ws, "project/big.bin"), /MISSING/);
      t.regex(await read(c, ws, "project/link-out.txt"), /MISSING/);
      // The preview is kept on the workspace.
      const { workspace: again } = await c.workspaces.getWorkspace({ id: ws });
      t.is(again!.mounts[0]?.filesCopied, 5);
      // The copy is the agent's: changing it leaves the host alone.
      await c.tools.writeFile({ workspaceId: ws, path: "project/README.md", content: "changed\n" });
      t.is(execFileSync("cat", [path.join(t.context.allowed, "project/README.md")], { encoding: "utf8" }), "# project\n");
    } finally {
      await c.workspaces.deleteWorkspace({ id: ws });
    }
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: include globs, a file mount, mount_path, and follow_symlinks inside the roots only`, async (t) => {
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({
      provider,
      mounts: [
        mount({ hostPath: "project", mountPath: "code", includeGlob: ["src/**/*.ts"], excludeGlob: ["**/*.test.ts"] }),
        mount({ hostPath: path.join(t.context.allowed, "other/shared.txt"), mountPath: "/workspace/cfg/shared.txt" }),
        mount({ hostPath: path.join(t.context.allowed, "project"), mountPath: "followed", followSymlinks: true, includeGlob: ["link-*", "dir-out/**"] }),
      ],
    });
    const ws = workspace!.id;
    try {
      t.deepEqual((await c.tools.glob({ workspaceId: ws, pattern: "code/**" })).paths.sort(), ["code/src/deep/util.ts", "code/src/main.ts"]);
      t.is(await read(c, ws, "cfg/shared.txt"), "shared inside the root\n");
      const followed = workspace!.mounts[2];
      t.is(await read(c, ws, "followed/link-in.txt"), "shared inside the root\n");
      t.regex(await read(c, ws, "followed/link-out.txt"), /MISSING/);
      t.deepEqual(followed.skipped.map((s) => `${s.path}:${s.reason}`).sort(), ["dir-out:outside_roots", "link-out.txt:outside_roots"]);
    } finally {
      await c.workspaces.deleteWorkspace({ id: ws });
    }
  });
}

test("a server without allowed roots refuses every mount; sessions copy the agent type's mounts and their own", async (t) => {
  const closed = await startServer({ env: LOCAL_ONLY });
  try {
    await expectError(t, closed.clients.grpc.workspaces.createWorkspace({ mounts: [mount({ hostPath: t.context.allowed })] }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED);
  } finally {
    await closed.close();
  }
  const c = t.context.server.clients.grpc;
  await c.config.createAgentType({
    agentType: { id: "mounting", workspace: { enabled: true, tools: ["bash", "read"], mounts: [mount({ hostPath: "other", mountPath: "ref" })] } },
  });
  const started = await c.workspaces.startSession({ agentType: "mounting", task: {}, mounts: [mount({ hostPath: "project/src", mountPath: "src" })] });
  const { session } = await watchUntilReady(c, started.session!.id, 60_000);
  t.is(session.status, SessionStatus.ACTIVE, session.statusMessage);
  t.is(await read(c, session.workspaceId, "ref/shared.txt"), "shared inside the root\n");
  t.is(await read(c, session.workspaceId, "src/main.ts"), "export const main = 1;\n");
  const { workspace } = await c.workspaces.getWorkspace({ id: session.workspaceId });
  t.deepEqual(workspace!.mounts.map((m) => m.mountPath), ["ref", "src"]);
  await expectError(t, c.workspaces.startSession({ agentType: "mounting", task: {}, mounts: [mount({ hostPath: t.context.sibling })] }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED);
  await c.workspaces.endSession({ id: session.id });
});

test("a mount that outgrows the workspace's disk while it is copied fails whole: RESOURCE_EXHAUSTED, no workspace left, the server serving", async (t) => {
  // 400 files of 47,000 characters (about 19 MB) against a 16M disk: the copy, several writes in
  // flight, runs out of room part-way; every provider that bounds its disk must fail it as a whole.
  const root = path.join(t.context.dir, "big-allowed");
  await mkdir(path.join(root, "tree"), { recursive: true });
  const line = `${"0123456789".repeat(9)}\n`.repeat(470).slice(0, 47_000);
  for (let i = 0; i < 400; i++) await writeFile(path.join(root, "tree", `f${String(i).padStart(3, "0")}.txt`), line);
  const server = await startServer({ env: { AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: root, AGENT_WORKSPACE_MOUNT_MAX_BYTES: "64M" } });
  try {
    const c = server.clients.grpc;
    for (const provider of ["memory", ...PROVIDERS.filter((p) => p !== "local")]) {
      const labels = { suite: `mount-disk-full-${provider}-${process.pid}` };
      const { detail } = await expectError(
        t,
        c.workspaces.createWorkspace({ provider, labels, limits: { cpu: "", memory: "", disk: "16M", pids: 0n }, mounts: [mount({ hostPath: path.join(root, "tree") })] }),
        Code.ResourceExhausted,
        ErrorReason.RESOURCE_EXHAUSTED,
      );
      t.regex(detail.message, /full|No space left/, provider);
      t.is((await c.workspaces.listWorkspaces({ labels, pageSize: 1000 })).workspaces.length, 0, `${provider}: nothing left behind`);
      // The same mount fits a workspace with room for it.
      const fits = (await c.workspaces.createWorkspace({ provider, labels, limits: { cpu: "", memory: "", disk: "64M", pids: 0n }, mounts: [mount({ hostPath: path.join(root, "tree") })] })).workspace!;
      t.is(fits.mounts[0].filesCopied, 400, provider);
      await c.workspaces.deleteWorkspace({ id: fits.id });
    }
  } finally {
    await server.close();
  }
});
