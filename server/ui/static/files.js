// The workspace's file tree (ListFiles, one directory at a time, expanded on demand) and a
// read-only viewer (ReadFile). Both read through the API with the user's credential; their
// calls carry the viewer's tool-call id (api.js).
//
// Refreshing: `changed(paths)` reloads, after a short debounce, the nearest loaded directory of
// each changed path; `changed(null)` (a whole-tree change, or a finished command that may have
// changed anything) reloads every loaded directory. A change to the open file shows "changed
// since you opened it" with a Reload button; a whole-tree change re-reads the open file and shows
// the notice only when its content differs.

import { api } from "./api.js";
import { h, replace } from "./dom.js";
import { bytes } from "./format.js";

const DEBOUNCE_MS = 150;

/** A workspace path as the tree keys it: relative, no "./", no "/workspace/", no trailing "/". */
export function normalizePath(p) {
  let s = String(p ?? "").replace(/\/+/g, "/");
  if (s === "/workspace") return "";
  if (s.startsWith("/workspace/")) s = s.slice("/workspace/".length);
  s = s.replace(/^\.?\//, "").replace(/\/$/, "");
  const parts = [];
  for (const part of s.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return parts.join("/");
}

const parentOf = (p) => (p.includes("/") ? p.slice(0, p.lastIndexOf("/")) : "");
const baseName = (p) => p.slice(p.lastIndexOf("/") + 1);

/**
 * The file panel for one workspace. `tree`: the element the tree goes in; `viewer`: the viewer's
 * elements. Returns `changed(paths | null)`, `setWorkspace(id)` and `dispose()`.
 */
export function createFiles({ tree, status, viewer }) {
  let workspaceId = "";
  /** Loaded directories: path → {entries, expanded, ul}. "" is the root. */
  const dirs = new Map();
  let pending = new Set();
  let wholeTree = false;
  let timer;
  /** The open file: its path and the content shown. */
  let open = null;

  const showStatus = (text) => {
    status.textContent = text;
    status.hidden = text === "";
  };

  async function loadDir(path) {
    const res = await api.listFiles({ workspaceId, path });
    const entries = (res.files ?? []).map((f) => ({
      path: normalizePath(f.path),
      type: f.type === "FILE_TYPE_DIRECTORY" ? "dir" : f.type === "FILE_TYPE_SYMLINK" ? "link" : "file",
      size: f.size ?? "0",
    }));
    entries.sort((a, b) => (a.type === "dir") !== (b.type === "dir") ? (a.type === "dir" ? -1 : 1) : a.path.localeCompare(b.path));
    const dir = dirs.get(path) ?? { expanded: path === "", ul: h("ul", {}) };
    dir.entries = entries;
    dirs.set(path, dir);
    // Subdirectories that went away take their state with them.
    for (const known of [...dirs.keys()]) {
      if (known !== path && parentOf(known) === path && !entries.some((e) => e.path === known && e.type === "dir")) forget(known);
    }
    renderDir(path);
  }

  function forget(path) {
    for (const known of [...dirs.keys()]) if (known === path || known.startsWith(`${path}/`)) dirs.delete(known);
  }

  function renderDir(path) {
    const dir = dirs.get(path);
    if (!dir) return;
    const items = dir.entries.map((e) => {
      const name = baseName(e.path);
      if (e.type === "dir") {
        const sub = dirs.get(e.path);
        const expanded = sub?.expanded ?? false;
        const button = h("button", { type: "button", class: "node dir", "aria-expanded": String(expanded), "data-path": e.path, onclick: () => toggle(e.path) },
          h("span", { class: "twisty", "aria-hidden": "true" }, expanded ? "▾" : "▸"), `${name}/`);
        return h("li", {}, button, expanded && sub ? sub.ul : null);
      }
      const current = open?.path === e.path;
      return h("li", {},
        h("button", { type: "button", class: `node file${current ? " current" : ""}`, "data-path": e.path, "aria-current": current ? "true" : false, onclick: () => openFile(e.path) },
          h("span", { class: "twisty", "aria-hidden": "true" }, e.type === "link" ? "↪" : "·"), name));
    });
    replace(dir.ul, ...(items.length > 0 ? items : [h("li", { class: "muted" }, path === "" ? "(empty workspace)" : "(empty)")]));
  }

  async function toggle(path) {
    const dir = dirs.get(path);
    if (dir?.expanded) {
      dir.expanded = false;
      renderDir(parentOf(path));
      return;
    }
    try {
      if (!dir) await loadDir(path);
      dirs.get(path).expanded = true;
      renderDir(parentOf(path));
      tree.querySelector(`button[data-path="${CSS.escape(path)}"]`)?.focus();
    } catch (err) {
      showStatus(`Could not list ${path}: ${err.message}`);
    }
  }

  async function reload(paths) {
    if (workspaceId === "") return;
    try {
      for (const p of paths) if (dirs.has(p)) await loadDir(p);
      showStatus("");
    } catch (err) {
      showStatus(`Could not list files: ${err.reason || err.code || ""} ${err.message}`);
    }
  }

  function flush() {
    timer = undefined;
    let targets;
    if (wholeTree) {
      targets = [...dirs.keys()].sort((a, b) => a.length - b.length);
    } else {
      const set = new Set();
      for (const p of pending) {
        // The nearest loaded directory that holds the change (a new directory shows in its parent).
        let d = parentOf(p);
        while (d !== "" && !dirs.has(d)) d = parentOf(d);
        set.add(d);
        if (dirs.has(p)) set.add(p);
      }
      targets = [...set].sort((a, b) => a.length - b.length);
    }
    const recheckOpen = wholeTree;
    wholeTree = false;
    pending = new Set();
    void reload(targets);
    if (recheckOpen && open && !open.stale) void recheck();
  }

  async function fetchFile(path) {
    return api.readFile({ workspaceId, path });
  }

  function renderFile(res) {
    const lines = [];
    if (res.kind === "FILE_KIND_BINARY") {
      replace(viewer.body, h("p", { class: "muted" }, `Binary file · ${bytes(res.size)} · ${res.mimeType ?? "application/octet-stream"}`));
      return;
    }
    for (const raw of (res.content ?? "").split("\n")) {
      if (raw === "" && lines.length > 0) continue;
      const m = /^(\d+): ?(.*)$/.exec(raw);
      lines.push(h("div", { class: "line" }, h("span", { class: "ln", "aria-hidden": "true" }, m ? m[1] : ""), h("span", { class: "lt" }, m ? m[2] : raw)));
    }
    const total = res.totalLines ?? 0;
    replace(viewer.body,
      h("pre", { class: "code", tabindex: "0", "aria-label": `Contents of ${res.path}` }, ...lines),
      res.truncated ? h("p", { class: "muted" }, `Showing ${lines.length} of ${total} lines (lines over 2000 characters are cut).`) : null);
  }

  async function openFile(path) {
    open = { path, content: undefined, stale: false };
    viewer.notice.hidden = true;
    viewer.title.textContent = path;
    replace(viewer.body, h("p", { class: "muted" }, "Loading…"));
    for (const dir of dirs.keys()) renderDir(dir);
    try {
      const res = await fetchFile(path);
      if (open?.path !== path) return;
      open.content = res.content ?? "";
      renderFile(res);
    } catch (err) {
      if (open?.path !== path) return;
      replace(viewer.body, h("p", { class: "error" }, `Could not read ${path}: ${err.reason || err.code || ""} ${err.message}`));
    }
  }

  function markStale(text) {
    if (!open) return;
    open.stale = true;
    viewer.noticeText.textContent = text;
    viewer.notice.hidden = false;
  }

  async function recheck() {
    const path = open?.path;
    if (path === undefined || open.content === undefined) return;
    try {
      const res = await fetchFile(path);
      if (open?.path === path && !open.stale && (res.content ?? "") !== open.content) markStale("This file changed since you opened it.");
    } catch (err) {
      if (open?.path === path && !open.stale && err.code === "not_found") markStale("This file was deleted since you opened it.");
    }
  }

  viewer.reload.addEventListener("click", () => {
    if (open) void openFile(open.path);
  });

  return {
    /** Shows the tree of a workspace ("" for none yet). */
    async setWorkspace(id) {
      if (id === workspaceId) return;
      workspaceId = id;
      dirs.clear();
      open = null;
      viewer.notice.hidden = true;
      viewer.title.textContent = "No file open";
      replace(viewer.body, h("p", { class: "muted" }, "Choose a file in the tree to view it."));
      if (id === "") {
        replace(tree, h("p", { class: "muted" }, "The session has no workspace yet."));
        return;
      }
      const root = { expanded: true, entries: [], ul: h("ul", { class: "tree-root" }) };
      dirs.set("", root);
      replace(tree, root.ul);
      await reload([""]);
    },
    /**
     * Files changed: `paths` (workspace paths) or null for "anything may have changed".
     * `deleted` names paths that are gone.
     */
    changed(paths, deleted = new Set()) {
      if (paths === null) wholeTree = true;
      else for (const p of paths) pending.add(normalizePath(p));
      if (open && paths !== null) {
        for (const p of paths) {
          if (normalizePath(p) === open.path) markStale(deleted.has(p) ? "This file was deleted since you opened it." : "This file changed since you opened it.");
        }
      }
      clearTimeout(timer);
      timer = setTimeout(flush, DEBOUNCE_MS);
    },
    dispose() {
      clearTimeout(timer);
    },
  };
}
