/**
 * Which indexes the SQL of each query of the bench's mix (support/cloud-bench-data.ts)
 * uses, on the bench's data, shown by the databases' own EXPLAIN. A query whose plan walks
 * a whole large table (devices, tags, variables, keys: 10,000+ rows) fails here, so a change
 * to the SQL compiler, the schema or the mix that loses an index is caught before a
 * benchmark shows it. Small tables (100 fleets, a few users and organisations) may be
 * scanned: that is what a planner should do with them.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db, Row, SqlValue } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { buildCloud } from '../src/cloud/server.js';
import { queryMix, seed, seedTargets } from '../support/cloud-bench-data.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';

const LARGE = new Set(['device', 'device_tag', 'device_environment_variable', 'device_config_variable', 'api_key', 'actor']);

/**
 * Whole-table reads a planner may rightly choose: none now. (d) on PostgreSQL, 500 of
 * 10,000 devices matching a tag, was a hash join over the whole device table under the
 * default random_page_cost of 4; the cloud's sessions run with 1.1 (src/cloud/db/postgres.ts),
 * and the plan goes from the tags' (tag_key, value, device) index to the device index 500
 * times (migration 008).
 */
const ALLOWED: Record<string, Partial<Record<'sqlite' | 'postgres', string[]>>> = {};

interface Statement {
  sql: string;
  params: SqlValue[];
}

/** The database, recording every statement the cloud runs on it. */
function recording(db: Db, into: Statement[]): Db {
  return {
    ...db,
    query: <R extends Row>(sql: string, params: SqlValue[]) => {
      into.push({ sql, params });
      return db.query<R>(sql, params);
    },
    transaction: (fn) => db.transaction((tx) => fn(recording(tx, into))),
  };
}

/** Tables a statement's plan reads whole: [table, how]. */
async function fullScans(db: Db, s: Statement): Promise<Array<[string, string]>> {
  if (db.dialect.name === 'postgres') {
    const [row] = await db.query<{ 'QUERY PLAN': Array<{ Plan: PgNode }> }>(`EXPLAIN (FORMAT JSON) ${s.sql}`, s.params);
    const found: Array<[string, string]> = [];
    const walk = (n: PgNode) => {
      if (n['Node Type'] === 'Seq Scan' && n['Relation Name']) found.push([n['Relation Name'], 'Seq Scan']);
      for (const c of n.Plans ?? []) walk(c);
    };
    walk(row!['QUERY PLAN'][0]!.Plan);
    return found;
  }
  // SQLite names a table by its alias in the plan: `"device" a0` in the SQL.
  const tableOf = new Map([...s.sql.matchAll(/"(\w+)" (a\d+)\b/g)].map((m) => [m[2]!, m[1]!]));
  const plan = await db.query<{ detail: string }>(`EXPLAIN QUERY PLAN ${s.sql}`, s.params);
  // `SCAN a0 USING INDEX i` walks an index in order (a LIMIT stops it early), as an Index
  // Scan does on PostgreSQL; a bare `SCAN a0` reads the table.
  return plan
    .map((p) => /^SCAN (\w+)$/.exec(p.detail))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => [tableOf.get(m[1]!) ?? m[1]!, 'SCAN']);
}

interface PgNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PgNode[];
}

describe.each(['sqlite', 'postgres'] as const)('query plans of the bench mix on %s', (kind) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  let cluster: PostgresCluster | undefined;
  const statements: Statement[] = [];
  let app: ReturnType<typeof buildCloud>;
  let key: string;
  let uuids: string[];
  let deviceKey: { uuid: string; key: string };

  beforeAll(async () => {
    if (kind === 'sqlite') {
      const dir = await mkdtemp(join(tmpdir(), 'fleetlab-plans-'));
      db = openSqlite(join(dir, 'cloud.db'));
      cleanup = async () => {
        await db.close();
        await rm(dir, { recursive: true, force: true });
      };
    } else {
      cluster = await startPostgres();
      db = openPostgres(await cluster.createDatabase('plans'), { max: 2 });
      cleanup = async () => {
        await db.close();
        await cluster!.stop();
      };
    }
    ({ key, uuids } = await seed(db));
    [deviceKey] = await seedTargets(db);
    app = buildCloud({ db: recording(db, statements) });
    await app.ready();
  }, 120_000);
  afterAll(async () => {
    await app?.close();
    await cleanup?.();
  });

  const requests = () => [
    ...queryMix(uuids).map((q) => ({ id: q.id, what: `(${q.id}) ${q.label}`, url: q.url(3), key })),
    { id: 'state', what: 'device target state', url: `/device/v3/${deviceKey!.uuid}/state`, key: deviceKey!.key },
  ];

  it.each([...queryMix([]).map((q) => q.id), 'state'])('query (%s) of the mix reads no large table whole', async (which) => {
    const { id, what, url, key: k } = requests().find((r) => r.id === which)!;
    const allowed = new Set(ALLOWED[id]?.[kind] ?? []);
    statements.length = 0;
    const r = await app.inject({ method: 'GET', url: encodeURI(url), headers: { authorization: `Bearer ${k}` } });
    expect(r.statusCode, `${what}: ${r.body}`).toBe(200);
    expect(statements.length).toBeGreaterThan(0);
    const scans: string[] = [];
    for (const s of statements) {
      for (const [table, how] of await fullScans(db, s)) if (LARGE.has(table) && !allowed.has(table)) scans.push(`${table} (${how}) in ${s.sql}`);
    }
    expect(scans, what).toEqual([]);
  });

  it.runIf(kind === 'postgres')('query (d) reads the matching tags and their devices from indexes alone (migration 008)', async () => {
    const { url } = requests().find((r) => r.id === 'd')!;
    statements.length = 0;
    await app.inject({ method: 'GET', url: encodeURI(url), headers: { authorization: `Bearer ${key}` } });
    const count = statements.find((s) => s.sql.includes('COUNT'))!;
    const [row] = await db.query<{ 'QUERY PLAN': Array<{ Plan: PgNode & { 'Index Name'?: string } }> }>(`EXPLAIN (FORMAT JSON) ${count.sql}`, count.params);
    const indexOnly: string[] = [];
    const walk = (n: PgNode & { 'Index Name'?: string }) => {
      if (n['Node Type'] === 'Index Only Scan') indexOnly.push(`${n['Relation Name']} ${n['Index Name']}`);
      for (const c of n.Plans ?? []) walk(c);
    };
    walk(row!['QUERY PLAN'][0]!.Plan);
    expect(indexOnly.sort()).toEqual(['device device_id_application', 'device_tag device_tag_key_value_device']);
  });
});
