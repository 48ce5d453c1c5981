/**
 * The red-team suite of issue 12, on every provider: one test per family of attacks, each attack
 * refused with its exact code, reason and metadata, each paired with an allowed look-alike that
 * must still work, and every refused script proven to have run nothing (it would have written a
 * marker file first; the marker is absent afterwards).
 *
 * Attacks on the command policy run in a workspace made for an agent type with an allowlist
 * (ConfigService, CreateWorkspace(agent_type)) and, where the server's own lists apply, in one
 * without an agent type. Attacks on paths and sensitive files go through the file tools. Two
 * property-based tests (fast-check) close the gaps between named attacks: generated paths against
 * the jail (local provider), generated scripts against the policy (the module itself, hundreds of
 * runs). One server serves the whole file; the last hook checks that it survived.
 *
 * Bypasses found while writing this suite stay at the end as tests of their own ("closed bypass"),
 * each naming the input and what it must get, so none can come back unnoticed.
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import fc from "fast-check";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { CommandPolicy } from "../server/security/command-policy.ts";
import { gate, microvmGate, probeEngines } from "./helpers/engines.ts";
import {
  absent,
  AGENT_TYPE,
  ALLOW,
  allowed,
  type Arena,
  buildArena,
  createRedTeamAgentType,
  DENY,
  type Expected,
  lanes,
  leaks,
  marker,
  outcome,
  refused,
  SECRET,
  sh,
  inspect,
  shellQuote,
  transcript,
} from "./helpers/red-team.ts";
import { type ClientSet, errorDetail, expectError, startServer, type TestServer } from "./helpers/server.ts";
import { flipperScript } from "./helpers/flipper.ts";

interface Ctx {
  server: TestServer;
}
const test = anyTest as TestFn<Ctx>;
const engines = await probeEngines();
const PROVIDERS = ["local", ...(["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "red-team suite")), ...((microvmGate(test, "red-team suite")) ? ["microvm"] : [])];

const lane = lanes();
/**
 * A test's limit, counted from its turn: a hang guard, not a measurement. Under a loaded CI run
 * (load 15–25 on 2 cores) tests of this file took 1m45–2m15 of the 3 minutes they used to have,
 * and went past them when the machine was busier still.
 */
const RED_TEAM_BUDGET_MS = 300_000;
/** How long a test may wait for its provider's arena (made once, in `before`): a hang guard. */
const ARENA_WAIT_MS = 15 * 60_000;
const arenas = new Map<string, Promise<Arena>>();
/** Host paths to remove at the end (local's outside directories live on the host). */
const hostLeftovers = new Set<string>();

function arenaOf(t: ExecutionContext<Ctx>, provider: string): Promise<Arena> {
  let a = arenas.get(provider);
  if (a === undefined) {
    a = buildArena(t.context.server.clients.grpc, provider, t.context.server.dataDir).then((arena) => {
      if (provider === "local") hostLeftovers.add(arena.outside);
      return arena;
    });
    arenas.set(provider, a);
  }
  return a;
}

test.before(async (t) => {
  t.context.server = await startServer();
  await createRedTeamAgentType(t.context.server.clients.grpc);
  // Every provider's arena is made now, outside any test's time limit: a VM's (its allowlist's
  // prepared root filesystem and templates included) can take minutes on a loaded machine.
  for (const provider of PROVIDERS) void arenaOf(t, provider).catch(() => undefined);
});

test.after.always("the server survived the whole suite: it answers, the suite's workspaces still work, a fresh workspace works on every provider", async (t) => {
  const server = t.context.server;
  try {
    if (server === undefined) return;
    const c = server.clients.grpc;
    for (const [provider, pending] of arenas) {
      const arena = await pending.catch(() => undefined);
      if (arena === undefined) continue;
      t.is((await c.tools.bash({ workspaceId: arena.plain, command: "echo still" })).stdout, "still\n", `${provider}: the plain workspace`);
      t.is((await c.tools.bash({ workspaceId: arena.agent, command: "echo still" })).stdout, "still\n", `${provider}: the agent type's workspace`);
    }
    for (const provider of PROVIDERS) {
      const { workspace } = await c.workspaces.createWorkspace({ provider });
      const id = workspace?.id as string;
      await c.tools.writeFile({ workspaceId: id, path: "after.txt", content: "after\n" });
      t.is((await c.tools.readFile({ workspaceId: id, path: "after.txt" })).content, "1: after", `${provider}: a fresh workspace reads`);
      t.is((await c.tools.bash({ workspaceId: id, command: "cat after.txt" })).stdout, "after\n", `${provider}: a fresh workspace runs`);
      await c.workspaces.deleteWorkspace({ id });
    }
    t.is((await c.config.getAgentType({ id: AGENT_TYPE })).agentType?.id, AGENT_TYPE);
  } finally {
    await server?.close();
    for (const p of hostLeftovers) await rm(p, { recursive: true, force: true });
  }
});

/** Asserts SENSITIVE_FILE with exactly this metadata, and that the refusal reveals no secret. */
async function sensitive(t: ExecutionContext<Ctx>, call: Promise<unknown>, meta: { path: string; rule: string; list: "deny" | "write_protected" }): Promise<void> {
  const { error, detail } = await expectError(t, call, Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
  t.deepEqual({ ...detail.metadata }, meta, error.rawMessage);
  t.false(leaks(transcript(error)), `the refusal reveals a secret: ${error.rawMessage}`);
}

/** Asserts PATH_OUTSIDE_WORKSPACE and that nothing outside leaked into the error. */
async function outsideWs(t: ExecutionContext<Ctx>, call: Promise<unknown>, what: string): Promise<void> {
  let caught: unknown;
  try {
    await call;
  } catch (err) {
    caught = err;
  }
  if (caught === undefined) {
    t.fail(`${what}: succeeded, expected PATH_OUTSIDE_WORKSPACE`);
    return;
  }
  const e = ConnectError.from(caught);
  t.is(Code[e.code], Code[Code.PermissionDenied], `${what}: ${e.rawMessage}`);
  t.is(ErrorReason[errorDetail(e)?.reason ?? 0], "PATH_OUTSIDE_WORKSPACE", `${what}: ${e.rawMessage}`);
  t.false(leaks(transcript(e)), `${what}: the error carries a secret`);
}

/** The reason of a failed call, asserting it is `reason` (with a readable message). */
async function reasonIs(t: ExecutionContext<Ctx>, call: Promise<unknown>, reason: string, what: string): Promise<void> {
  t.is(await outcome(call), reason, what);
}

const guard = (m: string) => `echo ran > ${m}; `;

for (const provider of PROVIDERS) {
  /** Registers one attack family for this provider, run in the provider's lane. */
  const family = (title: string, fn: (t: ExecutionContext<Ctx>, a: Arena, c: ClientSet) => Promise<void>) =>
    test(`${provider}: ${title}`, async (t) => {
      // The arena is awaited before the test's budget starts: a VM's, made at load 20+, took longer
      // than the first microvm test's whole budget (its timeout was the wait, not the attack).
      t.timeout(ARENA_WAIT_MS);
      const arena = await arenaOf(t, provider);
      await lane(t, provider, async () => fn(t, arena, t.context.server.clients.grpc), RED_TEAM_BUDGET_MS);
    });

  /**
   * A family the command policy's parser decides before anything runs, the same code on every
   * provider: not repeated on microvm, whose every command costs an emulated VM's time. What the
   * guest's kernel enforces under an allowlist there is enforcement.test.ts's, on microvm too.
   */
  const parserFamily: typeof family = (title, fn) => (provider === "microvm" ? undefined : family(title, fn));

  // ── Paths ──────────────────────────────────────────────────────────────────────────────────

  family("traversal: '..' and absolute paths elsewhere are PATH_OUTSIDE_WORKSPACE through every tool; paths that come back inside work", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    for (const p of ["..", "../x.txt", "../../etc/passwd", "a/../../etc/passwd", "sub/../../notes.txt", "/etc/passwd", "/", "/workspace/../etc/passwd", "/workspace/sub/../../etc"]) {
      const { detail } = await expectError(t, c.tools.readFile({ ...ws, path: p }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
      t.is(detail.metadata.path, p);
    }
    const escape = `escape-${randomBytes(4).toString("hex")}.txt`;
    const up = `../${escape}`;
    await outsideWs(t, c.tools.writeFile({ ...ws, path: up, content: "x" }), "write");
    await outsideWs(t, c.tools.editFile({ ...ws, path: up, oldString: "a", newString: "b" }), "edit");
    await outsideWs(t, c.tools.patchFile({ ...ws, path: up, patches: [{ find: "a", replace: "b" }] }), "patch");
    await outsideWs(t, c.tools.deleteFile({ ...ws, path: "../notes.txt" }), "delete");
    await outsideWs(t, c.tools.listFiles({ ...ws, path: ".." }), "list");
    await outsideWs(t, c.tools.glob({ ...ws, pattern: "*", path: "../" }), "glob");
    await outsideWs(t, c.tools.grep({ ...ws, pattern: "root", path: "/etc" }), "grep");
    await outsideWs(t, c.tools.bash({ ...ws, command: "pwd", workdir: ".." }), "bash workdir");
    // Patterns of the listing tools cannot climb either.
    for (const pattern of ["../*", "/etc/*", "**/../../*", "sub/../../*", "/workspace/../*"]) {
      await reasonIs(t, c.tools.glob({ ...ws, pattern }), "INVALID_PATTERN", `glob ${pattern}`);
      await reasonIs(t, c.tools.listFiles({ ...ws, path: "", pattern }), "INVALID_PATTERN", `list ${pattern}`);
    }
    for (const r of [await c.tools.glob({ ...ws, pattern: "{..,sub}/*" }), await c.tools.grep({ ...ws, pattern: "root", glob: "../*" })]) {
      t.false(transcript(r).includes("root:x:0:0") || transcript(r).includes('"../'), transcript(r).slice(0, 300));
    }
    // Nothing was written above the root.
    t.is((await sh(c, a.plain, `ls -A .. | grep -c ${escape} || true`)).trim(), "0");

    // Look-alikes: '..' that stays inside, /workspace paths, names that merely start with dots.
    t.regex((await c.tools.readFile({ ...ws, path: "sub/../notes.txt" })).content, /in notes/);
    t.regex((await c.tools.readFile({ ...ws, path: "/workspace/sub/../notes.txt" })).content, /in notes/);
    t.regex((await c.tools.readFile({ ...ws, path: "./sub//inner.txt" })).content, /inside sub/);
    await c.tools.writeFile({ ...ws, path: "..dots..", content: "dots\n" });
    t.is((await c.tools.readFile({ ...ws, path: "/workspace/..dots.." })).content, "1: dots");
    t.is(await sh(c, a.plain, "cat ./..dots.."), "dots\n");
    t.is((await c.tools.bash({ ...ws, command: "pwd -P", workdir: "sub/.." })).stdout.trim(), a.root);
  });

  family("prefix bypass: /workspace_evil, /workspace/../workspace_evil and links to a sibling named like the root are outside; a directory called workspace_evil inside works", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    for (const p of ["/workspace_evil/x.txt", "/workspace/../workspace_evil/x.txt", "/workspace_evil", "/workspacex", "/workspace-other/x.txt", "/workspace/../workspace/notes.txt"]) {
      await outsideWs(t, c.tools.readFile({ ...ws, path: p }), `read ${p}`);
      await outsideWs(t, c.tools.writeFile({ ...ws, path: p === "/workspace_evil" ? "/workspace_evil/new.txt" : p, content: "x" }), `write ${p}`);
    }
    // Links whose targets share the root's prefix: absolute in the /workspace view, relative, and
    // (on local, where the root is a host path) the host sibling `<root>_evil` with a secret in it.
    const links = ["ln -sfn /workspace_evil/x.txt evil-abs", "ln -sfn ../workspace_evil evil-rel"];
    if (provider === "local") {
      hostLeftovers.add(`${a.root}_evil`);
      await sh(c, a.plain, `mkdir -p '${a.root}_evil' && printf '${SECRET.outside}\\n' > '${a.root}_evil/x.txt'`);
      links.push(`ln -sfn '${a.root}_evil' evil-host`, `ln -sfn '${a.root}_evil/x.txt' evil-host-file`);
    }
    await sh(c, a.plain, links.join(" && "));
    await outsideWs(t, c.tools.readFile({ ...ws, path: "evil-abs" }), "link to /workspace_evil/x.txt");
    await outsideWs(t, c.tools.readFile({ ...ws, path: "evil-rel/x.txt" }), "link to ../workspace_evil");
    await outsideWs(t, c.tools.writeFile({ ...ws, path: "evil-rel/new.txt", content: "x" }), "write through ../workspace_evil");
    if (provider === "local") {
      await outsideWs(t, c.tools.readFile({ ...ws, path: "evil-host/x.txt" }), "link to <root>_evil");
      await outsideWs(t, c.tools.readFile({ ...ws, path: "evil-host-file" }), "link to <root>_evil/x.txt");
      await outsideWs(t, c.tools.writeFile({ ...ws, path: "evil-host/new.txt", content: "x" }), "write through <root>_evil");
      await outsideWs(t, c.tools.grep({ ...ws, pattern: "SECRET", path: "evil-host" }), "grep through <root>_evil");
      t.deepEqual((await readdir(`${a.root}_evil`)).sort(), ["x.txt"], "nothing was written into the sibling");
    }
    // Look-alikes: the name inside the workspace, directly and through a link that stays inside.
    t.is((await c.tools.readFile({ ...ws, path: "/workspace/workspace_evil/x.txt" })).content, "1: inside evil-named dir");
    await sh(c, a.plain, "ln -sfn /workspace/workspace_evil in-evil");
    t.is((await c.tools.readFile({ ...ws, path: "in-evil/x.txt" })).content, "1: inside evil-named dir");
    await c.tools.writeFile({ ...ws, path: "workspace_evil/new.txt", content: "new\n" });
    t.is(await sh(c, a.plain, "cat workspace_evil/new.txt"), "new\n");
  });

  family("symlinks: a file link, a parent-directory link, dangling links and loops leave nothing readable or writable outside; links that stay inside work", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    const o = a.outside;
    await sh(
      c,
      a.plain,
      [
        `ln -sfn ${o}/secret.txt out-file`,
        `ln -sfn ${o} out-dir`,
        `ln -sfn ${o}/missing.txt out-dangling`,
        "ln -sfn missing-inside.txt in-dangling",
        "ln -sfn loop-b loop-a",
        "ln -sfn loop-a loop-b",
        "ln -sfn self-loop self-loop",
        "ln -sfn notes.txt in-file",
        "ln -sfn /workspace/sub in-abs",
        "ln -sfn ../notes.txt sub/up-file",
      ].join(" && "),
    );
    // A link to a file outside.
    await outsideWs(t, c.tools.readFile({ ...ws, path: "out-file" }), "read out-file");
    await outsideWs(t, c.tools.writeFile({ ...ws, path: "out-file", content: "pwned" }), "write out-file");
    await outsideWs(t, c.tools.editFile({ ...ws, path: "out-file", oldString: "SECRET", newString: "pwned" }), "edit out-file");
    await outsideWs(t, c.tools.patchFile({ ...ws, path: "out-file", patches: [{ find: "SECRET", replace: "pwned" }] }), "patch out-file");
    await outsideWs(t, c.tools.grep({ ...ws, pattern: "SECRET", path: "out-file" }), "grep out-file");
    // A link to a directory outside, as a parent.
    await outsideWs(t, c.tools.readFile({ ...ws, path: "out-dir/secret.txt" }), "read out-dir/secret.txt");
    await outsideWs(t, c.tools.readFile({ ...ws, path: "out-dir" }), "read out-dir");
    await outsideWs(t, c.tools.writeFile({ ...ws, path: "out-dir/new.txt", content: "pwned" }), "write out-dir/new.txt");
    await outsideWs(t, c.tools.writeFile({ ...ws, path: "out-dir/deep/new.txt", content: "pwned" }), "write out-dir/deep/new.txt");
    await outsideWs(t, c.tools.deleteFile({ ...ws, path: "out-dir/secret.txt" }), "delete out-dir/secret.txt");
    await outsideWs(t, c.tools.listFiles({ ...ws, path: "out-dir" }), "list out-dir");
    await outsideWs(t, c.tools.glob({ ...ws, pattern: "**/*", path: "out-dir" }), "glob out-dir");
    await outsideWs(t, c.tools.grep({ ...ws, pattern: "SECRET", path: "out-dir" }), "grep out-dir");
    await outsideWs(t, c.tools.bash({ ...ws, command: "cat secret.txt", workdir: "out-dir" }), "bash in out-dir");
    // Dangling links: out of the workspace is refused whether or not the target exists.
    await outsideWs(t, c.tools.readFile({ ...ws, path: "out-dangling" }), "read out-dangling");
    await outsideWs(t, c.tools.writeFile({ ...ws, path: "out-dangling", content: "pwned" }), "write out-dangling");
    // Loops: INVALID_ARGUMENT, never a hang.
    await reasonIs(t, c.tools.readFile({ ...ws, path: "loop-a" }), "INVALID_ARGUMENT", "read loop-a");
    await reasonIs(t, c.tools.writeFile({ ...ws, path: "loop-b", content: "x" }), "INVALID_ARGUMENT", "write loop-b");
    await reasonIs(t, c.tools.readFile({ ...ws, path: "self-loop/x" }), "INVALID_ARGUMENT", "read self-loop/x");
    // A tool-wide sweep through the workspace lists names, never what lies behind links out.
    const swept = transcript(await c.tools.grep({ ...ws, pattern: "SECRET_OUTSIDE" }));
    t.false(swept.includes(SECRET.outside), "grep over the workspace followed a link out");
    // Outside is untouched.
    t.is(await sh(c, a.plain, `test ! -e ${o}/new.txt && test ! -e ${o}/deep && test ! -e ${o}/missing.txt && cat ${o}/secret.txt`), `${SECRET.outside}\n`);

    // Look-alikes: links that stay inside; a dangling link inside creates its target; deleting a
    // link to outside removes the link, never the target.
    t.regex((await c.tools.readFile({ ...ws, path: "in-file" })).content, /in notes/);
    t.is((await c.tools.readFile({ ...ws, path: "in-abs/inner.txt" })).content, "1: inside sub");
    t.regex((await c.tools.readFile({ ...ws, path: "sub/up-file" })).content, /in notes/);
    await c.tools.writeFile({ ...ws, path: "in-dangling", content: "made\n" });
    t.is((await c.tools.readFile({ ...ws, path: "missing-inside.txt" })).content, "1: made");
    await c.tools.deleteFile({ ...ws, path: "out-file" });
    t.is(await sh(c, a.plain, `test ! -e out-file && cat ${o}/secret.txt`), `${SECRET.outside}\n`);
  });

  family("symlink race: a directory flipped between a real directory, a link to .ssh and a link outside never yields a secret, and nothing lands in .ssh or outside", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    const o = a.outside;
    await sh(c, a.plain, [`mkdir -p race/real && printf 'inside race\\n' > race/real/x.txt`, `printf '${SECRET.outside}\\n' > ${o}/x.txt`, 'd=../.ssh; ln -sfn "$d" race/to-ssh', `ln -sfn ${o} race/to-out`].join(" && "));
    // .ssh is sealed in containers (root's): the secret goes in, and is looked at, from outside the policy.
    await inspect(a, a.plain, `printf '${SECRET.key}\\n' > .ssh/x.txt`);
    const before = await inspect(a, a.plain, `ls -A .ssh ${o}`);
    await c.tools.writeFile({
      ...ws,
      path: "race/flip.cjs",
      content: flipperScript(300),
    });
    const node = provider === "local" ? process.execPath : "/opt/agent-workspace/node";
    // A hang guard only: the flipper stops when race/stop appears (a loaded VM runs the 360 operations slowly).
    const flipper = c.tools.streamBash({ ...ws, command: `exec ${node} race/flip.cjs race/real race/to-ssh race/to-out`, timeoutMs: 600_000n })[Symbol.asyncIterator]();
    let said = "";
    while (!said.includes("flipping")) {
      const ev = await flipper.next();
      if (ev.done) throw new Error(`the flipper ended before flipping: ${said}`);
      if (ev.value.event.case === "stdout" || ev.value.event.case === "stderr") said += new TextDecoder().decode(ev.value.event.value);
    }
    const ended = (async () => {
      for (let ev = await flipper.next(); !ev.done; ev = await flipper.next()) {
        if (ev.value.event.case === "stdout" || ev.value.event.case === "stderr") said += new TextDecoder().decode(ev.value.event.value);
      }
      return said;
    })();
    const ops: Array<(i: number) => Promise<unknown>> = [
      () => c.tools.readFile({ ...ws, path: "race/d/x.txt" }),
      () => c.tools.grep({ ...ws, pattern: "SECRET|inside", path: "race/d" }),
      () => c.tools.grep({ ...ws, pattern: ".", path: "race/d/x.txt" }),
      (i) => c.tools.writeFile({ ...ws, path: `race/d/w-${i}.txt`, content: "written\n" }),
      (i) => c.tools.editFile({ ...ws, path: "race/d/x.txt", oldString: i % 2 ? "inside" : "INSIDE", newString: i % 2 ? "INSIDE" : "inside" }),
      () => c.tools.patchFile({ ...ws, path: "race/d/x.txt", patches: [{ find: "SECRET", replace: "pwned" }] }),
    ];
    const seen = new Map<string, number>();
    const leaked: string[] = [];
    let next = 0;
    // An emulated VM runs each operation slowly: fewer there, the same flips against them.
    const total = provider === "microvm" ? 120 : 360;
    const worker = async () => {
      for (let i = next++; i < total; i = next++) {
        let text: string;
        let result: string;
        try {
          text = transcript(await ops[i % ops.length](i));
          result = "ok";
        } catch (err) {
          const e = ConnectError.from(err);
          text = transcript(e);
          result = ErrorReason[errorDetail(e)?.reason ?? 0];
        }
        seen.set(`op${i % ops.length} ${result}`, (seen.get(`op${i % ops.length} ${result}`) ?? 0) + 1);
        if (leaks(text)) leaked.push(text.slice(0, 300));
      }
    };
    try {
      await Promise.all(Array.from({ length: 6 }, worker));
    } finally {
      await c.tools.writeFile({ ...ws, path: "race/stop", content: "" });
      await ended;
    }
    t.log(`${provider}: ${said.trim().split("\n").at(-1)}; outcomes ${[...seen].sort().map(([k, v]) => `${k}=${v}`).join(" ")}`);
    t.deepEqual(leaked, [], "a secret appeared in a response");
    t.is(await inspect(a, a.plain, `ls -A .ssh ${o}`), before, "something was written into .ssh or outside");
    t.true(Number(/flips (\d+)/.exec(said)?.[1] ?? 0) > 20, said);
    // The race was live: reads met the real directory and met a link.
    const sum = (re: RegExp) => [...seen].filter(([k]) => re.test(k)).reduce((n, [, v]) => n + v, 0);
    t.true(sum(/^op[0-2] ok$/) > 0, "no read went through the real directory");
    t.true(sum(/^op[0-5] (SENSITIVE_FILE|PATH_OUTSIDE_WORKSPACE)$/) > 0, "no operation met a link");
    // ACCESS_DENIED: the kernel refused a file a container sealed (executor/seal.ts); PATH_CHANGED: a swap met mid-call.
    for (const [k] of seen) t.regex(k, / (ok|SENSITIVE_FILE|PATH_OUTSIDE_WORKSPACE|FILE_NOT_FOUND|FIND_NOT_FOUND|NOT_A_DIRECTORY|IS_DIRECTORY|WORKSPACE_NOT_READY|ACCESS_DENIED|PATH_CHANGED)$/);
  });

  family("encodings: %2e%2e and full-width dots are names inside the workspace, NUL is refused, and .env spelled with trailing dots, spaces, capitals or full-width letters is still .env", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    // Not decoded: no such directory, so nothing is found (and nothing outside is read).
    for (const p of ["%2e%2e/%2e%2e/etc/passwd", "..%2f..%2fetc%2fpasswd", "%2E%2E/notes.txt", "．．/．．/etc/passwd", "\u2025/etc/passwd", "..%c0%af../etc/passwd"]) {
      await reasonIs(t, c.tools.readFile({ ...ws, path: p }), "FILE_NOT_FOUND", `read ${JSON.stringify(p)}`);
    }
    // NUL bytes never reach the filesystem.
    for (const p of ["notes.txt\0../../etc/passwd", "a\0b", "\0", ".env\0.example"]) {
      const { detail } = await expectError(t, c.tools.readFile({ ...ws, path: p }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
      t.is(detail.metadata.path, p.replace(/\0/g, "\\x00"));
      await expectError(t, c.tools.writeFile({ ...ws, path: p, content: "x" }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE);
    }
    // .env in other spellings: refused by name (whether or not such a file exists), read and write.
    const spellings: Array<[string, string]> = [
      [".env.", ".env."],
      [".env ", ".env "],
      [".env. .", ".env. ."],
      [".ENV", ".ENV"],
      [".Env.", ".Env."],
      ["．env", "．env"],
      ["．ｅｎｖ", "．ｅｎｖ"],
      ["./.env", ".env"],
      ["sub/../.env", ".env"],
      ["/workspace//.env", ".env"],
      [".env/", ".env"],
      ["/workspace/./sub/../.env", ".env"],
    ];
    for (const [p, rel] of spellings) {
      await sensitive(t, c.tools.readFile({ ...ws, path: p }), { path: rel, rule: ".env", list: "deny" });
      await sensitive(t, c.tools.writeFile({ ...ws, path: p, content: "pwned" }), { path: rel, rule: ".env", list: "deny" });
    }
    await sensitive(t, c.tools.writeFile({ ...ws, path: ".ENV.LOCAL.", content: "x" }), { path: ".ENV.LOCAL.", rule: ".env.*", list: "deny" });
    await absent(t, c, a.plain, [...spellings.map(([, rel]) => rel).filter((rel) => rel !== ".env"), ".ENV.LOCAL."]);
    t.is(await inspect(a, a.plain, "cat .env"), `API_KEY=${SECRET.env}\n`, ".env is unchanged");

    // Look-alikes: encoded names are ordinary names inside the workspace.
    await c.tools.writeFile({ ...ws, path: "%2e%2e/enc.txt", content: "pct\n" });
    await c.tools.writeFile({ ...ws, path: "．．/fw.txt", content: "fw\n" });
    t.is((await c.tools.readFile({ ...ws, path: "/workspace/%2e%2e/enc.txt" })).content, "1: pct");
    t.is((await c.tools.readFile({ ...ws, path: "．．/fw.txt" })).content, "1: fw");
    t.is(await sh(c, a.plain, "cat ./%2e%2e/enc.txt ./．．/fw.txt"), "pct\nfw\n");
    t.is((await sh(c, a.plain, "ls -A .. | grep -c -e enc.txt -e fw.txt || true")).trim(), "0", "nothing landed above the root");
    t.is((await c.tools.readFile({ ...ws, path: ".env.example" })).content, "1: API_KEY=placeholder");
    await c.tools.writeFile({ ...ws, path: ".environment.md", content: "not an env file\n" });
    t.is((await c.tools.readFile({ ...ws, path: ".environment.md" })).content, "1: not an env file");
  });

  // ── Sensitive files through the tools ──────────────────────────────────────────────────────

  family("sensitive files through every tool: read, write, edit, patch, delete and grep's path refuse them with SENSITIVE_FILE; templates and look-alike names work", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    const denied: Array<[string, string]> = [
      [".env", ".env"],
      [".env.production", ".env.*"],
      [".ssh/id_ed25519", "id_ed25519*"],
      ["config/server.pem", "*.pem"],
      ["deploy.key", "*.key"],
      ["id_rsa", "id_rsa*"],
    ];
    for (const [p, rule] of denied) {
      const meta = { path: p, rule, list: "deny" as const };
      await sensitive(t, c.tools.readFile({ ...ws, path: p }), meta);
      await sensitive(t, c.tools.writeFile({ ...ws, path: p, content: "pwned" }), meta);
      await sensitive(t, c.tools.editFile({ ...ws, path: p, oldString: "API_KEY", newString: "pwned" }), meta);
      await sensitive(t, c.tools.patchFile({ ...ws, path: p, patches: [{ find: "SECRET", replace: "pwned" }] }), meta);
      await sensitive(t, c.tools.deleteFile({ ...ws, path: p }), meta);
      await sensitive(t, c.tools.grep({ ...ws, pattern: "API_KEY|SECRET|TOKEN", path: p }), meta);
    }
    // Names that do not exist are refused the same way: no tool tells whether a secret is there.
    // (A missing parent directory is a known gap: see the known bypasses below.)
    for (const [p, rule] of [["config/.env.local", ".env.*"], [".npmrc", ".npmrc"], ["sub/.pypirc", ".pypirc"]]) {
      const meta = { path: p, rule, list: "deny" as const };
      await sensitive(t, c.tools.readFile({ ...ws, path: p }), meta);
      await sensitive(t, c.tools.writeFile({ ...ws, path: p, content: "x" }), meta);
      await sensitive(t, c.tools.editFile({ ...ws, path: p, oldString: "a", newString: "b" }), meta);
      await sensitive(t, c.tools.patchFile({ ...ws, path: p, patches: [{ find: "a", replace: "b" }] }), meta);
      await sensitive(t, c.tools.deleteFile({ ...ws, path: p }), meta);
      await sensitive(t, c.tools.grep({ ...ws, pattern: "a", path: p }), meta);
    }
    // Write-protected: readable, never changed.
    for (const [p, rule] of [[".git/config", ".git/**/config"], [".gitmodules", ".gitmodules"]]) {
      const meta = { path: p, rule, list: "write_protected" as const };
      await sensitive(t, c.tools.writeFile({ ...ws, path: p, content: "pwned" }), meta);
      await sensitive(t, c.tools.editFile({ ...ws, path: p, oldString: "[", newString: "pwned" }), meta);
      await sensitive(t, c.tools.patchFile({ ...ws, path: p, patches: [{ find: "[", replace: "pwned" }] }), meta);
      await sensitive(t, c.tools.deleteFile({ ...ws, path: p }), meta);
    }
    // Write-protected names that do not exist are never created; editing what is not there (it
    // would be readable if it were) may say so.
    for (const [p, rule] of [[".git/hooks/pre-commit", ".git/**/hooks/**"], [".bashrc", ".bashrc"], ["sub/.envrc", ".envrc"]]) {
      const meta = { path: p, rule, list: "write_protected" as const };
      await sensitive(t, c.tools.writeFile({ ...ws, path: p, content: "pwned" }), meta);
      await sensitive(t, c.tools.deleteFile({ ...ws, path: p }), meta);
      for (const call of [c.tools.editFile({ ...ws, path: p, oldString: "[", newString: "pwned" }), c.tools.patchFile({ ...ws, path: p, patches: [{ find: "[", replace: "pwned" }] })]) {
        t.true(["SENSITIVE_FILE", "FILE_NOT_FOUND"].includes(await outcome(call)), p);
      }
    }
    t.regex((await c.tools.readFile({ ...ws, path: ".git/config" })).content, /\[core\]/);
    t.is((await c.tools.readFile({ ...ws, path: ".gitmodules" })).content, "1: [submodule]");
    // Everything is as it was.
    t.is(await inspect(a, a.plain, "cat .env; test ! -e .git/hooks/pre-commit && test ! -e .bashrc && test ! -e sub/.envrc && test ! -e config/.env.local && test ! -e .npmrc && cat .gitmodules"), `API_KEY=${SECRET.env}\n[submodule]\n`);

    // Look-alikes: templates, and names that only resemble sensitive ones, go through every tool.
    for (const p of [".env.sample", "src/id_utils.py", "pem.md", "keys.txt", "env", "config/.envrc.md"]) {
      await c.tools.writeFile({ ...ws, path: p, content: "alpha\nbeta\n" });
      t.is((await c.tools.editFile({ ...ws, path: p, oldString: "alpha", newString: "gamma" })).replacements, 1, p);
      t.is((await c.tools.patchFile({ ...ws, path: p, patches: [{ find: "beta", replace: "delta" }] })).patchesApplied, 1, p);
      t.is((await c.tools.readFile({ ...ws, path: p })).content, "1: gamma\n2: delta", p);
      t.is((await c.tools.grep({ ...ws, pattern: "delta", path: p })).matches.length, 1, p);
      await c.tools.deleteFile({ ...ws, path: p });
    }
    t.is((await c.tools.grep({ ...ws, pattern: "placeholder", path: ".env.example" })).matches[0]?.content, "API_KEY=placeholder");
  });

  family("grep never returns content of sensitive files (server lists), while their names still appear in list, glob and directory reads", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    // The token sits in config/server.pem, deploy.key and id_rsa (sensitive) and in notes.txt (not).
    const all = await c.tools.grep({ ...ws, pattern: SECRET.token });
    t.deepEqual(all.matches.map((m) => m.path), ["notes.txt"]);
    t.false(leaks(transcript(all)));
    const ctx = await c.tools.grep({ ...ws, pattern: SECRET.token, contextLines: 2 });
    t.deepEqual(ctx.matches.map((m) => m.path), ["notes.txt"]);
    const streamed: string[] = [];
    for await (const ev of c.tools.streamGrep({ ...ws, pattern: SECRET.token })) streamed.push(transcript(ev));
    t.false(streamed.some(leaks), streamed.join("\n"));
    t.deepEqual((await c.tools.grep({ ...ws, pattern: SECRET.token, path: "config" })).matches, []);
    t.deepEqual((await c.tools.grep({ ...ws, pattern: "in (pem|key|id_rsa)", glob: "*" })).matches, []);
    t.deepEqual((await c.tools.grep({ ...ws, pattern: "TOKEN", glob: "*.pem" })).matches, []);

    // Names may appear.
    const root = (await c.tools.listFiles({ ...ws, path: "" })).files.map((f) => f.path.replace(/\/$/, ""));
    for (const n of [".env", ".env.production", ".env.example", "deploy.key", "id_rsa", ".ssh", "config"]) t.true(root.includes(n), `${n} listed`);
    t.deepEqual((await c.tools.listFiles({ ...ws, path: "", pattern: "**/*.pem" })).files.map((f) => f.path), ["config/server.pem"]);
    t.deepEqual((await c.tools.glob({ ...ws, pattern: "**/*.{pem,key}" })).paths.sort(), ["config/server.pem", "deploy.key"]);
    t.true((await c.tools.glob({ ...ws, pattern: ".env*" })).paths.includes(".env"));
    t.regex((await c.tools.readFile({ ...ws, path: ".ssh" })).content, /id_ed25519/);
    t.deepEqual((await c.tools.listFiles({ ...ws, path: ".ssh" })).files.map((f) => f.path).filter((p) => p.endsWith("id_ed25519")), [".ssh/id_ed25519"]);
  });

  family("links to sensitive files: a link to .env, a dangling link to a new .env file, a parent-directory link to .git/hooks, links to .git and .ssh", async (t, a, c) => {
    const ws = { workspaceId: a.plain };
    // The links are made with computed names: the command policy refuses a literal link to .env,
    // .git or .ssh (a new name for a protected tree is a way into it), and these attack the file tools.
    await sh(c, a.plain, ['d=.env; ln -sfn "$d" env-link', 'd=.env.staging; ln -sfn "$d" staging-link', 'd=.git/hooks; ln -sfn "$d" hooks-link', 'd=.git; ln -sfn "$d" git-link', 'd=.ssh; ln -sfn "$d" ssh-link', 'd=config/server.pem; ln -sfn "$d" notes-link.txt'].join(" && "));
    // .ssh is sealed in containers: the file inside is planted from outside the policy.
    await inspect(a, a.plain, `printf '${SECRET.key} host\\n' > .ssh/known_hosts`);
    const envMeta = { path: ".env", rule: ".env", list: "deny" as const };
    await sensitive(t, c.tools.readFile({ ...ws, path: "env-link" }), envMeta);
    await sensitive(t, c.tools.writeFile({ ...ws, path: "env-link", content: "pwned" }), envMeta);
    await sensitive(t, c.tools.editFile({ ...ws, path: "env-link", oldString: "API_KEY", newString: "pwned" }), envMeta);
    await sensitive(t, c.tools.patchFile({ ...ws, path: "env-link", patches: [{ find: "API_KEY", replace: "pwned" }] }), envMeta);
    await sensitive(t, c.tools.grep({ ...ws, pattern: "API_KEY", path: "env-link" }), envMeta);
    await sensitive(t, c.tools.readFile({ ...ws, path: "notes-link.txt" }), { path: "config/server.pem", rule: "*.pem", list: "deny" });
    await sensitive(t, c.tools.writeFile({ ...ws, path: "staging-link", content: "pwned" }), { path: ".env.staging", rule: ".env.*", list: "deny" });
    await sensitive(t, c.tools.writeFile({ ...ws, path: "hooks-link/pre-commit", content: "#!/bin/sh\ntouch pwned\n" }), { path: ".git/hooks/pre-commit", rule: ".git/**/hooks/**", list: "write_protected" });
    await sensitive(t, c.tools.writeFile({ ...ws, path: "git-link/config", content: "pwned" }), { path: ".git/config", rule: ".git/**/config", list: "write_protected" });
    // A name sensitive by itself is refused as asked; one sensitive only by its directory, once resolved.
    await sensitive(t, c.tools.readFile({ ...ws, path: "ssh-link/id_ed25519" }), { path: "ssh-link/id_ed25519", rule: "id_ed25519*", list: "deny" });
    await sensitive(t, c.tools.readFile({ ...ws, path: "ssh-link/known_hosts" }), { path: ".ssh/known_hosts", rule: ".ssh/**", list: "deny" });
    await sensitive(t, c.tools.writeFile({ ...ws, path: "ssh-link/authorized_keys", content: "ssh-ed25519 AAAA attacker" }), { path: ".ssh/authorized_keys", rule: ".ssh/**", list: "deny" });
    t.is(await inspect(a, a.plain, "cat .env; test ! -e .env.staging && test ! -e .git/hooks/pre-commit && test ! -e .ssh/authorized_keys && echo untouched"), `API_KEY=${SECRET.env}\nuntouched\n`);

    // Look-alikes: what the links reach that is not sensitive; deleting a link removes the link only.
    t.regex((await c.tools.readFile({ ...ws, path: "hooks-link/pre-commit.sample" })).content, /^1: #!\/bin\/sh/);
    t.regex((await c.tools.readFile({ ...ws, path: "git-link/HEAD" })).content, /ref: refs\/heads\//);
    t.regex((await c.tools.readFile({ ...ws, path: "git-link/config" })).content, /\[core\]/);
    t.true((await c.tools.listFiles({ ...ws, path: "" })).files.some((f) => f.path === "env-link"));
    await c.tools.deleteFile({ ...ws, path: "env-link" });
    t.is(await inspect(a, a.plain, "test ! -L env-link && cat .env"), `API_KEY=${SECRET.env}\n`);
  });

  family("the agent type's sensitive patterns add to the server's: its secrets/** are never read or grepped, its Makefile is never written", async (t, a, c) => {
    const ws = { workspaceId: a.agent };
    const meta = { path: "secrets/token.txt", rule: "secrets/**", list: "deny" as const };
    // ReadFile in a container ignores the agent type's patterns: a known bug, asserted below.
    if (provider === "local") await sensitive(t, c.tools.readFile({ ...ws, path: "secrets/token.txt" }), meta);
    await sensitive(t, c.tools.grep({ ...ws, pattern: ".", path: "secrets/token.txt" }), meta);
    await sensitive(t, c.tools.editFile({ ...ws, path: "secrets/token.txt", oldString: "SECRET", newString: "x" }), meta);
    await sensitive(t, c.tools.writeFile({ ...ws, path: "secrets/new.txt", content: "x" }), { ...meta, path: "secrets/new.txt" });
    await sensitive(t, c.tools.writeFile({ ...ws, path: "Makefile", content: "pwned:\n" }), { path: "Makefile", rule: "Makefile", list: "write_protected" });
    await sensitive(t, c.tools.deleteFile({ ...ws, path: "Makefile" }), { path: "Makefile", rule: "Makefile", list: "write_protected" });
    await sensitive(t, c.tools.readFile({ ...ws, path: ".env" }), { path: ".env", rule: ".env", list: "deny" });
    const found = await c.tools.grep({ ...ws, pattern: SECRET.agent });
    t.deepEqual(found.matches.map((m) => m.path), ["secrets.md"], "the agent type's secret was grepped");
    // Look-alikes.
    t.is((await c.tools.readFile({ ...ws, path: "Makefile" })).content, "1: all:");
    t.regex((await c.tools.readFile({ ...ws, path: "secrets.md" })).content, /look-alike/);
    t.true((await c.tools.listFiles({ ...ws, path: "secrets" })).files.some((f) => f.path === "secrets/token.txt"));
  });

  // ── The command policy ─────────────────────────────────────────────────────────────────────

  parserFamily("allowlist bypass through separators: ; && || | & newline CR and CRLF (Bash and StreamBash); the same lists of allowed commands run", async (t, a, c) => {
    const seps: Array<[string, string, string | RegExp]> = [
      [";", "; ", "a\nb\n"],
      ["&&", " && ", "a\nb\n"],
      ["||", " || ", "a\n"],
      ["|", " | ", "b\n"],
      ["&", " & ", /^(a\nb\n|b\na\n)$/],
      ["newline", "\n", "a\nb\n"],
      ["CRLF", "\r\n", /^a\r?\nb\n$/],
      ["CR", "\r", /a/],
    ];
    const made: string[] = [];
    for (const [, sep] of seps) {
      const m = marker("sep");
      const p = marker("sep-p");
      made.push(m, p);
      await refused(t, c, a.agent, `echo ran > ${m}${sep}touch ${p}`, { command: `touch ${p}`, rule: "", why: "not_in_allowlist" });
    }
    const m = marker("stream");
    made.push(m);
    const stream = async () => {
      for await (const _ of c.tools.streamBash({ workspaceId: a.agent, command: `echo ran > ${m}; touch ${m}-p` })) {
        // A refused stream sends nothing, not even its start event.
        t.fail("a refused StreamBash sent an event");
      }
    };
    const { detail } = await expectError(t, stream(), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
    t.deepEqual({ ...detail.metadata }, { command: `touch ${m}-p`, rule: "", why: "not_in_allowlist" });
    await absent(t, c, a.agent, [...made, `${m}-p`]);

    for (const [name, sep, want] of seps) {
      // `wait`: a background job's output may otherwise be cut off when the command ends.
      const r = await allowed(t, c, a.agent, `echo a${sep}echo b; wait`);
      if (typeof want === "string") t.is(r.stdout, want, name);
      else t.regex(r.stdout, want, name);
    }
    let out = "";
    for await (const ev of c.tools.streamBash({ workspaceId: a.agent, command: "echo a; ls -d . | cat" })) if (ev.event.case === "stdout") out += new TextDecoder().decode(ev.event.value);
    t.is(out, "a\n.\n");
  });

  parserFamily("allowlist bypass through nesting: subshells, groups, $( ), backticks, process substitution, heredocs, here-strings, eval, function definitions, coproc, control flow, trap", async (t, a, c) => {
    const attacks: Array<(p: string) => [string, string?]> = [
      (p) => [`(touch ${p})`],
      (p) => [`{ touch ${p}; }`],
      (p) => [`echo $(touch ${p})`],
      (p) => [`echo \`touch ${p}\``],
      (p) => [`echo "$(echo "$(touch ${p})")"`],
      (p) => [`cat <(touch ${p})`],
      (p) => [`ls > >(touch ${p})`],
      (p) => [`bash <<EOF\ntouch ${p}\nEOF`],
      (p) => [`cat <<EOF\n$(touch ${p})\nEOF`],
      (p) => [`bash <<< 'touch ${p}'`],
      (p) => [`cat <<< $(touch ${p})`],
      (p) => [`eval 'touch ${p}'`],
      (p) => [`eval "tou""ch ${p}"`, `touch ${p}`],
      (p) => [`f() { touch ${p}; }; f`],
      (p) => [`function g { touch ${p}; }`],
      (p) => [`coproc touch ${p}`, `coproc touch ${p}`],
      (p) => [`if true; then touch ${p}; fi`],
      (p) => [`for i in 1; do touch ${p}; done`],
      (p) => [`while false; do touch ${p}; done`],
      (p) => [`case x in x) touch ${p};; esac`],
      (p) => [`[[ -n $(touch ${p}) ]]`],
      (p) => [`echo \${x:-$(touch ${p})}`],
      (p) => [`trap 'touch ${p}' EXIT`],
    ];
    const made: string[] = [];
    for (const attack of attacks) {
      const m = marker("nest");
      const p = marker("nest-p");
      made.push(m, p);
      const [script, command] = attack(p);
      await refused(t, c, a.agent, `${guard(m)}${script}`, { command: command ?? `touch ${p}`, rule: "", why: "not_in_allowlist" });
    }
    await absent(t, c, a.agent, made);

    const lookAlikes: Array<[string, string]> = [
      ["(echo ok)", "ok\n"],
      ["{ echo ok; }", "ok\n"],
      ["echo $(echo ok)", "ok\n"],
      ["echo `echo ok`", "ok\n"],
      ["cat <(echo ok)", "ok\n"],
      ["cat <<EOF\nok $(echo there)\nEOF", "ok there\n"],
      ["cat <<< ok", "ok\n"],
      ["eval 'echo ok'", "ok\n"],
      ["f() { echo ok; }; f", "ok\n"],
      ["if true; then echo ok; fi", "ok\n"],
      ["case x in x) echo ok;; esac", "ok\n"],
      ["trap 'echo ok' EXIT", "ok\n"],
    ];
    for (const [script, want] of lookAlikes) t.is((await allowed(t, c, a.agent, script)).stdout, want, script);
  });

  parserFamily("allowlist bypass through wrappers: bash -c, sh -c, env (-i, -S), timeout, nice, nohup, xargs, find -exec, busybox, nested; the same wrappers around allowed commands run", async (t, a, c) => {
    const attacks: Array<(p: string) => [string, string]> = [
      (p) => [`bash -c 'touch ${p}'`, `touch ${p}`],
      (p) => [`sh -c "touch ${p}"`, `touch ${p}`],
      (p) => [`bash -x -e -c 'ls; touch ${p}'`, `touch ${p}`],
      (p) => [`env touch ${p}`, `env touch ${p}`],
      (p) => [`env -i FOO=1 touch ${p}`, `env -i FOO=1 touch ${p}`],
      (p) => [`env -S 'touch ${p}'`, `touch ${p}`],
      (p) => [`timeout 5 touch ${p}`, `timeout 5 touch ${p}`],
      (p) => [`timeout -k 1 5 touch ${p}`, `timeout -k 1 5 touch ${p}`],
      (p) => [`nice -n 5 touch ${p}`, `nice -n 5 touch ${p}`],
      (p) => [`nohup touch ${p}`, `nohup touch ${p}`],
      (p) => [`echo ${p} | xargs touch`, "xargs touch"],
      (p) => [`echo ${p} | xargs -n 1 -P 2 touch`, "xargs -n 1 -P 2 touch"],
      (p) => [`find . -maxdepth 0 -exec touch ${p} \\;`, `find . -maxdepth 0 -exec touch ${p} \\;`],
      (p) => [`find . -maxdepth 0 -execdir touch ${p} +`, `find . -maxdepth 0 -execdir touch ${p} +`],
      (p) => [`busybox touch ${p}`, `busybox touch ${p}`],
      (p) => [`timeout 5 env nice bash -c "sh -c 'touch ${p}'"`, `touch ${p}`],
      (p) => [`command touch ${p}`, `command touch ${p}`],
      (p) => [`exec touch ${p}`, `exec touch ${p}`],
    ];
    const made: string[] = [];
    for (const attack of attacks) {
      const m = marker("wrap");
      const p = marker("wrap-p");
      made.push(m, p);
      const [script, command] = attack(p);
      await refused(t, c, a.agent, `${guard(m)}${script}`, { command, rule: "", why: "not_in_allowlist" });
    }
    await absent(t, c, a.agent, made);

    const lookAlikes: Array<[string, string | RegExp]> = [
      ["bash -c 'echo ok'", "ok\n"],
      ["sh -c 'ls -d .'", ".\n"],
      ["env ls -d .", ".\n"],
      ["env -i FOO=1 echo ok", "ok\n"],
      ["env -S 'echo ok'", "ok\n"],
      ["timeout 5 ls -d .", ".\n"],
      ["nice -n 5 echo ok", "ok\n"],
      ["nohup echo ok 2>/dev/null", "ok\n"],
      ["echo . | xargs ls -d", ".\n"],
      ["find . -maxdepth 0 -exec echo found {} \\;", "found .\n"],
      ["timeout 5 env nice bash -c \"sh -c 'echo ok'\"", "ok\n"],
      ["command -v ls >/dev/null && echo ok", "ok\n"],
    ];
    for (const [script, want] of lookAlikes) {
      const r = await allowed(t, c, a.agent, script);
      if (typeof want === "string") t.is(r.stdout, want, script);
      else t.regex(r.stdout, want, script);
    }
    // busybox is not in every image: the policy lets it through, whether it exists is the image's business.
    await allowed(t, c, a.agent, "busybox echo ok", { anyExit: true });
  });

  parserFamily("restricted variables under an allowlist: PATH, LD_PRELOAD, BASH_ENV, GIT_* as prefixes, exports, declarations, env, read, ${X:=…} and the request's env; other variables work", async (t, a, c) => {
    const cases: Array<(p: string) => [string, Expected]> = [
      () => ["PATH=/tmp/evil ls", { command: "PATH=/tmp/evil", rule: "PATH", why: "restricted_variable" }],
      () => ["export PATH=/tmp/evil; ls", { command: "export PATH=/tmp/evil", rule: "PATH", why: "restricted_variable" }],
      () => ["PATH+=:/tmp/evil; ls", { command: "PATH+=:/tmp/evil", rule: "PATH", why: "restricted_variable" }],
      () => ["LD_PRELOAD=/tmp/evil.so ls", { command: "LD_PRELOAD=/tmp/evil.so", rule: "LD_PRELOAD", why: "restricted_variable" }],
      () => ["declare -x LD_LIBRARY_PATH=/tmp/evil; ls", { command: "declare -x LD_LIBRARY_PATH=/tmp/evil", rule: "LD_LIBRARY_PATH", why: "restricted_variable" }],
      () => ["BASH_ENV=/tmp/evil bash -c 'ls'", { command: "BASH_ENV=/tmp/evil", rule: "BASH_ENV", why: "restricted_variable" }],
      (p) => [`GIT_SSH_COMMAND='touch ${p}' git status`, { command: `GIT_SSH_COMMAND='touch ${p}'`, rule: "GIT_SSH_COMMAND", why: "restricted_variable" }],
      () => ["env GIT_CONFIG_GLOBAL=/tmp/evil git status", { command: "env GIT_CONFIG_GLOBAL=/tmp/evil git status", rule: "GIT_CONFIG_GLOBAL", why: "restricted_variable" }],
      () => ["local_fn() { local GIT_DIR=/tmp/evil; }; local_fn", { command: "local GIT_DIR=/tmp/evil", rule: "GIT_DIR", why: "restricted_variable" }],
      () => ["read PATH", { command: "read PATH", rule: "PATH", why: "restricted_variable" }],
      () => ["echo ${PATH:=/tmp/evil}", { command: "${PATH:=/tmp/evil}", rule: "PATH", why: "restricted_variable" }],
      () => ["declare -n ref=PATH; ref=/tmp/evil; ls", { command: "declare -n ref=PATH", rule: "PATH", why: "restricted_variable" }],
    ];
    const made: string[] = [];
    for (const kase of cases) {
      const m = marker("var");
      const p = marker("var-p");
      made.push(m, p);
      const [script, expected] = kase(p);
      await refused(t, c, a.agent, `${guard(m)}${script}`, expected);
    }
    const m = marker("var-env");
    made.push(m);
    await refused(t, c, a.agent, `echo ran > ${m}`, { command: "env PATH=…", rule: "PATH", why: "restricted_variable" }, { PATH: "/tmp/evil" });
    await refused(t, c, a.agent, `echo ran > ${m}`, { command: "env GIT_EXEC_PATH=…", rule: "GIT_EXEC_PATH", why: "restricted_variable" }, { GIT_EXEC_PATH: "/tmp/evil" });
    // LD_PRELOAD and its kin are refused for every workspace before the policy is asked.
    const { error } = await expectError(t, c.tools.bash({ workspaceId: a.agent, command: `echo ran > ${m}`, env: { LD_PRELOAD: "/tmp/evil.so" } }), Code.InvalidArgument, ErrorReason.INVALID_ARGUMENT);
    t.is(error.rawMessage, "Environment variable 'LD_PRELOAD' may not be set");
    await absent(t, c, a.agent, made);

    // Look-alikes: other names, reading the restricted ones, and the plain workspace (no allowlist).
    t.is((await allowed(t, c, a.agent, "FOO=/tmp/evil ls -d .")).stdout, ".\n");
    t.is((await allowed(t, c, a.agent, "MY_PATH=/tmp; echo $MY_PATH")).stdout, "/tmp\n");
    t.is((await allowed(t, c, a.agent, "export GREETING=hi; echo $GREETING")).stdout, "hi\n");
    t.regex((await allowed(t, c, a.agent, "GITHUB_REF=main git --version")).stdout, /^git version/);
    t.regex((await allowed(t, c, a.agent, "echo $PATH")).stdout, /\/usr\/bin/);
    t.is((await allowed(t, c, a.agent, "echo $FOO", { env: { FOO: "bar" } })).stdout, "bar\n");
    t.is((await allowed(t, c, a.plain, "PATH=/usr/bin:/bin ls -d .")).stdout, ".\n");
  });

  parserFamily("computed and disguised command names: $x args and substitutions are refused as computed; r''m, $'\\x72m', /bin/./rm, \\rm and \"rm\" are rm (allowlist and deny rules alike)", async (t, a, c) => {
    const made: string[] = [];
    const computed: Array<[string, string]> = [
      ["x=touch; $x P", "$x P"],
      ["${x:-touch} P", "${x:-touch} P"],
      ["$(echo touch) P", "$(echo touch) P"],
      ["\"$x\" P", "\"$x\" P"],
    ];
    for (const [script, command] of computed) {
      const m = marker("name");
      const p = marker("name-p");
      made.push(m, p);
      await refused(t, c, a.agent, `${guard(m)}${script.replaceAll("P", p)}`, { command: command.replaceAll("P", p), rule: "", why: "computed_at_run_time" });
    }
    // Brace expansion in the command position is beyond the grammar: refused as unparseable (fail closed).
    const m0 = marker("name");
    const p0 = marker("name-p");
    made.push(m0, p0);
    await refused(t, c, a.agent, `${guard(m0)}{touch,${p0}}`, { command: `${guard(m0)}{touch,${p0}}`, rule: "", why: "unparseable" });
    for (const spelled of ["r''m", "$'\\x72m'", "$'\\162m'", "/bin/./rm", "/usr/bin/../bin/rm", "\\rm", '"rm"', "r\\m"]) {
      const m = marker("rm");
      made.push(m);
      const { detail, error } = await expectError(t, c.tools.bash({ workspaceId: a.agent, command: `${guard(m)}${spelled} -f keep.txt` }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
      t.deepEqual({ ...detail.metadata }, { command: `${spelled} -f keep.txt`, rule: "", why: "not_in_allowlist" }, spelled);
      t.regex(error.rawMessage, /'rm' is not in the agent type's allowlist/, spelled);
    }
    for (const spelled of ["g''it pu''sh origin", "$'\\x67it' push origin", "/usr/bin/./git push origin", "\\git -C . push origin", "git -c x=y \"push\" origin"]) {
      const m = marker("push");
      made.push(m);
      await refused(t, c, a.agent, `${guard(m)}${spelled}`, { command: spelled, rule: "git push", why: "denied_by_agent_type" });
    }
    await absent(t, c, a.agent, made);
    t.is((await c.tools.readFile({ workspaceId: a.agent, path: "keep.txt" })).content, "1: keep me", "the rm spellings removed nothing");

    for (const spelled of ["l''s", "$'\\x6cs'", "/bin/./ls", "/usr/bin/ls", "\\ls", '"ls"']) t.is((await allowed(t, c, a.agent, `${spelled} -d .`)).stdout, ".\n", spelled);
    t.is((await allowed(t, c, a.agent, "x=hello; echo $x")).stdout, "hello\n");
    t.regex((await allowed(t, c, a.agent, "g''it --version")).stdout, /^git version/);
    t.is((await allowed(t, c, a.agent, "echo {a,b}")).stdout, "a b\n");
  });

  parserFamily("unparseable input is refused under every policy and nothing of it runs; the same characters quoted work", async (t, a, c) => {
    const made: string[] = [];
    for (const ws of [a.agent, a.plain]) {
      for (const bad of ["ls (", 'echo "unterminated', "if true; then ls", "ls; )", "echo $(", "case x in"]) {
        const m = marker("parse");
        made.push(m);
        const script = `${guard(m)}${bad}`;
        await refused(t, c, ws, script, { command: script, rule: "", why: "unparseable" });
      }
      await absent(t, c, ws, made);
      for (const [script, want] of [["echo '('", "(\n"], ['echo "a;b"', "a;b\n"], ["echo \\(", "(\n"], ["echo ')' 'if'", ") if\n"]] as const) {
        t.is((await allowed(t, c, ws, script)).stdout, want, script);
      }
    }
  });

  parserFamily("a 60-command chain (and a 60-stage pipeline, and a denied command in the middle) is checked to its last command; nesting past the limit is too_deep", async (t, a, c) => {
    const made: string[] = [];
    const m1 = marker("chain");
    const p1 = marker("chain-p");
    await refused(t, c, a.agent, [`echo ran > ${m1}`, ...Array(58).fill("ls -d ."), `touch ${p1}`].join("; "), { command: `touch ${p1}`, rule: "", why: "not_in_allowlist" });
    const m2 = marker("chain");
    const p2 = marker("chain-p");
    const mixed = Array.from({ length: 60 }, (_, i) => (i === 0 ? `echo ran > ${m2}` : i === 31 ? `touch ${p2}` : "echo x"));
    await refused(t, c, a.agent, mixed.join([" && ", " || ", "; ", "\n"][1]), { command: `touch ${p2}`, rule: "", why: "not_in_allowlist" });
    const m3 = marker("chain");
    const p3 = marker("chain-p");
    await refused(t, c, a.agent, [`echo ran > ${m3}`, ...Array(58).fill("cat"), `xargs touch ${p3}`].join(" | "), { command: `xargs touch ${p3}`, rule: "", why: "not_in_allowlist" });
    const m4 = marker("deep");
    const p4 = marker("deep-p");
    const deep = `${"timeout 5 ".repeat(30)}touch ${p4}`;
    // The command is shown cut at 200 characters.
    await refused(t, c, a.agent, `${guard(m4)}${deep}`, { command: `${deep.slice(0, 200)}…`, rule: "", why: "too_deep" });
    made.push(m1, p1, m2, p2, m3, p3, m4, p4);
    await absent(t, c, a.agent, made);

    // Look-alikes: the same lengths of allowed commands run in full.
    const sixty = await allowed(t, c, a.agent, Array.from({ length: 60 }, (_, i) => `echo ${i}`).join("; "));
    t.is(sixty.stdout, Array.from({ length: 60 }, (_, i) => `${i}\n`).join(""));
    t.is((await allowed(t, c, a.agent, ["echo ok", ...Array(59).fill("cat")].join(" | "))).stdout, "ok\n");
    t.is((await allowed(t, c, a.agent, `${"timeout 5 ".repeat(5)}echo ok`)).stdout, "ok\n");
  });

  family("the server's deny list, in both workspaces: rm -rf /, sudo, mount, kill -1, dd of=/dev/…, mkfs, fork-bomb functions; harmless relatives run", async (t, a, c) => {
    // Every attack is preceded by `exit 0`, so even a policy that failed could not run it; the
    // marker before the exit shows whether anything ran at all.
    const attacks: Array<[string, string, string?]> = [
      ["rm -rf /", "rm /"],
      ["rm -r -f //", "rm /"],
      ["rm -rf /workspace/..", "rm /"],
      ["rm -rf --no-preserve-root /", "rm --no-preserve-root"],
      ["rm -fr /*", "rm /\\*"],
      ["rm -rf ~", "rm ~"],
      ["sudo id", "sudo"],
      ["/usr/bin/sudo id", "sudo"],
      ["\\sudo id", "sudo"],
      ["command sudo id", "sudo"],
      ["env sudo id", "sudo"],
      ["su -c id", "su"],
      ["mount -t tmpfs none /mnt", "mount"],
      ["busybox mount -o remount,rw /", "mount"],
      ["kill -9 -1", "kill -1"],
      ["kill -KILL -1", "kill -1"],
      ["dd if=/dev/zero of=/dev/sda bs=1M", "dd of=/dev/*"],
      ["mkfs.ext4 /dev/sda1", "mkfs.*"],
      ["mkfs -t ext4 /dev/sda1", "mkfs"],
    ];
    const bombs: Array<[string, string, string]> = [
      [":(){ :|:& };:", ":(){ :|:& }", ":"],
      ["bomb() { bomb | bomb & }; bomb", "bomb() { bomb | bomb & }", "bomb"],
      ["function boom { boom & boom; }; boom", "function boom { boom & boom; }", "boom"],
    ];
    for (const ws of [a.plain, a.agent]) {
      const made: string[] = [];
      for (const [cmd, rule] of attacks) {
        const m = marker("srv");
        made.push(m);
        await refused(t, c, ws, `${guard(m)}exit 0; ${cmd}`, { command: cmd, rule, why: "denied_by_server" });
      }
      for (const [script, command, rule] of bombs) {
        const m = marker("bomb");
        made.push(m);
        await refused(t, c, ws, `${guard(m)}exit 0; ${script}`, { command, rule, why: "fork_bomb" });
      }
      await absent(t, c, ws, made);
    }
    // Look-alikes in the plain workspace: the same programs on harmless targets.
    await allowed(t, c, a.plain, "mkdir -p build/x && rm -rf build && test ! -e build");
    await allowed(t, c, a.plain, "kill -0 $$");
    t.is((await allowed(t, c, a.plain, "dd if=/dev/zero of=zeros bs=4 count=1 status=none && wc -c < zeros")).stdout.trim(), "4");
    t.is((await allowed(t, c, a.plain, "echo sudo mount mkfs 'rm -rf /'")).stdout, "sudo mount mkfs rm -rf /\n");
    t.is((await allowed(t, c, a.plain, "f() { echo once; }; f; f")).stdout, "once\nonce\n");
    t.is((await allowed(t, c, a.agent, "f() { echo once; }; g() { f; }; g")).stdout, "once\n");
    await allowed(t, c, a.plain, "ls / >/dev/null");
  });

  // Payloads of advisories published against other agent tools' command allowlists, each with the
  // allowed command it hid behind: GoClaw (first token checked, `&&` chain), cmd-line-mcp (newline
  // separator), the A2A .NET CLI agent (first token, `;`), amd/gaia (`find -exec` and find's write
  // predicates), and the `| sh` pipe the allowlist can never see through.
  parserFamily("payloads from published advisories against other agent tools' allowlists are refused in the agent type's workspace; the allowed halves alone run", async (t, a, c) => {
    const hook = ".git/hooks/pre-commit";
    const cases: Array<[string, string, Partial<Expected>, string[]]> = [
      ["goclaw: echo VULN_OK && touch P", "echo VULN_OK && touch P", { command: "touch P", why: "not_in_allowlist" }, ["P"]],
      ["cmd-line-mcp: ls + newline + touch P", "ls\ntouch P", { command: "touch P", why: "not_in_allowlist" }, ["P"]],
      ["a2a: echo a2a-safe; touch P", "echo a2a-safe; touch P", { command: "touch P", why: "not_in_allowlist" }, ["P"]],
      ["gaia: find . -exec touch P ;", "find . -maxdepth 0 -exec touch P \\;", { command: "find . -maxdepth 0 -exec touch P \\;", why: "not_in_allowlist" }, ["P"]],
      ["gaia: find -fprintf into a git hook", `find . -maxdepth 0 -fprintf ${hook} 'touch P'`, { rule: ".git/**/hooks/**", why: "sensitive_file" }, ["P"]],
      ["pipe to a shell: grep … | sh", "echo 'touch P' | grep touch | sh", { why: "computed_at_run_time" }, ["P"]],
    ];
    for (const [name, script, expected, files] of cases) {
      const m = marker("advisory");
      const p = marker("advisory-p");
      const command = `${guard(m)}${script.replaceAll("P", p)}`;
      const { detail } = await expectError(t, c.tools.bash({ workspaceId: a.agent, command }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
      const want = Object.fromEntries(Object.entries(expected).map(([k, v]) => [k, String(v).replaceAll("P", p)]));
      t.like({ ...detail.metadata }, want, name);
      await absent(t, c, a.agent, [m, ...files.map((f) => f.replaceAll("P", p))]);
    }
    t.is((await allowed(t, c, a.agent, "echo VULN_OK && ls -d .")).stdout, "VULN_OK\n.\n");
    t.is((await allowed(t, c, a.agent, "find . -maxdepth 0 -exec echo found {} \\;")).stdout, "found .\n");
  });

  parserFamily("the shell reading sensitive files is refused: cat .env, cp .env x, cat < .env, echo x > .git/hooks/pre-commit and their spellings; cat .env.example, echo .env >> .gitignore and ls -a work", async (t, a, c) => {
    const made: string[] = [];
    for (const ws of [a.plain, a.agent]) {
      const leaked = marker("leaked");
      const cases: Array<[string, string, string]> = [
        ["cat .env", "cat .env", ".env"],
        [`cp .env ${leaked}`, `cp .env ${leaked}`, ".env"],
        ["cat < .env", "cat < .env", ".env"],
        ["echo x > .git/hooks/pre-commit", "echo x > .git/hooks/pre-commit", ".git/**/hooks/**"],
        ["cat ./.env", "cat ./.env", ".env"],
        ["cat sub/../.env", "cat sub/../.env", ".env"],
        ["cat /workspace/.env", "cat /workspace/.env", ".env"],
        ["cat .ENV", "cat .ENV", ".env"],
        ["cat '.env '", "cat '.env '", ".env"],
        ["cat .e''nv", "cat .e''nv", ".env"],
        ["cat .e*", "cat .e*", ".env"],
        ["grep -r KEY .env", "grep -r KEY .env", ".env"],
        [`cat .env | xargs echo > ${leaked}`, "cat .env", ".env"],
        ["echo x >> .bashrc", "echo x >> .bashrc", ".bashrc"],
        ["cat .ssh/id_ed25519", "cat .ssh/id_ed25519", "id_ed25519*"], ["cat .ssh/config", "cat .ssh/config", ".ssh/**"],
        ["echo \"$(< .env)\"", "$(< .env)", ".env"],
        // Relative names are judged in every directory the script cds into.
        ["cd .git/hooks && echo x > pre-commit", "cd .git/hooks && echo x > pre-commit", ".git/**/hooks/**"],
        ["cd .ssh && cat config", "cat config", ".ssh/**"],
      ];
      if (ws === a.agent) {
        cases.push(["cat secrets/token.txt", "cat secrets/token.txt", "secrets/**"], ["echo pwned: > Makefile", "echo pwned: > Makefile", "Makefile"]);
      }
      made.push(leaked);
      for (const [script, command, rule] of cases) {
        const m = marker("shell-file");
        made.push(m);
        await refused(t, c, ws, `${guard(m)}${script}`, { command, rule, why: "sensitive_file" });
      }
      // And in the request's workdir.
      const w = marker("shell-file");
      made.push(w);
      const { detail } = await expectError(t, c.tools.bash({ workspaceId: ws, command: `echo ran > ../../${w}; echo x > pre-commit`, workdir: ".git/hooks" }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
      t.like({ ...detail.metadata }, { command: "echo x > pre-commit", rule: ".git/**/hooks/**", why: "sensitive_file" });
      await absent(t, c, ws, made);
      await reasonIs(t, c.tools.readFile({ workspaceId: ws, path: ".git/hooks/pre-commit" }), "FILE_NOT_FOUND", "the hook was not written");
      await reasonIs(t, c.tools.readFile({ workspaceId: ws, path: ".bashrc" }), "FILE_NOT_FOUND", ".bashrc was not written");

      // Look-alikes.
      t.is((await allowed(t, c, ws, "cat .env.example")).stdout, "API_KEY=placeholder\n");
      t.is((await allowed(t, c, ws, "echo .env >> .gitignore && cat .gitignore")).stdout.split("\n").filter((l) => l === ".env").length > 0, true);
      t.regex((await allowed(t, c, ws, "ls -a")).stdout, /^\.env$/m);
      t.regex((await allowed(t, c, ws, "cat .git/config")).stdout, /\[core\]/);
      t.is((await allowed(t, c, ws, "echo 'cat .env' && ls .env")).stdout, "cat .env\n.env\n");
      t.is((await allowed(t, c, ws, "cd .git && ls -d hooks")).stdout, "hooks\n");
    }
    t.regex((await allowed(t, c, a.agent, "cat Makefile secrets.md")).stdout, /^all:\n/);
  });

  if (provider !== "local") {
    // ExecutorFs.read (providers/executor-fs.ts) sends no `rules` with its "read" operation, unlike
    // every other operation, so in a container ReadFile applies the server's lists only: a file the
    // agent type declared sensitive is returned in full.
    test(`${provider}: closed bug: ReadFile in a container applies the agent type's sensitive patterns: secrets/token.txt under deny ["secrets/**"] is SENSITIVE_FILE, rule secrets/**`, async (t) => {
      t.timeout(ARENA_WAIT_MS);
      const a = await arenaOf(t, provider);
      await lane(t, provider, async () => {
        const c = t.context.server.clients.grpc;
        await sensitive(t, c.tools.readFile({ workspaceId: a.agent, path: "secrets/token.txt" }), { path: "secrets/token.txt", rule: "secrets/**", list: "deny" });
      });
    });
  }

  if (provider === "local") {
    family("scripts built to make the check itself expensive are refused (unparseable, too_complex) and the server keeps serving", async (t, a, c) => {
      // tree-sitter's error recovery on this took 75 s before parsing stopped at the first error.
      const hostile = `echo ran > ${marker("costly")}\n${"a)\n".repeat(40_000)}`;
      const first = await expectError(t, c.tools.bash({ workspaceId: a.plain, command: hostile }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
      t.is(first.detail.metadata.why, "unparseable");
      // 25,000 lines are checked one by one too: past the bound, refused, never waved through.
      const long = await expectError(t, c.tools.bash({ workspaceId: a.plain, command: "true\n".repeat(25_000) }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
      t.is(long.detail.metadata.why, "too_complex");
      t.is((await allowed(t, c, a.plain, "echo still serving")).stdout, "still serving\n");
    });

    family("an agent type cannot allow what the server denies: its allow rules for sudo, rm, mount, dd and kill still meet the server's deny list", async (t, _a, c) => {
      await c.config.createAgentType({ agentType: { id: "red-team-permissive", workspace: { enabled: true, tools: ["bash", "list"], commandPolicy: { defaultAction: "allow", allow: ["sudo", "rm", "mount", "dd", "kill"], deny: [] } } } });
      const { workspace } = await c.workspaces.createWorkspace({ provider, agentType: "red-team-permissive" });
      const id = workspace?.id as string;
      const made: string[] = [];
      for (const [cmd, rule] of [["sudo id", "sudo"], ["rm -rf /", "rm /"], ["mount /dev/sda /mnt", "mount"], ["dd if=/dev/zero of=/dev/sda", "dd of=/dev/*"], ["kill -9 -1", "kill -1"]]) {
        const m = marker("perm");
        made.push(m);
        await refused(t, c, id, `${guard(m)}exit 0; ${cmd}`, { command: cmd, rule, why: "denied_by_server" });
      }
      await absent(t, c, id, made);
      await allowed(t, c, id, "touch gone && rm -f gone && test ! -e gone");
      await c.workspaces.deleteWorkspace({ id });
    });
  }
}

// ── Properties ─────────────────────────────────────────────────────────────────────────────

test("host mounts on every provider: prefix siblings, '..', links out of the roots (at the top and inside a tree), mount paths out of the workspace and byte caps are refused or skipped, nothing secret is echoed, and a refused mount leaves no workspace", async (t) => {
  t.timeout(RED_TEAM_BUDGET_MS);
  const dir = await mkdtemp(path.join(tmpdir(), "aw-redteam-mounts-"));
  const allowed = path.join(dir, "allowed");
  const sibling = path.join(dir, "allowed-secrets");
  const outside = path.join(dir, "outside");
  for (const d of [path.join(allowed, "project/src"), path.join(allowed, "other"), sibling, outside]) await mkdir(d, { recursive: true });
  await writeFile(path.join(allowed, "project/README.md"), "# project\n");
  await writeFile(path.join(allowed, "project/src/main.ts"), "export const main = 1;\n");
  await writeFile(path.join(allowed, "project/big.bin"), Buffer.alloc(64 * 1024, 7));
  await writeFile(path.join(allowed, "other/shared.txt"), "shared inside the root\n");
  await writeFile(path.join(sibling, "token.txt"), "sibling secret\n");
  await writeFile(path.join(outside, "passwd"), "outside secret\n");
  await symlink(path.join(allowed, "other/shared.txt"), path.join(allowed, "project/link-in.txt"));
  await symlink(path.join(outside, "passwd"), path.join(allowed, "project/link-out.txt"));
  await symlink(outside, path.join(allowed, "project/dir-out"));
  await symlink(outside, path.join(allowed, "escape"));
  const server = await startServer({ env: { AGENT_WORKSPACE_ALLOWED_HOST_ROOTS: allowed, AGENT_WORKSPACE_MOUNT_MAX_BYTES: "1M" } });
  try {
    const c = server.clients.grpc;
    const mount = (m: { hostPath: string; mountPath?: string; excludeGlob?: string[]; maxBytes?: bigint; followSymlinks?: boolean }) => ({ mountPath: "", includeGlob: [], excludeGlob: [], maxBytes: 0n, followSymlinks: false, ...m });
    const refused: Array<[ReturnType<typeof mount>, Code, ErrorReason]> = [
      [mount({ hostPath: sibling }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: path.join(sibling, "token.txt") }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: `${allowed}/../allowed-secrets` }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: "project/../../outside" }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: outside }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: "/etc/passwd" }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: path.join(allowed, "escape") }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: path.join(allowed, "escape"), followSymlinks: true }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: path.join(allowed, "project/link-out.txt"), followSymlinks: true }), Code.PermissionDenied, ErrorReason.HOST_PATH_NOT_ALLOWED],
      [mount({ hostPath: path.join(allowed, "project"), mountPath: "../up" }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE],
      [mount({ hostPath: path.join(allowed, "project"), mountPath: "/etc" }), Code.PermissionDenied, ErrorReason.PATH_OUTSIDE_WORKSPACE],
      [mount({ hostPath: path.join(allowed, "project"), maxBytes: 1000n }), Code.ResourceExhausted, ErrorReason.MOUNT_TOO_LARGE],
      [mount({ hostPath: path.join(allowed, "nothing-here") }), Code.NotFound, ErrorReason.FILE_NOT_FOUND],
    ];
    for (const provider of [...PROVIDERS, "memory"]) {
      const labels = { suite: `mounts-refused-${provider}-${process.pid}` };
      for (const [m, code, reason] of refused) {
        const { detail } = await expectError(t, c.workspaces.createWorkspace({ provider, labels, mounts: [m] }), code, reason);
        t.false(/sibling secret|outside secret/.test(JSON.stringify(detail)), JSON.stringify(detail));
      }
      // Links inside a copied tree: followed only inside the roots; the rest skipped, never copied.
      const followed = (await c.workspaces.createWorkspace({ provider, mounts: [mount({ hostPath: path.join(allowed, "project"), excludeGlob: ["big.bin"], followSymlinks: true })] })).workspace!;
      t.deepEqual(followed.mounts[0].skipped.map((s) => `${s.path}:${s.reason}`).sort(), ["dir-out:outside_roots", "link-out.txt:outside_roots"]);
      t.is((await c.tools.readFile({ workspaceId: followed.id, path: "project/link-in.txt" })).content, "1: shared inside the root");
      await expectError(t, c.tools.readFile({ workspaceId: followed.id, path: "project/link-out.txt" }), Code.NotFound, ErrorReason.FILE_NOT_FOUND);
      await c.workspaces.deleteWorkspace({ id: followed.id });
      // The byte cap counts the whole mount: under the cap it works, one byte over it fails whole.
      const ok = (await c.workspaces.createWorkspace({ provider, mounts: [mount({ hostPath: path.join(allowed, "project"), excludeGlob: ["big.bin"], maxBytes: 200n })] })).workspace!;
      t.true(ok.mounts[0].bytesCopied <= 200n);
      await c.workspaces.deleteWorkspace({ id: ok.id });
      const over = mount({ hostPath: path.join(allowed, "project"), excludeGlob: ["big.bin"], maxBytes: ok.mounts[0].bytesCopied - 1n });
      await expectError(t, c.workspaces.createWorkspace({ provider, labels, mounts: [over] }), Code.ResourceExhausted, ErrorReason.MOUNT_TOO_LARGE);
      t.is((await c.workspaces.listWorkspaces({ labels, pageSize: 1000 })).workspaces.length, 0, `${provider}: no refused mount left a workspace behind`);
    }
  } finally {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("jail property (local): paths built from '..', '.', '', '/', %2e, full-width dots, NUL and link names resolve inside the workspace or are refused, and never read or write outside", async (t) => {
  await lane(t, "local", async () => {
    const c = t.context.server.clients.grpc;
    const { workspace } = await c.workspaces.createWorkspace({ provider: "local" });
    const id = workspace?.id as string;
    const out = `/tmp/aw-redteam-prop-${randomBytes(4).toString("hex")}`;
    hostLeftovers.add(out);
    try {
      const root = (
        await sh(
          c,
          id,
          [
            "mkdir -p a b '．．' '%2e%2e'",
            "printf 'inside-a\\n' > a/x.txt",
            "printf 'inside-root\\n' > x.txt",
            "printf 'inside-fw\\n' > '．．/x.txt'",
            "printf 'inside-pct\\n' > '%2e%2e/x.txt'",
            `d=.env; printf '${SECRET.env}\\n' > "$d"`,
            `mkdir -p ${out} && printf '${SECRET.outside}\\n' > ${out}/x.txt`,
            `ln -s ${out} out && ln -s .. up && ln -s ../.. dotdot && ln -s loop loop && ln -s a in && ln -s /workspace/a abs && ln -s /etc etc && ln -s /workspace/../x.txt absup`,
            "pwd -P",
          ].join(" && "),
        )
      ).trim();
      // Plant the secret next to the root too (a sibling file of the workspace directory).
      const parent = path.dirname(root);
      await sh(c, id, `printf '${SECRET.outside}\\n' > ../x.txt`);
      hostLeftovers.add(path.join(parent, "x.txt"));
      const before = async () => ({ parent: (await readdir(parent)).sort(), out: (await readdir(out)).sort() });
      const snapshot = await before();

      const TOKENS = ["..", ".", "", "/", "a", "b", "x.txt", "%2e", "%2e%2e", "．", "．．", "\0", "out", "up", "dotdot", "loop", "in", "abs", "etc", "absup", "passwd", ".env", "/workspace", "workspace", "\\"];
      const paths = fc.array(fc.constantFrom(...TOKENS), { minLength: 1, maxLength: 8 }).map((parts) => parts.join(""));
      const refusals = new Set(["PATH_OUTSIDE_WORKSPACE", "INVALID_ARGUMENT", "FILE_NOT_FOUND", "NOT_A_DIRECTORY", "SENSITIVE_FILE"]);
      const inside = new Set(["1: inside-a", "1: inside-root", "1: inside-fw", "1: inside-pct", "1: w"]);
      const seen = new Map<string, number>();
      const count = (k: string) => seen.set(k, (seen.get(k) ?? 0) + 1);

      await fc.assert(
        fc.asyncProperty(paths, async (p) => {
          try {
            const r = await c.tools.readFile({ workspaceId: id, path: p });
            count("read ok");
            const text = transcript(r);
            if (leaks(text) || text.includes("root:x:0:0")) return false;
            if (r.path.startsWith("/") || r.path === ".." || r.path.startsWith("../")) return false;
            return r.mimeType === "inode/directory" || inside.has(r.content);
          } catch (err) {
            const e = ConnectError.from(err);
            const reason = ErrorReason[errorDetail(e)?.reason ?? 0];
            count(`read ${reason}`);
            return refusals.has(reason) && !leaks(transcript(e));
          }
        }),
        { numRuns: 300 },
      );
      await fc.assert(
        fc.asyncProperty(paths, async (p) => {
          try {
            await c.tools.writeFile({ workspaceId: id, path: p, content: "w\n" });
            count("write ok");
            return true;
          } catch (err) {
            const reason = ErrorReason[errorDetail(ConnectError.from(err))?.reason ?? 0];
            count(`write ${reason}`);
            return refusals.has(reason) || reason === "IS_DIRECTORY";
          }
        }),
        { numRuns: 150 },
      );
      t.log(`outcomes: ${[...seen].sort().map(([k, v]) => `${k}=${v}`).join(" ")}`);
      const after = await before();
      t.deepEqual(after.out, snapshot.out, "the outside directory changed");
      t.deepEqual(after.parent.filter((n) => !n.startsWith("ws-")), snapshot.parent.filter((n) => !n.startsWith("ws-")), "something appeared next to the workspace");
      t.is(await sh(c, id, `cat ${out}/x.txt ../x.txt`), `${SECRET.outside}\n${SECRET.outside}\n`, "a file outside was changed");
      t.true((seen.get("read ok") ?? 0) > 0 && (seen.get("read PATH_OUTSIDE_WORKSPACE") ?? 0) > 0, "the generator reached both sides");
    } finally {
      await c.workspaces.deleteWorkspace({ id }).catch(() => undefined);
    }
  });
});

/** What a generated script wraps around the denied command, and what the policy must say. */
interface Denied {
  text: string;
  why: string;
  /** Only an allowlist refuses it. */
  allowlistOnly?: boolean;
}
const DENIED: Denied[] = [
  { text: "touch pwned", why: "not_in_allowlist", allowlistOnly: true },
  { text: "curl -o tool http://example.invalid/tool", why: "not_in_allowlist", allowlistOnly: true },
  { text: "git -C . push origin main", why: "denied_by_agent_type", allowlistOnly: true },
  { text: "sudo id", why: "denied_by_server" },
  { text: "rm -rf /", why: "denied_by_server" },
  { text: "mkfs.ext4 /dev/sda1", why: "denied_by_server" },
  { text: "cat .env", why: "sensitive_file" },
  { text: "cp id_ed25519 /tmp/k", why: "sensitive_file" },
];
const ALLOWED_SIMPLE = ["ls", "ls -la src", "echo hi", "cat README.md", "git status", "git log --oneline -3", "npm test", "npm test -- --watch", "grep -rn TODO .", "find . -name x", "python3 --version", "true", "cd src"];
/**
 * Separators between commands. Line breaks come in two sets: ended by `;` (what the passing
 * property uses), and bare, where tree-sitter-bash misreads some scripts (a line starting with a
 * backslash, and a list after a pipeline of three or more commands, become arguments of the
 * command before): the full set runs in a known-bypass property below.
 */
const SEPARATORS = ["; ", " && ", " || ", " | ", " & ", " ;\n", ";\r\n"];
const BARE_LINE_BREAKS = ["\n", "\r\n", "\n\n"];
/** Wrappers of one simple command that keep it one simple command. */
const SIMPLE_WRAPPERS: Array<(c: string) => string> = [
  (c) => `timeout 5 ${c}`,
  (c) => `timeout -s KILL 10 ${c}`,
  (c) => `env ${c}`,
  (c) => `env FOO=1 ${c}`,
  (c) => `nice -n 5 ${c}`,
  (c) => `nohup ${c}`,
  (c) => `command ${c}`,
  (c) => `find . -maxdepth 0 -exec ${c} \\;`,
  (c) => `stdbuf -oL ${c}`,
  (c) => `busybox ${c}`,
  (c) => `setsid ${c}`,
  (c) => `ionice -c 3 ${c}`,
  (c) => `taskset -c 0 ${c}`,
  (c) => `flock /tmp/lock ${c}`,
  (c) => `exec ${c}`,
  (c) => `time ${c}`,
];
/** Wrappers of a script (`n` keeps function names apart, so no function calls itself). */
const SCRIPT_WRAPPERS: Array<(s: string, n: number) => string | undefined> = [
  (s) => `( ${s} )`,
  (s) => `{ ${s}; }`,
  (s) => `echo $( ${s} )`,
  (s) => (s.includes("`") || s.includes("\\") ? undefined : `echo \`${s}\``),
  (s) => `bash -c ${shellQuote(s)}`,
  (s) => `sh -c ${shellQuote(s)}`,
  (s) => `eval ${shellQuote(s)}`,
  (s) => `if true; then ${s}; fi`,
  (s) => `for i in 1 2; do ${s}; done`,
  (s) => `while false; do ${s}; done`,
  (s) => `case x in (x) ${s};; esac`,
  (s, n) => `fn${n}() { ${s}; }; fn${n}`,
  (s) => `cat <(${s})`,
  (s) => `timeout 5 bash -c ${shellQuote(s)}`,
  (s) => `trap ${shellQuote(s)} EXIT`,
  (s) => `echo \${x:-$( ${s} )}`,
  // Backticks in ${…}: only around plain commands (the grammar cannot parse ${x:-`… $(…) …`}: refused, as unparseable).
  (s) => (/[`\\$(){}]/.test(s) ? undefined : `echo \${x:-\`${s}\`}`),
  (s) => (/[`\\$(){}]/.test(s) ? undefined : `x=a; echo "\${x#\`${s}\`}"`),
  (s) => `printf 'a\\n' | mapfile -C ${shellQuote(s)} -c 1`,
  (s) => `git rebase -x ${shellQuote(s)} --root`,
  (s) => `git submodule foreach ${shellQuote(s)}`,
];

/** A script: the core command (maybe wrapped as a simple command, maybe fed by xargs) among allowed ones, wrapped in layers. */
const scriptAround = (core: fc.Arbitrary<string>, separators: string[] = SEPARATORS) =>
  fc
    .record({
      core,
      simple: fc.array(fc.nat(SIMPLE_WRAPPERS.length - 1), { maxLength: 2 }),
      xargs: fc.boolean(),
      layers: fc.array(
        fc.record({
          before: fc.array(fc.tuple(fc.constantFrom(...ALLOWED_SIMPLE), fc.constantFrom(...separators)), { maxLength: 2 }),
          after: fc.array(fc.tuple(fc.constantFrom(...separators), fc.constantFrom(...ALLOWED_SIMPLE)), { maxLength: 2 }),
          wrap: fc.option(fc.nat(SCRIPT_WRAPPERS.length - 1), { nil: undefined }),
        }),
        { minLength: 1, maxLength: 4 },
      ),
    })
    .map(({ core, simple, xargs, layers }) => {
      let s = simple.reduce((c, w) => SIMPLE_WRAPPERS[w](c), core);
      if (xargs) s = `echo . | xargs ${s}`;
      layers.forEach((layer, n) => {
        s = [...layer.before.map(([c, sep]) => c + sep), s, ...layer.after.map(([sep, c]) => sep + c)].join("");
        if (layer.wrap !== undefined) s = SCRIPT_WRAPPERS[layer.wrap](s, n) ?? s;
      });
      return s;
    });

/** The policies the parser property checks: the agent type's allowlist, and no agent type. */
const POLICIES = { agentType: new CommandPolicy({ defaultAction: "", allow: ALLOW, deny: DENY }), plain: new CommandPolicy() };

/** A command with its name spelled another way quote removal undoes (`r''m`, `"rm"`, `$'\x72m'`, `\rm`). */
const SPELLINGS: Record<string, (name: string) => string> = {
  plain: (n) => n,
  quotes: (n) => `${n[0]}''${n.slice(1)}`,
  double: (n) => `"${n}"`,
  ansiC: (n) => `$'\\x${n.charCodeAt(0).toString(16)}'${n.slice(1)}`,
  backslash: (n) => `\\${n}`,
};

/**
 * Asserts, over `runs` generated scripts, that every script built around a denied command (its
 * name spelled by one of `spellings`) is refused for that command with its `why`, under the
 * agent type's allowlist and (for what the server denies) under no agent type.
 */
async function deniedAlwaysRefused(t: ExecutionContext<Ctx>, spellings: string[], runs: number, separators = SEPARATORS, seed?: number): Promise<void> {
  const spell = (text: string, how: string) => {
    const [name, ...rest] = text.split(" ");
    return [SPELLINGS[how](name), ...rest].join(" ");
  };
  const deniedScript = fc
    .tuple(fc.constantFrom(...DENIED), fc.constantFrom(...spellings))
    .chain(([d, how]) => scriptAround(fc.constant(spell(d.text, how)), separators).map((script) => ({ d: { ...d, text: spell(d.text, how) }, script })));
  await fc.assert(
    fc.asyncProperty(deniedScript, async ({ d, script }) => {
      for (const [name, policy] of Object.entries(POLICIES)) {
        if (name === "plain" && d.allowlistOnly) continue;
        const r = await policy.check(script);
        if (r === undefined || r.why !== d.why || !r.command.includes(d.text)) {
          t.log(`${name}: ${JSON.stringify(script)} → ${JSON.stringify(r)}`);
          return false;
        }
      }
      return true;
    }),
    { numRuns: runs, ...(seed === undefined ? {} : { seed }) },
  );
}

test("parser property: a script built around a denied command (separators, substitutions, subshells, groups, bash -c, eval, timeout, env, xargs, find -exec…, its name quoted) is always refused for that command; one of allowed commands only is always allowed", async (t) => {
  t.timeout(RED_TEAM_BUDGET_MS);
  await deniedAlwaysRefused(t, ["plain", "quotes", "double", "ansiC"], 800);
  await fc.assert(
    fc.asyncProperty(scriptAround(fc.constantFrom(...ALLOWED_SIMPLE)), async (script) => {
      const r = (await POLICIES.agentType.check(script)) ?? (await POLICIES.plain.check(script));
      if (r !== undefined) t.log(`${JSON.stringify(script)} → ${JSON.stringify(r)}`);
      return r === undefined;
    }),
    { numRuns: 400 },
  );
  t.pass();
});

// ── Bypasses this suite found, each closed since; the comments say what the bypass was ───────

/** A known bypass, run on local (the policy decides in the server, before any provider is involved). */
const bypass = (title: string, fn: (t: ExecutionContext<Ctx>, a: Arena, c: ClientSet) => Promise<void>) =>
  test(`closed bypass: ${title}`, async (t) => {
    await lane(t, "local", async () => fn(t, await arenaOf(t, "local"), t.context.server.clients.grpc), RED_TEAM_BUDGET_MS);
  });

/**
 * Runs a script that must be refused. When it is not, the failure first shows what it did (the
 * files it made), then that it was not refused; when it is, the refusal must carry `expected`.
 */
async function mustRefuse(t: ExecutionContext<Ctx>, c: ClientSet, workspaceId: string, command: string, expected: Partial<Expected>, made: string[]): Promise<void> {
  let got: Record<string, string> | string;
  try {
    const r = await c.tools.bash({ workspaceId, command });
    got = `ran, exit ${r.exitCode}`;
  } catch (err) {
    const e = ConnectError.from(err);
    const d = errorDetail(e);
    got = d?.reason === ErrorReason.COMMAND_NOT_ALLOWED ? { ...d.metadata } : `${Code[e.code]}: ${e.rawMessage}`;
  }
  await absent(t, c, workspaceId, made);
  if (typeof got === "string") t.fail(`${JSON.stringify(command)} was not refused (${got})`);
  else t.like(got, expected, JSON.stringify(command));
}

// tree-sitter-bash reads a line that starts with a backslash as more arguments of the command on
// the line before (`ls\n\\touch P` parses as one command `ls \touch P`), after blank lines and
// comments too; bash runs it as a command of its own. So any command spelled `\name` at the start
// of a line is invisible to the policy: allowlist, agent-type deny rules and the server's deny
// list alike. (The parser property found it: its failing half is the next test.)
bypass("a command at the start of a line spelled with a backslash is invisible: echo ran⏎\\touch P, exit 0⏎\\sudo id, exit 0 # c⏎\\rm -rf / (expected refused for that command)", async (t, a, c) => {
  const [m1, p1, m2, m3, m4] = [marker("bp-nl"), marker("bp-nl-p"), marker("bp-nl"), marker("bp-nl"), marker("bp-nl")];
  await mustRefuse(t, c, a.agent, `echo ran > ${m1}\n\\touch ${p1}`, { command: `\\touch ${p1}`, rule: "", why: "not_in_allowlist" }, [m1, p1]);
  await mustRefuse(t, c, a.agent, `echo ran > ${m2}\n\n\\git push origin main`, { command: "\\git push origin main", rule: "git push", why: "denied_by_agent_type" }, [m2]);
  // Guarded by exit: the proof is the marker, never the denied command itself.
  await mustRefuse(t, c, a.plain, `echo ran > ${m3}; exit 0\n\\sudo id`, { command: "\\sudo id", rule: "sudo", why: "denied_by_server" }, [m3]);
  await mustRefuse(t, c, a.plain, `echo ran > ${m4}; exit 0 # done\n\\rm -rf /`, { command: "\\rm -rf /", rule: "rm /", why: "denied_by_server" }, [m4]);
});

// A list after a pipeline of three or more commands and a bare line break is read by tree-sitter-bash
// as arguments of the pipeline's last command (`ls | ls | ls⏎sudo id || true` parses as
// `ls | ls | (ls sudo id) || true`); bash runs `sudo id`. (Found by the parser property.)
bypass("a list after a three-command pipeline and a line break is invisible: echo | cat | cat⏎touch P || true, exit 0⏎ls | ls | ls⏎sudo id || true (expected refused for that command)", async (t, a, c) => {
  const [m1, p1, m2, m3] = [marker("bp-pipe"), marker("bp-pipe-p"), marker("bp-pipe"), marker("bp-pipe")];
  await mustRefuse(t, c, a.agent, `echo ran > ${m1}\necho | cat | cat\ntouch ${p1} || true`, { command: `touch ${p1}`, rule: "", why: "not_in_allowlist" }, [m1, p1]);
  await mustRefuse(t, c, a.plain, `echo ran > ${m2}; exit 0\nls | ls | ls\nsudo id || true`, { command: "sudo id", rule: "sudo", why: "denied_by_server" }, [m2]);
  await mustRefuse(t, c, a.plain, `echo ran > ${m3}; exit 0\nls | ls | ls\n\nrm -rf / && true`, { command: "rm -rf /", rule: "rm /", why: "denied_by_server" }, [m3]);
});

// A line break inside a double-quoted string fell between the grammar's string_content pieces, so
// `bash -c "ls⏎rm -rf /"` was checked as `lsrm -rf /`. And after a three-command pipeline and a line
// break (misparsed, see above), a shell string spanning lines hid its script from the line-by-line
// look: its first line alone does not parse, and the rest was taken for the inside of a string.
// (Found by the unseeded parser property: ls | ls | ls⏎⏎timeout 5 bash -c 'ls␍⏎\rm -rf /' || ls.)
bypass("a line break inside a shell string: bash -c \"ls⏎rm -rf /\", and ls | ls | ls⏎⏎bash -c 'ls⏎rm -rf /' || ls (expected denied_by_server, rule rm /)", async (t, a, c) => {
  const [m1, m2, m3] = [marker("bp-str"), marker("bp-str"), marker("bp-str")];
  await mustRefuse(t, c, a.plain, `echo ran > ${m1}; exit 0\nbash -c "ls\nrm -rf /"`, { command: "rm -rf /", rule: "rm /", why: "denied_by_server" }, [m1]);
  await mustRefuse(t, c, a.plain, `echo ran > ${m2}; exit 0\nls | ls | ls\n\nbash -c 'ls\nrm -rf /' || ls`, { command: "rm -rf /", rule: "rm /", why: "denied_by_server" }, [m2]);
  await mustRefuse(t, c, a.plain, `echo ran > ${m3}; exit 0\nls | ls | ls\n\ntimeout 5 bash -c 'ls\r\n\\rm -rf /' || ls`, { command: "\\rm -rf /", rule: "rm /", why: "denied_by_server" }, [m3]);
});

// The parser property over bare line breaks and backslash-spelled names, with a fixed seed so it
// fails the same way every run until both misreadings above are fixed.
test("closed bypass (found by the parser property): generated scripts with bare line breaks, or a denied command spelled \\name, are always refused", async (t) => {
  t.timeout(RED_TEAM_BUDGET_MS);
  await deniedAlwaysRefused(t, ["plain", "quotes", "double", "ansiC", "backslash"], 2000, [...SEPARATORS, ...BARE_LINE_BREAKS], 1212);
  // And unseeded, so each run tries new scripts.
  await deniedAlwaysRefused(t, ["plain", "quotes", "double", "ansiC", "backslash"], 500, [...SEPARATORS, ...BARE_LINE_BREAKS]);
  t.pass();
});

// xargs -I{} replaces "{}" with each input line, so `sh -c {}` runs text read from stdin. The policy
// checks the literal "{}" as the shell's script (it parses as an empty group) and allows it.
bypass("xargs -I{} sh -c {} runs stdin as a script under an allowlist: echo 'touch P' | xargs -I{} sh -c {} (expected computed_at_run_time)", async (t, a, c) => {
  const [m, p] = [marker("bp-xargs"), marker("bp-xargs-p")];
  await mustRefuse(t, c, a.agent, `${guard(m)}echo 'touch ${p}' | xargs -I{} sh -c {}`, { why: "computed_at_run_time" }, [m, p]);
});

// bash evaluates a variable's value as an arithmetic expression, and an array subscript there
// undergoes command substitution: `$((x))` runs the command held in x, and builtins that take a
// variable name (`printf -v`, `test -v`, `read`) evaluate a subscript in a quoted name the same
// way. The policy sees only quoted text and allowed builtins.
bypass("array subscripts evaluated at run time run a command: x='a[$(touch P)]'; echo $((x)) and printf -v 'a[$(touch P)]' x and test -v 'a[$(touch P)]' (expected computed_at_run_time)", async (t, a, c) => {
  for (const script of ["x='a[$(touch P)]'; echo $((x))", "printf -v 'a[$(touch P)]' x", "test -v 'a[$(touch P)]'"]) {
    const [m, p] = [marker("bp-arith"), marker("bp-arith-p")];
    await mustRefuse(t, c, a.agent, `${guard(m)}${script.replace("P", p)}`, { why: "computed_at_run_time" }, [m, p]);
  }
});

// `for NAME in …` assigns NAME; the policy checks assignments, declarations, read and ${X:=…},
// not loop variables (select is the same).
bypass("a for loop assigns PATH: for PATH in /tmp/evil; do ls; done (expected restricted_variable, rule PATH)", async (t, a, c) => {
  const m = marker("bp-for");
  await mustRefuse(t, c, a.agent, `${guard(m)}for PATH in /tmp/evil; do ls; done`, { rule: "PATH", why: "restricted_variable" }, [m]);
});

// `declare -n ref=PATH` is refused, but the check reads the nameref target's source text, so a
// quoted target ('PATH', "PATH", P''ATH) passes; `ref=…` then assigns PATH.
bypass("declare -n with a quoted target makes a later assignment set PATH: declare -n r='PATH'; r=/tmp/evil (expected restricted_variable, rule PATH)", async (t, a, c) => {
  const m = marker("bp-nameref");
  await mustRefuse(t, c, a.agent, `${guard(m)}declare -n r='PATH'; r=/tmp/evil; ls`, { rule: "PATH", why: "restricted_variable" }, [m]);
});

// Only arguments that start with "/" are path-normalised, so the value of `of=` is matched as
// written and `dd of=/dev/*` misses other spellings of the same device path.
bypass("dd of= with a non-normal device path: of=//dev/sda, of=/./dev/sda, of=/../dev/sda (expected denied_by_server, rule dd of=/dev/*)", async (t, a, c) => {
  for (const target of ["//dev/sda", "/./dev/sda", "/../dev/sda"]) {
    const m = marker("bp-dd");
    await mustRefuse(t, c, a.plain, `${guard(m)}exit 0; dd if=/dev/zero of=${target}`, { command: `dd if=/dev/zero of=${target}`, rule: "dd of=/dev/*", why: "denied_by_server" }, [m]);
  }
});

// The fork-bomb check looks for a function calling itself; two functions calling each other are the same bomb.
bypass("a fork bomb of two mutually recursive functions: a() { b | b & }; b() { a | a & }; a (expected fork_bomb)", async (t, a, c) => {
  const m = marker("bp-bomb");
  await mustRefuse(t, c, a.plain, `${guard(m)}exit 0; a() { b | b & }; b() { a | a & }; a`, { why: "fork_bomb" }, [m]);
});

// Brace expansion is as visible to the parser as a glob (`cat .e*` is refused), but `cat .env{,}`
// (bash: cat .env .env) and `cat {.env,README.md}` pass and print the secret.
bypass("brace expansion names .env: cat .env{,} and cat {.env,README.md} (expected sensitive_file, rule .env)", async (t, a, c) => {
  for (const script of ["cat .env{,}", "cat {.env,README.md}"]) {
    const m = marker("bp-brace");
    await mustRefuse(t, c, a.agent, `${guard(m)}${script}`, { rule: ".env", why: "sensitive_file" }, [m]);
  }
});

// Sensitive names are meant to be refused whether or not the file exists (README, "Sensitive
// files"), and are, by every tool, when the parent directory exists; under a missing directory
// read and grep answer FILE_NOT_FOUND instead (edit, patch, delete and write say SENSITIVE_FILE).
bypass("a sensitive name under a missing directory: ReadFile and Grep of app/.env.local answer FILE_NOT_FOUND (expected SENSITIVE_FILE, rule .env.*)", async (t, a, c) => {
  const meta = { path: "app/.env.local", rule: ".env.*", list: "deny" as const };
  await sensitive(t, c.tools.readFile({ workspaceId: a.plain, path: "app/.env.local" }), meta);
  await sensitive(t, c.tools.grep({ workspaceId: a.plain, pattern: "x", path: "app/.env.local" }), meta);
  await sensitive(t, c.tools.readFile({ workspaceId: a.plain, path: ".aws/credentials" }), { path: ".aws/credentials", rule: ".aws/credentials", list: "deny" });
});

// A deny rule matches `git push` among the arguments; a git alias defined with -c makes push run
// under another name. Proven with a real push into a bare repository of the workspace.
bypass("git -c alias.p=push p pushes despite the agent type's deny rule 'git push' (expected denied_by_agent_type)", async (t, a, c) => {
  await sh(c, a.agent, "git init -q --bare remote.git 2>/dev/null || true; git -c user.name=a -c user.email=a@b.c commit -q --allow-empty -m base");
  const m = marker("bp-alias");
  const attack = c.tools.bash({ workspaceId: a.agent, command: `${guard(m)}git -c alias.p=push p remote.git HEAD:refs/heads/pwned` });
  const result = await outcome(attack);
  t.is((await c.tools.bash({ workspaceId: a.agent, command: "git -C remote.git rev-parse -q --verify refs/heads/pwned" })).exitCode, 1, "the push reached the remote");
  t.is(result, "COMMAND_NOT_ALLOWED");
  await absent(t, c, a.agent, [m]);
});

// git runs commands named in its configuration (core.fsmonitor, core.sshCommand, core.pager,
// core.hooksPath, alias.x=!cmd); the policy refuses GIT_* variables for that reason but lets
// `git -c` (and `git config`) set the same configuration, so an allowlisted git runs any command.
// Which `why` fits is the owner's call; this asserts the refusal and that nothing ran.
bypass("git -c core.fsmonitor='touch P' status runs a command the allowlist never named (expected COMMAND_NOT_ALLOWED)", async (t, a, c) => {
  const [m, p] = [marker("bp-fsmon"), marker("bp-fsmon-p")];
  await mustRefuse(t, c, a.agent, `${guard(m)}git -c core.fsmonitor='touch ${p}' status`, { rule: "core.fsmonitor", why: "computed_at_run_time" }, [m, p]);
});

// tree-sitter-bash reads a backtick substitution in a word of ${…} (${x:-`cmd`}) and any
// substitution in a pattern (${x#$(cmd)}) as plain text; bash runs them. Under an allowlist the
// hidden command ran unchecked, and with no agent type it escaped the server's deny list too.
bypass("a substitution inside ${…} the grammar reads as text: echo ${x:-`touch P`}, x=a; echo ${x#$(touch P)}, echo ${x/a/`touch P`}; x=a; echo ${x%`rm -rf /`} (expected not_in_allowlist, denied_by_server)", async (t, a, c) => {
  for (const script of ["echo ${x:-`touch P`}", "x=a; echo ${x#$(touch P)}", 'x=a; echo "${x/a/`touch P`}"']) {
    const [m, p] = [marker("bp-expansion"), marker("bp-expansion-p")];
    await mustRefuse(t, c, a.agent, `${guard(m)}${script.replace("P", p)}`, { command: `touch ${p}`, why: "not_in_allowlist" }, [m, p]);
  }
  const m = marker("bp-expansion");
  await mustRefuse(t, c, a.plain, `${guard(m)}exit 0; x=a; echo \${x%\`rm -rf /\`}`, { rule: "rm /", why: "denied_by_server" }, [m]);
});

// mapfile and readarray are builtins every allowlist allows, and -C names a callback bash runs as
// code every -c lines: `mapfile -C 'touch P' -c 1` ran touch under an allowlist without it.
bypass("mapfile -C and readarray -C run their callback: printf 'a\\n' | mapfile -C 'touch P' -c 1, readarray -tC 'touch P' -c 1 (expected not_in_allowlist)", async (t, a, c) => {
  for (const script of ["printf 'a\\n' | mapfile -C 'touch P' -c 1", "printf 'a\\n' | readarray -tC 'touch P' -c 1"]) {
    const [m, p] = [marker("bp-mapfile"), marker("bp-mapfile-p")];
    await mustRefuse(t, c, a.agent, `${guard(m)}${script.replace("P", p)}`, { command: `touch ${p}`, why: "not_in_allowlist" }, [m, p]);
  }
});

// git subcommands that take a command run it through the shell: an allowlisted git ran anything
// through `ls-remote --upload-pack`, `rebase -x`, `difftool -x`, `submodule foreach`, `bisect run`
// and the like. Each is now checked as the script it is (`git rebase -x 'npm test'` passes).
bypass("git options that run a command: git ls-remote --upload-pack='touch P' ., git rebase -x 'touch P' --root, git --exec-path=DIR (expected not_in_allowlist)", async (t, a, c) => {
  await sh(c, a.agent, "git rev-parse -q --verify HEAD >/dev/null || git -c user.name=a -c user.email=a@b.c commit -q --allow-empty -m base");
  for (const script of ["git ls-remote --upload-pack='touch P' .", "git -c user.name=a -c user.email=a@b.c rebase -q -x 'touch P' --root"]) {
    const [m, p] = [marker("bp-gitcmd"), marker("bp-gitcmd-p")];
    await mustRefuse(t, c, a.agent, `${guard(m)}${script.replace("P", p)}`, { command: `touch ${p}`, why: "not_in_allowlist" }, [m, p]);
  }
  const m = marker("bp-gitcmd");
  await mustRefuse(t, c, a.agent, `${guard(m)}git --exec-path=/tmp status`, { rule: "--exec-path", why: "not_in_allowlist" }, [m]);
  // What an allow rule names still runs through them.
  await allowed(t, c, a.agent, "git -c user.name=a -c user.email=a@b.c rebase -q -x 'ls' --root");
});

// More of the same family, found probing by hand: `git config -f .git/config KEY …` was read with the
// file as its key, `git clone -c KEY=…` writes the new repository's configuration, ${x@P} expands a
// value as a prompt (running its substitutions), and ${!x} expands the variable a value names (a name
// with a subscript runs its $(…)). Each ran its command under the allowlist.
bypass("git config -f .git/config core.fsmonitor, git clone -c core.fsmonitor=…, ${x@P} and ${!x} of a value read at run time (expected computed_at_run_time)", async (t, a, c) => {
  await sh(c, a.agent, "git rev-parse -q --verify HEAD >/dev/null || git -c user.name=a -c user.email=a@b.c commit -q --allow-empty -m base");
  const cases: Array<[string, Partial<Expected>]> = [
    ["git config -f .git/config core.fsmonitor 'touch PWN' && git status", { rule: "core.fsmonitor", why: "computed_at_run_time" }],
    ["git clone -q -c core.fsmonitor='touch ../PWN' . clone-PWN && git -C clone-PWN status", { rule: "core.fsmonitor", why: "computed_at_run_time" }],
    ["x='$(touch PWN)'; echo ${x@P}", { why: "computed_at_run_time" }],
    ["printf 'a[%s(touch PWN)]\\n' '$' > v-PWN; read x < v-PWN; echo ${!x}", { why: "computed_at_run_time" }],
  ];
  for (const [script, expected] of cases) {
    const [m, p] = [marker("bp-gitcfg"), marker("bp-gitcfg-p")];
    await mustRefuse(t, c, a.agent, `${guard(m)}${script.replaceAll("PWN", p)}`, expected, [m, p]);
  }
  // ${!prefix*} and ${!a[@]} only list names.
  await allowed(t, c, a.agent, "a=(x y); echo ${!a[@]} ${!BASH*}");
  // ripgrep's --pre runs a program on every file: under an allowlist that names rg, it is checked.
  const rg = new CommandPolicy({ defaultAction: "", allow: ["rg", "cat"], deny: [] });
  t.like(await rg.check("rg --pre touch x"), { why: "not_in_allowlist" });
  t.like(await rg.check("rg --pre=touch x"), { why: "not_in_allowlist" });
  t.is(await rg.check("rg --pre cat x"), undefined);
});

// The sandbox's HOME is the workspace root, so ~/.gitconfig is the global configuration of the
// agent's own git: `printf '[core] fsmonitor = …' > ~/.gitconfig` then `git status` ran the command,
// as did `git clone --template=DIR` with a hook in DIR (git copies the template's hooks into the
// new repository and runs post-checkout). `.gitconfig` is write-protected now, and --template and
// init.templateDir are refused where rules limit git.
bypass("~/.gitconfig and git clone --template=DIR run code through the agent's own git (expected sensitive_file, computed_at_run_time)", async (t, a, c) => {
  await sh(c, a.agent, "git rev-parse -q --verify HEAD >/dev/null || git -c user.name=a -c user.email=a@b.c commit -q --allow-empty -m base");
  const template = await mkdtemp(path.join(tmpdir(), "aw-redteam-template-"));
  hostLeftovers.add(template);
  await mkdir(path.join(template, "hooks"));
  await c.tools.writeFile({ workspaceId: a.agent, path: ".config/git/keep", content: "" });
  const cases: Array<[string, Partial<Expected>]> = [
    ["printf '[core]\\n\\tfsmonitor = touch PWN\\n' > ~/.gitconfig && git status", { rule: ".gitconfig", why: "sensitive_file" }],
    ["printf '[core]\\n\\tfsmonitor = touch PWN\\n' > .config/git/config && git status", { rule: ".config/git/config", why: "sensitive_file" }],
    [`git clone -q --template=${template} . clone-PWN`, { rule: "--template", why: "computed_at_run_time" }],
    [`git -c init.templateDir=${template} clone -q . clone-PWN`, { rule: "init.templateDir", why: "computed_at_run_time" }],
  ];
  for (const [script, expected] of cases) {
    const [m, p] = [marker("bp-gitconfig"), marker("bp-gitconfig-p")];
    await writeFile(path.join(template, "hooks", "post-checkout"), `#!/bin/sh\ntouch ../${p}\n`, { mode: 0o755 });
    await mustRefuse(t, c, a.agent, `${guard(m)}${script.replaceAll("PWN", p)}`, expected, [m, p]);
  }
  await sensitive(t, c.tools.writeFile({ workspaceId: a.agent, path: ".gitconfig", content: "[core]\n\tfsmonitor = true\n" }), { path: ".gitconfig", rule: ".gitconfig", list: "write_protected" });
});

// The sandbox's HOME is the workspace root, and `~/.env` is refused, but the file checks read
// `$HOME/.env` as computed text and let it through: `cat $HOME/.env` printed the secret, and
// `printf … > "$HOME/.gitconfig"` configured the agent's git.
bypass("$HOME spelling a sensitive path: cat $HOME/.env, cat \"${HOME}/.env\", printf x > \"$HOME/.gitconfig\" (expected sensitive_file)", async (t, a, c) => {
  const cases: Array<[string, Partial<Expected>]> = [
    ["cat $HOME/.env", { rule: ".env", why: "sensitive_file" }],
    ['cat "${HOME}/.env"', { rule: ".env", why: "sensitive_file" }],
    ["printf '[core]\\n\\tfsmonitor = true\\n' > \"$HOME/.gitconfig\"", { rule: ".gitconfig", why: "sensitive_file" }],
  ];
  for (const [script, expected] of cases) {
    const m = marker("bp-home");
    await mustRefuse(t, c, a.agent, `${guard(m)}${script}`, expected, [m]);
    await mustRefuse(t, c, a.plain, `${guard(m)}${script}`, expected, [m]);
  }
  // $HOME itself is still an ordinary argument.
  await allowed(t, c, a.agent, 'ls $HOME > /dev/null && echo "$HOME" > /dev/null');
});

// Programs an operator may well allowlist run a command named by an option: tar's --to-command,
// -I/--use-compress-program, --checkpoint-action=exec=…, --info-script/-F; sort's
// --compress-program; rsync's -e/--rsh; zip's -TT; man's -P; ssh's -o ProxyCommand/LocalCommand.
// With tar allowlisted, `tar --checkpoint=1 --checkpoint-action=exec='touch P' -cf x.tar f` ran touch.
test("closed bypass: options that make an allowlisted program run a command (tar, sort, rsync, zip, man, ssh) are checked as the command they name (expected not_in_allowlist, denied_by_server)", async (t) => {
  const policy = new CommandPolicy({ defaultAction: "", allow: ["tar", "sort", "rsync", "zip", "man", "ssh", "cat", "gzip"], deny: [] });
  for (const script of [
    "tar -cf x.tar --to-command='touch P' .",
    "tar -I 'touch P' -cf x .",
    "tar --use-compress-program='touch P' -cf x .",
    "tar --checkpoint=1 --checkpoint-action=exec='touch P' -cf x.tar f",
    "tar -cf x --info-script='touch P' .",
    "sort --compress-program='touch P' f",
    "rsync -e 'touch P' a h:c",
    "rsync --rsh='touch P' a h:c",
    "zip -T -TT 'touch P' x.zip f",
    "man -P 'touch P' ls",
    "ssh -o ProxyCommand='touch P' h",
    "ssh -o 'LocalCommand touch P' -o PermitLocalCommand=yes h",
  ]) {
    t.like(await policy.check(script), { command: "touch P", why: "not_in_allowlist" }, script);
  }
  t.like(await new CommandPolicy().check("tar -I 'rm -rf /' -cf x ."), { why: "denied_by_server" });
  // What the allowlist names still runs through them, and everyday use is untouched.
  for (const script of ["tar -xzf a.tar.gz", "tar -I gzip -cf x .", "tar --checkpoint-action=dot -cf x .", "sort -u f", "rsync -avz a b", "zip -T x.zip f", "man -P cat ls", "ssh -o BatchMode=yes h"]) {
    t.is(await policy.check(script), undefined, script);
  }
});

// A program named by a path without a slash left once normalised (`./git`, `.git/../git`) was
// judged by its base name, so a script the agent wrote and called `git` ran as the allowlist's git.
bypass("a workspace file named like an allowed program: ./git and .git/../git run a script the agent wrote (expected not_in_allowlist)", async (t, a, c) => {
  for (const spelling of ["./git", ".git/../git"]) {
    const [m, p] = [marker("bp-dotslash"), marker("bp-dotslash-p")];
    const script = `${guard(m)}printf '#!/bin/sh\\ntouch ${p}\\n' > git; python3 -c "import os; os.chmod('git', 0o755)"; ${spelling} status`;
    await mustRefuse(t, c, a.agent, script, { command: `${spelling} status`, rule: "", why: "not_in_allowlist" }, [m, p]);
  }
  // The allowlist's git, by name or from a system directory, still runs.
  await allowed(t, c, a.agent, "git --version && /usr/bin/git --version");
});

// The fork-bomb check read only calls written as commands; one inside a literal eval string was
// invisible, so `f(){ eval 'f | f &'; }; f` passed.
bypass("a fork bomb inside an eval string: f(){ eval 'f | f &'; }; f (expected fork_bomb, rule f)", async (t, a, c) => {
  const m = marker("bp-bomb-eval");
  await mustRefuse(t, c, a.plain, `${guard(m)}exit 0; f(){ eval 'f | f &'; }; f`, { rule: "f", why: "fork_bomb" }, [m]);
  // Ordinary recursion, even through eval, runs.
  t.is((await allowed(t, c, a.plain, "f(){ [ $1 -gt 0 ] && { echo $1; eval 'f $(($1-1))'; }; return 0; }; f 2")).stdout, "2\n1\n");
});

// ── Bypass families found against a realistic allowlist (the parser's side of the issue) ────────

/** An agent type with the allowlist a team would really write: git, tar, env, rg, sort and the usual tools; `git push` denied. */
const REALISTIC = "red-team-realistic";
const REALISTIC_ALLOW = ["git", "tar", "env", "rg", "sort", "cat", "cp", "mv", "ln", "rm", "mkdir", "chmod", "ls", "echo", "grep", "find", "xargs", "sed", "head", "tail", "wc", "curl"];
const IDENTITY = "-c user.name=agent -c user.email=agent@example.invalid";
let realistic: Promise<{ id: string; root: string }> | undefined;

/** Its workspace on local: a repository with one commit, a committed `.env` and an archive of a hook (made with computed names). */
function realisticWorkspace(c: ClientSet): Promise<{ id: string; root: string }> {
  realistic ??= (async () => {
    await c.config.createAgentType({ agentType: { id: REALISTIC, workspace: { enabled: true, tools: ["bash", "read", "write", "list"], commandPolicy: { defaultAction: "", allow: REALISTIC_ALLOW, deny: ["git push"] } } } });
    const { workspace } = await c.workspaces.createWorkspace({ provider: "local", agentType: REALISTIC });
    const id = workspace?.id as string;
    const fixture = [
      "git init -q . && mkdir -p sub staged",
      `n=.env; echo "API_KEY=${SECRET.env}" > $n && git add "$n" && git ${IDENTITY} commit -q -m base`,
      `n=.ssh; mkdir -p "$n" && echo "KEY ${SECRET.key}" > "$n/id_ed25519"`,
      "printf 'a\\n' > a.txt && printf '# readme\\n' > README.md && git add a.txt README.md && git " + IDENTITY + " commit -q -m files",
      "pwd -P",
    ].join("\n");
    const root = (await sh(c, id, fixture)).trim().split("\n").at(-1) as string;
    hostLeftovers.add(path.join(root, ".never"));
    return { id, root };
  })();
  return realistic;
}

/** A hook that makes `marker` in the workspace root, in h/<name> (the setup of a hook attack, part of the refused script). */
const hookIn = (name: string, marker: string) => `mkdir -p h && printf '#!/bin/sh\\ntouch ${marker}\\n' > h/${name} && chmod +x h/${name}`;
const commit = `git ${IDENTITY} commit -q --allow-empty -m x`;

// A git hook put in place without naming the protected path ran at the next allowlisted `git
// commit`: copied or moved into .git/hooks/ (a directory destination), linked (.git/hooks replaced
// by a link to the agent's directory), unpacked there with tar -C, or written into .git renamed
// away and back. Each names only a directory, or a name the rules did not protect.
bypass("a git hook put in place without naming its path, then run by git commit: cp/mv into .git/hooks/, ln -s over .git/hooks, tar -C .git/hooks -x, mv .git away and back (expected sensitive_file)", async (t, _a, c) => {
  const w = await realisticWorkspace(c);
  const cases: Array<[(p: string) => string, string]> = [
    [(p) => `${hookIn("pre-commit", p)} && cp h/pre-commit .git/hooks/ && ${commit}`, ".git/**/hooks/**"],
    [(p) => `${hookIn("pre-commit", p)} && mv h/pre-commit .git/hooks/ && ${commit}`, ".git/**/hooks/**"],
    [(p) => `${hookIn("pre-commit", p)} && cp -r h/. .git/hooks && ${commit}`, ".git/**/hooks/**"],
    [(p) => `${hookIn("pre-commit", p)} && rm -rf .git/hooks && ln -s ../h .git/hooks && ${commit}`, ".git/**/hooks/**"],
    [(p) => `${hookIn("pre-commit", p)} && tar -cf hook.tar -C h pre-commit && tar -C .git/hooks -xf hook.tar && ${commit}`, ".git/**/hooks/**"],
    [(p) => `mv .git g && ${hookIn("pre-commit", p)} && cp h/pre-commit g/hooks/pre-commit && mv g .git && ${commit}`, ".git/**/hooks/**"],
  ];
  for (const [script, rule] of cases) {
    const [m, p] = [marker("bp-hook"), marker("bp-hook-p")];
    await mustRefuse(t, c, w.id, `${guard(m)}${script(p)}`, { rule, why: "sensitive_file" }, [m, p]);
  }
  // Look-alikes: the same programs moving files anywhere else, and the commit, run.
  await allowed(t, c, w.id, `${hookIn("pre-commit", "never")} && mkdir -p backup && cp h/pre-commit backup/ && mv backup/pre-commit backup/hook && ln -sfn h h-link && tar -cf hook.tar -C h pre-commit && tar -C staged -xf hook.tar && ${commit}`);
});

// git reads configuration that runs commands from places the rules did not watch: a worktree's own
// config.worktree (with extensions.worktreeConfig on), a repository made with --separate-git-dir
// (its config and hooks in a directory of any name), a --git-dir of any name; and difftool.<tool>.cmd
// was not among the refused keys.
bypass("git configuration that runs commands where the rules did not look: extensions.worktreeConfig + config.worktree, git init --separate-git-dir, --git-dir, difftool.<tool>.cmd (expected computed_at_run_time, sensitive_file)", async (t, _a, c) => {
  const w = await realisticWorkspace(c);
  const fsmonitor = (p: string) => `printf '[core]\\n\\tfsmonitor = touch ${p}\\n'`;
  const cases: Array<[(p: string) => string, Partial<Expected>]> = [
    [(p) => `git config extensions.worktreeConfig true && ${fsmonitor(p)} > .git/config.worktree && git status`, { rule: "extensions.worktreeConfig", why: "computed_at_run_time" }],
    [(p) => `${fsmonitor(p)} > .git/config.worktree && git status`, { rule: ".git/**/config.worktree", why: "sensitive_file" }],
    [(p) => `git init -q --separate-git-dir=gd sub && ${fsmonitor(`../${p}`)} >> gd/config && git -C sub status`, { rule: "--separate-git-dir", why: "computed_at_run_time" }],
    [(p) => `git init -q --bare gd2 && ${fsmonitor(p)} >> gd2/config && git --git-dir=gd2 --work-tree=. status`, { rule: "--git-dir", why: "computed_at_run_time" }],
    [(p) => `echo b > a.txt && git -c difftool.x.cmd='touch ${p}' difftool -y -t x`, { rule: "difftool.x.cmd", why: "computed_at_run_time" }],
    [(p) => `echo b > a.txt && git config difftool.x.cmd 'touch ${p}' && git difftool -y -t x`, { rule: "difftool.x.cmd", why: "computed_at_run_time" }],
    [(p) => `echo b > a.txt && git -c mergetool.x.cmd='touch ${p}' mergetool -y -t x`, { rule: "mergetool.x.cmd", why: "computed_at_run_time" }],
  ];
  for (const [script, expected] of cases) {
    const [m, p] = [marker("bp-gitelse"), marker("bp-gitelse-p")];
    await mustRefuse(t, c, w.id, `${guard(m)}${script(p)}`, expected, [m, p]);
  }
  // The same extension turned on by hand (the policy cannot know who did): config.worktree stays protected.
  await writeFile(path.join(w.root, ".git", "config"), "[extensions]\n\tworktreeConfig = true\n", { flag: "a" });
  const [m, p] = [marker("bp-gitelse"), marker("bp-gitelse-p")];
  await mustRefuse(t, c, w.id, `${guard(m)}${fsmonitor(p)} > .git/config.worktree && git status`, { rule: ".git/**/config.worktree", why: "sensitive_file" }, [m, p]);
  // Look-alikes: configuration that runs nothing, a repository of the usual shape, difftool's help.
  await allowed(t, c, w.id, "git config user.name agent && git config --list > /dev/null && git init -q sub2 && git --git-dir=.git status --short > /dev/null && git checkout -q a.txt");
  // On its own, with a hang guard of its own: --tool-help sources every merge tool's script (3.5 s
  // of CPU on an idle host), which passed the 30 s of the others twice in a loaded CI.
  await allowed(t, c, w.id, "git difftool --tool-help > /dev/null", { timeoutMs: 110_000 });
});

// Secret files were found only by names spelled out: a glob with a bracket class or a brace range,
// $PWD, $(pwd) or $OLDPWD in front of the name, the file read from git's object database (git show
// REV:PATH, git cat-file), or the directory holding it read whole (grep -r, rg, tar, cp -r) all
// printed a secret under the allowlist.
bypass("secret files named by glob classes, brace ranges, $PWD/$(pwd)/$OLDPWD, read from git's objects, or read as a whole directory: cat .[[:alpha:]]nv, cat .{d..f}nv, cat $PWD/.env, git show HEAD:.env, grep -r KEY .ssh (expected sensitive_file)", async (t, _a, c) => {
  const w = await realisticWorkspace(c);
  for (const script of [
    "cat .[[:alpha:]]nv",
    "cat .[!x]nv",
    "cat .{d..f}nv",
    "cat .e{m..o}v",
    "cat .en?",
    'cat "$PWD/.env"',
    "cat $(pwd)/.env",
    "cat `pwd`/.env",
    'cd sub && cat "$OLDPWD/.env"',
    "cat ~+/.env",
    "git show HEAD:.env",
    "git show HEAD:./.env",
    "git cat-file -p HEAD:.env",
    "git show :.env",
    "git show :0:.env",
    // A directory of secrets, read whole.
    "grep -r KEY .ssh",
    "rg KEY .ssh",
    "tar -czf - .ssh | wc -c",
    "cp -r .ssh stolen",
  ]) {
    const m = marker("bp-secret");
    await mustRefuse(t, c, w.id, `${guard(m)}${script}`, { rule: script.includes(".ssh") ? ".ssh/**" : ".env", why: "sensitive_file" }, [m, "stolen"]);
  }
  // Look-alikes: globs and revisions naming other files.
  const r = await allowed(t, c, w.id, 'cat *.md && cat [a]*.txt && cat {a,README}.* > /dev/null && cat "$PWD/a.txt" && git show HEAD:README.md && git cat-file -p HEAD:a.txt && echo "$PWD" > /dev/null && grep -rn KEY sub/ ; rg -n .ssh README.md; grep -c .env README.md; true');
  t.false(r.stdout.includes(SECRET.env) || r.stdout.includes(SECRET.key));
});

// A program's own configuration taken from the environment was never read: RIPGREP_CONFIG_PATH named a
// file of rg options holding --pre, TAR_OPTIONS held --to-command or --checkpoint-action, as a prefix,
// an export or an env assignment.
bypass("a program's configuration from the environment: RIPGREP_CONFIG_PATH with --pre, TAR_OPTIONS with --to-command or --checkpoint-action (expected computed_at_run_time, not_in_allowlist)", async (t, _a, c) => {
  const w = await realisticWorkspace(c);
  await sh(c, w.id, "tar -cf a.tar a.txt && mkdir -p tools");
  const cases: Array<[(p: string) => string, Partial<Expected>]> = [
    [(p) => `printf '#!/bin/sh\\ntouch ${p}\\ncat "$1"\\n' > tools/pre.sh && chmod +x tools/pre.sh && echo '--pre=tools/pre.sh' > rg.conf && RIPGREP_CONFIG_PATH=rg.conf rg a a.txt`, { rule: "RIPGREP_CONFIG_PATH", why: "computed_at_run_time" }],
    [(p) => `export RIPGREP_CONFIG_PATH=rg.conf; printf '#!/bin/sh\\ntouch ${p}\\n' > tools/pre.sh; rg a a.txt`, { rule: "RIPGREP_CONFIG_PATH", why: "computed_at_run_time" }],
    // tar splits the variable into words as a shell would, quotes included.
    [(p) => `TAR_OPTIONS="--to-command='touch ${p}'" tar -xf a.tar`, { command: "touch P", why: "not_in_allowlist" }],
    [(p) => `export TAR_OPTIONS="--checkpoint=1 --checkpoint-action=exec='touch ${p}'"; tar -tf a.tar`, { command: "touch P", why: "not_in_allowlist" }],
    [(p) => `env TAR_OPTIONS="--to-command='touch ${p}'" tar -xf a.tar`, { command: "touch P", why: "not_in_allowlist" }],
  ];
  for (const [script, expected] of cases) {
    const [m, p] = [marker("bp-env"), marker("bp-env-p")];
    const want = Object.fromEntries(Object.entries(expected).map(([k, v]) => [k, String(v).replace("touch P", `touch ${p}`)]));
    await mustRefuse(t, c, w.id, `${guard(m)}${script(p)}`, want, [m, p]);
  }
  // Look-alikes: options that run nothing, rg without a configuration file.
  await allowed(t, c, w.id, "TAR_OPTIONS=--verbose tar -tf a.tar > /dev/null && env TAR_OPTIONS=--warning=no-timestamp tar -tf a.tar > /dev/null && rg --no-config -c a a.txt > /dev/null");
});

// Options were matched by their full names only, while GNU getopt_long, argp and git's parse-options
// take any unambiguous prefix: --upload-pac, --exe, env --split-s, sort --compress-prog, tar
// --to-comm, git clone --templ each ran a command of the caller's choosing.
bypass("GNU long options abbreviated: git ls-remote --upload-pac=, git rebase --exe=, env --split-s=, sort --compress-prog=, tar --to-comm=, git clone --templ= (expected not_in_allowlist, computed_at_run_time)", async (t, _a, c) => {
  const w = await realisticWorkspace(c);
  await sh(c, w.id, "tar -cf a.tar a.txt && mkdir -p tools tpl/hooks");
  // sort spills to temporary files (compressed with the program) once its buffer is full.
  await writeFile(path.join(w.root, "big.txt"), Array.from({ length: 20_000 }, (_, i) => `${(i * 7919) % 20_000}`).join("\n"));
  const tool = (p: string) => `printf '#!/bin/sh\\ntouch ${p}\\ncat\\n' > tools/t.sh && chmod +x tools/t.sh`;
  const cases: Array<[(p: string) => string, Partial<Expected>]> = [
    [(p) => `git ls-remote --upload-pac='touch ${p}' .`, { command: "touch P", why: "not_in_allowlist" }],
    [(p) => `git ${IDENTITY} rebase -q --exe='touch ${p}' HEAD~1`, { command: "touch P", why: "not_in_allowlist" }],
    [(p) => `env --split-s='touch ${p}'`, { command: "touch P", why: "not_in_allowlist" }],
    [(p) => `${tool(p)} && sort -S 16k --compress-prog=tools/t.sh big.txt > /dev/null`, { command: "tools/t.sh", why: "not_in_allowlist" }],
    [(p) => `tar --to-comm='touch ${p}' -xf a.tar`, { command: "touch P", why: "not_in_allowlist" }],
    [(p) => `printf '#!/bin/sh\\ntouch ../${p}\\n' > tpl/hooks/post-checkout && chmod +x tpl/hooks/post-checkout && git clone -q --templ=tpl . clone-${p}`, { rule: "--template", why: "computed_at_run_time" }],
  ];
  for (const [script, expected] of cases) {
    const [m, p] = [marker("bp-abbrev"), marker("bp-abbrev-p")];
    const want = Object.fromEntries(Object.entries(expected).map(([k, v]) => [k, String(v).replace("touch P", `touch ${p}`)]));
    await mustRefuse(t, c, w.id, `${guard(m)}${script(p)}`, want, [m, p, `clone-${p}`]);
  }
  // Look-alikes: abbreviations of options that run nothing.
  await allowed(t, c, w.id, `git ls-remote --hea . > /dev/null && tar --to-std -xf a.tar > /dev/null && env --unset=X true && sort --rev a.txt > /dev/null && git ${IDENTITY} commit -q --allow-empty --allow-empty-m -m ''`);
});

// A directory argument landed files in a write-protected tree: each of these names only a directory,
// and the file it writes there (.vscode/settings.json, a hook) was never named.
bypass("a directory argument that lands files in a write-protected tree: cp dir/settings.json .vscode/, cp x .git/hooks/, mv hooks .git/, tar -C .git/hooks -x, cp -t .git/hooks, find -exec cp {} .git/hooks/, env -C .git/hooks cp (expected sensitive_file)", async (t, _a, c) => {
  const w = await realisticWorkspace(c);
  await sh(c, w.id, "mkdir -p .vscode dir && echo '{}' > dir/settings.json && tar -cf s.tar -C dir settings.json");
  const cases: Array<[string, string]> = [
    ["cp dir/settings.json .vscode/", ".vscode/settings.json"],
    ["cp -t .vscode dir/settings.json", ".vscode/settings.json"],
    ["cp --target-dir=.vscode dir/settings.json", ".vscode/settings.json"],
    ["mv dir/settings.json .vscode", ".vscode/settings.json"],
    ["tar -C .vscode -xf s.tar", ".vscode/settings.json"],
    ["cp a.txt .git/hooks/", ".git/**/hooks/**"],
    ["mkdir -p hooks && mv hooks .git/", ".git/**/hooks/**"],
    ["tar -C .git/hooks -xf s.tar", ".git/**/hooks/**"],
    ["tar xf s.tar -C .git", ".git/**/hooks/**"],
    // A source named at run time lands under a name the policy cannot know, which a rule taking every name refuses.
    ["find . -maxdepth 1 -name a.txt -exec cp {} .git/hooks/ \\;", ".git/**/hooks/**"],
    ["echo a.txt | xargs -I{} cp {} .git/hooks/", ".git/**/hooks/**"],
    // A command run in another directory writes there.
    ["env -C .git/hooks cp ../../a.txt .", ".git/**/hooks/**"],
    // A download's directory (file:// needs no network).
    ["curl -s -o pre-commit --output-dir .git/hooks file:///etc/hostname", ".git/**/hooks/**"],
  ];
  for (const [script, rule] of cases) {
    const m = marker("bp-dest");
    await mustRefuse(t, c, w.id, `${guard(m)}${script}`, { rule, why: "sensitive_file" }, [m]);
  }
  t.is(await sh(c, w.id, "ls -A .vscode"), "", "nothing landed in .vscode");
  // Look-alikes: the same commands with a destination the rules leave alone.
  await allowed(t, c, w.id, "mkdir -p out && cp dir/settings.json out/ && cp -t out a.txt && tar -C out -xf s.tar && cp -r dir out/ && echo '{}' > .vscode/launch.json.tmp && mv .vscode/launch.json.tmp .vscode/launch.json");
});
