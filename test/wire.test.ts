/**
 * The direct paths' message encoding (server/direct/wire.ts) against protobuf-es itself: for any
 * StreamBashResponse and any bytes, the enveloped binary and JSON forms decode to the same message,
 * and are exactly what protobuf-es writes (the bulk field is the message's only field there).
 * Also a well-known type whose JSON is not an object, proto field names, and the write limit.
 */
import { create, equals, fromBinary, fromJsonString, toBinary, toJsonString } from "@bufbuild/protobuf";
import { BytesValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import test from "ava";
import fc from "fast-check";
import { StreamBashResponseSchema } from "../gen/agentworkspace/v1/tool_pb.js";
import { BULK_BYTES, envelopeBinary, envelopeJson } from "../server/direct/wire.ts";

const bytes = fc.oneof(fc.uint8Array({ maxLength: 64 }), fc.uint8Array({ minLength: BULK_BYTES - 2, maxLength: BULK_BYTES + 70_000 }));
const event = fc.oneof(
  bytes.map((value) => ({ case: "stdout" as const, value })),
  bytes.map((value) => ({ case: "stderr" as const, value })),
  fc.record({ exitCode: fc.integer({ min: 0, max: 255 }), timedOut: fc.boolean(), signal: fc.constantFrom("", "SIGTERM"), stdoutTotalBytes: fc.bigInt({ min: 0n, max: 1n << 40n }) }).map((v) => ({ case: "exited" as const, value: v })),
);

/** The payload of a single enveloped message, checking the envelope's flags and length. */
function unwrap(t: { is: (a: unknown, b: unknown) => void }, parts: { head: Uint8Array; bulk: Uint8Array; size: number }, flags: number): Buffer {
  const all = Buffer.concat([parts.head, parts.bulk]);
  t.is(all.length, parts.size);
  t.is(all[0], flags);
  t.is(all.readUInt32BE(1), all.length - 5);
  return all.subarray(5);
}

test("binary: any StreamBashResponse is encoded exactly as protobuf-es encodes it, bulk bytes uncopied", (t) => {
  fc.assert(
    fc.property(event, fc.constantFrom(0, 1, 2), (ev, flags) => {
      const message = create(StreamBashResponseSchema, { event: ev as never });
      const encoded = envelopeBinary(StreamBashResponseSchema, message, flags, 16 << 20);
      const payload = unwrap(t, encoded, flags);
      t.deepEqual(new Uint8Array(payload), toBinary(StreamBashResponseSchema, message));
      t.true(equals(StreamBashResponseSchema, fromBinary(StreamBashResponseSchema, payload), message));
      if ((ev.case === "stdout" || ev.case === "stderr") && ev.value.length >= BULK_BYTES) t.is(encoded.bulk, ev.value, "the bulk bytes are the caller's own");
      // The message is left as it was.
      t.is(message.event.case, ev.case);
    }),
    { numRuns: 300 },
  );
});

test("JSON: any StreamBashResponse is the JSON protobuf-es writes, base64 included", (t) => {
  fc.assert(
    fc.property(event, (ev) => {
      const message = create(StreamBashResponseSchema, { event: ev as never });
      const payload = unwrap(t, envelopeJson(StreamBashResponseSchema, message, 0, {}, 16 << 20), 0);
      t.is(payload.toString("utf8"), toJsonString(StreamBashResponseSchema, message));
      t.true(equals(StreamBashResponseSchema, fromJsonString(StreamBashResponseSchema, payload.toString("utf8")), message));
    }),
    { numRuns: 300 },
  );
});

test("a well-known wrapper (BytesValue, JSON a bare string) and proto field names still round-trip", (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: BULK_BYTES, maxLength: BULK_BYTES + 100 }), (value) => {
      const message = create(BytesValueSchema, { value });
      t.true(equals(BytesValueSchema, fromBinary(BytesValueSchema, unwrap(t, envelopeBinary(BytesValueSchema, message, 0, 1 << 20), 0)), message));
      const json = unwrap(t, envelopeJson(BytesValueSchema, message, 0, {}, 1 << 20), 0).toString("utf8");
      t.true(equals(BytesValueSchema, fromJsonString(BytesValueSchema, json), message));
      const named = create(StreamBashResponseSchema, { event: { case: "stdout", value } });
      const protoNames = unwrap(t, envelopeJson(StreamBashResponseSchema, named, 0, { useProtoFieldName: true }, 1 << 20), 0).toString("utf8");
      t.is(protoNames, toJsonString(StreamBashResponseSchema, named, { useProtoFieldName: true }));
    }),
    { numRuns: 50 },
  );
});

test("a message over the write limit is RESOURCE_EXHAUSTED, in both encodings", (t) => {
  const message = create(StreamBashResponseSchema, { event: { case: "stdout", value: new Uint8Array(70_000) } });
  for (const encode of [() => envelopeBinary(StreamBashResponseSchema, message, 0, 65_536), () => envelopeJson(StreamBashResponseSchema, message, 0, {}, 65_536)]) {
    const err = t.throws(encode);
    t.is(ConnectError.from(err).code, Code.ResourceExhausted);
  }
});
