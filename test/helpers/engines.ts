/**
 * Which container engines this machine offers the tests. With REQUIRE_DOCKER=1 / REQUIRE_GVISOR=1
 * (set by .ci/run) a missing engine fails the suite; otherwise container tests are skipped with
 * a visible message, so a laptop without Docker still runs everything else.
 */
import { spawnSync } from "node:child_process";
import type { TestFn } from "ava";
import Docker from "dockerode";
import { engineAvailable, runtimeAvailable } from "../../providers/docker.ts";
import { microvmSupport } from "../../providers/microvm.ts";

/** Availability of the container providers. */
export interface Engines {
  docker: boolean;
  gvisor: boolean;
  /** Why a provider is unavailable, for skip messages. */
  reason: Record<"docker" | "gvisor", string>;
}

let cached: Promise<Engines> | undefined;

/** Probes the engine once per test process. */
export function probeEngines(): Promise<Engines> {
  cached ??= (async () => {
    const docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? "/var/run/docker.sock" });
    const up = await engineAvailable(docker);
    const gv = up && (await runtimeAvailable(docker, "runsc"));
    const image = up ? await docker.getImage(process.env.AGENT_WORKSPACE_IMAGE ?? "agent-workspace-base:bookworm").inspect().then(() => true, () => false) : false;
    return {
      docker: up && image,
      gvisor: gv && image,
      reason: {
        docker: !up ? "the Docker engine is not reachable" : !image ? "the base image is missing (scripts/build-base-image.sh)" : "",
        gvisor: !up ? "the Docker engine is not reachable" : !gv ? "runsc is not registered with Docker" : !image ? "the base image is missing" : "",
      },
    };
  })();
  return cached;
}

/** True when the provider must be tested (its REQUIRE_* variable is set). */
export function required(provider: "docker" | "gvisor"): boolean {
  return process.env[provider === "docker" ? "REQUIRE_DOCKER" : "REQUIRE_GVISOR"] === "1";
}

/**
 * Decides whether `what` runs for `provider`: true when the engine is there; otherwise registers
 * a failing test (REQUIRE_* set) or a visible skip, and returns false.
 */
export function gate<C>(test: TestFn<C>, engines: Engines, provider: "docker" | "gvisor", what: string): boolean {
  if (engines[provider]) return true;
  const reason = engines.reason[provider];
  if (required(provider)) {
    test(`${provider}: ${what}: engine is available (required in CI)`, (t) => t.fail(reason));
  } else {
    console.log(`skipping ${provider} ${what}: ${reason}`);
    test.skip(`${provider}: ${what} (${reason})`, () => {});
  }
  return false;
}

/**
 * Decides whether tests needing a program run: true when `probe` (a program and arguments, by
 * default `<command> --version`) succeeds; otherwise registers a failing test
 * (REQUIRE_COMMANDS=1, set by .ci/run) or a visible skip, and returns false.
 */
export function commandGate<C>(test: TestFn<C>, command: string | string[], what: string): boolean {
  const argv = typeof command === "string" ? [command, "--version"] : command;
  const probe = spawnSync(argv[0], argv.slice(1), { stdio: "ignore" });
  if (probe.error === undefined && probe.status === 0) return true;
  const reason = `${argv.join(" ")} failed (${probe.error ? (probe.error as NodeJS.ErrnoException).code : `exit ${probe.status}`}); install it (scripts/setup-engines.sh)`;
  if (process.env.REQUIRE_COMMANDS === "1") {
    test(`${what}: ${argv[0]} is available (required in CI)`, (t) => t.fail(reason));
  } else {
    console.log(`skipping ${what}: ${reason}`);
    test.skip(`${what} (${reason})`, () => {});
  }
  return false;
}

/** Where the microvm provider's image is (scripts/build-vm-image.sh), as the server reads it. */
export const MICROVM_IMAGES = process.env.AGENT_WORKSPACE_MICROVM_IMAGES ?? "/var/lib/agent-workspace/microvm";

/** Whether this host runs the microvm provider, probed once when a test file loads this module. */
const microvm = await microvmSupport(MICROVM_IMAGES);

/**
 * Decides whether microvm tests run: true when QEMU and the VM image are there; otherwise a
 * failing test (REQUIRE_MICROVM=1, set by .ci/run) or a visible skip. Synchronous, as ava wants
 * every test declared before the file's first pause.
 */
export function microvmGate<C>(test: TestFn<C>, what: string): boolean {
  const support = microvm;
  if (support.ok) return true;
  if (process.env.REQUIRE_MICROVM === "1") {
    test(`microvm: ${what}: QEMU and the VM image are available (required in CI)`, (t) => t.fail(support.reason));
  } else {
    console.log(`skipping microvm ${what}: ${support.reason}`);
    test.skip(`microvm: ${what} (${support.reason})`, () => {});
  }
  return false;
}
