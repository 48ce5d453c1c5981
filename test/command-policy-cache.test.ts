/**
 * The command policy's decision cache (server/security/command-policy.ts `check`): a decision is
 * kept by its policy, script, environment and working directory, and nothing else may change it.
 * These tests try what a stale or shared decision would let through.
 */
import test from "ava";
import { CommandPolicy } from "../server/security/command-policy.ts";

test("a refusal is refused again from the cache, and a caller changing the refusal it got changes nothing kept", async (t) => {
  const policy = new CommandPolicy({ defaultAction: "", allow: ["cat", "ls"], deny: [] });
  const first = await policy.check("rm -rf build");
  t.like(first, { why: "not_in_allowlist" });
  first!.why = "denied_by_server";
  first!.message = "tampered";
  const again = await policy.check("rm -rf build");
  t.like(again, { why: "not_in_allowlist" });
  t.not(again!.message, "tampered");
  t.is(await policy.check("cat README.md"), undefined);
  t.is(await policy.check("cat README.md"), undefined);
});

test("the same text under another policy, environment or working directory is decided afresh", async (t) => {
  const open = new CommandPolicy();
  const strict = new CommandPolicy({ defaultAction: "", allow: ["ls"], deny: [] });
  // Asked first where it may run, then where it may not: the second answer is not the first's.
  t.is(await open.check("git status"), undefined);
  t.like(await strict.check("git status"), { why: "not_in_allowlist" });
  // A second policy compiled from the same rules is its own: an updated agent type is never
  // answered from its old rules' decisions.
  const denyGit = new CommandPolicy({ defaultAction: "", allow: [], deny: ["git"] });
  t.like(await denyGit.check("git status"), { why: "denied_by_agent_type" });
  t.is(await open.check("git status"), undefined);
  // The environment is part of the decision: the same script, allowed, then with a variable that
  // changes what runs.
  const gitOnly = new CommandPolicy({ defaultAction: "", allow: ["git"], deny: [] });
  t.is(await gitOnly.check("git log", {}), undefined);
  t.like(await gitOnly.check("git log", { GIT_SSH_COMMAND: "rm -rf /" }), { why: "restricted_variable" }, "a cached allow let a restricted variable through");
  t.is(await gitOnly.check("git log", {}), undefined);
  // So is the working directory: a relative path names another file there.
  const files = new CommandPolicy(undefined, { deny: ["secrets/**"], writeProtected: [] });
  t.is(await files.check("cat notes.txt", {}, ""), undefined);
  t.truthy(await files.check("cat notes.txt", {}, "secrets"), "a cached allow in the root let a read inside secrets/ through");
});
