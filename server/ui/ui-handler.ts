/**
 * `/ui/`: the web UI's static files, on the server's own port. The UI is plain ES modules and CSS
 * (no build step, nothing generated); the browser talks to the API with the Connect protocol like
 * any client, with the operator key or session token the user typed, so it sees nothing that
 * credential cannot (see server/ui/static/api.js).
 *
 * What is served is a fixed list of files read once when the handler is made: no request path
 * ever reaches the filesystem, so no traversal (`..`, `%2e%2e`, symlinks) can name another file.
 * Every answer carries a strict Content-Security-Policy (scripts, styles and fetches from this
 * origin only, no inline script or style, no framing), `nosniff` and `no-referrer`. Files are
 * revalidated on each load (`no-cache` with an ETag, answered 304 when unchanged), so a new server
 * version never meets a stale module in the browser's cache.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";

/** The UI's path prefix. */
export const UI_PATH = "/ui";

/** The files served: name under /ui/ → content type. index.html is also served as /ui/. */
const FILES: Readonly<Record<string, string>> = {
  "index.html": "text/html; charset=utf-8",
  "app.css": "text/css; charset=utf-8",
  "icon.svg": "image/svg+xml",
  "app.js": "text/javascript; charset=utf-8",
  "api.js": "text/javascript; charset=utf-8",
  "chain.js": "text/javascript; charset=utf-8",
  "connect.js": "text/javascript; charset=utf-8",
  "dom.js": "text/javascript; charset=utf-8",
  "files.js": "text/javascript; charset=utf-8",
  "format.js": "text/javascript; charset=utf-8",
  "session-page.js": "text/javascript; charset=utf-8",
  "sessions-page.js": "text/javascript; charset=utf-8",
};

/** The policy of every answer: this origin's scripts, styles, images and API; nothing inline, no frames. */
export const UI_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const SECURITY_HEADERS = {
  "content-security-policy": UI_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

/** True for the paths the UI answers: `/ui` and everything under `/ui/`. */
export function isUiPath(url: string | undefined): boolean {
  const path = (url ?? "").split("?", 1)[0];
  return path === UI_PATH || path.startsWith(`${UI_PATH}/`);
}

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/**
 * The handler of `/ui` paths. Reads the fixed file list from `dir` (default: ./static beside this
 * module) now, so a missing file stops the server's start rather than a page load.
 */
export function createUiHandler(dir: URL = new URL("./static/", import.meta.url)): (req: Req, res: Res) => void {
  const assets = new Map<string, Asset>();
  for (const [name, type] of Object.entries(FILES)) {
    const body = readFileSync(new URL(name, dir));
    assets.set(`${UI_PATH}/${name}`, { body, type, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"` });
  }
  assets.set(`${UI_PATH}/`, assets.get(`${UI_PATH}/index.html`) as Asset);

  return (req, res) => {
    const out = res as ServerResponse;
    const path = (req.url ?? "").split("?", 1)[0];
    if (req.method !== "GET" && req.method !== "HEAD") {
      out.writeHead(405, { ...SECURITY_HEADERS, allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" });
      out.end("method not allowed\n");
      return;
    }
    if (path === UI_PATH) {
      out.writeHead(308, { ...SECURITY_HEADERS, location: `${UI_PATH}/`, "content-length": "0" });
      out.end();
      return;
    }
    const asset = assets.get(path);
    if (!asset) {
      const body = "not found\n";
      out.writeHead(404, { ...SECURITY_HEADERS, "content-type": "text/plain; charset=utf-8", "content-length": String(body.length), "cache-control": "no-store" });
      out.end(req.method === "HEAD" ? undefined : body);
      return;
    }
    const common = { ...SECURITY_HEADERS, etag: asset.etag, "cache-control": "no-cache" };
    if (req.headers["if-none-match"] === asset.etag) {
      out.writeHead(304, common);
      out.end();
      return;
    }
    out.writeHead(200, { ...common, "content-type": asset.type, "content-length": String(asset.body.length) });
    out.end(req.method === "HEAD" ? undefined : asset.body);
  };
}
