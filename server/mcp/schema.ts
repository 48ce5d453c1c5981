/**
 * JSON Schemas for MCP tool inputs, generated from protobuf message descriptors: what the proto3
 * JSON mapping lets `fromJson` accept, described with the proto's own field names (`old_string`,
 * `timeout_ms`), the spelling coding agents already use. So the schema cannot drift from the
 * message it describes: a field added to a request is in the tool's schema at the next start.
 *
 * Mapping (https://protobuf.dev/programming-guides/json/): 32-bit integers are integers with their
 * range; 64-bit integers are an integer or a decimal string (JSON numbers lose precision past
 * 2^53); floats are numbers; bytes are base64 strings; enums are their value names; maps are
 * objects; repeated fields arrays; messages nested objects; well-known types their JSON forms.
 * A oneof's members are listed as ordinary properties whose descriptions say only one may be set.
 * Every object is closed (`additionalProperties: false`), as the bridge's parser is: an unknown
 * field is refused, not ignored.
 */
import { type DescEnum, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";

/** A JSON Schema (draft 2020-12 subset) as plain data. */
export type JsonSchema = { [key: string]: unknown };

/** Describes an element of the schema ("BashRequest.command" → text); undefined leaves it bare. */
export type Describe = (fullName: string) => string | undefined;

/** Options of `messageSchema`. */
export interface SchemaOptions {
  /** Top-level fields left out, by proto name (the bridge binds `workspace_id` itself). */
  omit?: readonly string[];
  describe?: Describe;
}

const INT32 = { type: "integer", minimum: -2147483648, maximum: 2147483647 } as const;
const UINT32 = { type: "integer", minimum: 0, maximum: 4294967295 } as const;
/** 64-bit integers: a JSON number when it fits, or the decimal string proto3 JSON writes. */
const INT64 = { type: ["integer", "string"], pattern: "^-?[0-9]+$" } as const;
const UINT64 = { type: ["integer", "string"], minimum: 0, pattern: "^[0-9]+$" } as const;

function scalarSchema(type: ScalarType): JsonSchema {
  switch (type) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: "number" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { ...INT32 };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { ...UINT32 };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return { ...INT64, type: [...INT64.type] };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return { ...UINT64, type: [...UINT64.type] };
  }
}

/** An enum by its value names (fromJson also takes numbers; names are what a model should send). */
function enumSchema(desc: DescEnum): JsonSchema {
  return { type: "string", enum: desc.values.filter((v) => v.number !== 0 || !v.name.endsWith("_UNSPECIFIED")).map((v) => v.name) };
}

/** The JSON forms of the well-known types a request may hold. */
function wellKnown(desc: DescMessage): JsonSchema | undefined {
  switch (desc.typeName) {
    case "google.protobuf.Timestamp":
      return { type: "string", format: "date-time" };
    case "google.protobuf.Duration":
      return { type: "string", pattern: "^-?[0-9]+(\\.[0-9]{1,9})?s$" };
    case "google.protobuf.FieldMask":
      return { type: "string" };
    case "google.protobuf.Struct":
      return { type: "object" };
    case "google.protobuf.Value":
      return {};
    case "google.protobuf.ListValue":
      return { type: "array" };
    case "google.protobuf.Empty":
      return { type: "object", additionalProperties: false };
  }
  // Wrappers (google.protobuf.StringValue, Int64Value, …) are their one field's JSON.
  if (desc.typeName.startsWith("google.protobuf.") && desc.typeName.endsWith("Value") && desc.fields.length === 1) {
    const f = desc.fields[0];
    if (f.fieldKind === "scalar") return scalarSchema(f.scalar);
  }
  return undefined;
}

function valueSchema(field: DescField, kind: "scalar" | "enum" | "message", seen: ReadonlySet<string>, describe: Describe | undefined): JsonSchema {
  switch (kind) {
    case "scalar":
      return scalarSchema((field as { scalar: ScalarType }).scalar);
    case "enum":
      return enumSchema((field as { enum: DescEnum }).enum);
    case "message":
      return objectSchema((field as { message: DescMessage }).message, seen, describe, []);
  }
}

function fieldSchema(field: DescField, seen: ReadonlySet<string>, describe: Describe | undefined): JsonSchema {
  switch (field.fieldKind) {
    case "scalar":
    case "enum":
    case "message":
      return valueSchema(field, field.fieldKind, seen, describe);
    case "list":
      return { type: "array", items: valueSchema(field, field.listKind, seen, describe) };
    case "map":
      return { type: "object", additionalProperties: valueSchema(field, field.mapKind, seen, describe) };
  }
}

function objectSchema(desc: DescMessage, seen: ReadonlySet<string>, describe: Describe | undefined, omit: readonly string[]): JsonSchema {
  const known = wellKnown(desc);
  if (known) return known;
  // A message that contains itself is described once; deeper levels are any object.
  if (seen.has(desc.typeName)) return { type: "object" };
  const inner = new Set(seen).add(desc.typeName);
  const properties: Record<string, JsonSchema> = {};
  for (const field of desc.fields) {
    if (omit.includes(field.name)) continue;
    const schema = fieldSchema(field, inner, describe);
    const notes: string[] = [];
    const text = describe?.(`${desc.typeName}.${field.name}`);
    if (text) notes.push(text);
    if (field.oneof) notes.push(`Only one of ${field.oneof.fields.map((f) => f.name).join(", ")} may be set.`);
    if (notes.length > 0) schema.description = notes.join(" ");
    properties[field.name] = schema;
  }
  return { type: "object", properties, additionalProperties: false };
}

/** The JSON Schema of `desc` as a tool's input. */
export function messageSchema(desc: DescMessage, options: SchemaOptions = {}): JsonSchema {
  return objectSchema(desc, new Set(), options.describe, options.omit ?? []);
}
