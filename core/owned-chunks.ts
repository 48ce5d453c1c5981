/**
 * Output chunks whose memory is handed back as soon as they have been written. A streamed
 * command's output arrives in 64 KiB buffers that live outside V8's heap until a garbage
 * collection finds their objects unreachable; with a young generation sized for small calls
 * (frequent calls allocate, and a larger young generation collects less often) a fast stream
 * would hold tens of MiB of such buffers between collections. A chunk read from a command's pipe
 * for one call (providers/direct-stdout.ts) is marked owned; once the response has written it
 * (the write's callback: the socket took the bytes), `releaseOwned` detaches its ArrayBuffer,
 * which frees the memory at once. Only a view that covers its whole buffer is marked, so a chunk
 * split into several messages, or cut at an output limit, is left to the collector.
 */
const owned = new WeakSet<ArrayBufferLike>();

/** Marks `chunk` as read for one consumer alone, which may release it once written. */
export function markOwned(chunk: Uint8Array): void {
  if (chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength && chunk.byteLength > 0) owned.add(chunk.buffer);
}

/** True when `chunk` is an owned chunk, whole. */
export function isOwned(chunk: Uint8Array): boolean {
  return chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength && owned.has(chunk.buffer);
}

/** Frees an owned chunk's memory (it reads as empty afterwards); anything else is left alone. */
export function releaseOwned(chunk: Uint8Array): void {
  const buffer = chunk.buffer;
  if (!isOwned(chunk) || !(buffer instanceof ArrayBuffer) || buffer.detached) return;
  owned.delete(buffer);
  buffer.transfer(0);
}
