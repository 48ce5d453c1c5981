/**
 * The agent-types file (`--agent-types FILE`): agent types kept in version control beside a
 * deployment and applied at every start. YAML or JSON, either a list of agent types or an object
 * with an `agent_types` list; each entry uses the API's field names (`id`, `display_name`,
 * `description`, `workspace` with the workspace configuration's fields). A file that does not
 * parse, or an entry with an unknown field, stops the server with a message naming the entry.
 */
import { readFile } from "node:fs/promises";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { parse } from "yaml";
import { type AgentType, AgentTypeSchema } from "../../gen/agentworkspace/v1/config_pb.js";
import { SettingsError } from "../settings.ts";

/** Reads and parses the file; validation of each agent type is the registry's. */
export async function readAgentTypesFile(file: string): Promise<AgentType[]> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new SettingsError(`--agent-types ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseAgentTypes(text, `--agent-types ${file}`);
}

/**
 * Parses an agent-types document (YAML or JSON) into agent types; `source` begins every error
 * message (the option and file at the server's start, the file for `config agent-types apply`).
 */
export function parseAgentTypes(text: string, source: string): AgentType[] {
  let doc: unknown;
  try {
    // YAML is a superset of JSON, so one parser reads both.
    doc = parse(text);
  } catch (err) {
    throw new SettingsError(`${source}: ${(err as Error).message}`);
  }
  const list = Array.isArray(doc) ? doc : (doc as { agent_types?: unknown } | null)?.agent_types;
  if (!Array.isArray(list)) throw new SettingsError(`${source}: expected a list of agent types, or an object with an 'agent_types' list`);
  const ids = new Set<string>();
  return list.map((entry: unknown, i) => {
    const name = `entry ${i + 1}${typeof (entry as { id?: unknown })?.id === "string" ? ` ('${(entry as { id: string }).id}')` : ""}`;
    let t: AgentType;
    try {
      t = fromJson(AgentTypeSchema, entry as JsonValue, { ignoreUnknownFields: false });
    } catch (err) {
      throw new SettingsError(`${source}, ${name}: ${(err as Error).message}`);
    }
    if (ids.has(t.id)) throw new SettingsError(`${source}, ${name}: the id is declared twice`);
    ids.add(t.id);
    return t;
  });
}
