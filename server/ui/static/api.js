// The UI's access to the API: the credential, the services' calls, and live streams that
// reconnect. The credential (an operator key or a session token) lives in sessionStorage only:
// it is sent as `Authorization: Bearer …` and never put in a URL, a log or the page.

import { createClient, RpcError } from "./connect.js";

const STORAGE_KEY = "agent-workspace.credential";
const WORKSPACE = "agentworkspace.v1.WorkspaceService";
const AUDIT = "agentworkspace.v1.AuditService";
const TOOL = "agentworkspace.v1.ToolService";

/**
 * The `tool-call-id` of the UI's own reads (ListFiles, ReadFile): they are tool calls and in the
 * audit trail like any other, and the chain folds read-only calls with this prefix away (they are
 * the viewer's, not the agent's; see chain.js).
 */
export const VIEWER_CALL_PREFIX = "ui-viewer:";

/** The stored credential, or "". */
export function credential() {
  return sessionStorage.getItem(STORAGE_KEY) ?? "";
}

/** Keeps the credential for this tab. */
export function signIn(value) {
  sessionStorage.setItem(STORAGE_KEY, value);
}

/** Forgets the credential. */
export function signOut() {
  sessionStorage.removeItem(STORAGE_KEY);
}

/** Whether the credential is a session token (they start "awsess_"); an operator key otherwise. */
export function isSessionToken() {
  return credential().startsWith("awsess_");
}

let onUnauthenticated = () => undefined;

/** What to do when the server refuses the credential (the app shows the login prompt). */
export function setUnauthenticatedHandler(fn) {
  onUnauthenticated = fn;
}

function client() {
  return createClient({ token: credential() });
}

function guard(err) {
  if (err instanceof RpcError && err.code === "unauthenticated") onUnauthenticated(err);
  throw err;
}

/**
 * Checks a credential before it is kept: resolves when the server accepts it, rejects with the
 * RpcError otherwise (without going to the login prompt: the caller is it).
 */
export function verify(value) {
  const c = createClient({ token: value });
  return value.startsWith("awsess_")
    ? c.unary(WORKSPACE, "GetSession", {})
    : c.unary(WORKSPACE, "ListSessions", { pageSize: 1 });
}

let viewerCalls = 0;
const viewerId = () => `${VIEWER_CALL_PREFIX}${Date.now().toString(36)}-${(viewerCalls++).toString(36)}`;

const unary = (service, method) => (request = {}, options = {}) => client().unary(service, method, request, options).catch(guard);

export const api = {
  listSessions: unary(WORKSPACE, "ListSessions"),
  getSession: unary(WORKSPACE, "GetSession"),
  listWorkspaces: unary(WORKSPACE, "ListWorkspaces"),
  listAuditEvents: unary(AUDIT, "ListAuditEvents"),
  /** The viewer's reads carry its tool-call id (see VIEWER_CALL_PREFIX). */
  listFiles: (request) => client().unary(TOOL, "ListFiles", request, { headers: { "tool-call-id": viewerId() } }).catch(guard),
  readFile: (request) => client().unary(TOOL, "ReadFile", request, { headers: { "tool-call-id": viewerId() } }).catch(guard),
};

/**
 * Every audit record of a session (or a workspace), oldest first: ListAuditEvents pages newest
 * first, so the pages are read to the end (at most `maxPages` of 1000) and reversed.
 */
export async function auditHistory(filter, maxPages = 20) {
  const all = [];
  let pageToken = "";
  for (let i = 0; i < maxPages; i++) {
    const page = await api.listAuditEvents({ ...filter, pageSize: 1000, pageToken });
    all.push(...(page.events ?? []));
    pageToken = page.nextPageToken ?? "";
    if (pageToken === "") break;
  }
  return all.reverse();
}

/**
 * Keeps a server stream open until `signal` aborts: calls `onOpen()` when a stream is
 * established (after its first message), `onMessage(msg)` for each message, and `onState(state)`
 * with "connecting", "live" or "reconnecting". A stream that ends or fails is opened again after
 * a backoff (0.5 s doubling to 10 s; reset by a stream that got going); UNAUTHENTICATED stops and
 * goes to the login prompt; `shouldReconnect(err)` false stops (an error is then passed to
 * `onState("stopped", err)`).
 */
export function watch({ service, method, request, signal, onMessage, onOpen = () => undefined, onState = () => undefined, shouldReconnect = () => true }) {
  const names = { events: [AUDIT, "WatchEvents"], session: [WORKSPACE, "WatchSession"] };
  const [svc, m] = names[service] ?? [service, method];
  (async () => {
    let backoff = 500;
    let first = true;
    while (!signal.aborted) {
      onState(first ? "connecting" : "reconnecting");
      first = false;
      let lastError;
      try {
        let opened = false;
        for await (const msg of client().stream(svc, m, request, { signal })) {
          if (!opened) {
            opened = true;
            backoff = 500;
            onState("live");
            await onOpen();
          }
          onMessage(msg);
        }
      } catch (err) {
        if (signal.aborted) return;
        lastError = err;
        if (err instanceof RpcError && err.code === "unauthenticated") {
          onState("stopped", err);
          onUnauthenticated(err);
          return;
        }
      }
      if (!shouldReconnect(lastError)) {
        onState("stopped", lastError);
        return;
      }
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, backoff);
        signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
      });
      backoff = Math.min(backoff * 2, 10_000);
    }
  })();
}
