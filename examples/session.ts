/**
 * A session end to end, with a live progress display: make sure an agent type exists, start a
 * session for a task, watch it provision (sandbox, clone with git's progress, each setup command
 * with its output), run a command with the session token, and end the session.
 *
 *   npx node examples/session.ts [server-url] [repository-url] [branch]
 *
 * Defaults: http://127.0.0.1:8080, no repository. With AGENT_WORKSPACE_API_KEY set it is sent as
 * the operator key.
 */
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ConfigService } from "../gen/agentworkspace/v1/config_pb.js";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { ProvisioningStage, SessionStatus, WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";

const [baseUrl = "http://127.0.0.1:8080", repositoryUrl = "", branch = ""] = process.argv.slice(2);
const bearer = (token: string): Interceptor => (next) => (req) => {
  req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};
const operatorKey = process.env.AGENT_WORKSPACE_API_KEY ?? "";
const operator = createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: operatorKey ? [bearer(operatorKey)] : [] });
const config = createClient(ConfigService, operator);
const workspaces = createClient(WorkspaceService, operator);

// 1. An agent type (created once; an existing one is kept).
const agentType = "example-coder";
await config
  .createAgentType({
    agentType: {
      id: agentType,
      workspace: {
        enabled: true,
        tools: ["bash", "read", "write", "edit", "grep", "glob", "list"],
        repoSource: { type: "task_context" },
        checkoutOnStart: true,
        setupCommands: ["echo preparing; sleep 1; echo prepared > .setup-done", "ls -A | head"],
      },
    },
  })
  .catch((err: Error) => {
    if (!/already exists/.test(err.message)) throw err;
  });

// 2. A session for a task; it returns at once, PROVISIONING.
const { session, sessionToken } = await workspaces.startSession({ agentType, task: { repositoryUrl, branch } });
if (!session) throw new Error("no session");
console.log(`session ${session.id}: ${SessionStatus[session.status]}`);

// 3. Live progress until the workspace is ready (or provisioning failed).
const began = Date.now();
const elapsed = () => `${((Date.now() - began) / 1000).toFixed(1).padStart(5)}s`;
for await (const { event } of workspaces.watchSession({ id: session.id })) {
  switch (event.case) {
    case "status":
      console.log(`${elapsed()}  status ${SessionStatus[event.value.status]}${event.value.message ? `: ${event.value.message}` : ""}`);
      break;
    case "stageStarted":
      console.log(`${elapsed()}  ▶ ${ProvisioningStage[event.value.stage].toLowerCase()} ${event.value.detail}`);
      break;
    case "output":
      for (const line of Buffer.from(event.value.data).toString("utf8").split(/[\r\n]+/)) if (line.trim() !== "") console.log(`${elapsed()}    │ ${line}`);
      break;
    case "stageEnded":
      console.log(`${elapsed()}  ${event.value.ok ? "✔" : "✘"} ${ProvisioningStage[event.value.stage].toLowerCase()} (${event.value.durationMs} ms)${event.value.message ? ` ${event.value.message}` : ""}`);
      break;
    case "warning":
      console.log(`${elapsed()}  ⚠ ${event.value.message}`);
      break;
  }
}

// 4. The agent's side: tool calls with the session token, no workspace id needed.
const agent = createClient(ToolService, createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [bearer(sessionToken)] }));
const { session: ready } = await workspaces.getSession({ id: session.id });
if (ready?.status === SessionStatus.ACTIVE) {
  const r = await agent.bash({ command: "pwd; git log --oneline -1 2>/dev/null; echo task: $AGENT_TASK_REPOSITORY_URL $AGENT_TASK_BRANCH" });
  process.stdout.write(r.stdout);
}

// 5. The end: the token stops working and the workspace is removed.
const { session: ended } = await workspaces.endSession({ id: session.id });
console.log(`session ${session.id}: ${SessionStatus[ended?.status ?? 0]}`);
