/**
 * The jail, table-driven: how a caller's path maps into the workspace (lexically), and how a
 * mapped path resolves on a real directory tree with links, without a server in between.
 */
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import { hasReason } from "../core/errors.ts";
import { displayPath, resolveOnHost, toWorkspacePath } from "../providers/jail.ts";

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
  for (const input of outside) {
    t.true(hasReason(captured(() => toWorkspacePath(input)), "PATH_OUTSIDE_WORKSPACE"), JSON.stringify(input));
  }
  t.true(hasReason(captured(() => toWorkspacePath("a/".repeat(3000))), "INVALID_ARGUMENT"));
  t.is(displayPath(""), ".");
  t.is(displayPath("a/b"), "a/b");
});

function captured(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

test("resolveOnHost follows links that stay inside and refuses links that leave, dangling ones included", async (t) => {
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
    const rootReal = await realpath(root);
    const inside: Array<[string, string, boolean]> = [
      ["rel-dir/deep/f.txt", "src/deep/f.txt", true],
      ["abs-dir/f.txt", "src/deep/f.txt", true],
      ["src/deep/../deep/f.txt", "src/deep/f.txt", true],
      ["dangling-in", "missing-inside", false],
      ["new/dir/file", "new/dir/file", false],
    ];
    for (const [rel, want, exists] of inside) {
      const r = await resolveOnHost(rootReal, rel, true);
      t.deepEqual([r.rel, r.exists], [want, exists], rel);
    }
    // Not following the final link (delete removes the link, never its target).
    t.is((await resolveOnHost(rootReal, "etc", false)).rel, "etc");
    for (const rel of ["sibling", "sibling/x", "etc/passwd", "dangling-out", "rel-dir/../../x"]) {
      t.true(hasReason(await resolveOnHost(rootReal, rel, true).catch((e: unknown) => e), "PATH_OUTSIDE_WORKSPACE"), rel);
    }
    t.true(hasReason(await resolveOnHost(rootReal, "loop-a", true).catch((e: unknown) => e), "INVALID_ARGUMENT"));
    t.true(hasReason(await resolveOnHost(rootReal, "src/deep/f.txt/x", true).catch((e: unknown) => e), "NOT_A_DIRECTORY"));
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});
