/**
 * The part of a command policy a sandbox's kernel can enforce: which programs may run at all.
 * Under an allowlist that is the programs its allow rules name (the first word of each rule, a
 * name or a path, `*` and `?` as in the rules), less those a rule without arguments denies, the
 * server's included; the sandbox adds the shell and what allowed programs need
 * (providers/executor/programs.ts). Arguments (`git push` denied while `git` is allowed) stay the
 * parser's to judge: a kernel sees programs, not what they are asked to do. A default-allow
 * policy gets no program enforcement (undefined): everything may run but what the parser refuses.
 */
import type { ProgramRules } from "../../providers/types.ts";
import { DEFAULT_DENY_RULES } from "./command-rules.ts";

/** A command policy's configuration, as an agent type stores it. */
export interface PolicyConfig {
  defaultAction: string;
  allow: readonly string[];
  deny: readonly string[];
}

/** The programs the sandbox enforces for `policy`, or undefined when it is not an allowlist. */
export function programRules(policy: PolicyConfig | undefined): ProgramRules | undefined {
  if (policy === undefined) return undefined;
  const allowlist = policy.defaultAction === "deny" || (policy.defaultAction === "" && policy.allow.length > 0);
  if (!allowlist) return undefined;
  const program = (rule: string) => rule.trim().split(/\s+/)[0] ?? "";
  const bare = (rule: string) => rule.trim() !== "" && rule.trim().split(/\s+/).length === 1;
  return {
    allow: [...new Set(policy.allow.map(program).filter((p) => p !== ""))],
    deny: [...new Set([...DEFAULT_DENY_RULES, ...policy.deny].filter(bare).map(program))],
  };
}
