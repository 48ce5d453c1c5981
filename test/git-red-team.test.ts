/**
 * The git tools under attack, on every provider: an agent that wants the push credential, wants
 * the server's git to take it somewhere else, or wants the server to run a program of its choice.
 *
 * - The token never reaches the sandbox: a scanner in the sandbox reads every process's command
 *   line and environment while a (slowed) push runs, and afterwards the sandbox's files, git
 *   configuration and credential stores, every response, the server's logs, the audit trail and
 *   the spans are searched for the token and for its Basic header.
 * - Hostile repository configuration (insteadOf, pushurl, credential helpers, ssh commands,
 *   fsmonitor, hooks, includes, pagers, diff drivers, proxies), each first proven live with the
 *   agent's own git, then run through GitStatus, GitDiff, GitCommit, GitCheckout and GitPush: the
 *   push reaches the real repository, a decoy git server sees no request, no marker appears.
 * - Hostile branches: forged remote-tracking refs and an evil merge hiding a `.env` change, a
 *   branch over the size limit, names that read as options, protected branches of the agent type.
 *
 * The scanner and the file search never see the token itself: they get it as a pattern with one
 * character in brackets (`ab[c]de`), which matches the token without containing it, so neither
 * their command lines nor the audit record of the test's own commands can produce a hit.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { gate, probeEngines } from "./helpers/engines.ts";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { freshId, remoteGit, remoteTip, repoSession as sharedRepoSession } from "./helpers/git-repos.ts";
import { outcome, shellQuote, transcript } from "./helpers/red-team.ts";
import { type ClientSet, expectError, startServer, type TestServer } from "./helpers/server.ts";
import { credentialsFile } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  /** The repositories every test but the scan pushes to. */
  git: GitServer;
  /** The repositories of the scan tests, one server per provider, each slowed while its push runs. */
  slow: Record<string, GitServer>;
  /** Where hostile configuration points; it must never see a request. */
  decoy: GitServer;
  dir: string;
  logs: string[];
  spans: InMemorySpanExporter;
}
const test = anyTest as TestFn<Ctx>;

const TOKEN = `tok-${randomBytes(16).toString("hex")}`;
/** The scan test's token: long and random, so any hit is a leak, never a coincidence. */
const LONG_TOKEN = `scan-${randomBytes(40).toString("hex")}`;
const DECOY_TOKEN = `decoy-${randomBytes(8).toString("hex")}`;
const USER = "x-access-token";
const basicOf = (token: string) => Buffer.from(`${USER}:${token}`).toString("base64");
const TOOLS = ["bash", "read", "write", "list", "git"];
const IDENTITY = { GIT_AUTHOR_NAME: "agent", GIT_AUTHOR_EMAIL: "agent@example.invalid", GIT_COMMITTER_NAME: "agent", GIT_COMMITTER_EMAIL: "agent@example.invalid" };

const engines = await probeEngines();
const PROVIDERS = ["local", ...(["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "git red team"))];

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-git-red-"));
  const [git, decoy] = await Promise.all([startGitServer({ token: TOKEN }), startGitServer({ token: DECOY_TOKEN })]);
  const slow: Record<string, GitServer> = {};
  for (const p of PROVIDERS) slow[p] = await startGitServer({ token: LONG_TOKEN });
  const logs: string[] = [];
  const spans = new InMemorySpanExporter();
  const hosts: Record<string, string> = { [new URL(git.url).host]: TOKEN };
  for (const g of Object.values(slow)) hosts[new URL(g.url).host] = LONG_TOKEN;
  const server = await startServer({
    env: { AGENT_WORKSPACE_GIT_CREDENTIALS: await credentialsFile(dir, hosts) },
    onLog: (line) => logs.push(line),
    overrides: { spanExporters: [spans] },
  });
  t.context = { server, git, slow, decoy, dir, logs, spans };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await Promise.all([t.context.git?.close(), t.context.decoy?.close(), ...Object.values(t.context.slow ?? {}).map((g) => g.close())]);
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/**
 * At most `n` tests of a provider at once (its engine stays responsive); a test's time limit
 * starts when its turn comes.
 */
function limiter(limits: Record<string, number>) {
  const running = new Map<string, number>();
  const waiting = new Map<string, Array<() => void>>();
  return async <T>(t: ExecutionContext<Ctx>, key: string, fn: () => Promise<T>, budgetMs = 240_000): Promise<T> => {
    t.timeout(30 * 60_000);
    if ((running.get(key) ?? 0) >= (limits[key] ?? 2)) {
      await new Promise<void>((resolve) => waiting.set(key, [...(waiting.get(key) ?? []), resolve]));
    }
    running.set(key, (running.get(key) ?? 0) + 1);
    try {
      t.timeout(budgetMs);
      return await fn();
    } finally {
      running.set(key, (running.get(key) ?? 1) - 1);
      const next = waiting.get(key)?.shift();
      next?.();
    }
  };
}
const lane = limiter({ local: 4, docker: 4, gvisor: 3 });

const newId = freshId;

/** A session of a new agent type, cloned from a new repository on `server`. */
const repoSession = (t: ExecutionContext<Ctx>, provider: string, options: { server?: TestServer; git?: GitServer; protectedBranches?: string[]; baseBranch?: string } = {}) =>
  sharedRepoSession(t as ExecutionContext<unknown>, (options.server ?? t.context.server).clients.grpc, options.git ?? t.context.git, provider, { tools: TOOLS, ...options });

/** Runs `command` in the workspace; its stdout, or a thrown error with stderr. */
async function sh(c: ClientSet, ws: string, command: string, env: Record<string, string> = {}): Promise<string> {
  const r = await c.tools.bash({ workspaceId: ws, command, env, timeoutMs: 600_000n });
  if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode} of ${command}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/**
 * A regular expression (grep's basic syntax) that matches exactly `s` but does not contain it:
 * its middle character in brackets. Safe to hand to the sandbox and to the audit trail.
 */
function hidden(s: string): string {
  const k = Math.floor(s.length / 2);
  return `${s.slice(0, k)}[${s[k]}]${s.slice(k + 1)}`;
}

/** The requests a git server got for a repository (or anything naming it, as a proxy request would). */
const requestsFor = (g: GitServer, ...names: string[]) => g.requests.filter((r) => names.some((n) => r.path.includes(n)));

/** Every request that carried an Authorization header went to a repository of this file, with the right token. */
function assertTokenOnlyToRealRepos(t: ExecutionContext<Ctx>, g: GitServer, token: string, repo: string): void {
  const stray = g.requests.filter((r) => r.authorization !== undefined && !(r.authorization === `Basic ${basicOf(token)}` && /^\/repo-[A-Za-z0-9-]+\.git\/(info\/refs|git-upload-pack|git-receive-pack)$/.test(r.path)));
  t.deepEqual(stray.map((r) => `${r.method} ${r.path}`), [], "requests carrying credentials to anything but a repository's git endpoints");
  const own = requestsFor(g, `/${repo}.git`);
  t.true(own.some((r) => r.method === "POST" && r.path === `/${repo}.git/git-receive-pack` && r.authorization === `Basic ${basicOf(token)}` && r.status === 200), "the push reached the real repository with the token");
}

/** All audit records of a workspace, every page. */
async function auditOf(c: ClientSet, ws: string) {
  const out = [];
  let pageToken = "";
  do {
    const page = await c.audit.listAuditEvents({ workspaceId: ws, pageToken, pageSize: 200 });
    out.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}

/** Where a provider's markers live: a host directory the test owns (local) or /tmp in the sandbox. */
async function markerDir(c: ClientSet, ws: string, provider: string): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  if (provider === "local") {
    const dir = await mkdtemp(path.join(tmpdir(), "aw-git-red-marker-"));
    return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
  }
  const dir = `/tmp/aw-git-red-marker-${randomBytes(6).toString("hex")}`;
  await sh(c, ws, `mkdir -p ${dir}`);
  return { dir, cleanup: async () => undefined };
}

/** The names in the marker directory, seen from the sandbox and, on local, from the host. */
async function markersIn(c: ClientSet, ws: string, provider: string, dir: string): Promise<string[]> {
  const seen = (await sh(c, ws, `ls -A ${dir}`)).split("\n").filter((l) => l !== "");
  if (provider === "local") seen.push(...readdirSync(dir).filter((n) => !seen.includes(n)));
  return seen.sort();
}

for (const provider of PROVIDERS) {
  test(`${provider}: the token never reaches the sandbox, during or after a push`, async (t) => {
    await lane(t, provider, async () => {
      const { logs, spans } = t.context;
      const slow = t.context.slow[provider];
      const seen: unknown[] = [];
      const keep = async <T>(p: Promise<T>): Promise<T> => {
        try {
          const v = await p;
          seen.push(v);
          return v;
        } catch (err) {
          seen.push(err);
          throw err;
        }
      };
      const s = await repoSession(t, provider, { git: slow });
      seen.push(s.started, s.session);
      const { c, ws } = s;
      const basic = basicOf(LONG_TOKEN);
      const leaks = (text: string) => text.includes(LONG_TOKEN) || text.includes(basic);
      const patterns = [hidden(LONG_TOKEN), hidden(basic)];

      await keep(c.tools.gitCheckout({ workspaceId: ws, branch: "feature/scan", create: true }));
      await keep(c.tools.writeFile({ workspaceId: ws, path: "scan.txt", content: "scanned\n" }));
      const commit = await keep(c.tools.gitCommit({ workspaceId: ws, message: "scan", files: ["scan.txt"] }));

      // The scanner: every /proc/*/cmdline and /proc/*/environ it can read, over and over, until
      // told to stop. A canary (a process whose environment holds a string assembled at run
      // time) proves it reads other processes' environments.
      const scratch = provider === "local" ? await mkdtemp(path.join(tmpdir(), "aw-git-red-scan-")) : `/tmp/aw-git-red-scan-${randomBytes(6).toString("hex")}`;
      if (provider === "local") t.teardown(() => rm(scratch, { recursive: true, force: true }));
      const hits = `${scratch}/hits`;
      const stop = `${scratch}/stop`;
      const canary = [`canary-${randomBytes(6).toString("hex")}`, randomBytes(6).toString("hex")];
      const scanner = [
        'hits=$1; stop=$2; mkdir -p "${hits%/*}"; : > "$hits"',
        'AW_CANARY="$6$7" sleep 600 & canary=$!',
        "n=0; echo ready",
        'while [ ! -e "$stop" ]; do',
        '  grep -asoH -e "$3" -e "$4" -e "$5" /proc/[0-9]*/cmdline /proc/[0-9]*/environ > "$hits.new" 2>/dev/null',
        // Who each hit is: its command line, for the report.
        '  for p in $(sed -n "s#^/proc/\\([0-9]*\\)/.*#\\1#p" "$hits.new" | sort -u); do printf "/proc/%s/is:%s\\n" "$p" "$(tr "\\0" " " < /proc/$p/cmdline 2>/dev/null)"; done >> "$hits"',
        '  cat "$hits.new" >> "$hits"; n=$((n+1))',
        "done",
        'kill "$canary"; echo "iterations=$n"',
      ].join("\n");
      // Scripts as files: the command policy reads command lines, and these globs over /proc
      // would read to it as naming anything.
      await keep(c.tools.writeFile({ workspaceId: ws, path: "scan/scan.sh", content: `${scanner}\n` }));
      const command = `bash scan/scan.sh ${[hits, stop, ...patterns, hidden(canary.join("")), ...canary].map(shellQuote).join(" ")}`;
      let ready!: () => void;
      const isReady = new Promise<void>((resolve) => (ready = resolve));
      let scanning = false;
      const scan = (async () => {
        let out = "";
        let exit = -1;
        try {
          for await (const m of c.tools.streamBash({ workspaceId: ws, command, timeoutMs: 600_000n })) {
            seen.push(m);
            if (m.event.case === "stdout") {
              out += Buffer.from(m.event.value).toString("utf8");
              if (out.includes("ready\n")) {
                scanning = true;
                ready();
              }
            } else if (m.event.case === "exited") {
              exit = m.event.value.exitCode;
            }
          }
        } finally {
          ready();
        }
        return { out, exit };
      })();
      await isReady;
      if (!scanning) t.fail(`the scanner did not start: ${JSON.stringify(await scan)}`);

      // The push, slowed so that it takes seconds while the scanner runs.
      slow.delayMs = 600;
      const started = Date.now();
      let pushed;
      try {
        pushed = await keep(c.tools.gitPush({ workspaceId: ws }));
      } finally {
        slow.delayMs = 0;
        await sh(c, ws, `touch ${stop}`);
      }
      const pushMs = Date.now() - started;
      const scanned = await scan;
      t.is(scanned.exit, 0, scanned.out);
      const iterations = Number(/iterations=(\d+)/.exec(scanned.out)?.[1] ?? 0);
      t.log(`push took ${pushMs} ms; the scanner went over /proc ${iterations} times`);
      t.true(pushMs >= 3000, `the push took ${pushMs} ms, too short for the scan to mean much`);
      t.true(iterations >= 10, `the scanner ran ${iterations} times`);
      const hitLines = (await sh(c, ws, `cat ${hits}`)).split("\n").filter((l) => l !== "");
      // (The hits themselves are the scanner's report, not a tool's answer: kept out of `seen`.)
      t.true(hitLines.some((l) => /\/environ:/.test(l) && l.endsWith(canary.join(""))), `the canary was seen in a process environment: ${hitLines.slice(0, 5).join("\n")}`);
      const who = new Map<string, string>();
      for (const l of hitLines.filter((x) => /^\/proc\/\d+\/is:/.test(x))) {
        const cmd = l.slice(l.indexOf(":") + 1).trim();
        if (cmd !== "" && !who.has(l.split("/")[2])) who.set(l.split("/")[2], cmd);
      }
      const tokenHits = [...new Set(hitLines.filter((l) => leaks(l)))].map((l) => `${l.replaceAll(LONG_TOKEN, "<TOKEN>").replaceAll(basic, "<BASIC(user:TOKEN)>")}  [${(who.get(l.split("/")[2]) ?? "?").slice(0, 300)}]`);

      // The push worked: the repository's branch has the commit, and it went there with the token.
      t.is(pushed.commit, commit.commit);
      t.is(remoteTip(s.bare, "feature/scan"), commit.commit);
      assertTokenOnlyToRealRepos(t, slow, LONG_TOKEN, s.repo);

      // After: the sandbox's files (the whole filesystem of a container, the workspace on local),
      // every object of its repository, its git configuration and credential stores.
      const grepFiles = provider === "local"
        ? 'grep -rsl -e "$1" -e "$2" -- . ; true'
        : 'for d in /*; do case "$d" in /proc|/sys|/dev) continue;; esac; grep -rsl -e "$1" -e "$2" -- "$d"; done; true';
      await c.tools.writeFile({ workspaceId: ws, path: "scan/files.sh", content: `${grepFiles}\n` });
      const files = await sh(c, ws, `bash scan/files.sh ${patterns.map(shellQuote).join(" ")}`);
      seen.push(files);
      t.is(files.trim(), "", "files of the sandbox holding the token");
      const objects = await sh(c, ws, `git cat-file --batch-all-objects --batch | grep -ac -e ${shellQuote(patterns[0])} -e ${shellQuote(patterns[1])}; true`);
      t.is(objects.trim(), "0", "git objects holding the token");
      const port = new URL(slow.url).host;
      await c.tools.writeFile({
        workspaceId: ws,
        path: "scan/config.sh",
        content: [
          "cat .git/config",
          "git remote -v",
          "git config --list --show-origin",
          "cat ~/.git-credentials .git/credentials ~/.config/git/credentials 2>/dev/null",
          `printf 'protocol=http\\nhost=${port}\\npath=${s.repo}.git\\n\\n' | GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=false git credential fill 2>&1`,
          "true",
          "",
        ].join("\n"),
      });
      const config = await sh(c, ws, "bash scan/config.sh");
      seen.push(config);
      t.true(config.includes(`remote.origin.url=${s.url}`), config);
      t.false(leaks(config), "the token in the workspace's git configuration or credential stores");

      // Everything the test was told, and everything the server said about it.
      t.false(leaks(seen.map(transcript).join("\n")), "the token in a tool response");
      t.true(logs.length > 0, "the server logged");
      t.false(leaks(logs.join("\n")), "the token in the server's logs");
      const audit = await auditOf(c, ws);
      t.true(audit.some((e) => e.request.action === "push"), "the push is in the audit trail");
      t.false(leaks(transcript(audit)), "the token in the audit trail");
      const spanText = spans.getFinishedSpans().map((sp) => JSON.stringify({ name: sp.name, attributes: sp.attributes, status: sp.status, events: sp.events.map((e) => [e.name, e.attributes]), resource: sp.resource.attributes })).join("\n");
      t.true(spanText.includes("GitPush"), "the push's span was recorded");
      t.false(leaks(spanText), "the token in a span");
      // Last, so that every other check above has had its say when this one fails.
      if (provider === "local") {
        // The local provider isolates no processes (README, "Security model"): its commands run on
        // the host as the server's user and see the server's own git in /proc, whose environment
        // carries the header. Containers see only the sandbox's processes: there, none may hold it.
        t.log(`local: ${tokenHits.length} /proc hits from the server's own git, as documented`);
      } else {
        t.deepEqual(tokenHits, [], "processes whose command line or environment held the token during the push (readable from the sandbox)");
      }
      await c.workspaces.endSession({ id: s.sessionId }).catch(() => undefined);
    }, 300_000);
  });
}

/** What a trick's arm and control get. */
interface TrickArena {
  t: ExecutionContext<Ctx>;
  c: ClientSet;
  ws: string;
  provider: string;
  /** The workspace's configured repository. */
  real: string;
  /** A repository URL on the decoy server. */
  evil: string;
  decoy: GitServer;
  /** The absolute path of a marker named `name`. */
  mark: (name: string) => string;
  sh: (command: string, env?: Record<string, string>) => Promise<string>;
}

/** One piece of hostile configuration. */
interface Trick {
  name: string;
  /** Markers the trick's commands would create (names in the marker directory). */
  markers: string[];
  /** Sets the trick up, as an agent can: `git config` through bash, files through WriteFile. */
  arm: (a: TrickArena) => Promise<void>;
  /** Proves the trick is live for the agent's own git (the markers appear, the URL resolves to the decoy); it leaves markers behind. */
  control: (a: TrickArena) => Promise<void>;
  /**
   * Markers that the hardening of every git in a container (scripts/git-harden.c) keeps the
   * agent's own git from making there: its control then shows the rest only (local, all of them).
   */
  hardened?: string[];
}

/** A command (for a shell) that creates the marker `m`, accepting any arguments git appends. */
const touching = (m: string, then = "") => `f() { touch '${m}';${then} }; f`;
const q = shellQuote;

/** The agent's own git, as an agent would run it: no hardening, the sandbox's environment. */
const own = (command: string) => `env -u GIT_CONFIG_COUNT -u GIT_PAGER -u PAGER ${command}`;

const HOOKS = ["pre-commit", "commit-msg", "post-commit", "pre-push", "post-checkout", "reference-transaction", "post-index-change"];

/** Writes hook scripts that create markers into `dirName` in the workspace. */
async function writeHooks(a: TrickArena, dirName: string, hooks: string[], prefix: string): Promise<void> {
  for (const hook of hooks) {
    await a.c.tools.writeFile({ workspaceId: a.ws, path: `${dirName}/${hook}`, content: `#!/bin/sh\ntouch '${a.mark(`${prefix}${hook}`)}'\nexit 0\n` });
  }
  await a.sh(`chmod +x ${dirName}/*`);
}

/** Asserts that the workspace's own git resolves origin (fetch and push) to the decoy. */
async function controlUrls(a: TrickArena, push = true, fetch = true): Promise<void> {
  if (fetch) a.t.is((await a.sh(own("git ls-remote --get-url origin"))).trim(), a.evil, "control: the agent's git fetches origin from the decoy");
  if (push) a.t.is((await a.sh(own("git remote get-url --push origin"))).trim(), a.evil, "control: the agent's git pushes origin to the decoy");
}

const TRICKS: Trick[] = [
  {
    name: "url.<decoy>.insteadOf <real url>",
    markers: [],
    arm: (a) => a.sh(`git config url.${q(a.evil)}.insteadOf ${q(a.real)}`).then(() => undefined),
    control: (a) => controlUrls(a),
  },
  {
    name: "url.<decoy>.pushInsteadOf <real url>",
    markers: [],
    arm: (a) => a.sh(`git config url.${q(a.evil)}.pushInsteadOf ${q(a.real)}`).then(() => undefined),
    control: (a) => controlUrls(a, true, false),
  },
  {
    name: "remote.origin.url, remote.origin.pushurl and remote.pushDefault pointing at the decoy",
    markers: [],
    arm: (a) => a.sh(`git config remote.origin.url ${q(a.evil)} && git config remote.origin.pushurl ${q(a.evil)} && git remote add evil ${q(a.evil)} && git config remote.pushDefault evil`).then(() => undefined),
    control: async (a) => {
      await controlUrls(a);
      a.t.is((await a.sh(own("git remote get-url --push evil"))).trim(), a.evil);
    },
  },
  {
    name: "credential.helper running a command",
    markers: ["credential-helper"],
    hardened: ["credential-helper"],
    arm: (a) => a.sh(`git config credential.helper ${q(`!${touching(a.mark("credential-helper"))}`)}`).then(() => undefined),
    control: (a) => a.sh(own(`sh -c "printf 'protocol=http\\nhost=127.0.0.1\\n\\n' | GIT_TERMINAL_PROMPT=0 git credential fill"; true`)).then(() => undefined),
  },
  {
    name: "core.sshCommand with an ssh push URL",
    markers: ["ssh-command"],
    hardened: ["ssh-command"],
    arm: (a) => a.sh(`git config core.sshCommand ${q(touching(a.mark("ssh-command")))} && git config remote.origin.pushurl ssh://git@127.0.0.1:1/evil.git`).then(() => undefined),
    control: (a) => a.sh(own("git ls-remote ssh://git@127.0.0.1:1/evil.git; true")).then(() => undefined),
  },
  {
    name: "core.fsmonitor running a command",
    markers: ["fsmonitor"],
    hardened: ["fsmonitor"],
    arm: (a) => a.sh(`git config core.fsmonitor ${q(touching(a.mark("fsmonitor")))}`).then(() => undefined),
    control: (a) => a.sh(own("git status")).then(() => undefined),
  },
  {
    name: "core.hooksPath to hooks the agent wrote",
    markers: HOOKS,
    hardened: HOOKS,
    arm: async (a) => {
      await writeHooks(a, "evil-hooks", HOOKS, "");
      await a.sh('git config core.hooksPath "$PWD/evil-hooks"');
    },
    control: (a) => a.sh(own([
      "git add evil-hooks",
      "git commit -q -m control",
      "git checkout -q -b control-checkout && git checkout -q -",
      "git push -q . HEAD:refs/heads/control-push",
    ].join(" && ")), IDENTITY).then(() => undefined),
  },
  {
    name: "include.path of a file setting insteadOf and core.fsmonitor",
    markers: ["include-fsmonitor"],
    hardened: ["include-fsmonitor"],
    arm: async (a) => {
      const inc = `[url ${JSON.stringify(a.evil)}]\n\tinsteadOf = ${a.real}\n\tpushInsteadOf = ${a.real}\n[core]\n\tfsmonitor = ${JSON.stringify(touching(a.mark("include-fsmonitor")))}\n`;
      await a.c.tools.writeFile({ workspaceId: a.ws, path: "evil.inc", content: inc });
      await a.sh('git config include.path "$PWD/evil.inc"');
    },
    control: async (a) => {
      await controlUrls(a);
      await a.sh(own("git status"));
    },
  },
  {
    name: "core.pager and pager.status",
    markers: ["core-pager", "pager-status"],
    // GIT_PAGER, forced to cat (which git never runs), wins over both.
    hardened: ["core-pager", "pager-status"],
    arm: (a) => a.sh(`git config core.pager ${q(touching(a.mark("core-pager"), " cat;"))} && git config pager.status ${q(touching(a.mark("pager-status"), " cat;"))}`).then(() => undefined),
    // A pager runs only on a terminal: script(1) gives the agent's git one.
    control: (a) => a.sh(own(`script -qec 'git status; git log -1' /dev/null > /dev/null`)).then(() => undefined),
  },
  {
    name: "diff.external and a textconv driver from .gitattributes",
    markers: ["diff-external", "textconv"],
    arm: async (a) => {
      await a.c.tools.writeFile({ workspaceId: a.ws, path: ".gitattributes", content: "* diff=evil\n" });
      await a.c.tools.writeFile({ workspaceId: a.ws, path: "README.md", content: "# svc, changed\n" });
      await a.sh(`git config diff.external ${q(touching(a.mark("diff-external")))} && git config diff.evil.textconv ${q(touching(a.mark("textconv"), ' cat "$1";'))}`);
    },
    control: (a) => a.sh(own("git diff > /dev/null; git diff --no-ext-diff > /dev/null")).then(() => undefined),
  },
  {
    name: "http.proxy and http.extraHeader pointing at the decoy",
    markers: [],
    arm: (a) => a.sh(`git config http.proxy ${q(a.decoy.url)} && git config http.${q(a.real)}.proxy ${q(a.decoy.url)} && git config http.extraHeader ${q(`Authorization: Basic ${basicOf(DECOY_TOKEN)}`)}`).then(() => undefined),
    control: async (a) => {
      a.t.is((await a.sh(own(`git config --get-urlmatch http.proxy ${q(a.real)}`))).trim(), a.decoy.url, "control: the agent's git would go through the decoy");
    },
  },
  {
    name: "the same tricks in the global configuration (~/.gitconfig)",
    markers: ["global-fsmonitor", "global-pre-commit", "global-credential-helper"],
    hardened: ["global-fsmonitor", "global-pre-commit", "global-credential-helper"],
    arm: async (a) => {
      await writeHooks(a, "global-hooks", ["pre-commit"], "global-");
      await a.sh([
        `git config --global url.${q(a.evil)}.insteadOf ${q(a.real)}`,
        `git config --global core.fsmonitor ${q(touching(a.mark("global-fsmonitor")))}`,
        'git config --global core.hooksPath "$PWD/global-hooks"',
        `git config --global credential.helper ${q(`!${touching(a.mark("global-credential-helper"))}`)}`,
      ].join(" && "));
    },
    control: async (a) => {
      await controlUrls(a);
      await a.sh(own(`git status > /dev/null && git commit -q --allow-empty -m control && sh -c "printf 'protocol=http\\nhost=127.0.0.1\\n\\n' | GIT_TERMINAL_PROMPT=0 git credential fill"; true`), IDENTITY);
    },
  },
];

for (const provider of PROVIDERS) {
  for (const trick of TRICKS) {
    test(`${provider}: hostile repository configuration cannot redirect the push or run code: ${trick.name}`, async (t) => {
      await lane(t, provider, async () => {
        const { decoy, git } = t.context;
        const s = await repoSession(t, provider);
        const { c, ws } = s;
        const evilRepo = newId(`evil-${provider}`);
        await decoy.createRepo(evilRepo, { branches: { main: { "README.md": "# decoy\n" } } });
        const markers = await markerDir(c, ws, provider);
        try {
          const branch = `trick/${freshId("t")}`;
          await c.tools.gitCheckout({ workspaceId: ws, branch, create: true });
          const a: TrickArena = { t, c, ws, provider, real: s.url, evil: decoy.repoUrl(evilRepo), decoy, mark: (n) => `${markers.dir}/${n}`, sh: (cmd, env) => sh(c, ws, cmd, env) };
          await trick.arm(a);

          // The trick is live: the agent's own git follows it, but for what a container's git hardening stops.
          await trick.control(a);
          const live = provider === "local" ? trick.markers : trick.markers.filter((m) => !(trick.hardened ?? []).includes(m));
          t.deepEqual(await markersIn(c, ws, provider, markers.dir), [...live].sort(), "control: the agent's own git ran every command the trick names that nothing hardens");
          await sh(c, ws, `rm -f ${markers.dir}/*`);
          if (provider === "local") for (const n of readdirSync(markers.dir)) await rm(path.join(markers.dir, n), { force: true });
          t.deepEqual(await markersIn(c, ws, provider, markers.dir), []);

          // The tools, with the trick in place.
          const responses: unknown[] = [];
          await c.tools.writeFile({ workspaceId: ws, path: "trick.txt", content: `${trick.name}\n` });
          responses.push(await c.tools.gitStatus({ workspaceId: ws }));
          responses.push(await c.tools.gitDiff({ workspaceId: ws }));
          responses.push(await c.tools.gitDiff({ workspaceId: ws, ref: "HEAD" }));
          const commit = await c.tools.gitCommit({ workspaceId: ws, message: `trick: ${trick.name}`, files: ["trick.txt"] });
          responses.push(commit);
          responses.push(await c.tools.gitCheckout({ workspaceId: ws, branch: `${branch}-side`, create: true }));
          responses.push(await c.tools.gitCheckout({ workspaceId: ws, branch }));
          responses.push(await c.tools.gitStatus({ workspaceId: ws }));
          const pushed = await c.tools.gitPush({ workspaceId: ws });
          responses.push(pushed);

          // The push reached the real repository; nothing reached the decoy; nothing ran.
          t.deepEqual([pushed.branch, pushed.commit, pushed.repositoryUrl], [branch, commit.commit, s.url]);
          t.is(remoteTip(s.bare, branch), commit.commit, "the repository's branch moved to the commit");
          t.deepEqual(requestsFor(decoy, evilRepo, s.repo).map((r) => `${r.method} ${r.path} auth=${r.authorization !== undefined}`), [], "requests the decoy got");
          assertTokenOnlyToRealRepos(t, git, TOKEN, s.repo);
          t.deepEqual(await markersIn(c, ws, provider, markers.dir), [], "markers: commands of the trick that ran during the tool calls");
          if (provider === "local") for (const n of trick.markers) t.false(existsSync(a.mark(n)), n);
          t.false(transcript(responses).includes(TOKEN), "the token in a response");
        } finally {
          await markers.cleanup();
          await c.workspaces.endSession({ id: s.sessionId }).catch(() => undefined);
        }
      });
    });
  }

  test(`${provider}: a forged refs/remotes/origin/<branch> does not hide a commit changing .env from the sensitive-file check`, async (t) => {
    await lane(t, provider, async () => {
      const { git } = t.context;
      const s = await repoSession(t, provider, { baseBranch: "env-change" });
      const { c, ws } = s;
      try {
        // A clean first push: the server's mirror now knows the branch.
        await c.tools.gitCheckout({ workspaceId: ws, branch: "leak", create: true });
        await c.tools.writeFile({ workspaceId: ws, path: "clean.txt", content: "clean\n" });
        const clean = await c.tools.gitCommit({ workspaceId: ws, message: "clean", files: ["clean.txt"] });
        await c.tools.gitPush({ workspaceId: ws });
        t.is(remoteTip(s.bare, "leak"), clean.commit);
        const pushesBefore = requestsFor(git, `/${s.repo}.git/git-receive-pack`).length;

        // The .env change, committed with the agent's own git, then hidden: every remote-tracking
        // ref says the repository already has it.
        // Built with plumbing: in a container the worktree's .env is sealed, the history is not.
        await sh(c, ws, "git reset -q --soft $(git commit-tree -p HEAD -m 'harmless, honestly' $(git rev-parse 'origin/env-change^{tree}'))", IDENTITY);
        t.regex(await sh(c, ws, "git show --stat --format= HEAD"), /\.env/, "the commit changes .env");
        await sh(c, ws, "for r in leak main env-change HEAD; do git update-ref refs/remotes/origin/$r HEAD; done");
        const status = await c.tools.gitStatus({ workspaceId: ws });
        t.is(status.ahead, 0, "the forgery works for the agent's git: nothing to push");

        const { detail } = await expectError(t, c.tools.gitPush({ workspaceId: ws }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
        t.is(detail.metadata.path, ".env");
        await expectError(t, c.tools.gitPush({ workspaceId: ws, branch: "leak" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
        t.is(remoteTip(s.bare, "leak"), clean.commit, "the repository's branch did not move");
        t.is(requestsFor(git, `/${s.repo}.git/git-receive-pack`).length, pushesBefore, "no push request reached the repository");
        t.is(remoteGit(s.bare, "show", "leak:.env"), "SECRET=repo-secret-value", "the repository's .env is unchanged on the branch");
      } finally {
        await c.workspaces.endSession({ id: s.sessionId }).catch(() => undefined);
      }
    });
  });

  test(`${provider}: a merge commit that changes .env by itself (an evil merge) is refused with SENSITIVE_FILE`, async (t) => {
    await lane(t, provider, async () => {
      const { git } = t.context;
      const s = await repoSession(t, provider, { baseBranch: "env-change" });
      const { c, ws } = s;
      try {
        await c.tools.gitCheckout({ workspaceId: ws, branch: "evil-merge", create: true });
        // Two harmless parents; the merge commit alone takes .env from the repository's
        // env-change branch (a checkout of one path, no redirection).
        await sh(c, ws, [
          "set -e",
          "git switch -q -c side",
          "git commit -q --allow-empty -m side",
          "git switch -q evil-merge",
          "git commit -q --allow-empty -m own",
          // The policy refuses a command naming .env; a name computed at run time it lets through.
          // The merge is built with plumbing: in a container the worktree's .env is sealed.
          'n=env; e=$(git rev-parse "origin/env-change:.$n")',
          'export GIT_INDEX_FILE=.git/evil-index; git read-tree HEAD; git update-index --add --cacheinfo "100644,$e,.$n"; t=$(git write-tree); unset GIT_INDEX_FILE',
          "git reset -q --soft $(git commit-tree -p HEAD -p side -m 'merge side' $t)",
        ].join("\n"), IDENTITY);
        t.regex(await sh(c, ws, "git diff --name-only HEAD^1 HEAD"), /^\.env$/m, "the merge commit changes .env against its first parent");
        t.regex(await sh(c, ws, "git diff --name-only HEAD^2 HEAD"), /^\.env$/m, "and against its second parent");
        t.is(await sh(c, ws, "git log --format= --name-only --no-renames origin/main..HEAD"), "", "git log lists no file for these commits");

        const push = c.tools.gitPush({ workspaceId: ws });
        const result = await outcome(push);
        const tip = remoteTip(s.bare, "evil-merge");
        if (result === "ok") t.log(`GitPush answered ${transcript(await push)}`);
        if (tip !== undefined) t.log(`the repository's evil-merge is ${tip}; its .env reads ${JSON.stringify(remoteGit(s.bare, "show", "evil-merge:.env"))} (main's: ${JSON.stringify(remoteGit(s.bare, "show", "main:.env"))})`);
        t.is(result, "SENSITIVE_FILE", "the push of the evil merge");
        t.is(tip, undefined, "the branch did not reach the repository");
        t.deepEqual(requestsFor(git, `/${s.repo}.git/git-receive-pack`).map((r) => r.method), [], "no push request reached the repository");
      } finally {
        await c.workspaces.endSession({ id: s.sessionId }).catch(() => undefined);
      }
    });
  });

  test(`${provider}: a branch whose history exceeds the push size limit is RESOURCE_EXHAUSTED and nothing is pushed`, async (t) => {
    await lane(t, provider, async () => {
      const { git, dir } = t.context;
      // A server of its own: AGENT_WORKSPACE_CLONE_MAX_BYTES bounds clones and pushes alike.
      const small = await startServer({
        env: { AGENT_WORKSPACE_GIT_CREDENTIALS: await credentialsFile(await mkdtemp(path.join(dir, "small-")), { [new URL(git.url).host]: TOKEN }), AGENT_WORKSPACE_CLONE_MAX_BYTES: "256K" },
      });
      try {
        const s = await repoSession(t, provider, { server: small });
        const { c, ws } = s;
        await c.tools.gitCheckout({ workspaceId: ws, branch: "big", create: true });
        // 2 MiB that no compression shrinks, in two commits.
        await sh(c, ws, "head -c 1048576 /dev/urandom > big1.bin && head -c 1048576 /dev/urandom > big2.bin");
        await c.tools.gitCommit({ workspaceId: ws, message: "big 1", files: ["big1.bin"] });
        await c.tools.gitCommit({ workspaceId: ws, message: "big 2", files: ["big2.bin"] });
        const { detail } = await expectError(t, c.tools.gitPush({ workspaceId: ws }), Code.ResourceExhausted, ErrorReason.RESOURCE_EXHAUSTED);
        t.is(detail.metadata.limit_bytes, String(256 * 1024));
        t.is(remoteTip(s.bare, "big"), undefined, "nothing was pushed");
        t.deepEqual(requestsFor(git, `/${s.repo}.git/git-receive-pack`).map((r) => r.method), [], "no push request reached the repository");
        // The workspace is still usable: a small branch from main pushes.
        await c.tools.gitCheckout({ workspaceId: ws, branch: "main" });
        await c.tools.gitCheckout({ workspaceId: ws, branch: "small", create: true });
        await c.tools.writeFile({ workspaceId: ws, path: "small.txt", content: "small\n" });
        const small1 = await c.tools.gitCommit({ workspaceId: ws, message: "small", files: ["small.txt"] });
        await c.tools.gitPush({ workspaceId: ws });
        t.is(remoteTip(s.bare, "small"), small1.commit);
      } finally {
        await small.close();
      }
    });
  });

  test(`${provider}: pushing a branch that does not exist is REVISION_NOT_FOUND; a name that reads as an option is INVALID_ARGUMENT before anything runs`, async (t) => {
    await lane(t, provider, async () => {
      const { git } = t.context;
      const s = await repoSession(t, provider);
      const { c, ws } = s;
      const markers = await markerDir(c, ws, provider);
      try {
        const before = requestsFor(git, `/${s.repo}.git`).length;
        const { detail } = await expectError(t, c.tools.gitPush({ workspaceId: ws, branch: "does-not-exist" }), Code.NotFound, ErrorReason.REVISION_NOT_FOUND);
        t.is(detail.metadata.branch, "does-not-exist");
        const m = `${markers.dir}/option`;
        for (const bad of [`--upload-pack=touch\${IFS}${m}`, `--receive-pack=touch\${IFS}${m}`, `--exec=touch\${IFS}${m}`, "-f", "--force", "--mirror", "-o", "--all"]) {
          const { detail: d } = await expectError(t, c.tools.gitPush({ workspaceId: ws, branch: bad }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
          t.is(d.metadata.field, "branch", bad);
        }
        t.is(requestsFor(git, `/${s.repo}.git`).length, before, "no request reached the repository");
        t.deepEqual(await markersIn(c, ws, provider, markers.dir), [], "markers");
        const audit = await auditOf(c, ws);
        t.true(audit.filter((e) => e.request.action === "push").length >= 9, "every refused push is in the audit trail");
      } finally {
        await markers.cleanup();
        await c.workspaces.endSession({ id: s.sessionId }).catch(() => undefined);
      }
    });
  });

  test(`${provider}: protected branches of the agent type: release/1 is PROTECTED_BRANCH with rule release/*, feature/x pushes`, async (t) => {
    await lane(t, provider, async () => {
      const { git } = t.context;
      const s = await repoSession(t, provider, { protectedBranches: ["release/*"] });
      const { c, ws } = s;
      try {
        await c.tools.gitCheckout({ workspaceId: ws, branch: "release/1", create: true });
        await c.tools.writeFile({ workspaceId: ws, path: "r.txt", content: "release\n" });
        const commit = await c.tools.gitCommit({ workspaceId: ws, message: "release", files: ["r.txt"] });
        const { detail } = await expectError(t, c.tools.gitPush({ workspaceId: ws }), Code.PermissionDenied, ErrorReason.PROTECTED_BRANCH);
        t.deepEqual({ ...detail.metadata }, { branch: "release/1", rule: "release/*" });
        await expectError(t, c.tools.gitPush({ workspaceId: ws, branch: "release/1" }), Code.PermissionDenied, ErrorReason.PROTECTED_BRANCH);
        t.is(remoteTip(s.bare, "release/1"), undefined, "release/1 is not in the repository");
        t.deepEqual(requestsFor(git, `/${s.repo}.git/git-receive-pack`).map((r) => r.method), [], "no push request reached the repository");

        await c.tools.gitCheckout({ workspaceId: ws, branch: "feature/x", create: true });
        const pushed = await c.tools.gitPush({ workspaceId: ws });
        t.deepEqual([pushed.branch, pushed.commit, pushed.created], ["feature/x", commit.commit, true]);
        t.is(remoteTip(s.bare, "feature/x"), commit.commit);
      } finally {
        await c.workspaces.endSession({ id: s.sessionId }).catch(() => undefined);
      }
    });
  });
}
