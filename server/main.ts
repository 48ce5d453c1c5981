/**
 * Entry point: `npm start` (or `node server/main.ts [--port N] [--host H] [--data-dir D]`).
 * Serves gRPC, gRPC-Web and Connect on one port; stops cleanly on SIGINT/SIGTERM.
 */
import { createApp } from "./app.ts";
import { loadConfig } from "./config.ts";
import { listen } from "./http-server.ts";

const config = loadConfig(process.env, process.argv.slice(2));
const app = await createApp(config);
const server = await listen(app.handler, { host: config.host, port: config.port, tlsCert: config.tlsCert, tlsKey: config.tlsKey });
app.logger.warn("agent-workspace listening", {
  url: server.url,
  data_dir: config.dataDir,
  providers: app.workspaces.providerNames,
  default_provider: config.defaultProvider,
});

let stopping = false;
const stop = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  app.logger.warn("shutting down", { signal });
  await app.close();
  await server.close();
  process.exit(0);
};
process.on("SIGINT", () => void stop("SIGINT"));
process.on("SIGTERM", () => void stop("SIGTERM"));
