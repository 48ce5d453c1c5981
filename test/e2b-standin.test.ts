/**
 * The local E2B stand-in (helpers/e2b-standin.ts), driven only through the real `e2b` SDK: every
 * operation the E2B provider calls works, and fails, the way the SDK expects of E2B. Its sandboxes
 * are Docker containers, so the file is gated like the other Docker suites: a visible skip without
 * the engine, a failure when REQUIRE_DOCKER=1.
 */
import { createHash, randomBytes } from "node:crypto";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import Docker from "dockerode";
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  type SandboxOpts,
  ServiceBusyError,
  TimeoutError,
} from "e2b";
import { type E2bStandIn, startE2bStandIn } from "./helpers/e2b-standin.ts";
import { gate, probeEngines } from "./helpers/engines.ts";

interface Ctx {
  standIn: E2bStandIn;
}

const test = anyTest as TestFn<Ctx>;
const IMAGE = process.env.AGENT_WORKSPACE_IMAGE ?? "agent-workspace-base:bookworm";
const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });
const engines = await probeEngines();

const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const options = (t: ExecutionContext<Ctx>) => t.context.standIn.sdkOptions;

/** A sandbox of the shared stand-in, killed when the test ends. */
async function sandbox(t: ExecutionContext<Ctx>, opts: SandboxOpts = {}): Promise<Sandbox> {
  const created = await Sandbox.create("base", { ...options(t), ...opts });
  t.teardown(() => created.kill().then(() => {}, () => {}));
  return created;
}

/** True once Docker no longer knows the container. */
async function containerGone(id: string): Promise<boolean> {
  return docker.getContainer(id).inspect().then(
    () => false,
    (err: { statusCode?: number }) => err.statusCode === 404,
  );
}

if (gate(test, engines, "docker", "E2B stand-in")) {
  test.before(async (t) => {
    t.context.standIn = await startE2bStandIn({ image: IMAGE, docker });
  });
  test.after.always(async (t) => {
    await t.context.standIn?.close();
  });

  // Serial, so the refusal failNext arms meets this test's call and no other test's.
  test.serial("the API's refusals surface as the SDK's errors (wrong key, busy, unknown template, unknown sandbox)", async (t) => {
    const wrong = { ...options(t), apiKey: "e2b_0000000000000000000000000000000000000000" };
    await t.throwsAsync(Sandbox.create("base", wrong), { instanceOf: AuthenticationError, message: /Unauthorized, please check your credentials/ });
    await t.throwsAsync(Sandbox.list(wrong).nextItems(), { instanceOf: AuthenticationError });

    t.context.standIn.failNext(1);
    await t.throwsAsync(Sandbox.list(options(t)).nextItems(), { instanceOf: ServiceBusyError });
    await t.notThrowsAsync(Sandbox.list(options(t)).nextItems());

    const unknown = await t.throwsAsync(Sandbox.create("no-such-template", options(t)), { instanceOf: SandboxError });
    t.is(unknown?.message, "404: template 'no-such-template' not found");
    t.is(unknown?.statusCode, 404);

    await t.throwsAsync(Sandbox.getInfo("nosuchsandbox0000000", options(t)), { instanceOf: SandboxNotFoundError });
    t.false(await Sandbox.kill("nosuchsandbox0000000", options(t)));
  });

  test("create with metadata, then list filtered by metadata and state, a page at a time", async (t) => {
    const run = randomBytes(4).toString("hex");
    // Characters the SDK's double encoding of the filter has to survive.
    const beforeA = Date.now();
    const a = await sandbox(t, { metadata: { suite: run, role: "a&b=c d/é" }, timeoutMs: 120_000 });
    const afterA = Date.now();
    const b = await sandbox(t, { metadata: { suite: run, role: "b" } });

    const onlyA = await Sandbox.list({ ...options(t), query: { metadata: { suite: run, role: "a&b=c d/é" } } }).nextItems();
    t.deepEqual(onlyA.map((s) => s.sandboxId), [a.sandboxId]);
    t.deepEqual(onlyA[0].metadata, { suite: run, role: "a&b=c d/é" });
    t.is(onlyA[0].state, "running");
    t.is(onlyA[0].templateId, "base");

    const both = await Sandbox.list({ ...options(t), query: { metadata: { suite: run }, state: ["running"] } }).nextItems();
    t.deepEqual(both.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort());
    t.deepEqual(await Sandbox.list({ ...options(t), query: { metadata: { suite: run }, state: ["paused"] } }).nextItems(), []);

    const pages = Sandbox.list({ ...options(t), query: { metadata: { suite: run } }, limit: 1 });
    const first = await pages.nextItems();
    t.true(pages.hasNext);
    const second = await pages.nextItems();
    t.false(pages.hasNext);
    t.deepEqual([...first, ...second].map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort());

    const info = await Sandbox.getInfo(a.sandboxId, options(t));
    t.is(info.sandboxId, a.sandboxId);
    t.is(info.state, "running");
    t.is(info.envdVersion, "0.5.7");
    t.deepEqual(info.metadata, { suite: run, role: "a&b=c d/é" });
    // Its end is 120 s after it was made (a second of slack for clocks rounding to seconds).
    const endAt = info.endAt.getTime();
    t.true(endAt >= beforeA + 119_000 && endAt <= afterA + 121_000, `endAt ${info.endAt.toISOString()}, made between ${new Date(beforeA).toISOString()} and ${new Date(afterA).toISOString()}`);
  });

  test("a foreground command returns its output and exit code; a non-zero exit throws CommandExitError", async (t) => {
    const s = await sandbox(t, { envs: { FROM_SANDBOX: "s" } });
    const r = await s.commands.run("echo out; echo err >&2");
    t.is(r.stdout, "out\n");
    t.is(r.stderr, "err\n");
    t.is(r.exitCode, 0);

    t.is((await s.commands.run('pwd; echo "$FROM_SANDBOX $FOO"', { cwd: "/tmp", envs: { FOO: "bar" } })).stdout, "/tmp\ns bar\n");

    const failed = await t.throwsAsync(s.commands.run("echo partial; exit 3"), { instanceOf: CommandExitError });
    t.is(failed?.exitCode, 3);
    t.is(failed?.error, "exit status 3");
    t.is(failed?.stdout, "partial\n");

    // A child left holding the output open does not keep the command from ending.
    t.is((await s.commands.run("sleep 600 & echo started")).stdout, "started\n");

    // A lot of multi-byte output, split into many events, arrives whole and in order.
    t.is((await s.commands.run("yes 'é€😀 line' | head -n 100000")).stdout, "é€😀 line\n".repeat(100_000));

    await t.throwsAsync(s.commands.run("true", { cwd: "/no/such/dir" }), { instanceOf: InvalidArgumentError, message: /cwd '\/no\/such\/dir' does not exist/ });
  });

  test("a background process gets 256 KiB of binary stdin intact, then EOF", async (t) => {
    const s = await sandbox(t);
    const data = randomBytes(256 * 1024);
    const cat = await s.commands.run("cat > /tmp/x", { background: true, stdin: true });
    for (let at = 0; at < data.length; at += 64 * 1024) await s.commands.sendStdin(cat.pid, new Uint8Array(data.subarray(at, at + 64 * 1024)));
    await s.commands.closeStdin(cat.pid);
    t.is((await cat.wait()).exitCode, 0);
    t.is((await s.commands.run("sha256sum /tmp/x")).stdout.split(" ")[0], sha256(data));
  });

  test("a background process is killed by its pid; Connect attaches to one by pid; a deadline kills", async (t) => {
    const s = await sandbox(t);
    const sleeper = await s.commands.run("sleep 600", { background: true });
    // The pid is the process's pid inside the sandbox.
    t.regex((await s.commands.run(`tr '\\0' ' ' < /proc/${sleeper.pid}/cmdline`)).stdout, /sleep 600/);
    t.true((await s.commands.list()).some((p) => p.pid === sleeper.pid));
    t.true(await s.commands.kill(sleeper.pid));
    const killed = await t.throwsAsync(sleeper.wait(), { instanceOf: CommandExitError });
    t.is(killed?.exitCode, -1);
    t.is(killed?.error, "signal: killed");
    t.false((await s.commands.list()).some((p) => p.pid === sleeper.pid));
    t.false(await s.commands.kill(sleeper.pid));

    const ticker = await s.commands.run("for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done", { background: true });
    await ticker.disconnect();
    const attached = await s.commands.connect(ticker.pid);
    t.is(attached.pid, ticker.pid);
    t.regex((await attached.wait()).stdout, /tick 6\n$/);

    // Killed at its deadline, long before its own 30 s: gone from the list and from ps within 15 s
    // of the timeout (the wait is for a loaded host; an unkilled sleep would still be there).
    await t.throwsAsync(s.commands.run("sleep 30", { timeoutMs: 1000 }), { instanceOf: TimeoutError });
    const deadline = Date.now() + 15_000;
    const running = async () =>
      (await s.commands.list()).some((p) => p.cmd === "/bin/bash" && p.args.includes("sleep 30")) || (await s.commands.run("ps -eo args")).stdout.includes("sleep 30");
    while ((await running()) && Date.now() < deadline) await delay(200);
    t.false((await s.commands.run("ps -eo args")).stdout.includes("sleep 30"), "the process outlived its deadline");
  });

  test("commands and files act as user 'user' (uid 1000) by default and as root on request", async (t) => {
    const s = await sandbox(t);
    t.is((await s.commands.run("id -u")).stdout, "1000\n");
    t.is((await s.commands.run("id -u", { user: "user" })).stdout, "1000\n");
    t.is((await s.commands.run("id -u", { user: "root" })).stdout, "0\n");
    t.is((await s.commands.run('whoami; echo "$HOME"; pwd')).stdout, "user\n/home/user\n/home/user\n");
    t.is((await s.commands.run("pwd", { user: "root" })).stdout, "/root\n");
    await t.throwsAsync(s.commands.run("true", { user: "nobody-at-all" }), { instanceOf: AuthenticationError, message: /invalid username/ });

    const written = await s.files.write("notes/a.txt", "hello");
    t.is(written.path, "/home/user/notes/a.txt");
    await s.files.write("/root/r.txt", "r", { user: "root" });
    t.is((await s.commands.run("stat -c '%U %a' /home/user/notes /home/user/notes/a.txt /root/r.txt", { user: "root" })).stdout, "user 755\nuser 644\nroot 644\n");
    t.is(await s.files.read("/home/user/notes/a.txt"), "hello");
    t.is(await s.files.read("notes/a.txt"), "hello");
    await t.throwsAsync(s.files.read("/home/user/missing.txt"), { instanceOf: FileNotFoundError });
  });

  test("a 100 MB binary file is written and read back intact (multipart; octet-stream and gzip too)", async (t) => {
    const s = await sandbox(t);
    const data = randomBytes(100 * 1024 * 1024);
    const info = await s.files.write("/home/user/big/sub/blob.bin", new Blob([data]));
    t.is(info.path, "/home/user/big/sub/blob.bin");
    t.is(info.name, "blob.bin");
    const listed = await s.commands.run("sha256sum big/sub/blob.bin && stat -c '%s %U' big big/sub big/sub/blob.bin");
    const [sum, ...stats] = listed.stdout.trim().split("\n");
    t.is(sum.split(" ")[0], sha256(data));
    t.is(stats[2], `${data.length} user`);
    t.deepEqual(stats.slice(0, 2).map((line) => line.split(" ")[1]), ["user", "user"]);
    t.is(sha256(await s.files.read("/home/user/big/sub/blob.bin", { format: "bytes" })), sha256(data));

    const small = randomBytes(1024 * 1024 + 3);
    await s.files.write("/tmp/raw.bin", new Blob([small]), { useOctetStream: true });
    await s.files.write("/tmp/zipped.bin", new Blob([small]), { gzip: true });
    t.is(sha256(await s.files.read("/tmp/raw.bin", { format: "bytes" })), sha256(small));
    t.is(sha256(await s.files.read("/tmp/zipped.bin", { format: "bytes", gzip: true })), sha256(small));
  });

  test("a paused sandbox refuses commands clearly; connect resumes it with files and processes intact", async (t) => {
    const s = await sandbox(t);
    await s.files.write("/home/user/kept.txt", "kept");
    const sleeper = await s.commands.run("sleep 600", { background: true });
    t.true(await s.pause());
    t.is((await Sandbox.getInfo(s.sandboxId, options(t))).state, "paused");
    t.true((await Sandbox.list({ ...options(t), query: { state: ["paused"] } }).nextItems()).some((p) => p.sandboxId === s.sandboxId));

    await t.throwsAsync(s.commands.run("echo hi"), { instanceOf: SandboxNotFoundError });
    await t.throwsAsync(s.files.read("/home/user/kept.txt"), { instanceOf: TimeoutError, message: /The sandbox was not found/ });
    t.false(await s.isRunning());
    // The stream attached to the running process ended with the pause.
    await t.throwsAsync(sleeper.wait(), { instanceOf: TimeoutError });
    t.false(await s.pause());

    const resumed = await Sandbox.connect(s.sandboxId, options(t));
    t.is((await Sandbox.getInfo(s.sandboxId, options(t))).state, "running");
    t.is(await resumed.files.read("/home/user/kept.txt"), "kept");
    t.true((await resumed.commands.list()).some((p) => p.pid === sleeper.pid));
    t.is((await resumed.commands.run("echo back")).stdout, "back\n");
  });

  test("a sandbox whose timeout passes is killed, its container removed", async (t) => {
    const s = await sandbox(t, { timeoutMs: 120_000 });
    const container = t.context.standIn.sandboxes().get(s.sandboxId);
    t.truthy(container);
    await Sandbox.setTimeout(s.sandboxId, 1000, options(t));
    const deadline = Date.now() + 8000;
    for (;;) {
      const error = await Sandbox.getInfo(s.sandboxId, options(t)).then(() => undefined, (err: unknown) => err);
      if (error) {
        t.true(error instanceof SandboxNotFoundError, String(error));
        break;
      }
      if (Date.now() > deadline) return t.fail("the sandbox outlived its timeout");
      await delay(200);
    }
    await t.throwsAsync(Sandbox.connect(s.sandboxId, options(t)), { instanceOf: SandboxNotFoundError });
    await t.throwsAsync(s.commands.run("true"), { instanceOf: SandboxNotFoundError });
    t.false(t.context.standIn.sandboxes().has(s.sandboxId));
    while (!(await containerGone(container ?? "")) && Date.now() < deadline + 5000) await delay(100);
    t.true(await containerGone(container ?? ""));
  });

  test("allowInternetAccess: false leaves only the loopback interface", async (t) => {
    const interfaces = async (s: Sandbox) =>
      (await s.commands.run("cat /proc/net/dev")).stdout
        .split("\n")
        .slice(2)
        .map((line) => line.split(":")[0].trim())
        .filter(Boolean);
    const [offline, online] = await Promise.all([sandbox(t, { allowInternetAccess: false }), sandbox(t)]);
    t.deepEqual(await interfaces(offline), ["lo"]);
    t.true((await interfaces(online)).some((name) => name !== "lo"));
    t.false((await Sandbox.getInfo(offline.sandboxId, options(t))).allowInternetAccess);
  });

  test("kill removes a sandbox; close() removes every container of its stand-in and no other", async (t) => {
    const bystander = await sandbox(t);
    const own = await startE2bStandIn({ image: IMAGE, docker });
    try {
      const killed = await Sandbox.create("base", own.sdkOptions);
      const killedContainer = own.sandboxes().get(killed.sandboxId) ?? "";
      t.true(await Sandbox.kill(killed.sandboxId, own.sdkOptions));
      t.false(await Sandbox.kill(killed.sandboxId, own.sdkOptions));
      await t.throwsAsync(Sandbox.getInfo(killed.sandboxId, own.sdkOptions), { instanceOf: SandboxNotFoundError });
      await t.throwsAsync(killed.commands.run("true"), { instanceOf: SandboxNotFoundError });
      t.false(await killed.isRunning());
      t.true(await containerGone(killedContainer));

      await Sandbox.create("base", own.sdkOptions);
      await (await Sandbox.create("base", own.sdkOptions)).pause();
      const containers = [...own.sandboxes().values()];
      t.is(containers.length, 2);
      await own.close();
      for (const id of containers) t.true(await containerGone(id), id);
      const labelled = await docker.listContainers({ all: true, filters: { label: ["agent-workspace.e2b-standin"] } });
      t.false(labelled.some((c) => containers.includes(c.Id)));
      // The other stand-in's sandbox was not touched.
      t.is((await bystander.commands.run("echo still here")).stdout, "still here\n");
    } finally {
      await own.close();
    }
  });
}
