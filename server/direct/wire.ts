/**
 * Encoding response messages for the direct paths without copying their bulk. A streamed
 * command's output arrives as 64 KiB chunks; protobuf-es would copy each one into a writer that
 * grows by doubling (allocating 128 KiB) and then copy it again into a result, and the envelope
 * copies it once more. Here a message's large top-level `bytes` field is written as it is: the
 * rest of the message is encoded normally (it is a few bytes), followed by the field's tag and
 * length, and the caller writes that head and the field's own bytes together. Fields may come in
 * any order on the wire, and a oneof member decodes the same wherever it is, so the result is a
 * valid encoding of the same message.
 *
 * For JSON the same field is spliced into the rest's JSON text as base64, written straight into
 * the envelope's buffer: one pass over the bytes instead of protobuf-es's base64 string, the JSON
 * string built around it, and its UTF-8 encoding.
 */
import { type DescField, type DescMessage, type JsonWriteOptions, type MessageShape, ScalarType, toBinary, toJsonString } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { Code, ConnectError } from "@connectrpc/connect";

/** A bytes field at least this long is written without copying. */
export const BULK_BYTES = 4096;

/** An encoded message: the head, and the bulk bytes that follow it (empty when none). */
export interface Encoded {
  head: Uint8Array;
  bulk: Uint8Array;
  /** head + bulk, in bytes. */
  size: number;
  /** The message's bulk bytes when the encoding copied them (JSON's base64): the caller may free them. */
  copied?: Uint8Array;
}

const NONE = new Uint8Array(0);

/** A set top-level bytes field of at least BULK_BYTES, and its value. */
function bulkField(schema: DescMessage, message: object): { field: DescField; value: Uint8Array } | undefined {
  const r = reflect(schema, message as MessageShape<DescMessage>, false);
  for (const field of schema.fields) {
    if (field.fieldKind !== "scalar" || field.scalar !== ScalarType.BYTES || !r.isSet(field)) continue;
    const value = r.get(field) as Uint8Array;
    if (value.byteLength >= BULK_BYTES) return { field, value };
  }
  return undefined;
}

/** The message with `field` cleared, encoded by `encode`; the message itself is left as it was. */
function withoutField<T>(schema: DescMessage, message: object, field: DescField, value: Uint8Array, encode: () => T): T {
  const r = reflect(schema, message as MessageShape<DescMessage>, false);
  r.clear(field);
  try {
    return encode();
  } finally {
    r.set(field, value);
  }
}

/** Bytes of `value` as a protobuf varint. */
function varintLength(value: number): number {
  let n = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    n++;
  }
  return n;
}

function writeVarint(out: Uint8Array, at: number, value: number): number {
  while (value >= 0x80) {
    out[at++] = (value & 0x7f) | 0x80;
    value = Math.floor(value / 128);
  }
  out[at++] = value;
  return at;
}

function tooLarge(size: number, max: number): ConnectError {
  return new ConnectError(`message size ${size} is larger than configured writeMaxBytes ${max}`, Code.ResourceExhausted);
}

/**
 * The enveloped binary encoding of `message` (gRPC, Connect streaming): a 5-byte envelope
 * (`flags`, length) and the message, its bulk bytes uncopied.
 */
export function envelopeBinary(schema: DescMessage, message: object, flags: number, writeMaxBytes: number): Encoded {
  const bulk = bulkField(schema, message);
  if (!bulk) {
    const bytes = toBinary(schema, message as MessageShape<DescMessage>);
    if (bytes.byteLength > writeMaxBytes) throw tooLarge(bytes.byteLength, writeMaxBytes);
    const head = new Uint8Array(5 + bytes.byteLength);
    head[0] = flags;
    new DataView(head.buffer).setUint32(1, bytes.byteLength);
    head.set(bytes, 5);
    return { head, bulk: NONE, size: head.byteLength };
  }
  const { field, value } = bulk;
  const rest = withoutField(schema, message, field, value, () => toBinary(schema, message as MessageShape<DescMessage>));
  const tag = field.number * 8 + 2;
  const length = rest.byteLength + varintLength(tag) + varintLength(value.byteLength) + value.byteLength;
  if (length > writeMaxBytes) throw tooLarge(length, writeMaxBytes);
  const head = new Uint8Array(5 + length - value.byteLength);
  head[0] = flags;
  new DataView(head.buffer).setUint32(1, length);
  head.set(rest, 5);
  const end = writeVarint(head, writeVarint(head, 5 + rest.byteLength, tag), value.byteLength);
  if (end !== head.byteLength) throw new Error("envelopeBinary: length mismatch");
  return { head, bulk: value, size: 5 + length };
}

/** Base64 text length of `n` bytes (standard alphabet, padded, as protobuf JSON writes bytes). */
const base64Length = (n: number) => 4 * Math.ceil(n / 3);

/**
 * The enveloped JSON encoding of `message` (Connect streaming), in one buffer. A bulk bytes field
 * is written as base64 directly into that buffer; the JSON is what `toJsonString` gives.
 */
export function envelopeJson(schema: DescMessage, message: object, flags: number, options: Partial<JsonWriteOptions>, writeMaxBytes: number): Encoded {
  // Well-known types have JSON forms of their own (BytesValue is a bare string): encoded as usual.
  const bulk = schema.typeName.startsWith("google.protobuf.") ? undefined : bulkField(schema, message);
  if (!bulk) {
    const text = Buffer.from(toJsonString(schema, message as MessageShape<DescMessage>, options));
    if (text.byteLength > writeMaxBytes) throw tooLarge(text.byteLength, writeMaxBytes);
    const head = Buffer.allocUnsafe(5 + text.byteLength);
    head[0] = flags;
    head.writeUInt32BE(text.byteLength, 1);
    text.copy(head, 5);
    return { head, bulk: NONE, size: head.byteLength };
  }
  const { field, value } = bulk;
  const restJson = withoutField(schema, message, field, value, () => toJsonString(schema, message as MessageShape<DescMessage>, options));
  // `{…rest}` becomes `{…rest,"name":"` + base64 + `"}`.
  const open = Buffer.from(`${restJson.slice(0, -1)}${restJson === "{}" ? "" : ","}${JSON.stringify(options.useProtoFieldName ? field.name : field.jsonName)}:"`);
  const b64 = base64Length(value.byteLength);
  const length = open.byteLength + b64 + 2;
  if (length > writeMaxBytes) throw tooLarge(length, writeMaxBytes);
  const head = Buffer.allocUnsafe(5 + length);
  head[0] = flags;
  head.writeUInt32BE(length, 1);
  open.copy(head, 5);
  const view = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  const written = head.write(view.toString("base64"), 5 + open.byteLength, b64, "latin1");
  if (written !== b64) throw new Error("envelopeJson: base64 length mismatch");
  head[5 + open.byteLength + b64] = 0x22; // "
  head[5 + open.byteLength + b64 + 1] = 0x7d; // }
  return { head, bulk: NONE, size: head.byteLength, copied: value };
}
