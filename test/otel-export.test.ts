/**
 * The OTLP export of the audit trail honours the standard OpenTelemetry SDK variables, parsed once
 * in settings.ts: the batch span processor's OTEL_BSP_* (delay, batch size), compression, TLS
 * towards the collector (its CA, a client certificate) and OTEL_RESOURCE_ATTRIBUTES. Checked at a
 * real OTLP receiver, by what arrives and when (before or only at shutdown), never by durations.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import { type OtlpReceiver, startOtlpHttpReceiver } from "./helpers/otlp-receiver.ts";
import { LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { eventually } from "./helpers/sessions.ts";

/** Makes one workspace and runs one command in it; resolves to nothing once both answered. */
async function work(server: TestServer): Promise<void> {
  const { workspace } = await server.clients.connect.workspaces.createWorkspace({});
  await server.clients.connect.tools.bash({ workspaceId: workspace?.id ?? "", command: "true" });
}

const bashSpans = (r: OtlpReceiver) => r.spans.filter((s) => s.name === "execute_tool bash");

test("OTEL_BSP_SCHEDULE_DELAY is honoured: with a long delay nothing reaches the collector until shutdown flushes it; with a short one it arrives while the server runs", async (t) => {
  const slowReceiver = await startOtlpHttpReceiver();
  const quickReceiver = await startOtlpHttpReceiver();
  const slow = await startServer({ env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_ENDPOINT: slowReceiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: "600000" } });
  const quick = await startServer({ env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_ENDPOINT: quickReceiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: "50" } });
  try {
    await work(slow);
    const sentAt = Date.now();
    await work(quick);
    await eventually(() => (bashSpans(quickReceiver).length > 0 ? true : undefined), 30_000, "the quick server's export");
    // Three times this server's default delay (1 s): ignored, the setting would have let it through by now.
    await new Promise((r) => setTimeout(r, Math.max(0, sentAt + 3000 - Date.now())));
    await slow.app.audit.flushed();
    const stored = await slow.clients.connect.audit.listAuditEvents({ tool: "bash" });
    t.is(stored.events.length, 1, "the database has the record at once; only the export waits");
    t.is(slowReceiver.requests.length, 0, "nothing exported before the delay or a shutdown");
    await slow.close();
    t.is(bashSpans(slowReceiver).length, 1, "the shutdown flushed what was waiting");
  } finally {
    await slow.close();
    await quick.close();
    await slowReceiver.close();
    await quickReceiver.close();
  }
});

test("OTEL_BSP_MAX_EXPORT_BATCH_SIZE is honoured: a full batch goes out at once, the rest waits for the delay (here: the shutdown)", async (t) => {
  const receiver = await startOtlpHttpReceiver();
  const server = await startServer({ env: { ...LOCAL_ONLY, OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: "600000", OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "2", OTEL_BSP_MAX_QUEUE_SIZE: "100" } });
  try {
    // CreateWorkspace and Bash: two spans, one full batch; then a third span, alone in the queue.
    await work(server);
    await eventually(() => (receiver.spans.length >= 2 ? true : undefined), 30_000, "a full batch");
    await server.clients.connect.workspaces.createWorkspace({});
    // Three times this server's default delay (1 s): ignored, the settings would have let it through by now.
    await new Promise((r) => setTimeout(r, 3000));
    t.deepEqual(receiver.requests.map((r) => r.spans), [2], "one export of exactly one batch; the third span waits");
    t.true(receiver.requests.every((r) => r.headers["content-encoding"] === undefined), "no compression unless asked for");
    await server.close();
    t.deepEqual(receiver.requests.map((r) => r.spans), [2, 1], "the shutdown flushed the rest");
  } finally {
    await server.close();
    await receiver.close();
  }
});

test("compression, TLS with the collector's CA and a client certificate, and OTEL_RESOURCE_ATTRIBUTES reach the collector as configured", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-otel-"));
  const pair = (name: string, cn: string) => {
    const cert = path.join(dir, `${name}.crt`);
    const key = path.join(dir, `${name}.key`);
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", `/CN=${cn}`, "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
    return { cert, key };
  };
  const collector = pair("collector", "collector");
  const client = pair("client", "agent-workspace");
  const receiver = await startOtlpHttpReceiver(0, { cert: await readFile(collector.cert, "utf8"), key: await readFile(collector.key, "utf8"), clientCa: await readFile(client.cert, "utf8") });
  const server = await startServer({
    env: {
      ...LOCAL_ONLY,
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_EXPORTER_OTLP_CERTIFICATE: collector.cert,
      OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE: client.cert,
      OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: client.key,
      OTEL_EXPORTER_OTLP_COMPRESSION: "gzip",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=staging, team=infra%20ops,service.name=overridden",
      OTEL_SERVICE_NAME: "aw-otel-test",
      OTEL_BSP_SCHEDULE_DELAY: "50",
    },
  });
  try {
    t.true(receiver.endpoint.startsWith("https://"));
    await work(server);
    const [span] = await eventually(() => (bashSpans(receiver).length > 0 ? bashSpans(receiver) : undefined), 30_000, "the export over mutual TLS");
    t.true(receiver.requests.every((r) => r.headers["content-encoding"] === "gzip"), "OTEL_EXPORTER_OTLP_COMPRESSION=gzip");
    t.like(span.resource, { "deployment.environment": "staging", team: "infra ops", "service.name": "aw-otel-test" });
  } finally {
    await server.close();
    await receiver.close();
    await rm(dir, { recursive: true, force: true });
  }
});
