/**
 * What a bridged call returns to the model: a text laid out for reading (a command's exit code and
 * its two streams, a file's numbered lines, one grep match per line, compact JSON for the rest)
 * plus `structuredContent`, the response message as proto3 JSON with the proto's field names.
 * Failures are `isError` results naming the reason, the code, the message and the metadata, with
 * the same fields as structured content, so an agent can read why and a program can branch on it.
 */
import { create, type DescMessage, type JsonObject, type Message, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { ClosestMatchSchema, ErrorDetailSchema, ErrorReason, PartialOutputSchema } from "../../gen/agentworkspace/v1/errors_pb.js";
import {
  type BashResponse,
  type GlobResponse,
  type GrepResponse,
  type ListFilesResponse,
  type ReadFileResponse,
  FileKind,
  FileType,
} from "../../gen/agentworkspace/v1/tool_pb.js";
import { ProcessState, type ReadProcessOutputResponse } from "../../gen/agentworkspace/v1/process_pb.js";

/** proto3 JSON as the bridge writes it: the proto's field names, every field present (an exit code of 0 too), as the REST paths write it. */
export const MCP_JSON = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

const kib = (n: bigint | number) => `${(Number(n) / 1024).toFixed(Number(n) < 10 * 1024 ? 1 : 0)} KiB`;

function bashText(r: BashResponse, timedOut = false): string {
  const facts = [`exit code ${r.exitCode}`, `${r.durationMs} ms`];
  if (r.signal) facts.push(`signal ${r.signal}`);
  if (timedOut) facts.push("timed out");
  if (r.oomKilled) facts.push("killed: out of memory");
  const parts = [`[${facts.join(", ")}]`];
  for (const [name, text, cut, total] of [["stdout", r.stdout, r.stdoutTruncated, r.stdoutTotalBytes], ["stderr", r.stderr, r.stderrTruncated, r.stderrTotalBytes]] as const) {
    if (text === "" && !cut) continue;
    parts.push(`--- ${name} ---`, text.endsWith("\n") ? text.slice(0, -1) : text);
    if (cut) parts.push(`[${name} cut: the first ${kib(Buffer.byteLength(text))} of ${kib(total)} shown]`);
  }
  if (parts.length === 1) parts.push("(no output)");
  return parts.join("\n");
}

function readText(r: ReadFileResponse): string {
  switch (r.kind) {
    case FileKind.BINARY:
      return `${r.path}: binary file, ${r.size} bytes, ${r.mimeType || "application/octet-stream"}; its content is not shown`;
    case FileKind.DIRECTORY:
      return r.content === "" ? `${r.path}: empty directory` : r.content;
    default:
      if (r.totalLines === 0) return `${r.path}: empty file`;
      return r.truncated ? `${r.content}\n[${r.totalLines} lines in all; more with offset and limit]` : r.content;
  }
}

function grepText(r: GrepResponse): string {
  if (r.matches.length === 0) return "no matches";
  const lines = r.matches.map((m) => (m.content.includes("\n") ? `${m.path}:${m.line}:\n${m.content}` : `${m.path}:${m.line}: ${m.content}`));
  if (r.truncated) lines.push("[stopped at max_results; narrow the search or raise max_results]");
  return lines.join("\n");
}

function globText(r: GlobResponse): string {
  if (r.paths.length === 0) return "no matches";
  return r.truncated ? `${r.paths.join("\n")}\n[more files matched than the limit]` : r.paths.join("\n");
}

function listText(r: ListFilesResponse): string {
  if (r.files.length === 0) return "no entries";
  const lines = r.files.map((f) => (f.type === FileType.DIRECTORY ? `${f.path}/` : f.type === FileType.SYMLINK ? `${f.path} (symlink)` : `${f.path}  ${f.size} bytes`));
  if (r.truncated) lines.push("[listing stopped at 10000 entries]");
  return lines.join("\n");
}

/** A process's output as text: each stream decoded, with where to read on from and what was missed. */
function processOutputText(r: ReadProcessOutputResponse): string {
  const p = r.process;
  const state = !p ? "unknown" : p.state === ProcessState.RUNNING ? "running" : p.state === ProcessState.EXITED ? `exited, exit code ${p.exitCode}${p.signal ? `, signal ${p.signal}` : ""}` : "lost";
  const parts = [`[process ${p?.processId ?? ""} ${state}; next stdout_offset ${r.nextStdoutOffset}, stderr_offset ${r.nextStderrOffset}]`];
  for (const [name, bytes, missed] of [["stdout", r.stdout, r.stdoutMissedBytes], ["stderr", r.stderr, r.stderrMissedBytes]] as const) {
    if (missed > 0n) parts.push(`[${name}: ${missed} earlier bytes no longer kept]`);
    if (bytes.length === 0) continue;
    const text = Buffer.from(bytes).toString("utf8");
    parts.push(`--- ${name} ---`, text.endsWith("\n") ? text.slice(0, -1) : text);
  }
  if (parts.length === 1) parts.push("(no new output)");
  return parts.join("\n");
}

/** Text layouts by RPC (local name); any other response is compact JSON. */
const TEXT: Partial<Record<string, (message: never) => string>> = {
  bash: bashText,
  readProcessOutput: processOutputText,
  readFile: readText,
  grep: grepText,
  glob: globText,
  listFiles: listText,
};

/** The result of a successful call. */
export function toolResult(localName: string, schema: DescMessage, message: Message, options: { timedOut?: boolean } = {}): CallToolResult {
  const json = toJson(schema, message, MCP_JSON) as JsonObject;
  const layout = TEXT[localName] as ((m: Message, timedOut?: boolean) => string) | undefined;
  const text = layout ? layout(message, options.timedOut) : Object.keys(json).length === 0 ? "done" : JSON.stringify(json);
  return { content: [{ type: "text", text }], structuredContent: json };
}

/** Lower snake case of a Connect code, as Connect's JSON errors write it: "permission_denied". */
const codeName = (code: Code) => Code[code].replace(/[A-Z]/g, (c, at: number) => (at === 0 ? "" : "_") + c.toLowerCase());

/** The result of a failed call: the reason, code, message and metadata of its ErrorDetail. */
export function errorResult(err: unknown): CallToolResult {
  const error = ConnectError.from(err);
  const detail = error.findDetails(ErrorDetailSchema)[0] ?? create(ErrorDetailSchema, { reason: ErrorReason.INTERNAL });
  const reason = `ERROR_REASON_${ErrorReason[detail.reason]}`;
  const lines = [`Error ${reason} (${codeName(error.code)}): ${error.rawMessage}`];
  const metadata = Object.entries(detail.metadata);
  if (metadata.length > 0) lines.push(`metadata: ${metadata.map(([k, v]) => `${k}=${v}`).join(", ")}`);
  const partial = detail.partialOutput;
  if (partial?.stdout) lines.push("--- stdout (partial) ---", partial.stdout);
  if (partial?.stderr) lines.push("--- stderr (partial) ---", partial.stderr);
  const closest = detail.closestMatch;
  if (closest?.text) lines.push(`closest match (lines ${closest.startLine}-${closest.endLine}):`, closest.text);
  const structured: JsonObject = { code: codeName(error.code), reason, message: error.rawMessage, metadata: detail.metadata };
  if (partial) structured.partial_output = toJson(PartialOutputSchema, partial, MCP_JSON);
  if (closest) structured.closest_match = toJson(ClosestMatchSchema, closest, MCP_JSON);
  return { isError: true, content: [{ type: "text", text: lines.join("\n") }], structuredContent: { error: structured } };
}
