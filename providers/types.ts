/**
 * The provider boundary. A provider offers a small set of byte-oriented primitives (exec as a
 * stream of events; stat, read, write, list, remove; dispose) and every tool is written once
 * above them, so a tool behaves identically on every provider. Paths given to these primitives
 * are workspace-relative and have already passed the jail's lexical check (`toWorkspacePath`);
 * implementations must still confine symlinks (see `resolveOnHost`).
 */

export type { DirEntry, EntryType, FileStat, FoundFile, ReadOutcome, WalkOptions } from "./executor/types.ts";
import type { DirEntry, FileStat, FoundFile, ReadOutcome, WalkOptions } from "./executor/types.ts";
import type { Duplex } from "node:stream";
import type { FileRules } from "./executor/sensitive-files.ts";
import type { ProgramRules } from "./executor/programs.ts";
export type { ProgramRules } from "./executor/programs.ts";

/**
 * Filesystem primitives of one workspace. Paths are workspace-relative and have passed the
 * jail's lexical check (`toWorkspacePath`); implementations resolve them beneath the workspace
 * root without ever following a link out of it (providers/executor/jail.ts), inside the sandbox
 * for container providers. Failures are DomainErrors with the jail's reasons.
 */
export interface WorkspaceFs {
  /**
   * The canonical workspace-relative form of a path: symlinks inside the workspace followed,
   * PATH_OUTSIDE_WORKSPACE if any leaves it. Used to hand paths to programs (a working
   * directory, a search root) that would otherwise follow an escaping symlink themselves.
   */
  resolve(rel: string): Promise<string>;
  /** Stats a path, following symlinks that stay inside the workspace. FILE_NOT_FOUND if absent. */
  stat(rel: string): Promise<FileStat>;
  /**
   * Reads a regular file whole. IS_DIRECTORY for directories, UNSUPPORTED_FILE_TYPE for FIFOs,
   * sockets and devices (never opened in a way that could block), FILE_TOO_LARGE past maxBytes.
   */
  readFile(rel: string, maxBytes: number): Promise<Uint8Array>;
  /**
   * Replaces a file atomically (temporary file + rename in the same directory), creating parent
   * directories. A failure leaves the old content in place. IS_DIRECTORY if the path is a directory.
   */
  writeFile(rel: string, data: Uint8Array): Promise<{ created: boolean }>;
  /**
   * What ReadFile shows, in one resolution (one round trip for container providers): a regular
   * file's bytes (as `readFile`) or a directory's entry names, with the canonical path.
   */
  read(rel: string, maxBytes: number): Promise<ReadOutcome>;
  /** Lists a directory's entries (unsorted) with its canonical path. NOT_A_DIRECTORY for files. */
  /** A directory's entries; `namesOnly`: name and type alone (size and mtime 0), nothing read per entry. */
  list(rel: string, options?: { namesOnly?: boolean }): Promise<{ rel: string; entries: DirEntry[] }>;
  /** Removes a file or symlink (never its target, never a directory: IS_DIRECTORY). */
  remove(rel: string): Promise<void>;
  /**
   * Every regular file below the directory `base`, with workspace-relative paths, in a fixed
   * order (each directory's files by name descending, then its subdirectories ascending), never
   * entering symlinks. Streams: a large tree is not collected first; ending the iteration early
   * stops the walk. `options.all` reports every entry instead (each directory just before its
   * contents, symlinks as themselves, never followed); `options.prune` names directories never
   * entered. Only metadata: nothing is opened but directories.
   */
  walk(base: string, options?: WalkOptions): AsyncIterable<FoundFile>;
  /** Bytes of a regular file at [offset, length] ranges (shorter at its end), at most 8 MiB in all. */
  readRanges(rel: string, ranges: Array<[number, number]>): Promise<Uint8Array[]>;
}

/** A command to run inside a workspace. */
export interface ExecSpec {
  /** Program and arguments; argv[0] is looked up on the sandbox's PATH. Never passed through a shell. */
  argv: string[];
  /** Working directory, workspace-relative and already confined by the jail ("" for the root). */
  cwd: string;
  /** Variables added to the sandbox's minimal environment. */
  env?: Record<string, string>;
  /** Milliseconds before the process tree gets SIGTERM. */
  timeoutMs: number;
  /** Milliseconds between SIGTERM and SIGKILL after a timeout (default 5000). */
  killGraceMs?: number;
  /** Aborting kills the whole process tree at once. */
  signal?: AbortSignal;
  /**
   * Programs this run needs besides those the workspace's policy allows (names or paths): a tool's
   * own program (git for the git tools, the grep tool's ripgrep). Where the sandbox enforces the
   * policy's programs (executor/programs.ts), only these and the allowed ones can run.
   */
  programs?: string[];
  /**
   * False for the server's own runs that leave no secret behind or seal what they placed
   * themselves (a clone, the git tools, grep): the sandbox then skips its sweep of never-read files
   * after the run (executor/seal.ts), which every other command gets.
   */
  sweep?: false;
  /**
   * false: the caller has no use for the `started` event (a unary Bash): it is not sent, one message
   * fewer from the sandbox per command. The stream then begins with output or `exited`.
   */
  started?: false;
  /**
   * A hint that the output is streamed and may be large: a provider may then read stdout
   * straight from the command's pipe (local: the executor hands the pipe over), which costs a
   * little more to start and nothing per byte. The events are the same either way.
   */
  directStdout?: boolean;
  /**
   * The caller forwards only the first `keepBytes` of each output stream and counts the rest (a
   * unary Bash's output limit, a StreamBash's max_output_bytes): the sandbox sends no more than
   * that of either stream, reads the rest from the command's pipes at their own pace and reports
   * each stream's total on `exited` (`ExecExit.outputBytes`). A flood of hundreds of MiB then
   * never crosses the channel. A provider may ignore it and send everything, and a stdout passed
   * to the server (directStdout) is counted by the server: the caller takes the larger of its own
   * count and the reported one.
   */
  keepBytes?: number;
  /** Open a pipe to the process's stdin (otherwise it reads /dev/null); written through `control`. */
  stdin?: boolean;
  /**
   * Run under a pseudo-terminal of this size: stdin, stdout and stderr are the terminal, so all
   * output comes as `stdout` events. Implies `stdin`.
   */
  pty?: TerminalSize;
  /**
   * Where the caller reaches the process while it runs (its stdin, its terminal's size, signals to
   * its tree): the provider binds it once the process started and ends it when the process ended.
   */
  control?: ProcessControl;
}

export type { TerminalSize } from "./executor/protocol.ts";
import type { TerminalSize } from "./executor/protocol.ts";
import type { ProcessControl } from "./process-control.ts";

export type { ExecEvent, ExecExit } from "./executor/types.ts";
import type { ExecEvent } from "./executor/types.ts";

/** Resource limits in provider-neutral units, after server defaults were applied. */
export interface Limits {
  /** CPU cores (fractional allowed); 0 for none. */
  cpus: number;
  /** Memory in bytes; 0 for none. */
  memoryBytes: number;
  /** Disk in bytes; 0 for none. */
  diskBytes: number;
  /** Maximum processes; 0 for none. */
  pids: number;
}

/** What a provider records about a workspace so it can reopen it after a server restart. */
export interface WorkspaceRecord {
  id: string;
  provider: string;
  createdAt: Date;
  labels: Record<string, string>;
  limits: Limits;
  image: string;
  /** Provider-private state (a container id, a directory). */
  state: Record<string, string>;
  /** Set by the server for a workspace made for an agent type; providers neither set nor read it. */
  agentType?: AgentTypeBinding;
  /** Set by the server for a session's workspace; providers neither set nor read it. */
  session?: WorkspaceSession;
  /** Set by the server while the workspace waits in a warm pool; providers neither set nor read it. */
  pool?: PoolMembership;
  /** What the server's host mounts copied in when the workspace was made; providers neither set nor read it. */
  mounts?: MountRecord[];
  /** Set by the server while the workspace is paused (PauseWorkspace); providers neither set nor read it. */
  paused?: boolean;
  /**
   * The server that serves it, when several share one database (its id in the replicas table);
   * set by the server, and changed only by a compare-and-set when that server has stopped.
   */
  server?: string;
}

/** What one host mount copied (MountPreview in the API). */
export interface MountRecord {
  hostPath: string;
  mountPath: string;
  filesCopied: number;
  bytesCopied: number;
  skipped: Array<{ path: string; reason: string }>;
  skippedTruncated: boolean;
}

/** What a session's task says about its repository (TaskContext in the API). */
export interface TaskContext {
  repositoryUrl: string;
  branch: string;
  pullRequestNumber: number;
  baseBranch: string;
}

/** The repository a workspace was cloned from. */
export interface CheckoutInfo {
  repositoryUrl: string;
  branch: string;
  commit: string;
}

/** The session a workspace belongs to. */
export interface WorkspaceSession {
  id: string;
  task: TaskContext;
}

/** A warm-pool workspace: made ahead of demand for the configuration whose fingerprint it carries. */
export interface PoolMembership {
  fingerprint: string;
  /** False while it is being made; a stop then leaves it half-made, and it is removed. */
  ready: boolean;
  /** What its provisioning reported, handed to the session that takes it. */
  warnings: ProvisioningWarning[];
  checkout?: CheckoutInfo;
  /**
   * Taken for a session (servers sharing a database take pooled workspaces under a row lock, so
   * no two take one): no longer in the pool, and its session is being attached.
   */
  claimed?: boolean;
}

/** Something that went wrong in provisioning without stopping it. */
export interface ProvisioningWarning {
  stage: "sandbox" | "clone" | "setup_command" | "warm_pool";
  message: string;
  command: string;
  exitCode: number;
  timedOut: boolean;
}

/**
 * What a workspace keeps of the agent type it was made for: the id, and the parts of the
 * configuration that govern calls in it, as they were when it was made.
 */
export interface AgentTypeBinding {
  id: string;
  /** The tools the agent type allowed then; a call needs the tool here and in the type's current list. */
  tools: string[];
  /** Command timeouts of the agent type; 0 takes the server's. */
  defaultTimeoutMs: number;
  maxTimeoutMs: number;
  /** The agent type's command policy then (absent in records made before policies existed: the server's alone). */
  commandPolicy?: { defaultAction: string; allow: string[]; deny: string[] };
  /** Sensitive-file patterns the agent type added then. */
  sensitiveFiles?: FileRules;
  /** Branch patterns GitPush refuses (empty or absent: the base and default branches). */
  protectedBranches?: string[];
  /** The egress allowlist then, when its network mode was "allowlist" (absent: no proxy). */
  egressAllow?: string[];
  /** Background processes at once (absent: the server's). */
  maxProcesses?: number;
  /** Idle time that ends the workspace's background processes, in ms (absent: the server's). */
  processIdleTimeoutMs?: number;
  /** Idle time after which the workspace is paused, and deleted, in ms (absent: never). */
  pauseAfterIdleMs?: number;
  deleteAfterIdleMs?: number;
}

/** A live workspace: the primitives tools run on. */
export interface WorkspaceHandle {
  readonly id: string;
  readonly fs: WorkspaceFs;
  /** Runs a process inside the workspace; see ExecEvent for the stream's guarantees. */
  exec(spec: ExecSpec): AsyncIterable<ExecEvent>;
  /** Path of a ripgrep binary as seen inside the workspace, or undefined when there is none. */
  readonly ripgrepPath: string | undefined;
  /**
   * False when the provider runs no processes (memory): `exec` then always fails with
   * PROCESSES_UNSUPPORTED, and tools that can do without a process (grep) work in the server.
   */
  readonly processes?: false;
  /**
   * Seals the workspace's sensitive files where the sandbox can (executor/seal.ts): called after
   * the server put files in place (a clone, a checkout, host mounts, setup commands). Absent where
   * nothing isolates commands from the server's user (local) or no command runs (memory).
   */
  seal?(): Promise<{ sealed: number }>;
  /**
   * A connection to `port` on the workspace's own loopback, made from inside its sandbox (over the
   * executor's channel): what ExposePort's proxy forwards to. PORT_NOT_LISTENING when nothing
   * accepts there. On local, where every workspace shares the host's loopback, only a port a
   * process of this workspace listens on is reached. Absent where nothing runs (memory).
   */
  dial?(port: number, signal?: AbortSignal): Promise<Duplex>;
  /** Current state of the sandbox. */
  health(): Promise<{ status: "ready" | "stopped" | "failed"; message: string }>;
  /** Releases server-side resources (connections) without destroying the workspace. */
  close(): Promise<void>;
}

/** Options for creating a workspace. */
export interface CreateOptions {
  id: string;
  labels: Record<string, string>;
  limits: Limits;
  /** Image for container providers; "" selects the provider's default. */
  image: string;
  /**
   * "none": no network besides loopback (an allowlist's egress goes through the executor's
   * channel, see EgressHook). "egress": the network the operator set aside for open egress; a
   * provider that has none refuses with INVALID_ARGUMENT. Unset: the provider's configured
   * network. The local provider isolates nothing and accepts every value.
   */
  network?: "none" | "egress";
  /**
   * What the sandbox itself enforces for the workspace's agent type (container providers; the
   * others isolate nothing and ignore it): `programs`, an allowlist's programs, makes every other
   * program unrunnable and the writable filesystems noexec; `fileRules` are the agent type's
   * sensitive-file patterns, whose matches the sandbox seals (the server's always apply).
   */
  enforcement?: { programs?: ProgramRules; fileRules?: FileRules };
  /**
   * Where the sandbox may go (container providers over several engines, docker-engines.ts): only
   * to an engine carrying every one of these labels. The others ignore it.
   */
  placement?: { engineLabels: Record<string, string> };
  /** The Kubernetes RuntimeClass of the workspace's pod (kubernetes provider); the others ignore it. */
  runtimeClass?: string;
}

/** Where providers report lifecycle events and what their executors say on stderr (the server's logger fits). */
export interface ProviderLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Where a workspace's proxied connections go (issue 16): the server's egress proxy, with the
 * workspace's allowlist. A provider opens a proxy endpoint the workspace's commands can reach
 * (a listener of the executor on the sandbox's loopback; a host loopback port for the local
 * provider), hands every connection to it here, and points commands at it (`proxyEnv`).
 */
export interface EgressHook {
  /**
   * Serves one client connection. With `credential`, every request on it must carry it as
   * `Proxy-Authorization: Basic` (407 otherwise, and nothing is reached): for an endpoint others
   * than the workspace's commands can reach (the local provider's host loopback port).
   */
  accept(stream: Duplex, credential?: ProxyCredential): void;
}

/** Proxy credentials a connection must present; commands get them in the proxy URL's userinfo. */
export interface ProxyCredential {
  username: string;
  password: string;
}

/** How the server opens a workspace. */
export interface OpenOptions {
  /** Sensitive-file patterns added to the server's lists, enforced by the jail. */
  fileRules?: FileRules;
  /** Egress through the server's proxy; unset: commands get no proxy. */
  egress?: EgressHook;
}

/** A way of providing workspaces. */
export interface Provider {
  /** "local", "docker", "gvisor", "memory", … */
  readonly name: string;
  /**
   * True when workspaces end with the server process (memory): the server drops their records at
   * start instead of reopening them.
   */
  readonly ephemeral?: boolean;
  /** Provisions a new workspace; the returned record is persisted by the server. */
  create(options: CreateOptions): Promise<WorkspaceRecord>;
  /**
   * Attaches to an existing workspace (after create, or after a server restart). The file
   * operations of the handle refuse the server's sensitive files and `options.fileRules`.
   */
  open(record: WorkspaceRecord, options?: OpenOptions): Promise<WorkspaceHandle>;
  /** Stops everything in the workspace and deletes it with its storage. Idempotent. */
  destroy(record: WorkspaceRecord): Promise<void>;
  /**
   * Freezes the workspace's whole sandbox (a container's cgroup freezer, a VM's vCPUs), files and
   * processes kept; `resume` thaws it. Absent where the provider has no sandbox to freeze (local:
   * the server stops the workspace's processes itself; memory: nothing runs). Idempotent.
   */
  /**
   * Whether any server configured like this one reaches the workspace's sandbox (a container on a
   * remote engine), so that another server may take it from a warm pool; absent: only the server
   * that made it does (a directory, a VM or a container on its host).
   */
  portable?(record: WorkspaceRecord): boolean;
  pause?(record: WorkspaceRecord): Promise<void>;
  resume?(record: WorkspaceRecord): Promise<void>;
  /** Releases the provider's own resources at server shutdown; workspaces survive. */
  dispose(): Promise<void>;
}
