/**
 * `npm run bench:cloud -- --peer pinejs`: fleetlab's cloud against pinejs, each its own
 * process on the same Node, over HTTP on loopback, asked by the same client.
 *
 * Both are seeded through their APIs alike (seedThroughApi: 100 fleets, 10,000 devices,
 * 20,000 tags, 16 POSTs in flight, as an ordinary user); then every query of the mix is
 * first checked to answer the same records on both, and then run with CLIENTS requests in
 * flight, in rounds that alternate which server goes first. Prints req/s, p50 and p99 per
 * server and query, and the ratio fleetlab / pinejs. pinejs runs on PostgreSQL; fleetlab on
 * the database --db names (PostgreSQL by default, in the same throwaway cluster). Last,
 * fleetlab's device state endpoint, which pinejs has no counterpart of, against its goal.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { postgresCpuMs, processCpuMs } from './cpu-time.js';
import { jsonClient, type JsonClient } from './http-client.js';
import { percentile } from './percentile.js';
import { benchNode, installPinejsPeer, pinejsVersion, startPinejsPeer } from './peers/pinejs.js';
import { openDatabase } from '../src/cloud/db/open.js';
import { fleetlabRoot } from '../src/package-root.js';
import { API_SEED_CLIENTS, queryMix, seedTargets, seedThroughApi, TARGET_SERVICES, type ApiSeed } from '../support/cloud-bench-data.js';
import { startPostgres } from '../support/postgres.js';
import { startReadyProcess, type ReadyProcess } from '../support/ready-process.js';

const CLIENTS = 16;
const GOAL = 2;

export interface PeerBenchOptions {
  /** fleetlab's database; pinejs always runs on PostgreSQL. */
  db: 'postgres' | 'sqlite';
  /** Seconds each server spends on each query, over all rounds. */
  seconds: number;
  rounds: number;
  /** Which of the mix to run (ids a-m); all when absent. */
  queries?: string[];
}

/** One server under test: its process, and a client of it as the seeded user. */
interface Server {
  name: string;
  process: ReadyProcess<unknown>;
  client: JsonClient;
  /** Where the seeded user's fleets go. */
  owner: { organization: number; deviceType: number };
  /** Its PostgreSQL database, whose backends' CPU is counted; none on SQLite. */
  database?: string;
  seed?: ApiSeed;
}

async function expectJson<T>(what: string, answer: Promise<{ status: number; body: string }>, status = 200): Promise<T> {
  const r = await answer;
  if (r.status !== status) throw new Error(`${what}: ${r.status} ${r.body.slice(0, 500)}`);
  return JSON.parse(r.body) as T;
}

async function startFleetlab(node: string, database: string, dataDir: string): Promise<Server> {
  const root = fleetlabRoot(import.meta.url);
  const proc = await startReadyProcess<{ url: string; adminKey: string }>(node, [join(root, 'bin', 'fleetlab.js'), 'cloud', '--host', '127.0.0.1', '--port', '0', '--database', database, '--data-dir', dataDir], {
    env: { ...process.env, NODE_ENV: 'production' },
    label: 'fleetlab cloud',
    timeoutMs: 60_000,
  });
  const admin = jsonClient(proc.ready.url, proc.ready.adminKey, 1);
  const user = await expectJson<{ apiKey: string; organization: number }>('POST /fleetlab/users', admin.post('/fleetlab/users', { username: 'bench' }), 201);
  admin.close();
  const client = jsonClient(proc.ready.url, user.apiKey, CLIENTS);
  const types = await expectJson<{ d: Array<{ id: number }> }>('device type', client.get(encodeURI("/v6/device_type?$select=id&$filter=slug eq 'raspberrypi4-64'")));
  return { name: 'fleetlab', process: proc, client, owner: { organization: user.organization, deviceType: types.d[0]!.id }, ...(database.startsWith('postgres') ? { database: new URL(database).pathname.slice(1) } : {}) };
}

async function startPinejs(node: string, database: string): Promise<Server> {
  const proc = await startPinejsPeer(database, node);
  return { name: 'pinejs', process: proc, client: jsonClient(proc.ready.url, proc.ready.key, CLIENTS), owner: proc.ready, database: new URL(database).pathname.slice(1) };
}

async function seedServer(server: Server): Promise<ApiSeed> {
  const seed = await seedThroughApi((path, payload) => expectJson(`${server.name}: POST ${path}`, server.client.post(path, payload), 201), server.owner);
  console.log(`${server.name.padEnd(8)} seeded through its API: ${seed.rows} rows in ${seed.seconds.toFixed(1)} s (${(seed.rows / seed.seconds).toFixed(0)} POST/s, ${API_SEED_CLIENTS} in flight)`);
  return seed;
}

/**
 * What both must agree on: the records without their ids (each numbered its own rows),
 * unordered collections sorted, and for a $top inside $expand without $orderby (which of
 * the records is unspecified) the number of records and their fields.
 */
export function comparable(body: unknown, opts: { ordered: boolean; shapeOnly?: string[] }): unknown {
  const walk = (v: unknown, key?: string): unknown => {
    if (Array.isArray(v)) {
      const items = v.map((x) => walk(x));
      if (key && opts.shapeOnly?.includes(key)) return { count: items.length, fields: [...new Set(items.flatMap((x) => (x && typeof x === 'object' ? Object.keys(x) : [])))].sort() };
      return opts.ordered && key === 'd' ? items : items.map((x) => JSON.stringify(x)).sort();
    }
    if (v && typeof v === 'object') {
      return Object.fromEntries(
        Object.entries(v)
          .filter(([k]) => k !== 'id')
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([k, x]) => [k, walk(x, k)]),
      );
    }
    return v;
  };
  return walk(body);
}

interface Figures {
  rps: number;
  p50: number;
  p99: number;
  /** CPU ms per request: the server's process, and its PostgreSQL backends. */
  serverCpu: number;
  dbCpu: number;
}

interface Tally {
  latencies: number[];
  ms: number;
  serverCpuMs: number;
  dbCpuMs: number;
}

const newTally = (): Tally => ({ latencies: [], ms: 0, serverCpuMs: 0, dbCpuMs: 0 });

/** A GET a bench sends: its path, the headers it adds, the status it must answer. */
interface Probe {
  path: string;
  headers?: Record<string, string>;
  status?: number;
}

/** `probe(n)` on one server for `ms`, `inFlight` at a time; adds to `acc`. */
async function run(server: Server, probe: (n: number) => Probe, ms: number, acc: Tally, postmaster: number, inFlight = CLIENTS): Promise<void> {
  let n = 0;
  const cpu = () => [processCpuMs(server.process.pid), server.database ? postgresCpuMs(postmaster, server.database) : NaN] as const;
  const [server0, db0] = cpu();
  const started = performance.now();
  const end = started + ms;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        const p = probe(n++);
        const r = await server.client.get(p.path, p.headers).catch(async (err: Error) => {
          // A server that died closes its sockets a moment before its exit is seen.
          await new Promise((resolve) => setTimeout(resolve, 1000));
          throw new Error(`${server.name}: GET ${p.path}: ${err.message}${server.process.gone() ? `; ${server.process.gone()}` : ' (it is still running)'}`);
        });
        if (r.status !== (p.status ?? 200)) throw new Error(`${server.name}: GET ${p.path}: ${r.status} ${r.body.slice(0, 300)}`);
        acc.latencies.push(performance.now() - t);
      }
    }),
  );
  acc.ms += performance.now() - started;
  const [server1, db1] = cpu();
  acc.serverCpuMs += server1 - server0;
  acc.dbCpuMs += db1 - db0;
}

const figures = (acc: Tally): Figures => {
  const sorted = [...acc.latencies].sort((a, b) => a - b);
  return { rps: (sorted.length / acc.ms) * 1000, p50: percentile(sorted, 50), p99: percentile(sorted, 99), serverCpu: acc.serverCpuMs / sorted.length, dbCpu: acc.dbCpuMs / sorted.length };
};

const STATE_IN_FLIGHT = 8;
const STATE_GOAL_RPS = 5_000;

/**
 * fleetlab's device target state endpoint over HTTP (pinejs has none): every fleet gets a
 * 3-service release as its target and 500 devices a key (seedTargets); each of them asks
 * for its state with STATE_IN_FLIGHT in flight, for the full answer (200) and with the ETag
 * it got (304).
 */
async function measureDeviceState(ours: Server, database: string, seconds: number, postmaster: number): Promise<{ full: Figures; unchanged: Figures }> {
  const db = openDatabase(database, 2);
  let keyed: Array<{ uuid: string; key: string }>;
  try {
    keyed = await seedTargets(db);
  } finally {
    await db.close();
  }
  const pick = (n: number) => keyed[(n * 7919) % keyed.length]!;
  const probe = (n: number, etag?: string): Probe => {
    const d = pick(n);
    return { path: `/device/v3/${d.uuid}/state`, headers: { authorization: `Bearer ${d.key}`, ...(etag ? { 'if-none-match': etag } : {}) }, status: etag ? 304 : 200 };
  };
  const etags = new Map<string, string>();
  for (const d of keyed) {
    const r = await ours.client.get(`/device/v3/${d.uuid}/state`, { authorization: `Bearer ${d.key}` });
    // What is measured is a real target: the seeded release's services.
    type State = Record<string, { apps: Record<string, { services?: Record<string, { serviceName: string }> }> }>;
    const services = r.status === 200 ? Object.values(JSON.parse(r.body) as State).flatMap((t) => Object.values(t.apps).flatMap((a) => Object.values(a.services ?? {}).map((x) => x.serviceName))) : [];
    if (!r.headers.etag || services.sort().join() !== [...TARGET_SERVICES].sort().join()) throw new Error(`fleetlab: device state of ${d.uuid} is not the seeded target: ${r.status} ${r.body.slice(0, 300)}`);
    etags.set(d.uuid, String(r.headers.etag));
  }
  const full = newTally();
  const unchanged = newTally();
  await run(ours, (n) => probe(n), seconds * 1000, full, postmaster, STATE_IN_FLIGHT);
  await run(ours, (n) => probe(n, etags.get(pick(n).uuid)), seconds * 1000, unchanged, postmaster, STATE_IN_FLIGHT);
  return { full: figures(full), unchanged: figures(unchanged) };
}

async function sql<T extends pg.QueryResultRow>(url: string, text: string): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(text)).rows;
  } finally {
    await c.end();
  }
}

export async function runPeerBench(opts: PeerBenchOptions): Promise<void> {
  await installPinejsPeer((l) => console.error(l));
  const node = benchNode();
  const cluster = await startPostgres();
  const dataDir = await mkdtemp(join(tmpdir(), 'fleetlab-peer-bench-'));
  const servers: Server[] = [];
  try {
    const peerUrl = await cluster.createDatabase('pinejs');
    const oursUrl = opts.db === 'postgres' ? await cluster.createDatabase('fleetlab') : `sqlite:${join(dataDir, 'cloud.db')}`;
    const pgVersion = (await sql<{ server_version: string }>(peerUrl, 'SHOW server_version'))[0]!.server_version;
    console.log(`fleetlab (${opts.db}) against @balena/pinejs ${pinejsVersion()} (PostgreSQL ${pgVersion}), both on Node ${node.version}, each its own process; ${CLIENTS} clients in flight, ${opts.rounds} alternating rounds, ${opts.seconds} s per server and query`);
    servers.push(await startFleetlab(node.path, oursUrl, dataDir));
    servers.push(await startPinejs(node.path, peerUrl));
    const [ours, peer] = servers as [Server, Server];
    for (const s of servers) s.seed = await seedServer(s);
    // What autovacuum does after such a load (statistics, and the visibility map that lets
    // an index answer alone), done now for both alike.
    await sql(peerUrl, 'VACUUM ANALYZE');
    if (opts.db === 'postgres') await sql(oursUrl, 'VACUUM ANALYZE');

    const mixes = new Map(servers.map((s) => [s.name, queryMix(s.seed!.uuids, s.seed!.deviceIds, s.seed!.fleetIds)]));
    const rows: Array<{ id: string; label: string; ours: Figures; peer: Figures }> = [];
    for (let qi = 0; qi < mixes.get(ours.name)!.length; qi++) {
      const q = (s: Server) => mixes.get(s.name)![qi]!;
      if (opts.queries && !opts.queries.includes(q(ours).id)) continue;
      const path = (s: Server) => (n: number) => encodeURI(q(s).url(n));
      // Both answer the same records before either is timed.
      for (const n of [0, 1, 2]) {
        const url = q(ours).url(n);
        const opts2 = { ordered: url.includes('$orderby'), shapeOnly: q(ours).unordered ?? [] };
        const [a, b] = await Promise.all(servers.map((s) => expectJson(`${s.name}: GET ${q(s).url(n)}`, s.client.get(path(s)(n)))));
        const [ca, cb] = [JSON.stringify(comparable(a, opts2)), JSON.stringify(comparable(b, opts2))];
        if (ca !== cb) throw new Error(`(${q(ours).id}) ${q(ours).label}: fleetlab and pinejs answer differently to request ${n}:\n  fleetlab ${ca.slice(0, 400)}\n  pinejs   ${cb.slice(0, 400)}`);
      }
      const acc = new Map(servers.map((s): [string, Tally] => [s.name, newTally()]));
      for (let round = 0; round < opts.rounds; round++) {
        for (const s of round % 2 ? [peer, ours] : [ours, peer]) await run(s, (n) => ({ path: path(s)(n) }), (opts.seconds * 1000) / opts.rounds, acc.get(s.name)!, cluster.postmasterPid());
      }
      const row = { id: q(ours).id, label: q(ours).label, ours: figures(acc.get(ours.name)!), peer: figures(acc.get(peer.name)!) };
      rows.push(row);
      const f = (x: Figures) =>
        `${x.rps.toFixed(0).padStart(6)} req/s  p50 ${x.p50.toFixed(1).padStart(5)}  p99 ${x.p99.toFixed(1).padStart(6)} ms  cpu/req ${x.serverCpu.toFixed(2)}${Number.isNaN(x.dbCpu) ? '' : ` + db ${x.dbCpu.toFixed(2)}`} ms`;
      console.log(`(${row.id}) ${row.label.padEnd(22)} fleetlab ${f(row.ours)} | pinejs ${f(row.peer)} | x${(row.ours.rps / row.peer.rps).toFixed(2)}`);
    }

    const state = await measureDeviceState(ours, oursUrl, opts.seconds, cluster.postmasterPid());
    const seedRatio = peer.seed!.seconds / ours.seed!.seconds;
    console.log('');
    console.log(`| figure | fleetlab (${opts.db}) | pinejs (postgres) | ratio | goal | met |`);
    console.log('|---|---|---|---|---|---|');
    for (const r of rows) {
      const ratio = r.ours.rps / r.peer.rps;
      console.log(`| (${r.id}) ${r.label}, req/s (p99 ms) | ${r.ours.rps.toFixed(0)} (${r.ours.p99.toFixed(1)}) | ${r.peer.rps.toFixed(0)} (${r.peer.p99.toFixed(1)}) | ${ratio.toFixed(2)}x | >= ${GOAL}x | ${ratio >= GOAL ? 'yes' : 'no'} |`);
    }
    console.log(`| seeding ${ours.seed!.rows} rows through the API, s | ${ours.seed!.seconds.toFixed(1)} | ${peer.seed!.seconds.toFixed(1)} | ${seedRatio.toFixed(2)}x | <= 13 s | ${ours.seed!.seconds <= 13 ? 'yes' : 'no'} |`);
    for (const [label, f] of [['200', state.full], ['304 (If-None-Match)', state.unchanged]] as const) {
      console.log(`| device state GET ${label}, ${STATE_IN_FLIGHT} in flight, req/s (p99 ms) | ${f.rps.toFixed(0)} (${f.p99.toFixed(1)}) | | | >= ${STATE_GOAL_RPS} | ${f.rps >= STATE_GOAL_RPS ? 'yes' : 'no'} |`);
    }
  } catch (err) {
    for (const s of servers) if (s.process.gone()) console.error(s.process.gone());
    throw err;
  } finally {
    for (const s of servers) {
      s.client.close();
      await s.process.stop();
    }
    await cluster.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}
