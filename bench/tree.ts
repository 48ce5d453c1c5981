/**
 * Deterministic source-like tree for the grep benchmark: nested directories of text files built
 * from a seeded PRNG, with a rare needle planted in a handful of files and common English words
 * ("the") everywhere. The same seed and options always produce the same bytes.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";

/** Shape of the generated tree. */
export interface TreeOptions {
  /** Number of files. */
  files: number;
  /** Approximate total size in bytes. */
  totalBytes: number;
  /** Number of files that get the rare needle line. */
  needles: number;
  /** PRNG seed. */
  seed: number;
}

/** What was generated. */
export interface TreeInfo {
  files: number;
  bytes: number;
  directories: number;
  /** A regular expression matching only the planted needle lines. */
  rarePattern: string;
  /** Matching lines of `rarePattern` (one per needle file). */
  rareMatches: number;
  /** A pattern that matches on most lines. */
  frequentPattern: string;
}

/** mulberry32: a tiny, fast 32-bit PRNG; returns a function yielding floats in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  "the the the of and to in is that for it as with was on be by this are from at or an not have " +
  "function return const let var if else while for import export class interface type async await " +
  "value result error config server client request response stream buffer handler module index " +
  "workspace provider sandbox command output input file path line match search pattern limit " +
  "timeout signal process child parent memory cache token session header status message event " +
  "alpha beta gamma delta epsilon zeta theta lambda sigma omega north south east west river " +
  "mountain forest ocean desert island valley garden window door table chair paper pencil"
).split(" ");

const EXTENSIONS = [".ts", ".py", ".go", ".md", ".txt", ".rs"];

function makeLine(rand: () => number): string {
  const target = 20 + Math.floor(rand() * 90);
  const indent = " ".repeat(2 * Math.floor(rand() * 4));
  let line = indent;
  while (line.length < target) {
    line += WORDS[Math.floor(rand() * WORDS.length)];
    line += rand() < 0.08 ? "(); " : " ";
  }
  return `${line.trimEnd()}\n`;
}

/**
 * Writes the tree under `root` (which must exist and be empty) and returns its description.
 * Files are spread over two directory levels (`dNN/sNN/fNNNN.ext`); sizes vary ±80% around the
 * mean; each line is drawn from a pool of random word lines, which keeps generation fast.
 */
export function generateTree(root: string, options: TreeOptions): TreeInfo {
  const rand = prng(options.seed);
  const pool: string[] = [];
  for (let i = 0; i < 8192; i++) pool.push(makeLine(rand));

  const perDir = 100;
  const subdirs = 10;
  const meanBytes = options.totalBytes / options.files;
  const needleFiles = new Set<number>();
  while (needleFiles.size < Math.min(options.needles, options.files)) needleFiles.add(Math.floor(rand() * options.files));

  let bytes = 0;
  const dirs = new Set<string>();
  for (let f = 0; f < options.files; f++) {
    const leaf = Math.floor(f / perDir);
    const dir = path.join(root, `d${String(Math.floor(leaf / subdirs)).padStart(2, "0")}`, `s${String(leaf % subdirs).padStart(2, "0")}`);
    if (!dirs.has(dir)) {
      mkdirSync(dir, { recursive: true });
      dirs.add(dir);
    }
    const size = Math.max(64, Math.round(meanBytes * (0.2 + 1.6 * rand())));
    const parts: string[] = [];
    let len = 0;
    const needleAt = needleFiles.has(f) ? Math.floor(rand() * size) : -1;
    let planted = false;
    const needle = `  const marker = "zqx_needle_${f}"; // planted\n`;
    while (len < size) {
      if (!planted && needleAt >= 0 && len >= needleAt) {
        parts.push(needle);
        len += needle.length;
        planted = true;
        continue;
      }
      const line = pool[Math.floor(rand() * pool.length)];
      parts.push(line);
      len += line.length;
    }
    if (!planted && needleAt >= 0) parts.push(needle);
    const name = `f${String(f % perDir).padStart(3, "0")}${EXTENSIONS[f % EXTENSIONS.length]}`;
    const content = parts.join("");
    writeFileSync(path.join(dir, name), content);
    bytes += Buffer.byteLength(content);
  }
  return {
    files: options.files,
    bytes,
    directories: dirs.size,
    rarePattern: "zqx_needle_[0-9]+",
    rareMatches: needleFiles.size,
    frequentPattern: "the",
  };
}

/** Exactly `bytes` bytes of ASCII text made of the same word lines as the tree (deterministic per seed). */
export function textOfSize(bytes: number, seed = 1): string {
  const rand = prng(seed);
  let text = "";
  while (text.length < bytes) text += makeLine(rand);
  return `${text.slice(0, bytes - 1)}\n`;
}
