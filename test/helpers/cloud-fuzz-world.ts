/**
 * The world the cloud fuzz runs in: two users with fleets, devices, releases, variables and
 * keys, built once; every fuzz run starts from exactly that world (SQLite: a copy of the
 * database file; PostgreSQL: the tables a run changed are put back, since copying a
 * database costs more than the run), so a run sees the same world whatever ran before it,
 * and a counterexample replays and shrinks from its seed alone.
 */
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { prepareDatabase } from '../../src/cloud/bootstrap.js';
import type { Db, SqlValue } from '../../src/cloud/db/port.js';
import { openPostgres } from '../../src/cloud/db/postgres.js';
import { openSqlite } from '../../src/cloud/db/sqlite.js';
import { buildCloud } from '../../src/cloud/server.js';
import type { DbKind } from './cloud-fixture.js';
import { changedTables, snapshot, type Snapshot } from './db-snapshot.js';
import { startPostgres } from '../../support/postgres.js';

export type Who = 'alice' | 'bob' | 'admin' | 'aliceDevice' | 'bobDevice' | 'aliceProvisioning' | 'bobProvisioning';

/** What the fuzz can name: the world's keys, record ids and uuids. */
export interface FuzzFixture {
  keys: Record<Who, string>;
  /** Record ids by resource, the values a key or a link may name. */
  ids: Record<string, number[]>;
  uuids: string[];
  organizations: number[];
  /** Strings planted only in alice's private records: no answer to anyone but alice or the admin may carry one. */
  secrets: string[];
}

export interface Run {
  app: FastifyInstance;
  db: Db;
  close(): Promise<void>;
}

export interface FuzzWorld {
  fixture: FuzzFixture;
  /** A cloud over a fresh copy of the world. */
  run(): Promise<Run>;
  close(): Promise<void>;
}

async function populate(app: FastifyInstance, adminKey: string): Promise<FuzzFixture> {
  const call = async (key: string, method: string, url: string, payload?: unknown) => {
    const r = await app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${key}` }, ...(payload === undefined ? {} : { payload: payload as object }) });
    if (r.statusCode >= 300) throw new Error(`fuzz world: ${method} ${url}: ${r.statusCode} ${r.body}`);
    return JSON.parse(r.body || 'null') as { id: number; apiKey: string; organization: number; actor: number };
  };
  const alice = await call(adminKey, 'POST', '/fleetlab/users', { username: 'alice' });
  const bob = await call(adminKey, 'POST', '/fleetlab/users', { username: 'bob' });
  const secret = (n: number) => `S3CR3T-alice-${n}`;

  const A = (await call(alice.apiKey, 'POST', '/v6/application', { app_name: 'private', organization: alice.organization, device_type: 'raspberrypi4-64' })).id;
  const P = (await call(alice.apiKey, 'POST', '/v6/application', { app_name: 'public', organization: alice.organization, device_type: 'raspberrypi3', is_public: true })).id;
  const B = (await call(bob.apiKey, 'POST', '/v6/application', { app_name: 'bobs', organization: bob.organization, device_type: 'raspberrypi4-64' })).id;
  const rA = (await call(alice.apiKey, 'POST', '/v6/release', { belongs_to__application: A, commit: 'a1', status: 'success', note: secret(1), composition: { services: { main: { environment: { K: secret(2) } } } } })).id;
  const rB = (await call(bob.apiKey, 'POST', '/v6/release', { belongs_to__application: B, commit: 'b1', status: 'success' })).id;
  const sA = (await call(alice.apiKey, 'POST', '/v6/service', { application: A, service_name: 'main' })).id;
  const iA = (await call(alice.apiKey, 'POST', '/v6/image', { is_a_build_of__service: sA, is_stored_at__image_location: 'registry.local/alice/main:1', status: 'success', build_log: secret(3) })).id;
  const riA = (await call(alice.apiKey, 'POST', '/v6/release_image', { image: iA, is_part_of__release: rA })).id;
  await call(alice.apiKey, 'PATCH', `/v6/application(${A})`, { should_be_running__release: rA });
  const aev = (await call(alice.apiKey, 'POST', '/v6/application_environment_variable', { application: A, name: 'TOKEN', value: secret(4) })).id;
  const acv = (await call(alice.apiKey, 'POST', '/v6/application_config_variable', { application: A, name: 'SUPERVISOR_POLL_INTERVAL', value: '60000' })).id;
  const atag = (await call(alice.apiKey, 'POST', '/v6/application_tag', { application: A, tag_key: 'team', value: secret(5) })).id;

  const provA = JSON.parse((await app.inject({ method: 'POST', url: `/api-key/application/${A}/provisioning`, headers: { authorization: `Bearer ${alice.apiKey}` }, payload: {} })).body) as string;
  const provB = JSON.parse((await app.inject({ method: 'POST', url: `/api-key/application/${B}/provisioning`, headers: { authorization: `Bearer ${bob.apiKey}` }, payload: {} })).body) as string;
  const uuids = ['a'.repeat(32), 'b'.repeat(32), 'c'.repeat(62)];
  const aliceDevice = 'alice-device-key-0000000000000001';
  const bobDevice = 'bob-device-key-000000000000000001';
  const dA = (await call(provA, 'POST', '/device/register', { uuid: uuids[0], api_key: aliceDevice, device_type: 'raspberrypi4-64', device_name: 'alice-1' })).id;
  const dB = (await call(provB, 'POST', '/device/register', { uuid: uuids[1], api_key: bobDevice, device_type: 'raspberrypi4-64', device_name: 'bob-1' })).id;
  const dA2 = (await call(alice.apiKey, 'POST', '/v6/device', { belongs_to__application: P, uuid: uuids[2], device_name: 'alice-public-1', note: secret(6) })).id;
  const tag = (await call(alice.apiKey, 'POST', '/v6/device_tag', { device: dA, tag_key: 'room', value: secret(7) })).id;
  const dev = (await call(alice.apiKey, 'POST', '/v6/device_environment_variable', { device: dA, name: 'PASSWORD', value: secret(8) })).id;
  const dcv = (await call(alice.apiKey, 'POST', '/v6/device_config_variable', { device: dA, name: 'SUPERVISOR_LOCAL_MODE', value: '0' })).id;
  await call(aliceDevice, 'PATCH', '/device/v3/state', {
    [uuids[0]!]: { status: 'Idle', apps: { [A]: { release_id: rA, services: { main: { image: 'registry.local/alice/main:1', image_id: iA, status: 'Running', download_progress: null, release_id: rA } } } } },
  });
  const keyIds = JSON.parse((await app.inject({ method: 'GET', url: '/v6/api_key?$select=id', headers: { authorization: `Bearer ${adminKey}` } })).body) as { d: { id: number }[] };
  const installs = JSON.parse((await app.inject({ method: 'GET', url: '/v6/image_install?$select=id', headers: { authorization: `Bearer ${adminKey}` } })).body) as { d: { id: number }[] };
  return {
    keys: { alice: alice.apiKey, bob: bob.apiKey, admin: adminKey, aliceDevice, bobDevice, aliceProvisioning: provA, bobProvisioning: provB },
    ids: {
      application: [A, P, B],
      device: [dA, dB, dA2],
      release: [rA, rB],
      service: [sA],
      image: [iA],
      release_image: [riA],
      application_environment_variable: [aev],
      application_config_variable: [acv],
      application_tag: [atag],
      device_tag: [tag],
      device_environment_variable: [dev],
      device_config_variable: [dcv],
      image_install: installs.d.map((r) => r.id),
      api_key: keyIds.d.map((r) => r.id),
      user: [alice.id, bob.id],
      organization: [alice.organization, bob.organization],
    },
    uuids,
    organizations: [alice.organization, bob.organization],
    secrets: [1, 2, 3, 4, 5, 6, 7, 8].map(secret),
  };
}

async function build(db: Db): Promise<FuzzFixture> {
  const admin = await prepareDatabase(db);
  const app = buildCloud({ db });
  try {
    return await populate(app, admin.key!);
  } finally {
    await app.close();
  }
}

/**
 * The database port, forwarded to the current run's database: one cloud (its routes and
 * schemas compiled once, which costs more than a run) serves every run, each on its own copy.
 */
function forwardingDb(dialect: Db['dialect']): Db & { use(db: Db | null): void } {
  let current: Db | null = null;
  const db = () => {
    if (!current) throw new Error('fuzz world: no run is open');
    return current;
  };
  return {
    dialect,
    use: (next) => void (current = next),
    query: (sql, params) => db().query(sql, params),
    exec: (sql) => db().exec(sql),
    transaction: (fn) => db().transaction(fn),
    close: async () => undefined,
  };
}

/** Runs one at a time, each on a fresh copy that `open` makes and `drop` removes. */
async function worldOf(fixture: FuzzFixture, dialect: Db['dialect'], open: () => Promise<Db>, drop: () => Promise<void>, closeAll: () => Promise<void>): Promise<FuzzWorld> {
  const forward = forwardingDb(dialect);
  const app = buildCloud({ db: forward });
  await app.ready();
  return {
    fixture,
    async run() {
      const db = await open();
      forward.use(db);
      return {
        app,
        db,
        async close() {
          forward.use(null);
          await db.close();
          await drop();
        },
      };
    },
    async close() {
      await app.close();
      await closeAll();
    },
  };
}

/**
 * Puts back the tables that differ from `world`, with their rows and id sequences. Foreign
 * key triggers are off for the transaction (session_replication_role), so deleting a table's
 * rows cascades to nothing and the order of tables does not matter.
 */
async function restore(db: Db, world: Snapshot, now: Snapshot): Promise<void> {
  const changed = Object.keys(world).filter((t) => JSON.stringify(world[t]) !== JSON.stringify(now[t]));
  if (!changed.length) return;
  await db.transaction(async (tx) => {
    await tx.exec('SET LOCAL session_replication_role = replica');
    for (const table of changed) {
      await tx.exec(`DELETE FROM "${table}"`);
      for (const row of world[table] as Array<Record<string, SqlValue>>) {
        const cols = Object.keys(row);
        await tx.query(`INSERT INTO "${table}" (${cols.map((c) => `"${c}"`).join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`, cols.map((c) => row[c]!));
      }
      await tx.query(`SELECT setval(pg_get_serial_sequence('"${table}"', 'id'), COALESCE((SELECT max(id) FROM "${table}"), 0) + 1, false)`, []);
    }
  });
  const again = changedTables(world, await snapshot(db));
  if (again.length) throw new Error(`fuzz world: the restore left ${again.join(', ')} different`);
}

export async function fuzzWorld(kind: DbKind): Promise<FuzzWorld> {
  if (kind === 'sqlite') {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-cloud-fuzz-'));
    const template = join(dir, 'template.db');
    const db = openSqlite(template);
    // closing the last connection checkpoints the WAL into the file, so the file alone is the world
    const fixture = await build(db).finally(() => db.close());
    const file = join(dir, 'run.db');
    return worldOf(
      fixture,
      db.dialect,
      async () => {
        await copyFile(template, file);
        return openSqlite(file);
      },
      async () => void (await Promise.all(['', '-wal', '-shm'].map((s) => rm(file + s, { force: true })))),
      () => rm(dir, { recursive: true, force: true }),
    );
  }
  const cluster = await startPostgres();
  try {
    const db = openPostgres(await cluster.createDatabase('fuzz'), { max: 2 });
    const fixture = await build(db);
    const world = await snapshot(db);
    const kept: Db = { ...db, close: async () => undefined };
    return await worldOf(
      fixture,
      db.dialect,
      async () => kept,
      async () => restore(db, world, await snapshot(db)),
      async () => {
        await db.close();
        await cluster.stop();
      },
    );
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}
