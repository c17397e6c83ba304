/**
 * Cloud API query throughput on SQLite and PostgreSQL. Seeds 100 fleets and 10,000
 * devices (2 tags and 2 environment variables each) straight into the database, then
 * runs the query mix of test/helpers/cloud-bench-data.ts (a-f) through the whole fastify stack (`inject`, no
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
import type { Db } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { buildCloud } from '../src/cloud/server.js';
import { FLEETS, queryMix, seed, seedTargets, TARGET_SERVICES } from '../test/helpers/cloud-bench-data.js';
import { startPostgres } from '../test/helpers/postgres.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
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
  for (const { id, label, url } of queryMix(uuids)) {
    const probe = await app.inject({ method: 'GET', url: encodeURI(url(n)), headers: { authorization: `Bearer ${key}` } });
    if (probe.statusCode !== 200) throw new Error(`(${id}) ${label}: ${probe.statusCode} ${probe.body}`);
    const end = performance.now() + seconds * 1000;
    let count = 0;
    const started = performance.now();
    while (performance.now() < end && count < 1_000_000) {
      n++;
      const r = await app.inject({ method: 'GET', url: encodeURI(url(n)), headers: { authorization: `Bearer ${key}` } });
      if (r.statusCode !== 200) throw new Error(`(${id}) ${label}: ${r.statusCode} ${r.body}`);
      count++;
    }
    const elapsed = (performance.now() - started) / 1000;
    console.log(`${kind.padEnd(8)} (${id}) ${label.padEnd(20)} ${(count / elapsed).toFixed(0).padStart(6)} req/s  ${((elapsed * 1000) / count).toFixed(2).padStart(7)} ms/req  (${count} requests)`);
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
