/**
 * The server as a user starts it: `npm start` (which execs `agent-workspace serve`) and the bin
 * itself, as real processes. SIGTERM stops them gracefully within a bounded time even while
 * clients hold connections and streams open; SIGKILL leaves no command it ran behind; a bad
 * setting stops the server at start with a message naming the variable.
 */
import { mkdtemp, rm } from "node:fs/promises";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import test from "ava";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { alive, refusedStart, startServerProcess, waitDead } from "./helpers/process.ts";

/** Generous: the server must stop well within its own 10 s limit; this only keeps a broken test from hanging. */
const STOP_WITHIN_MS = 15_000;

function portOpen(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(port), hostname);
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/**
 * Opens what a busy server has: a running StreamBash, a unary Bash waiting for its command, an
 * open reflection stream, an idle HTTP/2 connection. Returns how to release them, the pids of the
 * running commands, and the unary call's outcome once it has one.
 */
async function holdConnections(url: string): Promise<{ release: () => void; commandPid: number; unaryPid: number; unary: Promise<string> }> {
  const sessions = new Http2SessionManager(url);
  const transport = createGrpcTransport({ baseUrl: url, sessionManager: sessions });
  const { workspace } = await createClient(WorkspaceService, transport).createWorkspace({});
  const tools = createClient(ToolService, transport);
  const abort = new AbortController();
  const stream = tools.streamBash({ workspaceId: workspace!.id, command: "echo $$; exec sleep 300" }, { signal: abort.signal });
  const it = stream[Symbol.asyncIterator]();
  let commandPid = 0;
  while (true) {
    const ev = await it.next();
    if (ev.done) break;
    if (ev.value.event.case === "stdout") {
      commandPid = Number(new TextDecoder().decode(ev.value.event.value).trim());
      break;
    }
  }
  void (async () => {
    for (;;) if ((await it.next().catch(() => ({ done: true }))).done) break;
  })();
  // A unary Bash in flight: its pid is written to a file in the workspace before it sleeps.
  const unary = tools.bash({ workspaceId: workspace!.id, command: "echo $$ > unary.pid; exec sleep 301" }, { signal: abort.signal }).then(
    () => "answered",
    (err: unknown) => `failed: ${err instanceof Error ? err.message : String(err)}`,
  );
  let unaryPid = 0;
  for (let i = 0; i < 200 && !(unaryPid > 0); i++) {
    const { content } = await tools.readFile({ workspaceId: workspace!.id, path: "unary.pid" }).catch(() => ({ content: "" }));
    unaryPid = Number(/(\d+)\s*$/.exec(content)?.[1] ?? 0);
    if (!(unaryPid > 0)) await new Promise((r) => setTimeout(r, 50));
  }
  // A reflection stream the client never half-closes.
  const reflection = createClient(ServerReflection, transport);
  const never = (async function* () {
    yield { messageRequest: { case: "listServices" as const, value: "*" } };
    await new Promise((r) => abort.signal.addEventListener("abort", r));
  })();
  void (async () => {
    for await (const _ of reflection.serverReflectionInfo(never)) void _;
  })().catch(() => undefined);
  const idle = http2.connect(url);
  idle.on("error", () => undefined);
  return {
    commandPid,
    unaryPid,
    unary,
    release: () => {
      abort.abort();
      sessions.abort();
      idle.destroy();
    },
  };
}

for (const [how, command, args] of [
  ["npm start", "npm", ["start", "--silent"]],
  ["agent-workspace serve", process.execPath, ["--liftoff-only", "bin/agent-workspace.js", "serve"]],
] as const) {
  for (const target of ["the process", "its process group"] as const) {
    test(`SIGTERM to ${target} of \`${how}\` stops the server within a bounded time while clients hold streams open`, async (t) => {
      const dataDir = await mkdtemp(path.join(tmpdir(), "aw-cli-"));
      const s = await startServerProcess({ dataDir, command, args: [...args] });
      const { release, commandPid, unaryPid, unary } = await holdConnections(s.url);
      try {
        t.true(commandPid > 0 && alive(commandPid), "the held command runs");
        t.true(unaryPid > 0 && alive(unaryPid), `the unary call's command runs (pid ${unaryPid})`);
        const pid = s.child.pid as number;
        process.kill(target === "the process" ? pid : -pid, "SIGTERM");
        t.true(await waitDead([pid, s.serverPid], STOP_WITHIN_MS), `still running after SIGTERM:\n${s.stderr()}`);
        t.false(await portOpen(s.url), "the port is released");
        await Promise.race([s.stderrClosed, new Promise((r) => setTimeout(r, 5000))]);
        t.regex(s.stderr(), /"msg":"stopped"/);
        // The commands the server was running did not outlive it, and the unary call has its answer.
        t.true(await waitDead([commandPid, unaryPid], 5000), "a running command outlived the server");
        t.regex(await Promise.race([unary, new Promise<string>((r) => setTimeout(() => r("no answer"), 5000))]), /^failed: /);
      } finally {
        release();
        for (const p of [commandPid, unaryPid]) if (p > 0 && alive(p)) process.kill(p, "SIGKILL");
        for (const p of [s.child.pid as number, s.serverPid]) if (alive(p)) process.kill(p, "SIGKILL");
        await rm(dataDir, { recursive: true, force: true });
      }
    });
  }
}

test("SIGKILL to the server: the commands it was running do not outlive it (each workspace's launcher and each executor end theirs when the server's pipe closes)", async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-cli-"));
  const s = await startServerProcess({ dataDir, command: process.execPath, args: ["--liftoff-only", "bin/agent-workspace.js", "serve"] });
  const { release, commandPid, unaryPid } = await holdConnections(s.url);
  try {
    // The unary call's command was started by the workspace's launcher for the server itself; the
    // streamed one by an executor.
    t.true(commandPid > 0 && alive(commandPid), "the held command runs");
    t.true(unaryPid > 0 && alive(unaryPid), `the unary call's command runs (pid ${unaryPid})`);
    process.kill(s.serverPid, "SIGKILL");
    t.true(await waitDead([s.serverPid], STOP_WITHIN_MS));
    t.true(await waitDead([commandPid, unaryPid], 5000), "a running command outlived the killed server");
  } finally {
    release();
    for (const p of [commandPid, unaryPid]) if (p > 0 && alive(p)) process.kill(p, "SIGKILL");
    for (const p of [s.child.pid as number, s.serverPid]) if (alive(p)) process.kill(p, "SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a bad setting stops the server at start with a message naming the variable", async (t) => {
  const cases: Array<[Record<string, string>, string[], RegExp]> = [
    [{ AGENT_WORKSPACE_DOCKER: "yes" }, [], /AGENT_WORKSPACE_DOCKER must be one of auto, on, off; got 'yes'/],
    [{ PORT: "80a" }, [], /PORT must be a whole number from 0 to 65535; got '80a'/],
    [{}, ["--port", "70000"], /--port must be a whole number from 0 to 65535; got '70000'/],
    [{ WORKSPACE_DEFAULT_MEMORY: "lots" }, [], /WORKSPACE_DEFAULT_MEMORY 'lots' is not a size/],
    [{ DOCKER_HOST: "ssh://box" }, [], /DOCKER_HOST must be unix:\/\/\/path or tcp:\/\/host:port; 'ssh:' is not supported/],
    [{}, ["--no-such-flag"], /Unknown option '--no-such-flag'/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318", OTEL_BSP_SCHEDULE_DELAY: "1s" }, [], /OTEL_BSP_SCHEDULE_DELAY must be a whole number from 0 to 3600000; got '1s'/],
  ];
  for (const [env, args, message] of cases) {
    const { code, stderr } = await refusedStart(args, env);
    t.is(code, 2, `${JSON.stringify(env)} ${args.join(" ")}: ${stderr}`);
    t.regex(stderr, message);
  }
});

test("a server on a non-loopback address without an API key does not start; with one it does, and on loopback without one it says it runs open", async (t) => {
  for (const args of [["--host", "0.0.0.0"], ["--host", "::"]]) {
    const { code, stderr } = await refusedStart([...args, "--port", "0"]);
    t.is(code, 2, stderr);
    t.regex(stderr, /refusing to listen on (0\.0\.0\.0|::) without an API key/);
    t.regex(stderr, /AGENT_WORKSPACE_API_KEYS/);
  }
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-cli-"));
  try {
    const key = "cli-test-key-0123456789abcdef";
    const keyed = await startServerProcess({ dataDir, env: { HOST: "0.0.0.0", AGENT_WORKSPACE_API_KEYS: key } });
    process.kill(keyed.serverPid, "SIGTERM");
    t.true(await waitDead([keyed.serverPid], STOP_WITHIN_MS));
    await keyed.stderrClosed;
    t.regex(keyed.stderr(), /"auth":"1 API key\(s\)"/);
    t.false(keyed.stderr().includes(key), "the key is not logged");
    t.notRegex(keyed.stderr(), /running open/);
    const open = await startServerProcess({ dataDir });
    process.kill(open.serverPid, "SIGTERM");
    t.true(await waitDead([open.serverPid], STOP_WITHIN_MS));
    await open.stderrClosed;
    t.regex(open.stderr(), /"auth":"open"/);
    t.regex(open.stderr(), /"msg":"running open: no API key is configured/);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});
