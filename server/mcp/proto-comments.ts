/**
 * The comments of the API's .proto files, by element: "agentworkspace.v1.ToolService.ReadFile",
 * "agentworkspace.v1.ReadFileRequest.offset". Generated descriptors carry no comments, and the
 * protos' comments (every element has one: buf lint's COMMENT_* rules) are the best description a
 * model can get of a tool and its fields, so the MCP bridge reads them from the files the
 * descriptors were generated from, keeping one source of truth. This is a reader of the protos'
 * own layout (leading `//` comments, one element per line), not a general .proto parser; a file
 * it cannot find leaves its elements undescribed, never stops the server.
 */
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** Where the API's protos live, relative to this file. */
export const PROTO_DIR = fileURLToPath(new URL("../../proto/agentworkspace/v1/", import.meta.url));

const SCOPE = /^(message|enum|service|oneof)\s+(\w+)\s*\{(\s*\})?/;
const RPC = /^rpc\s+(\w+)\s*\(/;
const FIELD = /^(?:(?:optional|repeated)\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+/;
const ENUM_VALUE = /^(\w+)\s*=\s*-?\d+/;

/** The comments of one .proto file's text, keyed by full element name. */
export function protoComments(text: string): Map<string, string> {
  const out = new Map<string, string>();
  let pkg = "";
  const scopes: Array<{ kind: string; name: string }> = [];
  let comment: string[] = [];
  const fullName = (name: string) => [pkg, ...scopes.filter((s) => s.kind !== "oneof" && s.kind !== "rpc").map((s) => s.name), name].filter(Boolean).join(".");
  const take = (name: string) => {
    if (comment.length > 0) out.set(fullName(name), comment.join(" ").replace(/\s+/g, " ").trim());
    comment = [];
  };
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.startsWith("//")) {
      comment.push(line.replace(/^\/\/\s?/, ""));
      continue;
    }
    if (line === "") {
      comment = [];
      continue;
    }
    const pkgMatch = /^package\s+([\w.]+)\s*;/.exec(line);
    if (pkgMatch) {
      pkg = pkgMatch[1];
      comment = [];
      continue;
    }
    const scope = SCOPE.exec(line);
    if (scope) {
      take(scope[2]);
      if (!scope[3]) scopes.push({ kind: scope[1], name: scope[2] });
      continue;
    }
    const rpc = RPC.exec(line);
    if (rpc) {
      take(rpc[1]);
      if (line.endsWith("{")) scopes.push({ kind: "rpc", name: rpc[1] });
      continue;
    }
    if (line.startsWith("}")) {
      scopes.pop();
      comment = [];
      continue;
    }
    const inside = scopes.at(-1)?.kind;
    const field = inside === "message" || inside === "oneof" ? FIELD.exec(line) : inside === "enum" ? ENUM_VALUE.exec(line) : null;
    if (field) take(field[1]);
    else comment = [];
  }
  return out;
}

let cached: Map<string, string> | undefined;

/** Every comment of the API's protos (read once); empty when the files are not there. */
export function apiComments(dir = PROTO_DIR): Map<string, string> {
  if (dir === PROTO_DIR && cached) return cached;
  const all = new Map<string, string>();
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith(".proto"));
  } catch {
    // No protos beside the code: tools keep their names and schemas, without descriptions.
  }
  for (const name of names) for (const [k, v] of protoComments(readFileSync(dir + name, "utf8"))) all.set(k, v);
  if (dir === PROTO_DIR) cached = all;
  return all;
}
