/**
 * Cloud API query throughput on SQLite and PostgreSQL. Seeds 100 fleets and 10,000
 * devices (2 tags and 2 environment variables each) straight into the database, then
 * runs a fixed mix of OData requests through the whole fastify stack (`inject`, no
 * network) as an ordinary user, so every query carries the permission filter.
 *
 * Then the device target-state endpoint (`GET /device/v3/:uuid/state`, device key): every
 * fleet gets a 3-service release as its target, 2 environment and 2 config variables, and
 * 500 of the devices a key and 1 config variable; the figures are req/s and p50/p99
 * latency, one request at a time and 8 in flight, for a full answer (200) and for an
 * unchanged one (`If-None-Match` with the last ETag: 304).
 *
 *   npx tsx bench/cloud.bench.ts [--seconds N] [--only sqlite|postgres]
 *
 * PostgreSQL runs in a throwaway cluster (test/helpers/postgres.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance } from 'fastify';
import { createUser } from '../src/cloud/api/key-routes.js';
import { storeApiKey } from '../src/cloud/auth/keys.js';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import type { Db, SqlValue } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { buildCloud } from '../src/cloud/server.js';
import { startPostgres } from '../test/helpers/postgres.js';

const FLEETS = 100;
const DEVICES_PER_FLEET = 100;

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function insertMany(db: Db, table: string, cols: string[], rows: SqlValue[][]): Promise<number[]> {
  const ids: number[] = [];
  const per = Math.max(1, Math.floor(900 / cols.length));
  for (let i = 0; i < rows.length; i += per) {
    const chunk = rows.slice(i, i + per);
    const values = chunk.map(() => `(${cols.map(() => '?').join(', ')})`).join(', ');
    const res = await db.query<{ id: number }>(`INSERT INTO "${table}" (${cols.map((c) => `"${c}"`).join(', ')}) VALUES ${values} RETURNING id`, chunk.flat());
    ids.push(...res.map((r) => Number(r.id)).sort((a, b) => a - b));
  }
  return ids;
}

export async function seed(db: Db): Promise<{ key: string; uuids: string[] }> {
  await prepareDatabase(db);
  const now = new Date().toISOString();
  const user = await createUser(db, { username: 'bench', email: null, isAdmin: false, now: new Date() });
  const uuids: string[] = [];
  await db.transaction(async (tx) => {
    const type = Number((await tx.query<{ id: number }>('SELECT id FROM "device_type" WHERE slug = ?', ['raspberrypi4-64']))[0]!.id);
    const appActors = await insertMany(tx, 'actor', ['created_at'], Array.from({ length: FLEETS }, () => [now]));
    const apps = await insertMany(
      tx,
      'application',
      ['created_at', 'app_name', 'slug', 'uuid', 'actor', 'organization', 'is_for__device_type'],
      appActors.map((actor, i) => [now, `fleet-${i}`, `bench/fleet-${i}`, `app${i.toString(16).padStart(30, '0')}`, actor, user.organization, type]),
    );
    const devActors = await insertMany(tx, 'actor', ['created_at'], Array.from({ length: FLEETS * DEVICES_PER_FLEET }, () => [now]));
    const devRows: SqlValue[][] = devActors.map((actor, i) => {
      const uuid = `dev${i.toString(16).padStart(29, '0')}`;
      uuids.push(uuid);
      return [now, now, uuid, `device-${i}`, actor, apps[Math.floor(i / DEVICES_PER_FLEET)]!, type, i % 3 !== 0, i % 2 ? 'balenaOS 6.0.0' : 'balenaOS 5.1.0'];
    });
    const devices = await insertMany(tx, 'device', ['created_at', 'modified_at', 'uuid', 'device_name', 'actor', 'belongs_to__application', 'is_of__device_type', 'is_online', 'os_version'], devRows);
    await insertMany(tx, 'device_tag', ['created_at', 'device', 'tag_key', 'value'], devices.flatMap((d, i) => [[now, d, 'env', i % 4 ? 'prod' : 'dev'], [now, d, 'rack', String(i % 20)]]));
    await insertMany(tx, 'device_environment_variable', ['created_at', 'device', 'name', 'value'], devices.flatMap((d, i) => [[now, d, 'MODE', i % 2 ? 'a' : 'b'], [now, d, 'LEVEL', String(i % 10)]]));
  });
  return { key: user.apiKey, uuids };
}

const TARGET_SERVICES = ['web', 'worker', 'cache'];
const KEYED_DEVICES = 500;

/**
 * Gives every fleet a 3-service release as its target, with fleet environment and config
 * variables, and every 20th device (500) a device key and a config variable of its own.
 */
export async function seedTargets(db: Db): Promise<Array<{ uuid: string; key: string }>> {
  const now = new Date().toISOString();
  const composition = JSON.stringify({
    services: Object.fromEntries(
      TARGET_SERVICES.map((name) => [name, { labels: { 'io.balena.features.supervisor-api': '1' }, environment: { SERVICE: name }, volumes: [`${name}-data:/data`], restart: 'always' }]),
    ),
    volumes: Object.fromEntries(TARGET_SERVICES.map((name) => [`${name}-data`, {}])),
  });
  const keyed: Array<{ uuid: string; key: string }> = [];
  await db.transaction(async (tx) => {
    const apps = (await tx.query<{ id: number }>('SELECT id FROM "application" ORDER BY id', [])).map((a) => Number(a.id));
    const releases = await insertMany(tx, 'release', ['created_at', 'belongs_to__application', 'commit', 'status', 'composition', 'semver'], apps.map((a) => [now, a, `commit${a}`, 'success', composition, '1.0.0']));
    const services = await insertMany(tx, 'service', ['created_at', 'application', 'service_name'], apps.flatMap((a) => TARGET_SERVICES.map((name) => [now, a, name])));
    const images = await insertMany(tx, 'image', ['created_at', 'is_a_build_of__service', 'is_stored_at__image_location', 'status', 'image_size'], services.map((svc, i) => [now, svc, `registry.local/v2/${i}@sha256:${'0'.repeat(64)}`, 'success', 50_000_000]));
    await insertMany(tx, 'image__is_part_of__release', ['created_at', 'image', 'is_part_of__release'], images.map((img, i) => [now, img, releases[Math.floor(i / TARGET_SERVICES.length)]!]));
    for (let i = 0; i < apps.length; i++) await tx.query('UPDATE "application" SET should_be_running__release = ? WHERE id = ?', [releases[i]!, apps[i]!]);
    await insertMany(tx, 'application_environment_variable', ['created_at', 'application', 'name', 'value'], apps.flatMap((a) => [[now, a, 'MODE', 'fleet'], [now, a, 'REGION', 'eu']]));
    await insertMany(tx, 'application_config_variable', ['created_at', 'application', 'name', 'value'], apps.flatMap((a) => [[now, a, 'HOST_CONFIG_gpu_mem', '64'], [now, a, 'SUPERVISOR_POLL_INTERVAL', '900000']]));
    const devices = await tx.query<{ id: number; uuid: string; actor: number }>('SELECT id, uuid, actor FROM "device" WHERE id % 20 = 0 ORDER BY id', []);
    for (const d of devices.slice(0, KEYED_DEVICES)) {
      const key = `bench-device-key-${d.uuid}`;
      await storeApiKey(tx, Number(d.actor), key, { name: 'device key' });
      keyed.push({ uuid: d.uuid, key });
    }
    await insertMany(tx, 'device_config_variable', ['created_at', 'device', 'name', 'value'], devices.slice(0, KEYED_DEVICES).map((d) => [now, Number(d.id), 'HOST_CONFIG_gpu_mem', '128']));
  });
  return keyed;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

/** Runs `one` for `seconds` with `concurrency` in flight; prints req/s and p50/p99. */
async function timed(kind: string, label: string, seconds: number, concurrency: number, one: (n: number) => Promise<void>): Promise<void> {
  const latencies: number[] = [];
  let n = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        await one(n++);
        latencies.push(performance.now() - t);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  console.log(
    `${kind.padEnd(8)} ${label.padEnd(24)} ${(latencies.length / elapsed).toFixed(0).padStart(6)} req/s  p50 ${percentile(latencies, 50).toFixed(2).padStart(6)} ms  p99 ${percentile(latencies, 99).toFixed(2).padStart(6)} ms  (${latencies.length} requests)`,
  );
}

async function measureTargetState(kind: string, db: Db, app: FastifyInstance, seconds: number): Promise<void> {
  const t0 = performance.now();
  const keyed = await seedTargets(db);
  console.log(`${kind}: ${keyed.length} device keys, ${FLEETS} releases of ${TARGET_SERVICES.length} services, fleet env+config vars in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const get = (i: number, etag?: string) => {
    const d = keyed[(i * 7919) % keyed.length]!;
    return app.inject({ method: 'GET', url: `/device/v3/${d.uuid}/state`, headers: { authorization: `Bearer ${d.key}`, ...(etag ? { 'if-none-match': etag } : {}) } });
  };
  // What is measured is a real target: 3 services, merged variables, config.
  const probe = await get(0);
  if (probe.statusCode !== 200) throw new Error(`target state: ${probe.statusCode} ${probe.body}`);
  const target = Object.values(JSON.parse(probe.body) as Record<string, { config: Record<string, string>; apps: Record<string, { services: Record<string, { environment: Record<string, string> }> }> }>)[0]!;
  const services = Object.values(Object.values(target.apps)[0]?.services ?? {});
  if (services.length !== TARGET_SERVICES.length || services[0]!.environment.REGION !== 'eu' || !('LEVEL' in services[0]!.environment) || target.config.HOST_CONFIG_gpu_mem !== '128') {
    throw new Error(`target state is not the seeded one: ${probe.body}`);
  }
  const etags = new Map<number, string>();
  for (let i = 0; i < keyed.length; i++) {
    const r = await get(i);
    etags.set((i * 7919) % keyed.length, String(r.headers.etag));
  }
  const full = async (n: number) => {
    const r = await get(n);
    if (r.statusCode !== 200) throw new Error(`target state: ${r.statusCode} ${r.body}`);
  };
  const unchanged = async (n: number) => {
    const r = await get(n, etags.get((n * 7919) % keyed.length));
    if (r.statusCode !== 304) throw new Error(`target state with If-None-Match: ${r.statusCode} ${r.body}`);
  };
  await timed(kind, 'target state 200', seconds, 1, full);
  await timed(kind, 'target state 200 x8', seconds, 8, full);
  await timed(kind, 'target state 304', seconds, 1, unchanged);
  await timed(kind, 'target state 304 x8', seconds, 8, unchanged);
}

async function measure(kind: string, db: Db, seconds: number): Promise<void> {
  const t0 = performance.now();
  const { key, uuids } = await seed(db);
  console.log(`${kind}: seeded ${FLEETS} fleets, ${uuids.length} devices, ${uuids.length * 2} tags, ${uuids.length * 2} env vars in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const app = buildCloud({ db });
  await app.ready();
  let n = 0;
  const mix: [string, () => string][] = [
    ['filter through a link', () => `/v6/device?$select=id,device_name&$filter=belongs_to__application/app_name eq 'fleet-${n % FLEETS}' and is_online eq true`],
    ['$expand two levels', () => `/v6/application?$select=app_name&$filter=app_name eq 'fleet-${n % FLEETS}'&$expand=owns__device($select=device_name;$top=20;$expand=device_tag($select=tag_key,value))`],
    ['$count with any()', () => `/v6/device/$count?$filter=device_tag/any(t:t/tag_key eq 'rack' and t/value eq '${n % 20}')`],
    ['key lookup by uuid', () => `/v6/device(uuid='${uuids[(n * 7919) % uuids.length]}')?$select=id,device_name,is_online`],
  ];
  for (const [label, url] of mix) {
    const probe = await app.inject({ method: 'GET', url: encodeURI(url()), headers: { authorization: `Bearer ${key}` } });
    if (probe.statusCode !== 200) throw new Error(`${label}: ${probe.statusCode} ${probe.body}`);
    const end = performance.now() + seconds * 1000;
    let count = 0;
    const started = performance.now();
    while (performance.now() < end && count < 1_000_000) {
      n++;
      const r = await app.inject({ method: 'GET', url: encodeURI(url()), headers: { authorization: `Bearer ${key}` } });
      if (r.statusCode !== 200) throw new Error(`${label}: ${r.statusCode} ${r.body}`);
      count++;
    }
    const elapsed = (performance.now() - started) / 1000;
    console.log(`${kind.padEnd(8)} ${label.padEnd(24)} ${(count / elapsed).toFixed(0).padStart(6)} req/s  ${((elapsed * 1000) / count).toFixed(2).padStart(7)} ms/req  (${count} requests)`);
  }
  await measureTargetState(kind, db, app, seconds);
  await app.close();
}

async function main(): Promise<void> {
  const seconds = Number(arg('--seconds') ?? '3');
  const only = arg('--only');
  if (only !== 'postgres') {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-bench-'));
    const db = openSqlite(join(dir, 'cloud.db'));
    try {
      await measure('sqlite', db, seconds);
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  }
  if (only !== 'sqlite') {
    const cluster = await startPostgres();
    const db = openPostgres(await cluster.createDatabase('bench'));
    try {
      await measure('postgres', db, seconds);
    } finally {
      await db.close();
      await cluster.stop();
    }
  }
}

// Runs when executed, not when imported (a probe may reuse `seed`).
if (process.argv[1]?.endsWith('cloud.bench.ts') || process.argv[1]?.endsWith('cloud.bench.js')) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
