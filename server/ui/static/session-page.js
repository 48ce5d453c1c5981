// One session, live: its status and provisioning stages (WatchSession), its chain of tool calls
// and agent messages (ListAuditEvents for the history, WatchEvents for what happens now), and its
// workspace's files. Both streams reconnect after a server restart; on every (re)connect the
// history is read again and merged by span id, so nothing is lost and nothing appears twice.

import { api, auditHistory, watch } from "./api.js";
import { createChain } from "./chain.js";
import { h, replace } from "./dom.js";
import { createFiles } from "./files.js";
import { dateTime, enumName } from "./format.js";

const STAGE_ICON = { running: "…", ok: "✔", failed: "✘", warning: "⚠" };
const OUTPUT_TAIL = 4096;

function statusBadge(status) {
  const name = enumName(status, "SESSION_STATUS_");
  return h("span", { class: `badge status-${name.toLowerCase()}` }, name || "UNKNOWN");
}

function b64text(data) {
  try {
    const bin = atob(data ?? "");
    return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch {
    return "";
  }
}

/** Renders the session page for `sessionId` into `main`; returns its dispose function. */
export function renderSessionPage(main, sessionId) {
  const controller = new AbortController();
  const signal = controller.signal;

  const live = h("span", { class: "live", role: "status" }, "Connecting…");
  const facts = h("dl", { class: "facts" });
  const stages = h("ol", { class: "stages-list" });
  const chainList = h("ol", { class: "chain", "aria-live": "polite", "aria-relevant": "additions text", "aria-label": "Tool calls and agent messages, oldest first" });
  const chainEmpty = h("p", { class: "muted chain-empty" }, "No tool calls yet.");
  const chainScroll = h("div", { class: "chain-scroll", tabindex: "0", "aria-label": "Tool-call chain" }, chainList, chainEmpty);
  const viewerToggle = h("button", { type: "button", class: "link-button", "aria-pressed": "false" });
  const tree = h("nav", { class: "tree", "aria-label": "Workspace files" });
  const treeStatus = h("p", { class: "error", role: "alert", hidden: true });
  const noticeText = h("span", {});
  const reload = h("button", { type: "button" }, "Reload");
  const notice = h("div", { class: "changed-notice", role: "alert", hidden: true }, h("span", { class: "icon", "aria-hidden": "true" }, "⚠"), noticeText, reload);
  const viewerTitle = h("h3", { class: "viewer-title" }, "No file open");
  const viewerBody = h("div", { class: "viewer-body" });
  const error = h("p", { class: "error", role: "alert", hidden: true });

  replace(
    main,
    h("section", { class: "session-head", "aria-labelledby": "session-title" },
      h("div", { class: "title-row" },
        h("h1", { id: "session-title" }, "Session ", h("code", {}, sessionId)),
        live),
      facts,
      error,
      h("details", { class: "stages", open: true }, h("summary", {}, "Provisioning"), stages)),
    h("div", { class: "session-grid" },
      h("section", { class: "panel chain-panel", "aria-labelledby": "chain-title" },
        h("div", { class: "panel-head" }, h("h2", { id: "chain-title" }, "Tool calls"), viewerToggle),
        chainScroll),
      h("section", { class: "panel files-panel", "aria-labelledby": "files-title" },
        h("div", { class: "panel-head" }, h("h2", { id: "files-title" }, "Files")),
        treeStatus,
        tree,
        h("div", { class: "viewer", "aria-labelledby": "viewer-title-h" },
          h("h2", { id: "viewer-title-h", class: "visually-hidden" }, "File viewer"),
          viewerTitle, notice, viewerBody))),
  );

  const chain = createChain({ list: chainList, scroller: chainScroll, viewerToggle, empty: chainEmpty });
  const files = createFiles({ tree, status: treeStatus, viewer: { title: viewerTitle, body: viewerBody, notice, noticeText, reload } });
  let session = { id: sessionId };

  const showFacts = () => {
    const task = session.task?.repositoryUrl ? `${session.task.repositoryUrl}${session.task.branch ? ` @ ${session.task.branch}` : ""}` : "—";
    replace(facts,
      h("div", {}, h("dt", {}, "Status"), h("dd", { class: "session-status" }, statusBadge(session.status), session.statusMessage ? ` ${session.statusMessage}` : "")),
      h("div", {}, h("dt", {}, "Agent type"), h("dd", {}, session.agentType ?? "—")),
      h("div", {}, h("dt", {}, "Provider"), h("dd", {}, session.provider || "—")),
      h("div", {}, h("dt", {}, "Workspace"), h("dd", {}, session.workspaceId ? h("code", {}, session.workspaceId) : "—")),
      h("div", {}, h("dt", {}, "Started"), h("dd", {}, session.createdAt ? dateTime(session.createdAt) : "—")),
      h("div", {}, h("dt", {}, "Task"), h("dd", {}, task)));
  };
  showFacts();

  const refreshSession = async () => {
    try {
      const res = await api.getSession({ id: sessionId });
      session = res.session ?? session;
      error.hidden = true;
      showFacts();
      await files.setWorkspace(session.workspaceId ?? "");
    } catch (err) {
      error.textContent = `Cannot show this session: ${err.reason || err.code}: ${err.message}`;
      error.hidden = false;
      throw err;
    }
  };

  // Provisioning stages, replayed by every WatchSession stream from the start.
  const stageItems = new Map();
  const stageLine = (key, state, text) => {
    let item = stageItems.get(key);
    if (!item) {
      const output = h("pre", { class: "stage-output", hidden: true });
      item = { li: h("li", {}), label: h("span", {}), icon: h("span", { class: "icon", "aria-hidden": "true" }), output };
      item.li.append(item.icon, item.label, output);
      stageItems.set(key, item);
      stages.append(item.li);
    }
    item.li.className = `stage stage-${state}`;
    item.li.dataset.state = state;
    item.icon.textContent = STAGE_ICON[state] ?? "";
    item.label.textContent = text;
    return item;
  };
  const onSessionEvent = (msg) => {
    if (msg.status) {
      session = { ...session, status: msg.status.status, statusMessage: msg.status.message ?? "", workspaceId: msg.status.workspaceId || session.workspaceId };
      showFacts();
      stageLine(`status-${stageItems.size}`, "ok", `Status ${enumName(msg.status.status, "SESSION_STATUS_")}${msg.status.message ? `: ${msg.status.message}` : ""}`);
      if (session.workspaceId) void files.setWorkspace(session.workspaceId);
    } else if (msg.stageStarted) {
      const s = msg.stageStarted;
      stageLine(`${s.stage}-${s.index ?? 0}`, "running", `${enumName(s.stage, "PROVISIONING_STAGE_").toLowerCase()} ${s.detail ?? ""}`.trim());
    } else if (msg.stageEnded) {
      const s = msg.stageEnded;
      const key = `${s.stage}-${s.index ?? 0}`;
      const prior = stageItems.get(key)?.label.textContent ?? enumName(s.stage, "PROVISIONING_STAGE_").toLowerCase();
      const base = prior.replace(/ \(\d+ ms.*\)$/, "");
      stageLine(key, s.ok ? "ok" : "failed", `${base} (${s.durationMs ?? 0} ms${s.exitCode ? `, exit ${s.exitCode}` : ""}${s.message ? `, ${s.message}` : ""})`);
    } else if (msg.output) {
      const s = msg.output;
      const item = stageItems.get(`${s.stage}-${s.index ?? 0}`);
      if (item) {
        item.output.hidden = false;
        item.output.textContent = (item.output.textContent + b64text(s.data)).slice(-OUTPUT_TAIL);
      }
    } else if (msg.warning) {
      stageLine(`warning-${stageItems.size}`, "warning", `Warning: ${msg.warning.message ?? ""}`);
    }
  };

  void refreshSession().catch(() => undefined);
  watch({
    service: "session",
    request: { id: sessionId, follow: true },
    signal,
    onOpen: () => {
      stageItems.clear();
      stages.replaceChildren();
    },
    onMessage: onSessionEvent,
    // The stream ends for good with the session; a refusal (another session's) is final too.
    shouldReconnect: (err) => session.status !== "SESSION_STATUS_ENDED" && !(err && ["permission_denied", "not_found"].includes(err.code)),
  });

  // The chain and the files, live; the history again after every (re)connect.
  let opened = 0;
  watch({
    service: "events",
    request: { sessionId },
    signal,
    onState: (state, err) => {
      live.className = `live live-${state}`;
      live.textContent = state === "live" ? "Live" : state === "stopped" ? `Not live${err ? `: ${err.message}` : ""}` : state === "connecting" ? "Connecting…" : "Reconnecting…";
    },
    onOpen: async () => {
      const again = opened++ > 0;
      try {
        await refreshSession();
        for (const event of await auditHistory({ sessionId })) chain.add(event);
      } catch {
        // Shown by refreshSession; the stream keeps trying.
      }
      if (again) files.changed(null);
    },
    onMessage: (msg) => {
      if (msg.toolCallStarted) chain.add(msg.toolCallStarted.call);
      else if (msg.toolCallFinished) {
        const call = msg.toolCallFinished.call;
        chain.add(call);
        // A command may change any file; until FileChanged says which, the tree looks again.
        if (call.tool === "bash") files.changed(null);
      } else if (msg.agentMessage) chain.add(msg.agentMessage.event);
      else if (msg.fileChanged) {
        const f = msg.fileChanged;
        if (f.treeChanged || !f.path) files.changed(null);
        else files.changed([f.path], new Set(f.change === "FILE_CHANGE_KIND_DELETED" || f.tool === "delete" ? [f.path] : []));
      } else if (msg.sessionStatus) {
        const s = msg.sessionStatus;
        session = { ...session, status: s.status, statusMessage: s.message ?? "", workspaceId: s.workspaceId || session.workspaceId };
        showFacts();
        if (session.workspaceId) void files.setWorkspace(session.workspaceId);
      } else if (msg.eventsDropped) {
        // This view has a gap: read the history again and look at the whole tree.
        void auditHistory({ sessionId }).then((events) => { for (const e of events) chain.add(e); }, () => undefined);
        files.changed(null);
      }
    },
    shouldReconnect: (err) => !(err && ["permission_denied", "not_found"].includes(err.code)),
  });

  return () => {
    controller.abort();
    files.dispose();
  };
}
