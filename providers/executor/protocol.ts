/**
 * The wire protocol between the server and the executor (main.ts in this folder), resident in a
 * container sandbox or started as the local provider's child process. The server talks to it
 * over the executor's stdin/stdout: starting a command or a file operation costs one frame, not
 * a Docker exec round trip, and it works the same under runc and gVisor.
 *
 * A frame is `u32 length | u8 type | u32 id | payload` (big-endian; length counts type, id and
 * payload). Each command (EXEC) and file operation (OP) has its own id, chosen by the server.
 * What the executor streams back (command output, file bytes, walk entries) flows under
 * per-id credit: at most WINDOW bytes beyond what the server has acknowledged as consumed, so
 * a slow consumer of one call bounds memory without stalling the others.
 *
 * Both ends check every frame: its size, its type, and that its id is one they know; a frame
 * that fails is a protocol violation that ends the connection.
 *
 * Imports only node: modules: it runs inside sandboxes too.
 */

import type { FileRules } from "./sensitive-files.ts";

/** Frame types. */
export const F = {
  /** server → executor: start an execution; JSON ExecRequest. */
  EXEC: 1,
  /** server → executor: stop an execution (kill its process tree now) or abandon an operation. */
  KILL: 2,
  /** server → executor: a liveness check; answered by PONG carrying the executor's version. */
  PING: 3,
  /** server → executor: u32 bytes of streamed output the server has consumed. */
  CREDIT: 4,
  /** server → executor: start a file operation; JSON OpRequest. */
  OP: 5,
  /** server → executor: bytes of a write's new content. */
  DATA: 6,
  /** server → executor: the write's content is complete; commit it. */
  END: 7,
  /**
   * server → executor: accept proxy clients on 127.0.0.1 at the JSON { port }, each connection
   * announced by TOPEN; answered by RESULT. Sent again on every new connection to the executor:
   * it drops the tunnels of the connection before.
   */
  LISTEN: 8,
  /**
   * server → executor, id 0: the answer to IDLE when the server has nothing in flight: exit. The
   * server writes nothing more until GONE (the executor has exited: the next byte reaches the
   * sandbox's wrapper, see WAKE) or STAY (it found work meanwhile and carries on).
   */
  BYE: 9,
  /** executor → server: the process started; JSON { startedAt, pid?, stdoutFd? } (stdoutFd: see ExecRequest.passStdout). */
  STARTED: 10,
  /** executor → server: stdout bytes. */
  STDOUT: 11,
  /** executor → server: stderr bytes. */
  STDERR: 12,
  /** executor → server: how the process ended; JSON ExecExit. Final. */
  EXITED: 13,
  /** executor → server: PING's answer. Final. */
  PONG: 14,
  /** executor → server: the request was malformed; JSON { message }. Final. */
  ERROR: 15,
  /** executor → server: an operation's result; JSON. Final. */
  RESULT: 16,
  /** executor → server: an operation or execution failed with a reason; JSON FaultInfo. Final. */
  FAULT: 17,
  /** executor → server: bytes an operation returns (a file's content, byte ranges). */
  CHUNK: 18,
  /** executor → server: a batch of entries (a listing, a walk); JSON array. */
  ENTRIES: 19,
  /** both ways: bytes of a tunnelled connection, under the receiver's credit (TUNNEL_WINDOW). */
  TDATA: 20,
  /** both ways: the sender sends no more bytes on this tunnel (a half-close); it still reads. */
  TEND: 21,
  /** both ways: the tunnel is gone; no frame for it follows from either side. */
  TCLOSE: 22,
  /** both ways: u32 bytes of a tunnel the sender has consumed. */
  TCREDIT: 23,
  /**
   * executor → server: a proxy client connected; the id is new, from the executor's id space. The
   * payload is empty, or `u32` the id of the DIAL call whose connection this is.
   */
  TOPEN: 24,
  /**
   * executor → server, id 0: nothing has happened for the idle time it was given (`--idle-exit-ms`)
   * and nothing is in flight; it may exit to give its memory back (answered by BYE, or ignored).
   */
  IDLE: 25,
  /**
   * wrapper → server, id 0, on the executor's stdout: the executor process has exited; the payload
   * is its status (three ASCII digits) and "1" when the sandbox's cgroup counted an OOM kill while
   * it ran, else "0". After BYE that is the expected end; at any other
   * time the executor died (killed, crashed) and its calls are lost. Written by the sandbox's
   * wrapper (EXECUTOR_WRAPPER), so it is never sent while the executor could still read.
   */
  GONE: 26,
  /** executor → server, id 0: after BYE, it has work after all (a proxy client) and stays. */
  STAY: 27,
  /**
   * server → executor: input for a running command (`u32 n | u8 op | operand`, see CONTROL_OP):
   * stdin bytes, stdin's end, a terminal size or a signal for its tree. Answered by ACK with the
   * same n, in order.
   */
  CONTROL: 28,
  /**
   * executor → server: CONTROL number n was done (`u32 n`), or failed (`u32 n | JSON FaultInfo`).
   * Stdin bytes are acknowledged once the command's pipe took them, or at most STDIN_BUFFER bytes
   * wait for it: a command that does not read holds its writer, not the executor's memory.
   */
  ACK: 29,
  /**
   * server → executor: connect to 127.0.0.1 at the JSON { port } inside the sandbox (ExposePort's
   * proxy). The connection becomes a tunnel like a proxy client's: TOPEN with a new tunnel id and,
   * as its payload, `u32` the id of this call, then this call's RESULT { tunnel }. A port nothing
   * listens on is a FAULT PORT_NOT_LISTENING.
   */
  DIAL: 30,
  /**
   * server → executor: the server opened the passed stdout of the EXEC call with this id (its
   * STARTED named the descriptor, see ExecRequest.passStdout): the executor closes its own copy.
   * No answer. The server sends it for every STARTED that names a descriptor, even one that comes
   * after it gave the call up.
   */
  TAKEN: 31,
} as const;

/** What a CONTROL frame asks (its fifth byte). */
export const CONTROL_OP = {
  /** The operand is bytes for stdin. */
  STDIN: 1,
  /** Close stdin (a terminal gets end-of-file). */
  CLOSE: 2,
  /** The operand is `u16 rows | u16 cols`. */
  RESIZE: 3,
  /** The operand is a signal's name ("SIGTERM"). */
  SIGNAL: 4,
} as const;

/** Bytes of stdin the executor holds for a command that has not read them yet before it stops acknowledging. */
export const STDIN_BUFFER = 1024 * 1024;

/** A pseudo-terminal's size. */
export interface TerminalSize {
  rows: number;
  cols: number;
}

/** Signals a caller may send to a command's tree (CONTROL_OP.SIGNAL). */
export const SIGNALS: ReadonlySet<string> = new Set(["SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT", "SIGWINCH", "SIGALRM"]);

/**
 * The byte that starts an executor that exited when idle. A sandbox runs its executor under a
 * wrapper (`EXECUTOR_WRAPPER`) that waits for one line on stdin after the executor exits; the
 * server writes this byte first on every new connection and before anything it sends after GONE.
 * A running executor skips it between frames: no frame starts with it (the first byte of a
 * frame's length is 0 for every length up to MAX_FRAME).
 */
export const WAKE = 0x0a;

/**
 * The sandbox's main process: a POSIX shell that runs the executor (its arguments); whenever that
 * exits, it writes a GONE frame with the exit status and whether the sandbox's cgroup counted an
 * OOM kill meanwhile (a 13-byte printf: length 9, type 26, id 0, three digits and 0 or 1), then
 * waits for a WAKE line and runs it again; stdin closed ends it. `read` takes
 * one byte at a time from a pipe, so nothing after the WAKE byte is consumed. Being PID 1, it also
 * reaps what the executor's commands orphan (it waits for any child while the executor runs).
 */
export const EXECUTOR_WRAPPER = [
  // The cgroup's OOM-kill count (cgroup v2, then v1; 0 where neither is readable).
  'oom() { n=0; for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do [ -r "$f" ] || continue; while read -r k v; do [ "$k" = oom_kill ] && n=$v; done < "$f"; done; echo "$n"; };',
  String.raw`while :; do a=$(oom); "$@"; s=$?; [ "$(oom)" = "$a" ]; o=$?; printf '\000\000\000\011\032\000\000\000\000%03d%d' "$s" "$o"; IFS= read -r _ || exit 0; done`,
].join(" ");

/**
 * The line a parked executor (`--parked`, providers/microvm-guest.ts) writes on its stderr once it
 * has loaded and waits for its workspace's arguments: a VM may be saved as a template from then on.
 */
export const PARKED_MARKER = "aw-executor: parked";

/** Frame types the executor may send; anything else from it is a protocol violation. */
export const FROM_EXECUTOR = new Set<number>([
  F.STARTED, F.STDOUT, F.STDERR, F.EXITED, F.PONG, F.ERROR, F.RESULT, F.FAULT, F.CHUNK, F.ENTRIES, F.TDATA, F.TEND, F.TCLOSE, F.TCREDIT, F.TOPEN, F.IDLE, F.GONE, F.STAY, F.ACK,
]);
/** Frame types the server may send. */
export const FROM_SERVER = new Set<number>([F.EXEC, F.KILL, F.PING, F.CREDIT, F.OP, F.DATA, F.END, F.LISTEN, F.BYE, F.TDATA, F.TEND, F.TCLOSE, F.TCREDIT, F.CONTROL, F.DIAL, F.TAKEN]);
/** Frames about the executor's lifetime (IDLE, BYE, GONE, STAY): id 0, no payload but GONE's status. */
export const LIFETIME_FRAMES = new Set<number>([F.IDLE, F.BYE, F.GONE, F.STAY]);
/** Frame types of tunnels, whose ids are the executor's (TUNNEL_ID_BASE and up), not the server's calls'. */
export const TUNNEL_FRAMES = new Set<number>([F.TDATA, F.TEND, F.TCLOSE, F.TCREDIT, F.TOPEN]);
/** Frame types that end a call: after one of these its id is free. */
export const FINAL = new Set<number>([F.EXITED, F.PONG, F.ERROR, F.RESULT, F.FAULT]);

/** Streamed bytes in flight per call before the executor waits for credit. */
export const WINDOW = 4 * 1024 * 1024;
/** The server returns credit once this many bytes of a call have been consumed. */
export const CREDIT_BATCH = 512 * 1024;
/** Largest payload of a bulk frame (output, file bytes, write data), in bytes. */
export const MAX_CHUNK = 256 * 1024;
/**
 * Tunnels (the egress proxy's connections out of a sandbox) are numbered by the executor from here
 * up, so their ids never meet the server's call ids.
 */
export const TUNNEL_ID_BASE = 0x8000_0000;
/** Tunnel bytes in flight per direction before the sender waits for credit. */
export const TUNNEL_WINDOW = 1024 * 1024;
/** A tunnel's receiver returns credit once this many bytes were consumed. */
export const TUNNEL_CREDIT_BATCH = 256 * 1024;
/** The port the executor's proxy listener takes on the sandbox's loopback. */
export const EGRESS_PROXY_PORT = 3128;
/** Tunnels one executor holds at once; a client past it is disconnected at once. */
export const MAX_TUNNELS = 128;

/** Largest frame either side accepts (JSON requests and results included). */
export const MAX_FRAME = 1024 * 1024 + 9;

/** What EXEC carries. */
export interface ExecRequest {
  argv: string[];
  /** The workspace root as the executor sees it (a host directory, or /workspace). */
  root: string;
  /** Working directory, workspace-relative ("" for the root); resolved by the executor's jail. */
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  killGraceMs: number;
  /** Programs the run needs besides the workspace's allowed ones (a tool's own; see ExecSpec.programs). */
  programs?: string[];
  /** false: no sweep of never-read files after the run (see ExecSpec.sweep). */
  sweep?: false;
  /** false: no STARTED frame (see ExecSpec.started). */
  started?: false;
  /**
   * Hand the command's stdout to the server instead of streaming it in STDOUT frames (the local
   * executor only, which is the server's child and runs as its user): STARTED carries `stdoutFd`,
   * the executor's own descriptor of the pipe's read end, which the server opens itself as
   * /proc/<executor>/fd/<stdoutFd>; no STDOUT frame follows. The executor keeps that descriptor
   * open until the server's TAKEN for the call. STARTED is sent even with `started: false`, and
   * without `stdoutFd` when the command's stdout is not a pipe (a spawn's socket pair, which /proc
   * cannot open): that stdout then comes in STDOUT frames.
   */
  passStdout?: true;
  /**
   * The command that puts what it runs under the workspace's limits (local-limits.ts): it joins the
   * workspace's cgroups, sets the rlimits and execs its arguments (local provider; absent for none).
   * The executor starts the workspace's launcher through it, or (without a launcher) the command.
   */
  limits?: string[];
  /** Open a pipe to the command's stdin (CONTROL_OP.STDIN); otherwise it reads /dev/null. */
  stdin?: true;
  /** Run the command under a pseudo-terminal of this size (its stdin, stdout and stderr); implies stdin. */
  pty?: TerminalSize;
  /** Send at most this many bytes of each output stream, count the rest (see ExecSpec.keepBytes). */
  keepBytes?: number;
}

/**
 * What OP carries: a file operation on the workspace at `root`, refusing the server's sensitive
 * files and the `rules` added to them.
 */
export type OpRequest = { root: string; rules?: FileRules } & (
  | { op: "resolve"; rel: string }
  | { op: "stat"; rel: string }
  | { op: "read"; rel: string; maxBytes: number }
  | { op: "readFile"; rel: string; maxBytes: number }
  | { op: "write"; rel: string }
  | { op: "list"; rel: string; namesOnly?: boolean }
  | { op: "remove"; rel: string }
  | { op: "walk"; rel: string; all?: boolean; prune?: string[] }
  | { op: "readRanges"; rel: string; ranges: Array<[number, number]> }
  | { op: "release"; rel: string }
  /**
   * Seal the workspace's sensitive files (seal.ts) after the server put files in place; answers
   * { sealed } (0 where nothing can be sealed: outside a sandbox, or commands run as root).
   */
  | { op: "seal"; rel: string }
  /**
   * End every call but this one (a server that connects to a running executor: what the server
   * before it started is nobody's now): their process trees are killed and no frame of theirs
   * follows the answer, { ended }.
   */
  | { op: "forget"; rel: string }
);

/** The 9-byte header of a frame whose payload has `length` bytes. */
export function frameHeader(type: number, id: number, length: number): Buffer {
  const head = Buffer.allocUnsafe(9);
  head.writeUInt32BE(5 + length, 0);
  head.writeUInt8(type, 4);
  head.writeUInt32BE(id, 5);
  return head;
}

/** Encodes one frame as one buffer (small frames; bulk payloads go out as header + payload, see `writeFrame`). */
export function encodeFrame(type: number, id: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const head = frameHeader(type, id, payload.length);
  return payload.length === 0 ? head : Buffer.concat([head, payload], 9 + payload.length);
}

/**
 * Writes one frame to `out` without copying its payload: header and payload go out together in
 * one writev. Returns what `out.write` returned (false: wait for "drain").
 */
export function writeFrame(out: { cork(): void; uncork(): void; write(chunk: Uint8Array): boolean }, type: number, id: number, payload?: Uint8Array): boolean {
  if (payload === undefined || payload.length < 4096) return out.write(encodeFrame(type, id, payload));
  out.cork();
  out.write(frameHeader(type, id, payload.length));
  const ok = out.write(payload);
  out.uncork();
  return ok;
}

/** One decoded frame; `payload` may be kept (it is never overwritten), but must not be modified. */
export interface Frame {
  type: number;
  id: number;
  payload: Buffer;
}

/**
 * Incrementally splits a byte stream into frames. Bytes are kept as received: a frame that lies
 * within one received chunk is handed out as a view of it (no copy; stream chunks are never
 * reused), and one split across chunks is joined once; a length beyond `maxFrame` throws before
 * anything of that size is buffered.
 */
export class FrameReader {
  readonly #maxFrame: number;
  readonly #skipWake: boolean;
  #parts: Buffer[] = [];
  #buffered = 0;

  /** With `skipWake` (the executor's reader), WAKE bytes between frames are dropped. */
  constructor(maxFrame = MAX_FRAME, options: { skipWake?: boolean } = {}) {
    this.#maxFrame = maxFrame;
    this.#skipWake = options.skipWake === true;
  }

  /** Bytes received that no complete frame holds yet. */
  get buffered(): number {
    return this.#buffered;
  }

  /** Feeds bytes; returns the complete frames they finish. Throws on a malformed length. */
  push(chunk: Buffer): Frame[] {
    if (chunk.length > 0) this.#parts.push(chunk);
    this.#buffered += chunk.length;
    const out: Frame[] = [];
    for (;;) {
      if (this.#skipWake) {
        while (this.#buffered > 0 && this.#parts[0][0] === WAKE) {
          this.#parts[0] = this.#parts[0].subarray(1);
          this.#buffered--;
          if (this.#parts[0].length === 0) this.#parts.shift();
        }
      }
      if (this.#buffered < 4) break;
      const head = this.#peek(4);
      const len = head.readUInt32BE(0);
      if (len < 5 || len > this.#maxFrame) throw new Error(`frame length ${len} is out of bounds`);
      if (this.#buffered < 4 + len) break;
      const bytes = this.#take(4 + len);
      out.push({ type: bytes.readUInt8(4), id: bytes.readUInt32BE(5), payload: bytes.subarray(9) });
    }
    return out;
  }

  /** The first `n` buffered bytes, joined (n ≤ buffered). */
  #peek(n: number): Buffer {
    if (this.#parts[0].length >= n) return this.#parts[0];
    return Buffer.concat(this.#parts, n);
  }

  /** Removes and returns the first `n` buffered bytes as one buffer of its own. */
  #take(n: number): Buffer {
    const first = this.#parts[0];
    let out: Buffer;
    if (first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.#parts.shift();
      else this.#parts[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let at = 0;
      while (at < n) {
        const part = this.#parts[0];
        const take = Math.min(part.length, n - at);
        part.copy(out, at, 0, take);
        at += take;
        if (take === part.length) this.#parts.shift();
        else this.#parts[0] = part.subarray(take);
      }
    }
    this.#buffered -= n;
    return out;
  }
}
