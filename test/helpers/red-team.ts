/**
 * Fixtures of the red-team suite (test/red-team.test.ts): the agent type under attack, the two
 * workspaces each provider gets (one made for that agent type, one without an agent type), the
 * files planted in them, lanes that keep one provider's tests from piling onto its engine at
 * once, and the assertions every attack shares: refused with the exact reason and `why`, and
 * nothing of the refused script ran.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ExecutionContext } from "ava";
import Docker from "dockerode";
import { vmAdmin } from "./microvm.ts";
import { Writable } from "node:stream";
import { ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";
import type { BashResponse } from "../../gen/agentworkspace/v1/tool_pb.js";
import { type ClientSet, errorDetail, expectError } from "./server.ts";

/** The agent type every allowlist attack runs against. */
export const AGENT_TYPE = "red-team";
/** Its allowlist (the example) and its own deny rule. */
export const ALLOW = ["git", "npm test", "ls", "cat", "echo", "grep", "find", "xargs", "python3"];
export const DENY = ["git push"];
/** Patterns the agent type adds to the server's sensitive-file lists. */
export const AGENT_FILES = { deny: ["secrets/**"], writeProtected: ["Makefile"] };
export const AGENT_TOOLS = ["bash", "read", "write", "edit", "patch", "delete", "list", "glob", "grep"];

/** Creates the agent type through ConfigService. */
export async function createRedTeamAgentType(clients: ClientSet): Promise<void> {
  await clients.config.createAgentType({
    agentType: {
      id: AGENT_TYPE,
      displayName: "red team target",
      workspace: {
        enabled: true,
        tools: AGENT_TOOLS,
        commandPolicy: { defaultAction: "", allow: ALLOW, deny: DENY },
        sensitiveFiles: AGENT_FILES,
      },
    },
  });
}

/** Secrets planted in the workspaces; no response may ever carry one. */
export const SECRET = {
  env: `SECRET_ENV_${randomBytes(4).toString("hex")}`,
  key: `SECRET_KEY_${randomBytes(4).toString("hex")}`,
  /** Shared by sensitive files and by notes.txt, the look-alike grep must still find. */
  token: `TOKEN_${randomBytes(4).toString("hex")}`,
  outside: `SECRET_OUTSIDE_${randomBytes(4).toString("hex")}`,
  agent: `SECRET_AGENT_${randomBytes(4).toString("hex")}`,
};

/** The two workspaces of one provider, and where its outside directory lives. */
export interface Arena {
  provider: string;
  /** The server's data directory (a microvm workspace's admin port is in it). */
  dataDir: string;
  /** A workspace without an agent type: the server's deny list and sensitive files only. */
  plain: string;
  /** A workspace made for AGENT_TYPE: its allowlist, deny rule and sensitive patterns. */
  agent: string;
  /** A directory outside the workspace (host /tmp on local, the sandbox's /tmp in containers) holding secret.txt. */
  outside: string;
  /** The workspace root as the plain workspace's commands see it (a host path on local). */
  root: string;
}

/**
 * Files of the plain workspace. Sensitive ones are written by commands that compute their names
 * (`d=.env; … > "$d"`): the command policy refuses a literal `.env` there, and a name computed at
 * run time is what a default-allow policy lets through by design (README, "What the policy is").
 */
function plainFixtures(outside: string): string {
  return [
    "set -e",
    "git init -q .",
    "mkdir -p sub config .ssh workspace_evil",
    `d=.env; printf 'API_KEY=${SECRET.env}\\n' > "$d"`,
    `d=.env.production; printf 'API_KEY=${SECRET.env}\\n' > "$d"`,
    "printf 'API_KEY=placeholder\\n' > .env.example",
    `d=.ssh/id_ed25519; printf '${SECRET.key}\\n' > "$d"`,
    `d=config/server.pem; printf '${SECRET.token} in pem\\n' > "$d"`,
    `d=deploy.key; printf '${SECRET.token} in key\\n' > "$d"`,
    `d=id_rsa; printf '${SECRET.token} in id_rsa\\n' > "$d"`,
    `printf '${SECRET.token} in notes\\nsecond line\\n' > notes.txt`,
    "printf 'inside sub\\n' > sub/inner.txt",
    "printf 'inside evil-named dir\\n' > workspace_evil/x.txt",
    "d=.gitmodules; printf '[submodule]\\n' > \"$d\"",
    `mkdir -p ${outside}`,
    `printf '${SECRET.outside}\\n' > ${outside}/secret.txt`,
    "pwd -P",
  ].join("\n");
}

/**
 * Files of the agent type's workspace, made with what its allowlist permits: `git init` makes
 * directories (mkdir is not allowed), computed redirections write the sensitive ones.
 */
const AGENT_FIXTURES = [
  "git init -q . && git init -q secrets",
  `n=.env; echo "API_KEY=${SECRET.env}" > $n`,
  'echo "API_KEY=placeholder" > .env.example',
  `n=secrets/token.txt; echo "${SECRET.agent}" > $n`,
  `echo "${SECRET.agent} look-alike" > secrets.md`,
  "n=Makefile; echo 'all:' > $n",
  'echo "keep me" > keep.txt',
  'echo "readme" > README.md',
].join("\n");

/** Runs `command`, failing with its output when it does not exit 0. */
export async function sh(clients: ClientSet, workspaceId: string, command: string): Promise<string> {
  const r = await clients.tools.bash({ workspaceId, command, timeoutMs: 60_000n });
  if (r.exitCode !== 0) throw new Error(`fixture command failed (${r.exitCode}): ${command}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/**
 * Runs `command` at the workspace root outside every policy and as root on container providers:
 * how a test looks at what commands no longer can (files the sandbox sealed, executor/seal.ts).
 * On local, where nothing is sealed, it runs on the host in the workspace's directory (the plain
 * workspace's: `arena.root`).
 */
export async function inspect(arena: Pick<Arena, "provider" | "root" | "dataDir">, workspaceId: string, command: string): Promise<string> {
  if (arena.provider === "local") return execFileSync("bash", ["-c", command], { cwd: arena.root, encoding: "utf8" });
  if (arena.provider === "microvm") {
    const r = await vmAdmin(arena.dataDir, workspaceId, command);
    if (r.status !== 0) throw new Error(`inspection failed (${r.status}): ${command}\n${r.stderr}`);
    return r.stdout;
  }
  const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });
  const [info] = await docker.listContainers({ all: true, filters: { label: [`agent-workspace.workspace-id=${workspaceId}`] } });
  if (!info) throw new Error(`no container for ${workspaceId}`);
  const exec = await docker.getContainer(info.Id).exec({ Cmd: ["bash", "-c", command], User: "0", WorkingDir: "/workspace", AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    docker.modem.demuxStream(stream, new Writable({ write: (b: Buffer, _e, done) => (out.push(b), done()) }), new Writable({ write: (b: Buffer, _e, done) => (err.push(b), done()) }));
    stream.on("end", resolve);
    stream.on("error", reject);
  });
  const { ExitCode } = await exec.inspect();
  if (ExitCode !== 0) throw new Error(`inspection failed (${ExitCode}): ${command}\n${Buffer.concat(err).toString()}`);
  return Buffer.concat(out).toString();
}

/** Makes a provider's two workspaces and plants their files. */
export async function buildArena(clients: ClientSet, provider: string, dataDir: string): Promise<Arena> {
  const [plain, agent] = await Promise.all([
    clients.workspaces.createWorkspace({ provider }),
    clients.workspaces.createWorkspace({ provider, agentType: AGENT_TYPE }),
  ]);
  if (!plain.workspace || !agent.workspace) throw new Error("CreateWorkspace returned no workspace");
  const outside = `/tmp/aw-redteam-${provider}-${randomBytes(4).toString("hex")}`;
  const out = await sh(clients, plain.workspace.id, plainFixtures(outside));
  await sh(clients, agent.workspace.id, AGENT_FIXTURES);
  return { provider, dataDir, plain: plain.workspace.id, agent: agent.workspace.id, outside, root: out.trim().split("\n").at(-1) as string };
}

/**
 * Per-key lanes: tests of one provider run one at a time (its engine and the machine stay
 * responsive, and the shared workspaces see one attack at a time), different providers in parallel.
 *
 * A test's time limit starts when its turn comes, not when ava starts it: ava starts a file's
 * tests together, so the last of a provider's tests waits for all before it, and on a busy
 * machine that wait alone outlasted a limit counted from the start (the full suite's gVisor lane
 * took over three minutes). The wait is bounded by the suite's own limit instead. The budget from
 * the turn on (5 minutes by default) is a hang guard: a loaded CI run took tests past 3.
 */
export type Lane = <T>(t: { timeout(ms: number): void }, key: string, fn: () => Promise<T>, budgetMs?: number) => Promise<T>;

/** How long a test may wait for its lane: longer than any lane's whole run. */
const LANE_WAIT_MS = 20 * 60_000;

export function lanes(): Lane {
  const tails = new Map<string, Promise<unknown>>();
  return <T>(t: { timeout(ms: number): void }, key: string, fn: () => Promise<T>, budgetMs = 300_000): Promise<T> => {
    t.timeout(LANE_WAIT_MS);
    const turn = () => {
      t.timeout(budgetMs);
      return fn();
    };
    const run = (tails.get(key) ?? Promise.resolve()).then(turn, turn);
    tails.set(key, run.catch(() => undefined));
    return run;
  };
}

let serial = 0;
/** A fresh marker name: a file a refused script would have created. */
export const marker = (hint: string) => `m-${hint}-${++serial}`;

/** What a refusal must say. */
export interface Expected {
  command: string;
  rule: string;
  why: string;
}

/**
 * Asserts that `script` is refused before anything runs: PERMISSION_DENIED, COMMAND_NOT_ALLOWED,
 * metadata exactly `expected`. Every script of the suite starts by writing a marker; the caller
 * proves with `absent` that it was never written.
 */
export async function refused(
  t: ExecutionContext<unknown>,
  clients: ClientSet,
  workspaceId: string,
  command: string,
  expected: Expected,
  env: Record<string, string> = {},
): Promise<void> {
  const { detail } = await expectError(t, clients.tools.bash({ workspaceId, command, env }), Code.PermissionDenied, ErrorReason.COMMAND_NOT_ALLOWED);
  t.deepEqual({ ...detail.metadata }, { ...expected }, `metadata of the refusal of ${JSON.stringify(command)}`);
}

/** Runs an allowed look-alike; it must not be refused, and must exit 0 unless `anyExit`. */
export async function allowed(
  t: ExecutionContext<unknown>,
  clients: ClientSet,
  workspaceId: string,
  command: string,
  options: { anyExit?: boolean; env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<BashResponse> {
  let r: BashResponse;
  try {
    r = await clients.tools.bash({ workspaceId, command, env: options.env ?? {}, timeoutMs: BigInt(options.timeoutMs ?? 30_000) });
  } catch (err) {
    const e = ConnectError.from(err);
    t.fail(`look-alike ${JSON.stringify(command)} was refused: ${e.rawMessage} ${JSON.stringify(errorDetail(e)?.metadata ?? {})}`);
    throw err;
  }
  if (!options.anyExit) t.is(r.exitCode, 0, `look-alike ${JSON.stringify(command)} failed: ${r.stderr}`);
  return r;
}

/** Asserts that none of `names` exists in the workspace root (the proof that refused scripts ran nothing). */
export async function absent(t: ExecutionContext<unknown>, clients: ClientSet, workspaceId: string, names: string[]): Promise<void> {
  const { files } = await clients.tools.listFiles({ workspaceId, path: "" });
  const present = new Set(files.map((f) => f.path.replace(/\/$/, "")));
  t.deepEqual(names.filter((n) => present.has(n)), [], "files a refused script would have made");
}

/** The reason name of a rejected call, or "ok". */
export async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "ok";
  } catch (err) {
    const e = ConnectError.from(err);
    return ErrorReason[errorDetail(e)?.reason ?? ErrorReason.UNSPECIFIED] ?? `code ${e.code}`;
  }
}

/** Everything a response or error says, as text, for leak checks. */
export function transcript(value: unknown): string {
  if (value instanceof ConnectError) return `${value.code} ${value.rawMessage} ${JSON.stringify(errorDetail(value) ?? {}, (_k, v) => (typeof v === "bigint" ? v.toString() : v))}`;
  return JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? v.toString() : v instanceof Uint8Array ? Buffer.from(v).toString("latin1") : v));
}

/** True when `text` carries any planted secret. */
export function leaks(text: string): boolean {
  return Object.values(SECRET).some((s) => s !== SECRET.token && text.includes(s)) || new RegExp(`${SECRET.token} in (pem|key|id_rsa)`).test(text);
}

/** Single-quotes `s` for bash. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, "'\\''")}'`;
}
