// The web UI's entry: the login prompt, the router (#/ and #/session/<id>; the credential is
// never in the URL) and sign-out. Without a credential nothing is fetched and nothing shown but
// the prompt; an UNAUTHENTICATED answer anywhere returns to it.

import { credential, setUnauthenticatedHandler, signIn, signOut, verify } from "./api.js";
import { h, replace } from "./dom.js";
import { renderSessionPage } from "./session-page.js";
import { renderSessionsPage } from "./sessions-page.js";

const main = document.getElementById("main");
const signOutButton = document.getElementById("sign-out");
const nav = document.getElementById("nav");
let dispose = () => undefined;

function showLogin(message = "") {
  dispose();
  dispose = () => undefined;
  signOutButton.hidden = true;
  nav.hidden = true;
  const input = h("input", { id: "credential", name: "credential", type: "password", autocomplete: "off", spellcheck: "false", required: true, "aria-describedby": "credential-help" });
  const error = h("p", { class: "error", role: "alert", hidden: message === "" }, message);
  const form = h("form", { class: "login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Sign in"),
    h("label", { for: "credential" }, "Operator key or session token"),
    input,
    h("p", { id: "credential-help", class: "muted small" }, "Kept in this tab's session storage only, sent as an Authorization header, never put in a URL."),
    error,
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (value === "") return;
    try {
      await verify(value);
    } catch (err) {
      error.textContent = err.code === "unauthenticated" ? "The server does not accept this key or token." : `Sign-in failed: ${err.code}: ${err.message}`;
      error.hidden = false;
      input.focus();
      return;
    }
    signIn(value);
    input.value = "";
    route();
  });
  replace(main, form);
  input.focus();
}

function route() {
  dispose();
  dispose = () => undefined;
  if (credential() === "") {
    showLogin();
    return;
  }
  signOutButton.hidden = false;
  nav.hidden = false;
  const m = /^#\/session\/([^/]+)$/.exec(location.hash);
  if (m) {
    const id = decodeURIComponent(m[1]);
    document.title = `${id} · agent-workspace`;
    dispose = renderSessionPage(main, id);
  } else {
    document.title = "Sessions · agent-workspace";
    dispose = renderSessionsPage(main);
  }
  main.focus({ preventScroll: true });
}

setUnauthenticatedHandler(() => {
  signOut();
  showLogin("The server no longer accepts this key or token (a session that ended, a key removed). Sign in again.");
});
signOutButton.addEventListener("click", () => {
  signOut();
  location.hash = "";
  showLogin();
});
window.addEventListener("hashchange", route);
route();
