/**
 * What the sandbox's kernel enforces on its own, with the command policy's parser switched off
 * (the server's command policy replaced by one that allows every script): under an agent type's
 * allowlist a command's process tree executes only allowlisted programs, however it reaches the
 * `execve` (a wrapper, an option or variable that makes a program run another, a git hook, the
 * dynamic loader, a library), and code written into the workspace never runs. Each attack is
 * first shown to work in a workspace without an agent type (its marker appears), then to fail in
 * one made for the allowlist agent type, on docker, gvisor and microvm.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { ExecutionContext } from "ava";
import { gate, microvmGate, probeEngines } from "./helpers/engines.ts";
import { serverTest, type TestServer } from "./helpers/server.ts";

const engines = await probeEngines();
/** Every script may run as far as the policy is concerned: what stops an attack is the sandbox. */
const test = serverTest({ overrides: { commandPolicy: () => ({ enforce: async () => undefined }) } });

/** The agent type under attack: a realistic allowlist, `git push` denied. */
const AGENT_TYPE = "kernel-allowlist";
const ALLOW = ["git", "tar", "env", "rg", "sort", "ls", "cat", "echo", "grep", "find", "xargs", "sed", "head", "wc", "mkdir"];

/** Small programs built on the host: one that creates the file it is given, one library that creates a file when loaded. */
interface Payloads {
  program: Buffer;
  library: Buffer;
}
let payloads: Payloads | undefined;

async function buildPayloads(): Promise<Payloads> {
  if (payloads) return payloads;
  const dir = await mkdtemp(path.join(tmpdir(), "aw-payload-"));
  try {
    await writeFile(path.join(dir, "t.c"), '#include <fcntl.h>\nint main(int c, char **v) { return creat(c > 1 ? v[1] : "M_prog", 0644) < 0; }\n');
    await writeFile(path.join(dir, "m.c"), '#include <fcntl.h>\n__attribute__((constructor)) static void made(void) { creat("/workspace/M_lib", 0644); }\n');
    execFileSync("gcc", ["-O1", "-o", path.join(dir, "t"), path.join(dir, "t.c")]);
    execFileSync("gcc", ["-O1", "-shared", "-fPIC", "-o", path.join(dir, "m.so"), path.join(dir, "m.c")]);
    payloads = { program: await readFile(path.join(dir, "t")), library: await readFile(path.join(dir, "m.so")) };
    return payloads;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

type Ctx = ExecutionContext<{ server: TestServer }>;

const bash = async (t: Ctx, workspaceId: string, command: string) => {
  const r = await t.context.server.clients.grpc.tools.bash({ workspaceId, command, timeoutMs: 60_000n });
  return { ...r, out: `${r.stdout}${r.stderr}` };
};

/** Writes `bytes` to `name` in the workspace the way an agent can: the shell's printf, in pieces. */
async function plant(t: Ctx, workspaceId: string, name: string, bytes: Buffer): Promise<void> {
  await bash(t, workspaceId, `: > ${name}`);
  for (let at = 0; at < bytes.length; at += 20_000) {
    const escaped = [...bytes.subarray(at, at + 20_000)].map((b) => `\\x${b.toString(16).padStart(2, "0")}`).join("");
    const r = await bash(t, workspaceId, `printf '${escaped}' >> ${name}`);
    t.is(r.exitCode, 0, r.out);
  }
}

const exists = async (t: Ctx, workspaceId: string, name: string) => (await bash(t, workspaceId, `[ -e ${name} ] && echo made || echo absent`)).stdout.trim() === "made";

/** Attacks: a script that makes `marker` when it gets through. */
const ATTACKS: Array<{ name: string; marker: string; script: string }> = [
  { name: "a program not on the list", marker: "M_direct", script: "touch M_direct" },
  { name: "find -exec", marker: "M_find", script: "find . -maxdepth 0 -exec touch M_find \\;" },
  { name: "xargs", marker: "M_xargs", script: "echo M_xargs | xargs touch" },
  { name: "env -S", marker: "M_env", script: "env -S 'touch M_env'" },
  { name: "TAR_OPTIONS with --to-command", marker: "M_tar", script: "echo x > f && tar -cf a.tar f && TAR_OPTIONS='--to-command=touch\\ M_tar' tar -xf a.tar" },
  { name: "tar --checkpoint-action, abbreviated", marker: "M_ckpt", script: "echo x > g && tar --checkpoint=1 --checkpoint-act=exec='touch M_ckpt' -cf b.tar g" },
  // rg runs its preprocessor on each file it searches; the marker is made only when `id` ran.
  { name: "RIPGREP_CONFIG_PATH with --pre", marker: "M_rg", script: "printf -- '--pre=/usr/bin/id\\n' > rgrc && mkdir -p rgd && echo uid > rgd/agent && cd rgd && RIPGREP_CONFIG_PATH=$PWD/../rgrc rg uid= agent > ../rg.out; cd ..; grep -q 'uid=' rg.out && : > M_rg" },
  // What git's hardening (git-hardening.test.ts) cannot switch off, the kernel bounds: a
  // repository's diff driver and an alias that runs a shell command.
  {
    name: "a textconv driver named in .gitattributes, run by git diff",
    marker: "M_textconv",
    script: "git init -q tc && cd tc && echo a > f && git add f && git -c user.email=a@b.c -c user.name=a commit -qm x && echo b > f && echo '* diff=evil' > .gitattributes && git config diff.evil.textconv 'touch /workspace/M_textconv; cat' && git diff > /dev/null",
  },
  { name: "a git alias running a shell command", marker: "M_alias", script: "git init -q al && cd al && git -c alias.pwn='!touch /workspace/M_alias' pwn" },
  { name: "the dynamic loader running a program", marker: "M_ldso", script: "/lib64/ld-linux-x86-64.so.2 /usr/bin/touch M_ldso" },
  { name: "the server's Node binary", marker: "M_node", script: "/opt/agent-workspace/node -e \"require('fs').writeFileSync('M_node', '')\"" },
];

const vm = microvmGate(test, "kernel enforcement");
for (const provider of ["docker", "gvisor", "microvm"] as const) {
  if (provider === "microvm" ? !vm : !gate(test, engines, provider, "kernel enforcement")) continue;

  /** A plain workspace and one made for the allowlist agent type, created once per provider. */
  let arena: Promise<{ plain: string; kernel: string }> | undefined;
  const workspacesOf = (t: Ctx) => {
    arena ??= (async () => {
      const { config, workspaces } = t.context.server.clients.grpc;
      await config.createAgentType({
        agentType: { id: AGENT_TYPE, displayName: "kernel", workspace: { enabled: true, tools: ["bash", "read", "write", "grep", "git"], commandPolicy: { defaultAction: "", allow: ALLOW, deny: ["git push"] } } },
      }).catch((err: unknown) => {
        if (!String(err).includes("already exists")) throw err;
      });
      const plain = (await workspaces.createWorkspace({ provider })).workspace!.id;
      const kernel = (await workspaces.createWorkspace({ provider, agentType: AGENT_TYPE })).workspace!.id;
      return { plain, kernel };
    })();
    return arena;
  };

  test.serial(`${provider}: allowlisted programs, wrappers and the server's own tools keep working under the allowlist`, async (t) => {
    const { kernel } = await workspacesOf(t);
    const r = await bash(t, kernel, "git --version && tar --version | head -1 && echo b a | xargs -n1 | sort | head -1 && timeout 5 env echo wrapped && rg --version | head -1 && ls /");
    t.is(r.exitCode, 0, r.out);
    t.regex(r.stdout, /git version/);
    t.regex(r.stdout, /^a$/m);
    t.regex(r.stdout, /^wrapped$/m);
    await bash(t, kernel, "git init -q . && echo 'needle here' > found.txt");
    const status = await t.context.server.clients.grpc.tools.gitStatus({ workspaceId: kernel });
    t.true(status.files.some((f) => f.path === "found.txt"));
    const grep = await t.context.server.clients.grpc.tools.grep({ workspaceId: kernel, pattern: "needle" });
    t.true(grep.matches.some((m) => m.path === "found.txt"), JSON.stringify(grep.matches));
    const id = await bash(t, kernel, "id -u; echo $?");
    t.notRegex(id.stdout, /^1000$/m, "id is not on the list");
    // Variables glibc would obey for setpriv (which starts as root) still reach the command itself.
    const env = await t.context.server.clients.grpc.tools.bash({ workspaceId: kernel, command: 'echo "$TMPDIR $TZDIR"', env: { TMPDIR: "/workspace/tmpx", TZDIR: "/workspace/zones" } });
    t.is(env.stdout, "/workspace/tmpx /workspace/zones\n", env.stderr);
  });

  for (const attack of ATTACKS) {
    test.serial(`${provider}: ${attack.name} cannot run a program the allowlist leaves out`, async (t) => {
      const { plain, kernel } = await workspacesOf(t);
      await bash(t, plain, attack.script);
      t.true(await exists(t, plain, attack.marker), `the attack works where nothing is enforced (${attack.marker})`);
      const r = await bash(t, kernel, attack.script);
      t.false(await exists(t, kernel, attack.marker), `${attack.marker} made under the allowlist: ${r.out}`);
    });
  }

  test.serial(`${provider}: code written into the workspace never runs, not directly, through the loader, preloaded or loaded by bash`, async (t) => {
    const { plain, kernel } = await workspacesOf(t);
    const { program, library } = await buildPayloads();
    const script = [
      // tar keeps the mode it is given: the agent's way to an executable file without chmod.
      "tar --mode=755 -cf p.tar t m.so && mkdir -p x && tar -xf p.tar -C x",
      "./x/t M_exec",
      "/lib64/ld-linux-x86-64.so.2 ./x/t M_loader",
      "LD_PRELOAD=$PWD/x/m.so sort </dev/null",
      "enable -f ./x/m.so nothing",
      "cp x/t /tmp/t 2>/dev/null || cat x/t > /tmp/t; /lib64/ld-linux-x86-64.so.2 /tmp/t M_tmp",
      "cat x/t > /dev/shm/t; /lib64/ld-linux-x86-64.so.2 /dev/shm/t M_shm",
      "true",
    ].join("\n");
    for (const ws of [plain, kernel]) {
      await plant(t, ws, "t", program);
      await plant(t, ws, "m.so", library);
      await bash(t, ws, script);
    }
    for (const marker of ["M_exec", "M_loader", "M_lib", "M_tmp", "M_shm"]) {
      // Docker's own /dev/shm is noexec already; gVisor's maps anything.
      if (!(marker === "M_shm" && provider === "docker")) t.true(await exists(t, plain, marker), `${marker}: the payload works where nothing is enforced`);
      t.false(await exists(t, kernel, marker), `${marker}: the payload ran under the allowlist`);
    }
  });
}
