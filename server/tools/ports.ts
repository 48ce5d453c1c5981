/**
 * Exposed ports: the `bash` tool's way to let a caller reach a server a workspace runs (a dev
 * server started with StartProcess) through the server's authenticated proxy (ports/port-proxy.ts),
 * never through a port of the host. What is exposed lives in ports/exposures.ts; the connection
 * itself is the provider's `dial`, made from inside the sandbox.
 */
import { DomainError, hasReason } from "../../core/errors.ts";
import type { Exposure, PortExposures } from "../ports/exposures.ts";
import type { ToolContext } from "./context.ts";

function exposuresOf(ctx: ToolContext): PortExposures {
  if (!ctx.ports) throw new DomainError("PROCESSES_UNSUPPORTED", "Exposed ports are not available here");
  return ctx.ports;
}

/** Exposes `port`; `listening` says whether something accepted a connection there just now. */
export async function exposePort(ctx: ToolContext, input: { port: number }): Promise<{ exposure: Exposure; listening: boolean }> {
  const exposures = exposuresOf(ctx);
  const dial = ctx.workspace.dial;
  if (dial === undefined) throw new DomainError("PROCESSES_UNSUPPORTED", "This workspace's provider runs no processes, so nothing listens on its ports");
  const known = exposures.list(ctx.workspace.id).some((e) => e.port === input.port);
  const exposure = exposures.expose(ctx.workspace.id, input.port);
  let listening = false;
  try {
    (await dial.call(ctx.workspace, input.port, ctx.signal)).destroy();
    listening = true;
  } catch (err) {
    if (!hasReason(err, "PORT_NOT_LISTENING")) {
      // The sandbox could not be asked (it is not ready, say): a failed call exposes nothing new.
      if (!known) exposures.unexpose(ctx.workspace.id, input.port);
      throw err;
    }
  }
  return { exposure, listening };
}

/** Takes `port` off the proxy; how many connections through it were closed. */
export async function unexposePort(ctx: ToolContext, input: { port: number }): Promise<{ closed: number }> {
  return { closed: exposuresOf(ctx).unexpose(ctx.workspace.id, input.port) };
}

/** The workspace's exposed ports. */
export async function listExposedPorts(ctx: ToolContext): Promise<Exposure[]> {
  return exposuresOf(ctx).list(ctx.workspace.id);
}
