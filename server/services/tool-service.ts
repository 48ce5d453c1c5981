/**
 * ToolService: reads each request, calls the tool written once in server/tools, and returns the
 * response. No filesystem or process work happens here.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type BashExited,
  BashExitedSchema,
  FileKind,
  FileType,
  type StreamBashResponse,
  type StreamGrepResponse,
  StreamBashResponseSchema,
  StreamGrepResponseSchema,
  ToolService,
} from "../../gen/agentworkspace/v1/tool_pb.js";
import type { EntryType } from "../../providers/types.ts";
import type { WorkspaceManager } from "../workspace-manager.ts";
import { runBash, streamBash } from "../tools/bash.ts";
import { editFile, patchFile } from "../tools/edit.ts";
import { glob, listFiles } from "../tools/find.ts";
import { grep, grepAll, type GrepInput } from "../tools/grep.ts";
import type { ToolLimits } from "../tools/tool-limits.ts";
import { readFile } from "../tools/read.ts";
import { deleteFile, writeFile } from "../tools/write.ts";

const FILE_TYPES: Record<EntryType, FileType> = {
  file: FileType.FILE,
  directory: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  other: FileType.OTHER,
};
const FILE_KINDS = { text: FileKind.TEXT, directory: FileKind.DIRECTORY, binary: FileKind.BINARY } as const;

function grepInput(req: {
  pattern: string;
  path: string;
  glob: string;
  caseSensitive?: boolean;
  contextLines: number;
  maxResults: number;
}): GrepInput {
  return {
    pattern: req.pattern,
    path: req.path,
    glob: req.glob,
    caseSensitive: req.caseSensitive ?? true,
    contextLines: req.contextLines,
    maxResults: req.maxResults,
  };
}

/** Dependencies of the tool service. */
export interface ToolServiceDeps {
  workspaces: WorkspaceManager;
  limits: ToolLimits;
}

/** Creates the ToolService implementation. */
export function createToolService({ workspaces, limits }: ToolServiceDeps): ServiceImpl<typeof ToolService> {
  return {
    async bash(req, ctx) {
      const ws = await workspaces.handle(req.workspaceId);
      const r = await runBash(ws, { command: req.command, workdir: req.workdir, timeoutMs: Number(req.timeoutMs), env: req.env }, limits, ctx.signal);
      return {
        stdout: r.stdout,
        stderr: r.stderr,
        exitCode: r.exitCode,
        durationMs: BigInt(r.durationMs),
        stdoutTruncated: r.stdoutTruncated,
        stderrTruncated: r.stderrTruncated,
        stdoutTotalBytes: BigInt(r.stdoutTotalBytes),
        stderrTotalBytes: BigInt(r.stderrTotalBytes),
        signal: r.signal,
        oomKilled: r.oomKilled,
      };
    },

    async *streamBash(req, ctx): AsyncGenerator<StreamBashResponse> {
      const ws = await workspaces.handle(req.workspaceId);
      const input = { command: req.command, workdir: req.workdir, timeoutMs: Number(req.timeoutMs), env: req.env };
      for await (const ev of streamBash(ws, input, Number(req.maxOutputBytes), limits, ctx.signal)) {
        switch (ev.type) {
          case "started":
            yield create(StreamBashResponseSchema, { event: { case: "started", value: { startedAt: timestampFromDate(ev.startedAt) } } });
            break;
          case "stdout":
          case "stderr":
            yield create(StreamBashResponseSchema, { event: { case: ev.type, value: ev.data } });
            break;
          case "exited": {
            const exited: BashExited = create(BashExitedSchema, {
              exitCode: ev.exit.exitCode,
              durationMs: BigInt(ev.exit.durationMs),
              timedOut: ev.exit.timedOut,
              signal: ev.exit.signal,
              stdoutTruncated: ev.stdoutTruncated,
              stderrTruncated: ev.stderrTruncated,
              stdoutTotalBytes: BigInt(ev.stdoutTotalBytes),
              stderrTotalBytes: BigInt(ev.stderrTotalBytes),
              oomKilled: ev.exit.oomKilled,
            });
            yield create(StreamBashResponseSchema, { event: { case: "exited", value: exited } });
            break;
          }
        }
      }
    },

    async readFile(req) {
      const ws = await workspaces.handle(req.workspaceId);
      const r = await readFile(ws, { path: req.path, offset: req.offset, limit: req.limit }, limits);
      return {
        content: r.content,
        totalLines: r.totalLines,
        truncated: r.truncated,
        kind: FILE_KINDS[r.kind],
        size: BigInt(r.size),
        mimeType: r.mimeType,
        path: r.path,
      };
    },

    async writeFile(req) {
      const ws = await workspaces.handle(req.workspaceId);
      const r = await writeFile(ws, req.path, req.content);
      return { bytesWritten: BigInt(r.bytesWritten), created: r.created };
    },

    async editFile(req) {
      const ws = await workspaces.handle(req.workspaceId);
      return await editFile(ws, { path: req.path, oldString: req.oldString, newString: req.newString, replaceAll: req.replaceAll }, limits);
    },

    async patchFile(req) {
      const ws = await workspaces.handle(req.workspaceId);
      return await patchFile(ws, req.path, req.patches.map((p) => ({ find: p.find, replace: p.replace })), limits);
    },

    async deleteFile(req) {
      const ws = await workspaces.handle(req.workspaceId);
      await deleteFile(ws, req.path);
      return {};
    },

    async listFiles(req) {
      const ws = await workspaces.handle(req.workspaceId);
      const r = await listFiles(ws, req.path, req.pattern);
      return {
        files: r.files.map((f) => ({ path: f.path, size: BigInt(f.size), modified: timestampFromMs(Math.floor(f.mtimeMs)), type: FILE_TYPES[f.type] })),
        truncated: r.truncated,
      };
    },

    async glob(req) {
      const ws = await workspaces.handle(req.workspaceId);
      return await glob(ws, req.pattern, req.path, req.limit);
    },

    async grep(req, ctx) {
      const ws = await workspaces.handle(req.workspaceId);
      return await grepAll(ws, grepInput(req), limits, ctx.signal);
    },

    async *streamGrep(req, ctx): AsyncGenerator<StreamGrepResponse> {
      const ws = await workspaces.handle(req.workspaceId);
      for await (const ev of grep(ws, grepInput(req), limits, ctx.signal)) {
        if (ev.type === "match") {
          yield create(StreamGrepResponseSchema, { event: { case: "match", value: ev.match } });
        } else {
          yield create(StreamGrepResponseSchema, { event: { case: "done", value: { matchCount: ev.matchCount, truncated: ev.truncated } } });
        }
      }
    },
  };
}
