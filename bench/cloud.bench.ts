/**
 * Cloud API query throughput on SQLite and PostgreSQL. Seeds 100 fleets and 10,000
 * devices (2 tags and 2 environment variables each) straight into the database, then
 * runs the query mix of support/cloud-bench-data.ts (a-m) through the whole fastify stack (`inject`, no
 * network) as an ordinary user, so every query carries the permission filter.
 *
 * Then the device target-state endpoint (`GET /device/v3/:uuid/state`, device key): every
 * fleet gets a 3-service release as its target, 2 environment and 2 config variables, and
 * 500 of the devices a key and 1 config variable; the figures are req/s and p50/p99
 * latency, one request at a time and 8 in flight, for a full answer (200) and for an
 * unchanged one (`If-None-Match` with the last ETag: 304).
 *
 * First, on a database of its own, the same fleets, devices and tags are seeded through the
 * API instead (30,100 POSTs, 16 in flight, as an ordinary user): issue 17's seeding figure.
 *
 *   npm run bench:cloud -- [--seconds N] [--db sqlite|postgres] [--no-api-seed]
 *
 * With `--peer pinejs`, fleetlab against pinejs instead, over HTTP: see bench/cloud-peer.ts.
 *
 * PostgreSQL runs in a throwaway cluster (support/postgres.ts). There the cloud runs as
 * `fleetlab cloud` does, with its replica bus, so it keeps principals by key; each query is
 * also measured without the bus (every request looks its key up), in alternating rounds,
 * and the ratio printed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance } from 'fastify';
import type { Db } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { startPostgresBus } from '../src/cloud/cluster/postgres-bus.js';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { buildCloud } from '../src/cloud/server.js';
import { API_SEED_CLIENTS, FLEETS, queryMix, seed, seedTargets, seedThroughApi, TARGET_SERVICES } from '../support/cloud-bench-data.js';
import { startPostgres } from '../support/postgres.js';
import { runPeerBench } from './cloud-peer.js';
import { percentile } from './percentile.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}


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

/** Issue 17's seeding figure: the mix's fleets, devices and tags POSTed through the API as an ordinary user. */
async function seedThroughInject(kind: string, db: Db, app: FastifyInstance): Promise<void> {
  const admin = (await prepareDatabase(db)).key!;
  await app.ready();
  const post = async (key: string, url: string, payload: object): Promise<{ id: number; uuid?: string; organization?: number; apiKey?: string }> => {
    const r = await app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${key}` }, payload });
    if (r.statusCode !== 201) throw new Error(`POST ${url}: ${r.statusCode} ${r.body}`);
    return JSON.parse(r.body) as { id: number };
  };
  const user = await post(admin, '/fleetlab/users', { username: 'seeder' });
  const key = user.apiKey!;
  const type = (JSON.parse((await app.inject({ method: 'GET', url: "/v6/device_type?$select=id&$filter=slug eq 'raspberrypi4-64'", headers: { authorization: `Bearer ${key}` } })).body) as { d: Array<{ id: number }> }).d[0]!.id;
  const seeded = await seedThroughApi((url, payload) => post(key, url, payload), { organization: user.organization!, deviceType: type });
  console.log(`${kind.padEnd(8)} seeded through the API: ${seeded.rows} rows (${FLEETS} fleets, ${seeded.uuids.length} devices, ${seeded.uuids.length * 2} tags) in ${seeded.seconds.toFixed(1)} s, ${(seeded.rows / seeded.seconds).toFixed(0)} POST/s, ${API_SEED_CLIENTS} in flight`);
  await app.close();
}

/** A cloud on `db`, and what its measured variant is called. */
interface Variant {
  name: string;
  app: FastifyInstance;
}

async function measure(kind: string, db: Db, seconds: number, variants: Variant[]): Promise<void> {
  const t0 = performance.now();
  const { key, uuids } = await seed(db);
  console.log(`${kind}: seeded ${FLEETS} fleets, ${uuids.length} devices, ${uuids.length * 2} tags, ${uuids.length * 2} env vars in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  for (const v of variants) await v.app.ready();
  let n = 0;
  const get = (app: FastifyInstance, q: ReturnType<typeof queryMix>[number]) => async () => {
    const r = await app.inject({ method: 'GET', url: encodeURI(q.url(n++)), headers: { authorization: `Bearer ${key}` } });
    if (r.statusCode !== 200) throw new Error(`(${q.id}) ${q.label}: ${r.statusCode} ${r.body}`);
  };
  for (const q of queryMix(uuids)) {
    // Two rounds per variant, in alternating order, each half the time.
    const counts = new Map(variants.map((v) => [v.name, { count: 0, ms: 0 }]));
    for (const round of [0, 1]) {
      for (const v of round ? [...variants].reverse() : variants) {
        const one = get(v.app, q);
        await one();
        const started = performance.now();
        const end = started + (seconds * 1000) / 2;
        let count = 0;
        while (performance.now() < end && count < 1_000_000) {
          await one();
          count++;
        }
        const c = counts.get(v.name)!;
        c.count += count;
        c.ms += performance.now() - started;
      }
    }
    const rps = (name: string) => (counts.get(name)!.count / counts.get(name)!.ms) * 1000;
    const line = variants.map((v) => `${rps(v.name).toFixed(0).padStart(6)} req/s ${v.name}`).join('  ');
    const ratio = variants.length > 1 ? `  (x${(rps(variants[0]!.name) / rps(variants[1]!.name)).toFixed(2)})` : '';
    console.log(`${kind.padEnd(8)} (${q.id}) ${q.label.padEnd(20)} ${line}${ratio}  (${((counts.get(variants[0]!.name)!.ms) / counts.get(variants[0]!.name)!.count).toFixed(2)} ms/req)`);
  }
  await measureTargetState(kind, db, variants[0]!.app, seconds);
  for (const v of variants) await v.app.close();
}

function usage(problem: string): never {
  console.error(`cloud bench: ${problem}\nusage: npm run bench:cloud -- [--db sqlite|postgres] [--seconds N] [--no-api-seed] | --peer pinejs [--db postgres|sqlite] [--seconds N] [--rounds N] [--queries a,b,...]`);
  process.exit(2);
}

async function main(): Promise<void> {
  const seconds = Number(arg('--seconds') ?? '3');
  if (!(seconds > 0)) usage(`--seconds must be a positive number, got ${arg('--seconds')}`);
  const only = arg('--db') ?? arg('--only');
  if (only !== undefined && only !== 'sqlite' && only !== 'postgres') usage(`--db must be sqlite or postgres, got ${only}`);
  const peer = arg('--peer');
  if (peer !== undefined) {
    if (peer !== 'pinejs') usage(`--peer: the one peer is pinejs, got ${peer}`);
    const rounds = Number(arg('--rounds') ?? '4');
    if (!Number.isInteger(rounds) || rounds < 1) usage(`--rounds must be a whole number from 1, got ${arg('--rounds')}`);
    const queries = arg('--queries')?.split(',');
    const known = queryMix([]).map((q) => q.id);
    const unknown = queries?.filter((q) => !known.includes(q));
    if (unknown?.length) usage(`--queries takes ids of the mix (${known.join(',')}), got ${unknown.join(',')}`);
    await runPeerBench({ db: only ?? 'postgres', seconds, rounds, ...(queries ? { queries } : {}) });
    return;
  }
  const apiSeed = !process.argv.includes('--no-api-seed');
  if (only !== 'postgres') {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-bench-'));
    const db = openSqlite(join(dir, 'cloud.db'));
    try {
      if (apiSeed) {
        const seeded = openSqlite(join(dir, 'api-seed.db'));
        await seedThroughInject('sqlite', seeded, buildCloud({ db: seeded })).finally(() => seeded.close());
      }
      await measure('sqlite', db, seconds, [{ name: '', app: buildCloud({ db }) }]);
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  }
  if (only !== 'sqlite') {
    const cluster = await startPostgres();
    const url = await cluster.createDatabase('bench');
    const db = openPostgres(url);
    try {
      if (apiSeed) {
        const seedUrl = await cluster.createDatabase('apiseed');
        const seeded = openPostgres(seedUrl);
        const seedBus = await startPostgresBus({ connectionString: seedUrl, db: seeded, replica: '0c', log: { warn: (m) => console.error(m) } });
        await seedThroughInject('postgres', seeded, buildCloud({ db: seeded, replicaBus: seedBus, replicaId: '0c' })).finally(() => seeded.close());
      }
      const bus = await startPostgresBus({ connectionString: url, db, replica: '0a', log: { warn: (m) => console.error(m) } });
      await measure('postgres', db, seconds, [
        { name: 'keys kept', app: buildCloud({ db, replicaBus: bus, replicaId: '0a' }) },
        { name: 'keys looked up', app: buildCloud({ db, replicaId: '0b' }) },
      ]);
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
