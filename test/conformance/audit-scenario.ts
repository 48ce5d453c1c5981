/**
 * The audit scenario every provider runs: each ToolService RPC once in a fresh workspace, then
 * the audit trail must hold exactly one record per call, naming the provider, with the request's
 * summary and no content.
 */
import type { ExecutionContext, TestFn } from "ava";
import { randomBytes } from "node:crypto";
import { AuditOutcome } from "../../gen/agentworkspace/v1/audit_pb.js";
import { ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";
import { ToolService } from "../../gen/agentworkspace/v1/tool_pb.js";
import type { OtlpReceiver } from "../helpers/otlp-receiver.ts";
import { type ClientSet, newWorkspace } from "../helpers/server.ts";
import { eventually } from "../helpers/sessions.ts";

/**
 * Registers the scenario for `provider`, with the clients `clients` gives; with `otlp`, the OTLP
 * endpoint the server exports to must receive each call's span exactly once too.
 */
export function registerAuditScenario<C>(test: TestFn<C>, provider: string, clients: (t: ExecutionContext<C>) => ClientSet, otlp?: () => OtlpReceiver): void {
  test(`${provider}: Successful operation logged — every tool operation appears exactly once in the audit trail, with the provider and no content`, async (t) => {
    const c = clients(t);
    const ws = await newWorkspace(c, { provider, labels: { suite: "audit" } });
    const content = `content-${randomBytes(8).toString("hex")}`;
    try {
      const tools = c.tools;
      await tools.writeFile({ workspaceId: ws, path: "a.txt", content: `${content}\n` });
      await tools.readFile({ workspaceId: ws, path: "a.txt" });
      await tools.editFile({ workspaceId: ws, path: "a.txt", oldString: content, newString: `${content}-2` });
      await tools.patchFile({ workspaceId: ws, path: "a.txt", patches: [{ find: `${content}-2`, replace: `${content}-3` }] });
      await tools.listFiles({ workspaceId: ws });
      await tools.glob({ workspaceId: ws, pattern: "*.txt" });
      await tools.grep({ workspaceId: ws, pattern: "content" });
      for await (const _ of tools.streamGrep({ workspaceId: ws, pattern: "content" })) void _;
      await tools.bash({ workspaceId: ws, command: "cat a.txt" });
      for await (const _ of tools.streamBash({ workspaceId: ws, command: "cat a.txt; exit 2" })) void _;
      await tools.bash({ workspaceId: ws, command: "git init -q -b main ." });
      await tools.gitCommit({ workspaceId: ws, message: `add ${content}`, files: ["a.txt"] });
      await tools.gitStatus({ workspaceId: ws });
      await tools.gitDiff({ workspaceId: ws });
      await tools.gitCheckout({ workspaceId: ws, branch: "feature", create: true });
      // No repository to push to: recorded as the failure it is.
      await tools.gitPush({ workspaceId: ws }).catch(() => undefined);
      await tools.deleteFile({ workspaceId: ws, path: "a.txt" });
      const { events } = await c.audit.listAuditEvents({ workspaceId: ws, pageSize: 100 });
      const calls = events.filter((e) => e.tool !== "");
      t.deepEqual(calls.map((e) => e.procedure.split("/").pop()).sort(), [...ToolService.methods.map((m) => m.name), "Bash"].sort(), "each RPC once (Bash twice)");
      for (const e of calls) {
        t.is(e.provider, provider);
        t.is(e.workspaceId, ws);
        const push = e.procedure.endsWith("/GitPush");
        t.is(e.outcome, push ? AuditOutcome.ERROR : AuditOutcome.OK, e.procedure);
        if (push) t.is(e.reason, ErrorReason.NO_REPOSITORY);
        t.truthy(e.duration);
      }
      t.is(calls.find((e) => e.procedure.endsWith("/GitCommit"))?.request.message_bytes, String(Buffer.byteLength(`add ${content}`)));
      t.is(calls.find((e) => e.procedure.endsWith("/StreamBash"))?.exitCode, 2);
      t.false(JSON.stringify(events.map((e) => [e.request, e.result, e.name])).includes(content), "no content in any record");
      if (otlp) {
        const receiver = otlp();
        const ids = new Set(calls.map((e) => e.spanId));
        const received = await eventually(() => {
          const got = receiver.spans.filter((s) => ids.has(s.spanId));
          return new Set(got.map((s) => s.spanId)).size === ids.size ? got : undefined;
        }, 20_000, "every span at the OTLP endpoint");
        t.is(received.length, calls.length, "each span once at the endpoint");
        t.true(received.every((s) => s.attributes["agentworkspace.provider"] === provider && s.attributes["gen_ai.operation.name"] === "execute_tool"));
        t.false(JSON.stringify(received, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)).includes(content), "no content exported");
      }
    } finally {
      await c.workspaces.deleteWorkspace({ id: ws }).catch(() => undefined);
    }
  });
}
