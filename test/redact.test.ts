/**
 * The redactor that keeps secrets out of audit summaries: each credential shape it knows, planted
 * in random command lines, never survives, while the text around it does.
 */
import test from "ava";
import fc from "fast-check";
import { MAX_SUMMARY_CHARS, REDACTED, Redactor } from "../server/audit/redact.ts";

const r = new Redactor(["known-operator-key-0123456789abcdef"]);
const alnum = (min: number, max: number) => fc.stringMatching(new RegExp(`^[A-Za-z0-9]{${min},${max}}$`));
const hexOf = (n: number) => fc.stringMatching(new RegExp(`^[0-9a-f]{${n}}$`));

/** Secret shapes, each as (secret) → how a command carries it. */
const SHAPES: Array<[string, fc.Arbitrary<string>, (s: string) => string]> = [
  ["bearer header", alnum(12, 40), (s) => `curl -H "Authorization: Bearer ${s}" https://api.example.com`],
  ["basic header", alnum(12, 40), (s) => `curl -H 'authorization: Basic ${s}' x`],
  ["url password", alnum(8, 30), (s) => `git clone https://user:${s}@git.example.com/r.git`],
  ["url token", alnum(8, 30), (s) => `git clone https://${s}@git.example.com/r.git`],
  ["password=", alnum(6, 30), (s) => `mysql --user=root password=${s} -e 'select 1'`],
  ["TOKEN env", alnum(6, 30), (s) => `GITHUB_TOKEN=${s} gh pr list`],
  ["export quoted", alnum(6, 30), (s) => `export API_KEY="${s}"; make`],
  ["--token flag", alnum(6, 30), (s) => `npm publish --token ${s}`],
  ["curl -u", alnum(6, 30), (s) => `curl -u admin:${s} http://h/`],
  ["github", alnum(36, 36), (s) => `echo ghp_${s} | gh auth login --with-token`],
  ["aws", fc.stringMatching(/^[A-Z0-9]{16}$/), (s) => `aws configure set aws_access_key_id AKIA${s}`],
  ["openai", alnum(24, 48), (s) => `OPENAI=sk-proj-${s} python run.py`],
  ["slack", alnum(12, 30), (s) => `post xoxb-${s}`],
  ["jwt", fc.tuple(alnum(10, 20), alnum(10, 20), alnum(10, 20)).map(([a, b, c]) => `eyJ${a}.eyJ${b}.${c}`), (s) => `http get x "Cookie: s=${s}"`],
  ["known key", fc.constant("known-operator-key-0123456789abcdef"), (s) => `echo ${s}`],
  ["private key", hexOf(64), (s) => `printf '-----BEGIN OPENSSH PRIVATE KEY-----\n${s}\n-----END OPENSSH PRIVATE KEY-----' > k`],
];

for (const [name, secret, carry] of SHAPES) {
  test(`a ${name} never survives redaction, wherever it sits in a command`, (t) => {
    fc.assert(
      fc.property(secret, fc.string({ maxLength: 40 }).map((s) => s.replace(/[A-Za-z0-9]/g, " ")), fc.string({ maxLength: 40 }).map((s) => s.replace(/[A-Za-z0-9]/g, " ")), (s, before, after) => {
        const out = r.redact(`${before}${carry(s)}${after}`);
        return !out.includes(s) && out.includes(REDACTED);
      }),
    );
    t.pass();
  });
}

test("ordinary command lines are left as they are, and long ones are cut with a marker", (t) => {
  for (const c of ["npm test -- --watch=false", "git log --oneline -5", "grep -rn 'TODO' src | wc -l", "cd app && make build", "echo $HOME", "ls -la /workspace"]) t.is(r.redact(c), c);
  const long = `echo ${"x".repeat(5000)}`;
  const out = r.redact(long);
  t.true(out.length < MAX_SUMMARY_CHARS + 40);
  t.regex(out, /…\[\d+ more characters\]$/);
  // A hostile 4 MiB input is only scanned at its head: what comes back is bounded, and a secret
  // past the scanned head never appears (it is cut, not echoed). Its cost is measured in bench (m).
  const hostile = `${"password=".repeat(400_000)} ghp_${"a".repeat(36)}`;
  const cut = r.redact(hostile);
  t.true(cut.length < MAX_SUMMARY_CHARS + 40);
  t.false(cut.includes(`ghp_${"a".repeat(36)}`));
  t.regex(r.redact("https://".repeat(500_000)), /…\[\d+ more characters\]$/);
});
