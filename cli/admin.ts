/**
 * Operator commands: `config agent-types ls|get|apply` and `audit ls|tail`.
 *
 * `config agent-types get ID` prints the agent type as an agent-types document (YAML, the API's
 * field names), which `config agent-types apply FILE` takes back: apply creates each agent type the
 * file declares, or updates it to match (the server makes a new revision only when something
 * differs), like the server's `--agent-types` file at start, and leaves other agent types alone.
 */
import { readFile } from "node:fs/promises";
import { toJson } from "@bufbuild/protobuf";
import { type Duration, timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  type AgentType,
  AgentTypeNotFoundError,
  AgentTypeSchema,
  type AuditEvent,
  AuditEventSchema,
  AuditOutcome,
  CancelledError,
  FileChangeKind,
  SessionStatus,
  type WatchEventsResponse,
  WatchEventsResponseSchema,
  WorkspaceStatus,
} from "@agent-workspace/client";
import { stringify } from "yaml";
import { parseAgentTypes } from "../server/agent-types/file.ts";
import { type Command, duration, int, str } from "./command.ts";
import { enumName, jsonLine, reasonName, table, UsageError, when, write } from "./output.ts";

function agentTypeDocument(types: AgentType[]): string {
  return stringify({ agent_types: types.map((t) => toJson(AgentTypeSchema, t, { useProtoFieldName: true })) });
}

function ms(d: Duration | undefined): string {
  if (!d) return "-";
  return `${Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6)}ms`;
}

/** What a call was about, from its recorded request: the command, else the path or pattern. */
function subject(e: AuditEvent): string {
  const r = e.request;
  const text = r.command ?? r.path ?? r.pattern ?? r.branch ?? "";
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function outcomeText(e: AuditEvent): string {
  const outcome = enumName(AuditOutcome, e.outcome);
  return e.reason ? `${outcome} ${reasonName(e.reason)}` : outcome;
}

/** How a watch line marks a change: + created, ~ modified, - deleted. */
const FILE_CHANGE_MARKS: Record<FileChangeKind, string> = {
  [FileChangeKind.UNSPECIFIED]: "~",
  [FileChangeKind.CREATED]: "+",
  [FileChangeKind.MODIFIED]: "~",
  [FileChangeKind.DELETED]: "-",
};

function eventLine(res: WatchEventsResponse): string {
  const at = when(res.time);
  const e = res.event;
  switch (e.case) {
    case "started":
      return "";
    case "toolCallStarted": {
      const c = e.value.call;
      return c ? `${at}  ▶ ${c.tool || c.name} ${c.procedure.split("/").pop()}  ${c.workspaceId}  ${subject(c)}\n` : "";
    }
    case "toolCallFinished": {
      const c = e.value.call;
      if (!c) return "";
      const mark = c.outcome === AuditOutcome.OK ? "✔" : "✘";
      return `${at}  ${mark} ${c.tool || c.name} ${c.procedure.split("/").pop()}  ${c.workspaceId}  ${outcomeText(c)}${c.exitCode !== undefined ? ` exit ${c.exitCode}` : ""}  ${ms(c.duration)}\n`;
    }
    case "fileChanged":
      return e.value.treeChanged
        ? `${at}  ~ (the tree changed: more than can be listed)  ${e.value.workspaceId}  (${e.value.tool})\n`
        : `${at}  ${FILE_CHANGE_MARKS[e.value.change]} ${e.value.path}  ${e.value.workspaceId}  (${e.value.tool})\n`;
    case "workspaceStatus":
      return `${at}  workspace ${e.value.workspaceId} ${e.value.deleted ? "deleted" : enumName(WorkspaceStatus, e.value.status)}${e.value.message ? `: ${e.value.message}` : ""}\n`;
    case "sessionStatus":
      return `${at}  session ${e.value.sessionId} ${enumName(SessionStatus, e.value.status)}${e.value.message ? `: ${e.value.message}` : ""}\n`;
    case "eventsDropped":
      return `${at}  … ${e.value.count} events dropped (this watcher fell behind)\n`;
    default:
      return "";
  }
}

const OUTCOMES = ["ok", "error", "denied", "cancelled"];

export const ADMIN_COMMANDS: Record<string, Command> = {
  "config agent-types ls": {
    usage: "config agent-types ls",
    summary: "Lists agent types.",
    positionals: [0, 0],
    async run(ctx) {
      const agentTypes = await ctx.aw().agentTypes.list({ signal: ctx.signal });
      if (ctx.json) {
        for (const t of agentTypes) await write(ctx.io.stdout, jsonLine(AgentTypeSchema, t));
        return 0;
      }
      const rows = agentTypes.map((t) => [t.id, t.displayName || "-", t.workspace?.enabled ? "yes" : "no", t.workspace?.provider || "-", t.workspace?.tools.join(",") || "-", String(t.revision)]);
      await write(ctx.io.stdout, rows.length === 0 ? "no agent types\n" : table([["ID", "NAME", "WORKSPACE", "PROVIDER", "TOOLS", "REVISION"], ...rows]));
      return 0;
    },
  },
  "config agent-types get": {
    usage: "config agent-types get ID",
    summary: "Prints an agent type as an agent-types document (YAML) that 'apply' takes back.",
    positionals: [1, 1],
    async run(ctx, { positionals: [id] }) {
      const agentType = await ctx.aw().agentTypes.get(id, { signal: ctx.signal });
      await write(ctx.io.stdout, ctx.json ? jsonLine(AgentTypeSchema, agentType) : agentTypeDocument([agentType]));
      return 0;
    },
  },
  "config agent-types apply": {
    usage: "config agent-types apply FILE",
    summary: "Creates or updates the agent types a YAML or JSON file declares (- reads standard input); others are left alone.",
    positionals: [1, 1],
    async run(ctx, { positionals: [file] }) {
      let text: string;
      if (file === "-") {
        const chunks: Buffer[] = [];
        for await (const chunk of ctx.io.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
        text = Buffer.concat(chunks).toString("utf8");
      } else {
        try {
          text = await readFile(file, "utf8");
        } catch (err) {
          throw new UsageError(`${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
        }
      }
      let declared: AgentType[];
      try {
        declared = parseAgentTypes(text, file === "-" ? "standard input" : file);
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      const agentTypes = ctx.aw().agentTypes;
      for (const t of declared) {
        let result: "created" | "updated" | "unchanged";
        let revision: bigint;
        let current: AgentType | undefined;
        try {
          current = await agentTypes.get(t.id, { signal: ctx.signal });
        } catch (err) {
          if (!(err instanceof AgentTypeNotFoundError)) throw err;
        }
        if (!current) {
          revision = (await agentTypes.create(t, { signal: ctx.signal })).revision;
          result = "created";
        } else {
          // The server keeps the revision when nothing differs.
          revision = (await agentTypes.update(t, { signal: ctx.signal })).revision;
          result = revision === current.revision ? "unchanged" : "updated";
        }
        await write(ctx.io.stdout, ctx.json ? `${JSON.stringify({ id: t.id, result, revision: String(revision) })}\n` : `${result} ${t.id} (revision ${revision})\n`);
      }
      return 0;
    },
  },
  "audit ls": {
    usage: "audit ls [--workspace WS] [--session S] [--agent-type T] [--tool NAME] [--outcome O] [--since 1h] [--limit N]",
    summary: "Lists recorded tool calls, newest first.",
    options: {
      workspace: { type: "string" },
      session: { type: "string" },
      "agent-type": { type: "string" },
      tool: { type: "string" },
      outcome: { type: "string" },
      since: { type: "string" },
      limit: { type: "string" },
    },
    help: {
      workspace: "only this workspace's",
      session: "only this session's",
      "agent-type": "only this agent type's",
      tool: "only this tool's (bash, read, …)",
      outcome: "ok, error, denied or cancelled",
      since: "only calls that started within this long (30m, 2h, 1d)",
      limit: "at most this many (default 50)",
    },
    positionals: [0, 0],
    async run(ctx, { values }) {
      const outcome = str(values, "outcome");
      if (outcome !== "" && !OUTCOMES.includes(outcome)) throw new UsageError(`--outcome ${outcome}: expected ${OUTCOMES.join(", ")}`);
      const since = str(values, "since");
      const { events } = await ctx.aw().audit.list(
        {
          workspaceId: str(values, "workspace"),
          sessionId: str(values, "session"),
          agentType: str(values, "agent-type"),
          tool: str(values, "tool"),
          outcome: outcome === "" ? AuditOutcome.UNSPECIFIED : (AuditOutcome as unknown as Record<string, number>)[outcome.toUpperCase()],
          startTime: since === "" ? undefined : timestampFromMs(Date.now() - duration(since, "since")),
          pageSize: int(values, "limit") ?? 50,
        },
        { signal: ctx.signal },
      );
      if (ctx.json) {
        for (const e of events) await write(ctx.io.stdout, jsonLine(AuditEventSchema, e));
        return 0;
      }
      const rows = events.map((e) => [when(e.startTime), e.tool || e.name, e.procedure.split("/").pop() ?? "", outcomeText(e), e.workspaceId || "-", e.sessionId || "-", ms(e.duration), subject(e)]);
      await write(ctx.io.stdout, rows.length === 0 ? "no audit events\n" : table([["TIME", "TOOL", "PROCEDURE", "OUTCOME", "WORKSPACE", "SESSION", "DURATION", "REQUEST"], ...rows]));
      return 0;
    },
  },
  "audit tail": {
    usage: "audit tail [--workspace WS] [--session S]",
    summary: "Follows tool calls, file changes and status changes live until Ctrl-C.",
    options: { workspace: { type: "string" }, session: { type: "string" } },
    help: { workspace: "only this workspace's", session: "only this session's" },
    positionals: [0, 0],
    async run(ctx, { values }) {
      try {
        for await (const res of ctx.aw().watchEvents({ workspaceId: str(values, "workspace"), sessionId: str(values, "session") }, { signal: ctx.signal })) {
          if (ctx.json) await write(ctx.io.stdout, jsonLine(WatchEventsResponseSchema, res));
          else if (res.event.case === "started") await write(ctx.io.stderr, "following; Ctrl-C stops\n");
          else await write(ctx.io.stdout, eventLine(res));
        }
      } catch (err) {
        // Ctrl-C is how a tail ends: not a failure.
        if (ctx.signal.aborted && err instanceof CancelledError) return 0;
        throw err;
      }
      return 0;
    },
  },
};
