/**
 * A private PostgreSQL for the tests: Debian's `postgresql` binaries, a cluster of its own made by
 * `initdb` in a temporary directory, listening on a Unix socket in that directory only (no TCP
 * port, no system service), trust authentication on that socket. Run as the `postgres` user when
 * the tests run as root (PostgreSQL refuses to run as root). `postgresGate` makes a missing
 * PostgreSQL a failing test in CI (REQUIRE_COMMANDS=1) and a visible skip elsewhere.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { TestFn } from "ava";
import pg from "pg";
import { commandGate } from "./engines.ts";

/** The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/<major>/bin). */
export function postgresBinDir(): string | undefined {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const majors = readdirSync(root).filter((d) => /^\d+$/.test(d) && existsSync(path.join(root, d, "bin", "postgres"))).sort((a, b) => Number(b) - Number(a));
  return majors.length > 0 ? path.join(root, majors[0], "bin") : undefined;
}

/** True when PostgreSQL tests run (see the module comment). */
export function postgresGate<C>(test: TestFn<C>, what: string): boolean {
  const bin = postgresBinDir();
  return commandGate(test, bin ? [path.join(bin, "postgres"), "--version"] : ["postgres", "--version"], `${what} (PostgreSQL)`);
}

/** A running private cluster. */
export interface Postgres {
  /** The directory holding the cluster and its socket. */
  readonly dir: string;
  /** The server's version, e.g. "15.18 (Debian 15.18-0+deb12u1)". */
  readonly version: string;
  /** A connection URL for database `db` (the socket directory as its host). */
  url(db: string): string;
  /** Creates a fresh database and returns its URL. */
  createDatabase(name: string): Promise<string>;
  /** Runs one statement as the superuser on database `db`. */
  query(db: string, sql: string, values?: unknown[]): Promise<pg.QueryResult>;
  /** Stops the cluster (a fast shutdown: every connection ends) and keeps its data. */
  halt(): Promise<void>;
  /** Starts a halted cluster again on its data. */
  resume(): Promise<void>;
  /** Stops the cluster and removes its directory. */
  stop(): Promise<void>;
}

function ids(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
  return { uid, gid };
}

/** Starts a private cluster (about a second for initdb and start). */
export async function startPostgres(): Promise<Postgres> {
  const bin = postgresBinDir();
  if (!bin) throw new Error("PostgreSQL is not installed (apt-get install postgresql; scripts/setup-engines.sh does)");
  const dir = await mkdtemp(path.join(tmpdir(), "aw-pg-"));
  const owner = ids();
  if (owner) await chown(dir, owner.uid, owner.gid);
  const data = path.join(dir, "data");
  const as = owner ? { uid: owner.uid, gid: owner.gid } : {};
  execFileSync(path.join(bin, "initdb"), ["-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"], { ...as, stdio: "pipe" });
  let log = "";
  const url = (db: string) => `postgresql://postgres@localhost/${encodeURIComponent(db)}?host=${encodeURIComponent(dir)}`;
  const query = async (db: string, sql: string, values?: unknown[]) => {
    const c = new pg.Client({ connectionString: url(db) });
    await c.connect();
    try {
      return await c.query(sql, values);
    } finally {
      await c.end();
    }
  };
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  // A test process that dies without stopping the cluster (a crash, a timeout) takes it along.
  const orphaned = () => child?.kill("SIGQUIT");
  process.once("exit", orphaned);
  const launch = async () => {
    const c: ChildProcess = spawn(path.join(bin, "postgres"), ["-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "max_connections=200", "-c", "shared_buffers=32MB"], {
      ...as,
      stdio: ["ignore", "ignore", "pipe"],
    });
    child = c;
    c.stderr?.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
    exited = new Promise<void>((resolve) => c.once("exit", () => resolve()));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (c.exitCode !== null) throw new Error(`postgres exited at start:\n${log}`);
      try {
        await query("postgres", "SELECT 1");
        return;
      } catch (err) {
        if (Date.now() > deadline) {
          c.kill("SIGKILL");
          throw new Error(`postgres did not answer within 60 s (${(err as Error).message}):\n${log}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  const halt = async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill("SIGINT");
      const timer = setTimeout(() => child?.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
  };
  await launch();
  const version = String((await query("postgres", "SHOW server_version")).rows[0].server_version);
  return {
    dir,
    version,
    url,
    query,
    async createDatabase(name) {
      await query("postgres", `CREATE DATABASE "${name.replace(/"/g, "")}"`);
      return url(name);
    },
    halt,
    resume: launch,
    async stop() {
      process.off("exit", orphaned);
      await halt();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
