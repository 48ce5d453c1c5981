/**
 * `ws create|ls|rm|show` and `session start|ls|end`. `session start` shows provisioning as it happens
 * on stderr (each stage, the clone's progress, each setup command's output), so stdout holds only the
 * result; `--no-wait` returns as soon as the session exists.
 */
import {
  AgentMessageKind,
  AgentWorkspaceError,
  PostAgentMessageResponseSchema,
  ProvisioningStage,
  type SessionInfo as Session,
  SessionSchema,
  SessionStatus,
  StartSessionResponseSchema,
  type WorkspaceInfo as Workspace,
  WorkspaceSchema,
  WorkspaceStatus,
  type WatchSessionResponse,
  WatchSessionResponseSchema,
} from "@agent-workspace/client";
import { create, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { type Command, type Context, int, pairs, str } from "./command.ts";
import { describeError, EXIT_FAILURE, enumName, jsonLine, labelsText, table, UsageError, when, write } from "./output.ts";

function workspaceRow(w: Workspace): string[] {
  return [w.id, w.provider, enumName(WorkspaceStatus, w.status), w.agentType || "-", when(w.createdAt), labelsText(w.labels)];
}

function workspaceDetails(w: Workspace): string {
  const rows = [
    ["id", w.id],
    ["provider", w.provider],
    ["status", `${enumName(WorkspaceStatus, w.status)}${w.statusMessage ? ` (${w.statusMessage})` : ""}`],
    ["root", w.root],
    ["created", when(w.createdAt)],
    ["agent type", w.agentType || "-"],
    ["image", w.image || "-"],
    ["labels", labelsText(w.labels)],
    ["limits", w.limits ? Object.entries({ cpu: w.limits.cpu, memory: w.limits.memory, disk: w.limits.disk, pids: w.limits.pids }).filter(([, v]) => v !== "" && v !== 0n).map(([k, v]) => `${k}=${v}`).join(" ") || "-" : "-"],
  ];
  if (w.task?.repositoryUrl) rows.push(["task", `${w.task.repositoryUrl}${w.task.branch ? ` @ ${w.task.branch}` : ""}`]);
  return rows.map(([k, v]) => `${`${k}:`.padEnd(12)}${v}`).join("\n") + "\n";
}

function sessionRow(s: Session): string[] {
  return [s.id, s.agentType, enumName(SessionStatus, s.status), s.workspaceId || "-", s.provider || "-", when(s.createdAt), s.task?.repositoryUrl || "-"];
}

/** Every page of a paged list, in order. */
async function allPages<T>(page: (token: string) => Promise<[T[], string]>): Promise<T[]> {
  const all: T[] = [];
  let token = "";
  do {
    const [items, next] = await page(token);
    all.push(...items);
    token = next;
  } while (token !== "");
  return all;
}

/** A list as a table for people, or one JSON object per line. */
async function printList<D extends DescMessage>(ctx: Context, items: MessageShape<D>[], schema: D, none: string, header: string[], row: (item: MessageShape<D>) => string[]): Promise<void> {
  if (ctx.json) {
    for (const item of items) await write(ctx.io.stdout, jsonLine(schema, item));
  } else {
    await write(ctx.io.stdout, items.length === 0 ? `${none}\n` : table([header, ...items.map(row)]));
  }
}

const workspaceHeader = ["ID", "PROVIDER", "STATUS", "AGENT TYPE", "CREATED", "LABELS"];
const sessionHeader = ["ID", "AGENT TYPE", "STATUS", "WORKSPACE", "PROVIDER", "CREATED", "REPOSITORY"];

export const WORKSPACE_COMMANDS: Record<string, Command> = {
  "ws create": {
    usage: "ws create [--provider P] [--agent-type T] [--image I] [--label k=v]...",
    summary: "Creates a workspace and prints its id (the whole workspace with --json).",
    options: { provider: { type: "string" }, "agent-type": { type: "string" }, image: { type: "string" }, label: { type: "string", multiple: true } },
    help: { provider: "local, docker, gvisor or memory (default: the agent type's, else the server's)", "agent-type": "the agent type whose configuration and tools apply", image: "container image (docker, gvisor)", label: "a label, repeatable" },
    positionals: [0, 0],
    async run(ctx, { values }) {
      const workspace = await ctx.aw().workspaces.create(
        { provider: str(values, "provider"), agentType: str(values, "agent-type"), image: str(values, "image"), labels: pairs(values, "label") },
        { signal: ctx.signal },
      );
      await write(ctx.io.stdout, ctx.json ? jsonLine(WorkspaceSchema, workspace) : `${workspace.id}\n`);
      return 0;
    },
  },
  "ws ls": {
    usage: "ws ls [--provider P] [--label k=v]...",
    summary: "Lists workspaces (every page).",
    options: { provider: { type: "string" }, label: { type: "string", multiple: true } },
    help: { provider: "only this provider's", label: "only those with this label, repeatable" },
    positionals: [0, 0],
    async run(ctx, { values }) {
      const all = await allPages(async (pageToken) => {
        const page = await ctx.aw().workspaces.list({ provider: str(values, "provider"), labels: pairs(values, "label"), pageToken }, { signal: ctx.signal });
        return [page.workspaces, page.nextPageToken];
      });
      await printList(ctx, all, WorkspaceSchema, "no workspaces", workspaceHeader, workspaceRow);
      return 0;
    },
  },
  "ws show": {
    usage: "ws show WS",
    summary: "Shows one workspace.",
    positionals: [1, 1],
    async run(ctx, { positionals: [id] }) {
      const workspace = await ctx.aw().workspaces.get(id, { signal: ctx.signal });
      await write(ctx.io.stdout, ctx.json ? jsonLine(WorkspaceSchema, workspace) : workspaceDetails(workspace));
      return 0;
    },
  },
  "ws rm": {
    usage: "ws rm WS...",
    summary: "Deletes workspaces (their files and sandboxes); each id is tried, and the status is 1 if any failed.",
    positionals: [1, Infinity],
    async run(ctx, { positionals }) {
      let status = 0;
      for (const id of positionals) {
        try {
          await ctx.aw().workspaces.delete(id, { signal: ctx.signal });
          await write(ctx.io.stdout, ctx.json ? `${JSON.stringify({ id, deleted: true })}\n` : `deleted ${id}\n`);
        } catch (err) {
          if (!(err instanceof AgentWorkspaceError) || positionals.length === 1) throw err;
          await write(ctx.io.stderr, describeError(err, ctx.url));
          status = EXIT_FAILURE;
        }
      }
      return status;
    },
  },
  "session start": {
    usage: "session start --agent-type T [--repo URL] [--branch B] [--pr N] [--base-branch B] [--workspace WS] [--label k=v]... [--no-wait]",
    summary: "Starts a session and shows its provisioning until it is active; prints its id and workspace (and its token with --json).",
    options: {
      "agent-type": { type: "string" },
      repo: { type: "string" },
      branch: { type: "string" },
      pr: { type: "string" },
      "base-branch": { type: "string" },
      workspace: { type: "string" },
      label: { type: "string", multiple: true },
      "no-wait": { type: "boolean" },
    },
    help: {
      "agent-type": "the agent type (required)",
      repo: "the task's repository URL",
      branch: "the task's branch",
      pr: "the task's pull request number",
      "base-branch": "the pull request's base branch",
      workspace: "join this existing workspace instead of provisioning one",
      label: "a label, repeatable",
      "no-wait": "return at once, while it provisions",
    },
    positionals: [0, 0],
    async run(ctx, { values }) {
      const agentType = str(values, "agent-type");
      if (agentType === "") throw new UsageError("session start: --agent-type is required");
      const pr = int(values, "pr");
      const started = await ctx.aw().startSession(
        {
          agentType,
          workspaceId: str(values, "workspace"),
          labels: pairs(values, "label"),
          task: { repositoryUrl: str(values, "repo"), branch: str(values, "branch"), pullRequestNumber: BigInt(pr ?? 0), baseBranch: str(values, "base-branch") },
        },
        { signal: ctx.signal },
      );
      let session = started.info;
      if (!values["no-wait"] && session.status === SessionStatus.PROVISIONING) {
        await follow(ctx, started.watch({ signal: ctx.signal }));
        session = await started.refresh({ signal: ctx.signal });
      }
      if (ctx.json) {
        await write(ctx.io.stdout, jsonLine(StartSessionResponseSchema, create(StartSessionResponseSchema, { session, sessionToken: started.token })));
      } else {
        await write(ctx.io.stdout, `${session.id} ${enumName(SessionStatus, session.status)} workspace ${session.workspaceId || "-"}\n`);
        for (const w of session.warnings) await write(ctx.io.stderr, `warning: ${w.message}\n`);
      }
      if (session.status === SessionStatus.DEGRADED || session.status === SessionStatus.ENDED) {
        await write(ctx.io.stderr, `agent-workspace: session ${session.id} is ${enumName(SessionStatus, session.status)}${session.statusMessage ? `: ${session.statusMessage}` : ""}\n`);
        return EXIT_FAILURE;
      }
      return 0;
    },
  },
  "session ls": {
    usage: "session ls [--agent-type T] [--status S]",
    summary: "Lists sessions (every page).",
    options: { "agent-type": { type: "string" }, status: { type: "string" } },
    help: { "agent-type": "only this agent type's", status: "provisioning, active, degraded or ended" },
    positionals: [0, 0],
    async run(ctx, { values }) {
      const statusText = str(values, "status");
      const status = statusText === "" ? SessionStatus.UNSPECIFIED : (SessionStatus as unknown as Record<string, number>)[statusText.toUpperCase()];
      if (status === undefined || (statusText !== "" && status === SessionStatus.UNSPECIFIED)) throw new UsageError(`--status ${statusText}: expected provisioning, active, degraded or ended`);
      const all = await allPages(async (pageToken) => {
        const page = await ctx.aw().sessions.list({ agentType: str(values, "agent-type"), status, pageToken }, { signal: ctx.signal });
        return [page.sessions, page.nextPageToken];
      });
      await printList(ctx, all, SessionSchema, "no sessions", sessionHeader, sessionRow);
      return 0;
    },
  },
  "session post": {
    usage: "session post SESSION TEXT [--summary]",
    summary: "Posts a note (or with --summary the closing summary) into a session's chain, where people watching see it among the tool calls.",
    options: { summary: { type: "boolean" } },
    help: { summary: "the agent's closing summary, not a note" },
    positionals: [2, 2],
    async run(ctx, { values, positionals: [id, text] }) {
      const posted = await ctx.aw().audit.postMessage({ sessionId: id === "-" ? "" : id, text, kind: values.summary ? AgentMessageKind.SUMMARY : AgentMessageKind.NOTE }, { signal: ctx.signal });
      await write(ctx.io.stdout, ctx.json ? jsonLine(PostAgentMessageResponseSchema, posted) : `posted ${values.summary ? "summary" : "note"} to ${posted.sessionId}\n`);
      return 0;
    },
  },
  "session end": {
    usage: "session end SESSION",
    summary: "Ends a session: its token stops working and its workspace is removed (unless shared).",
    positionals: [1, 1],
    async run(ctx, { positionals: [id] }) {
      const session = await ctx.aw().sessions.end(id, { signal: ctx.signal });
      await write(ctx.io.stdout, ctx.json ? jsonLine(SessionSchema, session) : `${id} ${enumName(SessionStatus, session.status)}\n`);
      return 0;
    },
  },
};

/**
 * Shows a session's provisioning on stderr until it leaves PROVISIONING: stages as they start and
 * end, and each stage's output line by line (of a line git redraws with `\r`, its final state).
 */
async function follow(ctx: Context, events: AsyncIterable<WatchSessionResponse>): Promise<void> {
  const err = ctx.io.stderr;
  const began = Date.now();
  const stamp = () => `${((Date.now() - began) / 1000).toFixed(1).padStart(5)}s`;
  const pending = new Map<string, string>();
  for await (const res of events) {
    if (ctx.json) {
      // Scripts that asked for JSON still see progress, as JSON lines on stderr.
      await write(err, jsonLine(WatchSessionResponseSchema, res));
    } else {
      await write(err, progressLine(res, stamp, pending));
    }
    if (res.event.case === "status" && res.event.value.status !== SessionStatus.PROVISIONING) return;
  }
}

function progressLine(res: WatchSessionResponse, stamp: () => string, pending: Map<string, string>): string {
  const e = res.event;
  switch (e.case) {
    case "status":
      return `${stamp()}  ${enumName(SessionStatus, e.value.status)}${e.value.message ? `: ${e.value.message}` : ""}\n`;
    case "stageStarted":
      return `${stamp()}  ▶ ${enumName(ProvisioningStage, e.value.stage)}${e.value.detail ? ` ${e.value.detail}` : ""}\n`;
    case "output": {
      const key = `${e.value.stage}/${e.value.index}/${e.value.stderr}`;
      const text = (pending.get(key) ?? "") + Buffer.from(e.value.data).toString("utf8");
      const lines = text.split(/\r?\n/);
      pending.set(key, lines.pop() ?? "");
      // git redraws a progress line with \r; only each line's final state is shown.
      return lines
        .map((l) => l.split("\r").filter((part) => part.trim() !== "").pop()?.trimEnd() ?? "")
        .filter((l) => l !== "")
        .map((l) => `${stamp()}    │ ${l}\n`)
        .join("");
    }
    case "stageEnded":
      return `${stamp()}  ${e.value.ok ? "✔" : "✘"} ${enumName(ProvisioningStage, e.value.stage)} (${e.value.durationMs} ms)${e.value.message ? ` ${e.value.message}` : ""}\n`;
    case "warning":
      return `${stamp()}  ⚠ ${e.value.message}\n`;
    default:
      return "";
  }
}
