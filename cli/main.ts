/**
 * The command line for people: `agent-workspace ws|session|exec|read|write|edit|grep|config|audit …`
 * against a running server (`agent-workspace serve` is the server itself, in bin/). Every command is
 * one entry of a table (command.ts has the shape); this file finds it, parses its arguments, runs it
 * and turns a failure into one line and an exit status: 1 for a failed call, 2 for a usage mistake,
 * 130 after Ctrl-C, and `exec`'s own command's status.
 */
import { ADMIN_COMMANDS } from "./admin.ts";
import { type Command, commandHelp, parse } from "./command.ts";
import type { AgentWorkspace } from "@agent-workspace/client";
import { connect, serverUrl } from "./connection.ts";
import { describeError, errorJson, EXIT_FAILURE, EXIT_USAGE, type Io, UsageError, write } from "./output.ts";
import { TOOL_COMMANDS } from "./tools.ts";
import { WORKSPACE_COMMANDS } from "./workspaces.ts";

/** Every command, by the words that name it. */
export const COMMANDS: Record<string, Command> = { ...WORKSPACE_COMMANDS, ...TOOL_COMMANDS, ...ADMIN_COMMANDS };

/** The first words of every command, for `agent-workspace` dispatch. */
export const COMMAND_WORDS = new Set(Object.keys(COMMANDS).map((k) => k.split(" ")[0]));

/** The overview printed by `agent-workspace help` and after an unknown command. */
export function overview(): string {
  const lines = [
    "usage: agent-workspace COMMAND [options]",
    "",
    "  serve [options]               run the server (serve --help lists its options)",
    "  mcp [options]                 serve one workspace's tools to an MCP client over stdio (mcp --help)",
  ];
  for (const c of Object.values(COMMANDS)) lines.push(`  ${`${c.usage.split(" [")[0].split(" --")[0]} `.padEnd(30)}${c.summary.split(/(?<=\.) /)[0]}`);
  lines.push(
    "",
    "Every command takes --server URL (default $AGENT_WORKSPACE_URL, else http://127.0.0.1:8080), --protocol",
    "connect|grpc|grpc-web, --json and --help. The credential comes from the environment only:",
    "AGENT_WORKSPACE_API_KEY (an operator key), else AGENT_WORKSPACE_SESSION_TOKEN (WS '-' is its workspace).",
  );
  return `${lines.join("\n")}\n`;
}

/** Finds the command `argv` names: the longest run of leading words that is a command. */
function find(argv: string[]): { command: Command; rest: string[] } | undefined {
  for (let n = 3; n >= 1; n--) {
    const key = argv.slice(0, n).join(" ");
    if (COMMANDS[key]) return { command: COMMANDS[key], rest: argv.slice(n) };
  }
  return undefined;
}

/** Runs one command line; resolves to the exit status. Never throws. */
export async function runCli(line: string[], env: NodeJS.ProcessEnv, io: Io, signal: AbortSignal): Promise<number> {
  // Global options may come before the command (`agent-workspace --server URL ws ls`).
  const leading: string[] = [];
  let argv = line;
  while (argv.length > 0 && /^--(server|protocol|json)(=|$)/.test(argv[0])) {
    const takesValue = /^--(server|protocol)$/.test(argv[0]);
    leading.push(...argv.slice(0, takesValue ? 2 : 1));
    argv = argv.slice(takesValue ? 2 : 1);
  }
  const found = find(argv);
  let aw: AgentWorkspace | undefined;
  let json = line.includes("--json");
  let url = "";
  try {
    if (!found) {
      const words = argv.filter((a) => !a.startsWith("-"));
      for (let n = Math.min(2, words.length); n >= 1; n--) {
        const prefix = `${words.slice(0, n).join(" ")} `;
        const subs = new Set(Object.keys(COMMANDS).filter((k) => k.startsWith(prefix)).map((k) => k.slice(prefix.length).split(" ")[0]));
        if (subs.size > 0) throw new UsageError(`'${prefix.trim()}' needs one of: ${[...subs].join(", ")}`);
      }
      throw new UsageError(`unknown command '${words.join(" ")}'; 'agent-workspace help' lists the commands`);
    }
    const args = parse(found.command, [...leading, ...found.rest]);
    if (args.values.help) {
      await write(io.stdout, commandHelp(found.command));
      return 0;
    }
    json = args.values.json === true;
    const options = { server: typeof args.values.server === "string" ? args.values.server : undefined, protocol: typeof args.values.protocol === "string" ? args.values.protocol : undefined };
    url = serverUrl(options, env);
    return await found.command.run(
      {
        io,
        env,
        json,
        signal,
        url,
        aw: () => {
          aw ??= connect(options, env);
          return aw;
        },
      },
      args,
    );
  } catch (err) {
    await write(io.stderr, json && !(err instanceof UsageError) ? errorJson(err) : describeError(err, url));
    return err instanceof UsageError ? EXIT_USAGE : EXIT_FAILURE;
  } finally {
    aw?.close();
  }
}

/** The bin's entry: runs `argv` with the process's streams; the first Ctrl-C or SIGTERM cancels, a second one exits at once. */
export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<never> {
  const controller = new AbortController();
  const stop = (signal: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(signal === "SIGINT" ? 130 : 143);
    controller.abort();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  const status = await runCli(argv, env, { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin }, controller.signal);
  // Let piped output drain before the exit.
  await new Promise<void>((resolve) => process.stdout.write("", () => resolve()));
  process.exit(status);
}
