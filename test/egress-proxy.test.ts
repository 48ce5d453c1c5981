/**
 * The egress proxy (issue 16, first part) over real sockets, with curl as the client: allowed
 * names reach their servers over plain HTTP and through a CONNECT tunnel whose TLS curl verifies
 * end to end (no interception); everything else is a 403 whose one line names the destination and
 * the rule, and is logged: unlisted names and ports, names resolving to loopback, IP literals in
 * decimal, hex and IPv4-mapped IPv6 forms, the metadata address, a Host header that disagrees with
 * the URL, a redirect to a denied host, the server's own endpoint; connections, bytes and
 * idleness are bounded. Destinations listen on 127.0.0.2, the one special address the "operator"
 * allows here; the proxy maps the test names to it (its own DNS), and resolves the rest for real.
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { connect, createServer as createTcpServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import anyTest, { type TestFn } from "ava";
import { DEFAULT_PORTS, EgressPolicy, parseRule } from "../server/egress/destinations.ts";
import { EgressProxy, type EgressWorkspace } from "../server/egress/proxy.ts";
import { createLogger } from "../server/logger.ts";

const run = promisify(execFile);

interface Ctx {
  dir: string;
  proxyPort: number;
  httpPort: number;
  httpsPort: number;
  ownPort: number;
  servers: Array<{ close(): void }>;
  logs: string[];
  ws: EgressWorkspace;
  proxy: EgressProxy;
}
const test = anyTest as TestFn<Ctx>;

const DEST = "127.0.0.2";
const NAMES: Record<string, string> = { "allowed.test": DEST, "secure.test": DEST, "denied.test": DEST, "own.test": DEST, "rebind.test": "127.0.0.1" };

const listen = (server: Server | ReturnType<typeof createTcpServer>, host: string) =>
  new Promise<number>((resolve) => server.listen(0, host, () => resolve((server.address() as AddressInfo).port)));

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-egress-"));
  // A CA the client trusts and a certificate for secure.test signed by it.
  const file = (n: string) => path.join(dir, n);
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", file("ca.key"), "-out", file("ca.pem"), "-days", "1", "-subj", "/CN=egress test CA"], { stdio: "ignore" });
  execFileSync("openssl", ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", file("leaf.key"), "-out", file("leaf.csr"), "-subj", "/CN=secure.test"], { stdio: "ignore" });
  execFileSync("bash", ["-c", `printf 'subjectAltName=DNS:secure.test\\n' > ${file("ext")} && openssl x509 -req -in ${file("leaf.csr")} -CA ${file("ca.pem")} -CAkey ${file("ca.key")} -CAcreateserial -out ${file("leaf.pem")} -days 1 -extfile ${file("ext")}`], { stdio: "ignore" });

  const logs: string[] = [];
  const handler = (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => {
    if (req.url === "/redirect") {
      res.writeHead(302, { location: `http://denied.test:${(http.address() as AddressInfo).port}/` });
      return res.end();
    }
    if (req.url === "/big") {
      res.writeHead(200);
      return res.end(Buffer.alloc(256 * 1024, 120));
    }
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`hello ${req.headers.host} ${req.url}`);
  };
  const http = createHttpServer(handler);
  const https = createHttpsServer({ key: await readFile(file("leaf.key")), cert: await readFile(file("leaf.pem")) }, handler);
  const own = createHttpServer((_req, res) => res.end("the server itself"));
  const [httpPort, httpsPort, ownPort] = await Promise.all([listen(http, DEST), listen(https, DEST), listen(own, DEST)]);

  const rules = [`allowed.test:${httpPort}`, `secure.test:${httpsPort}`, `localhost:${httpPort}`, `rebind.test:${httpPort}`, `own.test:${ownPort}`, `127.0.0.0/8:${httpPort}`, "169.254.169.254/32:80", "[::ffff:127.0.0.1]/128:80"];
  const policy = new EgressPolicy(rules.map((r, i) => parseRule(r, `network.allow[${i}]`)), { privateAllow: [`${DEST}/32`], ownEndpoints: [{ address: DEST, port: ownPort }] });
  const ws: EgressWorkspace = { workspaceId: "ws-egress-test", policy, usage: { connections: 0, bytes: 0 } };
  const proxy = new EgressProxy({
    limits: { maxConnections: 8, idleTimeoutMs: 1500, maxBytes: 10 * 1024 * 1024 },
    logger: createLogger({ level: "warn", sink: (l) => logs.push(l) }),
    lookup: async (host) => (NAMES[host] ? [{ address: NAMES[host], family: 4 }] : (await import("node:dns/promises")).lookup(host, { all: true })),
  });
  // Stands in for the executor's tunnel: every accepted socket is this workspace's.
  const front = createTcpServer((socket) => proxy.accept(socket, ws));
  const proxyPort = await listen(front, "127.0.0.1");
  t.context = { dir, proxyPort, httpPort, httpsPort, ownPort, servers: [http, https, own, front], logs, ws, proxy };
});

test.after.always(async (t) => {
  for (const s of t.context.servers ?? []) s.close();
  t.context.proxy?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/** curl through the proxy: status code and body (curl's own error on stderr). */
async function curl(t: { context: Ctx }, url: string, ...args: string[]): Promise<{ code: string; body: string; stderr: string }> {
  const out = path.join(t.context.dir, `body-${Math.random().toString(36).slice(2)}`);
  const r = await run("curl", ["-sS", "-o", out, "-w", "%{http_code}", "-x", `http://127.0.0.1:${t.context.proxyPort}`, "--max-time", "20", ...args, url]).catch((e: { stdout: string; stderr: string }) => e);
  const body = await readFile(out, "utf8").catch(() => "");
  return { code: r.stdout.trim(), body, stderr: r.stderr };
}

/** A raw request to the proxy; the whole answer. */
function raw(t: { context: Ctx }, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(t.context.proxyPort, "127.0.0.1", () => s.write(request));
    let got = "";
    s.on("data", (d) => (got += d));
    s.on("close", () => resolve(got));
    s.on("error", reject);
    setTimeout(() => s.destroy(), 5000);
  });
}

test("rules: names, wildcards, ports and explicit CIDR ranges parse; anything else is INVALID_ARGUMENT naming the field", (t) => {
  t.deepEqual(parseRule("Registry.NPMjs.org", "f").ports, DEFAULT_PORTS);
  t.is(parseRule("*.example.org:8443", "f").kind, "wildcard");
  t.deepEqual(parseRule("[2001:db8::]/32:443,80", "f").ports, [443, 80]);
  for (const bad of ["", "http://x.org", "10.0.0.1", "*.org", "x.org:0", "x.org:70000", "2001:db8::/32", "a..b", "10.0.0.0/33"]) {
    const err = t.throws(() => parseRule(bad, "network.allow[0]"));
    t.is((err as { metadata?: Record<string, string> }).metadata?.field, "network.allow[0]", bad);
  }
  const policy = new EgressPolicy([parseRule("*.example.org", "f")], { privateAllow: [], ownEndpoints: [] });
  t.false("reason" in policy.matchName("a.b.example.org", 443));
  t.true("reason" in policy.matchName("example.org", 443), "a wildcard does not cover the name itself");
  t.true("reason" in policy.matchName("evil-example.org", 443));
  t.true("reason" in policy.matchName("a.example.org", 22));
});

test("allowed: plain HTTP is forwarded with its Host; HTTPS goes through a CONNECT tunnel the client verifies end to end", async (t) => {
  const plain = await curl(t, `http://allowed.test:${t.context.httpPort}/pkg.tgz`);
  t.is(plain.code, "200", plain.stderr);
  t.is(plain.body, `hello allowed.test:${t.context.httpPort} /pkg.tgz`);
  const tls = await curl(t, `https://secure.test:${t.context.httpsPort}/index.json`, "--cacert", path.join(t.context.dir, "ca.pem"));
  t.is(tls.code, "200", tls.stderr);
  t.is(tls.body, `hello secure.test:${t.context.httpsPort} /index.json`);
});

test("refused with a 403 naming host and rule, and logged: unlisted names and ports, loopback by name and by every literal form, the metadata address, the server's own endpoint", async (t) => {
  const { httpPort, httpsPort, ownPort } = t.context;
  const cases: Array<[string, string[], RegExp]> = [
    [`http://denied.test:${httpPort}/`, [], /denied\.test:\d+ is not on this workspace's egress allowlist \(rules: allowed\.test:/],
    [`https://denied.test:${httpsPort}/`, [], /CONNECT tunnel failed, response 403/],
    [`http://allowed.test:${httpPort + 1}/`, [], /not on this workspace's egress allowlist/],
    [`http://localhost:${httpPort}/`, [], /localhost:\d+ resolves to (127\.0\.0\.1|::1), a loopback/],
    [`http://rebind.test:${httpPort}/`, [], /rebind\.test:\d+ resolves to 127\.0\.0\.1/],
    [`http://2130706433:${httpPort}/`, [], /127\.0\.0\.1:\d+ resolves to 127\.0\.0\.1, a loopback/],
    [`http://0x7f000001:${httpPort}/`, [], /127\.0\.0\.1:\d+ resolves to 127\.0\.0\.1/],
    [`http://[::ffff:127.0.0.1]/`, [], /resolves to ::ffff:7f00:1, a loopback|resolves to ::ffff:127\.0\.0\.1, a loopback/],
    ["http://169.254.169.254/latest/meta-data/", [], /169\.254\.169\.254:80 resolves to 169\.254\.169\.254, a loopback, link-local/],
    [`http://own.test:${ownPort}/`, [], /this server's own address/],
  ];
  for (const [url, args, expected] of cases) {
    const r = await curl(t, url, ...args);
    if (url.startsWith("https:")) {
      t.regex(r.stderr, expected, url);
    } else {
      t.is(r.code, "403", `${url}: ${r.stderr}`);
      t.regex(r.body, /^agent-workspace egress: .+\n$/, url);
      t.regex(r.body, expected, url);
    }
  }
  const refusals = t.context.logs.filter((l) => l.includes('"egress refused"'));
  t.true(refusals.some((l) => l.includes('"host":"denied.test"') && l.includes('"reason":"not_allowlisted"')));
  t.true(refusals.some((l) => l.includes('"reason":"special_address"') && l.includes("169.254.169.254")));
  t.true(refusals.some((l) => l.includes('"reason":"server_address"')));
});

test("a CONNECT to an unlisted port, an absolute-form request whose Host disagrees with its URL, and a redirect to a denied host are refused", async (t) => {
  const { httpPort } = t.context;
  const connectSsh = await raw(t, "CONNECT allowed.test:22 HTTP/1.1\r\nHost: allowed.test:22\r\n\r\n");
  t.regex(connectSsh, /^HTTP\/1\.1 403 Forbidden\r\n[\s\S]*allowed\.test:22 is not on this workspace's egress allowlist/);
  const mismatch = await raw(t, `GET http://allowed.test:${httpPort}/ HTTP/1.1\r\nHost: denied.test:${httpPort}\r\nConnection: close\r\n\r\n`);
  t.regex(mismatch, /^HTTP\/1\.1 403 Forbidden\r\n[\s\S]*the Host header 'denied\.test:\d+' disagrees with the URL's host 'allowed\.test:\d+'/);
  const followed = await curl(t, `http://allowed.test:${httpPort}/redirect`, "-L");
  t.is(followed.code, "403");
  t.regex(followed.body, /denied\.test:\d+ is not on this workspace's egress allowlist/);
  const https = await raw(t, `GET https://secure.test:${t.context.httpsPort}/ HTTP/1.1\r\nHost: secure.test:${t.context.httpsPort}\r\n\r\n`);
  t.regex(https, /^HTTP\/1\.1 400 [\s\S]*goes through CONNECT/);
});

test.serial("bounds: connections per workspace, bytes per workspace and idle connections close with a logged reason", async (t) => {
  const { httpPort } = t.context;
  // Idle: a tunnel nobody speaks on closes after the idle timeout.
  const idle = await raw(t, `CONNECT allowed.test:${httpPort} HTTP/1.1\r\nHost: allowed.test:${httpPort}\r\n\r\n`);
  t.regex(idle, /^HTTP\/1\.1 200 Connection Established/);
  t.true(t.context.logs.some((l) => l.includes('"egress connection closed"') && l.includes("idle for 1500 ms")));
  // Connections: the ninth at once is refused.
  const held = await Promise.all(
    Array.from({ length: 8 }, () => new Promise<ReturnType<typeof connect>>((resolve) => {
      const s = connect(t.context.proxyPort, "127.0.0.1", () => {
        s.write(`CONNECT allowed.test:${httpPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
        s.once("data", () => resolve(s));
      });
    })),
  );
  const ninth = await raw(t, `CONNECT allowed.test:${httpPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.regex(ninth, /^HTTP\/1\.1 503 [\s\S]*already holds 8 connections/);
  for (const s of held) s.destroy();
  await new Promise((r) => setTimeout(r, 200));
  // Bytes: past the workspace's budget the download is cut and the next request refused.
  t.context.ws.usage.bytes = 10 * 1024 * 1024 - 64 * 1024;
  const big = await curl(t, `http://allowed.test:${httpPort}/big`);
  t.not(big.body.length, 256 * 1024);
  t.true(t.context.logs.some((l) => l.includes('"egress connection closed"') && l.includes("moved more than")));
  // The same through a CONNECT tunnel (its download side is read by the proxy's own buffer).
  const closedBefore = t.context.logs.filter((l) => l.includes("moved more than")).length;
  t.context.ws.usage.bytes = 10 * 1024 * 1024 - 64 * 1024;
  const tunnelled = await curl(t, `http://allowed.test:${httpPort}/big`, "-p");
  t.not(tunnelled.body.length, 256 * 1024);
  t.true(t.context.logs.filter((l) => l.includes("moved more than")).length > closedBefore);
  t.context.ws.usage.bytes = 0;
  t.is((await curl(t, `http://allowed.test:${httpPort}/after`)).code, "200");
  t.is((await curl(t, `http://allowed.test:${httpPort}/whole`, "-p")).body, `hello allowed.test:${httpPort} /whole`);
});
