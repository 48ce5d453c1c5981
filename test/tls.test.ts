/**
 * TLS: with a certificate configured, the same port negotiates HTTP/2 (gRPC) or HTTP/1.1
 * (Connect, and upgrades for the port proxy's WebSockets) through ALPN.
 */
import test from "ava";
import { execFileSync } from "node:child_process";
import https from "node:https";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { createApp } from "../server/app.ts";
import { parseSettings } from "../server/settings.ts";
import { listen } from "../server/http-server.ts";

test("TLS with ALPN serves gRPC over HTTP/2 and Connect over HTTP/1.1 on one port", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-tls-"));
  const cert = path.join(dir, "cert.pem");
  const key = path.join(dir, "key.pem");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], { stdio: "ignore" });
  const config = parseSettings({ AGENT_WORKSPACE_DATA_DIR: path.join(dir, "data"), AGENT_WORKSPACE_QUIET: "1", AGENT_WORKSPACE_DOCKER: "off" }, ["--tls-cert", cert, "--tls-key", key]);
  const app = await createApp(config);
  const server = await listen(app.handler, { upgrade: app.upgrade, host: "127.0.0.1", port: 0, tlsCert: config.tlsCert, tlsKey: config.tlsKey });
  try {
    t.true(server.url.startsWith("https://"));
    const ca = await readFile(cert);
    const grpc = createGrpcTransport({ baseUrl: server.url, nodeOptions: { ca } });
    const connect = createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", nodeOptions: { ca } });
    const { workspace } = await createClient(WorkspaceService, grpc).createWorkspace({});
    const viaGrpc = await createClient(ToolService, grpc).bash({ workspaceId: workspace!.id, command: "echo h2" });
    t.is(viaGrpc.stdout, "h2\n");
    const viaConnect = await createClient(ToolService, connect).bash({ workspaceId: workspace!.id, command: "echo h1" });
    t.is(viaConnect.stdout, "h1\n");
    // An HTTP/1.1 upgrade (a WebSocket through the port proxy) reaches the proxy over TLS too: a
    // port not exposed is refused with its reason, not left hanging.
    const refused = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = https.request(`${server.url}/ports/${workspace!.id}/3000/`, {
        ca,
        headers: { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==" },
      });
      req.on("response", (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on("upgrade", () => reject(new Error("upgraded to a port that was never exposed")));
      req.on("error", reject);
      req.end();
    });
    t.is(refused.status, 404, refused.body);
    t.regex(refused.body, /PORT_NOT_EXPOSED/);
  } finally {
    await app.close();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  }
});
