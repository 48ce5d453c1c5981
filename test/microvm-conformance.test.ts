/** The provider conformance suite against the `microvm` provider, through the real server over gRPC. */
import { registerContainerConformance } from "./conformance/container-suite.ts";

await registerContainerConformance("microvm");
