/**
 * The executor's channel is not the sandbox user's: in docker and gVisor sandboxes a command
 * tries what an attacker would against the executor (and the init above it): write forged
 * protocol frames into their stdout, read their stdin, read their memory, and stop or kill them.
 * Every attempt must fail, no forged byte may reach any call's output, and the sandbox must carry
 * on unrestarted. The server's frame checks are tested directly on a connection below.
 */
import { once } from "node:events";
import { type Duplex, PassThrough } from "node:stream";
import Docker from "dockerode";
import anyTest, { type TestFn } from "ava";
import { hasReason } from "../core/errors.ts";
import { LABELS } from "../providers/docker.ts";
import { encodeFrame, F, FrameReader, MAX_TUNNELS, TUNNEL_ID_BASE, TUNNEL_WINDOW } from "../providers/executor/protocol.ts";
import { SandboxConnection } from "../providers/sandbox-connection.ts";
import { Egress } from "../server/egress/egress.ts";
import { createLogger } from "../server/logger.ts";
import { parseSettings } from "../server/settings.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import { newWorkspace, type ServerCtx, serverTest } from "./helpers/server.ts";

const engines = await probeEngines();
const docker = new Docker({ socketPath: "/var/run/docker.sock" });
const plain = anyTest as TestFn<unknown>;
const containers = ["docker", "gvisor"].some((p) => engines[p as "docker" | "gvisor"] || process.env[`REQUIRE_${p.toUpperCase()}`] === "1");
const test: TestFn<ServerCtx> = containers ? serverTest() : (anyTest as TestFn<ServerCtx>);

/** A bash script that writes forged frames (STDOUT for every id up to 64, carrying FORGED) in hex. */
function forgedFrames(): string {
  const frames = Array.from({ length: 64 }, (_, i) => encodeFrame(F.STDOUT, i + 1, Buffer.from("FORGED\n")));
  return Buffer.concat(frames).toString("hex");
}

for (const provider of ["docker", "gvisor"] as const) {
  if (!gate(test, engines, provider, "executor channel sealing")) continue;

  test(`${provider}: a command can neither forge frames into, read, trace nor signal the executor or init`, async (t) => {
    const { tools } = t.context.server.clients.grpc;
    const id = await newWorkspace(t.context.server.clients.grpc, { provider });
    const container = (await docker.listContainers({ all: true, filters: { label: [`${LABELS.workspace}=${id}`] } }))[0];
    const startedAt = (await docker.getContainer(container.Id).inspect()).State.StartedAt;
    // A call that keeps streaming while the attack runs: forged frames would land in its output.
    const abort = new AbortController();
    const victim = (async () => {
      let out = "";
      try {
        for await (const ev of tools.streamBash({ workspaceId: id, command: "for i in $(seq 1 40); do echo tick; sleep 0.1; done" }, { signal: abort.signal })) {
          if (ev.event.case === "stdout") out += new TextDecoder().decode(ev.event.value);
        }
      } catch {
        // Cancelled at the end if still running.
      }
      return out;
    })();
    const attack = `
      self=$$
      exe=$(for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'executor/main\.[jt]s' && echo \${p#/proc/}; done | head -1)
      [ -n "$exe" ] || { echo "no executor found"; exit 9; }
      frames=$(printf '%s' '${forgedFrames()}' | sed 's/../\\\\x&/g')
      for pid in $exe 1; do
        for fd in 0 1 2; do
          ( printf "$frames" > /proc/$pid/fd/$fd ) 2>/dev/null && echo "WROTE $pid/fd/$fd"
          ( timeout 1 head -c 1 /proc/$pid/fd/$fd > /dev/null ) 2>/dev/null && echo "READ $pid/fd/$fd"
        done
        ( head -c 1 /proc/$pid/mem > /dev/null ) 2>/dev/null && echo "MEM $pid"
        ( cat /proc/$pid/environ > /dev/null ) 2>/dev/null && [ "$pid" != 1 ] && echo "ENVIRON $pid"
        kill -0 $pid 2>/dev/null && echo "SIGNAL $pid"
        kill -STOP $pid 2>/dev/null && echo "STOPPED $pid"
      done
      ls /proc/$exe/fd/ >/dev/null 2>&1 && echo "note: fd names listable (gVisor lists names, opens nothing)"
      echo "uid $(id -u) executor $exe"
    `;
    const r = await tools.bash({ workspaceId: id, command: attack, timeoutMs: 60_000n });
    t.is(r.exitCode, 0, r.stderr);
    const lines = r.stdout.trim().split("\n").filter((l) => !l.startsWith("note:"));
    t.regex(lines.at(-1) ?? "", /^uid 1000 executor \d+$/);
    t.deepEqual(lines.slice(0, -1), [], "an attempt on the executor or init succeeded");
    // ENVIRON is exempted on gVisor only if it shows; the channel, memory and signals never.
    const victimOut = await victim;
    abort.abort();
    t.false(victimOut.includes("FORGED"), "a forged frame reached a call's output");
    t.regex(victimOut, /tick/);
    // The sandbox carried on: same container start, a normal call works.
    t.is((await tools.bash({ workspaceId: id, command: "echo ok" })).stdout, "ok\n");
    t.is((await docker.getContainer(container.Id).inspect()).State.StartedAt, startedAt);
  });
}

plain("a connection refuses a frame longer than the protocol allows before buffering it, and fails its calls", async (t) => {
  const fromExecutor = new PassThrough();
  const toExecutor = new PassThrough();
  const conn = new SandboxConnection(fromExecutor, toExecutor);
  const call = conn.ping(5000);
  // A length prefix announcing 64 MiB: refused on the first four bytes.
  const head = Buffer.alloc(9);
  head.writeUInt32BE(64 * 1024 * 1024, 0);
  fromExecutor.write(head);
  const err = await call.catch((e: unknown) => e);
  t.true(hasReason(err, "WORKSPACE_NOT_READY"), String(err));
  t.false(conn.alive);
  t.regex(conn.violation ?? "", /frame length 67108864 is out of bounds/);
});

plain("a connection refuses frames for calls it never started, of unknown types, or with oversized output", async (t) => {
  const cases: Array<[Buffer, RegExp]> = [
    [encodeFrame(F.STDOUT, 77, Buffer.from("x")), /id 77, which no call has/],
    [encodeFrame(99, 1, Buffer.from("x")), /frame type 99/],
    [encodeFrame(F.EXEC, 1, Buffer.from("{}")), /frame type 1 from the executor/],
    [encodeFrame(F.STDOUT, 1, Buffer.alloc(300 * 1024)), /bulk frame of 307200 bytes/],
  ];
  for (const [frame, message] of cases) {
    const fromExecutor = new PassThrough();
    const conn = new SandboxConnection(fromExecutor, new PassThrough());
    const call = conn.ping(5000).catch((e: unknown) => e);
    fromExecutor.write(frame);
    await call;
    t.false(conn.alive);
    t.regex(conn.violation ?? "", message);
  }
});

plain("a connection reattached to a running executor drops frames of the calls of the connection before it until it has the executor forget them, then refuses them", async (t) => {
  const fromExecutor = new PassThrough();
  const toExecutor = new PassThrough();
  const written: Buffer[] = [];
  toExecutor.on("data", (b: Buffer) => written.push(b));
  const conn = new SandboxConnection(fromExecutor, toExecutor, { reattached: true });
  /** The frames written so far, as [type, id, payload]. */
  const frames = () => new FrameReader().push(Buffer.concat(written.splice(0))).map((f) => [f.type, f.id, f.payload.toString()] as const);
  const ping = conn.ping(5000);
  await new Promise((r) => setImmediate(r));
  const [[, pingId]] = frames();
  t.true(pingId > 0 && pingId < TUNNEL_ID_BASE);
  // An earlier server's command still writes: neither its output nor its end is a violation yet.
  const old = pingId === 1 ? 2 : 1;
  fromExecutor.write(encodeFrame(F.STDOUT, old, Buffer.from("old output")));
  fromExecutor.write(encodeFrame(F.EXITED, old, Buffer.from("{}")));
  fromExecutor.write(encodeFrame(F.PONG, pingId, Buffer.from("v1")));
  t.is(await ping, "v1");
  const forgetting = conn.forgetEarlierCalls();
  await new Promise((r) => setImmediate(r));
  const [[type, forgetId, request]] = frames();
  t.is(type, F.OP);
  t.like(JSON.parse(request), { op: "forget" });
  fromExecutor.write(encodeFrame(F.STDOUT, old, Buffer.from("late, but before the answer")));
  fromExecutor.write(encodeFrame(F.RESULT, forgetId, Buffer.from('{"ended":1}')));
  t.is(await forgetting, 1);
  t.true(conn.alive);
  // From the answer on, the executor promised silence for them: another frame is a violation.
  fromExecutor.write(encodeFrame(F.STDOUT, old, Buffer.from("after")));
  await new Promise((r) => setImmediate(r));
  t.false(conn.alive);
  t.regex(conn.violation ?? "", /which no call has/);
});

plain("a late frame of a call that already ended is dropped, and the connection stays up", async (t) => {
  const fromExecutor = new PassThrough();
  const toExecutor = new PassThrough();
  const conn = new SandboxConnection(fromExecutor, toExecutor);
  const first = conn.ping(5000);
  fromExecutor.write(encodeFrame(F.PONG, 1, Buffer.from("v1")));
  t.is(await first, "v1");
  fromExecutor.write(encodeFrame(F.STDOUT, 1, Buffer.from("late")));
  const second = conn.ping(5000);
  fromExecutor.write(encodeFrame(F.PONG, 2, Buffer.from("v2")));
  t.is(await second, "v2");
  t.true(conn.alive);
});

/** A SandboxConnection to an executor the test plays: what it sends, and what the server wrote to it. */
function fakeExecutor(): { fromExecutor: PassThrough; written: Buffer[]; conn: SandboxConnection } {
  const fromExecutor = new PassThrough();
  const toExecutor = new PassThrough();
  const written: Buffer[] = [];
  toExecutor.on("data", (c: Buffer) => written.push(c));
  return { fromExecutor, written, conn: new SandboxConnection(fromExecutor, toExecutor) };
}

/** The frames the server wrote to the executor, decoded. */
function framesOf(chunks: Buffer[]): Array<{ type: number; id: number; payload: Buffer }> {
  return new FrameReader().push(Buffer.concat(chunks));
}

plain("egress tunnels: a connection nobody listens for is closed at once; a reused tunnel id, an oversized tunnel frame or a call frame in the tunnel range is a violation", async (t) => {
  const base = TUNNEL_ID_BASE;
  {
    const { fromExecutor, written, conn } = fakeExecutor();
    fromExecutor.write(encodeFrame(F.TOPEN, base + 1));
    // Data for a tunnel that is gone (or of an earlier server connection) is dropped.
    fromExecutor.write(encodeFrame(F.TDATA, base + 1, Buffer.from("GET / HTTP/1.1\r\n\r\n")));
    fromExecutor.write(encodeFrame(F.TDATA, base + 9, Buffer.from("x")));
    await new Promise((r) => setImmediate(r));
    t.true(conn.alive);
    t.deepEqual(framesOf(written).map((f) => [f.type, f.id]), [[F.TCLOSE, base + 1]]);
    conn.close();
  }
  const cases: Array<[Buffer[], RegExp]> = [
    [[encodeFrame(F.TOPEN, base + 5), encodeFrame(F.TOPEN, base + 5)], /TOPEN reuses id/],
    [[encodeFrame(F.TOPEN, base + 5), encodeFrame(F.TOPEN, base + 2)], /TOPEN reuses id/],
    [[encodeFrame(F.TOPEN, 7)], /frame type 24 for id 7/],
    [[encodeFrame(F.STDOUT, base + 1, Buffer.from("x"))], /frame type 11 for id/],
    [[encodeFrame(F.TOPEN, base + 1), encodeFrame(F.TDATA, base + 1, Buffer.alloc(300 * 1024))], /tunnel frame of 307200 bytes/],
  ];
  for (const [frames, message] of cases) {
    const fromExecutor = new PassThrough();
    const conn = new SandboxConnection(fromExecutor, new PassThrough());
    // A listener, so the TOPEN is taken (and the tunnel stays open).
    const streams: Duplex[] = [];
    const listening = conn.listen(3128, (s) => streams.push(s)).catch(() => undefined);
    for (const f of frames) fromExecutor.write(f);
    await listening;
    t.false(conn.alive, String(message));
    t.regex(conn.violation ?? "", message);
    t.true(streams.every((s) => s.destroyed), "a violation closes the connection's tunnels");
  }
});

plain("egress tunnels: bytes from the sandbox wait for credit; the server returns it as the proxy reads, and sends no more than the executor's window", async (t) => {
  const { fromExecutor, written, conn } = fakeExecutor();
  const streams: Duplex[] = [];
  const listening = conn.listen(3128, (s) => streams.push(s));
  fromExecutor.write(encodeFrame(F.RESULT, 1, Buffer.from("{}")));
  await listening;
  const id = TUNNEL_ID_BASE + 1;
  fromExecutor.write(encodeFrame(F.TOPEN, id));
  await new Promise((r) => setImmediate(r));
  const [stream] = streams;
  t.truthy(stream);
  // 2 MiB from the sandbox, nobody reading yet: no credit goes back.
  for (let i = 0; i < 8; i++) fromExecutor.write(encodeFrame(F.TDATA, id, Buffer.alloc(256 * 1024, 97)));
  await new Promise((r) => setImmediate(r));
  const credits = () => framesOf(written).filter((f) => f.type === F.TCREDIT).reduce((n, f) => n + f.payload.readUInt32BE(0), 0);
  t.is(credits(), 0);
  // The proxy reads it all: credit for all of it comes back.
  let read = 0;
  stream.on("data", (c: Buffer) => (read += c.length));
  await new Promise((r) => setTimeout(r, 50));
  t.is(read, 2 * 1024 * 1024);
  t.is(credits(), 2 * 1024 * 1024);
  // The other way: 3 MiB written by the proxy, but only one window (1 MiB) goes out before credit.
  const sent = () => framesOf(written).filter((f) => f.type === F.TDATA).reduce((n, f) => n + f.payload.length, 0);
  stream.write(Buffer.alloc(3 * 1024 * 1024, 98));
  await new Promise((r) => setTimeout(r, 50));
  t.is(sent(), TUNNEL_WINDOW);
  const credit = Buffer.alloc(4);
  credit.writeUInt32BE(TUNNEL_WINDOW, 0);
  fromExecutor.write(encodeFrame(F.TCREDIT, id, credit));
  await new Promise((r) => setTimeout(r, 50));
  t.is(sent(), 2 * TUNNEL_WINDOW);
  // The executor's client closed: the stream ends and is closed without a TCLOSE back.
  fromExecutor.write(encodeFrame(F.TCLOSE, id));
  await new Promise((r) => setTimeout(r, 20));
  t.true(stream.destroyed);
  t.is(framesOf(written).filter((f) => f.type === F.TCLOSE).length, 0);
  t.true(conn.alive);
  conn.close();
});

plain("DIAL (ExposePort): the connection its TOPEN names goes to that call alone; a TOPEN naming another call, a second one, or a RESULT without one are refused", async (t) => {
  const base = TUNNEL_ID_BASE;
  const naming = (id: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(id, 0);
    return b;
  };
  {
    // The executor names the DIAL call (id 1) in its TOPEN, then answers it: the stream is the call's.
    const { fromExecutor, written, conn } = fakeExecutor();
    const dialled = conn.dial(3000);
    await new Promise((r) => setImmediate(r));
    t.deepEqual(framesOf(written).map((f) => [f.type, f.id, JSON.parse(f.payload.toString())]), [[F.DIAL, 1, { port: 3000 }]]);
    fromExecutor.write(encodeFrame(F.TOPEN, base + 1, naming(1)));
    fromExecutor.write(encodeFrame(F.RESULT, 1, Buffer.from(JSON.stringify({ tunnel: base + 1 }))));
    const stream = await dialled;
    fromExecutor.write(encodeFrame(F.TDATA, base + 1, Buffer.from("HTTP/1.1 200 OK\r\n")));
    const [first] = (await once(stream, "data")) as [Buffer];
    t.is(first.toString(), "HTTP/1.1 200 OK\r\n");
    // A TOPEN naming a call that is not a DIAL (a PING), or no call, is closed at once, never handed out.
    const ping = conn.ping(5000);
    fromExecutor.write(encodeFrame(F.TOPEN, base + 2, naming(2)));
    fromExecutor.write(encodeFrame(F.TOPEN, base + 3, naming(99)));
    fromExecutor.write(encodeFrame(F.PONG, 2, Buffer.from("v")));
    t.is(await ping, "v");
    await new Promise((r) => setImmediate(r));
    t.deepEqual(framesOf(written).filter((f) => f.type === F.TCLOSE).map((f) => f.id), [base + 2, base + 3]);
    // A second TOPEN for a DIAL that has its connection already is closed too; the first stays the call's.
    const again = conn.dial(3001);
    fromExecutor.write(encodeFrame(F.TOPEN, base + 4, naming(3)));
    fromExecutor.write(encodeFrame(F.TOPEN, base + 5, naming(3)));
    fromExecutor.write(encodeFrame(F.RESULT, 3, Buffer.from("{}")));
    const second = await again;
    await new Promise((r) => setImmediate(r));
    t.false(second.destroyed);
    t.true(framesOf(written).some((f) => f.type === F.TCLOSE && f.id === base + 5));
    // A port nothing listens on: the executor's fault, with its reason.
    const refused = conn.dial(3002);
    fromExecutor.write(encodeFrame(F.FAULT, 4, Buffer.from(JSON.stringify({ reason: "PORT_NOT_LISTENING", message: "Nothing in the workspace accepts connections on port 3002", metadata: { port: "3002" } }))));
    await t.throwsAsync(refused, { message: /port 3002/ });
    t.true(conn.alive);
    conn.close();
  }
  {
    // A RESULT for a DIAL whose TOPEN never came is a violation.
    const { fromExecutor, conn } = fakeExecutor();
    const dialled = conn.dial(3000);
    fromExecutor.write(encodeFrame(F.RESULT, 1, Buffer.from("{}")));
    await t.throwsAsync(dialled);
    t.false(conn.alive);
    t.regex(conn.violation ?? "", /DIAL answered before its connection's TOPEN/);
  }
  {
    // A TOPEN with a payload of another size is a violation.
    const { fromExecutor, conn } = fakeExecutor();
    fromExecutor.write(encodeFrame(F.TOPEN, base + 1, Buffer.from("xy")));
    await new Promise((r) => setImmediate(r));
    t.false(conn.alive);
    t.regex(conn.violation ?? "", /TOPEN with 2 payload bytes/);
  }
});

plain("egress tunnels: at most MAX_TUNNELS open at once; a flood of TOPEN is a violation", async (t) => {
  const fromExecutor = new PassThrough();
  const conn = new SandboxConnection(fromExecutor, new PassThrough());
  const streams: Duplex[] = [];
  const listening = conn.listen(3128, (s) => streams.push(s)).catch(() => undefined);
  for (let i = 1; i <= MAX_TUNNELS + 1; i++) fromExecutor.write(encodeFrame(F.TOPEN, TUNNEL_ID_BASE + i));
  await listening;
  t.is(streams.length, MAX_TUNNELS);
  t.false(conn.alive);
  t.regex(conn.violation ?? "", new RegExp(`more than ${MAX_TUNNELS} tunnels open`));
});

plain("egress tunnels: a refused client is answered and its tunnel closed by the server, even if the client never closes its side", async (t) => {
  const { fromExecutor, written, conn } = fakeExecutor();
  const settings = parseSettings({}, []).egress;
  const egress = new Egress(settings, createLogger({ level: "error", sink: () => undefined }));
  const hook = egress.hook("ws-seal", ["allowed.example"]);
  const listening = conn.listen(3128, (s) => hook.accept(s));
  fromExecutor.write(encodeFrame(F.RESULT, 1, Buffer.from("{}")));
  await listening;
  const id = TUNNEL_ID_BASE + 1;
  fromExecutor.write(encodeFrame(F.TOPEN, id));
  fromExecutor.write(encodeFrame(F.TDATA, id, Buffer.from("CONNECT denied.example:443 HTTP/1.1\r\nHost: denied.example:443\r\n\r\n")));
  await new Promise((r) => setTimeout(r, 200));
  const frames = framesOf(written).filter((f) => f.id === id);
  const answer = Buffer.concat(frames.filter((f) => f.type === F.TDATA).map((f) => f.payload)).toString();
  t.regex(answer, /^HTTP\/1\.1 403 Forbidden\r\n[\s\S]*agent-workspace egress: denied\.example:443 is not on this workspace's egress allowlist/);
  t.deepEqual(frames.map((f) => f.type).filter((type) => type !== F.TDATA), [F.TEND, F.TCLOSE]);
  egress.close();
  conn.close();
});
