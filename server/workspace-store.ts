/**
 * Durable record of the workspaces a server knows, so they survive a restart. One JSON file in
 * the data directory, replaced atomically on every change (temporary file + rename). The
 * interface is small so an embedded database can replace it when sessions and agent types arrive.
 */
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { errnoCode } from "../core/errors.ts";
import type { WorkspaceRecord } from "../providers/types.ts";

/** Where workspace records live. */
export interface WorkspaceStore {
  load(): Promise<WorkspaceRecord[]>;
  put(record: WorkspaceRecord): Promise<void>;
  delete(id: string): Promise<void>;
}

/** A store writing `workspaces.json` under `dataDir`. Writes are serialised. */
export function createFileWorkspaceStore(dataDir: string): WorkspaceStore {
  const file = path.join(dataDir, "workspaces.json");
  const records = new Map<string, WorkspaceRecord>();
  let loaded = false;
  let chain: Promise<void> = Promise.resolve();

  const persist = () => {
    const write = chain.then(async () => {
      await mkdir(dataDir, { recursive: true });
      const tmp = `${file}.${process.pid}.tmp`;
      await writeFile(tmp, JSON.stringify([...records.values()], null, 2));
      await rename(tmp, file);
    });
    // One failed write (a full disk) fails its caller, not every later write.
    chain = write.catch(() => undefined);
    return write;
  };

  return {
    async load() {
      if (!loaded) {
        try {
          const raw = JSON.parse(await readFile(file, "utf8")) as Array<WorkspaceRecord & { createdAt: string }>;
          for (const r of raw) records.set(r.id, { ...r, createdAt: new Date(r.createdAt) });
        } catch (err) {
          if (errnoCode(err) !== "ENOENT") throw err;
        }
        loaded = true;
      }
      return [...records.values()];
    },
    async put(record) {
      records.set(record.id, record);
      await persist();
    },
    async delete(id) {
      records.delete(id);
      await persist();
    },
  };
}
