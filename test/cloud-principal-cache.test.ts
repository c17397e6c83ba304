/**
 * Principals kept by key (src/cloud/auth/principal-cache.ts) while the replica bus listens
 * for migration 007's notifications. Two replicas, each with its own pool and bus, on one
 * PostgreSQL database; the oracle is what a lookup of the key in the database says now.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey } from '../src/cloud/auth/keys.js';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { startPostgresBus, type ReplicaBus } from '../src/cloud/cluster/postgres-bus.js';
import type { Db } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { buildCloud } from '../src/cloud/server.js';
import WebSocket from 'ws';
import { eventually } from './helpers/engine-targets.js';
import { upgradeAnswer } from './helpers/tunnel-upgrade.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A Db that counts the key lookups it runs (principal.ts's query joins "api_key" k). */
function counting(db: Db): { db: Db; lookups: () => number } {
  let n = 0;
  const wrapped: Db = {
    dialect: db.dialect,
    query: (sql, params) => {
      if (sql.includes('FROM "api_key" k')) n++;
      return db.query(sql, params);
    },
    exec: (sql) => db.exec(sql),
    transaction: (fn) => db.transaction(fn),
    close: () => db.close(),
  };
  return { db: wrapped, lookups: () => n };
}

const NOTICE_MS = 5_000;

async function status(app: FastifyInstance, key: string, method = 'GET', url = '/v6/application', payload?: object): Promise<number> {
  const r = await app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${key}` }, ...(payload ? { payload } : {}) });
  return r.statusCode;
}

describe('principals kept by key on PostgreSQL', () => {
  let cluster: PostgresCluster;
  let plain: Db;
  const clock = { now: Date.now() };
  const replicas: Array<{ app: FastifyInstance; bus: ReplicaBus; db: Db; lookups: () => number }> = [];
  let a: (typeof replicas)[number], b: (typeof replicas)[number];
  let admin: string;
  let user: { apiKey: string; id: number };

  const newUserKey = async (app: FastifyInstance, key: string): Promise<string> => {
    const r = await app.inject({ method: 'POST', url: '/api-key/user/full', headers: { authorization: `Bearer ${key}` }, payload: { name: 'second' } });
    expect(r.statusCode).toBe(200);
    return JSON.parse(r.body) as string;
  };
  const keyId = async (key: string) => Number((await plain.query<{ id: number }>('SELECT id FROM "api_key" WHERE key_hash = ?', [hashKey(key)]))[0]!.id);

  beforeAll(async () => {
    cluster = await startPostgres();
    const url = await cluster.createDatabase('keys');
    plain = openPostgres(url, { max: 2 });
    admin = (await prepareDatabase(plain)).key!;
    for (const replica of ['0a', '0b']) {
      const pool = openPostgres(url, { max: 2 });
      const { db, lookups } = counting(pool);
      const bus = await startPostgresBus({ connectionString: url, db: pool, replica, log: { warn: () => undefined } });
      const app = buildCloud({ db, replicaBus: bus, replicaId: replica, now: () => new Date(clock.now) });
      await app.ready();
      replicas.push({ app, bus, db, lookups });
    }
    [a, b] = replicas as [typeof a, typeof b];
    const created = await a.app.inject({ method: 'POST', url: '/fleetlab/users', headers: { authorization: `Bearer ${admin}` }, payload: { username: 'ann' } });
    user = JSON.parse(created.body) as { apiKey: string; id: number };
  }, 120_000);
  afterAll(async () => {
    for (const r of replicas) {
      await r.app.close();
      await r.db.close();
    }
    await plain?.close();
    await cluster?.stop();
  });

  it('looks a key up once, then answers from memory', async () => {
    const before = b.lookups();
    for (let i = 0; i < 5; i++) expect(await status(b.app, user.apiKey)).toBe(200);
    expect(b.lookups() - before).toBe(1);
  });

  it('keeps its keys across a POST, which only adds records', async () => {
    expect(await status(b.app, user.apiKey)).toBe(200);
    const before = b.lookups();
    const org = (JSON.parse((await b.app.inject({ method: 'GET', url: '/v6/organization?$select=id', headers: { authorization: `Bearer ${user.apiKey}` } })).body) as { d: Array<{ id: number }> }).d[0]!.id;
    expect(await status(b.app, user.apiKey, 'POST', '/v6/application', { app_name: 'kept', organization: org, device_type: 'raspberrypi4-64' })).toBe(201);
    expect(await status(b.app, user.apiKey)).toBe(200);
    expect(b.lookups() - before).toBe(0);
  });

  it("authenticates a device's tunnel from the kept keys: a replica's devices reconnecting elsewhere cost no lookups", async () => {
    const org = (JSON.parse((await b.app.inject({ method: 'GET', url: '/v6/organization?$select=id', headers: { authorization: `Bearer ${user.apiKey}` } })).body) as { d: Array<{ id: number }> }).d[0]!.id;
    const fleet = JSON.parse((await b.app.inject({ method: 'POST', url: '/v6/application', headers: { authorization: `Bearer ${user.apiKey}` }, payload: { app_name: 'tunnels', organization: org, device_type: 'raspberrypi4-64' } })).body) as { id: number };
    const provisioning = JSON.parse((await b.app.inject({ method: 'POST', url: `/api-key/application/${fleet.id}/provisioning`, headers: { authorization: `Bearer ${user.apiKey}` }, payload: {} })).body) as string;
    const device = { uuid: 'ab'.repeat(16), key: 'tunnel-device-key-kept-000000000' };
    const reg = await b.app.inject({ method: 'POST', url: '/device/register', headers: { authorization: `Bearer ${provisioning}` }, payload: { uuid: device.uuid, api_key: device.key, device_type: 'raspberrypi4-64' } });
    expect(reg.statusCode).toBe(201);
    const base = await b.app.listen({ port: 0, host: '127.0.0.1' });
    // Its first request looks the key up; its tunnels after that do not.
    expect(await status(b.app, device.key, 'PATCH', '/device/v3/state', { [device.uuid]: { status: 'Idle' } })).toBe(200);
    const before = b.lookups();
    for (let i = 0; i < 3; i++) {
      const socket = new WebSocket(`${base.replace('http', 'ws')}/device/v3/${device.uuid}/tunnel`, { headers: { authorization: `Bearer ${device.key}` } });
      await new Promise<void>((resolve, reject) => {
        socket.once('open', () => resolve());
        socket.once('error', reject);
      });
      socket.close();
    }
    expect(b.lookups() - before).toBe(0);
    // A kept key still opens only its own device's tunnel.
    expect((await upgradeAnswer(base, `/device/v3/${'cd'.repeat(16)}/tunnel`, device.key)).status).toBe(401);
  });

  it('never keeps an unknown key', async () => {
    const before = b.lookups();
    for (let i = 0; i < 3; i++) expect(await status(b.app, 'no-such-key-000000000000')).toBe(401);
    expect(b.lookups() - before).toBe(3);
  });

  it('refuses a key revoked through one replica there at once, and on the other once notified', async () => {
    const second = await newUserKey(a.app, user.apiKey);
    expect(await status(a.app, second)).toBe(200);
    expect(await status(b.app, second)).toBe(200);
    expect(await status(b.app, second)).toBe(200);
    expect(await status(a.app, user.apiKey, 'DELETE', `/v6/api_key(${await keyId(second)})`)).toBe(200);
    expect(await status(a.app, second)).toBe(401);
    await eventually(async () => ((await status(b.app, second)) === 401 ? true : undefined), NOTICE_MS, 'the other replica refuses the revoked key');
    // The key still in use is looked up again and kept again.
    expect(await status(b.app, user.apiKey)).toBe(200);
  });

  it('follows a change made in the database by no replica (an admin flag set in SQL)', async () => {
    // Reads only: a change through a replica (PATCH, PUT, DELETE) clears its principals by
    // itself. A user sees only itself among the users; the admin sees every user.
    const usersSeen = async (app: FastifyInstance) => {
      const r = await app.inject({ method: 'GET', url: '/v6/user?$select=id', headers: { authorization: `Bearer ${user.apiKey}` } });
      expect(r.statusCode).toBe(200);
      return (JSON.parse(r.body) as { d: unknown[] }).d.length;
    };
    for (const r of [a, b]) expect(await usersSeen(r.app)).toBe(1);
    await plain.query('UPDATE "user" SET is_admin = TRUE WHERE id = ?', [user.id]);
    for (const r of [a, b]) await eventually(async () => ((await usersSeen(r.app)) > 1 ? true : undefined), NOTICE_MS, 'every user seen once the replica heard of the admin flag');
    await plain.query('UPDATE "user" SET is_admin = FALSE WHERE id = ?', [user.id]);
    for (const r of [a, b]) await eventually(async () => ((await usersSeen(r.app)) === 1 ? true : undefined), NOTICE_MS, 'the flag taken back');
  });

  it('checks a kept key against its expiry on every request', async () => {
    const third = await newUserKey(a.app, user.apiKey);
    await plain.query('UPDATE "api_key" SET expiry_date = ? WHERE key_hash = ?', [new Date(clock.now + 60_000).toISOString(), hashKey(third)]);
    // Kept once the update's own notification has come and gone: a request with no lookup.
    await eventually(
      async () => {
        const before = b.lookups();
        return (await status(b.app, third)) === 200 && b.lookups() === before ? true : undefined;
      },
      NOTICE_MS,
      'the key kept before its expiry',
    );
    clock.now += 120_000;
    expect(await status(b.app, third)).toBe(401);
  });

  it('keeps nothing while its listener is away, and forgets what changed meanwhile', async () => {
    const fourth = await newUserKey(a.app, user.apiKey);
    expect(await status(b.app, fourth)).toBe(200);
    // Every bus listener's session ends; each reconnects within a second.
    await plain.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`, []);
    await plain.query('DELETE FROM "api_key" WHERE key_hash = ?', [hashKey(fourth)]);
    await eventually(async () => ((await status(b.app, fourth)) === 401 ? true : undefined), NOTICE_MS, 'the key deleted while no one listened is refused');
    // Once back, keys are kept again.
    await eventually(
      async () => {
        const before = b.lookups();
        await status(b.app, user.apiKey);
        await status(b.app, user.apiKey);
        return b.lookups() - before <= 1 ? true : undefined;
      },
      NOTICE_MS,
      'the replica keeps keys again after reconnecting',
    );
  });
});

describe('principals on SQLite', () => {
  it('are looked up on every request: no replica hears of another one’s writes', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-keys-'));
    const { db, lookups } = counting(openSqlite(join(dir, 'cloud.db')));
    try {
      const key = (await prepareDatabase(db)).key!;
      const app = buildCloud({ db });
      await app.ready();
      for (let i = 0; i < 3; i++) expect(await status(app, key)).toBe(200);
      expect(lookups()).toBe(3);
      await app.close();
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
