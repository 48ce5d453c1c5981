/**
 * The TypeScript client as a real package: `npm pack` of clients/ts (which builds it), installed
 * offline into a directory outside the repository together with its dependencies (packed from the
 * repository's node_modules, so no registry is needed), imported by plain `node` (no type
 * stripping: Node refuses it under node_modules) and used against the real server binary.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import test from "ava";
import { ROOT, startServerProcess } from "./helpers/process.ts";

const run = promisify(execFile);
const DEPENDENCIES = ["@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node"];

const APP = `
import { AgentWorkspace, FileNotFoundError, AgentWorkspaceError, Code } from "@agent-workspace/client";
const aw = new AgentWorkspace({ url: process.env.AW_URL, protocol: process.env.AW_PROTOCOL });
const info = await aw.workspaces.create({ provider: "local" });
const ws = aw.workspace(info.id);
const bash = await ws.bash("echo packed");
const chunks = [];
const run = ws.streamBash("printf 'na\\\\xc3'; sleep 0.2; printf '\\\\xafve'");
for await (const c of run) chunks.push(c.text);
let missing;
try { await ws.read("missing.txt"); } catch (err) { missing = err; }
await aw.workspaces.delete(info.id);
aw.close();
console.log(JSON.stringify({
  stdout: bash.stdout,
  streamed: chunks.join(""),
  exit: (await run.exit).exitCode,
  fileNotFound: missing instanceof FileNotFoundError && missing instanceof AgentWorkspaceError,
  reason: missing?.reason, code: missing?.code === Code.NotFound, path: missing?.metadata.path,
  resolved: import.meta.resolve("@agent-workspace/client"),
}));
`;

test("the packed client installs offline outside the repository and works with plain node against the real server", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-client-pack-"));
  const dataDir = await mkdtemp(path.join(tmpdir(), "aw-client-pack-data-"));
  const server = await startServerProcess({ dataDir });
  const started = performance.now();
  const step = (what: string) => t.log(`${what}: ${Math.round(performance.now() - started)} ms`);
  try {
    // npm pack runs the package's prepack script: the build of dist/.
    await Promise.all([
      run("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: path.join(ROOT, "clients/ts") }),
      ...DEPENDENCIES.map((dep) => run("npm", ["pack", "--silent", "--pack-destination", dir, path.join(ROOT, "node_modules", dep)])),
    ]);
    step("packed");
    const tarballs = (await readdir(dir)).filter((f) => f.endsWith(".tgz"));
    t.is(tarballs.length, 4);
    const app = path.join(dir, "app");
    await run("mkdir", [app]);
    await writeFile(path.join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--silent", ...tarballs.map((f) => path.join(dir, f))], { cwd: app });
    step("installed");
    await writeFile(path.join(app, "app.mjs"), APP);
    for (const protocol of ["grpc", "connect", "grpc-web"]) {
      const { stdout } = await run(process.execPath, ["app.mjs"], { cwd: app, env: { ...process.env, AW_URL: server.url, AW_PROTOCOL: protocol } });
      const out = JSON.parse(stdout) as Record<string, unknown>;
      t.like(out, { stdout: "packed\n", streamed: "naïve", exit: 0, fileNotFound: true, reason: "FILE_NOT_FOUND", code: true, path: "missing.txt" }, protocol);
      t.is(out.resolved, `file://${app}/node_modules/@agent-workspace/client/dist/index.js`, "the installed package's compiled JavaScript");
    }
  } finally {
    server.child.kill("SIGTERM");
    await server.stderrClosed;
    await rm(dir, { recursive: true, force: true });
    await rm(dataDir, { recursive: true, force: true });
  }
});
