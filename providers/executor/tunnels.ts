/**
 * The executor's end of the egress tunnels (issue 16): a listener on the sandbox's loopback whose
 * every accepted connection is carried over the executor's channel to the server, where the
 * egress proxy reads it. The sandbox itself keeps no route out: this listener is the only way a
 * byte leaves, and only to the server.
 *
 * Each tunnel is a byte stream both ways under credit (TUNNEL_WINDOW per direction): a client
 * that stops reading pauses its tunnel's sender, never the channel. A tunnel closes on either
 * side's TCLOSE; TEND is a half-close, as TCP has.
 *
 * Where the server hands the sandbox a Unix socket of its own (a bind mount from the host, see
 * providers/docker.ts), each accepted connection is joined to a connection on that socket
 * instead: the bytes go kernel to kernel and never through the channel's frames. The socket is
 * tried once when the listener starts; a socket that does not answer (a runtime that keeps host
 * sockets out of the sandbox) leaves the channel in use.
 *
 * The same tunnels carry connections the other way (ExposePort, see `dial`): the server asks for a
 * connection to a port on the sandbox's loopback, and a caller outside reaches a server the
 * workspace runs through the server's authenticated proxy, never through a port of the host.
 *
 * Imports only node: modules: it runs inside sandboxes.
 */
import { connect, createServer, type Server, type Socket } from "node:net";
import { Fault } from "./fault.ts";
import { F, MAX_CHUNK, MAX_TUNNELS, TUNNEL_CREDIT_BATCH, TUNNEL_ID_BASE, TUNNEL_WINDOW } from "./protocol.ts";

/** How long DIAL waits for a connection on the sandbox's loopback (a listener with a full backlog). */
const DIAL_TIMEOUT_MS = 10_000;

type Send = (type: number, id: number, payload?: Uint8Array) => unknown;

interface Tunnel {
  socket: Socket;
  /** Bytes sent to the server not yet credited. */
  inFlight: number;
  /** Bytes written to the client not yet credited back. */
  unacked: number;
  /** The server closed it: no TCLOSE goes back. */
  closedByPeer: boolean;
  /** The server ended its side (TEND): what it sent is all there is. */
  endedByPeer: boolean;
}

export class Tunnels {
  readonly #send: Send;
  readonly #open = new Map<number, Tunnel>();
  /** Connections joined to the server's socket, while that is the way out. */
  readonly #joined = new Set<Socket>();
  #socketPath: string | undefined;
  #server: Server | undefined;
  #port = 0;
  #nextId = TUNNEL_ID_BASE;

  constructor(send: Send) {
    this.#send = send;
  }

  /**
   * Listens on 127.0.0.1:`port` (again: a listener already there is kept). Tunnels of an earlier
   * server connection are dropped: the server that asks now knows none of them.
   */
  async listen(port: number, socketPath?: string): Promise<{ port: number; via: "socket" | "channel" }> {
    for (const t of this.#open.values()) {
      t.closedByPeer = true;
      t.socket.destroy();
    }
    this.#open.clear();
    this.#socketPath = socketPath !== undefined && (await answers(socketPath)) ? socketPath : undefined;
    const via = this.#socketPath === undefined ? "channel" : "socket";
    if (this.#server && this.#port === port) return { port, via };
    this.#server?.close();
    const server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => this.#accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once("error", (err: NodeJS.ErrnoException) =>
        reject(new Fault("WORKSPACE_NOT_READY", `The sandbox's egress proxy cannot listen on 127.0.0.1:${port} (${err.code ?? "error"}); restart the workspace`)),
      );
      server.listen({ host: "127.0.0.1", port, exclusive: true }, () => resolve());
    });
    server.on("error", () => undefined);
    this.#server = server;
    this.#port = port;
    return { port, via };
  }

  #accept(socket: Socket): void {
    socket.on("error", () => undefined);
    if (this.#socketPath !== undefined) return this.#join(socket, this.#socketPath);
    if (this.#open.size >= MAX_TUNNELS || this.#nextId >= 0xffff_ffff) return void socket.destroy();
    this.#adopt(socket);
  }

  /**
   * Connects to 127.0.0.1:`port` in the sandbox for the server (ExposePort's proxy): the
   * connection becomes a tunnel like an accepted one, announced by a TOPEN that names the DIAL
   * call `callId` (before that call's RESULT). Resolves to the tunnel's id.
   */
  dial(port: number, callId: number): Promise<number> {
    if (this.#server !== undefined && port === this.#port) {
      return Promise.reject(new Fault("INVALID_ARGUMENT", `Port ${port} is the workspace's egress proxy, not a port of its own`, { port: String(port) }));
    }
    if (this.#open.size >= MAX_TUNNELS || this.#nextId >= 0xffff_ffff) {
      return Promise.reject(tooManyTunnels());
    }
    return new Promise((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port, allowHalfOpen: true, noDelay: true });
      const timer = setTimeout(() => socket.destroy(new Error("connect timed out")), DIAL_TIMEOUT_MS);
      socket.once("error", (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(new Fault("PORT_NOT_LISTENING", `Nothing in the workspace accepts connections on port ${port} (${err.code ?? err.message})`, { port: String(port) }, err));
      });
      socket.once("connect", () => {
        clearTimeout(timer);
        socket.removeAllListeners("error");
        socket.on("error", () => undefined);
        if (this.#open.size >= MAX_TUNNELS) {
          socket.destroy();
          reject(tooManyTunnels());
          return;
        }
        resolve(this.#adopt(socket, callId));
      });
    });
  }

  /** Makes `socket` a tunnel: a new id, TOPEN (naming the DIAL call `callId`, if any), its frames. */
  #adopt(socket: Socket, callId?: number): number {
    const id = ++this.#nextId;
    const t: Tunnel = { socket, inFlight: 0, unacked: 0, closedByPeer: false, endedByPeer: false };
    this.#open.set(id, t);
    if (callId === undefined) {
      this.#send(F.TOPEN, id);
    } else {
      const origin = Buffer.allocUnsafe(4);
      origin.writeUInt32BE(callId, 0);
      this.#send(F.TOPEN, id, origin);
    }
    socket.on("data", (chunk: Buffer) => {
      for (let at = 0; at < chunk.length; at += MAX_CHUNK) this.#send(F.TDATA, id, chunk.subarray(at, at + MAX_CHUNK));
      t.inFlight += chunk.length;
      if (t.inFlight >= TUNNEL_WINDOW) socket.pause();
    });
    socket.on("end", () => {
      if (this.#open.get(id) === t) this.#send(F.TEND, id);
    });
    socket.on("close", () => {
      if (this.#open.get(id) !== t) return;
      this.#open.delete(id);
      if (!t.closedByPeer) this.#send(F.TCLOSE, id);
    });
    return id;
  }

  /**
   * Joins `client` to a new connection on the server's socket, both ways, half-closes passed on.
   * The server bounds connections per workspace; this bounds them per sandbox as the channel does.
   */
  #join(client: Socket, socketPath: string): void {
    if (this.#joined.size >= MAX_TUNNELS) return void client.destroy();
    const server = connect({ path: socketPath, allowHalfOpen: true });
    server.on("error", () => undefined);
    this.#joined.add(client);
    const close = () => {
      this.#joined.delete(client);
      client.destroy();
      server.destroy();
    };
    client.once("close", close);
    server.once("close", close);
    client.pipe(server);
    server.pipe(client);
  }

  /** A tunnel frame from the server; one for a tunnel that is gone is dropped. */
  onFrame(type: number, id: number, payload: Buffer): void {
    const t = this.#open.get(id);
    if (!t) return;
    switch (type) {
      case F.TDATA: {
        const n = payload.length;
        t.socket.write(payload, (err) => {
          if (err || this.#open.get(id) !== t) return;
          t.unacked += n;
          if (t.unacked < TUNNEL_CREDIT_BATCH) return;
          const credit = Buffer.allocUnsafe(4);
          credit.writeUInt32BE(t.unacked, 0);
          t.unacked = 0;
          this.#send(F.TCREDIT, id, credit);
        });
        break;
      }
      case F.TEND:
        t.endedByPeer = true;
        t.socket.end();
        break;
      case F.TCLOSE:
        t.closedByPeer = true;
        this.#open.delete(id);
        // After TEND the client still gets what was written to it; otherwise the tunnel broke off.
        if (t.endedByPeer && !t.socket.writableFinished) {
          const timer = setTimeout(() => t.socket.destroy(), 30_000);
          t.socket.once("finish", () => t.socket.destroy());
          t.socket.once("close", () => clearTimeout(timer));
        } else {
          t.socket.destroy();
        }
        break;
      case F.TCREDIT:
        if (payload.length < 4) break;
        t.inFlight = Math.max(0, t.inFlight - payload.readUInt32BE(0));
        if (t.inFlight < TUNNEL_WINDOW) t.socket.resume();
        break;
    }
  }

  /** Proxy clients connected now, over the channel or joined to the socket. */
  get active(): number {
    return this.#open.size + this.#joined.size;
  }

  /** Closes the listener and every tunnel. */
  close(): void {
    this.#server?.close();
    for (const t of this.#open.values()) t.socket.destroy();
    for (const c of this.#joined) c.destroy();
  }
}

const tooManyTunnels = () => new Fault("RESOURCE_EXHAUSTED", `The sandbox has ${MAX_TUNNELS} connections open through its channel; close some first`, { max: String(MAX_TUNNELS) });

/** Whether a connection to the Unix socket at `socketPath` is accepted (within 2 s). */
function answers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = connect({ path: socketPath });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      probe.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), 2000);
    probe.once("connect", () => done(true));
    probe.once("error", () => done(false));
  });
}
