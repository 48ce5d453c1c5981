/**
 * The tool commands: `exec`, `read`, `write`, `edit` and `grep`, each one ToolService call. `WS` is a
 * workspace id, or `-` for the workspace of the session whose token is in
 * AGENT_WORKSPACE_SESSION_TOKEN.
 *
 * `exec` streams: the command's stdout goes to stdout and its stderr to stderr as the bytes arrive,
 * unchanged, and its exit status becomes ours (128 + N when signal N ended it, 124 when it timed
 * out, as timeout(1) does). Ctrl-C cancels the call, which kills the command in the workspace.
 */
import { constants } from "node:os";
import { CancelledError, EditFileResponseSchema, FileKind, ReadFileResponseSchema, WriteFileResponseSchema } from "@agent-workspace/client";
import { type Command, type Context, duration, int, pairs, str, type Values } from "./command.ts";
import { jsonLine, UsageError, write } from "./output.ts";

/** The most a WriteFile request may carry (the server's message limit, less room for the path). */
const MAX_WRITE_BYTES = 32 * 1024 * 1024 - 64 * 1024;

/** Exit status after Ctrl-C, as shells report SIGINT. */
const EXIT_INTERRUPTED = 130;
/** Exit status of a command that timed out (timeout(1)'s). */
const EXIT_TIMED_OUT = 124;

function workspaceId(arg: string): string {
  return arg === "-" ? "" : arg;
}

/** Words as one bash command line, each quoted when it needs to be (`exec WS -- ls "my file"`). */
export function shellJoin(words: string[]): string {
  return words.map((w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`)).join(" ");
}

function timeoutMs(values: Values): bigint {
  const t = str(values, "timeout");
  return t === "" ? 0n : BigInt(duration(t, "timeout"));
}

function cancelled(err: unknown, ctx: Context): boolean {
  return ctx.signal.aborted && err instanceof CancelledError;
}

export const TOOL_COMMANDS: Record<string, Command> = {
  exec: {
    usage: "exec WS [--workdir DIR] [--timeout 30s] [--env k=v]... -- COMMAND [ARG...]",
    summary:
      "Runs a command in the workspace with bash, streaming its stdout and stderr apart, and exits with its status. One word after -- is a bash command line as is ('ls | wc -l'); several are quoted and joined.",
    options: { workdir: { type: "string" }, timeout: { type: "string" }, env: { type: "string", multiple: true } },
    help: { workdir: "directory to run in, relative to the workspace", timeout: "kill the command after this long (default: the server's, 120s)", env: "an environment variable, repeatable" },
    positionals: [1, 1],
    rest: true,
    async run(ctx, { values, positionals: [ws], rest }) {
      if (rest.length === 0) throw new UsageError("exec: no command; put it after --, as in 'agent-workspace exec WS -- ls -la'");
      const command = rest.length === 1 ? rest[0] : shellJoin(rest);
      try {
        const run = ctx.aw().workspace(workspaceId(ws)).streamBash(
          { command, workdir: str(values, "workdir"), timeoutMs: timeoutMs(values), env: pairs(values, "env") },
          { signal: ctx.signal },
        );
        for await (const chunk of run) {
          if (ctx.json) {
            if (chunk.text !== "") await write(ctx.io.stdout, `${JSON.stringify({ [chunk.stream]: chunk.text })}\n`);
          } else {
            await write(chunk.stream === "stdout" ? ctx.io.stdout : ctx.io.stderr, chunk.bytes);
          }
        }
        const e = await run.exit;
        if (ctx.json) {
          await write(ctx.io.stdout, `${JSON.stringify({ exited: { exit_code: e.exitCode, signal: e.signal, timed_out: e.timedOut, duration_ms: Number(e.durationMs), oom_killed: e.oomKilled, stdout_truncated: e.stdoutTruncated, stderr_truncated: e.stderrTruncated } })}\n`);
        } else {
          if (e.stdoutTruncated || e.stderrTruncated) await write(ctx.io.stderr, `agent-workspace: output was cut (stdout ${e.stdoutTotalBytes} bytes, stderr ${e.stderrTotalBytes} bytes in all)\n`);
          if (e.timedOut) await write(ctx.io.stderr, `agent-workspace: the command timed out after ${e.durationMs} ms and was killed\n`);
          if (e.oomKilled) await write(ctx.io.stderr, "agent-workspace: the command ran out of memory and was killed\n");
        }
        if (e.timedOut) return EXIT_TIMED_OUT;
        if (e.signal !== "") return 128 + ((constants.signals as Record<string, number>)[e.signal] ?? 0);
        return e.exitCode;
      } catch (err) {
        if (cancelled(err, ctx)) {
          await write(ctx.io.stderr, "agent-workspace: cancelled; the command was killed\n");
          return EXIT_INTERRUPTED;
        }
        throw err;
      }
    },
  },
  read: {
    usage: "read WS PATH [--offset LINE] [--limit LINES]",
    summary: "Prints a file's lines, numbered as the agent sees them (a directory's entries; a binary file's size and type).",
    options: { offset: { type: "string" }, limit: { type: "string" } },
    help: { offset: "first line to show (1-based)", limit: "how many lines (default 2000)" },
    positionals: [2, 2],
    async run(ctx, { values, positionals: [ws, path] }) {
      const res = await ctx.aw().workspace(workspaceId(ws)).read({ path, offset: int(values, "offset") ?? 0, limit: int(values, "limit") ?? 0 }, { signal: ctx.signal });
      if (ctx.json) {
        await write(ctx.io.stdout, jsonLine(ReadFileResponseSchema, res));
        return 0;
      }
      if (res.kind === FileKind.BINARY) {
        await write(ctx.io.stdout, `${res.path}: binary file, ${res.size} bytes${res.mimeType ? `, ${res.mimeType}` : ""}\n`);
        return 0;
      }
      await write(ctx.io.stdout, res.content === "" || res.content.endsWith("\n") ? res.content : `${res.content}\n`);
      if (res.truncated) await write(ctx.io.stderr, `agent-workspace: ${res.totalLines} lines in all; show more with --offset and --limit\n`);
      return 0;
    },
  },
  write: {
    usage: "write WS PATH < CONTENT",
    summary: "Writes standard input to a file, atomically (parent directories are created).",
    positionals: [2, 2],
    async run(ctx, { positionals: [ws, path] }) {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of ctx.io.stdin) {
        const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
        size += b.length;
        // The server takes at most 32 MiB per message: say so before reading (or sending) more.
        if (size > MAX_WRITE_BYTES) throw new UsageError(`write: standard input is larger than the ${MAX_WRITE_BYTES} bytes one WriteFile may carry; nothing was written`);
        chunks.push(b);
      }
      const content = Buffer.concat(chunks).toString("utf8");
      const res = await ctx.aw().workspace(workspaceId(ws)).write({ path, content }, { signal: ctx.signal });
      await write(ctx.io.stdout, ctx.json ? jsonLine(WriteFileResponseSchema, res) : `${res.created ? "created" : "wrote"} ${path} (${res.bytesWritten} bytes)\n`);
      return 0;
    },
  },
  edit: {
    usage: "edit WS PATH --old TEXT --new TEXT [--all]",
    summary: "Replaces exact text in a file; it must occur once unless --all.",
    options: { old: { type: "string" }, new: { type: "string" }, all: { type: "boolean" } },
    help: { old: "the exact text to replace", new: "its replacement", all: "replace every occurrence" },
    positionals: [2, 2],
    async run(ctx, { values, positionals: [ws, path] }) {
      if (typeof values.old !== "string" || typeof values.new !== "string") throw new UsageError("edit: --old and --new are required");
      const res = await ctx.aw().workspace(workspaceId(ws)).edit({ path, oldString: values.old, newString: values.new, replaceAll: values.all === true }, { signal: ctx.signal });
      await write(ctx.io.stdout, ctx.json ? jsonLine(EditFileResponseSchema, res) : `edited ${path}: ${res.replacements} replacement${res.replacements === 1 ? "" : "s"}, ${res.linesChanged} line${res.linesChanged === 1 ? "" : "s"} changed\n`);
      return 0;
    },
  },
  grep: {
    usage: "grep WS PATTERN [PATH] [--glob G] [-i] [-C N] [--max N]",
    summary: "Searches the workspace with ripgrep (a regex; .gitignore respected), printing matches as they are found.",
    options: { glob: { type: "string" }, "ignore-case": { type: "boolean", short: "i" }, context: { type: "string", short: "C" }, max: { type: "string" } },
    help: { glob: "only files matching this glob (*.ts)", "ignore-case": "case-insensitive", context: "lines of context around each match", max: "stop after this many matches (default 100)" },
    positionals: [2, 3],
    async run(ctx, { values, positionals: [ws, pattern, path = ""] }) {
      const events = ctx.aw().workspace(workspaceId(ws)).streamGrepEvents(
        { pattern, path, glob: str(values, "glob"), caseSensitive: values["ignore-case"] ? false : undefined, contextLines: int(values, "context") ?? 0, maxResults: int(values, "max") ?? 0 },
        { signal: ctx.signal },
      );
      let found = 0;
      try {
        for await (const { event } of events) {
          if (event.case === "match") {
            found++;
            const m = event.value;
            if (ctx.json) await write(ctx.io.stdout, `${JSON.stringify({ path: m.path, line: m.line, content: m.content })}\n`);
            else if (m.content.includes("\n")) await write(ctx.io.stdout, `${m.path}:${m.line}:\n${m.content.endsWith("\n") ? m.content : `${m.content}\n`}`);
            else await write(ctx.io.stdout, `${m.path}:${m.line}:${m.content}\n`);
          } else if (event.case === "done" && event.value.truncated && !ctx.json) {
            await write(ctx.io.stderr, `agent-workspace: stopped after ${event.value.matchCount} matches; raise --max for more\n`);
          }
        }
      } catch (err) {
        if (cancelled(err, ctx)) return EXIT_INTERRUPTED;
        throw err;
      }
      // grep's convention: 1 when nothing matched.
      return found > 0 ? 0 : 1;
    },
  },
};
