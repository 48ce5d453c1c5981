/**
 * The server's end of one egress tunnel out of a sandbox (executor/tunnels.ts): a Duplex the
 * egress proxy reads and writes like a socket. Bytes from the sandbox are pushed as they arrive
 * and credited back once read out of this stream's buffer; bytes to the sandbox wait for the
 * executor's credit. So a slow proxy destination pauses only its own tunnel's client, and a
 * client that stops reading pauses only the destination's socket.
 */
import { Duplex } from "node:stream";
import { F, MAX_CHUNK, TUNNEL_CREDIT_BATCH, TUNNEL_WINDOW } from "./executor/protocol.ts";

/** How a tunnel reaches its executor. */
export interface TunnelLink {
  /** Writes one frame of this tunnel; false when the channel is full. */
  write(type: number, payload?: Uint8Array): boolean;
  /** Resolves once the channel has room again (or is gone). */
  drained(): Promise<void>;
  /** The tunnel is done with its id (closed either way). */
  release(): void;
}

export class TunnelStream extends Duplex {
  readonly #link: TunnelLink;
  /** Bytes pushed from the sandbox, ever; and how many of them were credited back. */
  #pushed = 0;
  #credited = 0;
  /** Bytes sent to the sandbox not yet credited by the executor. */
  #inFlight = 0;
  #wake: (() => void) | undefined;
  /** The executor closed it (or the channel is gone): no TCLOSE goes back. */
  #peerClosed = false;

  constructor(link: TunnelLink) {
    super({ allowHalfOpen: true, highWaterMark: 256 * 1024 });
    this.#link = link;
  }

  /** TDATA from the executor. */
  received(payload: Buffer): void {
    if (this.destroyed || this.readableEnded) return;
    this.#pushed += payload.length;
    this.push(payload);
  }

  /** TEND from the executor: its client sends nothing more. */
  ended(): void {
    if (!this.destroyed) this.push(null);
  }

  /** TCREDIT from the executor. */
  credited(bytes: number): void {
    this.#inFlight = Math.max(0, this.#inFlight - bytes);
    this.#wakeUp();
  }

  /** TCLOSE from the executor, or the channel ended. */
  peerClosed(): void {
    this.#peerClosed = true;
    this.destroy();
  }

  #wakeUp(): void {
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }

  /**
   * Every read (a flowing stream reads through here too) returns credit for what left the buffer,
   * in batches. `_read` alone would not do: Readable stops calling it after one call until the next
   * push, and bytes consumed meanwhile would never be credited.
   */
  override read(size?: number): unknown {
    const chunk = super.read(size);
    this.#credit();
    return chunk;
  }

  override _read(): void {
    this.#credit();
  }

  #credit(): void {
    // What left the buffer since the last credit is what the reader consumed.
    const consumed = this.#pushed - this.readableLength - this.#credited;
    if (consumed < TUNNEL_CREDIT_BATCH || this.destroyed) return;
    const credit = Buffer.allocUnsafe(4);
    credit.writeUInt32BE(consumed, 0);
    this.#credited += consumed;
    this.#link.write(F.TCREDIT, credit);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    void this.#sendData(chunk).then(() => callback(), callback);
  }

  async #sendData(chunk: Buffer): Promise<void> {
    for (let at = 0; at < chunk.length; at += MAX_CHUNK) {
      while (this.#inFlight >= TUNNEL_WINDOW && !this.destroyed) await new Promise<void>((r) => (this.#wake = r));
      if (this.destroyed) throw new Error("tunnel closed");
      const piece = chunk.subarray(at, at + MAX_CHUNK);
      this.#inFlight += piece.length;
      if (!this.#link.write(F.TDATA, piece)) await this.#link.drained();
    }
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (!this.#peerClosed) this.#link.write(F.TEND);
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.#peerClosed) this.#link.write(F.TCLOSE);
    this.#peerClosed = true;
    this.#link.release();
    this.#wakeUp();
    callback(error);
  }
}
