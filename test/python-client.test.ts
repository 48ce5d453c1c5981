/**
 * The Python client (clients/python), as its users get it: scripts/gen-python.sh must reproduce
 * the checked-in generated modules byte for byte (how CI checks them, like `gen/`), and the
 * package must install with pip into a fresh virtual environment (Debian's grpcio and protobuf
 * through --system-site-packages, the build offline with --no-build-isolation) whose unittest
 * suite (clients/python/tests) then passes against a real server on a real socket: sessions,
 * bash, streams, files, grep, an error per reason family, cancellation, the asyncio client.
 * With REQUIRE_COMMANDS=1 (CI) a missing protoc, grpc_python_plugin or Python fails instead of
 * skipping.
 */
import { spawn } from "node:child_process";
import { cp, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { commandGate } from "./helpers/engines.ts";
import { ROOT } from "./helpers/process.ts";
import { LOCAL_ONLY, serverTest } from "./helpers/server.ts";

const KEY = "python-client-key-0123456789abcdef";
const PYTHON = "/usr/bin/python3";
const PACKAGE = path.join(ROOT, "clients/python");
const GENERATED = path.join(PACKAGE, "src/agent_workspace/_gen");

const test = serverTest({ env: LOCAL_ONLY, apiKeys: [KEY] });

interface Run {
  code: number | null;
  out: string;
}

/** Runs a program without blocking the event loop (the server answers from this process). */
function run(command: string, args: string[], options: { cwd?: string; env?: Record<string, string> } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd ?? ROOT, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, out }));
  });
}

/** Every file below `dir` (relative paths, sorted), bytecode caches left out. */
async function files(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && !e.parentPath.split(path.sep).includes("__pycache__"))
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
    .sort();
}

if (commandGate(test, ["bash", "-c", "protoc --version && command -v grpc_python_plugin && /usr/bin/python3 -c 'import google.protobuf'"], "Python client generation")) {
  test("scripts/gen-python.sh reproduces the checked-in generated modules byte for byte", async (t) => {
    const out = await mkdtemp(path.join(tmpdir(), "aw-gen-python-"));
    try {
      const gen = await run(path.join(ROOT, "scripts/gen-python.sh"), [out]);
      t.is(gen.code, 0, gen.out);
      const expected = await files(GENERATED);
      t.deepEqual(await files(out), expected, "the same files (run scripts/gen-python.sh and commit the result)");
      t.true(expected.includes("agentworkspace/v1/tool_pb2_grpc.py") && expected.includes("reasons.py"));
      for (const f of expected) {
        const [a, b] = await Promise.all([readFile(path.join(GENERATED, f)), readFile(path.join(out, f))]);
        t.true(a.equals(b), `${f} differs from what scripts/gen-python.sh makes now (run it and commit the result)`);
      }
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
}

if (commandGate(test, [PYTHON, "-c", "import grpc, google.protobuf, ensurepip, setuptools, wheel"], "Python client")) {
  test("the Python client installs with pip into a venv and its suite passes against the server (sessions, bash, streams, files, grep, errors, cancellation, asyncio)", async (t) => {
    t.timeout(300_000, "venv, pip install and the suite on a busy 2-core machine");
    const dir = await mkdtemp(path.join(tmpdir(), "aw-python-client-"));
    try {
      // A copy, so pip's in-tree build leaves nothing in the repository.
      const source = path.join(dir, "src");
      await cp(PACKAGE, source, { recursive: true, filter: (p) => !/(^|\/)(build|__pycache__|[^/]*\.egg-info)$/.test(p) });
      const venv = path.join(dir, "venv");
      const env: Record<string, string> = { PATH: `${venv}/bin:/usr/bin:/bin`, HOME: dir, LANG: "C.UTF-8", PIP_DISABLE_PIP_VERSION_CHECK: "1", PIP_NO_INPUT: "1" };
      const made = await run(PYTHON, ["-m", "venv", "--system-site-packages", venv], { env });
      t.is(made.code, 0, made.out);
      const pip = await run(path.join(venv, "bin/python"), ["-m", "pip", "install", "--no-index", "--no-build-isolation", source], { env });
      t.is(pip.code, 0, pip.out);
      t.regex(pip.out, /Successfully installed agent-workspace-0\.1\.0/);

      const where = await run(path.join(venv, "bin/python"), ["-c", "import agent_workspace; print(agent_workspace.__file__)"], { cwd: source, env });
      t.is(where.code, 0, where.out);
      t.true(where.out.trim().startsWith(path.join(venv, "lib")), `imported from the venv, not the source tree: ${where.out}`);

      const suite = await run(path.join(venv, "bin/python"), ["-m", "unittest", "discover", "-v", "-s", "tests", "-t", "."], {
        cwd: source,
        env: { ...env, AGENT_WORKSPACE_URL: t.context.server.url, AGENT_WORKSPACE_API_KEY: KEY },
      });
      t.is(suite.code, 0, suite.out);
      const ran = Number(/^Ran (\d+) tests? in/m.exec(suite.out)?.[1] ?? 0);
      t.true(ran >= 25, `the whole suite ran (${ran} tests):\n${suite.out}`);
      t.regex(suite.out, /^OK$/m, suite.out);
      t.notRegex(suite.out, /skipped/i, "nothing skipped");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}
