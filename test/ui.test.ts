/**
 * The web UI in a real browser (Debian's chromium driven by playwright-core) against a real
 * server: a person watches an agent's session live (REQ-TOOL-004: each call appears when it
 * starts with its name and arguments, turns green or red with the reason, all in call order,
 * the agent's summary last; REQ-TOOL-002: the file tree shows new files without a reload and an
 * open file says it changed). Also: no credential, no data; a session token sees its own session
 * only; markup in a command is text; live updates survive a server restart. Screenshots go to
 * test/output/ui/ (gitignored; CI keeps them as artifacts).
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { commandGate } from "./helpers/engines.ts";
import { LOCAL_ONLY, startServer, type ClientSet, type TestServer } from "./helpers/server.ts";
import { clientsWithToken } from "./helpers/sessions.ts";

const CHROMIUM = "/usr/bin/chromium";
const KEY = "ui-browser-test-operator-key-0123456789";
const OUTPUT = path.resolve("test/output/ui");
const AGENT_TYPE = "ui-coder";
/** Green and red of the chain's icons (app.css: --ok, --bad). */
const GREEN = "rgb(26, 127, 55)";
const RED = "rgb(198, 40, 40)";

interface Ctx {
  server: TestServer;
  browser: Browser;
  /** The page of the session the serial tests build on, and that session's agent. */
  watch?: { context: BrowserContext; page: Page; sessionId: string; token: string; agent: ClientSet; problems: string[] };
}

const test = anyTest as TestFn<Ctx>;
/** The session page the serial tests build on (ava copies `t.context` per test, so it lives here). */
let watched: Ctx["watch"];
const available = commandGate(test, [CHROMIUM, "--version"], "web UI in a real browser");

if (available) {
  test.before(async (t) => {
    await mkdir(OUTPUT, { recursive: true });
    t.context.server = await startServer({ apiKeys: [KEY], env: LOCAL_ONLY });
    await t.context.server.clients.connect.config.createAgentType({
      agentType: { id: AGENT_TYPE, workspace: { enabled: true, tools: ["bash", "read", "write", "edit", "delete", "list", "glob", "grep"] } },
    });
    // launch() gives the browser a fresh profile (--user-data-dir) of its own and removes it at close.
    t.context.browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
  });
  test.after.always(async (t) => {
    await watched?.context.close().catch(() => undefined);
    await t.context.browser?.close().catch(() => undefined);
    await t.context.server?.close();
  });
}

/**
 * A fresh browser context (its own sessionStorage) and page at 1366×800, a laptop's screen. Page
 * errors, console errors (CSP violations among them) and any request whose URL holds a secret
 * are collected in `problems`, which every test asserts empty.
 */
async function openPage(t: ExecutionContext<Ctx>, secrets: string[] = [KEY]) {
  const context = await t.context.browser.newContext({ viewport: { width: 1366, height: 800 } });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => {
    // A refused call logs its HTTP status as a resource error; that is the API answering, not a fault.
    if (msg.type() === "error" && !/Failed to load resource: the server responded with a status of (401|403|404)/.test(msg.text())) problems.push(`console: ${msg.text()}`);
  });
  page.on("request", (req) => {
    if (secrets.some((s) => s !== "" && req.url().includes(s))) problems.push(`a secret in a URL: ${req.url()}`);
  });
  return { context, page, problems };
}

async function signIn(page: Page, url: string, credential: string) {
  await page.goto(`${url}/ui/`);
  await page.locator("#credential").fill(credential);
  await page.getByRole("button", { name: "Sign in" }).click();
}

async function startSession(op: ClientSet) {
  const res = await op.workspaces.startSession({ agentType: AGENT_TYPE });
  if (!res.session) throw new Error("no session");
  return { sessionId: res.session.id, token: res.sessionToken };
}

/** The visible chain as data: one line per entry. */
function chainOf(page: Page) {
  // Runs in the browser (this project's types have no DOM: `any` there).
  return page.locator("ol.chain > li:not([hidden])").evaluateAll((items: any[]) =>
    items.map((el) => {
      const icon = el.querySelector(".icon");
      return {
        kind: el.classList.contains("message") ? "message" : "call",
        tool: el.dataset.tool ?? "",
        outcome: el.dataset.outcome ?? el.dataset.kind ?? "",
        status: el.querySelector(".status")?.textContent ?? "",
        arg: el.querySelector(".arg")?.textContent ?? "",
        reason: el.querySelector(".reason")?.textContent ?? "",
        duration: el.querySelector(".duration")?.textContent ?? "",
        text: el.querySelector(".message-text")?.textContent ?? "",
        color: icon ? (globalThis as any).getComputedStyle(icon).color : "",
        span: el.dataset.span ?? "",
      };
    }),
  );
}

/** Waits until the visible chain has `n` entries and none is still running. */
async function chainSettles(page: Page, n: number) {
  await page.waitForFunction((count) => {
    const items: any[] = [...(globalThis as any).document.querySelectorAll("ol.chain > li:not([hidden])")];
    return items.length === count && items.every((li) => li.dataset.outcome !== "running");
  }, n);
}

const UNTIL_WRITTEN = "until [ -e notes/todo.md ]; do sleep 0.1; done; echo ready";
const MAKE_FILE = "mkdir -p out && echo built > out/result.txt";

test.serial("REQ-TOOL-004 / REQ-TOOL-002: a person watches a session live: calls in order, green and red, the tree and an open file follow", async (t) => {
  const { server } = t.context;
  const op = server.clients.connect;
  const { sessionId, token } = await startSession(op);
  const agent = clientsWithToken(server.url, token);
  const { context, page, problems } = await openPage(t, [KEY, token]);
  watched = { context, page, sessionId, token, agent, problems };

  await signIn(page, server.url, KEY);
  // The sessions page lists it; the link opens its page.
  await page.locator(`tr[data-session="${sessionId}"] a`).click();
  await page.locator(".session-status", { hasText: "ACTIVE" }).waitFor();
  await page.locator(".live", { hasText: "Live" }).waitFor();
  await page.locator(".stage-ok", { hasText: "sandbox local" }).waitFor();
  t.is(await page.locator(".facts").getByText(AGENT_TYPE).count(), 1);
  t.is(await page.locator(".facts").getByText("local", { exact: true }).count(), 1);

  // A call appears when it starts: name and arguments, running.
  const waiting = agent.tools.bash({ command: UNTIL_WRITTEN });
  await page.locator('ol.chain > li[data-outcome="running"]', { hasText: UNTIL_WRITTEN }).waitFor();
  const running = (await chainOf(page))[0];
  t.like(running, { tool: "bash", outcome: "running", status: "Running", arg: UNTIL_WRITTEN, duration: "" });

  // …then finishes green once the file it waits for is written.
  await agent.tools.writeFile({ path: "notes/todo.md", content: "first version\n" });
  t.is((await waiting).stdout, "ready\n");
  await agent.tools.readFile({ path: "missing.txt" }).then(() => t.fail("read of a missing file succeeded"), () => undefined);
  await agent.tools.bash({ command: MAKE_FILE });

  await chainSettles(page, 4);
  const chain = await chainOf(page);
  t.deepEqual(chain.map((c) => [c.tool, c.outcome, c.status, c.arg]), [
    ["bash", "ok", "Succeeded", UNTIL_WRITTEN],
    ["write", "ok", "Succeeded", "notes/todo.md"],
    ["read", "error", "Failed", "missing.txt"],
    ["bash", "ok", "Succeeded", MAKE_FILE],
  ]);
  t.deepEqual(chain.map((c) => c.color), [GREEN, GREEN, RED, GREEN]);
  t.is(chain[2].reason, "Reason: FILE_NOT_FOUND (not_found)");
  t.true(chain.every((c) => /^\d+(\.\d)? (ms|s)$/.test(c.duration)), JSON.stringify(chain.map((c) => c.duration)));

  // The tree shows the new files without a reload: the written file's directory, and what the command made.
  await page.locator('.tree button[data-path="notes"]').click();
  await page.locator('.tree button[data-path="notes/todo.md"]').waitFor();
  await page.locator('.tree button[data-path="out"]').click();
  await page.locator('.tree button[data-path="out/result.txt"]').waitFor();

  // An open file says when it changed, and reloads on request.
  await page.locator('.tree button[data-path="notes/todo.md"]').click();
  await page.locator(".viewer-body .lt", { hasText: "first version" }).waitFor();
  t.true(await page.locator(".changed-notice").isHidden());
  await agent.tools.writeFile({ path: "notes/todo.md", content: "second version\nwith two lines\n" });
  await page.locator(".changed-notice", { hasText: "changed since you opened it" }).waitFor();
  t.is(await page.locator(".viewer-body .lt").first().textContent(), "first version", "the view stays as opened until reloaded");
  await page.locator(".changed-notice").getByRole("button", { name: "Reload" }).click();
  await page.locator(".viewer-body .lt", { hasText: "with two lines" }).waitFor();
  t.true(await page.locator(".changed-notice").isHidden());
  t.deepEqual(await page.locator(".viewer-body .ln").allTextContents(), ["1", "2"]);

  // The viewer's own reads are audited too, but folded away from the agent's chain.
  await chainSettles(page, 5);
  t.regex(await page.locator(".chain-panel .panel-head button").textContent() ?? "", /^Show this viewer's file reads \(\d+\)$/);

  await page.screenshot({ path: path.join(OUTPUT, "session.png") });
  t.deepEqual(problems, []);
});

test.serial("a command containing <img src=x onerror=…> is shown as text, never as markup", async (t) => {
  const w = watched;
  if (!w) return t.fail("the first test did not set up the session");
  const command = `echo '<img src=x onerror="window.__xss=1">' > /dev/null`;
  await w.agent.tools.bash({ command });
  await w.page.locator("ol.chain > li .arg", { hasText: "onerror" }).waitFor();
  t.is(await w.page.locator("ol.chain > li .arg", { hasText: "onerror" }).textContent(), command);
  t.is(await w.page.locator("ol.chain img").count(), 0);
  t.is(await w.page.evaluate(() => (globalThis as { __xss?: number }).__xss), undefined);
  t.deepEqual(w.problems, []);
});

test.serial("after a reload the chain comes from the audit trail: the same calls, once each, in order", async (t) => {
  const w = watched;
  if (!w) return t.fail("the first test did not set up the session");
  const before = await chainOf(w.page);
  await w.page.reload();
  await w.page.locator(".live", { hasText: "Live" }).waitFor();
  await chainSettles(w.page, before.length);
  const after = await chainOf(w.page);
  t.deepEqual(after.map((c) => [c.span, c.tool, c.outcome, c.arg, c.reason]), before.map((c) => [c.span, c.tool, c.outcome, c.arg, c.reason]));
  t.is(new Set(after.map((c) => c.span)).size, after.length);
  t.is(await w.page.evaluate(() => sessionStorage.length), 1, "the credential stays in this tab's session storage");
  t.false(w.page.url().includes(KEY));
  t.deepEqual(w.problems, []);
});

test.serial("REQ-TOOL-004: the agent's messages appear in order with the calls, its summary last and distinct", async (t) => {
  const w = watched;
  if (!w) return t.fail("the first test did not set up the session");
  // PostAgentMessage (AuditService), as the agent runtime posts it with the session token.
  const post = async (kind: string, text: string) => {
    const res = await fetch(`${t.context.server.url}/agentworkspace.v1.AuditService/PostAgentMessage`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${w.token}` },
      body: JSON.stringify({ kind, text }),
    });
    t.is(res.status, 200, `PostAgentMessage ${kind}: ${await res.text()}`);
  };
  await post("AGENT_MESSAGE_KIND_NOTE", "Checking the workspace first.");
  await w.agent.tools.bash({ command: "ls notes" });
  await post("AGENT_MESSAGE_KIND_SUMMARY", "Wrote notes/todo.md and built out/result.txt; missing.txt does not exist.");
  await w.page.locator("ol.chain > li.message-summary").waitFor();
  const chain = await chainOf(w.page);
  t.deepEqual(chain.slice(-3).map((c) => [c.kind, c.outcome, c.arg || c.text]), [
    ["message", "note", "Checking the workspace first."],
    ["call", "ok", "ls notes"],
    ["message", "summary", "Wrote notes/todo.md and built out/result.txt; missing.txt does not exist."],
  ]);
  t.is(await w.page.locator("ol.chain > li").last().locator(".status").textContent(), "Agent's summary");
  await w.page.screenshot({ path: path.join(OUTPUT, "session-summary.png") });
  t.deepEqual(w.problems, []);
});

test("a page loaded without a key shows a login prompt and no data; a wrong key is refused", async (t) => {
  const { context, page, problems } = await openPage(t);
  const api: string[] = [];
  page.on("request", (req) => {
    if (!new URL(req.url()).pathname.startsWith("/ui/")) api.push(req.url());
  });
  try {
    await page.goto(`${t.context.server.url}/ui/#/session/sess-0000000000000000`);
    await page.locator("#credential").waitFor();
    t.is(await page.locator("table, ol.chain, .tree").count(), 0);
    t.deepEqual(api, [], "nothing is asked of the API without a credential");
    t.true(await page.locator("#sign-out").isHidden());

    await page.locator("#credential").fill("not-the-key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.locator(".login .error", { hasText: "does not accept" }).waitFor();
    t.is(await page.locator("table, ol.chain").count(), 0);
    t.is(await page.evaluate(() => sessionStorage.length), 0, "a refused credential is not kept");
    t.deepEqual(problems, []);
  } finally {
    await context.close();
  }
});

test("a session token shows only its own session; sign out forgets it", async (t) => {
  const op = t.context.server.clients.connect;
  const mine = await startSession(op);
  const other = await startSession(op);
  await clientsWithToken(t.context.server.url, other.token).tools.bash({ command: "echo other session" });
  await clientsWithToken(t.context.server.url, mine.token).tools.bash({ command: "echo my session" });
  const { context, page, problems } = await openPage(t, [KEY, mine.token]);
  try {
    await signIn(page, t.context.server.url, mine.token);
    await page.locator(`tr[data-session="${mine.sessionId}"]`).waitFor();
    t.deepEqual(await page.locator("tr[data-session]").evaluateAll((rows: any[]) => rows.map((r) => r.dataset.session as string)), [mine.sessionId]);
    t.is(await page.locator("tr[data-workspace]").count(), 0);

    await page.goto(`${t.context.server.url}/ui/#/session/${other.sessionId}`);
    await page.locator(".session-head .error", { hasText: "OUTSIDE_SESSION" }).waitFor();
    await page.locator(".live", { hasText: "Not live" }).waitFor();
    t.is(await page.locator("ol.chain > li").count(), 0);
    t.is(await page.locator(".tree button").count(), 0);

    await page.goto(`${t.context.server.url}/ui/#/session/${mine.sessionId}`);
    await chainSettles(page, 1);
    t.deepEqual((await chainOf(page)).map((c) => c.arg), ["echo my session"]);

    await page.locator("#sign-out").click();
    await page.locator("#credential").waitFor();
    t.is(await page.evaluate(() => sessionStorage.length), 0);
    t.is(await page.locator("ol.chain").count(), 0);
    t.deepEqual(problems, []);
  } finally {
    await context.close();
  }
});

test.serial("live updates survive a server restart: the page reconnects and misses nothing", async (t) => {
  // A server of its own, restarted on the same port with the same data directory.
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-ui-restart-"));
  let server = await startServer({ apiKeys: [KEY], env: LOCAL_ONLY, dataDir });
  const { context, page, problems } = await openPage(t);
  try {
    await server.clients.connect.config.createAgentType({ agentType: { id: AGENT_TYPE, workspace: { enabled: true, tools: ["bash", "read", "list"] } } });
    const { sessionId, token } = await startSession(server.clients.connect);
    await clientsWithToken(server.url, token).tools.bash({ command: "echo before" });
    await signIn(page, server.url, KEY);
    await page.goto(`${server.url}/ui/#/session/${sessionId}`);
    await chainSettles(page, 1);
    await page.locator(".live", { hasText: "Live" }).waitFor();

    const port = Number(new URL(server.url).port);
    await server.close();
    await page.locator(".live", { hasText: "Reconnecting" }).waitFor();
    server = await startServer({ apiKeys: [KEY], env: LOCAL_ONLY, dataDir, port });
    await page.locator(".live", { hasText: "Live" }).waitFor({ timeout: 60_000 });
    await clientsWithToken(server.url, token).tools.bash({ command: "echo after" });
    await chainSettles(page, 2);
    t.deepEqual((await chainOf(page)).map((c) => [c.arg, c.outcome]), [["echo before", "ok"], ["echo after", "ok"]]);
    // Connection failures while the server was down are the browser's to log, and so are the
    // answers of the closing server (the test helper closes the app before its socket); nothing else.
    t.deepEqual(problems.filter((p) => !/ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE|network error|Failed to fetch|ERR_CONNECTION_RESET|ERR_INCOMPLETE_CHUNKED_ENCODING|status of (500|503)/.test(p)), []);
  } finally {
    await context.close();
    await server.close();
    await rm(dataDir, { recursive: true, force: true });
  }
});
