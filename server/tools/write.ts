/** The write and delete tools: whole-file replacement (atomic) and single-file deletion. */
import type { WorkspaceHandle } from "../../providers/types.ts";
import { jailPath } from "./paths.ts";

/** Writes `content` to `path` atomically, creating parents; reports the bytes written. */
export async function writeFile(ws: WorkspaceHandle, path: string, content: string): Promise<{ bytesWritten: number; created: boolean }> {
  const rel = jailPath(path, "path", true);
  const bytes = new TextEncoder().encode(content);
  const { created } = await ws.fs.writeFile(rel, bytes);
  return { bytesWritten: bytes.length, created };
}

/** Deletes one file or symlink; IS_DIRECTORY for directories, FILE_NOT_FOUND if absent. */
export async function deleteFile(ws: WorkspaceHandle, path: string): Promise<void> {
  await ws.fs.remove(jailPath(path, "path", true));
}
