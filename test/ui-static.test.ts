/**
 * The web UI's server side and its Connect client, without a browser: /ui/ serves a fixed list
 * of files with their content types, a strict Content-Security-Policy and revalidation, and
 * nothing else (no traversal, no other methods); the browser's client module (connect.js), run
 * here in Node against the real server, speaks unary and server-streaming Connect, reports errors
 * with their reasons, and parses envelopes however the bytes are split.
 */
import { request } from "node:http";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { createClient, envelope, readEnvelopes, RpcError } from "../server/ui/static/connect.js";
import { UI_CSP } from "../server/ui/ui-handler.ts";
import { LOCAL_ONLY, newWorkspace, serverTest } from "./helpers/server.ts";

const KEY = "ui-static-test-key-0123456789";
const test = serverTest({ apiKeys: [KEY], env: LOCAL_ONLY });

/** A raw HTTP/1.1 request, so paths go out exactly as written (fetch would normalise `..`). */
function raw(url: string, path: string, method = "GET", headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, path, method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    req.end();
  });
}

test("the UI is served on the server's port: /ui redirects to /ui/, files with their types and a strict CSP", async (t) => {
  const { url } = t.context.server;
  const redirect = await raw(url, "/ui");
  t.is(redirect.status, 308);
  t.is(redirect.headers.location, "/ui/");

  const index = await raw(url, "/ui/");
  t.is(index.status, 200);
  t.is(index.headers["content-type"], "text/html; charset=utf-8");
  t.is(index.headers["content-security-policy"], UI_CSP);
  t.is(index.headers["x-content-type-options"], "nosniff");
  t.is(index.headers["referrer-policy"], "no-referrer");
  t.is(index.headers["cache-control"], "no-cache");
  t.regex(index.body, /<script type="module" src="app.js"><\/script>/);
  t.notRegex(index.body, /<script>|<script [^>]*>[^<]/, "no inline script");
  t.notRegex(UI_CSP, /unsafe-inline|unsafe-eval/);

  for (const [path, type] of [["/ui/app.js", "text/javascript; charset=utf-8"], ["/ui/connect.js", "text/javascript; charset=utf-8"], ["/ui/app.css", "text/css; charset=utf-8"], ["/ui/icon.svg", "image/svg+xml"]]) {
    const res = await raw(url, path);
    t.is(res.status, 200, path);
    t.is(res.headers["content-type"], type, path);
    t.is(res.headers["content-security-policy"], UI_CSP, path);
  }

  const etag = String((await raw(url, "/ui/app.js")).headers.etag);
  t.regex(etag, /^"[\w-]{27}"$/);
  const again = await raw(url, "/ui/app.js", "GET", { "if-none-match": etag });
  t.is(again.status, 304, "an unchanged file is revalidated, not sent again");
  const head = await raw(url, "/ui/app.css", "HEAD");
  t.is(head.status, 200);
  t.is(head.body, "");
});

test("the UI serves only its own files: traversal, other files and other methods are refused", async (t) => {
  const { url } = t.context.server;
  for (const path of ["/ui/../package.json", "/ui/%2e%2e/package.json", "/ui/..%2fpackage.json", "/ui/connect.d.ts", "/ui/static/app.js", "/ui/ui-handler.ts", "/ui/./app.js", "/ui//app.js", "/ui/APP.JS", "/ui/app.js/"]) {
    const res = await raw(url, path);
    t.is(res.status, 404, path);
    t.is(res.body, "not found\n", path);
  }
  const post = await raw(url, "/ui/", "POST");
  t.is(post.status, 405);
  t.is(post.headers.allow, "GET, HEAD");
  // The API beside it is untouched.
  const rpc = await raw(url, "/agentworkspace.v1.WorkspaceService/ListSessions", "GET");
  t.not(rpc.status, 200);
});

test("the UI's Connect client: unary calls, errors with their reasons, and a live stream", async (t) => {
  const { url } = t.context.server;
  const client = createClient({ baseUrl: url, token: KEY });
  const workspaceId = await newWorkspace(t.context.server.clients.connect);

  const written = await client.unary(ToolService.typeName, "WriteFile", { workspaceId, path: "a/b.txt", content: "one\ntwo\n" });
  t.deepEqual(written, { bytesWritten: "8", created: true });
  const read = await client.unary(ToolService.typeName, "ReadFile", { workspaceId, path: "a/b.txt" });
  t.is(read.content, "1: one\n2: two");

  const missing = await t.throwsAsync(client.unary(ToolService.typeName, "ReadFile", { workspaceId, path: "nope.txt" }), { instanceOf: RpcError });
  t.is(missing?.code, "not_found");
  t.is(missing?.reason, "FILE_NOT_FOUND");

  const anonymous = await t.throwsAsync(createClient({ baseUrl: url }).unary("agentworkspace.v1.WorkspaceService", "ListSessions", {}), { instanceOf: RpcError });
  t.is(anonymous?.code, "unauthenticated");
  const wrong = await t.throwsAsync(createClient({ baseUrl: url, token: "not-a-key" }).unary("agentworkspace.v1.WorkspaceService", "ListSessions", {}), { instanceOf: RpcError });
  t.is(wrong?.code, "unauthenticated");

  // A stream: `started`, then the events of a call made while it is open.
  const abort = new AbortController();
  const seen: string[] = [];
  const stream = client.stream("agentworkspace.v1.AuditService", "WatchEvents", { workspaceId }, { signal: abort.signal });
  const first = await stream.next();
  t.deepEqual(Object.keys(first.value).filter((k) => k !== "time"), ["started"]);
  await client.unary(ToolService.typeName, "WriteFile", { workspaceId, path: "c.txt", content: "x" });
  for await (const msg of stream) {
    const kind = Object.keys(msg).find((k) => k !== "time") ?? "";
    seen.push(kind === "fileChanged" ? `${kind} ${msg.fileChanged.path}` : `${kind} ${msg[kind].call?.tool ?? ""}`);
    if (kind === "fileChanged") break;
  }
  abort.abort();
  t.deepEqual(seen, ["toolCallStarted write", "toolCallFinished write", "fileChanged c.txt"]);

  // A stream's error arrives in its end-of-stream message: an unauthenticated watch.
  const refused = await t.throwsAsync(async () => {
    for await (const _ of createClient({ baseUrl: url, token: "nope" }).stream("agentworkspace.v1.AuditService", "WatchEvents", {})) t.fail("no message expected");
  }, { instanceOf: RpcError });
  t.is(refused?.code, "unauthenticated");
});

test("envelopes are read whole however the stream splits them, and a cut one is an error", async (t) => {
  const enc = new TextEncoder();
  const frames = [envelope(0, enc.encode('{"a":1}')), envelope(0, new Uint8Array(0)), envelope(2, enc.encode("{}"))];
  const all = new Uint8Array(frames.reduce((n, f) => n + f.byteLength, 0));
  let at = 0;
  for (const f of frames) {
    all.set(f, at);
    at += f.byteLength;
  }
  const streamOf = (chunks: Uint8Array[]) => new ReadableStream<Uint8Array>({ start(c) { for (const x of chunks) c.enqueue(x); c.close(); } });
  for (const size of [1, 2, 3, 5, 7, all.byteLength]) {
    const chunks: Uint8Array[] = [];
    for (let i = 0; i < all.byteLength; i += size) chunks.push(all.slice(i, i + size));
    const out: string[] = [];
    for await (const { flags, data } of readEnvelopes(streamOf(chunks))) out.push(`${flags}:${new TextDecoder().decode(data)}`);
    t.deepEqual(out, ['0:{"a":1}', "0:", "2:{}"], `chunks of ${size}`);
  }
  await t.throwsAsync(async () => {
    for await (const _ of readEnvelopes(streamOf([all.slice(0, all.byteLength - 1)]))) void _;
  }, { instanceOf: RpcError, message: /middle of a message/ });
});
