/**
 * The command line for people, run as a user runs it: `bin/agent-workspace.js` as a child process
 * against a real server on a real socket, with an operator key in AGENT_WORKSPACE_API_KEY. Each
 * test reads what a person would see (stdout, stderr, the exit status) and checks the server's state
 * through the API where the CLI claims to have changed it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { ROOT } from "./helpers/process.ts";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { LOCAL_ONLY, startServer, type TestServer } from "./helpers/server.ts";
import { credentialsFile, eventually } from "./helpers/sessions.ts";

const KEY = "cli-operator-key-0123456789abcdef";
const GIT_TOKEN = "cli-git-token-0123456789abcdef";

interface Ctx {
  server: TestServer;
  git: GitServer;
  dir: string;
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  t.context.dir = await mkdtemp(path.join(tmpdir(), "aw-cli-"));
  t.context.git = await startGitServer({ token: GIT_TOKEN });
  await t.context.git.createRepo("app", { branches: { main: { "README.md": "the app\n", "src/index.ts": "export const x = 1;\n" } } });
  const credentials = await credentialsFile(t.context.dir, { [new URL(t.context.git.url).host]: GIT_TOKEN });
  t.context.server = await startServer({ apiKeys: [KEY], env: { ...LOCAL_ONLY, AGENT_WORKSPACE_GIT_CREDENTIALS: credentials } });
});
test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(t: { context: Ctx }, args: string[], env: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, ["--liftoff-only", path.join(ROOT, "bin/agent-workspace.js"), ...args], {
    cwd: t.context.dir,
    env: { PATH: process.env.PATH ?? "", AGENT_WORKSPACE_URL: t.context.server.url, AGENT_WORKSPACE_API_KEY: KEY, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
}

function collect(child: ChildProcess, stdin = ""): Promise<Run> {
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
  // A command may stop reading its input early (write refusing too much): not the test's failure.
  child.stdin?.on("error", () => undefined);
  child.stdin?.end(stdin);
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

function cli(t: { context: Ctx }, args: string[], options: { env?: Record<string, string>; stdin?: string } = {}): Promise<Run> {
  return collect(start(t, args, options.env), options.stdin);
}

/** Resolves when `child` has printed `text` on stdout. */
function printed(child: ChildProcess, text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = "";
    child.stdout?.on("data", (d: Buffer) => {
      seen += d.toString("utf8");
      if (seen.includes(text)) resolve();
    });
    child.on("close", () => reject(new Error(`exited before printing ${JSON.stringify(text)}; printed ${JSON.stringify(seen)}`)));
  });
}

async function newWorkspace(t: { context: Ctx }): Promise<string> {
  const r = await cli(t, ["ws", "create", "--label", "suite=cli"]);
  if (r.code !== 0) throw new Error(r.stderr);
  return r.stdout.trim();
}

test("ws create, ls, show and rm manage workspaces; --json prints the API's JSON", async (t) => {
  const created = await cli(t, ["ws", "create", "--provider", "local", "--label", "team=docs", "--json"]);
  t.is(created.code, 0, created.stderr);
  const ws = JSON.parse(created.stdout) as { id: string; provider: string; status: string; labels: Record<string, string> };
  t.regex(ws.id, /^ws-/);
  t.is(ws.provider, "local");
  t.is(ws.status, "WORKSPACE_STATUS_READY");
  t.deepEqual(ws.labels, { team: "docs" });

  const listed = await cli(t, ["ws", "ls", "--label", "team=docs"]);
  t.is(listed.code, 0);
  const lines = listed.stdout.trim().split("\n");
  t.regex(lines[0], /^ID\s+PROVIDER\s+STATUS\s+AGENT TYPE\s+CREATED\s+LABELS$/);
  t.is(lines.length, 2);
  t.regex(lines[1], new RegExp(`^${ws.id}\\s+local\\s+ready\\s+-\\s+\\S+ \\S+\\s+team=docs$`));

  const shown = await cli(t, ["ws", "show", ws.id]);
  t.regex(shown.stdout, /^id:\s+ws-/m);
  t.regex(shown.stdout, /^root:\s+\/workspace$/m);

  const removed = await cli(t, ["ws", "rm", ws.id]);
  t.is(removed.code, 0);
  t.is(removed.stdout, `deleted ${ws.id}\n`);
  const gone = await cli(t, ["ws", "show", ws.id]);
  t.is(gone.code, 1);
  t.is(gone.stdout, "");
  t.regex(gone.stderr, /^agent-workspace: WORKSPACE_NOT_FOUND: .*; list workspaces with 'agent-workspace ws ls'\n$/);
});

test("exec streams stdout and stderr apart, exits with the command's status, and quotes several words", async (t) => {
  const ws = await newWorkspace(t);
  const r = await cli(t, ["exec", ws, "--", "echo out; echo err >&2; exit 3"]);
  t.is(r.code, 3);
  t.is(r.stdout, "out\n");
  t.is(r.stderr, "err\n");

  const words = await cli(t, ["exec", ws, "--", "printf", "[%s]\\n", "a b", "c'd", "$HOME"]);
  t.is(words.code, 0, words.stderr);
  t.is(words.stdout, "[a b]\n[c'd]\n[$HOME]\n");

  const killed = await cli(t, ["exec", ws, "--", "kill -TERM $$"]);
  t.is(killed.code, 128 + 15);

  const slow = await cli(t, ["exec", ws, "--timeout", "1s", "--", "sleep 30"]);
  t.is(slow.code, 124);
  t.regex(slow.stderr, /the command timed out after \d+ ms and was killed/);

  const none = await cli(t, ["exec", ws]);
  t.is(none.code, 2);
  t.regex(none.stderr, /no command; put it after --/);
});

test("exec prints output while the command runs, and Ctrl-C cancels the call and kills the command", async (t) => {
  const ws = await newWorkspace(t);
  const child = start(t, ["exec", ws, "--", "echo $$ > pid; echo first; exec sleep 120"]);
  const done = collect(child);
  await printed(child, "first\n");
  child.kill("SIGINT");
  const r = await done;
  t.is(r.code, 130);
  t.regex(r.stderr, /cancelled; the command was killed/);
  const gone = await eventually(async () => {
    const check = await cli(t, ["exec", ws, "--", "kill -0 $(cat pid) 2>/dev/null && echo alive || echo gone"]);
    return check.stdout === "gone\n" ? check : undefined;
  }, 15_000, "the cancelled command to be killed");
  t.is(gone.code, 0);
});

test("write from stdin, read, edit and grep; a failed edit is one line naming the reason and what to do", async (t) => {
  const ws = await newWorkspace(t);
  const written = await cli(t, ["write", ws, "src/a.txt"], { stdin: "alpha é\nbeta\nalpha\n" });
  t.is(written.code, 0, written.stderr);
  t.is(written.stdout, "created src/a.txt (20 bytes)\n");

  const read = await cli(t, ["read", ws, "src/a.txt"]);
  t.is(read.stdout, "1: alpha é\n2: beta\n3: alpha\n");

  const ambiguous = await cli(t, ["edit", ws, "src/a.txt", "--old", "alpha", "--new", "gamma"]);
  t.is(ambiguous.code, 1);
  t.regex(ambiguous.stderr, /^agent-workspace: FIND_NOT_UNIQUE: .*\(.*path: src\/a\.txt.*\); add surrounding lines to --old so it matches once, or pass --all\n$/);

  const edited = await cli(t, ["edit", ws, "src/a.txt", "--old", "alpha", "--new", "gamma", "--all"]);
  t.regex(edited.stdout, /^edited src\/a\.txt: 2 replacements, \d+ lines changed\n$/);

  const found = await cli(t, ["grep", ws, "gam+a", "--glob", "*.txt"]);
  t.is(found.code, 0);
  t.is(found.stdout, "src/a.txt:1:gamma é\nsrc/a.txt:3:gamma\n");
  const nothing = await cli(t, ["grep", ws, "nowhere-to-be-found"]);
  t.is(nothing.code, 1);
  t.is(nothing.stdout, "");

  // More than one WriteFile may carry: refused before anything is sent, and nothing is written.
  const huge = await cli(t, ["write", ws, "huge.txt"], { stdin: "x".repeat(33 * 1024 * 1024) });
  t.is(huge.code, 2);
  t.regex(huge.stderr, /standard input is larger than the \d+ bytes one WriteFile may carry; nothing was written/);
  t.is((await cli(t, ["read", ws, "huge.txt"])).code, 1);

  const missing = await cli(t, ["read", ws, "nope.txt"]);
  t.is(missing.code, 1);
  t.regex(missing.stderr, /^agent-workspace: FILE_NOT_FOUND: .*\(path: nope\.txt\); check the path/);

  const json = await cli(t, ["read", ws, "nope.txt", "--json"]);
  t.is(json.code, 1);
  t.like(JSON.parse(json.stderr), { error: { code: "NotFound", reason: "FILE_NOT_FOUND", metadata: { path: "nope.txt" } } });
});

test("config agent-types apply creates then leaves unchanged; get prints a document apply takes back; session start shows provisioning and end ends it", async (t) => {
  const file = path.join(t.context.dir, "types.yaml");
  await writeFile(
    file,
    [
      "agent_types:",
      "  - id: cli-coder",
      "    display_name: CLI coder",
      "    workspace:",
      "      enabled: true",
      "      provider: local",
      "      tools: [bash, read]",
      '      command_policy: { default_action: deny, allow: ["echo", "cat"] }',
      '      setup_commands: ["echo preparing the workspace"]',
      "",
    ].join("\n"),
  );
  const applied = await cli(t, ["config", "agent-types", "apply", file]);
  t.is(applied.code, 0, applied.stderr);
  t.is(applied.stdout, "created cli-coder (revision 1)\n");
  t.is((await cli(t, ["config", "agent-types", "apply", file])).stdout, "unchanged cli-coder (revision 1)\n");

  const got = await cli(t, ["config", "agent-types", "get", "cli-coder"]);
  t.regex(got.stdout, /^agent_types:\n  - id: cli-coder\n/);
  const roundTrip = path.join(t.context.dir, "got.yaml");
  await writeFile(roundTrip, got.stdout.replace("CLI coder", "CLI coder 2"));
  t.is((await cli(t, ["config", "agent-types", "apply", roundTrip])).stdout, "updated cli-coder (revision 2)\n");

  const listed = await cli(t, ["config", "agent-types", "ls"]);
  t.regex(listed.stdout, /^cli-coder\s+CLI coder 2\s+yes\s+local\s+bash,read\s+2$/m);

  const bad = path.join(t.context.dir, "bad.yaml");
  await writeFile(bad, "agent_types:\n  - id: x\n    workspace: { colour: blue }\n");
  const refused = await cli(t, ["config", "agent-types", "apply", bad]);
  t.is(refused.code, 2);
  t.regex(refused.stderr, /bad\.yaml, entry 1 \('x'\): .*colour/);

  const started = await cli(t, ["session", "start", "--agent-type", "cli-coder"]);
  t.is(started.code, 0, started.stderr);
  const [id, status, , workspace] = started.stdout.trim().split(" ");
  t.regex(id, /^sess-/);
  t.is(status, "active");
  t.regex(workspace, /^ws-/);
  t.regex(started.stderr, /▶ setup_command echo preparing the workspace\n.*│ preparing the workspace\n.*✔ setup_command/s);
  t.regex(started.stderr, /active\n$/);

  const sessions = await cli(t, ["session", "ls", "--agent-type", "cli-coder", "--status", "active"]);
  t.regex(sessions.stdout, new RegExp(`^${id}\\s+cli-coder\\s+active\\s+${workspace}`, "m"));

  // The session's own token: WS '-' is its workspace, and its agent type's policy applies.
  const json = await cli(t, ["session", "start", "--agent-type", "cli-coder", "--json"]);
  const { session, session_token: token } = JSON.parse(json.stdout) as { session: { id: string }; session_token: string };
  t.truthy(token);
  const agent = { AGENT_WORKSPACE_API_KEY: "", AGENT_WORKSPACE_SESSION_TOKEN: token };
  t.is((await cli(t, ["exec", "-", "--", "echo hi from the session"], { env: agent })).stdout, "hi from the session\n");
  const denied = await cli(t, ["exec", "-", "--", "rm -rf src"], { env: agent });
  t.is(denied.code, 1);
  t.regex(denied.stderr, /^agent-workspace: COMMAND_NOT_ALLOWED: .*; the agent type's command policy refuses this command/);
  const noTool = await cli(t, ["write", "-", "x.txt"], { env: agent, stdin: "x" });
  t.regex(noTool.stderr, /^agent-workspace: TOOL_NOT_ENABLED: /);
  t.false(`${denied.stderr}${noTool.stderr}`.includes(token));

  t.is((await cli(t, ["session", "post", "-", "all done", "--summary"], { env: agent })).stdout, `posted summary to ${session.id}\n`);
  t.is((await cli(t, ["session", "post", id, "a note from the operator"])).stdout, `posted note to ${id}\n`);
  for (const s of [id, session.id]) {
    const ended = await cli(t, ["session", "end", s]);
    t.is(ended.stdout, `${s} ended\n`);
  }
  t.regex((await cli(t, ["exec", "-", "--", "echo x"], { env: agent })).stderr, /^agent-workspace: UNAUTHENTICATED: /);
});

test("session start with a repository shows the clone as it happens, and the workspace holds the checkout", async (t) => {
  const file = path.join(t.context.dir, "repo-type.json");
  await writeFile(file, JSON.stringify([{ id: "cli-repo", workspace: { enabled: true, provider: "local", tools: ["bash", "read"], repo_source: { type: "task_context" } } }]));
  t.is((await cli(t, ["config", "agent-types", "apply", file])).code, 0);
  const started = await cli(t, ["session", "start", "--agent-type", "cli-repo", "--repo", t.context.git.repoUrl("app"), "--branch", "main"]);
  t.is(started.code, 0, started.stderr);
  t.regex(started.stderr, new RegExp(`▶ clone ${t.context.git.repoUrl("app").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
  // git's final state of its progress line, once ("Receiving objects: 100% (5/5), 310 bytes | …, done.").
  t.regex(started.stderr, /│ Receiving objects: 100% \(\d+\/\d+\)[^\n]*done\.\n.*✔ clone \(\d+ ms\)/s);
  t.notRegex(started.stderr, /Receiving objects: +\d+% \(\d+\/\d+\)\n/);
  t.false(started.stderr.includes(GIT_TOKEN));
  const [id, status, , workspace] = started.stdout.trim().split(" ");
  t.is(status, "active");
  t.is((await cli(t, ["read", workspace, "src/index.ts"])).stdout, "1: export const x = 1;\n");
  t.is((await cli(t, ["exec", workspace, "--", "git log --format=%s -1 >/dev/null && git branch --show-current"])).stdout, "main\n");
  t.is((await cli(t, ["session", "end", id])).code, 0);
});

test("audit ls lists the calls and audit tail follows them live until Ctrl-C", async (t) => {
  const ws = await newWorkspace(t);
  const tail = start(t, ["audit", "tail", "--workspace", ws]);
  const tailed = collect(tail);
  await new Promise<void>((resolve) => tail.stderr?.on("data", (d: Buffer) => d.toString().includes("following") && resolve()));
  await cli(t, ["exec", ws, "--", "echo audited"]);
  await cli(t, ["read", ws, "missing.txt"]);
  const listed = await eventually(async () => {
    const r = await cli(t, ["audit", "ls", "--workspace", ws]);
    return r.stdout.includes("FILE_NOT_FOUND") ? r : undefined;
  }, 10_000, "the audit records");
  t.regex(listed.stdout, /^\S+ \S+\s+read\s+ReadFile\s+error FILE_NOT_FOUND\s+ws-\S+\s+-\s+\d+ms\s+missing\.txt$/m);
  t.regex(listed.stdout, /^\S+ \S+\s+bash\s+StreamBash\s+ok\s+ws-\S+\s+-\s+\d+ms\s+echo audited$/m);
  const denied = await cli(t, ["audit", "ls", "--workspace", ws, "--outcome", "error", "--json"]);
  const events = denied.stdout.trim().split("\n").map((l) => JSON.parse(l) as { tool: string; reason: string });
  t.deepEqual(events.map((e) => [e.tool, e.reason]), [["read", "ERROR_REASON_FILE_NOT_FOUND"]]);

  tail.kill("SIGINT");
  const r = await tailed;
  t.is(r.code, 0);
  t.regex(r.stdout, /✔ bash StreamBash\s+ws-\S+\s+ok exit 0/);
  t.regex(r.stdout, /✘ read ReadFile\s+ws-\S+\s+error FILE_NOT_FOUND/);
});

test("failures print one line and a status: no server, no key, a wrong key (never echoed), unknown commands", async (t) => {
  const down = await cli(t, ["ws", "ls", "--server", "http://127.0.0.1:9"]);
  t.is(down.code, 1);
  t.regex(down.stderr, /^agent-workspace: UNAVAILABLE: cannot reach the server at http:\/\/127\.0\.0\.1:9 .*start one with 'npx agent-workspace serve', or set --server \/ AGENT_WORKSPACE_URL\n$/);

  const anonymous = await cli(t, ["ws", "ls"], { env: { AGENT_WORKSPACE_API_KEY: "" } });
  t.is(anonymous.code, 1);
  t.regex(anonymous.stderr, /^agent-workspace: UNAUTHENTICATED: .*; set AGENT_WORKSPACE_API_KEY to an operator key/);
  const wrongKey = "wrong-key-that-must-not-be-printed";
  const wrong = await cli(t, ["ws", "ls", "--json"], { env: { AGENT_WORKSPACE_API_KEY: wrongKey } });
  t.is(wrong.code, 1);
  t.like(JSON.parse(wrong.stderr), { error: { code: "Unauthenticated" } });
  t.false(`${wrong.stdout}${wrong.stderr}`.includes(wrongKey));

  const unknown = await cli(t, ["frobnicate"]);
  t.is(unknown.code, 2);
  t.regex(unknown.stderr, /unknown command 'frobnicate'/);
  const group = await cli(t, ["ws"]);
  t.is(group.code, 2);
  t.regex(group.stderr, /'ws' needs one of: create, ls, show, rm/);
  const badOption = await cli(t, ["ws", "ls", "--colour"]);
  t.is(badOption.code, 2);
  t.regex(badOption.stderr, /Unknown option '--colour'/);
  const help = await cli(t, ["exec", "--help"]);
  t.is(help.code, 0);
  t.regex(help.stdout, /^usage: agent-workspace exec WS/);
  const leading = await cli(t, ["--server", t.context.server.url, "ws", "ls", "--label", "suite=none"]);
  t.is(leading.stdout, "no workspaces\n");
});
