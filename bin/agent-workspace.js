#!/usr/bin/env -S node --liftoff-only --max-semi-space-size=16
// agent-workspace command line: `agent-workspace serve [options]` starts the server (`serve --help`
// lists the options); `ws`, `session`, `exec`, `read`, `write`, `edit`, `grep`, `config` and `audit`
// talk to a running one (cli/; `agent-workspace help` lists them). Needs Node 24 or later, which `npm install` brings as a dependency; npm
// scripts and npx put it first on PATH.
const [major] = process.versions.node.split(".").map(Number);
if (major < 24) {
  process.stderr.write(`agent-workspace needs Node.js 24 or later (this is ${process.version}); run it through npm (npm start, npx agent-workspace), which uses the Node 24 installed with the package.\n`);
  process.exit(2);
}
// --liftoff-only (in the shebang and npm start): the command policy's bash parser is WebAssembly,
// and V8's optimising tier briefly takes ~500 MiB compiling it, for no gain (Liftoff parses as fast).
// --max-semi-space-size=16 (likewise): V8's young generation may grow to 16 MiB per semi-space. Every
// call allocates (some 70 KiB for a no-op Bash), and with 1 MiB the collector ran every ~10 calls and
// promoted what a call still held then: a no-op Bash cost the server 1.26 ms of CPU against 1.02 ms
// with 16 (bench/ab-cpu.ts, alternating rounds). A streamed command's 64 KiB output buffers, which live
// outside the heap, no longer wait for a collection: each is freed once written (core/owned-chunks.ts).
// V8 freezes its flags at start, so neither can be set from here.
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
  case "help": {
    const { overview } = await import("../cli/main.ts");
    process.stdout.write(overview());
    break;
  }
  default: {
    const { COMMAND_WORDS, main, overview } = await import("../cli/main.ts");
    if (!COMMAND_WORDS.has(command) && !/^--(server|protocol|json)(=|$)/.test(command)) {
      process.stderr.write(`agent-workspace: unknown command '${command}'\n${overview()}`);
      process.exit(2);
    }
    await main([command, ...rest], process.env);
  }
}
