/**
 * A second (third, ...) Docker engine for the tests, as remote as one machine allows: its own
 * dockerd with its own data root and exec root, in a network namespace of its own reached only
 * through a veth pair (10.213.N.0/30, made here), listening on TCP with mutual TLS (a CA and
 * certificates made here with openssl), and in a mount namespace where the repository and the
 * temporary directory (the servers' data directories) are hidden under empty tmpfs mounts, so a
 * bind mount of any of the server's files would come up empty: the server must bring what the
 * sandbox needs through the engine's API.
 *
 * Needs root, iproute2, nsenter/unshare, openssl and dockerd (scripts/setup-engines.sh). The base
 * image is copied from the host's engine on first use and kept with the data root between runs.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Docker from "dockerode";

const BASE = "/var/lib/aw-test-engines";
const RUN = "/run/aw-test-engines";
const IMAGE = process.env.AGENT_WORKSPACE_IMAGE ?? "agent-workspace-base:bookworm";

/** One engine started by the tests. */
export interface RemoteEngine {
  name: string;
  /** tcp://10.213.N.2:2376 */
  url: string;
  /** ca.pem, cert.pem, key.pem of a client the engine accepts. */
  certDir: string;
  /** A client certificate from another CA, which the engine must refuse. */
  wrongCertDir: string;
  /** The engine's own Unix socket, for the tests' checks (never given to a server under test). */
  admin: Docker;
  /** SIGKILL to dockerd: the engine stops answering at once (its containers keep running). */
  kill(): void;
  /** Starts dockerd again (after kill or stop). */
  start(): Promise<void>;
  /** Stops dockerd and its containers. */
  stop(): Promise<void>;
}

/** Why remote engines cannot be started here, or "" when they can. */
export function remoteEngineSupport(): string {
  if (process.getuid?.() !== 0) return "the tests do not run as root (network namespaces need it)";
  for (const tool of ["ip", "nsenter", "unshare", "openssl", "dockerd", "docker"]) {
    if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) return `${tool} is missing`;
  }
  return "";
}

function sh(script: string): string {
  return execFileSync("sh", ["-c", script], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** Makes a CA and a certificate signed by it under `dir` (ca.pem, cert.pem, key.pem); `server` gives the engine's address. */
function makeCerts(dir: string, caDir: string, server?: string): void {
  mkdirSync(dir, { recursive: true });
  if (!existsSync(path.join(caDir, "ca-key.pem"))) {
    mkdirSync(caDir, { recursive: true });
    sh(`cd '${caDir}' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca-key.pem -out ca.pem -days 30 -subj /CN=aw-test-ca 2>/dev/null`);
  }
  const ext = server ? `subjectAltName=IP:${server}\nextendedKeyUsage=serverAuth\n` : "extendedKeyUsage=clientAuth\n";
  writeFileSync(path.join(dir, "ext"), ext);
  sh(
    `cd '${dir}' && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out req.csr -subj /CN=${server ? "engine" : "client"} 2>/dev/null && ` +
      `openssl x509 -req -in req.csr -CA '${caDir}/ca.pem' -CAkey '${caDir}/ca-key.pem' -CAcreateserial -out cert.pem -days 30 -extfile ext 2>/dev/null && ` +
      `cp '${caDir}/ca.pem' ca.pem && rm -f req.csr ext`,
  );
}

/**
 * Starts engine number `n` (1-200): network namespace aw-eng<n>, address 10.213.<n>.2. Anything
 * left by an earlier run (a dockerd, the namespace, containers) is removed first.
 */
export async function startRemoteEngine(n: number, options: { runsc?: boolean } = {}): Promise<RemoteEngine> {
  const name = `e${n}`;
  const ns = `aw-eng${n}`;
  const hostIf = `awe${n}h`;
  const nsIf = `awe${n}n`;
  const ip = `10.213.${n}.2`;
  const dataRoot = path.join(BASE, name);
  const execRoot = path.join(RUN, name);
  const socket = path.join(RUN, `${name}.sock`);
  const pidFile = path.join(RUN, `${name}.pid`);
  const tls = path.join(BASE, `${name}-tls`);
  const clientDir = path.join(tmpdir(), `aw-test-engine-${name}-${process.pid}`);
  mkdirSync(dataRoot, { recursive: true });
  mkdirSync(execRoot, { recursive: true });

  const killDaemon = (signal: NodeJS.Signals) => {
    const pid = Number(existsSync(pidFile) ? readFileSync(pidFile, "utf8").trim() : "0");
    if (pid > 0) {
      try {
        process.kill(pid, signal);
      } catch {
        // Gone.
      }
    }
    return pid;
  };
  const waitGone = async (pid: number) => {
    for (let i = 0; pid > 0 && i < 300; i++) {
      try {
        process.kill(pid, 0);
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  // Leftovers of an earlier run.
  await waitGone(killDaemon("SIGTERM"));
  rmSync(pidFile, { force: true });
  sh(`ip netns del ${ns} 2>/dev/null; ip link del ${hostIf} 2>/dev/null; true`);
  sh(
    `ip netns add ${ns} && ip link add ${hostIf} type veth peer name ${nsIf} && ip link set ${nsIf} netns ${ns} && ` +
      `ip addr add 10.213.${n}.1/30 dev ${hostIf} && ip link set ${hostIf} up && ` +
      `ip netns exec ${ns} ip addr add ${ip}/30 dev ${nsIf} && ip netns exec ${ns} ip link set ${nsIf} up && ip netns exec ${ns} ip link set lo up`,
  );
  rmSync(tls, { recursive: true, force: true });
  makeCerts(path.join(tls, "server"), path.join(tls, "ca"), ip);
  makeCerts(path.join(clientDir, "client"), path.join(tls, "ca"));
  makeCerts(path.join(clientDir, "wrong"), path.join(clientDir, "wrong-ca"));
  const config = path.join(BASE, `${name}.json`);
  writeFileSync(config, JSON.stringify(options.runsc ? { runtimes: { runsc: { path: "/usr/local/sbin/agent-workspace-runsc", runtimeArgs: ["--network=none"] } } } : {}));
  // What the engine must not see of the server's host: the repository (the Node binary, the
  // executor, ripgrep) and the temporary directory (the servers' data directories).
  const hidden = [...new Set([process.cwd(), tmpdir()])].map((d) => `mount -t tmpfs -o size=1m,mode=0755 none '${d}'`).join(" && ");
  const s = path.join(tls, "server");
  const daemon =
    `${hidden} && exec dockerd --data-root '${dataRoot}' --exec-root '${execRoot}' --pidfile '${pidFile}' -H 'unix://${socket}' -H tcp://${ip}:2376 ` +
    `--tlsverify --tlscacert '${s}/ca.pem' --tlscert '${s}/cert.pem' --tlskey '${s}/key.pem' ` +
    `--bridge none --iptables=false --ip6tables=false --cgroup-parent aw-test-${name} --config-file '${config}'`;
  let child: ChildProcess | undefined;
  const admin = new Docker({ socketPath: socket });
  const containerdPid = path.join(execRoot, "containerd", "containerd.pid");
  const start = async () => {
    // A containerd that died with its dockerd may linger as a zombie no one reaps here, which
    // dockerd would take for a running one and wait for: forget it.
    const pid = Number(existsSync(containerdPid) ? readFileSync(containerdPid, "utf8").trim() : "0");
    const state = pid > 0 && existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "")[0] : "";
    if (state === "" || state === "Z") rmSync(containerdPid, { force: true });
    const log = openSync(path.join(BASE, `${name}.log`), "a");
    child = spawn("nsenter", [`--net=/var/run/netns/${ns}`, "unshare", "-m", "--propagation", "private", "sh", "-c", daemon], { stdio: ["ignore", log, log], detached: true });
    child.unref();
    for (let i = 0; ; i++) {
      if (await admin.ping().then(() => true, () => false)) break;
      if (i > 600) throw new Error(`engine ${name} did not start (see ${BASE}/${name}.log)`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  await start();
  // A clean engine: nothing of an earlier run, and the base image.
  for (const c of await admin.listContainers({ all: true })) await admin.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined);
  for (const v of (await admin.listVolumes()).Volumes ?? []) if (v.Name !== "agent-workspace-payload") await admin.getVolume(v.Name).remove().catch(() => undefined);
  if (!(await admin.getImage(IMAGE).inspect().then(() => true, () => false))) sh(`docker save '${IMAGE}' | docker -H 'unix://${socket}' load -q >/dev/null`);
  return {
    name,
    url: `tcp://${ip}:2376`,
    certDir: path.join(clientDir, "client"),
    wrongCertDir: path.join(clientDir, "wrong"),
    admin,
    kill: () => {
      killDaemon("SIGKILL");
    },
    start,
    stop: async () => {
      await waitGone(killDaemon("SIGTERM"));
    },
  };
}

/** Stops engine `engine` and removes its network namespace and client certificates (its data root stays, with the image). */
export async function removeRemoteEngine(engine: RemoteEngine, n: number): Promise<void> {
  for (const c of await engine.admin.listContainers({ all: true }).catch(() => [])) await engine.admin.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined);
  await engine.stop();
  sh(`ip netns del aw-eng${n} 2>/dev/null; ip link del awe${n}h 2>/dev/null; true`);
  rmSync(path.dirname(engine.certDir), { recursive: true, force: true });
}
