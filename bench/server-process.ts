/**
 * Parent side of bench/server-child.ts: starts the server in a child process, waits for its
 * port, asks it for memory/CPU stats, and makes sure it dies with the benchmark (normal exit,
 * error or signal).
 */
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createClient, type Client } from "@connectrpc/connect";
import { Http2SessionManager, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import http from "node:http";
import { ToolService } from "../gen/agentworkspace/v1/tool_pb.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { WorkspaceService } from "../gen/agentworkspace/v1/workspace_pb.js";
import type { ServerStats } from "./server-child.ts";

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), "server-child.ts");
const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const c of live) c.kill("SIGKILL");
});

/** Options of `startServerProcess`. */
export interface ServerProcessOptions {
  /** Data directory the server keeps its workspaces in. */
  dataDir: string;
  /** Extra environment for the server (AGENT_WORKSPACE_DOCKER, …). */
  env?: Record<string, string>;
  /** Extra Node flags, e.g. `--cpu-prof`. */
  nodeArgs?: string[];
  /** A command the server's Node runs under (e.g. valgrind and its flags; bench/instr-count.ts). */
  wrapper?: string[];
  /** How long the server may take to listen, in ms (60 s; longer under a wrapper that slows it). */
  startTimeoutMs?: number;
}

/** A running server child. */
export interface ServerProcess {
  url: string;
  port: number;
  pid: number;
  /** Providers the server configured. */
  providers: string[];
  /** Current stats (peakRss covers the window since `track`); `gc` collects garbage first. */
  stats(options?: { gc?: boolean }): Promise<ServerStats>;
  /** Resets the peak and samples RSS every `intervalMs` until `untrack`. */
  track(intervalMs?: number): Promise<ServerStats>;
  /** Stops sampling and returns the stats of the window. */
  untrack(): Promise<ServerStats>;
  /** Starts a CPU profile of the server's main thread. */
  profileStart(): Promise<ServerStats>;
  /** Stops it and writes it to `file` (.cpuprofile). */
  profileStop(file: string): Promise<ServerStats>;
  /** The server's recent stderr lines (for diagnostics). */
  stderrTail(): string[];
  /** Asks the server to shut down cleanly (which writes a CPU profile if enabled), then kills it. */
  stop(): Promise<void>;
}

/** Starts bench/server-child.ts and resolves once it listens. */
export async function startServerProcess(options: ServerProcessOptions): Promise<ServerProcess> {
  // --expose-gc lets the memory measurements ask for a collection; it changes nothing otherwise.
  // The server's own V8 flags (bin/agent-workspace.js), so the bench measures the server as it runs.
  const wrapper = options.wrapper ?? [];
  const argv = [process.execPath, "--expose-gc", "--liftoff-only", "--max-semi-space-size=16", ...(options.nodeArgs ?? []), CHILD, "--data-dir", options.dataDir];
  const child = spawn(wrapper[0] ?? argv[0], [...wrapper.slice(1), ...(wrapper.length > 0 ? argv : argv.slice(1))], {
    env: { ...process.env, ...options.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  live.add(child);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  void exited.then(() => live.delete(child));

  const tail: string[] = [];
  createInterface({ input: child.stderr }).on("line", (l) => {
    tail.push(l);
    if (tail.length > 50) tail.shift();
  });

  let nextId = 1;
  const pending = new Map<number, { resolve: (s: ServerStats) => void; reject: (e: Error) => void }>();
  let onReady: ((msg: { port: number; url: string; pid: number; providers: string[] }) => void) | undefined;
  createInterface({ input: child.stdout }).on("line", (line) => {
    let msg: { type?: string; id?: number } & Record<string, unknown>;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    if (msg.type === "ready") onReady?.(msg as never);
    else if (msg.type === "stats" && typeof msg.id === "number") {
      pending.get(msg.id)?.resolve(msg as unknown as ServerStats);
      pending.delete(msg.id);
    }
  });
  void exited.then(() => {
    for (const p of pending.values()) p.reject(new Error(`server child exited (code ${child.exitCode}, signal ${child.signalCode})`));
    pending.clear();
  });

  const ready = await new Promise<{ port: number; url: string; pid: number; providers: string[] }>((resolve, reject) => {
    const limit = options.startTimeoutMs ?? 60_000;
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`server child did not start within ${limit / 1000} s:\n${tail.join("\n")}`));
    }, limit);
    child.once("error", reject);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`server child exited before listening:\n${tail.join("\n")}`));
    });
    onReady = (msg) => {
      clearTimeout(timer);
      resolve(msg);
    };
  });

  const request = (cmd: "stats" | "track" | "untrack" | "profile-start" | "profile-stop", extra: object = {}) =>
    new Promise<ServerStats>((resolve, reject) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        reject(new Error("server child is not running"));
        return;
      }
      const id = nextId++;
      pending.set(id, { resolve, reject });
      child.stdin.write(`${JSON.stringify({ id, cmd, ...extra })}\n`);
    });

  return {
    ...ready,
    stats: (opts = {}) => request("stats", opts),
    track: (intervalMs = 5) => request("track", { intervalMs }),
    untrack: () => request("untrack"),
    profileStart: () => request("profile-start"),
    profileStop: (file: string) => request("profile-stop", { file }),
    stderrTail: () => [...tail],
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.stdin.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Typed clients for both services, and the standard health service (a no-op RPC), on one transport. */
export interface ClientSet {
  tools: Client<typeof ToolService>;
  workspaces: Client<typeof WorkspaceService>;
  health: Client<typeof Health>;
}

/** How a gRPC client is set up. */
export interface GrpcClientOptions {
  /** Offer gzip/brotli for responses (the connect-node default); false accepts identity only. */
  compression?: boolean;
  /** HTTP/2 receive windows, in bytes (Node's default: 64 KiB each). */
  windows?: { stream: number; connection: number };
}

/**
 * An Http2SessionManager whose connections receive with the given windows, as the README shows
 * connect-node users: the stream window is a setting, the connection window a WINDOW_UPDATE that
 * Node sends when asked (`setLocalWindowSize`), here on each new connection's first request.
 */
export class WideWindowSessionManager extends Http2SessionManager {
  readonly #connection: number;

  constructor(url: string, windows: { stream: number; connection: number }) {
    super(url, {}, { settings: { initialWindowSize: windows.stream } });
    this.#connection = windows.connection;
  }

  override async request(...args: Parameters<Http2SessionManager["request"]>): ReturnType<Http2SessionManager["request"]> {
    const stream = await super.request(...args);
    const session = stream.session;
    if (session && session.state.localWindowSize !== undefined && session.state.localWindowSize < this.#connection) session.setLocalWindowSize(this.#connection);
    return stream;
  }
}

/** A gRPC client set on its own HTTP/2 connection. */
export interface GrpcClientSet extends ClientSet {
  close(): void;
}

/** Creates a gRPC client set (binary protobuf, HTTP/2 prior knowledge) on its own connection. */
export function createGrpcClientSet(baseUrl: string, options: GrpcClientOptions = {}): GrpcClientSet {
  const sessions = options.windows ? new WideWindowSessionManager(baseUrl, options.windows) : new Http2SessionManager(baseUrl);
  const transport = createGrpcTransport({ baseUrl, sessionManager: sessions, ...(options.compression === false ? { acceptCompression: [] } : {}) });
  return {
    tools: createClient(ToolService, transport),
    workspaces: createClient(WorkspaceService, transport),
    health: createClient(Health, transport),
    close: () => sessions.abort(),
  };
}

/** The clients the benchmark uses, with their connections. */
export interface Clients {
  /** gRPC, binary protobuf, HTTP/2 with prior knowledge, connect-node defaults. */
  grpc: ClientSet;
  /** Connect protocol, JSON, HTTP/1.1 keep-alive. */
  connect: ClientSet;
  /** Closes every connection. */
  close(): void;
}

/** Creates gRPC and Connect clients with default settings for `baseUrl`, each on its own connection(s). */
export function createClients(baseUrl: string): Clients {
  const grpc = createGrpcClientSet(baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const connect = createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: false, nodeOptions: { agent } });
  return {
    grpc,
    connect: { tools: createClient(ToolService, connect), workspaces: createClient(WorkspaceService, connect), health: createClient(Health, connect) },
    close() {
      grpc.close();
      agent.destroy();
    },
  };
}
