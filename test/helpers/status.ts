/**
 * Decoding of google.rpc.Status (the `grpc-status-details-bin` trailer) for tests that read raw
 * gRPC responses. Only the fields tests need: the code, the message, and each detail's type URL
 * and bytes.
 */
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** A decoded google.rpc.Status. */
export interface RpcStatus {
  code: number;
  message: string;
  details: Array<{ typeUrl: string; value: Uint8Array }>;
}

function readAny(bytes: Uint8Array): { typeUrl: string; value: Uint8Array } {
  const r = new BinaryReader(bytes);
  const any: { typeUrl: string; value: Uint8Array } = { typeUrl: "", value: new Uint8Array(0) };
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 1) any.typeUrl = r.string();
    else if (field === 2) any.value = r.bytes();
    else r.skip(wire);
  }
  return any;
}

/** Decodes the binary google.rpc.Status message. */
export function decodeRpcStatus(bytes: Uint8Array): RpcStatus {
  const r = new BinaryReader(bytes);
  const status: RpcStatus = { code: 0, message: "", details: [] };
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 1 && wire === WireType.Varint) status.code = r.int32();
    else if (field === 2) status.message = r.string();
    else if (field === 3) status.details.push(readAny(r.bytes()));
    else r.skip(wire);
  }
  return status;
}
