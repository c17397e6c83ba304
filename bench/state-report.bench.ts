/**
 * Where a device's state report spends its time on PostgreSQL: a cloud as `fleetlab cloud`
 * runs it (its replica bus, so keys are kept), `--devices` registered devices, and
 * `--concurrency` clients sending reports as a rollout does (each one changes the device's
 * install: downloading, then running) while as many poll their target state with the last
 * ETag, for `--seconds`. Requests go through the whole fastify stack (`inject`), in this
 * process, as a busy replica's event loop would be shared.
 *
 * What it prints, from the server's side:
 *   - reports/s and polls/s, and their p50/p99;
 *   - statements per report and the top statements by total time (pg_stat_statements,
 *     preloaded in this bench's cluster), with their calls and mean time;
 *   - how the cloud's connections spent the run, sampled every 20 ms from pg_stat_activity:
 *     running a statement, idle inside a transaction (held while the replica's event loop
 *     does something else), waiting on a lock, or idle in the pool.
 *
 *   node dist/bench/state-report.bench.js [--devices 2000] [--concurrency 32] [--seconds 20] [--pool 10]
 */
import { performance } from 'node:perf_hooks';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { startPostgresBus } from '../src/cloud/cluster/postgres-bus.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { buildCloud } from '../src/cloud/server.js';
import { startPostgres } from '../support/postgres.js';
import { percentile } from './percentile.js';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a whole number of at least 1`);
  return v;
}

const devices = arg('--devices', 2000);
const concurrency = arg('--concurrency', 32);
const seconds = arg('--seconds', 20);
const pool = arg('--pool', 10);

async function call(app: FastifyInstance, key: string, method: 'GET' | 'POST' | 'PATCH', url: string, payload?: object, headers: Record<string, string> = {}) {
  const r = await app.inject({ method, url, headers: { authorization: `Bearer ${key}`, ...headers }, ...(payload ? { payload } : {}) });
  if (r.statusCode >= 400) throw new Error(`${method} ${url}: ${r.statusCode} ${r.body}`);
  return r;
}

const summary = (ms: number[]) => {
  const sorted = [...ms].sort((a, b) => a - b);
  return `p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms`;
};

const cluster = await startPostgres({ settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' } });
try {
  const url = await cluster.createDatabase('profile');
  const db = openPostgres(url, { max: pool });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  try {
    const { key: adminKey } = await prepareDatabase(db);
    const bus = await startPostgresBus({ connectionString: url, db, replica: '0a', log: { warn: (m) => console.error(m) } });
    const app = buildCloud({ db, replicaBus: bus, replicaId: '0a' });
    await app.ready();
    const json = (r: { body: string }) => JSON.parse(r.body) as { id: number; d: Array<{ id: number }> };
    const org = json(await call(app, adminKey!, 'GET', `/v6/organization?$filter=handle eq 'admin'`)).d[0]!.id;
    const fleet = json(await call(app, adminKey!, 'POST', '/v6/application', { app_name: 'profile', organization: org, device_type: 'raspberrypi3' })).id;
    const release = json(await call(app, adminKey!, 'POST', '/v6/release', { belongs_to__application: fleet, commit: 'r1', status: 'success' })).id;
    const service = json(await call(app, adminKey!, 'POST', '/v6/service', { application: fleet, service_name: 'main' })).id;
    const image = json(await call(app, adminKey!, 'POST', '/v6/image', { is_a_build_of__service: service, is_stored_at__image_location: 'registry.local/main:1', status: 'success' })).id;
    await call(app, adminKey!, 'POST', '/v6/release_image', { image, is_part_of__release: release });
    await call(app, adminKey!, 'PATCH', `/v6/application(${fleet})`, { should_be_running__release: release });
    const provisioning = JSON.parse((await call(app, adminKey!, 'POST', `/api-key/application/${fleet}/provisioning`, {})).body) as string;
    const fleetDevices: Array<{ uuid: string; key: string; etag: string; running: boolean }> = [];
    for (let i = 0; i < devices; i++) {
      const d = { uuid: i.toString(16).padStart(32, '0'), key: `profile-device-key-${String(i).padStart(8, '0')}`, etag: '', running: false };
      await call(app, provisioning, 'POST', '/device/register', { uuid: d.uuid, api_key: d.key, device_type: 'raspberrypi3' });
      fleetDevices.push(d);
    }
    const reportOf = (d: (typeof fleetDevices)[number]) => ({
      [d.uuid]: {
        status: d.running ? 'Idle' : 'Updating',
        apps: { [fleet]: { release_id: release, services: { main: { image: 'registry.local/main:1', image_id: image, status: d.running ? 'Running' : 'Downloading', download_progress: d.running ? 100 : 50, release_id: release } } } },
      },
    });
    // Every device has reported once (its install exists), as in a fleet's steady state.
    for (const d of fleetDevices) await call(app, d.key, 'PATCH', '/device/v3/state', reportOf(d));

    /** One timed phase: reports (and polls, when asked) from `concurrency` clients each. */
    const phase = async (withPolls: boolean) => {
      await admin.query('SELECT pg_stat_statements_reset()');
      const reports: number[] = [];
      const polls: number[] = [];
      const states = new Map<string, number>();
      const end = performance.now() + seconds * 1000;
      const sampler = (async () => {
        while (performance.now() < end) {
          const rows = await admin.query<{ state: string; wait: string | null; n: number }>(
            `SELECT state, wait_event_type AS wait, count(*)::int AS n FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND query NOT LIKE 'LISTEN%' GROUP BY 1, 2`,
          );
          for (const r of rows.rows) {
            const key = r.wait === 'Lock' ? 'waiting on a lock' : r.state === 'active' ? 'running a statement' : r.state === 'idle in transaction' ? 'idle inside a transaction' : 'idle in the pool';
            states.set(key, (states.get(key) ?? 0) + r.n);
          }
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      let next = 0;
      const started = performance.now();
      await Promise.all([
        ...Array.from({ length: concurrency }, async () => {
          while (performance.now() < end) {
            const d = fleetDevices[next++ % fleetDevices.length]!;
            d.running = !d.running;
            const t = performance.now();
            await call(app, d.key, 'PATCH', '/device/v3/state', reportOf(d));
            reports.push(performance.now() - t);
          }
        }),
        ...Array.from({ length: withPolls ? concurrency : 0 }, async (_, w) => {
          for (let i = w; performance.now() < end; i += concurrency) {
            const d = fleetDevices[i % fleetDevices.length]!;
            const t = performance.now();
            const r = await call(app, d.key, 'GET', `/device/v3/${d.uuid}/state`, undefined, d.etag ? { 'if-none-match': d.etag } : {});
            d.etag = String(r.headers.etag ?? '');
            polls.push(performance.now() - t);
          }
        }),
      ]);
      const elapsed = (performance.now() - started) / 1000;
      await sampler;
      // The bench's own queries and the replica's heartbeat (a few a second) are not the cloud's requests.
      const mine = `dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat%' AND query NOT LIKE '%cloud_replica%' AND query NOT LIKE '%cloud_message%'`;
      const top = await admin.query<{ query: string; calls: number; total: number; mean: number }>(
        `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls::int AS calls, total_exec_time AS total, mean_exec_time AS mean FROM pg_stat_statements WHERE ${mine} ORDER BY total_exec_time DESC LIMIT 10`,
      );
      const calls = Number((await admin.query<{ n: string }>(`SELECT coalesce(sum(calls), 0) AS n FROM pg_stat_statements WHERE ${mine}`)).rows[0]!.n);
      const sampled = [...states.values()].reduce((a, b) => a + b, 0);
      console.log(`\n${withPolls ? 'reports and target-state polls' : 'reports alone'}: ${devices} devices, ${concurrency} clients ${withPolls ? 'reporting and as many polling' : 'reporting'}, pool ${pool}, ${seconds} s`);
      console.log(`reports: ${(reports.length / elapsed).toFixed(0)}/s, ${summary(reports)}`);
      if (withPolls) console.log(`polls:   ${(polls.length / elapsed).toFixed(0)}/s, ${summary(polls)}`);
      if (!withPolls) console.log(`statements a report: ${(calls / reports.length).toFixed(2)} (BEGIN and COMMIT count as statements; each is a round trip)`);
      console.log(`the cloud's ${pool} connections, sampled every 20 ms: ${[...states].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${((100 * n) / sampled).toFixed(0)}%`).join(', ')}`);
      // Stats reach the view within a second of each transaction (PostgreSQL 15); HOT updates need room in the row's page.
      await new Promise((r) => setTimeout(r, 1500));
      const hot = await admin.query<{ relname: string; upd: string; hot: string; dead: string }>(
        `SELECT relname, n_tup_upd AS upd, n_tup_hot_upd AS hot, n_dead_tup AS dead FROM pg_stat_user_tables WHERE relname IN ('device', 'image_install') ORDER BY 1`,
      );
      console.log(`updates that were HOT (no index touched), since the cluster started: ${hot.rows.map((r) => `${r.relname} ${r.hot}/${r.upd} (${r.dead} dead rows)`).join(', ')}`);
      console.log('\n| calls | total ms | mean ms | statement |\n|---|---|---|---|');
      for (const t of top.rows) console.log(`| ${t.calls} | ${Number(t.total).toFixed(0)} | ${Number(t.mean).toFixed(3)} | ${t.query.slice(0, 140)} |`);
    };
    await phase(false);
    await phase(true);
    await app.close();
  } finally {
    await admin.end();
    await db.close();
  }
} finally {
  await cluster.stop();
}
