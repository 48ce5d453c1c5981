// Sessions and workspaces. An operator key lists all of them (ListSessions, ListWorkspaces) and
// the lists follow status changes live (WatchEvents); a session token sees its own session only.

import { api, isSessionToken, watch } from "./api.js";
import { h, replace } from "./dom.js";
import { dateTime, enumName } from "./format.js";

const RELOAD_DEBOUNCE_MS = 200;

function badge(value, prefix) {
  const name = enumName(value, prefix);
  return h("span", { class: `badge status-${name.toLowerCase()}` }, name || "UNKNOWN");
}

function sessionRows(sessions) {
  return sessions.map((s) =>
    h("tr", { "data-session": s.id },
      h("td", {}, h("a", { href: `#/session/${encodeURIComponent(s.id)}` }, s.id)),
      h("td", {}, badge(s.status, "SESSION_STATUS_"), s.statusMessage ? h("div", { class: "muted small" }, s.statusMessage) : null),
      h("td", {}, s.agentType ?? ""),
      h("td", {}, s.provider || "—"),
      h("td", {}, s.workspaceId ? h("code", {}, s.workspaceId) : "—"),
      h("td", {}, s.createdAt ? dateTime(s.createdAt) : "")));
}

function workspaceRows(workspaces) {
  return workspaces.map((w) =>
    h("tr", { "data-workspace": w.id },
      h("td", {}, h("code", {}, w.id)),
      h("td", {}, badge(w.status, "WORKSPACE_STATUS_")),
      h("td", {}, w.provider ?? ""),
      h("td", {}, w.agentType || "—"),
      h("td", {}, w.sessionId ? h("a", { href: `#/session/${encodeURIComponent(w.sessionId)}` }, w.sessionId) : "—"),
      h("td", {}, w.createdAt ? dateTime(w.createdAt) : "")));
}

function table(caption, headers, body) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", { scope: "col" }, t)))),
    body);
}

/** Renders the list page into `main`; returns its dispose function. */
export function renderSessionsPage(main) {
  const controller = new AbortController();
  const sessionsBody = h("tbody", {});
  const workspacesBody = h("tbody", {});
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const live = h("span", { class: "live", role: "status" }, "");
  const token = isSessionToken();

  replace(main,
    h("div", { class: "title-row" }, h("h1", {}, "Sessions"), live),
    error,
    table(token ? "Your session (a session token sees only its own)" : "Sessions, newest first", ["Session", "Status", "Agent type", "Provider", "Workspace", "Started"], sessionsBody),
    token ? null : h("h2", {}, "Workspaces"),
    token ? null : table("Workspaces", ["Workspace", "Status", "Provider", "Agent type", "Session", "Created"], workspacesBody));

  const load = async () => {
    try {
      if (token) {
        const res = await api.getSession({});
        replace(sessionsBody, ...sessionRows(res.session ? [res.session] : []));
      } else {
        const [s, w] = await Promise.all([api.listSessions({ pageSize: 100 }), api.listWorkspaces({ pageSize: 100 })]);
        replace(sessionsBody, ...sessionRows(s.sessions ?? []));
        replace(workspacesBody, ...workspaceRows(w.workspaces ?? []));
      }
      error.hidden = true;
    } catch (err) {
      error.textContent = `Could not load: ${err.reason || err.code}: ${err.message}`;
      error.hidden = false;
    }
  };

  let timer;
  const reloadSoon = () => {
    clearTimeout(timer);
    timer = setTimeout(load, RELOAD_DEBOUNCE_MS);
  };
  watch({
    service: "events",
    request: {},
    signal: controller.signal,
    onState: (state) => {
      live.className = `live live-${state}`;
      live.textContent = state === "live" ? "Live" : state === "stopped" ? "Not live" : state === "connecting" ? "Connecting…" : "Reconnecting…";
    },
    onOpen: load,
    onMessage: (msg) => {
      if (msg.sessionStatus || msg.workspaceStatus || msg.eventsDropped) reloadSoon();
    },
  });

  return () => {
    clearTimeout(timer);
    controller.abort();
  };
}
