/**
 * The `microvm` provider through the real server: a QEMU microvm per workspace booting the image
 * scripts/build-vm-image.sh built (under TCG on these machines). The seed's provider scenarios
 * against gVisor, what the sandbox user can reach inside the guest, the limits, a server restart,
 * a killed QEMU and deletion. Tests run one after another: each cold boot costs seconds of both
 * cores under emulation.
 */
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, readdir, readFile, rm, stat, truncate } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { WorkspaceStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { gate, MICROVM_IMAGES, microvmGate, probeEngines } from "./helpers/engines.ts";
import { alive, waitDead } from "./helpers/process.ts";
import { type ClientSet, startServer, type TestServer } from "./helpers/server.ts";

const test = anyTest as TestFn<{ server: TestServer }>;
const run = microvmGate(test, "provider");

/** The workspace's QEMU pid, from its pid file. */
async function qemuPid(server: TestServer, id: string): Promise<number> {
  return Number((await readFile(path.join(server.dataDir, "microvm", id, "qemu.pid"), "utf8")).trim());
}

/**
 * A connection to a VM's channel the guest answered (`aw-sync`, then `aw-ready` with its nonce),
 * made again when unanswered in 5 s: the guest may not have seen the last connection close yet.
 */
async function syncedChannel(channel: string): Promise<net.Socket> {
  for (let attempt = 1; ; attempt++) {
    const socket = net.createConnection(channel);
    await once(socket, "connect");
    const nonce = randomBytes(8).toString("hex");
    const answered = await new Promise<boolean>((resolve) => {
      let seen = "";
      const timer = setTimeout(() => resolve(false), 5000);
      socket.on("data", (d: Buffer) => {
        seen += d.toString("latin1");
        if (seen.includes(`aw-ready ${nonce}`)) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      socket.write(`aw-sync ${nonce} ${Date.now()} ${randomBytes(32).toString("hex")}\n`);
    });
    if (answered) return socket;
    socket.destroy();
    if (attempt === 6) throw new Error(`the guest did not answer on ${channel}`);
  }
}

async function bootId(c: ClientSet, id: string): Promise<string> {
  const r = await c.tools.bash({ workspaceId: id, command: "cat /proc/sys/kernel/random/boot_id" });
  return r.stdout.trim();
}

if (run) {
  test.before(async (t) => {
    t.context.server = await startServer({ env: { AGENT_WORKSPACE_DOCKER: "auto", AGENT_WORKSPACE_MICROVM_IMAGES: MICROVM_IMAGES } });
  });
  test.after.always(async (t) => {
    await t.context.server?.close();
  });

  test.serial("microvm: the seed's provider scenarios answer exactly as on gVisor (same Bash response, same formatted file)", async (t) => {
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider: "microvm" });
    const vm = workspace!.id;
    t.is(workspace!.provider, "microvm");
    t.is(workspace!.status, WorkspaceStatus.READY);
    t.regex(workspace!.providerDetails.accel ?? "", /^(kvm|tcg)$/);
    const engines = await probeEngines();
    const hello = await c.tools.bash({ workspaceId: vm, command: 'echo "hello"' });
    t.deepEqual({ stdout: hello.stdout, stderr: hello.stderr, exitCode: hello.exitCode }, { stdout: "hello\n", stderr: "", exitCode: 0 });
    const content = "first line\n\tsecond, tabbed\nthird ünïcode\n\nfifth after a blank\n";
    await c.tools.writeFile({ workspaceId: vm, path: "src/notes.txt", content });
    const fromVm = await c.tools.readFile({ workspaceId: vm, path: "src/notes.txt" });
    t.true(fromVm.content.startsWith("1: first line"), fromVm.content);
    if (engines.gvisor) {
      const gv = (await c.workspaces.createWorkspace({ provider: "gvisor" })).workspace!.id;
      try {
        const other = await c.tools.bash({ workspaceId: gv, command: 'echo "hello"' });
        t.deepEqual({ stdout: hello.stdout, stderr: hello.stderr, exitCode: hello.exitCode, signal: hello.signal, truncated: hello.stdoutTruncated }, { stdout: other.stdout, stderr: other.stderr, exitCode: other.exitCode, signal: other.signal, truncated: other.stdoutTruncated });
        await c.tools.writeFile({ workspaceId: gv, path: "src/notes.txt", content });
        const fromGv = await c.tools.readFile({ workspaceId: gv, path: "src/notes.txt" });
        t.is(fromVm.content, fromGv.content);
        t.is(fromVm.totalLines, fromGv.totalLines);
      } finally {
        await c.workspaces.deleteWorkspace({ id: gv });
      }
    } else {
      gate(test, engines, "gvisor", "microvm comparison");
    }
    await c.workspaces.deleteWorkspace({ id: vm });
  });

  test.serial("microvm: workspaces start by restoring their shape's template, each with its own clock, random state, disk and limits", async (t) => {
    // The shape's template may be made here (a VM's boot): on a loaded CI host that took minutes.
    t.timeout(600_000);
    const c = t.context.server.clients.grpc;
    const make = async () => (await c.workspaces.createWorkspace({ provider: "microvm", limits: { disk: "256Mi", memory: "256Mi", pids: 200n } })).workspace!;
    const [a, b] = [await make(), await make()];
    try {
      for (const w of [a, b]) t.is(w.providerDetails.start, "restored", `${w.id} was restored from the template`);
      const look = async (id: string) => {
        const r = await c.tools.bash({
          workspaceId: id,
          command: "date +%s; cat /proc/sys/kernel/random/uuid; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; df -k --output=size /workspace | tail -n 1; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max",
        });
        t.is(r.exitCode, 0, r.stderr);
        const [clock, uuid, bytes, size, memory, pids] = r.stdout.trim().split("\n").map((l) => l.trim());
        return { clock: Number(clock), uuid, bytes, size: Number(size), memory, pids };
      };
      const [x, y] = [await look(a.id), await look(b.id)];
      // The template's clock and generator state were left behind at the first connection.
      for (const v of [x, y]) t.true(Math.abs(v.clock - Date.now() / 1000) < 30, `guest clock ${v.clock} against the host's ${Date.now() / 1000}`);
      t.not(x.uuid, y.uuid, "siblings restored from one template draw different random numbers");
      t.not(x.bytes, y.bytes);
      // This workspace's disk (the template had a 1 MiB placeholder) and limits (the template had none).
      for (const v of [x, y]) {
        t.true(v.size > 200 * 1024 && v.size <= 256 * 1024, `the workspace disk is ${v.size} KiB`);
        t.is(v.memory, String(256 * 1024 * 1024));
        t.is(v.pids, "200");
      }
      // What one writes, the other does not see.
      await c.tools.writeFile({ workspaceId: a.id, path: "mine.txt", content: "a\n" });
      t.is((await c.tools.bash({ workspaceId: b.id, command: "ls /workspace" })).stdout, "");
    } finally {
      await c.workspaces.deleteWorkspace({ id: a.id });
      await c.workspaces.deleteWorkspace({ id: b.id });
    }
  });

  test.serial("microvm: a template whose state QEMU refuses is removed and the VM boots instead; the next workspace gets a new template", async (t) => {
    t.timeout(900_000); // two templates made and a cold boot: a hang guard
    const cache = await mkdtemp(path.join(tmpdir(), "aw-test-cache-"));
    const logs: string[] = [];
    // A template VM whose guest never comes up (seen once under CI load: the kernel stopped at 0.8 s
    // of guest time) is given up after 3 minutes, not the 10 the other tests allow a boot.
    const server = await startServer({
      env: { AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_MICROVM_IMAGES: MICROVM_IMAGES, AGENT_WORKSPACE_MICROVM_CACHE: cache, AGENT_WORKSPACE_MICROVM_BOOT_TIMEOUT_MS: "180000" },
      onLog: (line) => logs.push(line),
    });
    const c = server.clients.grpc;
    const ids: string[] = [];
    try {
      const limits = { memory: "128Mi", cpu: "1" };
      const first = (await c.workspaces.createWorkspace({ provider: "microvm", limits })).workspace!;
      ids.push(first.id);
      t.is(first.providerDetails.start, "restored");
      const [template] = await readdir(path.join(cache, "templates"));
      const state = path.join(cache, "templates", template as string, "state");
      // Cut short: QEMU stops reading it part way.
      await truncate(state, 4096);
      const second = (await c.workspaces.createWorkspace({ provider: "microvm", limits })).workspace!;
      ids.push(second.id);
      t.is(second.providerDetails.start, "booted");
      t.is((await c.tools.bash({ workspaceId: second.id, command: "echo booted" })).stdout, "booted\n");
      await t.throwsAsync(stat(path.join(cache, "templates", template as string)), { code: "ENOENT" });
      let third = (await c.workspaces.createWorkspace({ provider: "microvm", limits })).workspace!;
      ids.push(third.id);
      if (third.providerDetails.start === "booted" && logs.some((l) => /microvm template could not be made.*was not ready within/.test(l))) {
        // The new template's own guest never came up (the environment, not the behaviour under
        // test: that VM booted instead, as it should); the next workspace makes it again.
        t.log("the new template's VM did not come up; making it once more");
        third = (await c.workspaces.createWorkspace({ provider: "microvm", limits })).workspace!;
        ids.push(third.id);
      }
      t.is(third.providerDetails.start, "restored");
      t.is((await c.tools.bash({ workspaceId: third.id, command: "echo restored" })).stdout, "restored\n");
    } finally {
      for (const id of ids) await c.workspaces.deleteWorkspace({ id }).catch(() => undefined);
      await server.close();
      await rm(cache, { recursive: true, force: true });
    }
  });

  test.serial("microvm: the sandbox user reaches neither the channel, the disks, the settings nor the executor; the root filesystem is read-only; no network but loopback", async (t) => {
    const c = t.context.server.clients.grpc;
    const id = (await c.workspaces.createWorkspace({ provider: "microvm" })).workspace!.id;
    try {
      const probe = await c.tools.bash({
        workspaceId: id,
        command: [
          "id -u",
          // The channel: a virtio-serial port, one open at a time, root's only.
          // (Each probe first checks that what it attacks is there, so a missing device cannot pass.)
          "for p in /dev/vport*; do [ -c \"$p\" ] || echo \"NO PORT $p\"; cat \"$p\" </dev/null >/dev/null 2>&1 && echo \"OPENED $p\"; echo x >\"$p\" 2>/dev/null && echo \"WROTE $p\"; done",
          // Block devices: the workspace disk raw, the executor disk, the root filesystem.
          "for d in /dev/vda /dev/vdb /dev/vdc; do [ -b \"$d\" ] || echo \"NO DEVICE $d\"; head -c 1 \"$d\" >/dev/null 2>&1 && echo \"READ $d\"; done",
          "touch /etc/aw-probe 2>/dev/null && echo WROTE-ROOT",
          "touch /opt/agent-workspace/aw-probe 2>/dev/null && echo WROTE-EXECUTOR",
          "cat /proc/1/environ >/dev/null 2>&1 && echo READ-INIT",
          "echo o > /proc/sysrq-trigger 2>/dev/null && echo SYSRQ",
          "kill -9 1 2>/dev/null && echo KILLED-INIT",
          // The admin port's loop (every capability, another uid): there, and out of reach.
          "a=$(pgrep -u 65533 | head -n 1); [ -n \"$a\" ] || echo NO-ADMIN; kill -9 \"$a\" 2>/dev/null && echo KILLED-ADMIN",
          "grep -c : /proc/net/dev",
          "grep -v -e '^Inter' -e '^ face' /proc/net/dev | cut -d: -f1 | tr -d ' '",
        ].join("; "),
      });
      t.is(probe.exitCode, 0, probe.stderr);
      const lines = probe.stdout.trim().split("\n");
      t.is(lines[0], "1000");
      t.deepEqual(lines.slice(1), ["1", "lo"], probe.stdout);
      // And the workspace still answers: nothing above reached the executor.
      t.is((await c.tools.bash({ workspaceId: id, command: "echo still" })).stdout, "still\n");
    } finally {
      await c.workspaces.deleteWorkspace({ id });
    }
  });

  test.serial("microvm: disk, process and memory limits hold inside the guest; the host's image grows no further than the disk limit", async (t) => {
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider: "microvm", limits: { disk: "64Mi", pids: 64n, memory: "192Mi" } });
    const id = workspace!.id;
    try {
      const fill = await c.tools.bash({ workspaceId: id, command: "dd if=/dev/zero of=big bs=1M count=200 2>&1 | grep -m 1 'No space'; df -k /workspace | tail -n 1", timeoutMs: 60_000n });
      t.regex(fill.stdout, /No space left on device/);
      const image = await stat(path.join(t.context.server.dataDir, "microvm", id, "disk.img"));
      t.true(image.blocks * 512 <= 64 * 1024 * 1024, `image uses ${image.blocks * 512} bytes`);
      t.is(image.size, 64 * 1024 * 1024);
      await c.tools.bash({ workspaceId: id, command: "rm -f big" });

      // dash, which does not retry a failed fork as bash does; what the cgroup refused is counted.
      // Read with builtins afterwards: at the limit bash cannot fork a cat (it would retry for as
      // long as the sleeps live).
      const cg = "/sys/fs/cgroup";
      const pids = await c.tools.bash({
        workspaceId: id,
        command: `read -r l < ${cg}/pids.max; echo "$l"; sh -c 'for i in $(seq 1 100); do sleep 30 & done' 2>/dev/null; read -r l < ${cg}/pids.current; echo "$l"; while read -r l; do echo "$l"; done < ${cg}/pids.events`,
        timeoutMs: 60_000n,
      });
      const [max, current, events] = pids.stdout.trim().split("\n");
      t.is(max, "64");
      t.true(Number(current) <= 64, pids.stdout);
      t.regex(events ?? "", /^max [1-9]/, pids.stdout);
      // tail keeps a line that never ends (/dev/zero has no newline): it grows until the kernel
      // kills it at the 192 MiB limit. No pipe: emulated, every byte through one costs time.
      const bomb = await c.tools.bash({ workspaceId: id, command: "tail /dev/zero > /dev/null", timeoutMs: 180_000n });
      t.true(bomb.oomKilled, JSON.stringify({ exit: bomb.exitCode, signal: bomb.signal, stderr: bomb.stderr }));
      t.not(bomb.exitCode, 0);
      // The workspace answers after the OOM kill.
      t.is((await c.tools.bash({ workspaceId: id, command: "echo after" })).stdout, "after\n");
    } finally {
      await c.workspaces.deleteWorkspace({ id });
    }
  });

  test.serial("microvm: a server restart reconnects to the running VM (same boot, files kept); a killed QEMU is reported and the next call starts it again with its disk", async (t) => {
    // A data directory of the test's own: closing a server then leaves its workspaces alone.
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-test-"));
    const first = await startServer({ dataDir, env: { AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_MICROVM_IMAGES: MICROVM_IMAGES, AGENT_WORKSPACE_LOG_LEVEL: process.env.AW_LOG ?? "error" } });
    let second: TestServer | undefined;
    let id = "";
    try {
      id = (await first.clients.grpc.workspaces.createWorkspace({ provider: "microvm" })).workspace!.id;
      await first.clients.grpc.tools.writeFile({ workspaceId: id, path: "kept.txt", content: "kept\n" });
      const boot = await bootId(first.clients.grpc, id);
      // A command running while the server goes away is ended with it; the VM is not.
      void first.clients.grpc.tools.bash({ workspaceId: id, command: "sleep 20" }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 500));
      await first.close();
      second = await startServer({ dataDir, env: { AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_MICROVM_IMAGES: MICROVM_IMAGES, AGENT_WORKSPACE_LOG_LEVEL: process.env.AW_LOG ?? "error" } });
      const c = second.clients.grpc;
      t.is(await bootId(c, id), boot, "the VM was not rebooted");
      t.is((await c.tools.readFile({ workspaceId: id, path: "kept.txt" })).content, "1: kept");

      const pid = await qemuPid(second, id);
      process.kill(pid, "SIGKILL");
      for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
      const got = (await c.workspaces.getWorkspace({ id })).workspace!;
      t.is(got.status, WorkspaceStatus.FAILED);
      t.regex(got.statusMessage, /not running/);
      // What a tool wrote and the server confirmed survives the kill (the executor syncs it).
      t.is((await c.tools.readFile({ workspaceId: id, path: "kept.txt" })).content, "1: kept");
      t.not(await bootId(c, id), boot, "booted again");
      const after = (await c.workspaces.getWorkspace({ id })).workspace!;
      t.is(after.status, WorkspaceStatus.READY);
      t.regex(after.statusMessage, /stopped unexpectedly and was started again/);
    } finally {
      const c = second?.clients.grpc;
      if (c && id !== "") await c.workspaces.deleteWorkspace({ id }).catch(() => undefined);
      await second?.close();
      await first.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  test.serial("microvm: a server that connects the moment the last connection closes is answered (QEMU hands the guest both at once)", async (t) => {
    // QEMU accepts a waiting connection as soon as the one before closes; an emulated guest that
    // looks late sees one connection where there were two, and its relay hands the new server's
    // aw-sync to the last executor as a frame, or reads the new aw-sync before the old close. Before
    // the server asked again on its connection, the call below failed after 15 s in most runs.
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-test-"));
    const env = { AGENT_WORKSPACE_DOCKER: "off", AGENT_WORKSPACE_MICROVM_IMAGES: MICROVM_IMAGES, AGENT_WORKSPACE_LOG_LEVEL: process.env.AW_LOG ?? "error" };
    let server: TestServer | undefined = await startServer({ dataDir, env });
    let id = "";
    try {
      id = (await server.clients.grpc.workspaces.createWorkspace({ provider: "microvm" })).workspace!.id;
      await server.close();
      server = undefined;
      const channel = path.join(dataDir, "microvm", id, "channel.sock");
      for (let round = 1; round <= 3; round++) {
        // A connection of the test's own, answered: the guest's executor serves it.
        const held = await syncedChannel(channel);
        server = await startServer({ dataDir, env });
        // The server's connection waits in QEMU's backlog until the test's closes.
        const call = server.clients.grpc.tools.bash({ workspaceId: id, command: "echo answered" });
        await new Promise((r) => setTimeout(r, 1000));
        held.destroy();
        t.is((await call).stdout, "answered\n", `round ${round}`);
        await server.close();
        server = undefined;
      }
    } finally {
      server ??= await startServer({ dataDir, env });
      if (id !== "") await server.clients.grpc.workspaces.deleteWorkspace({ id }).catch(() => undefined);
      await server.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  test.serial("microvm: delete stops the VM and leaves no file behind", async (t) => {
    const c = t.context.server.clients.grpc;
    const id = (await c.workspaces.createWorkspace({ provider: "microvm" })).workspace!.id;
    const pid = await qemuPid(t.context.server, id);
    t.true(alive(pid));
    await c.workspaces.deleteWorkspace({ id });
    // Gone, and reaped (the server started it, so it is this process's child until then).
    t.true(await waitDead([pid], 5000));
    await t.throwsAsync(stat(path.join(t.context.server.dataDir, "microvm", id)), { code: "ENOENT" });
  });
}
