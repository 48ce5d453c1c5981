/**
 * The sensitive-file guard's remembered answers (providers/executor/sensitive-files.ts): a path's
 * answer is kept by access, so a path readable but write-protected is refused a write after a read
 * was allowed (and the other way round), the same answer comes every time, an agent type's own
 * rules never answer for another's, and a guard that has seen many paths still answers each right.
 */
import test from "ava";
import fc from "fast-check";
import { FileGuard, guardFor } from "../providers/executor/sensitive-files.ts";

test("file guard: a remembered answer is the answer for that access only", (t) => {
  const g = new FileGuard();
  // Readable, never written: the read's answer must not stand for the write.
  t.is(g.check(".git/hooks/pre-commit", "read"), undefined);
  t.is(g.check(".git/hooks/pre-commit", "write")?.list, "write_protected");
  t.is(g.check(".git/hooks/pre-commit", "read"), undefined);
  // And the other way round.
  const h = new FileGuard();
  t.is(h.check(".git/hooks/post-merge", "write")?.list, "write_protected");
  t.is(h.check(".git/hooks/post-merge", "read"), undefined);
  // Denied for both, the same each time.
  for (let i = 0; i < 3; i++) {
    t.deepEqual(g.check("deploy/.env", "read"), { list: "deny", pattern: ".env" });
    t.deepEqual(g.check("deploy/.env", "write"), { list: "deny", pattern: ".env" });
  }
  // A remembered answer cannot be changed by its caller.
  const answer = g.check("keys/id_rsa", "read");
  t.throws(() => Object.assign(answer as object, { list: "write_protected" }));
  t.deepEqual(g.check("keys/id_rsa", "read"), { list: "deny", pattern: "id_rsa*" });
});

test("file guard: an agent type's own rules answer for its guard only", (t) => {
  const own = guardFor({ deny: ["secrets/**"], writeProtected: ["Makefile"] });
  const server = guardFor();
  t.is(own.check("secrets/token.txt", "read")?.pattern, "secrets/**");
  t.is(server.check("secrets/token.txt", "read"), undefined);
  t.is(own.check("Makefile", "write")?.list, "write_protected");
  t.is(server.check("Makefile", "write"), undefined);
});

test("file guard: with its memory filled and emptied many times over, every answer is the one a fresh guard gives", (t) => {
  const name = fc.constantFrom("a", "src", ".env", ".env.example", "id_rsa.pub", "x.pem", ".ssh", ".git", "hooks", "config", ".npmrc", "K.KEY", "..", ".", "");
  const path = fc.array(name, { minLength: 1, maxLength: 5 }).map((parts) => parts.join("/"));
  const access = fc.constantFrom("read" as const, "write" as const);
  const used = new FileGuard();
  // Enough distinct long paths to empty the memory more than once.
  for (let i = 0; i < 5000; i++) used.check(`pad/${i}/${"p".repeat(i % 7)}.txt`, i % 2 === 0 ? "read" : "write");
  fc.assert(
    fc.property(path, access, (p, a) => {
      const fresh = new FileGuard();
      t.deepEqual(used.check(p, a), fresh.check(p, a));
      t.deepEqual(used.check(p, a), fresh.check(p, a));
    }),
    { numRuns: 2000 },
  );
  t.pass();
});
