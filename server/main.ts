/**
 * The server process: parses settings, builds the app, serves it and stops it on SIGINT/SIGTERM.
 * Reached through `agent-workspace serve` (bin/agent-workspace.js), which `npm start` execs.
 *
 * Shutdown is graceful but bounded: the first signal stops accepting, ends streams and closes
 * connections (those that do not finish within the server's grace period are cut); if the whole
 * shutdown has not finished after SHUTDOWN_LIMIT_MS the process exits anyway. A signal repeated
 * more than a second after the first exits at once (a person pressing Ctrl-C again); one arriving
 * sooner is the same request delivered twice (to the process group and forwarded by npm).
 */
import { createApp } from "./app.ts";
import { listen } from "./http-server.ts";
import { parseSettings, SettingsError, USAGE } from "./settings.ts";
import { StoreError } from "./store/store.ts";

/** Longest a graceful shutdown may take before the process exits regardless. */
const SHUTDOWN_LIMIT_MS = 10_000;

/** Runs the server until a signal stops it. `argv` excludes node, the script and the subcommand. */
export async function serve(argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  let settings;
  try {
    settings = parseSettings(env, argv);
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    process.stderr.write(`agent-workspace: ${err.message}\n`);
    process.exit(2);
  }
  let app;
  try {
    app = await createApp(settings);
  } catch (err) {
    if (!(err instanceof SettingsError || err instanceof StoreError)) throw err;
    process.stderr.write(`agent-workspace: ${err.message}\n`);
    process.exit(2);
  }
  const server = await listen(app.handler, { upgrade: app.upgrade, host: settings.host, port: settings.port, tlsCert: settings.tlsCert, tlsKey: settings.tlsKey });
  app.egress.listening(settings.host, server.port);
  await app.replica?.advertise(settings.advertiseUrl !== "" ? settings.advertiseUrl : server.url);
  let firstSignalAt = 0;
  const stop = async (signal: NodeJS.Signals) => {
    if (firstSignalAt !== 0) {
      if (Date.now() - firstSignalAt > 1000) {
        app.logger.warn("second signal; exiting now", { signal });
        process.exit(1);
      }
      return;
    }
    firstSignalAt = Date.now();
    app.logger.warn("shutting down", { signal });
    const limit = setTimeout(() => {
      app.logger.error("shutdown did not finish in time; exiting", { limit_ms: SHUTDOWN_LIMIT_MS });
      process.exit(1);
    }, SHUTDOWN_LIMIT_MS);
    limit.unref();
    // Streams end first, so connections can drain; the database closes only after the server
    // has stopped, so a call still finishing (a CreateWorkspace provisioning a container) can
    // record what it made instead of leaving an orphan behind.
    app.stopStreams();
    await server.close();
    await app.close();
    app.logger.warn("stopped", { duration_ms: Date.now() - firstSignalAt });
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
  // Only now "listening": a signal sent on seeing it meets the handlers, not the default action.
  // Before "listening": whoever waits for that line (a supervisor, a test) has every start-up line by then.
  if (settings.apiKeys.length === 0) {
    app.logger.warn("running open: no API key is configured, so every caller is an operator. That is safe only because the server listens on a loopback address; set AGENT_WORKSPACE_API_KEYS before listening anywhere else", {
      host: settings.host,
    });
  }
  app.logger.warn("agent-workspace listening", {
    url: server.url,
    pid: process.pid,
    data_dir: settings.providers.dataDir,
    database: app.store.location,
    providers: app.workspaces.providerNames,
    default_provider: settings.defaultProvider,
    agent_types: app.agentTypes.list().length,
    auth: settings.apiKeys.length === 0 ? "open" : `${settings.apiKeys.length} API key(s)`,
  });
}
