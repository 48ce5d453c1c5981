/**
 * The `Store` interface, the same scenarios on both implementations: the embedded SQLite store
 * and PostgreSQL (a private cluster started by the test, test/helpers/postgres.ts). Records,
 * compare-and-set of agent types (two writers, one wins), the delete that refuses an agent type in
 * use, sessions kept and pruned by their end, background processes, the audit trail's filters,
 * pages and pruning, data kept across a reopen, a schema from a newer server refused, and on
 * PostgreSQL two servers migrating one new database at the same moment.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import test from "ava";
import type { WorkspaceRecord } from "../providers/types.ts";
import { createLogger } from "../server/logger.ts";
import { MIGRATIONS } from "../server/store/migrations.ts";
import { openPostgresStore } from "../server/store/postgres-store.ts";
import { openSqliteStore } from "../server/store/sqlite-store.ts";
import type { Store, StoredAuditEvent } from "../server/store/store.ts";
import { type Postgres, postgresGate, startPostgres } from "./helpers/postgres.ts";

const logger = createLogger({ level: "error" });

interface Backend {
  name: string;
  /** A fresh, empty store, and how to open the same one again. */
  fresh(): Promise<{ store: Store; reopen(migrations?: typeof MIGRATIONS): Promise<Store>; cleanup(): Promise<void> }>;
}

let started: Promise<Postgres> | undefined;
/** The one cluster of this file, started by the first test that needs it. */
const cluster = () => (started ??= startPostgres());
let dbs = 0;
const backends: Backend[] = [
  {
    name: "sqlite",
    async fresh() {
      const dir = await mkdtemp(path.join(tmpdir(), "aw-store-"));
      return { store: openSqliteStore(dir, logger), reopen: async (m = MIGRATIONS) => openSqliteStore(dir, logger, m), cleanup: () => rm(dir, { recursive: true, force: true }) };
    },
  },
];
if (postgresGate(test, "store conformance")) {
  backends.push({
    name: "postgres",
    async fresh() {
      const url = await (await cluster()).createDatabase(`store_${++dbs}`);
      return { store: await openPostgresStore(url, logger), reopen: (m = MIGRATIONS) => openPostgresStore(url, logger, m), cleanup: async () => undefined };
    },
  });
}
test.after.always(async () => {
  await (await started)?.stop();
});

const record = (id: string, createdAt: string, agentType?: string): WorkspaceRecord =>
  ({ id, provider: "local", createdAt: new Date(createdAt), labels: { k: id }, limits: {}, image: "", state: { dir: `/d/${id}` }, ...(agentType ? { agentType: { id: agentType } } : {}) }) as unknown as WorkspaceRecord;

const agentType = (id: string, revision: number, body = `{"id":"${id}","r":${revision}}`) => ({ id, revision, createdAt: new Date("2026-01-01T00:00:00Z"), updatedAt: new Date(`2026-01-0${Math.min(revision, 9)}T00:00:00Z`), body });

const event = (i: number, over: Partial<StoredAuditEvent> = {}): StoredAuditEvent => ({
  startUs: 1_000_000 + i * 10,
  traceId: `t${i}`,
  spanId: `s${i}`,
  workspaceId: i % 2 === 0 ? "wa" : "wb",
  sessionId: i % 3 === 0 ? "sx" : "",
  agentType: "coder",
  tool: i % 5 === 0 ? "bash" : "read",
  outcome: i % 7 === 0 ? "error" : "ok",
  record: JSON.stringify({ i }),
  ...over,
});
const allOf = { workspaceId: "", sessionId: "", agentType: "", tool: "", outcome: "", fromUs: 0, toUs: 0, limit: 1000 };

for (const b of backends) {
  const scenario = (title: string, fn: (t: import("ava").ExecutionContext, s: Awaited<ReturnType<Backend["fresh"]>>) => Promise<void>) =>
    test(`${b.name}: ${title}`, async (t) => {
      const s = await b.fresh();
      try {
        await fn(t, s);
      } finally {
        await s.store.close();
        await s.cleanup();
      }
    });

  scenario("workspace records are stored, replaced, listed oldest first, and deleted", async (t, { store }) => {
    await store.workspaces.put(record("w2", "2026-02-02T00:00:00Z"));
    await store.workspaces.put(record("w1", "2026-02-01T00:00:00Z", "coder"));
    await store.workspaces.put({ ...record("w2", "2026-02-02T00:00:00Z"), labels: { k: "changed" } });
    const loaded = await store.workspaces.load();
    t.deepEqual(loaded.map((w) => [w.id, w.labels.k, w.agentType?.id]), [["w1", "w1", "coder"], ["w2", "changed", undefined]]);
    t.true(loaded[0].createdAt instanceof Date && loaded[0].createdAt.toISOString() === "2026-02-01T00:00:00.000Z");
    await store.workspaces.delete("w1");
    t.deepEqual((await store.workspaces.load()).map((w) => w.id), ["w2"]);
  });

  scenario("agent types: a second insert of an id is refused; updates compare and set, and of two writers at one revision one wins", async (t, { store }) => {
    t.true(await store.agentTypes.insert(agentType("coder", 1)));
    t.false(await store.agentTypes.insert(agentType("coder", 1, "{}")));
    t.false(await store.agentTypes.update(agentType("coder", 3), 2), "a stale revision writes nothing");
    const racers = await Promise.all([store.agentTypes.update(agentType("coder", 2, '{"by":"a"}'), 1), store.agentTypes.update(agentType("coder", 2, '{"by":"b"}'), 1)]);
    t.is(racers.filter(Boolean).length, 1);
    const [stored] = await store.agentTypes.list();
    t.is(stored.revision, 2);
    t.is(stored.body, racers[0] ? '{"by":"a"}' : '{"by":"b"}');
    t.is(stored.updatedAt.toISOString(), "2026-01-02T00:00:00.000Z");
  });

  scenario("deleting an agent type: missing, in use by workspaces (counted), then deleted", async (t, { store }) => {
    t.deepEqual(await store.agentTypes.delete("nobody"), { deleted: false, missing: true });
    await store.agentTypes.insert(agentType("coder", 1));
    await store.workspaces.put(record("w1", "2026-02-01T00:00:00Z", "coder"));
    await store.workspaces.put(record("w2", "2026-02-02T00:00:00Z", "coder"));
    t.deepEqual(await store.agentTypes.delete("coder"), { deleted: false, missing: false, workspaces: 2 });
    await store.workspaces.delete("w1");
    await store.workspaces.delete("w2");
    t.deepEqual(await store.agentTypes.delete("coder"), { deleted: true });
    t.deepEqual(await store.agentTypes.list(), []);
  });

  scenario("sessions: live ones and those ended since the cut are loaded, older ended ones pruned", async (t, { store }) => {
    const session = (id: string, status: string, endedAt?: string) => ({
      id,
      agentType: "coder",
      status,
      tokenHash: `hash-${id}`,
      createdAt: new Date(`2026-03-0${id.slice(1)}T00:00:00Z`),
      record: JSON.stringify({ id, ...(endedAt ? { endedAt } : {}) }),
    });
    await store.sessions.put(session("s1", "active"));
    await store.sessions.put(session("s2", "ended", "2026-03-02T00:00:00.000Z"));
    await store.sessions.put(session("s3", "ended", "2026-03-05T00:00:00.000Z"));
    await store.sessions.put({ ...session("s1", "idle"), record: '{"id":"s1","note":"replaced"}' });
    const loaded = await store.sessions.load(new Date("2026-03-04T00:00:00Z"));
    t.deepEqual(loaded.map((s) => [s.id, s.status, s.tokenHash]), [["s1", "idle", "hash-s1"], ["s3", "ended", "hash-s3"]]);
    t.is(loaded[0].record, '{"id":"s1","note":"replaced"}');
    t.is(await store.sessions.prune(new Date("2026-03-04T00:00:00Z")), 1);
    t.deepEqual((await store.sessions.load(new Date(0))).map((s) => s.id), ["s1", "s3"]);
  });

  scenario("background processes: stored, replaced in place, deleted one by one and by workspace", async (t, { store }) => {
    await store.processes.put({ id: "p1", workspaceId: "wa", record: "1" });
    await store.processes.put({ id: "p2", workspaceId: "wb", record: "2" });
    await store.processes.put({ id: "p3", workspaceId: "wa", record: "3" });
    await store.processes.put({ id: "p2", workspaceId: "wb", record: "2b" });
    t.deepEqual((await store.processes.load()).map((p) => p.record).sort(), ["1", "2b", "3"]);
    await store.processes.delete("p1");
    await store.processes.deleteWorkspace("wb");
    t.deepEqual(await store.processes.load(), [{ id: "p3", workspaceId: "wa", record: "3" }]);
  });

  scenario("the audit trail: batches in order, filters, time bounds, pages, and pruning by age and by count", async (t, { store }) => {
    for (let batch = 0; batch < 3; batch++) await store.audit.append(Array.from({ length: 100 }, (_, i) => event(batch * 100 + i)));
    await store.audit.append([]);
    const all = await store.audit.query(allOf);
    t.is(all.length, 300);
    t.deepEqual(all.slice(0, 2).map((e) => e.traceId), ["t299", "t298"], "newest first");
    t.is((await store.audit.query({ ...allOf, workspaceId: "wa" })).length, 150);
    t.is((await store.audit.query({ ...allOf, workspaceId: "wa", tool: "bash" })).length, 30);
    t.is((await store.audit.query({ ...allOf, sessionId: "sx", outcome: "error" })).length, 15);
    const window = await store.audit.query({ ...allOf, fromUs: event(10).startUs, toUs: event(20).startUs });
    t.deepEqual(window.map((e) => e.traceId), Array.from({ length: 10 }, (_, i) => `t${19 - i}`));
    // Pages of 64 by the previous page's last record, across equal start times too.
    await store.audit.append([event(1000, { startUs: 5, traceId: "same-a" }), event(1001, { startUs: 5, traceId: "same-b" })]);
    const seen: string[] = [];
    let after: { startUs: number; id: number } | undefined;
    for (;;) {
      const page = await store.audit.query({ ...allOf, limit: 64, after });
      if (page.length === 0) break;
      seen.push(...page.map((e) => e.traceId));
      const last = page[page.length - 1];
      after = { startUs: last.startUs, id: last.id };
    }
    t.is(seen.length, 302);
    t.is(new Set(seen).size, 302);
    t.deepEqual(seen.slice(-2), ["same-b", "same-a"]);
    t.is(await store.audit.prune(event(100).startUs, 0), 102, "the 100 first and the two at start 5");
    t.is(await store.audit.prune(0, 50), 150);
    const left = await store.audit.query(allOf);
    t.is(left.length, 50);
    t.is(left[left.length - 1].traceId, "t250");
    t.deepEqual(JSON.parse(left[0].record), { i: 299 });
  });

  scenario("what was stored is there after a reopen, and the schema is not migrated twice", async (t, s) => {
    await s.store.workspaces.put(record("w1", "2026-02-01T00:00:00Z"));
    await s.store.agentTypes.insert(agentType("coder", 1));
    await s.store.audit.append([event(1)]);
    await s.store.close();
    s.store = await s.reopen();
    t.deepEqual((await s.store.workspaces.load()).map((w) => w.id), ["w1"]);
    t.deepEqual((await s.store.agentTypes.list()).map((a) => a.id), ["coder"]);
    t.deepEqual((await s.store.audit.query(allOf)).map((e) => e.traceId), ["t1"]);
  });

  scenario("a database at a newer schema than this server knows is refused, and left as it was", async (t, s) => {
    await s.store.workspaces.put(record("w1", "2026-02-01T00:00:00Z"));
    await s.store.close();
    await t.throwsAsync(s.reopen(MIGRATIONS.slice(0, 2)), { message: new RegExp(`schema version ${MIGRATIONS.at(-1)!.version}, newer than this server knows \\(2\\)`) });
    s.store = await s.reopen();
    t.deepEqual((await s.store.workspaces.load()).map((w) => w.id), ["w1"]);
  });
}

if (backends.some((b) => b.name === "postgres")) {
  test("postgres: servers opening one new database at the same moment migrate it once, and all of them work", async (t) => {
    const pg = await cluster();
    const url = await pg.createDatabase("store_together");
    const stores = await Promise.all(Array.from({ length: 4 }, () => openPostgresStore(url, logger)));
    try {
      await Promise.all(stores.map((s, i) => s.workspaces.put(record(`w${i}`, `2026-02-0${i + 1}T00:00:00Z`))));
      for (const s of stores) t.deepEqual((await s.workspaces.load()).map((w) => w.id), ["w0", "w1", "w2", "w3"]);
      t.deepEqual((await pg.query("store_together", "SELECT version FROM schema_version")).rows, [{ version: MIGRATIONS.at(-1)!.version }]);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  test("postgres: a session is taken over by compare-and-set once, an ended one never, and only the server its stored record names replaces it", async (t) => {
    const store = await openPostgresStore(await (await cluster()).createDatabase("store_session_claims"), logger);
    try {
      const row = (id: string, server: string, status = "active", note = "") => ({ id, agentType: "coder", status, tokenHash: `h-${id}`, createdAt: new Date("2026-03-01T00:00:00Z"), record: JSON.stringify({ id, server, note }) });
      t.true(await store.sessions.put(row("s1", "srv-a")));
      t.true(await store.sessions.put(row("s2", "srv-a", "ended")));
      const claims = await Promise.all([store.replicas!.claimSession("s1", "srv-a", "srv-b"), store.replicas!.claimSession("s1", "srv-a", "srv-c")]);
      t.is(claims.filter((c) => c !== undefined).length, 1, "one of two racing servers takes it");
      const winner = (JSON.parse(claims.find((c) => c !== undefined)!) as { server: string }).server;
      t.is(await store.replicas!.claimSession("s2", "srv-a", "srv-b"), undefined, "an ended session is not taken");
      t.false(await store.sessions.put(row("s1", "srv-a", "ended", "stale")), "the server it was taken from writes nothing");
      t.true(await store.sessions.put(row("s1", winner, "active", "by the taker")));
      t.deepEqual(JSON.parse((await store.replicas!.session("s1"))!), { id: "s1", server: winner, note: "by the taker" });
    } finally {
      await store.close();
    }
  });

  test("postgres: an unreachable database is refused at start with its location, and no password", async (t) => {
    const err = await t.throwsAsync(openPostgresStore("postgresql://agent:s3cret-pw@127.0.0.1:1/nowhere", logger));
    t.regex(err!.message, /cannot open the database postgresql:\/\/agent@127\.0\.0\.1:1\/nowhere/);
    t.notRegex(err!.message, /s3cret-pw/);
  });
}
