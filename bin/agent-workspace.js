#!/usr/bin/env -S node --liftoff-only
// agent-workspace command line: `agent-workspace serve [options]` starts the server (`--help`
// lists the options). Needs Node 24 or later, which `npm install` brings as a dependency; npm
// scripts and npx put it first on PATH.
const [major] = process.versions.node.split(".").map(Number);
if (major < 24) {
  process.stderr.write(`agent-workspace needs Node.js 24 or later (this is ${process.version}); run it through npm (npm start, npx agent-workspace), which uses the Node 24 installed with the package.\n`);
  process.exit(2);
}
// --liftoff-only (in the shebang and npm start): the command policy's bash parser is WebAssembly,
// and V8's optimising tier briefly takes ~500 MiB compiling it, for no gain (Liftoff parses as fast).
// V8 freezes its flags at start, so it cannot be set from here.
// Before anything loads protobuf-es (see server/base64.ts).
await import("../server/base64.ts");
const [command = "serve", ...rest] = process.argv.slice(2);
switch (command) {
  case "serve": {
    const { serve } = await import("../server/main.ts");
    await serve(rest, process.env);
    break;
  }
  case "mcp": {
    // The MCP bridge over stdio (server/mcp/stdio.ts): stdout is the protocol, everything else goes to stderr.
    const { runMcpStdio } = await import("../server/mcp/stdio.ts");
    // Exits at once: the client's HTTP/2 connection to the server would keep the process alive.
    process.exit(await runMcpStdio(rest, process.env));
    break;
  }
  case "--version":
  case "version": {
    const { readFile } = await import("node:fs/promises");
    const pkg = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8"));
    process.stdout.write(`${pkg.version}\n`);
    break;
  }
  case "--help":
  case "-h":
  case "help":
    process.stdout.write("Usage: agent-workspace serve [options]   (agent-workspace serve --help lists the options)\n");
    break;
  default:
    process.stderr.write(`agent-workspace: unknown command '${command}'; try 'agent-workspace serve --help'\n`);
    process.exit(2);
}
