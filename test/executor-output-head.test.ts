/**
 * A unary Bash keeps only a head of each output stream (ExecSpec.keepBytes): the executor then
 * sends no more than that over its channel and counts the rest, reported on `exited`. Tested on a
 * real executor process and its channel, as the local provider starts it; the totals a client
 * sees are tested through the server for every provider by the conformance suite ("Long-running
 * command output") and by the exhaustion tests' floods.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { EXECUTOR_NODE_FLAGS } from "../providers/executor-build.ts";
import { sandboxEnv } from "../providers/executor/env.ts";
import type { ExecRequest } from "../providers/executor/protocol.ts";
import type { ExecExit } from "../providers/executor/types.ts";
import { SandboxConnection } from "../providers/sandbox-connection.ts";

const test = anyTest as TestFn<{ child: ChildProcess; conn: SandboxConnection; root: string }>;

test.before((t) => {
  const root = mkdtempSync(path.join(tmpdir(), "aw-head-"));
  const main = path.join(import.meta.dirname, "..", "providers", "executor", "main.ts");
  const child = spawn(process.execPath, [...EXECUTOR_NODE_FLAGS, main, "--launcher=spawn"], { stdio: ["pipe", "pipe", "inherit"], env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
  t.context = { child, conn: new SandboxConnection(child.stdout!, child.stdin!), root };
});

test.after.always((t) => {
  t.context.child?.kill("SIGKILL");
  if (t.context.root) rmSync(t.context.root, { recursive: true, force: true });
});

/** Runs `command` with `extra` on the request; what the channel carried of each stream, and the exit. */
async function run(t: { context: { conn: SandboxConnection; root: string } }, command: string, extra: Partial<ExecRequest> & Record<string, unknown>) {
  const { conn, root } = t.context;
  const req = { argv: ["bash", "-c", command], root, cwd: "", env: sandboxEnv(root, {}), timeoutMs: 60_000, killGraceMs: 1000, ...extra } as ExecRequest;
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let exit: ExecExit | undefined;
  for await (const ev of conn.exec(req)) {
    if (ev.type === "stdout") out.push(Buffer.from(ev.data));
    else if (ev.type === "stderr") err.push(Buffer.from(ev.data));
    else if (ev.type === "exited") exit = ev.exit;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), exit };
}

const MIB = 1024 * 1024;

test.serial("a flood past keepBytes: the channel carries the head of each stream, the exit counts every byte", async (t) => {
  const r = await run(t, `head -c ${64 * MIB} /dev/zero | tr '\\0' o; head -c ${16 * MIB} /dev/zero | tr '\\0' e >&2; echo tail`, { keepBytes: 1000 });
  t.is(r.exit?.exitCode, 0);
  t.is(r.stdout.toString(), "o".repeat(1000));
  t.is(r.stderr.toString(), "e".repeat(1000));
  t.deepEqual(r.exit?.outputBytes, { stdout: 64 * MIB + 5, stderr: 16 * MIB });
});

test.serial("the head is cut inside a chunk at exactly keepBytes; output under it arrives whole", async (t) => {
  const cut = await run(t, "printf '%s' \"$(seq -s, 1 1000)\"", { keepBytes: 777 });
  const whole = (await run(t, "printf '%s' \"$(seq -s, 1 1000)\"", {})).stdout;
  t.true(whole.length > 777);
  t.deepEqual(cut.stdout, whole.subarray(0, 777));
  t.deepEqual(cut.exit?.outputBytes, { stdout: whole.length, stderr: 0 });
  const under = await run(t, "echo short; echo also >&2", { keepBytes: 1000 });
  t.is(under.stdout.toString(), "short\n");
  t.is(under.stderr.toString(), "also\n");
  t.deepEqual(under.exit?.outputBytes, { stdout: 6, stderr: 5 });
});

test.serial("keepBytes 0 sends no output at all, and still counts it", async (t) => {
  const r = await run(t, "echo out; echo err >&2; exit 3", { keepBytes: 0 });
  t.is(r.exit?.exitCode, 3);
  t.is(r.stdout.length + r.stderr.length, 0);
  t.deepEqual(r.exit?.outputBytes, { stdout: 4, stderr: 4 });
});

test.serial("without keepBytes, or with one that is no byte count, everything is sent and no totals are reported", async (t) => {
  const extras: Array<Record<string, unknown>> = [{}, { keepBytes: -1 }, { keepBytes: 1.5 }, { keepBytes: "10" }, { keepBytes: Number.MAX_VALUE }];
  for (const extra of extras) {
    const r = await run(t, `head -c ${3 * MIB} /dev/zero`, extra);
    t.is(r.stdout.length, 3 * MIB, JSON.stringify(extra));
    t.is(r.exit?.outputBytes, undefined);
  }
});
