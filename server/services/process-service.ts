/**
 * ProcessService: a thin adapter over the background-process tools (tools/processes.ts), with
 * the tool context ToolService builds (tool-service.ts `toolContextOf`).
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { AttachProcessResponseSchema, ExposedPortSchema, ProcessSchema, ProcessService, ProcessState } from "../../gen/agentworkspace/v1/process_pb.js";
import { type Exposure, portPath } from "../ports/exposures.ts";
import { exposePort, listExposedPorts, unexposePort } from "../tools/ports.ts";
import type { ProcessView } from "../processes/process-table.ts";
import {
  attachProcess,
  getProcess,
  listProcesses,
  readProcessOutput,
  resizeProcess,
  signalProcess,
  startProcess,
  waitProcess,
  writeProcessStdin,
  type AttachEvent,
} from "../tools/processes.ts";
import type { ToolContextOf } from "./tool-service.ts";

const STATES = { running: ProcessState.RUNNING, exited: ProcessState.EXITED, lost: ProcessState.LOST } as const;

/** A process as the API describes it. */
export function processMessage(v: ProcessView) {
  return create(ProcessSchema, {
    processId: v.id,
    workspaceId: v.workspaceId,
    pid: v.pid,
    command: v.command,
    workdir: v.workdir,
    pty: v.pty,
    stdinOpen: v.stdinOpen,
    state: STATES[v.state],
    exitCode: v.exit?.exitCode ?? 0,
    signal: v.exit?.signal ?? "",
    oomKilled: v.exit?.oomKilled ?? false,
    startedAt: timestampFromDate(v.startedAt),
    ...(v.endedAt ? { endedAt: timestampFromDate(v.endedAt) } : {}),
    stdoutTotalBytes: BigInt(v.stdoutTotal),
    stderrTotalBytes: BigInt(v.stderrTotal),
    stdoutDroppedBytes: BigInt(v.stdoutDropped),
    stderrDroppedBytes: BigInt(v.stderrDropped),
    endedBy: v.endedBy,
  });
}

/** An exposed port as the API describes it. */
function exposedPortMessage(e: Exposure) {
  return create(ExposedPortSchema, { port: e.port, path: portPath(e.workspaceId, e.port), exposedAt: timestampFromDate(e.exposedAt), openConnections: e.connections.size });
}

function attachEvent(ev: AttachEvent) {
  switch (ev.type) {
    case "stdout":
    case "stderr":
      return create(AttachProcessResponseSchema, { event: { case: ev.type, value: { data: ev.data, offset: BigInt(ev.offset) } } });
    case "missed":
      return create(AttachProcessResponseSchema, { event: { case: "missed", value: { stderr: ev.stderr, bytes: BigInt(ev.bytes) } } });
    case "ended":
      return create(AttachProcessResponseSchema, { event: { case: "ended", value: processMessage(ev.process) } });
  }
}

/** Creates the ProcessService implementation over the tool context maker. */
export function createProcessService(context: ToolContextOf): ServiceImpl<typeof ProcessService> {
  const ctx = (req: { workspaceId: string }, hctx: HandlerContext) => context(req.workspaceId, hctx);
  return {
    async startProcess(req, hctx) {
      const view = await startProcess(await ctx(req, hctx), {
        command: req.command,
        workdir: req.workdir,
        env: req.env,
        pty: req.pty ? { rows: req.pty.rows, cols: req.pty.cols } : undefined,
        stdin: req.stdin,
        timeoutMs: Number(req.timeoutMs),
      });
      return { process: processMessage(view) };
    },
    async listProcesses(req, hctx) {
      return { processes: (await listProcesses(await ctx(req, hctx))).map(processMessage) };
    },
    async getProcess(req, hctx) {
      return { process: processMessage(await getProcess(await ctx(req, hctx), { processId: req.processId })) };
    },
    async readProcessOutput(req, hctx) {
      const r = await readProcessOutput(await ctx(req, hctx), {
        processId: req.processId,
        stdoutOffset: Number(req.stdoutOffset),
        stderrOffset: Number(req.stderrOffset),
        maxBytes: Number(req.maxBytes),
      });
      return {
        stdout: r.stdout.data,
        stderr: r.stderr.data,
        stdoutOffset: BigInt(r.stdout.offset),
        stderrOffset: BigInt(r.stderr.offset),
        stdoutMissedBytes: BigInt(r.stdout.missed),
        stderrMissedBytes: BigInt(r.stderr.missed),
        nextStdoutOffset: BigInt(r.stdout.offset + r.stdout.data.length),
        nextStderrOffset: BigInt(r.stderr.offset + r.stderr.data.length),
        process: processMessage(r.process),
      };
    },
    async *attachProcess(req, hctx) {
      for await (const ev of attachProcess(await ctx(req, hctx), { processId: req.processId, stdoutOffset: Number(req.stdoutOffset), stderrOffset: Number(req.stderrOffset) })) {
        yield attachEvent(ev);
      }
    },
    async writeProcessStdin(req, hctx) {
      const r = await writeProcessStdin(await ctx(req, hctx), { processId: req.processId, data: req.data, text: req.text, close: req.close });
      return { bytesWritten: BigInt(r.bytesWritten) };
    },
    async resizeProcess(req, hctx) {
      await resizeProcess(await ctx(req, hctx), { processId: req.processId, size: req.size ? { rows: req.size.rows, cols: req.size.cols } : undefined });
      return {};
    },
    async signalProcess(req, hctx) {
      await signalProcess(await ctx(req, hctx), { processId: req.processId, signal: req.signal });
      return {};
    },
    async waitProcess(req, hctx) {
      const r = await waitProcess(await ctx(req, hctx), { processId: req.processId, timeoutMs: Number(req.timeoutMs) });
      return { process: processMessage(r.process), timedOut: r.timedOut };
    },
    async exposePort(req, hctx) {
      const r = await exposePort(await ctx(req, hctx), { port: req.port });
      return { port: exposedPortMessage(r.exposure), listening: r.listening };
    },
    async unexposePort(req, hctx) {
      return { closedConnections: (await unexposePort(await ctx(req, hctx), { port: req.port })).closed };
    },
    async listExposedPorts(req, hctx) {
      return { ports: (await listExposedPorts(await ctx(req, hctx))).map(exposedPortMessage) };
    },
  };
}
