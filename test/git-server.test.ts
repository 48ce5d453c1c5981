/**
 * The git smart-HTTP fixture is a real git server: the real `git` client, with a clean
 * configuration and the token only ever in a `-c http.extraHeader` argument, clones branches with
 * exec bits and symlinks intact; a clone without credentials or with a wrong token fails on a 401;
 * a public repository needs none; protocol v2 is spoken when the client asks for it, and gzipped
 * requests are understood; close() ends a clone that is still waiting for an answer.
 */
import { execFile } from "node:child_process";
import { lstat, mkdtemp, readFile, readlink, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import anyTest, { type TestFn } from "ava";
import { startGitServer, type GitServer, type RepoSpec } from "./helpers/git-server.ts";

const TOKEN = "ghs-test-token-5d1f0c2b9a8e7d6c";
const AUTH = `Authorization: Basic ${Buffer.from(`x-access-token:${TOKEN}`).toString("base64")}`;
const WRONG_AUTH = `Authorization: Basic ${Buffer.from("x-access-token:ghs-wrong-token").toString("base64")}`;

/** The contents of every private repository. */
const PRIVATE: RepoSpec = {
  branches: {
    main: { "README.md": "hello from main\n", "src/index.ts": "export const x = 1;\n" },
    feature: {
      "README.md": "hello from feature\n",
      "run.sh": { content: "#!/bin/sh\necho hi\n", mode: "100755" },
      "link-to-readme": { content: "README.md", mode: "120000" },
    },
  },
};

const test = anyTest as TestFn<{ server: GitServer; dir: string; commits: Record<string, string> }>;

test.before(async (t) => {
  t.context.dir = await mkdtemp(path.join(tmpdir(), "aw-git-client-"));
  t.context.server = await startGitServer({ token: TOKEN, publicRepos: ["open"] });
  // One repository per test that reads the request log, since the tests of a file run concurrently.
  const names = ["private", "anonymous", "wrong", "v2", "v0"];
  const created = await Promise.all(names.map((name) => t.context.server.createRepo(name, PRIVATE)));
  t.context.commits = created[0].commits;
  // Commits have fixed authors and dates: equal specs give equal shas.
  t.true(created.every((c) => c.commits.feature === t.context.commits.feature));
  await t.context.server.createRepo("open", {
    defaultBranch: "trunk",
    branches: { trunk: { "PUBLIC.md": "anyone may read\n" } },
    setup: (workTree) => writeFile(path.join(workTree, "generated.txt"), "written by setup\n"),
  });
  // Forty branches: the wants of a clone exceed 1 KiB, so git gzips its upload-pack request.
  const many: RepoSpec["branches"] = { main: { "n.txt": "main\n" } };
  for (let i = 0; i < 40; i++) many[`branch-${i}`] = { "n.txt": `${i}\n` };
  await t.context.server.createRepo("many", { branches: many });
});
test.after.always(async (t) => {
  await t.context.server?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/** Runs the real git with no system or global configuration, an empty HOME and no prompting. */
function git(cwd: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      "git",
      args,
      {
        cwd,
        timeout: 60_000,
        killSignal: "SIGKILL",
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", GIT_TERMINAL_PROMPT: "0", ...env },
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** A fresh directory (also the HOME of the git run there) for one clone. */
async function scratch(dir: string, name: string): Promise<string> {
  return mkdtemp(path.join(dir, `${name}-`));
}

test("a clone with the token gets the default branch", async (t) => {
  const { server, dir, commits } = t.context;
  const cwd = await scratch(dir, "default");
  const r = await git(cwd, ["-c", `http.extraHeader=${AUTH}`, "clone", "-q", server.repoUrl("private"), "out"]);
  t.is(r.code, 0, r.stderr);
  t.is(await readFile(path.join(cwd, "out/README.md"), "utf8"), "hello from main\n");
  t.is(await readFile(path.join(cwd, "out/src/index.ts"), "utf8"), "export const x = 1;\n");
  t.is((await git(path.join(cwd, "out"), ["rev-parse", "HEAD"])).stdout.trim(), commits.main);
  t.is((await git(path.join(cwd, "out"), ["symbolic-ref", "--short", "HEAD"])).stdout.trim(), "main");
  // The token travelled only as a header: nothing in the clone's configuration mentions it.
  t.false((await readFile(path.join(cwd, "out/.git/config"), "utf8")).includes(TOKEN));
  t.false((await readFile(path.join(cwd, "out/.git/config"), "utf8")).includes("Authorization"));
});

test("a clone of another branch keeps the exec bit and the symlink", async (t) => {
  const { server, dir, commits } = t.context;
  const cwd = await scratch(dir, "branch");
  const r = await git(cwd, ["-c", `http.extraHeader=${AUTH}`, "clone", "-q", "--branch", "feature", server.repoUrl("private"), "out"]);
  t.is(r.code, 0, r.stderr);
  const out = path.join(cwd, "out");
  t.is(await readFile(path.join(out, "README.md"), "utf8"), "hello from feature\n");
  t.is((await stat(path.join(out, "run.sh"))).mode & 0o111, 0o111);
  t.true((await lstat(path.join(out, "link-to-readme"))).isSymbolicLink());
  t.is(await readlink(path.join(out, "link-to-readme")), "README.md");
  // The branch's tree is exactly its files, and its commit sits on top of main's.
  t.deepEqual((await git(out, ["ls-files", "-s"])).stdout.trim().split("\n").map((l) => `${l.split(" ")[0]} ${l.split("\t")[1]}`), [
    "100644 README.md",
    "120000 link-to-readme",
    "100755 run.sh",
  ]);
  t.is((await git(out, ["rev-parse", "HEAD"])).stdout.trim(), commits.feature);
  t.is((await git(out, ["rev-parse", "HEAD^"])).stdout.trim(), commits.main);
});

test("a clone without credentials fails on a 401", async (t) => {
  const { server, dir } = t.context;
  const cwd = await scratch(dir, "anonymous");
  const before = server.requests.length;
  const r = await git(cwd, ["clone", "-q", server.repoUrl("anonymous"), "out"]);
  t.not(r.code, 0);
  const seen = server.requests.slice(before).filter((q) => q.path === "/anonymous.git/info/refs");
  t.true(seen.length > 0);
  t.true(seen.every((q) => q.status === 401 && !q.authorized && q.authorization === undefined));
  await t.throwsAsync(stat(path.join(cwd, "out/README.md")));
});

test("a clone with a wrong token fails on a 401", async (t) => {
  const { server, dir } = t.context;
  const cwd = await scratch(dir, "wrong");
  const before = server.requests.length;
  const r = await git(cwd, ["-c", `http.extraHeader=${WRONG_AUTH}`, "clone", "-q", server.repoUrl("wrong"), "out"]);
  t.not(r.code, 0);
  const seen = server.requests.slice(before).filter((q) => q.path === "/wrong.git/info/refs");
  t.true(seen.length > 0);
  t.true(seen.every((q) => q.status === 401 && !q.authorized && q.authorization === WRONG_AUTH.slice("Authorization: ".length)));
  await t.throwsAsync(stat(path.join(cwd, "out/README.md")));
});

test("a public repository clones without credentials", async (t) => {
  const { server, dir } = t.context;
  const cwd = await scratch(dir, "public");
  const r = await git(cwd, ["clone", "-q", server.repoUrl("open"), "out"]);
  t.is(r.code, 0, r.stderr);
  t.is(await readFile(path.join(cwd, "out/PUBLIC.md"), "utf8"), "anyone may read\n");
  t.is((await git(path.join(cwd, "out"), ["symbolic-ref", "--short", "HEAD"])).stdout.trim(), "trunk");
  t.is(await readFile(path.join(cwd, "out/generated.txt"), "utf8"), "written by setup\n");
});

test("protocol v2 is spoken when the client asks for it", async (t) => {
  const { server, dir } = t.context;
  const cwd = await scratch(dir, "v2");
  const trace = path.join(cwd, "trace.txt");
  const before = server.requests.length;
  const r = await git(cwd, ["-c", "protocol.version=2", "-c", `http.extraHeader=${AUTH}`, "clone", "-q", server.repoUrl("v2"), "out"], { GIT_TRACE_PACKET: trace });
  t.is(r.code, 0, r.stderr);
  const seen = server.requests.slice(before);
  const posts = seen.filter((q) => q.method === "POST" && q.path === "/v2.git/git-upload-pack");
  // v2 asks for refs (ls-refs) and then for the pack (fetch) in two POSTs; v0 needs one.
  t.true(posts.length >= 2, JSON.stringify(seen));
  t.true(posts.every((q) => q.status === 200 && q.authorized));
  const packets = await readFile(trace, "utf8");
  t.regex(packets, /git< version 2/);
  t.regex(packets, /> command=ls-refs/);
  t.regex(packets, /> command=fetch/);
});

test("protocol v0 still works when the client asks for it", async (t) => {
  const { server, dir } = t.context;
  const cwd = await scratch(dir, "v0");
  const before = server.requests.length;
  const r = await git(cwd, ["-c", "protocol.version=0", "-c", `http.extraHeader=${AUTH}`, "clone", "-q", server.repoUrl("v0"), "out"]);
  t.is(r.code, 0, r.stderr);
  const posts = server.requests.slice(before).filter((q) => q.method === "POST" && q.path === "/v0.git/git-upload-pack");
  t.is(posts.length, 1);
  t.is(await readFile(path.join(cwd, "out/README.md"), "utf8"), "hello from main\n");
});

test("a gzipped upload-pack request is served", async (t) => {
  const { server, dir } = t.context;
  const cwd = await scratch(dir, "gzip");
  const trace = path.join(cwd, "curl.txt");
  const r = await git(cwd, ["-c", "protocol.version=2", "-c", `http.extraHeader=${AUTH}`, "clone", "-q", server.repoUrl("many"), "out"], {
    GIT_TRACE_CURL: trace,
    GIT_TRACE_CURL_NO_DATA: "1",
  });
  t.is(r.code, 0, r.stderr);
  t.regex(await readFile(trace, "utf8"), /Content-Encoding: gzip/i);
  t.is((await git(path.join(cwd, "out"), ["branch", "-r"])).stdout.split("\n").filter((l) => l.includes("origin/branch-")).length, 40);
});

test("close() ends a clone that is still waiting for an answer", async (t) => {
  const { dir } = t.context;
  const slow = await startGitServer({ token: TOKEN, publicRepos: ["slow"] });
  try {
    await slow.createRepo("slow", { branches: { main: { "a.txt": "a\n" } } });
    slow.delayMs = 30_000;
    const cwd = await scratch(dir, "slow");
    const clone = git(cwd, ["clone", "-q", slow.repoUrl("slow"), "out"]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const started = Date.now();
    await slow.close();
    const r = await clone;
    t.not(r.code, 0);
    t.true(Date.now() - started < 10_000, "close() and the failed clone do not wait for the delay");
  } finally {
    await slow.close();
  }
});
