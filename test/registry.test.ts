/** The tool registry against the proto: every ToolService method has its tool option and an implementation. */
import test from "ava";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { checkToolRegistry, TOOL_REGISTRY, toolNameOf } from "../server/tools/registry.ts";

test("every ToolService method declares a tool that the registry implements, and nothing else is registered", (t) => {
  t.notThrows(() => checkToolRegistry(ToolService));
  const names = Object.fromEntries(ToolService.methods.map((m) => [m.name, toolNameOf(m)]));
  t.deepEqual(names, {
    Bash: "bash",
    StreamBash: "bash",
    ReadFile: "read",
    WriteFile: "write",
    EditFile: "edit",
    PatchFile: "patch",
    DeleteFile: "delete",
    ListFiles: "list",
    Glob: "glob",
    Grep: "grep",
    StreamGrep: "grep",
    GitStatus: "git",
    GitDiff: "git",
    GitCommit: "git",
    GitCheckout: "git",
    GitPush: "git",
  });
});

test("a registry missing an implementation, or holding one no method declares, is refused with every mismatch named", (t) => {
  const { streamBash: _dropped, ...bashWithoutStream } = TOOL_REGISTRY.bash;
  const broken = { ...TOOL_REGISTRY, bash: bashWithoutStream, extra: { frobnicate: () => Promise.resolve() } };
  const err = t.throws(() => checkToolRegistry(ToolService, broken));
  t.regex(err?.message ?? "", /StreamBash declares tool "bash", but the registry has no bash\.streamBash/);
  t.regex(err?.message ?? "", /registry entry extra\.frobnicate belongs to no agentworkspace\.v1\.ToolService method/);
});
