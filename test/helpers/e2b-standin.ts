/**
 * A LOCAL STAND-IN of the E2B cloud service, for tests only. It is not E2B and talks to no
 * network: it answers the part of E2B's published API that the official `e2b` JavaScript SDK
 * (2.51.0) calls, so code written against that SDK can be tested end to end, unmodified, with the
 * real SDK in front of it. Each E2B sandbox is a real local Docker container.
 *
 * One HTTP/1.1 server on 127.0.0.1 serves both halves; the SDK is pointed at it with
 * `{ apiUrl, sandboxUrl, apiKey }` (`sdkOptions`). With `sandboxUrl` set, the SDK sends every envd
 * call of every sandbox to that one URL with the headers `E2b-Sandbox-Id` and `E2b-Sandbox-Port`,
 * which is how requests are told apart: with the header they are envd's, without it the API's.
 *
 * Control plane (JSON, `X-API-Key` checked; a refusal is E2B's `{code, message}`):
 * - `POST /v2/sandboxes` (create: template → image, metadata, envVars, timeout, allow_internet_access),
 * - `GET /v2/sandboxes` (list: metadata and state filters, template, startedAfter, order, limit, nextToken),
 * - `GET /sandboxes/{id}`, `DELETE /sandboxes/{id}`, `POST /sandboxes/{id}/timeout`,
 *   `POST /sandboxes/{id}/pause` (docker pause), `POST /v2/sandboxes/{id}/connect` (docker unpause).
 * A sandbox whose timeout passes is killed (its container removed); a paused one does not expire.
 *
 * envd (routed by `E2b-Sandbox-Id`; `X-Access-Token` checked; an unknown or paused sandbox gets
 * the client proxy's 502 `{sandboxId, message, code}`, as E2B answers when auto-resume is off):
 * - `GET /health`, `GET /files` (download through Docker's archive API; gzip-encoded when the
 *   client accepts gzip, as envd does, which fetch always does) and
 *   `POST /files` (multipart or octet-stream upload, gzip-encoded or not, written with Docker's
 *   putArchive: parents created and everything owned by the requesting user, like envd);
 * - the Connect service `process.Process`, served with connect-node from the descriptor embedded
 *   in the SDK itself (so the wire format is the SDK's): Start, Connect, List, SendInput,
 *   StreamInput, CloseStdin and SendSignal. A process is a Docker exec in the container (user from
 *   the `Authorization: Basic` header, default "user"; cwd; envs; stdin attached on request) whose
 *   in-sandbox pid comes from a one-line `sh` wrapper, as envd's own wrapper does before `exec`.
 *
 * Not implemented (the SDK gets a clear error, never a silent success): PTYs (`Start` with a pty,
 * `Update`), the `filesystem.Filesystem` RPCs (list, stat, mkdir, move, remove, watch: answered
 * Unimplemented), signed file URLs, file metadata (the reported envd version, 0.5.7 by default,
 * makes the SDK refuse it), ports other than envd's, snapshots, fork, metrics, logs, network
 * rules, volumes, MCP, templates other than those mapped to images, pause-on-timeout and
 * auto-resume. Pausing keeps processes and files (docker pause freezes them) but ends the
 * streams attached to them, as E2B's proxy drops connections to a paused sandbox.
 *
 * Known differences from envd: a command that leaves a child holding its output open ends 2 s
 * after its exit (Docker's limit) rather than at once; an exit is reported as a signal
 * ("signal: killed", exit code -1) only for signals sent through SendSignal or a Start deadline,
 * since Docker reports a signalled exec as 128 + the signal.
 *
 * Every container it makes carries the label `agent-workspace.e2b-standin=<random per instance>`;
 * close() removes exactly those, so nothing else on the Docker engine is touched.
 */
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { type Duplex, Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import zlib from "node:zlib";
import Docker from "dockerode";
import type { Message, MessageInitShape } from "@bufbuild/protobuf";
import { fileDesc, type GenMessage, serviceDesc } from "@bufbuild/protobuf/codegenv2";
import { Code, ConnectError, createContextKey, createContextValues, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Header, type HeaderData, Pax } from "tar";

/** A running stand-in. */
export interface E2bStandIn {
  /** Where the SDK's control-plane calls go (`apiUrl`). */
  apiUrl: string;
  /** Where the SDK's envd calls go (`sandboxUrl`), the same server. */
  sandboxUrl: string;
  /** The one API key the stand-in accepts. */
  apiKey: string;
  /** SDK options to spread: { apiUrl, sandboxUrl, apiKey } */
  sdkOptions: { apiUrl: string; sandboxUrl: string; apiKey: string };
  /** sandboxes alive now (id → container id) */
  sandboxes(): Map<string, string>;
  /** make the next N API calls fail with HTTP 503 (to test error mapping) */
  failNext(n: number): void;
  /** Stops the server and removes every container this stand-in made (running or paused). */
  close(): Promise<void>;
}

/** What the stand-in serves. */
export interface E2bStandInOptions {
  /** The Docker image of the default template, "base". */
  image: string;
  /** The engine; by default dockerode's own (DOCKER_HOST or /var/run/docker.sock). */
  docker?: Docker;
  /** E2B template id → local Docker image, besides "base". */
  templates?: Record<string, string>;
  /**
   * The envd version reported to the SDK, which gates SDK features on it. The default, 0.5.7,
   * enables what is implemented here (closeStdin ≥ 0.5.2, octet-stream uploads ≥ 0.5.7) and
   * nothing that is not (file metadata needs 0.6.2).
   */
  envdVersion?: string;
}

/** Starts a stand-in on 127.0.0.1 at a random port; nothing touches the engine until a sandbox is created. */
export async function startE2bStandIn(options: E2bStandInOptions): Promise<E2bStandIn> {
  const standIn = new StandIn({
    docker: options.docker ?? new Docker(),
    instance: randomBytes(8).toString("hex"),
    apiKey: `e2b_${randomBytes(20).toString("hex")}`,
    images: new Map([["base", options.image], ...Object.entries(options.templates ?? {})]),
    envdVersion: options.envdVersion ?? DEFAULT_ENVD_VERSION,
  });
  // Idle connections are kept 65 s (E2B's endpoints sit behind a load balancer that keeps them
  // longer than Node's 5 s default). With 5 s, a client reusing a connection as the server closed
  // it lost a 100 MB upload ("fetch failed": a POST is not retried) in a loaded CI.
  const server = http.createServer({ requestTimeout: 0, keepAliveTimeout: 65_000 }, standIn.handle);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    apiUrl: url,
    sandboxUrl: url,
    apiKey: standIn.apiKey,
    sdkOptions: { apiUrl: url, sandboxUrl: url, apiKey: standIn.apiKey },
    sandboxes: () => new Map([...standIn.sandboxes.values()].map((s) => [s.id, s.container.id])),
    failNext: (n) => standIn.failNext(n),
    close: async () => {
      server.close();
      server.closeAllConnections();
      await standIn.close();
    },
  };
}

/** The label on every container a stand-in makes; its value names the stand-in. */
const LABEL = "agent-workspace.e2b-standin";
/** Where a container's sandbox id, template and metadata are noted, for whoever inspects it. */
const LABEL_SANDBOX = `${LABEL}.sandbox-id`;
const LABEL_TEMPLATE = `${LABEL}.template-id`;
const LABEL_METADATA = `${LABEL}.metadata`;
const DEFAULT_ENVD_VERSION = "0.5.7";
/** envd's port, the only one served. */
const ENVD_PORT = 49983;
/** The user E2B runs commands and writes files as when the SDK names none. */
const DEFAULT_USER = "user";
/** E2B's defaults: create and connect without a timeout keep a sandbox 300 s. */
const DEFAULT_TIMEOUT_S = 300;
/** The deprecated clientID every E2B sandbox still carries. */
const CLIENT_ID = "6532622b";
/** envd reads process output in 32 KiB pieces; so are the data events. */
const OUTPUT_CHUNK = 32 * 1024;
/** Events a slow stream may have queued before the process's output is held back (envd: 64). */
const HIGH_WATER = 64;
/** envd's keepalive interval when the request names none (Keepalive-Ping-Interval, seconds). */
const DEFAULT_KEEPALIVE_S = 90;
/** The only signals the SDK sends (process.Signal). */
const SIGNAL_NAMES: Record<number, string> = { 9: "killed", 15: "terminated" };
/** Go's os.FileMode bits in Docker's path stat. */
const GO_MODE_DIR = 0x80000000;

// ---------------------------------------------------------------------------------------------
// The process.Process service, from the SDK's own descriptor
// ---------------------------------------------------------------------------------------------

/**
 * process/process.proto as the e2b SDK 2.51.0 embeds it (the `fileDesc("…")` argument of its
 * `Process` service in dist/index.mjs), unchanged: the stand-in speaks exactly the SDK's messages.
 */
const PROCESS_PROTO = [
  "ChVwcm9jZXNzL3Byb2Nlc3MucHJvdG8SB3Byb2Nlc3MiSgoDUFRZEh8KBHNpemUYASABKAsyES5wcm9jZXNzLlBUWS5TaXplGiIKBFNpemUSDAoEY29s",
  "cxgBIAEoDRIMCgRyb3dzGAIgASgNIqEBCg1Qcm9jZXNzQ29uZmlnEgsKA2NtZBgBIAEoCRIMCgRhcmdzGAIgAygJEi4KBGVudnMYAyADKAsyIC5wcm9j",
  "ZXNzLlByb2Nlc3NDb25maWcuRW52c0VudHJ5EhAKA2N3ZBgEIAEoCUgAiAEBGisKCUVudnNFbnRyeRILCgNrZXkYASABKAkSDQoFdmFsdWUYAiABKAk6",
  "AjgBQgYKBF9jd2QiDQoLTGlzdFJlcXVlc3QiXAoLUHJvY2Vzc0luZm8SJgoGY29uZmlnGAEgASgLMhYucHJvY2Vzcy5Qcm9jZXNzQ29uZmlnEgsKA3Bp",
  "ZBgCIAEoDRIQCgN0YWcYAyABKAlIAIgBAUIGCgRfdGFnIjcKDExpc3RSZXNwb25zZRInCglwcm9jZXNzZXMYASADKAsyFC5wcm9jZXNzLlByb2Nlc3NJ",
  "bmZvIpcBCgxTdGFydFJlcXVlc3QSJwoHcHJvY2VzcxgBIAEoCzIWLnByb2Nlc3MuUHJvY2Vzc0NvbmZpZxIeCgNwdHkYAiABKAsyDC5wcm9jZXNzLlBU",
  "WUgAiAEBEhAKA3RhZxgDIAEoCUgBiAEBEhIKBXN0ZGluGAQgASgISAKIAQFCBgoEX3B0eUIGCgRfdGFnQggKBl9zdGRpbiJiCg1VcGRhdGVSZXF1ZXN0",
  "EikKB3Byb2Nlc3MYASABKAsyGC5wcm9jZXNzLlByb2Nlc3NTZWxlY3RvchIeCgNwdHkYAiABKAsyDC5wcm9jZXNzLlBUWUgAiAEBQgYKBF9wdHkiEAoO",
  "VXBkYXRlUmVzcG9uc2UirwMKDFByb2Nlc3NFdmVudBIxCgVzdGFydBgBIAEoCzIgLnByb2Nlc3MuUHJvY2Vzc0V2ZW50LlN0YXJ0RXZlbnRIABIvCgRk",
  "YXRhGAIgASgLMh8ucHJvY2Vzcy5Qcm9jZXNzRXZlbnQuRGF0YUV2ZW50SAASLQoDZW5kGAMgASgLMh4ucHJvY2Vzcy5Qcm9jZXNzRXZlbnQuRW5kRXZl",
  "bnRIABI0CglrZWVwYWxpdmUYBCABKAsyHy5wcm9jZXNzLlByb2Nlc3NFdmVudC5LZWVwQWxpdmVIABoZCgpTdGFydEV2ZW50EgsKA3BpZBgBIAEoDRpI",
  "CglEYXRhRXZlbnQSEAoGc3Rkb3V0GAEgASgMSAASEAoGc3RkZXJyGAIgASgMSAASDQoDcHR5GAMgASgMSABCCAoGb3V0cHV0GlsKCEVuZEV2ZW50EhEK",
  "CWV4aXRfY29kZRgBIAEoERIOCgZleGl0ZWQYAiABKAgSDgoGc3RhdHVzGAMgASgJEhIKBWVycm9yGAQgASgJSACIAQFCCAoGX2Vycm9yGgsKCUtlZXBB",
  "bGl2ZUIHCgVldmVudCI1Cg1TdGFydFJlc3BvbnNlEiQKBWV2ZW50GAEgASgLMhUucHJvY2Vzcy5Qcm9jZXNzRXZlbnQiNwoPQ29ubmVjdFJlc3BvbnNl",
  "EiQKBWV2ZW50GAEgASgLMhUucHJvY2Vzcy5Qcm9jZXNzRXZlbnQiYwoQU2VuZElucHV0UmVxdWVzdBIpCgdwcm9jZXNzGAEgASgLMhgucHJvY2Vzcy5Q",
  "cm9jZXNzU2VsZWN0b3ISJAoFaW5wdXQYAiABKAsyFS5wcm9jZXNzLlByb2Nlc3NJbnB1dCITChFTZW5kSW5wdXRSZXNwb25zZSI3CgxQcm9jZXNzSW5w",
  "dXQSDwoFc3RkaW4YASABKAxIABINCgNwdHkYAiABKAxIAEIHCgVpbnB1dCLCAgoSU3RyZWFtSW5wdXRSZXF1ZXN0EjcKBXN0YXJ0GAEgASgLMiYucHJv",
  "Y2Vzcy5TdHJlYW1JbnB1dFJlcXVlc3QuU3RhcnRFdmVudEgAEjUKBGRhdGEYAiABKAsyJS5wcm9jZXNzLlN0cmVhbUlucHV0UmVxdWVzdC5EYXRhRXZl",
  "bnRIABI6CglrZWVwYWxpdmUYAyABKAsyJS5wcm9jZXNzLlN0cmVhbUlucHV0UmVxdWVzdC5LZWVwQWxpdmVIABo3CgpTdGFydEV2ZW50EikKB3Byb2Nl",
  "c3MYASABKAsyGC5wcm9jZXNzLlByb2Nlc3NTZWxlY3RvchoxCglEYXRhRXZlbnQSJAoFaW5wdXQYAiABKAsyFS5wcm9jZXNzLlByb2Nlc3NJbnB1dBoL",
  "CglLZWVwQWxpdmVCBwoFZXZlbnQiFQoTU3RyZWFtSW5wdXRSZXNwb25zZSJfChFTZW5kU2lnbmFsUmVxdWVzdBIpCgdwcm9jZXNzGAEgASgLMhgucHJv",
  "Y2Vzcy5Qcm9jZXNzU2VsZWN0b3ISHwoGc2lnbmFsGAIgASgOMg8ucHJvY2Vzcy5TaWduYWwiFAoSU2VuZFNpZ25hbFJlc3BvbnNlIj4KEUNsb3NlU3Rk",
  "aW5SZXF1ZXN0EikKB3Byb2Nlc3MYASABKAsyGC5wcm9jZXNzLlByb2Nlc3NTZWxlY3RvciIUChJDbG9zZVN0ZGluUmVzcG9uc2UiOwoOQ29ubmVjdFJl",
  "cXVlc3QSKQoHcHJvY2VzcxgBIAEoCzIYLnByb2Nlc3MuUHJvY2Vzc1NlbGVjdG9yIjsKD1Byb2Nlc3NTZWxlY3RvchINCgNwaWQYASABKA1IABINCgN0",
  "YWcYAiABKAlIAEIKCghzZWxlY3RvcipICgZTaWduYWwSFgoSU0lHTkFMX1VOU1BFQ0lGSUVEEAASEgoOU0lHTkFMX1NJR1RFUk0QDxISCg5TSUdOQUxf",
  "U0lHS0lMTBAJMpEECgdQcm9jZXNzEjMKBExpc3QSFC5wcm9jZXNzLkxpc3RSZXF1ZXN0GhUucHJvY2Vzcy5MaXN0UmVzcG9uc2USPgoHQ29ubmVjdBIX",
  "LnByb2Nlc3MuQ29ubmVjdFJlcXVlc3QaGC5wcm9jZXNzLkNvbm5lY3RSZXNwb25zZTABEjgKBVN0YXJ0EhUucHJvY2Vzcy5TdGFydFJlcXVlc3QaFi5w",
  "cm9jZXNzLlN0YXJ0UmVzcG9uc2UwARI5CgZVcGRhdGUSFi5wcm9jZXNzLlVwZGF0ZVJlcXVlc3QaFy5wcm9jZXNzLlVwZGF0ZVJlc3BvbnNlEkoKC1N0",
  "cmVhbUlucHV0EhsucHJvY2Vzcy5TdHJlYW1JbnB1dFJlcXVlc3QaHC5wcm9jZXNzLlN0cmVhbUlucHV0UmVzcG9uc2UoARJCCglTZW5kSW5wdXQSGS5w",
  "cm9jZXNzLlNlbmRJbnB1dFJlcXVlc3QaGi5wcm9jZXNzLlNlbmRJbnB1dFJlc3BvbnNlEkUKClNlbmRTaWduYWwSGi5wcm9jZXNzLlNlbmRTaWduYWxS",
  "ZXF1ZXN0GhsucHJvY2Vzcy5TZW5kU2lnbmFsUmVzcG9uc2USRQoKQ2xvc2VTdGRpbhIaLnByb2Nlc3MuQ2xvc2VTdGRpblJlcXVlc3QaGy5wcm9jZXNz",
  "LkNsb3NlU3RkaW5SZXNwb25zZUJXCgtjb20ucHJvY2Vzc0IMUHJvY2Vzc1Byb3RvUAGiAgNQWFiqAgdQcm9jZXNzygIHUHJvY2Vzc+ICE1Byb2Nlc3Nc",
  "R1BCTWV0YWRhdGHqAgdQcm9jZXNzYgZwcm90bzM",
].join("");

type Msg<TypeName extends string, Fields = object> = Message<TypeName> & Fields;
type Oneof<Cases> = Cases | { case: undefined; value?: undefined };
type ProcessSelector = Msg<"process.ProcessSelector", { selector: Oneof<{ case: "pid"; value: number } | { case: "tag"; value: string }> }>;
type ProcessConfig = Msg<"process.ProcessConfig", { cmd: string; args: string[]; envs: { [key: string]: string }; cwd?: string }>;
type Pty = Msg<"process.PTY", { size?: Msg<"process.PTY.Size", { cols: number; rows: number }> }>;
type StartRequest = Msg<"process.StartRequest", { process?: ProcessConfig; pty?: Pty; tag?: string; stdin?: boolean }>;
type ProcessEvent = Msg<
  "process.ProcessEvent",
  {
    event: Oneof<
      | { case: "start"; value: Msg<"process.ProcessEvent.StartEvent", { pid: number }> }
      | { case: "data"; value: Msg<"process.ProcessEvent.DataEvent", { output: Oneof<{ case: "stdout"; value: Uint8Array } | { case: "stderr"; value: Uint8Array } | { case: "pty"; value: Uint8Array }> }> }
      | { case: "end"; value: Msg<"process.ProcessEvent.EndEvent", { exitCode: number; exited: boolean; status: string; error?: string }> }
      | { case: "keepalive"; value: Msg<"process.ProcessEvent.KeepAlive"> }
    >;
  }
>;
type StartResponse = Msg<"process.StartResponse", { event?: ProcessEvent }>;
type ConnectRequest = Msg<"process.ConnectRequest", { process?: ProcessSelector }>;
type ConnectResponse = Msg<"process.ConnectResponse", { event?: ProcessEvent }>;
type ListRequest = Msg<"process.ListRequest">;
type ListResponse = Msg<"process.ListResponse", { processes: Msg<"process.ProcessInfo", { config?: ProcessConfig; pid: number; tag?: string }>[] }>;
type UpdateRequest = Msg<"process.UpdateRequest", { process?: ProcessSelector; pty?: Pty }>;
type UpdateResponse = Msg<"process.UpdateResponse">;
type ProcessInput = Msg<"process.ProcessInput", { input: Oneof<{ case: "stdin"; value: Uint8Array } | { case: "pty"; value: Uint8Array }> }>;
type StreamInputRequest = Msg<
  "process.StreamInputRequest",
  {
    event: Oneof<
      | { case: "start"; value: Msg<"process.StreamInputRequest.StartEvent", { process?: ProcessSelector }> }
      | { case: "data"; value: Msg<"process.StreamInputRequest.DataEvent", { input?: ProcessInput }> }
      | { case: "keepalive"; value: Msg<"process.StreamInputRequest.KeepAlive"> }
    >;
  }
>;
type StreamInputResponse = Msg<"process.StreamInputResponse">;
type SendInputRequest = Msg<"process.SendInputRequest", { process?: ProcessSelector; input?: ProcessInput }>;
type SendInputResponse = Msg<"process.SendInputResponse">;
type SendSignalRequest = Msg<"process.SendSignalRequest", { process?: ProcessSelector; signal: number }>;
type SendSignalResponse = Msg<"process.SendSignalResponse">;
type CloseStdinRequest = Msg<"process.CloseStdinRequest", { process?: ProcessSelector }>;
type CloseStdinResponse = Msg<"process.CloseStdinResponse">;
type Rpc<Kind extends "unary" | "server_streaming" | "client_streaming", I extends Message, O extends Message> = {
  methodKind: Kind;
  input: GenMessage<I>;
  output: GenMessage<O>;
};

/** The service, typed from the message shapes above (they mirror the descriptor field by field). */
const ProcessService = serviceDesc<{
  list: Rpc<"unary", ListRequest, ListResponse>;
  connect: Rpc<"server_streaming", ConnectRequest, ConnectResponse>;
  start: Rpc<"server_streaming", StartRequest, StartResponse>;
  update: Rpc<"unary", UpdateRequest, UpdateResponse>;
  streamInput: Rpc<"client_streaming", StreamInputRequest, StreamInputResponse>;
  sendInput: Rpc<"unary", SendInputRequest, SendInputResponse>;
  sendSignal: Rpc<"unary", SendSignalRequest, SendSignalResponse>;
  closeStdin: Rpc<"unary", CloseStdinRequest, CloseStdinResponse>;
}>(fileDesc(PROCESS_PROTO), 0);

/** One event of a process stream, as Start and Connect send it. */
type ProcessEventInit = MessageInitShape<GenMessage<ProcessEvent>>;
/** The end of a process, as envd reports it (Go's ProcessState: exit status or signal). */
type EndEventInit = { exitCode: number; exited: boolean; status: string; error?: string };

/** The sandbox an envd request was routed to, handed from the HTTP router to the RPC handlers. */
const kSandbox = createContextKey<Sandbox | undefined>(undefined);

/** The process service of the sandbox each call names. */
function createProcessService(): ServiceImpl<typeof ProcessService> {
  return {
    list(_request, ctx) {
      return { processes: [...sandboxOf(ctx).processes.values()].map((p) => p.info()) };
    },
    async *start(request, ctx) {
      const sandbox = sandboxOf(ctx);
      if (request.pty) throw new ConnectError("PTY processes are not implemented by the local E2B stand-in", Code.Unimplemented);
      if (!request.process) throw new ConnectError("process is required", Code.InvalidArgument);
      const user = await userOfRpc(sandbox, ctx);
      const cwd = await existingCwd(sandbox, request.process.cwd ?? "", user);
      const proc = new SandboxProcess(request.process, request.tag);
      // Subscribed before it starts, so the caller sees all of its output.
      const subscription = proc.subscribe();
      try {
        const pid = await sandbox.launch(proc, { user, cwd, stdin: request.stdin ?? true });
        killAtDeadline(proc, ctx.timeoutMs());
        yield { event: { event: { case: "start", value: { pid } } } };
        for await (const event of relay(subscription, keepaliveMs(ctx), ctx.signal)) yield { event };
      } finally {
        proc.unsubscribe(subscription);
      }
    },
    async *connect(request, ctx) {
      const proc = processOf(sandboxOf(ctx), request.process);
      const subscription = proc.subscribe();
      try {
        yield { event: { event: { case: "start", value: { pid: proc.pid } } } };
        for await (const event of relay(subscription, keepaliveMs(ctx), ctx.signal)) yield { event };
      } finally {
        proc.unsubscribe(subscription);
      }
    },
    update() {
      throw new ConnectError("PTY processes are not implemented by the local E2B stand-in", Code.Unimplemented);
    },
    async streamInput(requests, ctx) {
      const sandbox = sandboxOf(ctx);
      let proc: SandboxProcess | undefined;
      for await (const request of requests) {
        switch (request.event.case) {
          case "start":
            proc = processOf(sandbox, request.event.value.process);
            break;
          case "data":
            if (!proc) throw new ConnectError("input before the start event", Code.InvalidArgument);
            await writeInput(proc, request.event.value.input);
            break;
          case "keepalive":
            break;
          default:
            throw new ConnectError("invalid event type", Code.Unimplemented);
        }
      }
      return {};
    },
    async sendInput(request, ctx) {
      await writeInput(processOf(sandboxOf(ctx), request.process), request.input);
      return {};
    },
    async sendSignal(request, ctx) {
      const proc = processOf(sandboxOf(ctx), request.process);
      if (SIGNAL_NAMES[request.signal] === undefined) throw new ConnectError(`invalid signal: ${request.signal}`, Code.InvalidArgument);
      await proc.signal(request.signal);
      return {};
    },
    closeStdin(request, ctx) {
      processOf(sandboxOf(ctx), request.process).closeStdin();
      return {};
    },
  };
}

function sandboxOf(ctx: HandlerContext): Sandbox {
  const sandbox = ctx.values.get(kSandbox);
  if (!sandbox) throw new ConnectError("no sandbox for this call", Code.Internal);
  return sandbox;
}

/** envd's process lookup, with its messages. */
function processOf(sandbox: Sandbox, selector: ProcessSelector | undefined): SandboxProcess {
  const chosen = selector?.selector;
  switch (chosen?.case) {
    case "pid": {
      const proc = sandbox.processes.get(chosen.value);
      if (!proc) throw new ConnectError(`process with pid ${chosen.value} not found`, Code.NotFound);
      return proc;
    }
    case "tag": {
      const proc = [...sandbox.processes.values()].find((p) => p.tag === chosen.value);
      if (!proc) throw new ConnectError(`process with tag ${chosen.value} not found`, Code.NotFound);
      return proc;
    }
    default:
      throw new ConnectError("invalid process selector", Code.Unimplemented);
  }
}

/** The user an RPC runs as: `Authorization: Basic base64(name:)`, else the default user. */
async function userOfRpc(sandbox: Sandbox, ctx: HandlerContext): Promise<SandboxUser> {
  const name = basicAuthUser(ctx.requestHeader.get("authorization")) ?? DEFAULT_USER;
  const user = await sandbox.user(name);
  if (!user) throw new ConnectError(`invalid username: '${name}'`, Code.Unauthenticated);
  return user;
}

function basicAuthUser(header: string | null): string | undefined {
  const encoded = /^Basic\s+(\S+)$/i.exec(header ?? "")?.[1];
  if (encoded === undefined) return undefined;
  const decoded = Buffer.from(encoded, "base64").toString("utf8");
  return decoded.slice(0, decoded.includes(":") ? decoded.indexOf(":") : undefined) || undefined;
}

/** The working directory of a new process, which must exist (envd refuses it otherwise). */
async function existingCwd(sandbox: Sandbox, requested: string, user: SandboxUser): Promise<string> {
  let cwd: string;
  try {
    cwd = resolveSandboxPath(requested, user);
  } catch (err) {
    throw new ConnectError(errorMessage(err), Code.InvalidArgument);
  }
  const found = await resolveLinks(sandbox.container, cwd);
  if (!found) throw new ConnectError(`cwd '${cwd}' does not exist`, Code.InvalidArgument);
  return cwd;
}

/** envd kills a process when its Start call's deadline passes (Connect-Timeout-Ms, 60 s in the SDK). */
function killAtDeadline(proc: SandboxProcess, timeoutMs: number | undefined): void {
  if (!timeoutMs) return;
  const timer = setTimeout(() => void proc.signal(9).catch(() => {}), timeoutMs);
  timer.unref();
  void proc.ended.then(() => clearTimeout(timer));
}

function keepaliveMs(ctx: HandlerContext): number {
  const seconds = Number(ctx.requestHeader.get("keepalive-ping-interval"));
  return (Number.isFinite(seconds) && seconds > 0 ? seconds : DEFAULT_KEEPALIVE_S) * 1000;
}

/** A subscription's events until the process ends, with a keepalive after every quiet interval. */
async function* relay(subscription: Subscription, idleMs: number, signal: AbortSignal): AsyncGenerator<ProcessEventInit> {
  for (;;) {
    const next = await subscription.next(idleMs, signal);
    if (next === undefined) return;
    yield next === "idle" ? { event: { case: "keepalive", value: {} } } : next;
  }
}

async function writeInput(proc: SandboxProcess, input: ProcessInput | undefined): Promise<void> {
  switch (input?.input.case) {
    case "stdin":
      return proc.writeStdin(input.input.value);
    case "pty":
      throw new ConnectError("error writing to tty: tty not assigned to process", Code.Internal);
    default:
      throw new ConnectError("invalid input type", Code.Unimplemented);
  }
}

// ---------------------------------------------------------------------------------------------
// Processes: a Docker exec each
// ---------------------------------------------------------------------------------------------

/**
 * Prints the shell's pid, which `exec` hands to the command, on stderr before anything else can
 * write there: the pid envd reports is the process's pid inside the sandbox, not the host's.
 */
const PID_WRAPPER = `printf 'e2b-standin-pid:%s\\n' "$$" >&2 && exec "$@"`;
const PID_LINE = /^e2b-standin-pid:(\d+)$/;

/** How a process is run: its user, directory and whether its stdin is attached. */
interface LaunchSpec {
  user: SandboxUser;
  cwd: string;
  stdin: boolean;
}

/**
 * One process: its output published to the streams subscribed to it (none: dropped, as envd
 * does), its stdin, its end. It ends when Docker closes the exec's output: at once when the
 * command exits, or 2 s after its exit when a child it left behind still holds the output open
 * (Docker's own limit; envd closes its pipes at the exit).
 */
class SandboxProcess {
  pid = 0;
  readonly ended: Promise<void>;
  #endedResolve!: () => void;
  #subscriptions = new Set<Subscription>();
  #end: EndEventInit | undefined;
  #container: Docker.Container | undefined;
  #stdin: Duplex | undefined;
  #signaled: number | undefined;
  #preamble = Buffer.alloc(0);
  #pidReady = Promise.withResolvers<number>();
  readonly config: Pick<ProcessConfig, "cmd" | "args" | "envs" | "cwd">;
  readonly tag: string | undefined;

  constructor(config: Pick<ProcessConfig, "cmd" | "args" | "envs" | "cwd">, tag: string | undefined) {
    this.config = config;
    this.tag = tag;
    this.ended = new Promise((resolve) => (this.#endedResolve = resolve));
    // A start that fails is reported by launch(); nobody else waits on these.
    this.#pidReady.promise.catch(() => {});
  }

  /** Starts the exec and resolves with the pid once the wrapper printed it. */
  async start(container: Docker.Container, exec: Docker.Exec, stdin: boolean): Promise<number> {
    this.#container = container;
    const stream = (await exec.start({ hijack: true, stdin })) as unknown as Duplex;
    stream.on("error", () => {});
    if (stdin) this.#stdin = stream;
    void this.#pump(exec, stream);
    return this.#pidReady.promise;
  }

  info() {
    return { config: { cmd: this.config.cmd, args: this.config.args, envs: this.config.envs, cwd: this.config.cwd }, pid: this.pid, tag: this.tag };
  }

  subscribe(): Subscription {
    const subscription = new Subscription();
    if (this.#end) {
      subscription.push(endEvent(this.#end));
      subscription.close();
    } else {
      this.#subscriptions.add(subscription);
    }
    return subscription;
  }

  unsubscribe(subscription: Subscription): void {
    this.#subscriptions.delete(subscription);
    subscription.close();
  }

  /** Ends every attached stream with `error`; the process goes on (a pause, a kill). */
  detachAll(error: ConnectError): void {
    for (const s of this.#subscriptions) s.close(error);
    this.#subscriptions.clear();
  }

  /** Writes to stdin, waiting while the pipe is full, as envd's blocking write does. */
  async writeStdin(data: Uint8Array): Promise<void> {
    const stdin = this.#stdin;
    if (!stdin || stdin.writableEnded || stdin.destroyed) throw new ConnectError("error writing to stdin: stdin not enabled or closed", Code.Internal);
    if (!stdin.write(data)) await drained(stdin);
  }

  /** EOF on stdin: half-closes the exec's connection, which Docker turns into closing the pipe. */
  closeStdin(): void {
    this.#stdin?.end();
    this.#stdin = undefined;
  }

  /** Signals the process from inside the sandbox (as root), and remembers it for the end event. */
  async signal(signal: number): Promise<void> {
    const container = this.#container;
    if (!container || this.#end) return;
    this.#signaled = signal;
    const kill = await runInContainer(container, ["/bin/sh", "-c", 'kill -"$0" "$1"', String(signal), String(this.pid)]);
    if (kill.exitCode !== 0 && !this.#end) throw new ConnectError(`error sending signal: ${kill.stderr.trim()}`, Code.Internal);
  }

  async #pump(exec: Docker.Exec, stream: Duplex): Promise<void> {
    const reader = new ByteReader(stream);
    try {
      for (;;) {
        const head = await reader.read(8);
        if (!head) break;
        const kind = head[0] === 2 ? "stderr" : "stdout";
        for await (const piece of reader.take(head.readUInt32BE(4))) await this.#output(kind, piece);
      }
    } catch {
      // The stream was cut: the sandbox went away.
    }
    await this.#finish(exec);
  }

  async #output(kind: "stdout" | "stderr", piece: Buffer): Promise<void> {
    if (this.pid === 0 && kind === "stderr") {
      this.#preamble = Buffer.concat([this.#preamble, piece]);
      const newline = this.#preamble.indexOf(10);
      if (newline < 0) return;
      const pid = Number(PID_LINE.exec(this.#preamble.subarray(0, newline).toString("utf8"))?.[1] ?? 0);
      if (pid === 0) throw new Error("the process wrapper printed no pid");
      this.pid = pid;
      this.#pidReady.resolve(pid);
      piece = this.#preamble.subarray(newline + 1);
    }
    for (let at = 0; at < piece.length; at += OUTPUT_CHUNK) {
      await this.#publish({ event: { case: "data", value: { output: { case: kind, value: piece.subarray(at, at + OUTPUT_CHUNK) } } } });
    }
  }

  /**
   * Hands an event to every stream, and holds the output back while one of them is behind; not
   * before the pid is known: Docker may deliver stdout ahead of the stderr line carrying the pid,
   * and the Start stream reads nothing until it has the pid.
   */
  async #publish(event: ProcessEventInit): Promise<void> {
    for (const s of this.#subscriptions) s.push(event);
    if (this.pid !== 0) await Promise.all([...this.#subscriptions].map((s) => s.roomy()));
  }

  async #finish(exec: Docker.Exec): Promise<void> {
    this.#stdin = undefined;
    if (this.pid === 0) {
      const said = this.#preamble.toString("utf8").trim();
      this.#pidReady.reject(new ConnectError(`error starting process '${[this.config.cmd, ...this.config.args].join(" ")}'${said ? `: ${said}` : ""}`, Code.InvalidArgument));
    }
    const end = endFor(await this.#exitCode(exec), this.#signaled);
    this.#end = end;
    for (const s of this.#subscriptions) {
      s.push(endEvent(end));
      s.close();
    }
    this.#subscriptions.clear();
    this.#endedResolve();
  }

  /** The exit code once Docker says the exec is over (its output can close first); -1 when the sandbox is gone. */
  async #exitCode(exec: Docker.Exec): Promise<number> {
    for (let wait = 5; ; wait = Math.min(wait * 2, 500)) {
      const info = await exec.inspect().catch(() => undefined);
      if (!info) return -1;
      if (!info.Running) return info.ExitCode ?? -1;
      await delay(wait);
    }
  }
}

/** What envd reports for an exit code: Go's ProcessState, "signal: killed" for a signal we sent. */
function endFor(code: number, signaled: number | undefined): EndEventInit {
  if (signaled !== undefined && code === 128 + signaled) {
    const status = `signal: ${SIGNAL_NAMES[signaled]}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const status = `exit status ${code}`;
  return code === 0 ? { exitCode: 0, exited: true, status } : { exitCode: code, exited: true, status, error: status };
}

function endEvent(end: EndEventInit): ProcessEventInit {
  return { event: { case: "end", value: end } };
}

/** One stream's queue of a process's events, in order, with the backpressure envd's channels give. */
class Subscription {
  #items: ProcessEventInit[] = [];
  #closed = false;
  #error: unknown;
  #wake: (() => void) | undefined;
  #room: (() => void) | undefined;

  push(event: ProcessEventInit): void {
    this.#items.push(event);
    this.#notify();
  }

  /** No more events; the reader gets those queued, then `error` if one is given. */
  close(error?: unknown): void {
    this.#closed = true;
    this.#error ??= error;
    this.#notify();
    this.#makeRoom();
  }

  /** Resolves once the reader is below the high-water mark (or gone). */
  roomy(): Promise<void> {
    if (this.#closed || this.#items.length < HIGH_WATER) return Promise.resolve();
    return new Promise((resolve) => (this.#room = resolve));
  }

  /** The next event; "idle" after `idleMs` without one; undefined when closed cleanly. */
  async next(idleMs: number, signal: AbortSignal): Promise<ProcessEventInit | "idle" | undefined> {
    for (;;) {
      const event = this.#items.shift();
      if (event) {
        if (this.#items.length < HIGH_WATER) this.#makeRoom();
        return event;
      }
      if (this.#closed) {
        if (this.#error !== undefined) throw this.#error;
        return undefined;
      }
      if (!(await wakeOrTimeout(idleMs, signal, (wake) => (this.#wake = wake)))) return "idle";
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  #makeRoom(): void {
    const room = this.#room;
    this.#room = undefined;
    room?.();
  }
}

/** True when woken, false after `ms`; rejects when `signal` aborts. */
function wakeOrTimeout(ms: number, signal: AbortSignal, register: (wake: () => void) => void): Promise<boolean> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const settle = (woke: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      resolve(woke);
    };
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => settle(false), ms);
    signal.addEventListener("abort", onAbort, { once: true });
    register(() => settle(true));
  });
}

// ---------------------------------------------------------------------------------------------
// Sandboxes
// ---------------------------------------------------------------------------------------------

/** A user of the sandbox, from its passwd database. */
interface SandboxUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/**
 * Makes the sandbox's users look like E2B's: a user "user" with uid 1000 and home /home/user.
 * An image whose uid 1000 has another name (agent-workspace-base's "agent") gets it renamed,
 * home and group with it; an image without uid 1000 gets the user added. Prints the passwd database.
 */
const USER_SETUP = `set -e
if ! getent passwd user >/dev/null; then
  taken=$(getent passwd 1000 | cut -d: -f1)
  if [ -n "$taken" ]; then
    old_home=$(getent passwd 1000 | cut -d: -f6)
    if [ -d "$old_home" ] && [ ! -e /home/user ]; then usermod -l user -d /home/user -m "$taken"; else usermod -l user -d /home/user "$taken"; fi
    group=$(getent group 1000 | cut -d: -f1)
    if [ -n "$group" ] && [ "$group" != user ] && ! getent group user >/dev/null; then groupmod -n user "$group"; fi
  else
    getent group 1000 >/dev/null || groupadd -g 1000 user
    useradd -m -u 1000 -g 1000 -s /bin/bash user
  fi
fi
home=$(getent passwd user | cut -d: -f6)
mkdir -p "$home"
chown "$(id -u user):$(id -g user)" "$home"
getent passwd`;

/** What a sandbox was created with. */
interface SandboxSpec {
  id: string;
  container: Docker.Container;
  templateId: string;
  metadata: Record<string, string>;
  envs: Record<string, string>;
  allowInternetAccess: boolean | null;
  envdVersion: string;
}

/** One sandbox: its container, lifecycle state, timeout, users and processes. */
class Sandbox {
  readonly id: string;
  readonly container: Docker.Container;
  readonly processes = new Map<number, SandboxProcess>();
  readonly accessToken = randomBytes(24).toString("hex");
  readonly startedAt = new Date();
  state: "running" | "paused" = "running";
  endAt = 0;
  timer: NodeJS.Timeout | undefined;
  #users = new Map<string, SandboxUser>();
  readonly spec: SandboxSpec;

  constructor(spec: SandboxSpec) {
    this.spec = spec;
    this.id = spec.id;
    this.container = spec.container;
  }

  /** Prepares the E2B user layout; a container that cannot be prepared is not a sandbox. */
  async prepare(): Promise<void> {
    const setup = await runInContainer(this.container, ["/bin/sh", "-c", USER_SETUP]);
    if (setup.exitCode !== 0) throw new Error(`could not prepare the sandbox's user "user": ${setup.stderr.trim()}`);
    this.#users = parsePasswd(setup.stdout);
  }

  /** A user by name, reading passwd again on a miss (a command may have added it). */
  async user(name: string): Promise<SandboxUser | undefined> {
    if (!this.#users.has(name)) {
      const passwd = await runInContainer(this.container, ["getent", "passwd"]).catch(() => undefined);
      if (passwd?.exitCode === 0) this.#users = parsePasswd(passwd.stdout);
    }
    return this.#users.get(name);
  }

  /** Runs `proc` as a Docker exec; resolves with its pid, or rejects (InvalidArgument) if it cannot start. */
  async launch(proc: SandboxProcess, spec: LaunchSpec): Promise<number> {
    const exec = await this.container.exec({
      Cmd: ["/bin/sh", "-c", PID_WRAPPER, "--", proc.config.cmd, ...proc.config.args],
      User: spec.user.name,
      WorkingDir: spec.cwd,
      Env: processEnv(spec.user, this.spec.envs, proc.config.envs),
      AttachStdin: spec.stdin,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    const pid = await proc.start(this.container, exec, spec.stdin);
    this.processes.set(pid, proc);
    void proc.ended.then(() => this.processes.delete(pid));
    return pid;
  }

  /** Ends every stream attached to a process of this sandbox. */
  detachAll(reason: string): void {
    for (const proc of this.processes.values()) proc.detachAll(new ConnectError(reason, Code.Unavailable));
  }

  /** The `Sandbox` schema: what create and connect answer. */
  toApi() {
    return {
      sandboxID: this.id,
      templateID: this.spec.templateId,
      clientID: CLIENT_ID,
      envdVersion: this.spec.envdVersion,
      envdAccessToken: this.accessToken,
      domain: null,
      trafficAccessToken: null,
    };
  }

  /** The `ListedSandbox` schema. */
  toListed() {
    return {
      sandboxID: this.id,
      templateID: this.spec.templateId,
      clientID: CLIENT_ID,
      cpuCount: os.availableParallelism(),
      memoryMB: Math.floor(os.totalmem() / 2 ** 20),
      // The container's disk is the engine's; no size is reserved for it.
      diskSizeMB: 0,
      startedAt: this.startedAt.toISOString(),
      endAt: new Date(this.endAt).toISOString(),
      envdVersion: this.spec.envdVersion,
      metadata: this.spec.metadata,
      state: this.state,
      volumeMounts: [],
    };
  }

  /** The `SandboxDetail` schema: what getInfo answers. */
  toDetail() {
    return {
      ...this.toListed(),
      envdAccessToken: this.accessToken,
      domain: null,
      allowInternetAccess: this.spec.allowInternetAccess,
      lifecycle: { onTimeout: "kill", autoResume: false },
    };
  }
}

function parsePasswd(text: string): Map<string, SandboxUser> {
  const users = new Map<string, SandboxUser>();
  for (const line of text.split("\n")) {
    const [name, , uid, gid, , home] = line.split(":");
    if (name && home !== undefined) users.set(name, { name, uid: Number(uid), gid: Number(gid), home });
  }
  return users;
}

/** envd's process environment: HOME, USER, LOGNAME, then the sandbox's envs, then the call's (later wins). */
function processEnv(user: SandboxUser, sandboxEnvs: Record<string, string>, envs: Record<string, string>): string[] {
  const env = new Map([
    ["HOME", user.home],
    ["USER", user.name],
    ["LOGNAME", user.name],
  ]);
  for (const [key, value] of [...Object.entries(sandboxEnvs), ...Object.entries(envs)]) env.set(key, value);
  return [...env].map(([key, value]) => `${key}=${value}`);
}

/** envd's path resolution: `~` is the user's home, a relative path is under it. */
function resolveSandboxPath(requested: string, user: SandboxUser): string {
  let p = requested;
  if (p.startsWith("~")) {
    if (p.length > 1 && p[1] !== "/") throw new Error(`failed to expand path '${p}' for user '${user.name}': cannot expand user-specific home dir`);
    p = path.posix.join(user.home, p.slice(1));
  }
  return path.posix.resolve(user.home, p);
}

// ---------------------------------------------------------------------------------------------
// The stand-in: routing, control plane, envd HTTP
// ---------------------------------------------------------------------------------------------

/** An HTTP refusal with E2B's `{code, message}` body. */
class HttpError extends Error {
  readonly status: number;

  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

interface StandInDeps {
  docker: Docker;
  instance: string;
  apiKey: string;
  images: Map<string, string>;
  envdVersion: string;
}

type ApiHandler = (req: IncomingMessage, res: ServerResponse, url: URL, id: string) => Promise<void>;

class StandIn {
  readonly sandboxes = new Map<string, Sandbox>();
  readonly apiKey: string;
  #failures = 0;
  #closed = false;
  readonly #deps: StandInDeps;
  readonly #requestSandbox = new WeakMap<object, Sandbox>();
  readonly #rpc;
  /** The control plane's routes: method, path, handler (the path's group is the sandbox id). */
  readonly #routes: [string, RegExp, ApiHandler][] = [
    ["POST", /^\/v2\/sandboxes$/, (req, res) => this.#create(req, res)],
    ["GET", /^\/v2\/sandboxes$/, (_req, res, url) => this.#list(res, url)],
    ["GET", /^\/sandboxes\/([^/]+)$/, (_req, res, _url, id) => this.#info(res, id)],
    ["DELETE", /^\/sandboxes\/([^/]+)$/, (_req, res, _url, id) => this.#kill(res, id)],
    ["POST", /^\/sandboxes\/([^/]+)\/timeout$/, (req, res, _url, id) => this.#setTimeout(req, res, id)],
    ["POST", /^\/sandboxes\/([^/]+)\/pause$/, (_req, res, _url, id) => this.#pause(res, id)],
    ["POST", /^\/v2\/sandboxes\/([^/]+)\/connect$/, (req, res, _url, id) => this.#connect(req, res, id)],
  ];

  constructor(deps: StandInDeps) {
    this.#deps = deps;
    this.apiKey = deps.apiKey;
    this.#rpc = connectNodeAdapter({
      routes: (router) => router.service(ProcessService, createProcessService()),
      contextValues: (req) => createContextValues().set(kSandbox, this.#requestSandbox.get(req)),
    });
  }

  failNext(n: number): void {
    this.#failures = n;
  }

  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    this.#route(req, res).catch((err: unknown) => {
      if (res.headersSent) res.destroy();
      else if (err instanceof HttpError) sendError(res, err.status, err.message);
      else sendError(res, 500, `the local E2B stand-in failed: ${errorMessage(err)}`);
    });
  };

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.sandboxes.values()].map((s) => this.#remove(s)));
    // Also whatever a create still in flight made.
    const { docker, instance } = this.#deps;
    const left = await docker.listContainers({ all: true, filters: { label: [`${LABEL}=${instance}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => {})));
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://stand-in");
    const sandboxId = headerOf(req, "e2b-sandbox-id");
    if (sandboxId !== undefined) return this.#envd(sandboxId, req, res, url);
    if (headerOf(req, "x-api-key") !== this.apiKey) throw new HttpError(401, "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.");
    if (this.#failures > 0) {
      this.#failures--;
      throw new HttpError(503, "the local E2B stand-in was told to refuse this call (failNext)");
    }
    for (const [method, pattern, handler] of this.#routes) {
      const match = req.method === method ? pattern.exec(url.pathname) : null;
      if (match) return handler(req, res, url, match[1] ?? "");
    }
    throw new HttpError(404, `${req.method} ${url.pathname} is not implemented by the local E2B stand-in`);
  }

  // --- control plane ---

  async #create(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJson(req);
    const templateId = typeof body.templateID === "string" ? body.templateID : "";
    const image = this.#deps.images.get(templateId);
    if (!image) throw new HttpError(404, `template '${templateId}' not found`);
    const sandbox = await this.#startSandbox({
      templateId,
      image,
      metadata: stringRecord(body.metadata, "metadata"),
      envs: stringRecord(body.envVars, "envVars"),
      allowInternetAccess: typeof body.allow_internet_access === "boolean" ? body.allow_internet_access : null,
    });
    this.#expireIn(sandbox, timeoutSeconds(body.timeout));
    sendJson(res, 201, sandbox.toApi());
  }

  async #startSandbox(spec: { templateId: string; image: string; metadata: Record<string, string>; envs: Record<string, string>; allowInternetAccess: boolean | null }): Promise<Sandbox> {
    const id = newSandboxId();
    const container = await this.#deps.docker.createContainer({
      name: `e2b-standin-${id}`,
      Image: spec.image,
      // Something that lives until the container is removed, whatever the image would run.
      Entrypoint: ["sleep"],
      Cmd: ["infinity"],
      Env: Object.entries(spec.envs).map(([key, value]) => `${key}=${value}`),
      Labels: { [LABEL]: this.#deps.instance, [LABEL_SANDBOX]: id, [LABEL_TEMPLATE]: spec.templateId, [LABEL_METADATA]: JSON.stringify(spec.metadata) },
      HostConfig: {
        Init: true,
        NetworkMode: spec.allowInternetAccess === false ? "none" : "bridge",
        LogConfig: { Type: "none", Config: {} },
      },
    });
    const sandbox = new Sandbox({ ...spec, id, container, envdVersion: this.#deps.envdVersion });
    try {
      await container.start();
      await sandbox.prepare();
      if (this.#closed) throw new Error("the stand-in was closed");
    } catch (err) {
      await container.remove({ force: true }).catch(() => {});
      throw err;
    }
    this.sandboxes.set(id, sandbox);
    return sandbox;
  }

  async #list(res: ServerResponse, url: URL): Promise<void> {
    const query = url.searchParams;
    const states = (query.get("state") ?? "running,paused").split(",");
    const metadata = metadataFilter(query.get("metadata"));
    const template = query.get("template");
    const startedAfter = query.get("startedAfter") ? Date.parse(query.get("startedAfter") ?? "") : undefined;
    const direction = query.get("order") === "asc" ? 1 : -1;
    const matching = [...this.sandboxes.values()]
      .filter((s) => states.includes(s.state))
      .filter((s) => Object.entries(metadata).every(([key, value]) => s.spec.metadata[key] === value))
      .filter((s) => !template || s.spec.templateId === template)
      .filter((s) => startedAfter === undefined || s.startedAt.getTime() >= startedAfter)
      .sort((a, b) => direction * (a.startedAt.getTime() - b.startedAt.getTime() || a.id.localeCompare(b.id)));
    const limit = Math.min(Math.max(Number(query.get("limit") ?? 100) || 100, 1), 100);
    const offset = query.get("nextToken") ? Number(Buffer.from(query.get("nextToken") ?? "", "base64url").toString()) || 0 : 0;
    const page = matching.slice(offset, offset + limit);
    const headers: Record<string, string> = { "X-Total-Running": String(matching.filter((s) => s.state === "running").length) };
    if (offset + limit < matching.length) headers["X-Next-Token"] = Buffer.from(String(offset + limit)).toString("base64url");
    sendJson(res, 200, page.map((s) => s.toListed()), headers);
  }

  async #info(res: ServerResponse, id: string): Promise<void> {
    sendJson(res, 200, this.#sandbox(id).toDetail());
  }

  async #kill(res: ServerResponse, id: string): Promise<void> {
    await this.#remove(this.#sandbox(id));
    res.writeHead(204).end();
  }

  async #setTimeout(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const body = await readJson(req);
    const sandbox = this.#sandbox(id);
    if (sandbox.state !== "running") throw new HttpError(409, `Sandbox "${id}" is in ${sandbox.state} state`);
    // Overwrites the end, shorter or longer, from now.
    this.#expireIn(sandbox, Math.max(0, Number(body.timeout) || 0));
    res.writeHead(204).end();
  }

  async #pause(res: ServerResponse, id: string): Promise<void> {
    const sandbox = this.#sandbox(id);
    if (sandbox.state === "paused") throw new HttpError(409, `Error pausing sandbox - sandbox '${id}' is already paused`);
    sandbox.state = "paused";
    clearTimeout(sandbox.timer);
    // E2B's proxy drops connections into a paused sandbox; its processes live on in the snapshot.
    sandbox.detachAll("the sandbox was paused");
    try {
      // runc gives up freezing a cgroup whose processes do not freeze within its short wait (a
      // busy host): E2B's snapshot would not fail on that, so the stand-in's freeze tries again.
      for (let attempt = 1; ; attempt++) {
        try {
          await sandbox.container.pause();
          break;
        } catch (err) {
          if (attempt >= 5 || !/unable to freeze/i.test(String((err as Error).message))) throw err;
          await new Promise((r) => setTimeout(r, 200 * attempt));
        }
      }
    } catch (err) {
      sandbox.state = "running";
      this.#expireIn(sandbox, Math.max(0, (sandbox.endAt - Date.now()) / 1000));
      throw err;
    }
    res.writeHead(204).end();
  }

  async #connect(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const body = await readJson(req);
    const sandbox = this.#sandbox(id);
    const seconds = timeoutSeconds(body.timeout);
    if (sandbox.state === "running") {
      // Connecting only ever extends a running sandbox's life.
      if (Date.now() + seconds * 1000 > sandbox.endAt) this.#expireIn(sandbox, seconds);
      return sendJson(res, 200, sandbox.toApi());
    }
    await sandbox.container.unpause();
    sandbox.state = "running";
    this.#expireIn(sandbox, seconds);
    sendJson(res, 201, sandbox.toApi());
  }

  #sandbox(id: string): Sandbox {
    const sandbox = this.sandboxes.get(id);
    if (!sandbox) throw new HttpError(404, `Sandbox "${id}" doesn't exist or you don't have access to it`);
    return sandbox;
  }

  /** Sets the sandbox's end `seconds` from now; at the end it is killed. */
  #expireIn(sandbox: Sandbox, seconds: number): void {
    sandbox.endAt = Date.now() + seconds * 1000;
    clearTimeout(sandbox.timer);
    sandbox.timer = setTimeout(() => void this.#remove(sandbox).catch(() => {}), seconds * 1000);
    sandbox.timer.unref();
  }

  /** Kills a sandbox: forgotten at once, its container removed (paused or not). */
  async #remove(sandbox: Sandbox): Promise<void> {
    if (this.sandboxes.get(sandbox.id) !== sandbox) return;
    this.sandboxes.delete(sandbox.id);
    clearTimeout(sandbox.timer);
    sandbox.detachAll("the sandbox was killed");
    await sandbox.container.remove({ force: true }).catch((err: unknown) => {
      if (statusOf(err) !== 404) throw err;
    });
  }

  // --- envd ---

  async #envd(sandboxId: string, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const sandbox = this.sandboxes.get(sandboxId);
    if (!sandbox || sandbox.state !== "running") {
      req.resume();
      return sendJson(res, 502, { sandboxId, message: "The sandbox was not found", code: 502 });
    }
    const port = headerOf(req, "e2b-sandbox-port");
    if (port !== undefined && port !== String(ENVD_PORT)) {
      req.resume();
      return sendJson(res, 502, { sandboxId, message: `port ${port} is not served by the local E2B stand-in`, port: Number(port), code: 502 });
    }
    const route = `${req.method} ${url.pathname}`;
    if (route !== "GET /health" && headerOf(req, "x-access-token") !== sandbox.accessToken) {
      req.resume();
      const files = url.pathname === "/files" && headerOf(req, "x-access-token") === undefined;
      throw new HttpError(401, files ? "missing signature query parameter" : "unauthorized access, please provide a valid access token or method signing if supported");
    }
    if (route === "GET /health") return void res.writeHead(204).end();
    if (route === "GET /files") return this.#download(sandbox, req, res, url);
    if (route === "POST /files") return this.#upload(sandbox, req, res, url);
    if (url.pathname.startsWith("/process.Process/")) {
      this.#requestSandbox.set(req, sandbox);
      return this.#rpc(req, res);
    }
    req.resume();
    if (url.pathname.startsWith("/filesystem.Filesystem/")) {
      return sendJson(res, 501, { code: "unimplemented", message: `${url.pathname.slice(1)} is not implemented by the local E2B stand-in` });
    }
    throw new HttpError(404, `${route} is not implemented by the local E2B stand-in`);
  }

  /** GET /files: the file's bytes, streamed out of the container's archive (gzip on request). */
  async #download(sandbox: Sandbox, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const user = await this.#fileUser(sandbox, url);
    const target = resolveOrRefuse(url.searchParams.get("path") ?? "", user);
    const found = await resolveLinks(sandbox.container, target);
    if (!found) throw new HttpError(404, `path '${target}' does not exist`);
    if (found.stat.isDir) throw new HttpError(400, `path '${target}' is a directory`);
    const archive = (await sandbox.container.getArchive({ path: found.path })) as unknown as IncomingMessage;
    // fetch asks for gzip unless told otherwise, and envd then sends it gzipped.
    const gzip = acceptsGzip(headerOf(req, "accept-encoding"));
    res.writeHead(200, {
      "Content-Type": "application/octet-stream",
      Vary: "Accept-Encoding",
      ...(gzip ? { "Content-Encoding": "gzip" } : { "Content-Length": String(found.stat.size) }),
    });
    const bytes = Readable.from(fileBytesOfTar(archive));
    try {
      // Gzip as envd sends it, but level 0 (stored blocks): the encoding is envd's contract, the
      // ratio is not, and compressing costs this machine 4 s per 100 MB.
      if (gzip) await pipeline(bytes, zlib.createGzip({ level: 0 }), res);
      else await pipeline(bytes, res);
    } catch {
      res.destroy();
    } finally {
      archive.destroy();
    }
  }

  /** POST /files: each uploaded file spooled to the host, then put into the container as the user. */
  async #upload(sandbox: Sandbox, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const user = await this.#fileUser(sandbox, url);
    const requested = url.searchParams.get("path");
    const body: AsyncIterable<Buffer> = /\bgzip\b/i.test(headerOf(req, "content-encoding") ?? "") ? req.pipe(zlib.createGunzip()) : req;
    const contentType = headerOf(req, "content-type") ?? "";
    const media = contentType.split(";")[0].trim().toLowerCase();
    const spool = await mkdtemp(path.join(os.tmpdir(), "e2b-standin-upload-"));
    try {
      let written: EntryInfo[];
      if (media === "application/octet-stream") {
        if (requested === null) throw new HttpError(400, "path query parameter is required for raw body upload");
        const target = resolveOrRefuse(requested, user);
        const file = path.join(spool, "body");
        const size = await spoolTo(file, body);
        await putFile(sandbox.container, target, { file, size }, user);
        written = [entryInfo(target)];
      } else if (media.startsWith("multipart/")) {
        written = await this.#uploadParts(sandbox, body, multipartBoundary(contentType), requested, user, spool);
      } else {
        throw new HttpError(400, `unsupported content type: ${contentType}, expected multipart/form-data or application/octet-stream`);
      }
      sendJson(res, 200, written);
    } catch (err) {
      req.resume();
      throw err;
    } finally {
      await rm(spool, { recursive: true, force: true });
    }
  }

  async #uploadParts(sandbox: Sandbox, body: AsyncIterable<Buffer>, boundary: string, requested: string | null, user: SandboxUser, spool: string): Promise<EntryInfo[]> {
    const written: EntryInfo[] = [];
    await readMultipart(body, boundary, async (headers) => {
      const disposition = headers.get("content-disposition") ?? "";
      if (dispositionParam(disposition, "name") !== "file") return DISCARD;
      const name = requested ?? dispositionParam(disposition, "filename");
      if (name === undefined) throw new HttpError(400, "error getting multipart custom part file name: no filename");
      const target = resolveOrRefuse(name, user);
      if (written.some((w) => w.path === target)) {
        throw new HttpError(400, `you cannot upload multiple files to the same path '${target}' in one upload request, only the first specified file was uploaded`);
      }
      const file = path.join(spool, String(written.length));
      return spoolSink(file, async (size) => {
        await putFile(sandbox.container, target, { file, size }, user);
        await rm(file, { force: true });
        written.push(entryInfo(target));
      });
    });
    return written;
  }

  /** The `username` of a /files call, or the default user; an unknown one is refused as envd does. */
  async #fileUser(sandbox: Sandbox, url: URL): Promise<SandboxUser> {
    const name = url.searchParams.get("username") || DEFAULT_USER;
    const user = await sandbox.user(name);
    if (!user) throw new HttpError(401, `error looking up user '${name}': user: unknown user ${name}`);
    return user;
  }
}

/** envd's answer for a written file. */
interface EntryInfo {
  path: string;
  name: string;
  type: "file";
}

function entryInfo(target: string): EntryInfo {
  return { path: target, name: path.posix.basename(target), type: "file" };
}

/** Whether an Accept-Encoding header takes gzip (by name or `*`, with a non-zero quality). */
function acceptsGzip(header: string | undefined): boolean {
  return (header ?? "").split(",").some((item) => {
    const [coding, ...params] = item.split(";").map((part) => part.trim().toLowerCase());
    const q = params.find((p) => p.startsWith("q="));
    return (coding === "gzip" || coding === "*") && (q === undefined || Number(q.slice(2)) > 0);
  });
}

function resolveOrRefuse(requested: string, user: SandboxUser): string {
  try {
    return resolveSandboxPath(requested, user);
  } catch (err) {
    throw new HttpError(400, `error resolving path: ${errorMessage(err)}`);
  }
}

function newSandboxId(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from(randomBytes(20), (b) => alphabet[b % alphabet.length]).join("");
}

function timeoutSeconds(value: unknown): number {
  if (value === undefined || value === null) return DEFAULT_TIMEOUT_S;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) throw new HttpError(400, `invalid timeout: ${JSON.stringify(value)}`);
  return value;
}

function stringRecord(value: unknown, what: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value) || Object.values(value).some((v) => typeof v !== "string")) {
    throw new HttpError(400, `${what} must be an object of strings`);
  }
  return { ...(value as Record<string, string>) };
}

/**
 * The list's metadata filter. The SDK encodes each key and value, joins them as a query string
 * and sends that as one parameter, so it is decoded twice, as E2B's API does.
 */
function metadataFilter(raw: string | null): Record<string, string> {
  const filter: Record<string, string> = {};
  try {
    for (const [key, value] of new URLSearchParams(raw ?? "")) filter[decodeURIComponent(key)] = decodeURIComponent(value);
  } catch {
    throw new HttpError(400, "Error parsing metadata");
  }
  return filter;
}

// ---------------------------------------------------------------------------------------------
// HTTP plumbing
// ---------------------------------------------------------------------------------------------

function headerOf(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(text)), ...headers }).end(text);
}

/** E2B's error body for the API and envd alike. */
function sendError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { code: status, message });
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 1024 * 1024) throw new HttpError(413, "request body too large");
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8").trim();
  if (!text) return {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
  } catch {
    // Refused below.
  }
  throw new HttpError(400, "Error when parsing request: the body is not a JSON object");
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function statusOf(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when `stream` can take more; rejects if it closes first. */
function drained(stream: Duplex): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error) => {
      stream.off("drain", onDrain);
      stream.off("close", onClose);
      if (err) reject(new ConnectError(`error writing to stdin: ${err.message}`, Code.Internal));
      else resolve();
    };
    const onDrain = () => done();
    const onClose = () => done(new Error("stdin closed"));
    stream.on("drain", onDrain);
    stream.on("close", onClose);
  });
}

// ---------------------------------------------------------------------------------------------
// Docker: internal commands, paths, archives
// ---------------------------------------------------------------------------------------------

/** Runs a command in the container (as root unless told) and collects its output. */
async function runInContainer(container: Docker.Container, argv: string[], user = "root"): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const exec = await container.exec({ Cmd: argv, User: user, AttachStdin: false, AttachStdout: true, AttachStderr: true, Tty: false });
  const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as Duplex;
  const output: [Buffer[], Buffer[]] = [[], []];
  const reader = new ByteReader(stream);
  for (let head = await reader.read(8); head; head = await reader.read(8)) {
    for await (const piece of reader.take(head.readUInt32BE(4))) output[head[0] === 2 ? 1 : 0].push(piece);
  }
  let info = await exec.inspect();
  for (let wait = 5; info.Running; wait = Math.min(wait * 2, 200)) {
    await delay(wait);
    info = await exec.inspect();
  }
  return { exitCode: info.ExitCode ?? -1, stdout: Buffer.concat(output[0]).toString("utf8"), stderr: Buffer.concat(output[1]).toString("utf8") };
}

/** A path in the container as Docker's archive API sees it (no symlink followed). */
interface PathStat {
  size: number;
  mode: number;
  isDir: boolean;
  linkTarget: string;
}

async function statPath(container: Docker.Container, p: string): Promise<PathStat | undefined> {
  let res: IncomingMessage;
  try {
    res = (await container.infoArchive({ path: p })) as unknown as IncomingMessage;
  } catch (err) {
    // HEAD has no body, so Docker's 500 for a path through a file ("not a directory") cannot be
    // told from other failures: a path it cannot stat counts as absent, and whatever is really
    // wrong shows when the file is read or written.
    if (statusOf(err) === 404 || statusOf(err) === 500) return undefined;
    throw err;
  }
  res.resume();
  const raw = res.headers["x-docker-container-path-stat"];
  const stat = JSON.parse(Buffer.from(String(raw), "base64").toString("utf8")) as { size: number; mode: number; linkTarget?: string };
  return { size: stat.size, mode: stat.mode, isDir: (stat.mode & GO_MODE_DIR) !== 0, linkTarget: stat.linkTarget ?? "" };
}

/** The path symlinks lead to, with its stat (envd follows links as os.Stat does); undefined when nothing is there. */
async function resolveLinks(container: Docker.Container, p: string): Promise<{ path: string; stat: PathStat } | undefined> {
  let current = p;
  for (let hops = 0; hops < 40; hops++) {
    const stat = await statPath(container, current);
    if (!stat) return undefined;
    if (!stat.linkTarget) return { path: current, stat };
    current = path.posix.resolve(path.posix.dirname(current), stat.linkTarget);
  }
  throw new HttpError(400, `too many levels of symbolic links: ${p}`);
}

/**
 * Writes a spooled file to `target` in the container as envd does: missing parents created
 * (0755) and everything it creates owned by `owner`; an existing file is replaced keeping its mode,
 * owned by `owner` too; a directory there is refused. One tar through Docker's putArchive, rooted
 * at the deepest existing parent, so no existing directory is touched.
 */
async function putFile(container: Docker.Container, target: string, source: { file: string; size: number }, owner: SandboxUser): Promise<void> {
  const existing = await resolveLinks(container, target);
  if (existing?.stat.isDir) throw new HttpError(400, `path is a directory: ${target}`);
  const destination = existing?.path ?? target;
  const missing: string[] = [];
  let root = path.posix.dirname(destination);
  for (;;) {
    const found = await resolveLinks(container, root);
    if (found) {
      if (!found.stat.isDir) throw new HttpError(500, `error ensuring directories: path is a file: ${root}`);
      root = found.path;
      break;
    }
    missing.unshift(path.posix.basename(root));
    root = path.posix.dirname(root);
  }
  const entries = missing.map((_, i) => missing.slice(0, i + 1).join("/"));
  const name = [...missing, path.posix.basename(destination)].join("/");
  const mode = existing ? existing.stat.mode & 0o777 : 0o644;
  const tar = Readable.from(tarOfFile(entries, { name, mode, ...source }, owner));
  try {
    // Resolves once Docker answered, which it does after extracting the whole archive.
    await container.putArchive(tar, { path: root });
  } catch (err) {
    throw new HttpError(500, `error writing file: ${errorMessage(err)}`);
  }
}

/** A tar of directories and one file, all owned by `owner`. */
async function* tarOfFile(dirs: string[], file: { name: string; mode: number; file: string; size: number }, owner: SandboxUser): AsyncGenerator<Buffer> {
  const common = { uid: owner.uid, gid: owner.gid, uname: owner.name, gname: owner.name, mtime: new Date() };
  for (const dir of dirs) yield tarHeader({ ...common, path: `${dir}/`, type: "Directory", mode: 0o755, size: 0 });
  yield tarHeader({ ...common, path: file.name, type: "File", mode: file.mode, size: file.size });
  let sent = 0;
  for await (const chunk of createReadStream(file.file) as AsyncIterable<Buffer>) {
    sent += chunk.length;
    yield chunk;
  }
  if (sent !== file.size) throw new Error(`the spooled upload changed size (${sent} of ${file.size} bytes)`);
  yield Buffer.alloc((512 - (file.size % 512)) % 512);
  yield Buffer.alloc(1024);
}

/** One entry's header block, after a PAX header when the entry needs one (long names). */
function tarHeader(data: HeaderData): Buffer {
  const header = new Header(data);
  const block = () => header.block ?? Buffer.alloc(512);
  if (!header.encode()) return block();
  return Buffer.concat([new Pax({ path: data.path, uid: data.uid, gid: data.gid, size: data.size, mtime: data.mtime }).encode(), block()]);
}

/** The bytes of the first regular file in a tar stream (Docker's archive of one file). */
async function* fileBytesOfTar(tar: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  const reader = new ByteReader(tar);
  for (;;) {
    const block = await reader.read(512);
    if (!block || block.every((b) => b === 0)) throw new Error("the archive holds no regular file");
    const header = new Header(block);
    const size = header.size ?? 0;
    if (header.type === "File" || header.type === "OldFile" || header.type === "ContiguousFile") {
      yield* reader.take(size);
      return;
    }
    // Metadata entries (PAX headers, long names) and anything else before the file.
    for await (const _ of reader.take(Math.ceil(size / 512) * 512));
  }
}

/** Exact-length reads over a stream of chunks, without copying what passes straight through. */
class ByteReader {
  #source: AsyncIterator<Buffer>;
  #buffered: Buffer = Buffer.alloc(0);

  constructor(source: AsyncIterable<Buffer>) {
    this.#source = source[Symbol.asyncIterator]();
  }

  /** Exactly `n` bytes; undefined if the stream ends before the first; throws if it ends within them. */
  async read(n: number): Promise<Buffer | undefined> {
    while (this.#buffered.length < n) {
      if (!(await this.#fill())) {
        if (this.#buffered.length === 0) return undefined;
        throw new Error("unexpected end of stream");
      }
    }
    const out = this.#buffered.subarray(0, n);
    this.#buffered = this.#buffered.subarray(n);
    return out;
  }

  /** The next `n` bytes, in the pieces they arrive in. */
  async *take(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (this.#buffered.length === 0 && !(await this.#fill())) throw new Error("unexpected end of stream");
      const piece = this.#buffered.subarray(0, Math.min(left, this.#buffered.length));
      this.#buffered = this.#buffered.subarray(piece.length);
      left -= piece.length;
      yield piece;
    }
  }

  async #fill(): Promise<boolean> {
    const { value, done } = await this.#source.next();
    if (done) return false;
    this.#buffered = this.#buffered.length > 0 ? Buffer.concat([this.#buffered, value]) : value;
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Uploads: spooling and a streaming multipart reader
// ---------------------------------------------------------------------------------------------

/** Where one multipart part's bytes go. */
interface PartSink {
  write(chunk: Buffer): Promise<void>;
  close(): Promise<void>;
}

const DISCARD: PartSink = { write: async () => {}, close: async () => {} };

/** A sink into a host file; `done` gets the size once it is complete on disk. */
function spoolSink(file: string, done: (size: number) => Promise<void>): PartSink {
  const out = createWriteStream(file);
  let size = 0;
  return {
    async write(chunk) {
      size += chunk.length;
      if (!out.write(chunk)) await once(out, "drain");
    },
    async close() {
      out.end();
      await once(out, "finish");
      await done(size);
    },
  };
}

async function spoolTo(file: string, body: AsyncIterable<Buffer>): Promise<number> {
  const out = createWriteStream(file);
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (!out.write(chunk)) await once(out, "drain");
  }
  out.end();
  await once(out, "finish");
  return size;
}

function multipartBoundary(contentType: string): string {
  const boundary = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  const value = boundary?.[1] ?? boundary?.[2];
  if (!value) throw new HttpError(500, "error parsing multipart form: no multipart boundary param in Content-Type");
  return value;
}

/** A Content-Disposition parameter, undoing the escapes the fetch standard's FormData applies. */
function dispositionParam(disposition: string, name: string): string | undefined {
  const match = new RegExp(`(?:^|;)\\s*${name}="((?:[^"\\\\]|\\\\.)*)"`, "i").exec(disposition);
  return match?.[1].replace(/%22/g, '"').replace(/%0D/gi, "\r").replace(/%0A/gi, "\n");
}

const CRLF = Buffer.from("\r\n");

/**
 * Reads a multipart body part by part, never holding a part in memory: `open` gets each part's
 * headers and says where its bytes go. Throws if the body ends before the closing boundary.
 */
async function readMultipart(body: AsyncIterable<Buffer>, boundary: string, open: (headers: Map<string, string>) => Promise<PartSink>): Promise<void> {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  // A CRLF in front, so the first boundary looks like every other one.
  let buffered: Buffer = CRLF;
  let state: "preamble" | "boundary" | "headers" | "body" | "done" = "preamble";
  let sink: PartSink | undefined;
  for await (const chunk of body) {
    // Whatever follows the closing boundary is read to the end and dropped.
    if (state === "done") continue;
    buffered = buffered.length > 0 ? Buffer.concat([buffered, chunk]) : chunk;
    for (let progressed = true; progressed; ) {
      progressed = false;
      if (state === "preamble" || state === "body") {
        const at = buffered.indexOf(delimiter);
        if (at < 0) {
          // Keep what could be the start of a delimiter; the rest is the part's.
          const keep = Math.min(buffered.length, delimiter.length - 1);
          if (state === "body" && sink && buffered.length > keep) await sink.write(buffered.subarray(0, buffered.length - keep));
          buffered = buffered.subarray(buffered.length - keep);
          break;
        }
        if (state === "body" && sink) {
          if (at > 0) await sink.write(buffered.subarray(0, at));
          await sink.close();
          sink = undefined;
        }
        buffered = buffered.subarray(at + delimiter.length);
        state = "boundary";
      }
      if (state === "boundary") {
        if (buffered.length >= 2 && buffered[0] === 0x2d && buffered[1] === 0x2d) {
          state = "done";
          break;
        }
        const eol = buffered.indexOf(CRLF);
        if (eol < 0) break;
        buffered = buffered.subarray(eol + 2);
        state = "headers";
      }
      if (state === "headers") {
        const end = buffered.subarray(0, 2).equals(CRLF) ? 0 : buffered.indexOf("\r\n\r\n");
        if (end < 0) {
          if (buffered.length > 64 * 1024) throw new HttpError(400, "error reading form: part headers too long");
          break;
        }
        sink = await open(partHeaders(buffered.subarray(0, end).toString("utf8")));
        buffered = buffered.subarray(end === 0 ? 2 : end + 4);
        state = "body";
        progressed = true;
      }
    }
  }
  if (state !== "done") throw new HttpError(500, "error reading form: multipart: NextPart: EOF");
}

function partHeaders(text: string): Map<string, string> {
  const headers = new Map<string, string>();
  for (const line of text.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return headers;
}
