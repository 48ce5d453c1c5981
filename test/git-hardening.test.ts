/**
 * Every git a container workspace runs is hardened the way the git tools' own is, by
 * configuration the agent cannot override (scripts/git-harden.c, preloaded into every process of
 * the image), with the command policy's parser switched off: a hook, an fsmonitor, a credential
 * helper, an ssh command or an editor planted through any configuration source or variable does
 * not run. On local, where nothing is preloaded, the same plants run: the attacks are real.
 */
import type { ExecutionContext } from "ava";
import { gate, probeEngines } from "./helpers/engines.ts";
import { serverTest, type TestServer } from "./helpers/server.ts";

const engines = await probeEngines();
const test = serverTest({ overrides: { commandPolicy: () => ({ enforce: async () => undefined }) } });

type Ctx = ExecutionContext<{ server: TestServer }>;
const bash = async (t: Ctx, workspaceId: string, command: string) => {
  const r = await t.context.server.clients.grpc.tools.bash({ workspaceId, command, timeoutMs: 60_000n });
  return { ...r, out: `${r.stdout}${r.stderr}` };
};

/** A repository `r_<plant>` per plant with one commit, and a marker-making hook script `$HOME/hk/hook.sh` (executable, by tar's mode). */
const REPO = [
  "for n in PLANTS; do git init -q r_$n && git -C r_$n config user.email a@b.c && git -C r_$n config user.name a && git -C r_$n commit -q --allow-empty -m first || exit 1; done",
  "mkdir -p $HOME/m $HOME/hk && printf '#!/bin/sh\\ntouch $HOME/m/HOOKED_NAME\\n' > $HOME/hook.src && cd $HOME && tar --mode=755 -cf hook.tar hook.src && tar -xf hook.tar -C hk && mv hk/hook.src hk/hook.sh",
].join("\n");

/** A hook named `name` in directory `dir`, from the executable template. */
const hook = (dir: string, name: string) => `mkdir -p ${dir} && cp -p $HOME/hk/hook.sh ${dir}/pre-commit && sed -i 's/NAME/${name}/' ${dir}/pre-commit`;

/** Each plant: a script run in its repository that makes $HOME/m/HOOKED_<name> if git runs what it was told to. */
const PLANTS: Array<{ name: string; script: string }> = [
  { name: "hook", script: `${hook(".git/hooks", "hook")} && git commit -q --allow-empty -m x` },
  { name: "hookspath", script: `${hook("h2", "hookspath")} && git config core.hooksPath h2 && git commit -q --allow-empty -m x` },
  { name: "worktreeconfig", script: `${hook("h3", "worktreeconfig")} && git config extensions.worktreeConfig true && printf '[core]\\n\\thooksPath = h3\\n' > .git/config.worktree && git commit -q --allow-empty -m x` },
  { name: "global", script: `${hook("$HOME/h4", "global")} && printf '[core]\\n\\thooksPath = %s\\n' $HOME/h4 > $HOME/gc && GIT_CONFIG_GLOBAL=$HOME/gc git commit -q --allow-empty -m x` },
  { name: "commandline", script: `${hook("h5", "commandline")} && git -c core.hooksPath=h5 commit -q --allow-empty -m x` },
  { name: "fsmonitor", script: "git config core.fsmonitor \"touch $HOME/m/HOOKED_fsmonitor; false\" && git status >/dev/null 2>&1" },
  { name: "credential", script: "printf 'protocol=https\\nhost=example.com\\n\\n' | git -c credential.helper=\"!touch $HOME/m/HOOKED_credential; echo\" credential fill >/dev/null 2>&1" },
  { name: "ssh", script: "GIT_SSH_COMMAND=\"touch $HOME/m/HOOKED_ssh\" git ls-remote ssh://example.com/x.git >/dev/null 2>&1" },
  { name: "editor", script: "GIT_EDITOR=\"touch $HOME/m/HOOKED_editor\" git commit -q --allow-empty >/dev/null 2>&1" },
];

for (const provider of ["local", "docker", "gvisor"] as const) {
  if (provider !== "local" && !gate(test, engines, provider, "git hardening")) continue;

  test.serial(`${provider}: git run by a command ${provider === "local" ? "runs what its configuration says (nothing is preloaded on local)" : "runs no hook and no command from any configuration source"}`, async (t) => {
    const ws = (await t.context.server.clients.grpc.workspaces.createWorkspace({ provider })).workspace!.id;
    const setup = await bash(t, ws, REPO.replace("PLANTS", PLANTS.map((p) => p.name).join(" ")));
    t.is(setup.exitCode, 0, setup.out);
    for (const plant of PLANTS) await bash(t, ws, `cd r_${plant.name} && ${plant.script}`);
    const made = (await bash(t, ws, "ls $HOME/m | sed 's/^HOOKED_//' | sort")).stdout.trim().split("\n").filter((l) => l !== "");
    if (provider === "local") {
      // Every plant works where git is not hardened (the editor one needs a commit without -m).
      t.deepEqual(made, PLANTS.map((p) => p.name).sort(), "every plant runs on local");
    } else {
      t.deepEqual(made, [], "nothing planted ran");
      // The hardening cannot be peeled off by a library loaded in front of it.
      const bypass = await bash(t, ws, "cd r_hook && LD_PRELOAD=/lib/x86_64-linux-gnu/libc.so.6 git status; echo rc=$?");
      t.regex(bypass.out, /refusing to run/);
      t.regex(bypass.out, /rc=126/);
      // Ordinary git keeps working.
      const ok = await bash(t, ws, "cd r_hook && echo x > f && git add f && git commit -qm f && git log --oneline | wc -l && git status --porcelain");
      t.is(ok.exitCode, 0, ok.out);
    }
  });
}
