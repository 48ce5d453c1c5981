/**
 * The command policy against everyday work. Every command of the corpus (test/fixtures/commands/:
 * git, npm/pnpm/yarn, pip/pytest, make, go, cargo, text pipelines, heredocs, loops, functions,
 * redirections, subshells, arithmetic) is allowed by the default policy (no agent type: the
 * server's deny list and sensitive files) and by a typical allowlist with `git push` denied,
 * checked in-process on the policy object the server builds for each (commandPolicyOf); the
 * commands of the corpus that are safe to run in an empty workspace then go through the real
 * server, in a workspace of each kind. And the false refusals the corpus was built to catch, each
 * run through the server on `local`, where it must run and exit 0.
 */
import { createServer, type Server } from "node:net";
import { ConnectError } from "@connectrpc/connect";
import type { ExecutionContext } from "ava";
import { commandPolicyOf } from "../server/security/command-policy.ts";
import { type CorpusEntry, loadCorpus, TYPICAL_POLICY } from "./fixtures/commands/corpus.ts";
import { type ClientSet, errorDetail, LOCAL_ONLY, newWorkspace, serverTest } from "./helpers/server.ts";

const test = serverTest({ env: LOCAL_ONLY });

const AGENT_TYPE = "corpus-typical";
const corpus = loadCorpus();
const POLICIES = {
  "no agent type": commandPolicyOf(undefined),
  "typical allowlist": commandPolicyOf({ id: AGENT_TYPE, tools: ["bash"], defaultTimeoutMs: 0, maxTimeoutMs: 0, commandPolicy: TYPICAL_POLICY }),
};

/** The two workspaces of the file: one without an agent type, one of the typical allowlist. */
let workspaces: Promise<{ plain: string; typical: string }> | undefined;
function workspacesOf(c: ClientSet) {
  workspaces ??= (async () => {
    await c.config.createAgentType({ agentType: { id: AGENT_TYPE, workspace: { enabled: true, tools: ["bash", "read", "write", "list"], commandPolicy: TYPICAL_POLICY } } });
    return { plain: await newWorkspace(c, { provider: "local" }), typical: (await c.workspaces.createWorkspace({ provider: "local", agentType: AGENT_TYPE })).workspace?.id as string };
  })();
  return workspaces;
}

/** Runs `command` through the server; a refusal fails the test with its metadata. */
async function run(t: ExecutionContext<unknown>, c: ClientSet, workspaceId: string, command: string) {
  try {
    return await c.tools.bash({ workspaceId, command, timeoutMs: 20_000n });
  } catch (err) {
    const e = ConnectError.from(err);
    t.fail(`refused: ${JSON.stringify(command)}: ${e.rawMessage} ${JSON.stringify(errorDetail(e)?.metadata ?? {})}`);
    throw err;
  }
}

const where = (e: CorpusEntry) => `${e.file}:${e.line}`;

test("the corpus holds at least 500 everyday commands, in every category the issue names", (t) => {
  t.true(corpus.length >= 500, `${corpus.length} entries`);
  const text = corpus.map((e) => e.command).join("\n");
  for (const [category, re] of Object.entries({
    git: /^git /m, npm: /^npm /m, pnpm: /^pnpm /m, yarn: /^yarn /m, pip: /^pip /m, pytest: /^pytest /m, make: /^make/m, go: /^go /m, cargo: /^cargo /m,
    sed: /\bsed /, awk: /\bawk /, grep: /\bgrep /, find: /^find /m, xargs: /\| xargs /, heredoc: /<<'?EOF/, loop: /^for .* do /m, while: /^while /m,
    function: /^\w+\(\) \{/m, redirection: /2>&1/, subshell: /^\(cd /m, arithmetic: /\$\(\(/,
  })) {
    t.regex(text, re, `the corpus has ${category} commands`);
  }
});

for (const [name, policy] of Object.entries(POLICIES)) {
  test(`every command of the corpus is allowed with ${name} (in-process, the server's policy object)`, async (t) => {
    const refused: string[] = [];
    for (const e of corpus) {
      const r = await policy.check(e.command);
      if (r !== undefined) refused.push(`${where(e)}: ${JSON.stringify(e.command)}\n    why=${r.why} rule=${JSON.stringify(r.rule)} command=${JSON.stringify(r.command)}\n    ${r.message}`);
    }
    if (refused.length > 0) t.log(`refused ${refused.length} of ${corpus.length}:\n${refused.join("\n")}`);
    t.is(refused.length, 0);
  });
}

/**
 * Entries safe to run in an empty workspace: no network, no package manager, nothing long-lived
 * or in the background, nothing that deletes. They exit as they will (their files are missing);
 * the server must not refuse them.
 */
const SAFE = /^(?:git (?:status|log|diff|show|branch|rev-parse|ls-files|grep|blame)\b|cat |head |wc |ls\b|grep |sed -n |awk |sort |uniq |cut |tr |echo |printf |test |\[ |for f in |if |case |jq |diff |basename |dirname |date |seq |pwd$|true$|false |mkdir -p |touch |x=|i=|name=|arr=|let |\(\( )/;

test("the corpus's commands that are safe to run go through the real server in both workspaces and are not refused", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await workspacesOf(c);
  const sample = corpus.filter((e) => SAFE.test(e.command) && !/[&]\s*$|&\s|sleep|curl|kill|tail -f|-delete|rm /.test(e.command));
  t.true(sample.length >= 100, `${sample.length} entries run`);
  for (const e of sample) {
    // A limit per command, not for the whole run: hundreds of calls on a machine the rest of the
    // suite loads took longer than any total limit (over 300 s at a load of 35 on 2 cores, 10 s alone).
    t.timeout(60_000, `no answer for ${where(e)}: ${JSON.stringify(e.command)}`);
    for (const id of [ws.plain, ws.typical]) await run(t, c, id, e.command);
  }
});

// ── The false refusals the issue measured, each run for real ──────────────────────────────────

test("false refusal fixed: a sed script with a bracket expression and a {m,n} interval is a script, not a path under .ssh", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await workspacesOf(c);
  for (const id of [ws.plain, ws.typical]) {
    await run(t, c, id, "printf 'name=value\\nother_key=2\\n' > config.ini");
    const r = await run(t, c, id, "sed -nE 's/^([^=]{0,40})=.*/\\1/p' config.ini");
    t.is(r.exitCode, 0, r.stderr);
    t.is(r.stdout, "name\nother_key\n");
    t.is((await run(t, c, id, "sed -n 's/^([^=]{0,40}).*/\\1/p' config.ini >/dev/null 2>&1; echo ran")).stdout, "ran\n");
  }
});

test("false refusal fixed: redirections with <> (exec 3<>/dev/tcp/host/port, cat <>f) parse and run", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await workspacesOf(c);
  const received: string[] = [];
  const server: Server = createServer((socket) => socket.on("data", (d) => received.push(d.toString())));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  try {
    for (const id of [ws.plain, ws.typical]) {
      const tcp = await run(t, c, id, `exec 3<>/dev/tcp/127.0.0.1/${port} && echo ping >&3 && exec 3>&-`);
      t.is(tcp.exitCode, 0, tcp.stderr);
      const file = await run(t, c, id, "printf 'hi\\n' > rw.txt && cat <>rw.txt && exec 4<> rw.txt && exec 4<&-");
      t.is(file.exitCode, 0, file.stderr);
      t.is(file.stdout, "hi\n");
    }
    for (let i = 0; i < 100 && received.join("") !== "ping\nping\n"; i++) await new Promise((r) => setTimeout(r, 20));
    t.is(received.join(""), "ping\nping\n");
  } finally {
    server.close();
  }
});

test("false refusal fixed: a recursive shell function is not a fork bomb unless a call does not wait", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await workspacesOf(c);
  for (const id of [ws.plain, ws.typical]) {
    const r = await run(t, c, id, "f(){ [ $1 -gt 0 ] && { echo $1; f $(($1-1)); }; }; f 3; echo done");
    t.is(r.exitCode, 0, r.stderr);
    t.is(r.stdout, "3\n2\n1\ndone\n");
    const walk = await run(t, c, id, 'mkdir -p w/a/b && walk() { for d in "$1"/*; do [ -d "$d" ] && { echo "$d"; walk "$d"; }; done; return 0; }; walk w');
    t.is(walk.stdout, "w/a\nw/a/b\n");
  }
});

test("false refusal fixed: cat /proc/[0-9]*/comm is a glob over /proc, not a sensitive path", async (t) => {
  const c = t.context.server.clients.grpc;
  const ws = await workspacesOf(c);
  for (const id of [ws.plain, ws.typical]) {
    const r = await run(t, c, id, "cat /proc/[0-9]*/comm 2>/dev/null | grep -c .");
    t.is(r.exitCode, 0, r.stderr);
    t.true(Number(r.stdout.trim()) > 0, r.stdout);
  }
});
