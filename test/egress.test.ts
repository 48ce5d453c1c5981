/**
 * Egress by allowlist through the real server and real sandboxes (issue 16): a docker, gvisor or
 * microvm workspace keeps no network interface, and its commands reach the destinations of their
 * agent type's allowlist through the server's proxy (the executor's listener on the sandbox's
 * loopback, joined to the workspace's own Unix socket on docker, tunnelled over its channel on
 * gVisor and in a VM) and nothing else.
 *
 * Destinations run on this machine and are never on the internet: an HTTP server and an HTTPS
 * server (a test CA the sandbox's clients are given) on 127.0.0.2, the one special address the
 * "operator" allows (AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW), with the proxy's names for them in
 * AGENT_WORKSPACE_EGRESS_HOSTS; the HTTPS server also fronts a real git smart-HTTP server. The
 * clients are real: curl and git inside the sandbox.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer as createHttpServer, type IncomingMessage, request as httpRequest, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, connect } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { AuditOutcome } from "../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { gate, microvmGate, probeEngines } from "./helpers/engines.ts";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { type ClientSet, startServer, type TestServer } from "./helpers/server.ts";
import { eventually, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  dir: string;
  ca: string;
  httpPort: number;
  httpsPort: number;
  /** A port listening on every host address: a sandbox with a network could connect to it. */
  widePort: number;
  pkgSha: string;
  bigSha: string;
  git: GitServer;
  servers: Server[];
  server: TestServer;
  logs: Array<Record<string, unknown>>;
  /** Every request the destinations served: its path, and whether a Proxy-Authorization header reached them. */
  seen: Array<{ url: string; proxyAuthorization: boolean }>;
}
const test = anyTest as TestFn<Ctx>;

const DEST = "127.0.0.2";
const engines = await probeEngines();
const CONTAINERS = (["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "egress by allowlist"));
/** The sandboxes whose egress goes through the executor's loopback listener: the containers and a VM (over its channel). */
const SANDBOXES = [...CONTAINERS, ...(microvmGate(test, "egress by allowlist") ? (["microvm"] as const) : [])];

/**
 * Which way a sandbox's proxy connections take under each runtime (see providers/egress-socket.ts):
 * gVisor's sandbox reaches a host socket only when runsc runs with --host-uds=open (or all), which
 * scripts/setup-engines.sh leaves off (it slowed gVisor's file operations).
 */
const runscArgs = engines.gvisor ? execFileSync("docker", ["info", "--format", "{{json .Runtimes.runsc}}"], { encoding: "utf8" }) : "";
const SOCKET_PATH: Record<(typeof CONTAINERS)[number], "socket" | "channel"> = { docker: "socket", gvisor: /--host-uds=(open|all)/.test(runscArgs) ? "socket" : "channel" };

const listen = (server: Server, host: string) => new Promise<number>((resolve) => server.listen(0, host, () => resolve((server.address() as AddressInfo).port)));

/** A non-loopback IPv4 address of this host: a raw socket from a sandbox to it must find no route. */
const hostAddress = Object.values(networkInterfaces()).flatMap((l) => l ?? []).find((i) => i.family === "IPv4" && !i.internal)?.address ?? "192.0.2.1";

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-egress-e2e-"));
  const file = (n: string) => path.join(dir, n);
  // A CA the sandbox's clients are given, and one certificate for every test name.
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", file("ca.key"), "-out", file("ca.pem"), "-days", "1", "-subj", "/CN=egress e2e CA"], { stdio: "ignore" });
  execFileSync("openssl", ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", file("leaf.key"), "-out", file("leaf.csr"), "-subj", "/CN=pkg.test"], { stdio: "ignore" });
  await writeFile(file("ext"), "subjectAltName=DNS:pkg.test,DNS:git.test,DNS:denied.test\n");
  execFileSync("openssl", ["x509", "-req", "-in", file("leaf.csr"), "-CA", file("ca.pem"), "-CAkey", file("ca.key"), "-CAcreateserial", "-out", file("leaf.pem"), "-days", "1", "-extfile", file("ext")], { stdio: "ignore" });

  // A package: a tarball as registries serve them.
  await mkdir(file("package"));
  await writeFile(file("package/package.json"), JSON.stringify({ name: "left-pad-test", version: "1.0.0", main: "index.js" }));
  await writeFile(file("package/index.js"), "module.exports = (s, n) => String(s).padStart(n);\n");
  execFileSync("tar", ["-czf", file("pkg.tgz"), "-C", dir, "package"]);
  const pkg = await readFile(file("pkg.tgz"));
  // 4 MiB of bytes that differ, for downloads larger than a tunnel's window.
  const big = Buffer.alloc(4 * 1024 * 1024);
  for (let i = 0; i < big.length; i += 32) createHash("sha256").update(String(i)).digest().copy(big, i);

  const git = await startGitServer({ token: "unused-token", publicRepos: ["lib"] });
  await git.createRepo("lib", { branches: { main: { "README.md": "cloned through the proxy\n" } } });
  const gitUrl = new URL(git.url);

  let httpPort = 0;
  const seen: Ctx["seen"] = [];
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    seen.push({ url: req.url ?? "", proxyAuthorization: req.headers["proxy-authorization"] !== undefined });
    const host = (req.headers.host ?? "").split(":")[0];
    if (host === "git.test") {
      // The git server, fronted: what a hosted git service over HTTPS looks like.
      const up = httpRequest({ host: gitUrl.hostname, port: gitUrl.port, method: req.method, path: req.url, headers: { ...req.headers, host: gitUrl.host } }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      up.on("error", () => res.destroy());
      return void req.pipe(up);
    }
    if (req.url === "/pkg.tgz") {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": pkg.length });
      return void res.end(pkg);
    }
    if (req.url === "/big") {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": big.length });
      return void res.end(big);
    }
    if (req.url === "/redirect") {
      res.writeHead(302, { location: `http://denied.test:${httpPort}/` });
      return void res.end();
    }
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`hello from ${req.headers.host} ${req.url}\n`);
  };
  const http = createHttpServer(handler);
  const https = createHttpsServer({ key: await readFile(file("leaf.key")), cert: await readFile(file("leaf.pem")) }, handler);
  httpPort = await listen(http, DEST);
  const httpsPort = await listen(https, DEST);
  const wide = createHttpServer((_req, res) => res.end("reached the host\n"));
  const widePort = await listen(wide, "0.0.0.0");

  const logs: Array<Record<string, unknown>> = [];
  const server = await startServer({
    env: {
      AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: `${DEST}/32`,
      AGENT_WORKSPACE_EGRESS_HOSTS: `pkg.test=${DEST},git.test=${DEST},denied.test=${DEST},rebind.test=127.0.0.1`,
    },
    onLog: (line) => logs.push(JSON.parse(line) as Record<string, unknown>),
  });
  t.context = { dir, ca: await readFile(file("ca.pem"), "utf8"), httpPort, httpsPort, pkgSha: createHash("sha256").update(pkg).digest("hex"), bigSha: createHash("sha256").update(big).digest("hex"), git, servers: [http, https, wide], server, logs, widePort, seen };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  for (const s of t.context.servers ?? []) s.close();
  await t.context.git?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/** The allowlist of the tests' agent types: the package host on both ports, the git host on HTTPS. */
const allowOf = (c: Ctx) => [`pkg.test:${c.httpPort},${c.httpsPort}`, `git.test:${c.httpsPort}`, `rebind.test:${c.httpPort}`];

async function bash(clients: ClientSet, workspaceId: string, command: string) {
  const r = await clients.tools.bash({ workspaceId, command, timeoutMs: 60_000n });
  return { exit: r.exitCode, out: r.stdout, err: r.stderr };
}

for (const provider of SANDBOXES) {
  test(`${provider}: an allowlisted host is reached through the proxy by curl and git (HTTP and HTTPS, TLS verified end to end); another host gets the proxy's 403 naming it`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = `egress-${provider}`;
    await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: ["bash", "write"], network: { mode: "allowlist", allow: allowOf(c) } } } });
    const ws = (await op.workspaces.createWorkspace({ agentType: id })).workspace!;
    await op.tools.writeFile({ workspaceId: ws.id, path: "test-ca.txt", content: c.ca });

    // The sandbox has no interface but loopback, and its commands are pointed at the proxy.
    t.is((await bash(op, ws.id, "ls /sys/class/net | tr '\\n' ' '")).out.trim(), "lo");
    // With an egress socket, with the credential that socket asks for (providers/egress-socket.ts);
    // without one (a VM, gVisor without --host-uds) the listener is on the sandbox's own loopback,
    // which nothing but the workspace's commands reaches.
    const proxy = provider === "microvm" || SOCKET_PATH[provider] === "channel" ? /^(http:\/\/127\.0\.0\.1:3128) \1 localhost,127\.0\.0\.1,::1$/ : /^(http:\/\/aw:[\w-]{32}@127\.0\.0\.1:3128) \1 localhost,127\.0\.0\.1,::1$/;
    t.regex((await bash(op, ws.id, "echo $HTTPS_PROXY $http_proxy $NO_PROXY")).out.trim(), proxy);

    const plain = await bash(op, ws.id, `curl -sS http://pkg.test:${c.httpPort}/x`);
    t.is(plain.out, `hello from pkg.test:${c.httpPort} /x\n`, plain.err);
    const download = await bash(op, ws.id, `curl -sSf --cacert test-ca.txt -o pkg.tgz https://pkg.test:${c.httpsPort}/pkg.tgz && sha256sum pkg.tgz`);
    t.is(download.out.split(" ")[0], c.pkgSha, download.err);
    // Larger than a tunnel's window, read slowly: the destination is long done when the client
    // still reads, and the tail must arrive all the same (plain HTTP and CONNECT).
    for (const flags of ["", "-p"]) {
      const slow = await bash(op, ws.id, `curl -sSf ${flags} --limit-rate 2M -o big.bin http://pkg.test:${c.httpPort}/big && sha256sum big.bin`);
      t.is(slow.out.split(" ")[0], c.bigSha, `${flags}: ${slow.err}`);
    }
    const clone = await bash(op, ws.id, `GIT_SSL_CAINFO=test-ca.txt git clone -q https://git.test:${c.httpsPort}/lib.git lib && cat lib/README.md`);
    t.is(clone.out, "cloned through the proxy\n", clone.err);

    // Not on the list: a 403 whose one line names the destination and the rule.
    const denied = await bash(op, ws.id, `curl -sS http://denied.test:${c.httpPort}/`);
    t.regex(denied.out, new RegExp(`^agent-workspace egress: denied\\.test:${c.httpPort} is not on this workspace's egress allowlist \\(rules: pkg\\.test`));
    const deniedTls = await bash(op, ws.id, `curl -sS --cacert test-ca.txt https://denied.test:${c.httpsPort}/`);
    t.not(deniedTls.exit, 0);
    t.regex(deniedTls.err, /403/);
    const deniedClone = await bash(op, ws.id, `GIT_SSL_CAINFO=test-ca.txt git clone -q https://denied.test:${c.httpsPort}/lib.git other`);
    t.not(deniedClone.exit, 0);
    t.regex(deniedClone.err, /403/);
    t.true(c.logs.some((l) => l.msg === "egress refused" && l.workspace_id === ws.id && l.host === "denied.test" && l.reason === "not_allowlisted"));
    // Each refusal is also an audit record of the workspace: DENIED, procedure "egress".
    await c.server.app.audit.flushed();
    const { events } = await op.audit.listAuditEvents({ workspaceId: ws.id, outcome: AuditOutcome.DENIED, pageSize: 50 });
    const refusal = events.find((e) => e.procedure === "egress" && e.request.host === "denied.test");
    t.truthy(refusal, JSON.stringify(events.map((e) => [e.name, e.procedure, e.request])));
    t.is(refusal?.reason, ErrorReason.EGRESS_DENIED);
    t.is(refusal?.principalKind, "sandbox");
    t.is(refusal?.result.reason, "not_allowlisted");
    t.is(refusal?.provider, provider);
    await op.workspaces.deleteWorkspace({ id: ws.id });
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: every bypass is refused: names and literals for loopback, the metadata address, a lying Host header, an unlisted port, a redirect, no proxy, a raw socket`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = `egress-bypass-${provider}`;
    await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: ["bash"], network: { mode: "allowlist", allow: [...allowOf(c), "0.0.0.0/0", "[::]/0"] } } } });
    const ws = (await op.workspaces.createWorkspace({ agentType: id })).workspace!;
    const p = c.httpPort;
    // Each attempt goes through the proxy (the literals past NO_PROXY, which names the sandbox's own
    // loopback: curl reads them as 127.0.0.1) and must get its 403.
    const attempts: Array<[string, string]> = [
      ["rebind", `curl -sS -w ' %{http_code}' http://rebind.test:${p}/`],
      ["decimal", `curl -sS --noproxy '' -w ' %{http_code}' http://2130706433:${p}/`],
      ["hex", `curl -sS --noproxy '' -w ' %{http_code}' http://0x7f000001:${p}/`],
      ["mapped", `curl -sS --noproxy '' -w ' %{http_code}' 'http://[::ffff:127.0.0.1]:${p}/'`],
      ["metadata", `curl -sS -w ' %{http_code}' http://169.254.169.254/latest/meta-data/`],
      ["host-header", `curl -sS -w ' %{http_code}' -H 'Host: denied.test' http://pkg.test:${p}/`],
      ["port", `curl -sS -w ' %{http_code}' -p http://pkg.test:22/`],
      ["redirect", `curl -sS -L -w ' %{http_code}' http://pkg.test:${p}/redirect`],
    ];
    for (const [name, command] of attempts) {
      const r = await bash(op, ws.id, command);
      t.regex(`${r.out} ${r.err}`, /403/, `${name}: ${r.out} ${r.err}`);
      t.notRegex(r.out, /hello from/, name);
    }
    // Without the proxy there is no network at all: no name resolves, no address routes.
    const unproxied = await bash(op, ws.id, `env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy curl -sS -m 10 http://pkg.test:${p}/`);
    t.not(unproxied.exit, 0);
    t.notRegex(unproxied.out, /hello from/);
    const raw = await bash(op, ws.id, `timeout 10 bash -c 'echo hi > /dev/tcp/${hostAddress}/${c.widePort}' && echo connected || echo refused`);
    t.is(raw.out.trim(), "refused");
    t.regex(raw.err, /unreachable|no route/i);
    t.true(c.logs.some((l) => l.msg === "egress refused" && l.workspace_id === ws.id && l.reason === "special_address"));
    t.true(c.logs.some((l) => l.msg === "egress refused" && l.workspace_id === ws.id && l.reason === "host_mismatch"));
    await op.workspaces.deleteWorkspace({ id: ws.id });
  });

  if (provider !== "microvm") test(`${provider}: proxy connections take the workspace's own Unix socket where the runtime lets the sandbox reach it (elsewhere no socket is made or mounted); the socket is no way around the allowlist, the agent cannot list or replace it, and it goes with the workspace`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = `egress-socket-${provider}`;
    await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: ["bash"], network: { mode: "allowlist", allow: allowOf(c) } } } });
    const ws = (await op.workspaces.createWorkspace({ agentType: id })).workspace!;
    const big = await bash(op, ws.id, `curl -sS http://pkg.test:${c.httpPort}/big | sha256sum`);
    t.is(big.out.split(" ")[0], c.bigSha, big.err);
    const path_ = c.logs.find((l) => l.msg === "workspace egress path" && l.workspace_id === ws.id);
    const inspect = JSON.parse(execFileSync("docker", ["inspect", `aw-${ws.id}`], { encoding: "utf8" })) as Array<{ Mounts: Array<{ Source: string; Destination: string; RW: boolean }> }>;
    const mount = inspect[0].Mounts.find((m) => m.Destination === "/opt/agent-workspace/egress");
    if (SOCKET_PATH[provider] === "channel") {
      // A runtime whose sandbox cannot reach a host socket gets no directory (every mount costs
      // gVisor's kernel memory) and no offer; the channel carries the same bytes.
      t.like(path_, { socket_offered: false, via: "channel" });
      t.is(mount, undefined, "no socket directory mounted where no socket can be reached");
      const reach = await bash(op, ws.id, "for s in /var/run/docker.sock /run/docker.sock; do curl -sS -m 5 --unix-socket $s http://engine/version && echo \"REACHED $s\"; done");
      t.notRegex(reach.out, /REACHED|ApiVersion/, reach.err);
      await op.workspaces.deleteWorkspace({ id: ws.id });
      return;
    }
    t.like(path_, { socket_offered: true, via: SOCKET_PATH[provider] });
    t.truthy(mount, "the socket's directory is mounted");
    t.false(mount!.RW, "read-only in the sandbox");
    t.true(mount!.Source.startsWith(path.join(c.server.dataDir, "egress") + path.sep));
    t.is((await stat(path.dirname(mount!.Source))).mode & 0o777, 0o711, "nobody lists the host's socket directories");
    // The agent reaches the socket (so it can reach the proxy, as through the loopback port) but cannot list, add or remove anything.
    const listing = await bash(op, ws.id, "ls /opt/agent-workspace/egress; touch /opt/agent-workspace/egress/x; rm -f /opt/agent-workspace/egress/proxy.sock");
    t.regex(listing.err, /ls: .*(Permission denied|Operation not permitted)/);
    t.regex(listing.err, /touch: .*(Read-only file system|Permission denied)/);
    const hostSocket = path.join(mount!.Source, "proxy.sock");
    t.true((await stat(hostSocket)).isSocket(), "the socket is still there");
    t.deepEqual(await readdir(mount!.Source), ["proxy.sock"]);

    // Any user of the host can find the socket's path (/proc/net/unix) and connect: without the
    // workspace's credential, or with another, a request gets 407 and reaches nothing.
    const token = new URL((await bash(op, ws.id, "echo $HTTPS_PROXY")).out.trim()).password;
    const basic = (userpass: string) => `Proxy-Authorization: Basic ${Buffer.from(userpass).toString("base64")}\r\n`;
    for (const [i, header] of ["", basic("aw:wrong-token-wrong-token-wrong-tok"), basic(`root:${token}`)].entries()) {
      const plain = await proxyRequest(hostSocket, `GET http://pkg.test:${c.httpPort}/socket-stranger-${i} HTTP/1.1\r\nHost: pkg.test:${c.httpPort}\r\n${header}\r\n`);
      t.regex(plain, /^HTTP\/1\.1 407 Proxy Authentication Required\r\n/, `attempt ${i}`);
      const tunnel = await proxyRequest(hostSocket, `CONNECT pkg.test:${c.httpsPort} HTTP/1.1\r\nHost: pkg.test:${c.httpsPort}\r\n${header}\r\n`);
      t.regex(tunnel, /^HTTP\/1\.1 407 Proxy Authentication Required\r\n/, `CONNECT, attempt ${i}`);
    }
    t.deepEqual(c.seen.filter((r) => r.url.startsWith("/socket-stranger-")), [], "a request without the credential reached a destination");
    const owned = await proxyRequest(hostSocket, `GET http://pkg.test:${c.httpPort}/socket-owner HTTP/1.1\r\nHost: pkg.test:${c.httpPort}\r\n${basic(`aw:${token}`)}Connection: close\r\n\r\n`);
    t.regex(owned, /^HTTP\/1\.1 200 /, "with the credential the socket serves");
    t.false(JSON.stringify(c.logs).includes(token), "the credential is in a log line");
    // Host sockets the sandbox was not given stay out of reach, by name or through a link (under
    // gVisor, --host-uds=open reaches only sockets mounted into the sandbox): the engine's socket,
    // and this workspace's own socket by its host path.
    const hostSockets = ["/var/run/docker.sock", "/run/docker.sock", path.join(mount!.Source, "proxy.sock")];
    const reach = await bash(
      op,
      ws.id,
      hostSockets.map((p, i) => `ln -sf ${p} /tmp/link${i}; for s in ${p} /tmp/link${i}; do curl -sS -m 5 --unix-socket $s http://engine/version && echo "REACHED $s"; done`).join("; "),
    );
    t.notRegex(reach.out, /REACHED|ApiVersion/, reach.err);
    if (SOCKET_PATH[provider] === "socket") {
      // Straight to the socket, past the executor, with the credential the agent has: the proxy
      // still checks every destination.
      const through = (host: string) =>
        bash(
          op,
          ws.id,
          `curl -sS -w ' %{http_code}' --unix-socket /opt/agent-workspace/egress/proxy.sock -H "Proxy-Authorization: Basic $(printf aw:%s "${token}" | base64 -w0)" --request-target http://${host}:${c.httpPort}/ http://${host}:${c.httpPort}/`,
        );
      const denied = await through("denied.test");
      t.regex(denied.out, /403/);
      t.notRegex(denied.out, /hello from/);
      t.regex((await through("pkg.test")).out, /hello from pkg.test/);
    }
    await op.workspaces.deleteWorkspace({ id: ws.id });
    await t.throwsAsync(stat(mount!.Source), { code: "ENOENT" }, "the directory goes with the workspace");
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: with network = none the same commands get no connection at all`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = `egress-none-${provider}`;
    await op.config.createAgentType({ agentType: { id, workspace: { enabled: true, provider, tools: ["bash"] } } });
    const ws = (await op.workspaces.createWorkspace({ agentType: id })).workspace!;
    t.is((await bash(op, ws.id, "echo \"[$HTTPS_PROXY$http_proxy]\"")).out.trim(), "[]");
    const direct = await bash(op, ws.id, `curl -sS -m 10 http://pkg.test:${c.httpPort}/`);
    t.not(direct.exit, 0);
    // Not even a proxy listener to talk to.
    const viaPort = await bash(op, ws.id, `curl -sS -m 10 -x http://127.0.0.1:3128 http://pkg.test:${c.httpPort}/`);
    t.not(viaPort.exit, 0);
    t.regex(viaPort.err, /Failed to connect|Connection refused|Couldn't connect/);
    await op.workspaces.deleteWorkspace({ id: ws.id });
  });

  // microvm runs one scenario of each kind here (issue 30), each VM's commands being emulated
  if (provider !== "microvm") test(`${provider}: a setup command that installs a package through the proxy takes a session to ACTIVE without a warning`, async (t) => {
    const c = t.context;
    const op = c.server.clients.grpc;
    const id = `egress-setup-${provider}`;
    const install =
      `printf '%s' '${c.ca}' > /tmp/test-ca.txt && curl -sSf --cacert /tmp/test-ca.txt -o /tmp/pkg.tgz https://pkg.test:${c.httpsPort}/pkg.tgz` +
      " && mkdir -p node_modules/left-pad-test && tar -xzf /tmp/pkg.tgz -C node_modules/left-pad-test --strip-components=1";
    await op.config.createAgentType({
      agentType: { id, workspace: { enabled: true, provider, tools: ["bash"], setupCommands: [install], network: { mode: "allowlist", allow: allowOf(c) } } },
    });
    const { session } = await op.workspaces.startSession({ agentType: id, task: {} });
    const ready = await watchUntilReady(op, session!.id, 120_000);
    t.is(ready.session.status, SessionStatus.ACTIVE);
    t.deepEqual(ready.session.warnings, []);
    const pkg = await bash(op, ready.session.workspaceId, "cat node_modules/left-pad-test/package.json");
    t.regex(pkg.out, /"name":"left-pad-test"/);
    await op.workspaces.endSession({ id: session!.id });
  });
}

if (CONTAINERS.includes("docker")) {
  test("docker: a restart takes the socket up again; a server with AGENT_WORKSPACE_EGRESS_PATH=channel carries the same workspace's egress over the attach stream and still removes its socket's directory", async (t) => {
    const c = t.context;
    const dataDir = await mkdtemp(path.join(tmpdir(), "aw-egress-path-"));
    const env = { AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: `${DEST}/32`, AGENT_WORKSPACE_EGRESS_HOSTS: `pkg.test=${DEST}` };
    const logs: Array<Record<string, unknown>> = [];
    const onLog = (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>);
    const via = (id: string) => logs.filter((l) => l.msg === "workspace egress path" && l.workspace_id === id).map((l) => `${String(l.via)}/${String(l.socket_offered)}`);
    const fetch = async (server: TestServer, id: string) => (await bash(server.clients.grpc, id, `curl -sS http://pkg.test:${c.httpPort}/path`)).out;
    const servers: TestServer[] = [];
    const start = async (extra: Record<string, string> = {}) => {
      const server = await startServer({ dataDir, env: { ...env, ...extra }, onLog });
      servers.push(server);
      return server;
    };
    let workspaceId = "";
    try {
      const first = await start();
      const op = first.clients.grpc;
      await op.config.createAgentType({ agentType: { id: "egress-path", workspace: { enabled: true, provider: "docker", tools: ["bash"], network: { mode: "allowlist", allow: allowOf(c) } } } });
      const ws = (await op.workspaces.createWorkspace({ agentType: "egress-path" })).workspace!;
      workspaceId = ws.id;
      t.is(await fetch(first, ws.id), `hello from pkg.test:${c.httpPort} /path\n`);
      await first.close();
      const dirs = await readdir(path.join(dataDir, "egress"));
      t.is(dirs.length, 1);

      // The same settings: the socket is listened on again (its old file replaced) and taken.
      const second = await start();
      t.is(await fetch(second, ws.id), `hello from pkg.test:${c.httpPort} /path\n`);
      await second.close();

      const third = await start({ AGENT_WORKSPACE_EGRESS_PATH: "channel" });
      t.is(await fetch(third, ws.id), `hello from pkg.test:${c.httpPort} /path\n`);
      t.deepEqual(via(ws.id), ["socket/true", "socket/true", "channel/false"]);
      t.is((await bash(third.clients.grpc, ws.id, "echo $HTTPS_PROXY")).out.trim(), "http://127.0.0.1:3128", "no credential where no socket is offered");
      await third.clients.grpc.workspaces.deleteWorkspace({ id: ws.id });
      t.deepEqual(await readdir(path.join(dataDir, "egress")), [], "the socket's directory went with the workspace");
      await third.close();
    } finally {
      const last = servers.at(-1);
      if (workspaceId !== "" && last) await last.clients.grpc.workspaces.deleteWorkspace({ id: workspaceId }).catch(() => undefined);
      for (const server of servers) await server.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
}

test("local: commands get the proxy variables and an allowlisted host answers through the proxy, but nothing is enforced (a command may go around it)", async (t) => {
  const c = t.context;
  const op = c.server.clients.grpc;
  await op.config.createAgentType({ agentType: { id: "egress-local", workspace: { enabled: true, provider: "local", tools: ["bash"], network: { mode: "allowlist", allow: allowOf(c) } } } });
  const ws = (await op.workspaces.createWorkspace({ agentType: "egress-local" })).workspace!;
  const proxy = (await bash(op, ws.id, "echo $HTTP_PROXY")).out.trim();
  t.regex(proxy, /^http:\/\/aw:[A-Za-z0-9_-]{32}@127\.0\.0\.1:\d+$/);
  t.is((await bash(op, ws.id, `curl -sS http://pkg.test:${c.httpPort}/x`)).out, `hello from pkg.test:${c.httpPort} /x\n`);
  t.regex((await bash(op, ws.id, `curl -sS http://denied.test:${c.httpPort}/`)).out, /^agent-workspace egress: denied\.test:\d+ is not on this workspace's egress allowlist/);
  // The host's own network: a command that ignores the variables reaches what it likes.
  t.is((await bash(op, ws.id, `curl -sS --noproxy '*' http://${DEST}:${c.httpPort}/direct`)).out, `hello from ${DEST}:${c.httpPort} /direct\n`);
  await op.workspaces.deleteWorkspace({ id: ws.id });
  // The workspace's proxy port closed with it.
  const closed = await new Promise<boolean>((resolve) => {
    const s = connect(Number(new URL(proxy).port), "127.0.0.1");
    s.on("connect", () => (s.destroy(), resolve(false)));
    s.on("error", () => resolve(true));
  });
  t.true(closed);
});

/** One raw request to a proxy port; resolves to the status line, the headers and the body as text. */
function proxyRequest(to: number | string, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = typeof to === "number" ? connect(to, "127.0.0.1") : connect({ path: to });
    let answer = "";
    let headed = false;
    s.on("data", (d: Buffer) => {
      answer += d.toString("latin1");
      // The proxy closes after a refusal; an accepted CONNECT would stay open, so once the answer's
      // head is in, the rest gets 3 s. Before that, 30 s: a hang guard (a loaded CI answered late).
      if (!headed && answer.includes("\r\n\r\n")) {
        headed = true;
        setTimeout(() => s.destroy(), 3000).unref();
      }
    });
    s.on("error", reject);
    s.on("close", () => resolve(answer));
    s.write(request);
    setTimeout(() => s.destroy(), 30_000).unref();
  });
}

test("local: the workspace's proxy port serves only its commands: without its credential, or with a wrong one, a client gets 407 and reaches nothing; the credential is in no log line or audit record", async (t) => {
  const c = t.context;
  const op = c.server.clients.grpc;
  await op.config.createAgentType({ agentType: { id: "egress-local-auth", workspace: { enabled: true, provider: "local", tools: ["bash", "write"], network: { mode: "allowlist", allow: allowOf(c) } } } });
  const ws = (await op.workspaces.createWorkspace({ agentType: "egress-local-auth" })).workspace!;
  try {
    const url = new URL((await bash(op, ws.id, "echo $HTTPS_PROXY")).out.trim());
    const port = Number(url.port);
    const token = url.password;
    t.is(url.username, "aw");
    t.regex(token, /^[A-Za-z0-9_-]{32}$/);

    // Any other user of the host: no credential, a wrong password, the token under another name,
    // another scheme, the token itself in plain. Each is a 407 naming the scheme, and reaches nothing.
    const basic = (userpass: string) => `Proxy-Authorization: Basic ${Buffer.from(userpass).toString("base64")}\r\n`;
    const attempts = ["", basic("aw:wrong-token-wrong-token-wrong-tok"), basic(`aw:${token}x`), basic(`root:${token}`), `Proxy-Authorization: Bearer ${token}\r\n`, `Proxy-Authorization: ${token}\r\n`];
    for (const [i, header] of attempts.entries()) {
      const plain = await proxyRequest(port, `GET http://pkg.test:${c.httpPort}/stranger-${i} HTTP/1.1\r\nHost: pkg.test:${c.httpPort}\r\n${header}\r\n`);
      t.regex(plain, /^HTTP\/1\.1 407 Proxy Authentication Required\r\n/, `plain request, attempt ${i}`);
      t.regex(plain, /\r\nproxy-authenticate: Basic realm="agent-workspace egress"\r\n/i);
      t.false(plain.includes(token), "the answer never echoes the credential");
      const tunnel = await proxyRequest(port, `CONNECT pkg.test:${c.httpsPort} HTTP/1.1\r\nHost: pkg.test:${c.httpsPort}\r\n${header}\r\n`);
      t.regex(tunnel, /^HTTP\/1\.1 407 Proxy Authentication Required\r\n/, `CONNECT, attempt ${i}`);
      t.regex(tunnel, /\r\nproxy-authenticate: Basic realm="agent-workspace egress"\r\n/i);
    }
    t.deepEqual(c.seen.filter((r) => r.url.startsWith("/stranger-")), [], "a request without the credential reached a destination");
    // curl given no credential says so too.
    t.regex((await bash(op, ws.id, `curl -sS -o /dev/null -w '%{http_code}' -x http://127.0.0.1:${port} http://pkg.test:${c.httpPort}/stranger-curl`)).out, /^407$/);

    // The workspace's own commands, with the variables they were given: plain HTTP and a TLS tunnel.
    t.is((await bash(op, ws.id, `curl -sS http://pkg.test:${c.httpPort}/own`)).out, `hello from pkg.test:${c.httpPort} /own\n`);
    await op.tools.writeFile({ workspaceId: ws.id, path: "test-ca.txt", content: c.ca });
    t.is((await bash(op, ws.id, `curl -sS --cacert test-ca.txt https://pkg.test:${c.httpsPort}/own-tls`)).out, `hello from pkg.test:${c.httpsPort} /own-tls\n`);
    // Proxy-Authorization is the proxy's: the destination never sees it.
    t.deepEqual(c.seen.filter((r) => r.url.startsWith("/own")).map((r) => r.proxyAuthorization), [false, false]);

    // Nowhere to be read: the server's log lines (refusals included) and the audit trail.
    await c.server.app.audit.flushed();
    const { events } = await op.audit.listAuditEvents({ workspaceId: ws.id, pageSize: 100 });
    t.true(events.length > 0);
    t.false(JSON.stringify(events, (_k, v) => (typeof v === "bigint" ? String(v) : v)).includes(token), "the credential is in the audit trail");
    t.false(JSON.stringify(c.logs).includes(token), "the credential is in a log line");
    t.true(c.logs.some((l) => l.msg === "egress refused" && l.reason === "proxy_auth" && l.workspace_id === ws.id), "the refusals are logged");
  } finally {
    await op.workspaces.deleteWorkspace({ id: ws.id });
  }
});

test("local: the byte budget is the session's: what a warm pool's setup downloaded does not count, the session's own downloads do", async (t) => {
  const c = t.context;
  const server = await startServer({
    env: { AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW: `${DEST}/32`, AGENT_WORKSPACE_EGRESS_HOSTS: `pkg.test=${DEST}`, AGENT_WORKSPACE_EGRESS_MAX_BYTES: "6M" },
  });
  try {
    const op = server.clients.grpc;
    const type = "egress-budget";
    const fetchBig = `curl -sSf -o /dev/null http://pkg.test:${c.httpPort}/big`;
    await op.config.createAgentType({
      agentType: { id: type, workspace: { enabled: true, provider: "local", tools: ["bash"], setupCommands: [fetchBig], warmPoolSize: 1, network: { mode: "allowlist", allow: allowOf(c) } } },
    });
    const pooled = () => server.app.workspaces.listRecords("", {}).find((r) => r.agentType?.id === type && r.pool?.ready);
    t.deepEqual((await eventually(pooled, 60_000, "the pool to fill")).pool?.warnings, [], "the pool's setup downloaded its 4 MiB");
    const started = await op.workspaces.startSession({ agentType: type, task: {} });
    t.true(started.session?.fromWarmPool);
    const ws = started.session!.workspaceId;
    // 4 MiB in the pool's setup and 4 MiB now would pass 6 MiB together; the session's count starts at its start.
    t.is((await bash(op, ws, fetchBig)).exit, 0);
    // Another 4 MiB passes the session's 6 MiB: the proxy closes the connection and curl fails.
    t.not((await bash(op, ws, fetchBig)).exit, 0);
    await op.workspaces.endSession({ id: started.session!.id });
  } finally {
    await server.close();
  }
});
