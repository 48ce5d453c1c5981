/**
 * The jail, table-driven: how a caller's path maps into the workspace (lexically), and how a
 * mapped path resolves on a real directory tree with links, without a server in between.
 */
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import { Fault } from "../providers/executor/fault.ts";
import { displayPath, Jail, toWorkspacePath } from "../providers/executor/jail.ts";

test("toWorkspacePath maps relative and /workspace paths, and refuses every way out", (t) => {
  const ok: Array<[string, string]> = [
    ["", ""],
    [".", ""],
    ["/workspace", ""],
    ["/workspace/", ""],
    ["a.txt", "a.txt"],
    ["./a/./b/", "a/b"],
    ["a//b", "a/b"],
    ["/workspace/src/../lib/x.ts", "lib/x.ts"],
    ["a/..", ""],
    ["..a/b..", "..a/b.."],
    ["/workspace/...", "..."],
    ["dir with spaces/ü.txt", "dir with spaces/ü.txt"],
  ];
  for (const [input, want] of ok) t.is(toWorkspacePath(input), want, JSON.stringify(input));
  const outside = ["..", "../x", "a/../../x", "/etc/passwd", "/workspace-other/x", "/workspace/../etc", "/", "a\0b", "/workspacex"];
  for (const input of outside) t.is(reasonOf(() => toWorkspacePath(input)), "PATH_OUTSIDE_WORKSPACE", JSON.stringify(input));
  t.is(reasonOf(() => toWorkspacePath("a/".repeat(3000))), "INVALID_ARGUMENT");
  t.is(reasonOf(() => toWorkspacePath(`x/${"n".repeat(256)}`)), "INVALID_ARGUMENT");
  t.is(toWorkspacePath(`x/${"é".repeat(127)}`), `x/${"é".repeat(127)}`);
  t.is(reasonOf(() => toWorkspacePath(`x/${"é".repeat(128)}`)), "INVALID_ARGUMENT", "the limit is 255 bytes, not characters");
  t.is(displayPath(""), ".");
  t.is(displayPath("a/b"), "a/b");
});

/** The Fault reason `fn` throws, or "none". */
function reasonOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return err instanceof Fault ? err.reason : `not a Fault: ${String(err)}`;
  }
  return "none";
}

test("Jail.locate follows links that stay inside and refuses links that leave, dangling ones included", async (t) => {
  const base = await mkdtemp(path.join(tmpdir(), "aw-jail-"));
  try {
    const root = path.join(base, "ws");
    await mkdir(path.join(root, "src/deep"), { recursive: true });
    await writeFile(path.join(root, "src/deep/f.txt"), "x");
    await mkdir(path.join(base, "ws-secrets"));
    await symlink("src", path.join(root, "rel-dir"));
    await symlink("/workspace/src/deep", path.join(root, "abs-dir"));
    await symlink("../ws-secrets", path.join(root, "sibling"));
    await symlink("/etc", path.join(root, "etc"));
    await symlink("/nonexistent/x", path.join(root, "dangling-out"));
    await symlink("missing-inside", path.join(root, "dangling-in"));
    await symlink("loop-b", path.join(root, "loop-a"));
    await symlink("loop-a", path.join(root, "loop-b"));
    const jail = new Jail(await realpath(root));
    const locate = (rel: string, followFinal = true) => {
      const loc = jail.locate(rel, { followFinal });
      loc.release();
      return { rel: loc.rel, exists: loc.stat !== undefined };
    };
    const inside: Array<[string, string, boolean]> = [
      ["rel-dir/deep/f.txt", "src/deep/f.txt", true],
      ["abs-dir/f.txt", "src/deep/f.txt", true],
      ["src/deep/../deep/f.txt", "src/deep/f.txt", true],
      ["dangling-in", "missing-inside", false],
    ];
    for (const [rel, want, exists] of inside) t.deepEqual(locate(rel), { rel: want, exists }, rel);
    // Not following the final link (delete removes the link, never its target).
    t.deepEqual(locate("etc", false), { rel: "etc", exists: true });
    for (const rel of ["sibling", "sibling/x", "etc/passwd", "dangling-out", "rel-dir/../../x"]) t.is(reasonOf(() => locate(rel)), "PATH_OUTSIDE_WORKSPACE", rel);
    t.is(reasonOf(() => locate("loop-a")), "INVALID_ARGUMENT");
    t.is(reasonOf(() => locate("new/dir/file")), "FILE_NOT_FOUND");
    t.is(reasonOf(() => locate("src/deep/f.txt/x")), "NOT_A_DIRECTORY");
    jail.close();
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});
