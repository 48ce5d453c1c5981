/**
 * WorkspaceFs of the memory provider: a tree of directories and UTF-8 text files held in the
 * server's memory, for tests and evaluations (seed 001's in-memory filesystem). It answers every
 * primitive with the same results and the same faults as the jailed filesystem of the other
 * providers (jailed-fs.ts: its messages, its sensitive-file checks in the same order), so the file
 * tools above it behave identically; what it adds are the seed's limits, each a typed error:
 *
 * - a write holds at most 48,000 characters (CONTENT_TOO_LONG), of UTF-8 text without NUL bytes
 *   (BINARY_CONTENT);
 * - a path has at most 16 segments (PATH_TOO_DEEP) of at most 80 characters (PATH_SEGMENT_TOO_LONG),
 *   printable ASCII only (PATH_NOT_ASCII);
 * - the whole tree holds at most `capacityBytes` (RESOURCE_EXHAUSTED), so no agent can fill the
 *   server's memory.
 *
 * There are no symlinks, FIFOs or devices: nothing can make one. Every operation runs to its end
 * synchronously, so each is atomic with respect to every other call; nothing touches the disk.
 */
import { DomainError } from "../core/errors.ts";
import type { Fault } from "./executor/fault.ts";
import { displayPath, notFound } from "./executor/jail.ts";
import { isDirectory, MAX_RANGES_BYTES, notDirectory, sensitive } from "./executor/jailed-fs.ts";
import { type FileAccess, type FileGuard, type FileRules, guardFor } from "./executor/sensitive-files.ts";
import type { DirEntry, FileStat, FoundFile, ReadOutcome, WalkOptions, WorkspaceFs } from "./types.ts";
import { toDomainError } from "./faults.ts";

/** The seed's limits. */
export const MEMORY_MAX_WRITE_CHARS = 48_000;
export const MEMORY_MAX_DEPTH = 16;
export const MEMORY_MAX_SEGMENT_CHARS = 80;
/** What each entry costs beside its content, in the tree's accounting (name, node, map slot). */
const ENTRY_OVERHEAD_BYTES = 128;

interface FileNode {
  kind: "file";
  data: Uint8Array;
  mtimeMs: number;
}

interface DirNode {
  kind: "dir";
  children: Map<string, Node>;
  mtimeMs: number;
}

type Node = FileNode | DirNode;

const utf8 = new TextDecoder("utf-8", { fatal: true });
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/** The tree of one memory workspace: what the provider keeps, and what its handles read and change. */
export class MemoryTree {
  readonly root: DirNode = { kind: "dir", children: new Map(), mtimeMs: Date.now() };
  readonly capacityBytes: number;
  /** Bytes in use by the accounting of `entryCost`. */
  usedBytes = 0;

  constructor(capacityBytes: number) {
    this.capacityBytes = capacityBytes;
  }

  /** A file's bytes straight from the tree (no rule, no check), or undefined: for tests that look around the tools. */
  peek(rel: string): Uint8Array | undefined {
    let node: Node | undefined = this.root;
    for (const seg of rel === "" ? [] : rel.split("/")) node = node?.kind === "dir" ? node.children.get(seg) : undefined;
    return node?.kind === "file" ? node.data.slice() : undefined;
  }
}

const entryCost = (name: string, node: Node) => ENTRY_OVERHEAD_BYTES + name.length + (node.kind === "file" ? node.data.length : 0);

/** Throws the Fault as the DomainError every other provider's filesystem would give. */
function fail(fault: Fault): never {
  throw toDomainError(fault);
}

function limitError(reason: "PATH_TOO_DEEP" | "PATH_SEGMENT_TOO_LONG" | "PATH_NOT_ASCII", rel: string, message: string, metadata: Record<string, string> = {}): DomainError {
  return new DomainError(reason, message, { metadata: { path: rel.slice(0, 1024), provider: "memory", ...metadata } });
}

/** The seed's path rules: at most 16 segments of at most 80 printable ASCII characters. */
export function checkMemoryPath(rel: string): string[] {
  if (rel === "") return [];
  if (!PRINTABLE_ASCII.test(rel)) throw limitError("PATH_NOT_ASCII", printableOf(rel), `'${printableOf(rel)}': paths in a memory workspace are printable ASCII only`);
  const segments = rel.split("/");
  if (segments.length > MEMORY_MAX_DEPTH) {
    throw limitError("PATH_TOO_DEEP", rel, `'${rel}' has ${segments.length} segments; a memory workspace allows at most ${MEMORY_MAX_DEPTH}`, { max_depth: String(MEMORY_MAX_DEPTH) });
  }
  const long = segments.find((s) => s.length > MEMORY_MAX_SEGMENT_CHARS);
  if (long !== undefined) {
    throw limitError("PATH_SEGMENT_TOO_LONG", rel, `A segment of '${rel.slice(0, 300)}' has ${long.length} characters; a memory workspace allows at most ${MEMORY_MAX_SEGMENT_CHARS}`, {
      max_segment_chars: String(MEMORY_MAX_SEGMENT_CHARS),
    });
  }
  return segments;
}

/** `s` with anything outside printable ASCII escaped, for messages. */
function printableOf(s: string): string {
  return JSON.stringify(s.slice(0, 300)).slice(1, -1);
}

/** The seed's content rules: UTF-8 text (no NUL) of at most 48,000 characters. */
export function checkMemoryContent(rel: string, data: Uint8Array): void {
  let text: string;
  try {
    text = utf8.decode(data);
  } catch {
    text = "\0";
  }
  if (text.includes("\0")) {
    throw new DomainError("BINARY_CONTENT", `'${displayPath(rel)}': a memory workspace holds UTF-8 text only`, { metadata: { path: rel, provider: "memory" } });
  }
  if (text.length > MEMORY_MAX_WRITE_CHARS) {
    let chars = 0;
    for (const _ of text) if (++chars > MEMORY_MAX_WRITE_CHARS) break;
    if (chars > MEMORY_MAX_WRITE_CHARS) {
      throw new DomainError("CONTENT_TOO_LONG", `'${displayPath(rel)}': a write to a memory workspace holds at most ${MEMORY_MAX_WRITE_CHARS} characters`, {
        metadata: { path: rel, provider: "memory", max_chars: String(MEMORY_MAX_WRITE_CHARS) },
      });
    }
  }
}

/**
 * NOT_A_DIRECTORY for a file standing where the path needs a directory (segment `i`), naming that
 * file as the jail does (Jail.locate), so every provider answers alike.
 */
function fileInTheWay(segments: string[], i: number): Fault {
  return notDirectory(segments.slice(0, i + 1).join("/"));
}

/** Where a path leads: its parent directory (if the walk got that far) and the entry, if any. */
interface Found {
  parent: DirNode | undefined;
  name: string;
  node: Node | undefined;
}

/** The memory provider's WorkspaceFs over one tree. */
export class MemoryFs implements WorkspaceFs {
  readonly #tree: MemoryTree;
  readonly #guard: FileGuard;

  constructor(tree: MemoryTree, rules?: FileRules) {
    this.#tree = tree;
    this.#guard = guardFor(rules);
  }

  #check(rel: string, access: FileAccess): void {
    const hit = this.#guard.check(rel, access);
    if (hit !== undefined) fail(sensitive(rel, hit.list, hit.pattern));
  }

  /**
   * Walks to `rel`. A missing parent is FILE_NOT_FOUND and a file as a parent NOT_A_DIRECTORY
   * (naming that file), each after the sensitive-name check (whether a sensitive file exists is not for the caller to
   * learn), as the jailed filesystem answers.
   */
  #find(rel: string, access: FileAccess): Found {
    const segments = checkMemoryPath(rel);
    if (segments.length === 0) return { parent: undefined, name: "", node: this.#tree.root };
    let dir = this.#tree.root;
    for (let i = 0; i < segments.length - 1; i++) {
      const next = dir.children.get(segments[i]);
      if (next === undefined) {
        this.#check(rel, access);
        fail(notFound(rel));
      }
      if (next.kind !== "dir") {
        this.#check(rel, access);
        fail(fileInTheWay(segments, i));
      }
      dir = next;
    }
    const name = segments[segments.length - 1];
    return { parent: dir, name, node: dir.children.get(name) };
  }

  #file(rel: string, access: FileAccess): FileNode {
    const { node } = this.#find(rel, access);
    if (node === undefined) {
      this.#check(rel, access);
      fail(notFound(rel));
    }
    if (node.kind === "dir") fail(isDirectory(rel));
    this.#check(rel, access);
    return node;
  }

  async resolve(rel: string): Promise<string> {
    this.#find(rel, "read");
    return rel;
  }

  async stat(rel: string): Promise<FileStat> {
    const { node } = this.#find(rel, "read");
    if (node === undefined) {
      this.#check(rel, "read");
      fail(notFound(rel));
    }
    if (node.kind === "dir") return { type: "directory", size: 0, mtimeMs: node.mtimeMs };
    this.#check(rel, "read");
    return { type: "file", size: node.data.length, mtimeMs: node.mtimeMs };
  }

  async readFile(rel: string, maxBytes: number): Promise<Uint8Array> {
    this.#check(rel, "read");
    return this.#body(this.#file(rel, "read"), rel, maxBytes);
  }

  #body(file: FileNode, rel: string, maxBytes: number): Uint8Array {
    if (file.data.length > maxBytes) {
      throw new DomainError("FILE_TOO_LARGE", `'${displayPath(rel)}' is ${file.data.length} bytes, more than the ${maxBytes} this tool reads`, {
        metadata: { path: rel, size: String(file.data.length), max_bytes: String(maxBytes) },
      });
    }
    return file.data.slice();
  }

  async read(rel: string, maxBytes: number): Promise<ReadOutcome> {
    const { node } = this.#find(rel, "read");
    if (node === undefined) {
      this.#check(rel, "read");
      fail(notFound(rel));
    }
    if (node.kind === "file") {
      this.#check(rel, "read");
      const bytes = this.#body(node, rel, maxBytes);
      return { kind: "file", rel, size: bytes.length, bytes };
    }
    const entries = [...node.children].map(([name, child]) => ({ name, directory: child.kind === "dir" }));
    return { kind: "directory", rel, size: 0, entries };
  }

  async writeFile(rel: string, data: Uint8Array): Promise<{ created: boolean }> {
    if (rel === "") fail(isDirectory(rel, "'.' is a directory"));
    this.#check(rel, "write");
    const segments = checkMemoryPath(rel);
    checkMemoryContent(rel, data);
    // Walk (without changing anything) to see what must be made, and what that costs.
    let dir: DirNode | undefined = this.#tree.root;
    let missingFrom = segments.length - 1;
    for (let i = 0; i < segments.length - 1; i++) {
      const next: Node | undefined = dir.children.get(segments[i]);
      if (next === undefined) {
        missingFrom = i;
        dir = undefined;
        break;
      }
      if (next.kind !== "dir") fail(fileInTheWay(segments, i));
      dir = next;
    }
    const name = segments[segments.length - 1];
    const old = dir?.children.get(name);
    if (old?.kind === "dir") fail(isDirectory(rel));
    const now = Date.now();
    const file: FileNode = { kind: "file", data: Uint8Array.from(data), mtimeMs: now };
    let cost = entryCost(name, file) - (old ? entryCost(name, old) : 0);
    for (let i = missingFrom; i < segments.length - 1; i++) cost += ENTRY_OVERHEAD_BYTES + segments[i].length;
    if (cost > 0 && this.#tree.usedBytes + cost > this.#tree.capacityBytes) {
      throw new DomainError("RESOURCE_EXHAUSTED", `The memory workspace is full: it holds at most ${this.#tree.capacityBytes} bytes (the workspace's disk limit)`, {
        metadata: { path: rel, provider: "memory", capacity_bytes: String(this.#tree.capacityBytes) },
      });
    }
    // Nothing can fail from here on: the write lands whole or not at all.
    let at = this.#tree.root;
    for (const seg of segments.slice(0, -1)) {
      let next = at.children.get(seg);
      if (next === undefined) {
        next = { kind: "dir", children: new Map(), mtimeMs: now };
        at.children.set(seg, next);
        at.mtimeMs = now;
      }
      at = next as DirNode;
    }
    at.children.set(name, file);
    if (!old) at.mtimeMs = now;
    this.#tree.usedBytes += cost;
    return { created: old === undefined };
  }

  async list(rel: string, options?: { namesOnly?: boolean }): Promise<{ rel: string; entries: DirEntry[] }> {
    const { node } = this.#find(rel, "read");
    if (node === undefined) fail(notFound(rel));
    if (node.kind !== "dir") fail(notDirectory(rel));
    const namesOnly = options?.namesOnly === true;
    const entries = [...node.children].map(
      ([name, child]): DirEntry => ({ name, type: child.kind === "dir" ? "directory" : "file", size: child.kind === "file" && !namesOnly ? child.data.length : 0, mtimeMs: namesOnly ? 0 : child.mtimeMs }),
    );
    return { rel, entries };
  }

  async remove(rel: string): Promise<void> {
    if (rel === "") fail(isDirectory(rel, "'.' is a directory"));
    this.#check(rel, "write");
    const { parent, name, node } = this.#find(rel, "write");
    if (node === undefined || parent === undefined) fail(notFound(rel));
    if (node.kind === "dir") fail(isDirectory(rel, `'${displayPath(rel)}' is a directory; DeleteFile deletes files only`));
    parent.children.delete(name);
    parent.mtimeMs = Date.now();
    this.#tree.usedBytes -= entryCost(name, node);
  }

  async *walk(base: string, options: WalkOptions = {}): AsyncGenerator<FoundFile> {
    const { node } = this.#find(base, "read");
    if (node === undefined) fail(notFound(base));
    if (node.kind !== "dir") fail(notDirectory(base));
    yield* walkDir(node, base, options.all === true, new Set(options.prune));
  }

  async readRanges(rel: string, ranges: Array<[number, number]>): Promise<Uint8Array[]> {
    const total = ranges.reduce((sum, [, len]) => sum + len, 0);
    if (total > MAX_RANGES_BYTES || ranges.some(([off, len]) => !Number.isSafeInteger(off) || !Number.isSafeInteger(len) || off < 0 || len < 0)) {
      throw new DomainError("INVALID_ARGUMENT", `Byte ranges of '${displayPath(rel)}' are invalid or exceed ${MAX_RANGES_BYTES} bytes`, { metadata: { path: rel } });
    }
    this.#check(rel, "read");
    const file = this.#file(rel, "read");
    return ranges.map(([off, len]) => file.data.slice(off, off + len));
  }
}

/**
 * The files below `dir` in the jailed filesystem's order: each directory's files by name
 * descending, then its subdirectories by name ascending. Each directory's entries are taken when
 * it is reached, so a tree changed meanwhile is walked as it then is. With `all` each directory is
 * reported just before its contents; `prune` names directories not entered.
 */
function* walkDir(dir: DirNode, prefix: string, all: boolean, prune: ReadonlySet<string>): Generator<FoundFile> {
  const join = (name: string) => (prefix === "" ? name : `${prefix}/${name}`);
  const names = [...dir.children.keys()].sort((a, b) => (a < b ? 1 : a > b ? -1 : 0));
  const subdirs: Array<[string, DirNode]> = [];
  for (const name of names) {
    const node = dir.children.get(name);
    if (node?.kind === "dir") subdirs.push([name, node]);
    else if (node) yield { path: join(name), name, type: "file", size: node.data.length, mtimeMs: node.mtimeMs };
  }
  for (const [name, node] of subdirs.reverse()) {
    if (all) yield { path: join(name), name, type: "directory", size: 0, mtimeMs: node.mtimeMs };
    if (!prune.has(name)) yield* walkDir(node, join(name), all, prune);
  }
}
