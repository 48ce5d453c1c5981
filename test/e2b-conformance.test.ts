/**
 * The provider conformance suite against the `e2b` provider, through the real server over gRPC:
 * the real `e2b` SDK in the server talks to a local stand-in of E2B's API (helpers/e2b-standin.ts),
 * whose sandboxes are Docker containers, from a template with the executor in it. With
 * E2B_TEST_API_KEY set (and network access), the same suite runs against the real E2B service
 * instead (E2B_TEST_TEMPLATE names a template; without one, "base" and the executor is copied in).
 */
import anyTest, { type TestFn } from "ava";
import { registerRemoteSuite } from "./conformance/remote-suite.ts";
import { e2bEnv, startStandIn } from "./helpers/e2b.ts";
import { gate, probeEngines } from "./helpers/engines.ts";
import type { ServerCtx } from "./helpers/server.ts";

const realKey = process.env.E2B_TEST_API_KEY ?? "";
let env: Record<string, string> | undefined;
let closeStandIn: () => Promise<void> = async () => undefined;
if (realKey !== "") {
  env = { E2B_API_KEY: realKey, AGENT_WORKSPACE_E2B_TEMPLATE: process.env.E2B_TEST_TEMPLATE ?? "base" };
} else {
  console.log("e2b conformance: no E2B_TEST_API_KEY, so the suite runs against the local stand-in of E2B's API, not the E2B service");
  if (gate(anyTest as TestFn<ServerCtx>, await probeEngines(), "docker", "e2b conformance suite (its stand-in's sandboxes are containers)")) {
    const standIn = await startStandIn();
    env = e2bEnv(standIn);
    closeStandIn = () => standIn.close();
  }
}
if (env !== undefined) await registerRemoteSuite("e2b", env, closeStandIn);
