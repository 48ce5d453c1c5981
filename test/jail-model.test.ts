/**
 * Property-based tests of the jail (fast-check): random trees of directories, files and symlinks
 * (relative targets, /workspace and host-absolute targets, targets outside, dangling ones and
 * loops) are built on disk, and every path resolved by `Jail.locate` must give what an
 * independent model of the rules gives, and must never end outside the root.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import fc from "fast-check";
import { Fault } from "../providers/executor/fault.ts";
import { at, Jail, toWorkspacePath } from "../providers/executor/jail.ts";

type Node = { kind: "dir"; children: Map<string, Node> } | { kind: "file" } | { kind: "link"; target: string };

const NAMES = ["a", "b", "c"];
/** Link targets; ROOT and OUTSIDE are replaced by the real directories when the tree is built. */
const TARGETS = [
  "a", "b", "a/b", "b/c", ".", "..", "../a", "../../a", "c/..", "missing", "a/missing",
  "/workspace", "/workspace/a", "/workspace/a/b", "/workspace/..", "ROOT/b", "ROOT",
  "/etc", "OUTSIDE", "OUTSIDE/a", "ROOT/../outside", "/workspace-sibling",
];

const tree = (depth: number): fc.Arbitrary<Node> =>
  fc
    .array(
      fc.tuple(
        fc.constantFrom(...NAMES),
        depth >= 3
          ? fc.oneof(fc.constant<Node>({ kind: "file" }), fc.constantFrom(...TARGETS).map((target): Node => ({ kind: "link", target })))
          : fc.oneof(
              fc.constant<Node>({ kind: "file" }),
              fc.constantFrom(...TARGETS).map((target): Node => ({ kind: "link", target })),
              fc.constant(null).chain(() => tree(depth + 1)),
            ),
      ),
      { maxLength: 3 },
    )
    .map((entries): Node => ({ kind: "dir", children: new Map(entries) }));

const queries = fc.array(fc.array(fc.constantFrom(...NAMES, "..", "."), { maxLength: 5 }).map((parts) => parts.join("/")), { minLength: 1, maxLength: 12 });

/** Builds `node` at `dir`. */
function build(dir: string, node: Node, root: string, outside: string): void {
  if (node.kind !== "dir") return;
  for (const [name, child] of node.children) {
    const p = path.join(dir, name);
    if (child.kind === "dir") {
      mkdirSync(p);
      build(p, child, root, outside);
    } else if (child.kind === "file") {
      writeFileSync(p, "x");
    } else {
      symlinkSync(child.target.replace(/^ROOT/, root).replace(/^OUTSIDE/, outside), p);
    }
  }
}

/**
 * The rules, written independently of the implementation: components left to right; ".." never
 * above the root; a symlink (the final one only when following) is read and its target resolved
 * from its directory (relative) or from the root (under /workspace or the root's own path); any
 * other target leaves the workspace; more than 40 links is a loop; a missing or non-directory
 * parent fails; a missing final entry is fine.
 */
function model(rootNode: Node, rootPath: string, rel: string, followFinal: boolean): string {
  const dirs: string[] = [];
  const nodeAt = (names: string[]): Node => names.reduce<Node>((n, name) => (n as { children: Map<string, Node> }).children.get(name) as Node, rootNode);
  let pending = rel === "" ? [] : rel.split("/");
  let hops = 0;
  while (pending.length > 0) {
    const name = pending.shift() as string;
    if (name === "" || name === ".") continue;
    if (name === "..") {
      if (dirs.length === 0) return "err:PATH_OUTSIDE_WORKSPACE";
      dirs.pop();
      continue;
    }
    const last = pending.every((p) => p === "" || p === ".");
    const node = (nodeAt(dirs) as { children: Map<string, Node> }).children.get(name);
    const here = [...dirs, name].join("/");
    if (node === undefined) return last ? `ok:${here}:absent` : "err:FILE_NOT_FOUND";
    if (node.kind === "link" && (!last || followFinal)) {
      if (++hops > 40) return "err:INVALID_ARGUMENT";
      const target = node.target.replace(/^ROOT/, rootPath).replace(/^OUTSIDE/, "/elsewhere");
      if (target.startsWith("/")) {
        const base = [ "/workspace", rootPath ].find((b) => target === b || target.startsWith(`${b}/`));
        if (base === undefined) return "err:PATH_OUTSIDE_WORKSPACE";
        dirs.length = 0;
        pending = [...target.slice(base.length).split("/"), ...pending];
      } else {
        pending = [...target.split("/"), ...pending];
      }
      continue;
    }
    if (last) return `ok:${here}:${node.kind === "link" ? "symlink" : node.kind === "dir" ? "directory" : "file"}`;
    if (node.kind !== "dir") return "err:NOT_A_DIRECTORY";
    dirs.push(name);
  }
  return `ok:${dirs.join("/")}:directory`;
}

function kind(st: import("node:fs").Stats | undefined): string {
  if (st === undefined) return "absent";
  return st.isSymbolicLink() ? "symlink" : st.isDirectory() ? "directory" : "file";
}

test("Jail.locate agrees with a model of the rules on random trees with links, and never ends outside", (t) => {
  const base = mkdtempSync(path.join(tmpdir(), "aw-jail-model-"));
  let n = 0;
  try {
    fc.assert(
      fc.property(tree(1), queries, fc.boolean(), (rootNode, paths, followFinal) => {
        const dir = path.join(base, String(n++));
        const root = path.join(dir, "ws");
        const outside = path.join(dir, "outside");
        mkdirSync(root, { recursive: true });
        mkdirSync(path.join(outside, "b"), { recursive: true });
        writeFileSync(path.join(outside, "a"), "outside");
        build(root, rootNode, realpathSync(root), outside);
        const jail = new Jail(realpathSync(root));
        try {
          for (const input of paths) {
            let rel: string;
            try {
              rel = toWorkspacePath(input);
            } catch {
              continue; // lexically outside: never reaches the jail
            }
            const want = model(rootNode, jail.rootPath, rel, followFinal);
            let got: string;
            try {
              const loc = jail.locate(rel, { followFinal });
              try {
                // Whatever was found sits in a directory beneath the root.
                const where = realpathSync(at(loc.dirFd));
                if (where !== jail.rootPath && !where.startsWith(`${jail.rootPath}/`)) return false;
              } finally {
                loc.release();
              }
              got = `ok:${loc.rel}:${kind(loc.stat)}`;
            } catch (err) {
              if (!(err instanceof Fault)) throw err;
              got = `err:${err.reason}`;
            }
            if (got !== want) {
              t.log(`${JSON.stringify(input)} (follow ${followFinal}): jail ${got}, model ${want}`);
              return false;
            }
          }
          return true;
        } finally {
          jail.close();
          rmSync(dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 400 },
    );
    t.pass();
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
