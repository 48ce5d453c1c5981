/**
 * `Uint8Array.prototype.toBase64` (the TC39 "Uint8Array to/from base64" method, standard but not
 * yet in Node 24 without an experimental V8 flag), implemented on Node's native Buffer base64.
 * protobuf-es uses the native method when it exists when it loads, and otherwise a per-byte
 * JavaScript loop: for Connect JSON, where every output chunk is a base64 string, that loop was
 * most of the server's CPU. Installed by the entry points before anything loads protobuf-es;
 * does nothing where the method exists.
 */
type ToBase64Options = { alphabet?: "base64" | "base64url"; omitPadding?: boolean };

const proto = Uint8Array.prototype as unknown as { toBase64?: (options?: ToBase64Options) => string };
if (typeof proto.toBase64 !== "function") {
  Object.defineProperty(Uint8Array.prototype, "toBase64", {
    configurable: true,
    writable: true,
    enumerable: false,
    value: function toBase64(this: Uint8Array, options: ToBase64Options = {}): string {
      const alphabet = options.alphabet ?? "base64";
      if (alphabet !== "base64" && alphabet !== "base64url") throw new TypeError(`unknown base64 alphabet '${String(alphabet)}'`);
      const bytes = Buffer.from(this.buffer, this.byteOffset, this.byteLength);
      // Buffer's base64url never pads; its base64 always does.
      const text = bytes.toString(alphabet);
      if (alphabet === "base64url") return options.omitPadding ? text : text.padEnd(Math.ceil(text.length / 4) * 4, "=");
      return options.omitPadding ? text.replace(/=+$/, "") : text;
    },
  });
}
