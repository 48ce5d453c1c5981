/**
 * Sensitive files sealed by the sandbox's kernel, with the command policy's parser switched off:
 * a session clones a repository holding secrets and runs a setup command that writes one; on
 * docker and gvisor no spelling of their names reads them (globs, `$PWD`, copies, links, archives,
 * searches, a rename), a write-protected tree cannot be changed, and a secret a command leaves
 * behind is sealed before the next one runs. On local, where nothing seals, the same commands do
 * read them: that is the proof the attacks are real.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { Code } from "@connectrpc/connect";
import { ErrorReason } from "../gen/agentworkspace/v1/errors_pb.js";
import { SessionStatus } from "../gen/agentworkspace/v1/workspace_pb.js";
import { gate, probeEngines } from "./helpers/engines.ts";
import { type GitServer, startGitServer } from "./helpers/git-server.ts";
import { type ClientSet, expectError, startServer, type TestServer } from "./helpers/server.ts";
import { clientsWithToken, credentialsFile, watchUntilReady } from "./helpers/sessions.ts";

interface Ctx {
  server: TestServer;
  git: GitServer;
  dir: string;
}
const test = anyTest as TestFn<Ctx>;
const TOKEN = "sealing-git-token-0123456789";
const engines = await probeEngines();
const SEALED_PROVIDERS = (["docker", "gvisor"] as const).filter((p) => gate(test, engines, p, "sealed sensitive files"));

/** Secrets the repository and the setup command hold; no output may ever show one (but on local). */
const SECRET = {
  env: `ENV_${randomBytes(6).toString("hex")}`,
  key: `KEY_${randomBytes(6).toString("hex")}`,
  pem: `PEM_${randomBytes(6).toString("hex")}`,
  setup: `SETUP_${randomBytes(6).toString("hex")}`,
  later: `LATER_${randomBytes(6).toString("hex")}`,
};
const ALL = Object.values(SECRET);

test.before(async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "aw-sealing-"));
  const git = await startGitServer({ token: TOKEN });
  await git.createRepo("app", {
    branches: {
      main: {
        "README.md": "app\n",
        ".env": `API_KEY=${SECRET.env}\n`,
        ".ssh/id_ed25519": `${SECRET.key}\n`,
        "config/server.pem": `${SECRET.pem}\n`,
        "src/app.js": "console.log('app')\n",
      },
    },
  });
  const credentials = await credentialsFile(dir, { [new URL(git.url).host]: TOKEN });
  // Every script may run as far as the policy is concerned: what stops a read is the kernel.
  const server = await startServer({
    env: { AGENT_WORKSPACE_GIT_CREDENTIALS: credentials, AGENT_WORKSPACE_SESSION_TICK_MS: "100" },
    overrides: { commandPolicy: () => ({ enforce: async () => undefined }) },
  });
  t.context = { server, git, dir };
});

test.after.always(async (t) => {
  await t.context.server?.close();
  await t.context.git?.close();
  if (t.context.dir) await rm(t.context.dir, { recursive: true, force: true });
});

/** A session on `provider` with the repository cloned and the setup command run; its agent's clients. */
async function session(t: { context: Ctx }, provider: string): Promise<ClientSet> {
  const { server, git } = t.context;
  const op = server.clients.grpc;
  const type = `sealing-${provider}-${randomBytes(3).toString("hex")}`;
  await op.config.createAgentType({
    agentType: {
      id: type,
      workspace: {
        enabled: true,
        provider,
        tools: ["bash", "read", "list", "grep", "git"],
        repoSource: { type: "fixed", url: git.repoUrl("app"), branch: "main" },
        checkoutOnStart: true,
        setupCommands: [`d=.aws; mkdir -p "$d"; printf '${SECRET.setup}\\n' > "$d/credentials"`],
      },
    },
  });
  const started = await op.workspaces.startSession({ agentType: type });
  const { session } = await watchUntilReady(op, started.session!.id, 120_000);
  if (session.status !== SessionStatus.ACTIVE) throw new Error(`session ${SessionStatus[session.status]}: ${JSON.stringify(session.warnings)}`);
  warningsOf.set(started.sessionToken, session.warnings.map((w) => w.message));
  return clientsWithToken(server.url, started.sessionToken);
}
const warningsOf = new Map<string, string[]>();

/** Everything a command can try to read a sealed file with. */
const READS = [
  "cat .env",
  "cat .e?v .[e]nv .[[:alpha:]]nv",
  "cat $PWD/.env $(pwd)/.env ~/.env",
  "cat .ssh/id_ed25519; ls -la .ssh",
  "cat config/*.pem config/server.p{a..z}m",
  "cat .aws/credentials",
  "cp .env copy 2>&1; cat copy",
  "ln .env hard 2>&1; cat hard",
  "ln -s .env soft; cat soft",
  "mv .env moved && cat moved; mv moved .env",
  "tar -cf - .env config .ssh .aws 2>/dev/null | tar -xOf - 2>&1",
  "grep -r . . 2>/dev/null | grep -v '^./.git/'",
  "rg --hidden --no-ignore . 2>/dev/null",
  "find . -name '*.pem' -exec cat {} +",
  "while read -r l; do echo \"$l\"; done < .env",
  "echo \"$(<.env)\"",
  "chmod 644 .env 2>&1; cat .env",
];

for (const provider of SEALED_PROVIDERS) {
  test.serial(`${provider}: no spelling of a sealed file's name reads it`, async (t) => {
    const agent = await session(t, provider);
    const { stdout: ls } = await agent.tools.bash({ command: "ls -la .env config/server.pem .aws/credentials && ls -ld .ssh" });
    t.regex(ls, /-rw------- 1 root +root .* \.env/, "cloned .env is root's, 0600");
    t.regex(ls, /drwxr-xr-x \d+ root +root .* \.ssh/, ".ssh is a sealed tree");
    t.regex(ls, /-rw------- 1 root +root .* \.aws\/credentials/, "what the setup command wrote is sealed too");
    for (const command of READS) {
      const r = await agent.tools.bash({ command });
      const out = `${r.stdout}${r.stderr}`;
      for (const secret of ALL) t.false(out.includes(secret), `${JSON.stringify(command)} read a secret: ${out.slice(0, 300)}`);
    }
    // No hard link to a sealed file can be made (protected_hardlinks; gVisor refuses it too).
    t.regex((await agent.tools.bash({ command: "ln .env hard2; echo ln=$?" })).stdout, /ln=1/);
    // The file tools refuse by name before the kernel is asked.
    await expectError(t, agent.tools.readFile({ path: ".env" }), Code.PermissionDenied, ErrorReason.SENSITIVE_FILE);
    const grep = await agent.tools.grep({ pattern: "(ENV|KEY|PEM|SETUP)_" });
    t.deepEqual(grep.matches, [], "grep finds nothing in sealed files");
    // Ordinary work goes on: the repository's other files, git status through the tool.
    t.regex((await agent.tools.bash({ command: "cat src/app.js README.md" })).stdout, /console\.log/);
    const own = await agent.tools.bash({ command: "git status --porcelain" });
    t.notRegex(own.stdout, /\.env|server\.pem|id_ed25519/, "the agent's own git does not report sealed files as changed");
    const status = await agent.tools.gitStatus({});
    t.deepEqual(status.files.map((f) => f.path).filter((p) => !/^(copy|soft|hard)$/.test(p)), [".aws/credentials"], "sealed tracked files are not reported as changed");
  });

  test.serial(`${provider}: a write-protected tree the clone put in place cannot be changed in place`, async (t) => {
    const agent = await session(t, provider);
    const r = await agent.tools.bash({
      command: "ls -ld .git/hooks; printf x > .git/hooks/pre-commit; echo new=$?; printf x >> .git/hooks/pre-commit.sample; echo append=$?; rm -f .git/hooks/pre-commit.sample; echo rm=$?; cp README.md .git/hooks/; echo cp=$?; ls .git/hooks | wc -l",
    });
    t.regex(r.stdout, /^drwxr-xr-x \d+ root +root .* \.git\/hooks$/m);
    t.regex(r.stdout, /^new=1$/m);
    t.regex(r.stdout, /^append=1$/m);
    t.regex(r.stdout, /^rm=1$/m);
    t.regex(r.stdout, /^cp=1$/m, "a directory argument cannot land a file in it either");
    // Linux refuses to rename a directory its caller cannot write (its `..` would change); gVisor
    // lets the parent's owner do it, so there the tree can be moved aside (README: what gVisor keeps).
  });

  test.serial(`${provider}: secrets in the repository's history are reported on the session and in the audit trail`, async (t) => {
    await session(t, provider);
    const [token, warnings] = [...warningsOf].at(-1)!;
    t.truthy(token);
    const warning = warnings.find((w) => w.includes("history holds"));
    t.truthy(warning, JSON.stringify(warnings));
    t.regex(warning!, /3 file\(s\) the sensitive-file rules name \(.*\.env.*\)/);
    t.regex(warning!, /git show REV:PATH/);
    for (const secret of ALL) t.false(warning!.includes(secret));
    const { events } = await t.context.server.clients.grpc.audit.listAuditEvents({ tool: "git", pageSize: 100 });
    const clone = events.find((e) => e.procedure === "clone" && e.provider === provider);
    t.is(clone?.request.branch, "main", JSON.stringify(events.map((e) => e.procedure)));
    t.is(clone?.result.sensitive_history, "3");
    t.regex(clone?.result.sensitive_history_paths ?? "", /\.env/);
  });

  test.serial(`${provider}: a secret a command leaves behind is sealed before the next command`, async (t) => {
    const agent = await session(t, provider);
    const first = await agent.tools.bash({ command: `printf '//registry/:_authToken=${SECRET.later}\\n' > .npmrc && cat .npmrc` });
    t.true(first.stdout.includes(SECRET.later), "the command that wrote it could read it");
    const next = await agent.tools.bash({ command: "cat .npmrc; ls -la .npmrc" });
    t.false(`${next.stdout}${next.stderr}`.includes(SECRET.later));
    t.regex(next.stdout, /-rw------- 1 root root/);
    // The sweep's reach: a project's .env one level down, and a credential directory at any depth of its own.
    await agent.tools.bash({ command: `mkdir -p app .config/gh && printf 'K=${SECRET.later}\\n' > app/.env && printf 'token: ${SECRET.later}\\n' > .config/gh/hosts.yml` });
    const after = await agent.tools.bash({ command: "cat app/.env .config/gh/hosts.yml; ls -l app/.env .config/gh/hosts.yml" });
    t.false(`${after.stdout}${after.stderr}`.includes(SECRET.later), after.stdout);
    t.is(after.stdout.match(/-rw------- 1 root +root/g)?.length, 2, after.stdout);
  });
}

test.serial("local: nothing seals there, and the same commands read the secrets (the attacks are real)", async (t) => {
  const agent = await session(t, "local");
  const r = await agent.tools.bash({ command: READS.slice(0, 3).join("; ") });
  t.true(r.stdout.includes(SECRET.env), r.stdout.slice(0, 200));
});
