/**
 * Byte and text helpers shared by the tools: UTF-8 decoding that never splits a character,
 * binary detection, MIME guessing, and a bounded collector for command output.
 */

const decoder = new TextDecoder("utf-8", { fatal: false });

/** Decodes UTF-8, dropping an incomplete character at the very end (left by a byte cut). */
export function decodeCut(bytes: Uint8Array): string {
  let end = bytes.length;
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  let i = end - 1;
  while (i >= 0 && i >= end - 4 && (bytes[i] & 0xc0) === 0x80) i--;
  if (i >= 0) {
    const lead = bytes[i];
    const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (end - i < need) end = i;
  }
  return decoder.decode(bytes.subarray(0, end));
}

/** Collects a stream's bytes up to a limit while counting all of them. */
export class BoundedBuffer {
  readonly #limit: number;
  readonly #chunks: Uint8Array[] = [];
  #kept = 0;
  total = 0;

  constructor(limit: number) {
    this.#limit = limit;
  }

  push(chunk: Uint8Array): void {
    this.total += chunk.length;
    const room = this.#limit - this.#kept;
    if (room <= 0) return;
    const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
    this.#chunks.push(part);
    this.#kept += part.length;
  }

  get truncated(): boolean {
    return this.total > this.#kept;
  }

  text(): string {
    // Most commands leave a stream empty, or write it in one chunk.
    if (this.#chunks.length === 0) return "";
    return decodeCut(this.#chunks.length === 1 ? this.#chunks[0] : Buffer.concat(this.#chunks));
  }
}

/**
 * True when content looks binary: a NUL byte in the first 8 KiB, or more than 30% of those
 * bytes being control characters that text does not use. Invalid UTF-8 alone is not binary
 * (Latin-1 source files exist).
 */
export function looksBinary(bytes: Uint8Array): boolean {
  const n = Math.min(bytes.length, 8192);
  if (n === 0) return false;
  const head = bytes.subarray(0, n);
  // The NUL first, by the native search; then the odd bytes, counted from a table without a branch.
  if (head.indexOf(0) >= 0) return true;
  let odd = 0;
  for (let i = 0; i < n; i++) odd += ODD_BYTE[head[i]];
  return odd / n > 0.3;
}

/** 1 for the control characters text does not use (as looksBinary counts them), 0 otherwise. */
const ODD_BYTE = Uint8Array.from({ length: 256 }, (_, b) => (b < 7 || (b > 13 && b < 32 && b !== 27) || b === 127 ? 1 : 0));

const MIME_BY_EXTENSION: Record<string, string> = {
  png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", ico: "image/x-icon",
  bmp: "image/bmp", svg: "image/svg+xml", pdf: "application/pdf", zip: "application/zip", gz: "application/gzip",
  tgz: "application/gzip", tar: "application/x-tar", jar: "application/java-archive", wasm: "application/wasm",
  so: "application/x-sharedlib", o: "application/x-object", class: "application/java-vm", mp3: "audio/mpeg",
  mp4: "video/mp4", wav: "audio/wav", woff: "font/woff", woff2: "font/woff2", ttf: "font/ttf", exe: "application/vnd.microsoft.portable-executable",
  json: "application/json", js: "text/javascript", mjs: "text/javascript", ts: "text/x-typescript", py: "text/x-python",
  md: "text/markdown", html: "text/html", css: "text/css", xml: "application/xml", yaml: "application/yaml", yml: "application/yaml",
  sh: "text/x-shellscript", go: "text/x-go", rs: "text/x-rust", java: "text/x-java", c: "text/x-c", h: "text/x-c", txt: "text/plain",
};

const MAGIC: Array<[number[], string]> = [
  [[0x89, 0x50, 0x4e, 0x47], "image/png"],
  [[0xff, 0xd8, 0xff], "image/jpeg"],
  [[0x47, 0x49, 0x46, 0x38], "image/gif"],
  [[0x25, 0x50, 0x44, 0x46], "application/pdf"],
  [[0x7f, 0x45, 0x4c, 0x46], "application/x-elf"],
  [[0x50, 0x4b, 0x03, 0x04], "application/zip"],
  [[0x1f, 0x8b], "application/gzip"],
  [[0x00, 0x61, 0x73, 0x6d], "application/wasm"],
];

/** A MIME type from magic bytes first, then the file extension. */
export function guessMime(name: string, bytes: Uint8Array, binary: boolean): string {
  for (const [magic, mime] of MAGIC) {
    if (magic.every((b, i) => bytes[i] === b)) return mime;
  }
  const dot = name.lastIndexOf(".");
  const ext = dot >= 0 ? name.slice(dot + 1).toLowerCase() : "";
  const known = MIME_BY_EXTENSION[ext];
  if (known && (binary ? !known.startsWith("text/") : true)) return known;
  return binary ? "application/octet-stream" : "text/plain";
}

/** Splits text into lines the way editors count them: a final newline does not start a line. */
export function splitLines(text: string): string[] {
  if (text === "") return [];
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines.map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
}
