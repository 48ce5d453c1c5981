// A session's chain: its tool calls and the agent's own messages, in call order (by start time),
// newest at the bottom. Each record is keyed by its span id, so a record seen live and again in
// the history (after a reload or a reconnect) is one entry, and a finished call never goes back
// to running. Status is icon + words + colour, never colour alone.

import { h, replace } from "./dom.js";
import { VIEWER_CALL_PREFIX } from "./api.js";
import { clock, duration, enumName, timeKey } from "./format.js";

const OUTCOMES = {
  running: { icon: "…", label: "Running" },
  ok: { icon: "✔", label: "Succeeded" },
  error: { icon: "✘", label: "Failed" },
  denied: { icon: "✘", label: "Denied" },
  cancelled: { icon: "✘", label: "Cancelled" },
};

/** Read-only tools whose calls by a viewer are folded away (they change nothing). */
const VIEWER_TOOLS = new Set(["read", "list"]);

/** The request field that says most about a call of each tool, first. */
const PRIMARY = ["command", "path", "pattern", "branch", "ref", "glob"];

function outcomeOf(event) {
  switch (event.outcome) {
    case "AUDIT_OUTCOME_OK": return "ok";
    case "AUDIT_OUTCOME_ERROR": return "error";
    case "AUDIT_OUTCOME_DENIED": return "denied";
    case "AUDIT_OUTCOME_CANCELLED": return "cancelled";
    default: return "running";
  }
}

/** Whether an audit record is a call of the viewer itself (the UI's file tree and viewer). */
export function isViewerCall(event) {
  return typeof event.toolCallId === "string" && event.toolCallId.startsWith(VIEWER_CALL_PREFIX) && VIEWER_TOOLS.has(event.tool);
}

function requestSummary(request) {
  const entries = Object.entries(request ?? {});
  const primaryKey = PRIMARY.find((k) => request?.[k] !== undefined && request[k] !== "");
  const rest = entries.filter(([k]) => k !== primaryKey).map(([k, v]) => `${k}=${v}`);
  return { primaryKey, primary: primaryKey ? request[primaryKey] : "", rest };
}

function resultSummary(event) {
  const parts = [];
  if (event.exitCode !== undefined) parts.push(`exit code ${event.exitCode}`);
  for (const [k, v] of Object.entries(event.result ?? {})) if (k !== "exit_code") parts.push(`${k}=${v}`);
  if (event.truncated) parts.push("truncated");
  return parts.join(" · ");
}

function renderCall(li, event) {
  const outcome = outcomeOf(event);
  const o = OUTCOMES[outcome];
  const { primaryKey, primary, rest } = requestSummary(event.request);
  li.className = `entry call outcome-${outcome}`;
  li.dataset.outcome = outcome;
  li.dataset.tool = event.tool ?? "";
  const who = event.principalKind && event.principalKind !== "session" ? `by ${event.principalKind}` : "";
  const reason = event.reason ? enumName(event.reason, "ERROR_REASON_") : "";
  const result = outcome === "ok" ? resultSummary(event) : "";
  replace(
    li,
    h("div", { class: "call-head" },
      h("span", { class: "icon", "aria-hidden": "true" }, o.icon),
      h("span", { class: "status" }, o.label),
      h("span", { class: "tool" }, event.tool || event.name || "call"),
      h("span", { class: "when" }, clock(event.startTime)),
      outcome !== "running" && event.duration ? h("span", { class: "duration" }, duration(event.duration)) : null,
      who ? h("span", { class: "who" }, who) : null),
    primaryKey ? h("div", { class: "args" }, h("span", { class: "arg-key" }, `${primaryKey}: `), h("code", { class: "arg" }, primary)) : null,
    rest.length > 0 ? h("div", { class: "args-rest" }, rest.join(" · ")) : null,
    outcome !== "running" && outcome !== "ok"
      ? h("p", { class: "reason" }, `Reason: ${reason || "—"}${event.code ? ` (${event.code})` : ""}`)
      : null,
    result ? h("div", { class: "result" }, result) : null,
  );
  li.setAttribute("aria-label", `${event.tool || "call"}: ${o.label}`);
}

function renderMessage(li, event) {
  const kind = event.agentMessage.kind === "AGENT_MESSAGE_KIND_SUMMARY" ? "summary" : "note";
  li.className = `entry message message-${kind}`;
  li.dataset.kind = kind;
  replace(
    li,
    h("div", { class: "message-head" },
      h("span", { class: "icon", "aria-hidden": "true" }, kind === "summary" ? "★" : "✎"),
      h("span", { class: "status" }, kind === "summary" ? "Agent's summary" : "Agent"),
      h("span", { class: "when" }, clock(event.startTime))),
    h("p", { class: "message-text" }, event.agentMessage.text ?? ""),
  );
}

/**
 * The chain in `list` (an <ol>), scrolled in `scroller`, with the folded viewer reads counted in
 * `viewerToggle` (a button). Returns `add(event)` for every record, live or from the history.
 */
export function createChain({ list, scroller, viewerToggle, empty }) {
  /** @type {Map<string, {key: string, seq: number, li: HTMLElement, finished: boolean}>} */
  const entries = new Map();
  let seq = 0;
  let viewerReads = 0;
  let showViewer = false;

  const updateToggle = () => {
    viewerToggle.hidden = viewerReads === 0;
    viewerToggle.textContent = showViewer ? `Hide this viewer's file reads (${viewerReads})` : `Show this viewer's file reads (${viewerReads})`;
    viewerToggle.setAttribute("aria-pressed", String(showViewer));
  };
  viewerToggle.addEventListener("click", () => {
    showViewer = !showViewer;
    for (const li of list.querySelectorAll("li.viewer-read")) li.hidden = !showViewer;
    updateToggle();
  });
  updateToggle();

  const place = (entry) => {
    // Call order: the first entry with a later start (ties: the one seen later) follows it.
    let after = null;
    for (const other of list.children) {
      const o = entries.get(other.dataset.span);
      if (o && (o.key > entry.key || (o.key === entry.key && o.seq > entry.seq))) {
        after = other;
        break;
      }
    }
    list.insertBefore(entry.li, after);
  };

  return {
    /** Adds or updates the entry of one audit record (a call started, finished, or a message). */
    add(event) {
      const isMessage = event.agentMessage !== undefined && event.agentMessage !== null;
      if (!isMessage && !event.tool) return; // administrative records (session started …)
      const id = event.spanId || `${event.traceId}-${event.startTime}`;
      const finished = isMessage || outcomeOf(event) !== "running";
      const nearBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 48;
      let entry = entries.get(id);
      if (entry?.finished && !finished) return;
      if (!entry) {
        const li = h("li", {});
        li.dataset.span = id;
        entry = { key: timeKey(event.startTime), seq: seq++, li, finished };
        entries.set(id, entry);
        if (!isMessage && isViewerCall(event)) {
          li.classList.add("viewer-read");
          viewerReads++;
          updateToggle();
        }
        place(entry);
      }
      entry.finished = finished;
      const viewer = entry.li.classList.contains("viewer-read");
      if (isMessage) renderMessage(entry.li, event);
      else renderCall(entry.li, event);
      if (viewer) {
        entry.li.classList.add("viewer-read");
        entry.li.hidden = !showViewer;
      }
      if (empty) empty.hidden = list.querySelector("li:not([hidden])") !== null;
      if (nearBottom && !entry.li.hidden) scroller.scrollTop = scroller.scrollHeight;
    },
  };
}
