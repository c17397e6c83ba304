/**
 * Fleet simulation at scale: N virtual devices (sim/fleet, in this process or in worker
 * processes when one process's open-file limit does not hold them) against a fleetlab cloud in
 * its own process: on SQLite, or on PostgreSQL with one or more replicas behind a TCP balancer.
 * For each size:
 *
 *   start      wall time to start the devices (spread over one poll interval, as a fleet comes up)
 *   converge1  from the last device started to every device applying the fleet's first release
 *   steady     one poll interval with nothing to do (after the last reports of release 1):
 *              target-state polls/s, p50, p99
 *   rollout    a new release: time until every device has applied it, polls/s, reports/s, p99
 *   memory     the fleet processes' RSS, per 1,000 devices, and their peak (each process's
 *              high-water mark, summed); the cloud processes' RSS
 *
 * With two or more replicas: before the rollout, the proxy calls 20 devices through each
 * replica (each device's tunnel is on one of them); half way through the rollout the first
 * replica is killed with SIGKILL; the rollout must still reach every device, and the proxy
 * calls the same 20 through the survivor.
 *
 *   npm run bench:fleet -- [--devices 1000,10000] [--poll-interval-ms 60000]
 *                          [--db sqlite|postgres] [--replicas 1] [--workers auto|N]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';
import { fleetRelease } from '../hil/harness/fleet.js';
import { fleetProgress, publishRelease } from '../hil/release/publish.js';
import { cliCommand } from '../sim/entry.js';
import { processesFor } from '../sim/fleet/fd-budget.js';
import { DEFAULT_REPORT_INTERVAL_MS, type FleetCounts } from '../sim/fleet/fleet.js';
import { startFleetControl, type FleetControl } from '../sim/fleet/fleet-workers.js';
import { describeHealth } from '../sim/fleet/process-health.js';
import { provisioningKeyFor } from '../sim/fleet/provisioning.js';
import { describeUnsettled } from '../sim/fleet/unsettled.js';
import { describeCounts } from '../sim/fleet/run.js';
import { startBalancer, type Balancer } from '../sim/network/balancer.js';
import { startPostgres } from '../support/postgres.js';
import { Teardown } from '../src/teardown.js';
import { postgresServerCpuMs, processCpuMs } from './cpu-time.js';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : fallback;
}

const sizes = arg('--devices', '1000,10000').split(',').map(Number);
const pollIntervalMs = Number(arg('--poll-interval-ms', '60000'));
const dbKind = arg('--db', 'sqlite');
const replicaCount = Number(arg('--replicas', '1'));
const workersArg = arg('--workers', 'auto');
if (dbKind !== 'sqlite' && dbKind !== 'postgres') throw new Error(`--db must be sqlite or postgres, got ${dbKind}`);
if (!Number.isInteger(replicaCount) || replicaCount < 1) throw new Error(`--replicas must be a whole number of at least 1, got ${replicaCount}`);
if (replicaCount > 1 && dbKind !== 'postgres') throw new Error('--replicas above 1 needs --db postgres: replicas share one PostgreSQL database');
if (workersArg !== 'auto' && !(Number(workersArg) >= 1)) throw new Error(`--workers must be auto or a whole number, got ${workersArg}`);
// /dev/shm when there is one: ten thousand devices' state files are not what is measured.
const scratch = (() => {
  try {
    readFileSync('/dev/shm/.', { flag: 'r' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EISDIR') return '/dev/shm';
  }
  return tmpdir();
})();

const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;

interface Replica {
  url: string;
  child: ChildProcess;
}

/** Waits this long for a stopped cloud process to go before killing it. */
const REPLICA_STOP_MS = 30_000;

/**
 * Starts one cloud process. It is on `teardown` from the moment it is spawned, so a signal
 * while it starts (PostgreSQL's migrations take seconds) stops it too.
 */
async function startReplica(args: string[], teardown: Teardown): Promise<Replica & { adminKey: string }> {
  const { file, args: argv } = cliCommand(['cloud', '--port', '0', ...args]);
  const child = spawn(file, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
  const running = () => child.exitCode === null && child.signalCode === null;
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  teardown.defer({
    name: `cloud process ${child.pid}`,
    async stop() {
      if (!running()) return;
      child.kill('SIGTERM');
      const late = setTimeout(() => child.kill('SIGKILL'), REPLICA_STOP_MS);
      await exited;
      clearTimeout(late);
    },
    kill: () => void child.kill('SIGKILL'),
  });
  for await (const line of createInterface({ input: child.stdout! })) {
    const ready = JSON.parse(line) as { event?: string; url?: string; adminKey?: string };
    if (ready.event === 'ready') return { url: ready.url!, adminKey: ready.adminKey!, child };
  }
  throw new Error('the cloud exited before it was ready');
}

/** The cloud of one run: its processes, and the URL devices and users reach it by. */
interface BenchCloud {
  url: string;
  adminKey: string;
  replicas: Replica[];
  /** PostgreSQL's main process, whose server's CPU the progress lines give. */
  postgres?: { postmaster: number };
}

/**
 * Starts the run's cloud; everything it starts goes on `teardown` as it is started (a start
 * still under way as its promise, which the teardown awaits and then stops), so a failure or
 * a signal at any point leaves nothing running.
 */
async function startCloud(dir: string, devices: number, teardown: Teardown): Promise<BenchCloud> {
  const replicas: Replica[] = [];
  if (dbKind === 'sqlite') {
    const only = await startReplica(['--data-dir', join(dir, 'cloud')], teardown);
    replicas.push(only);
    return { url: only.url, adminKey: only.adminKey, replicas };
  }
  const pgStarting = startPostgres();
  teardown.defer({ name: 'PostgreSQL', stop: async () => (await pgStarting.catch(() => null))?.stop() });
  const pgCluster = await pgStarting;
  const database = await pgCluster.createDatabase('fleet');
  const postgres = { postmaster: pgCluster.postmasterPid() };
  const adminKey = randomBytes(32).toString('base64url');
  for (let i = 0; i < replicaCount; i++) replicas.push(await startReplica(['--database', database, '--data-dir', join(dir, `cloud-${i}`), '--admin-key', adminKey], teardown));
  if (replicaCount === 1) return { url: replicas[0]!.url, adminKey, replicas, postgres };
  // The balancer holds both ends of every device's two connections: four descriptors a device.
  const forwarders = processesFor(devices, 1);
  const balancing = startBalancer(replicas.map((r) => ({ host: '127.0.0.1', port: Number(new URL(r.url).port) })), { processes: forwarders });
  teardown.defer({ name: 'balancer', stop: async () => (await balancing.catch(() => null))?.close() });
  const balancer: Balancer = await balancing;
  return { url: balancer.url, adminKey, replicas, postgres };
}

/**
 * What each process of the run did since the last call: the fleet's processes (CPU and event
 * loop delay: a stalled worker drops all its devices at once), each cloud replica's CPU and
 * PostgreSQL's (the whole server: only the run's database is in it). On every progress line,
 * so a run that does not settle says where the time went.
 */
function vitals(fleet: FleetControl, cloud: BenchCloud): () => Promise<string> {
  const cpuOf = () => [...cloud.replicas.map((r) => processCpuMs(r.child.pid!)), cloud.postgres ? postgresServerCpuMs(cloud.postgres.postmaster) : NaN];
  let last = { at: performance.now(), cpu: cpuOf() };
  return async () => {
    const workers = describeHealth(await fleet.health());
    const now = { at: performance.now(), cpu: cpuOf() };
    const pct = (i: number) => (((now.cpu[i]! - last.cpu[i]!) / (now.at - last.at)) * 100).toFixed(0);
    const parts = cloud.replicas.map((r, i) => (r.child.exitCode === null && r.child.signalCode === null ? `replica ${i + 1} ${pct(i)}%` : `replica ${i + 1} gone`));
    if (cloud.postgres) parts.push(`PostgreSQL ${pct(cloud.replicas.length)}%`);
    last = now;
    return `fleet processes: ${workers}; cloud cpu: ${parts.join(', ')}`;
  };
}

async function adminCall(cloud: { url: string; adminKey: string }, method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(new URL(path, cloud.url), { method, headers: { authorization: `Bearer ${cloud.adminKey}`, 'content-type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** A release of the test app that sleeps (quiet: ten thousand ticking apps would be what is measured). */
const release = (tag: string) => fleetRelease(`services:\n  main:\n    image: fleetlab/test-app:${tag}\n    command: ["sleep", "1000000"]\n    volumes: ["data:/data"]\nvolumes:\n  data: {}\n`);

/**
 * Why devices have not settled on a release: every unsettled device's reason, grouped across
 * the fleet's processes (unsettled.ts), and what the cloud records for the first few of them,
 * which says whether their reports and tunnels reached it.
 */
async function whyNotSettled(fleet: FleetControl, cloud: BenchCloud, releaseId: number): Promise<string> {
  const groups = await fleet.unsettled(releaseId);
  const total = groups.reduce((n, g) => n + g.count, 0);
  const uuids = (await fleet.stuck(releaseId, 5)).map((s) => s.uuid).filter((u): u is string => u !== null);
  let seen = '';
  if (uuids.length) {
    try {
      const rows = ((await adminCall(cloud, 'GET', `/v6/device?$select=uuid,is_online,api_heartbeat_state,status,is_running__release,last_connectivity_event&$filter=uuid in (${uuids.map((u) => `'${u}'`).join(',')})`)) as { d: unknown[] }).d;
      seen = `\n  the cloud's rows of the first ${uuids.length} of them: ${JSON.stringify(rows)}`;
    } catch (err) {
      seen = `\n  the cloud could not be asked about them: ${String(err)}`;
    }
  }
  return `${total} devices not settled on release ${releaseId}:\n${describeUnsettled(groups).join('\n')}${seen}`;
}

async function until(fleet: FleetControl, releaseId: number, limitMs: number, explain: () => Promise<string>, vitalsLine: () => Promise<string>, onProgress?: (counts: FleetCounts, applied: number) => Promise<void>): Promise<number> {
  const t0 = performance.now();
  let said = t0;
  for (;;) {
    const c = await fleet.counts();
    if (performance.now() - said >= 10_000) {
      said = performance.now();
      process.stderr.write(`bench:fleet ${c.total}: waiting for release ${releaseId}: ${describeCounts(c)}\n  ${await vitalsLine()}\n`);
    }
    const applied = await fleet.appliedOn(releaseId);
    await onProgress?.(c, applied);
    if (applied === c.total) return performance.now() - t0;
    if (performance.now() - t0 > limitMs) throw new Error(`not converged on release ${releaseId} within ${limitMs / 1000} s: ${describeCounts(c)}\n${await explain()}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Proxy calls to these devices through one replica: how many answered 200. */
async function proxied(replica: Replica, adminKey: string, uuids: readonly string[]): Promise<number> {
  let ok = 0;
  for (const uuid of uuids) {
    const res = await fetch(new URL('/supervisor/v1/device', replica.url), { method: 'POST', headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ uuid, method: 'GET' }) });
    await res.arrayBuffer();
    if (res.status === 200) ok += 1;
  }
  return ok;
}

const fmt = (ms: number) => (ms >= 10_000 ? `${(ms / 1000).toFixed(0)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms.toFixed(1)} ms`);

const rssOf = (replicas: readonly Replica[]) => replicas.filter((r) => r.child.exitCode === null && r.child.signalCode === null).reduce((sum, r) => sum + rssMb(r.child.pid!), 0);

async function runSize(devices: number): Promise<string[]> {
  // The teardown is the signal handler's from here on: whatever has started by the time a
  // signal comes is stopped, even halfway through starting the cloud.
  const teardown = new Teardown();
  current = teardown;
  const dir = mkdtempSync(join(scratch, 'fleetlab-bench-fleet-'));
  teardown.defer({ name: `scratch directory ${dir}`, stop: async () => rmSync(dir, { recursive: true, force: true }) });
  const config = `${devices} | ${dbKind}${dbKind === 'postgres' ? ` × ${replicaCount}` : ''}`;
  try {
    const cloud = await startCloud(dir, devices, teardown);
    const org = ((await adminCall(cloud, 'GET', `/v6/organization?$filter=handle eq 'admin'`)) as { d: Array<{ id: number }> }).d[0]!.id;
    await adminCall(cloud, 'POST', '/v6/application', { app_name: 'bench', organization: org, device_type: 'raspberrypi3' });
    const { provisioningKey } = await provisioningKeyFor({ cloud: cloud.url, apiKey: cloud.adminKey, fleet: 'bench' });
    const target = { url: cloud.url, apiKey: cloud.adminKey, fleet: 'bench' };
    const v1 = await publishRelease(release('1'), target);

    const workers = workersArg === 'auto' ? processesFor(devices, 0) : Number(workersArg);
    const t0 = performance.now();
    // A signal while the devices start needs no step: worker processes stop their devices
    // when this process goes (fleet-worker.ts), and devices in this process go with it.
    const fleet = await startFleetControl({ devices, cloudUrl: cloud.url, provisioningKey, dataDir: join(dir, 'fleet'), pollIntervalMs }, workers);
    teardown.defer({ name: 'fleet', stop: () => fleet.close() });
    const startMs = performance.now() - t0;
    const explain = (releaseId: number) => () => whyNotSettled(fleet, cloud, releaseId);
    const vitalsLine = vitals(fleet, cloud);
    const converge1 = await until(fleet, v1.releaseId, 10 * pollIntervalMs, explain(v1.releaseId), vitalsLine);
    process.stderr.write(`bench:fleet ${devices}: started in ${fmt(startMs)} (${workers} process${workers > 1 ? 'es' : ''}), release 1 everywhere ${fmt(converge1)} later\n`);

    // The reports of that release land within one report interval; steady starts after them.
    await new Promise((r) => setTimeout(r, DEFAULT_REPORT_INTERVAL_MS + 1000));
    await fleet.resetLatency();
    const steadyT0 = performance.now();
    await new Promise((r) => setTimeout(r, pollIntervalMs));
    const steadyS = (performance.now() - steadyT0) / 1000;
    const steady = await fleet.latency();
    const rss = (await fleet.memory()).rss / 2 ** 20;
    const cloudRss = rssOf(cloud.replicas);

    // Several replicas: the proxy reaches devices from each, whichever holds their tunnel.
    let proxyNote = '';
    const sample = ((await adminCall(cloud, 'GET', '/v6/device?$select=uuid&$orderby=id&$top=20')) as { d: Array<{ uuid: string }> }).d.map((d) => d.uuid);
    if (cloud.replicas.length > 1) {
      const before = await Promise.all(cloud.replicas.map((r) => proxied(r, cloud.adminKey, sample)));
      proxyNote = `proxy before: ${before.map((n) => `${n}/${sample.length}`).join(' and ')} through each replica`;
    }

    await fleet.resetLatency();
    const v2 = await publishRelease(release('2'), target);
    const rolloutT0 = performance.now();
    // Half way: half the devices have taken the new target (and most are still applying it).
    let killedAt: string | undefined;
    const rolloutMs = await until(fleet, v2.releaseId, 10 * pollIntervalMs, explain(v2.releaseId), vitalsLine, async (c, applied) => {
      const taken = c.byRelease[String(v2.releaseId)] ?? 0;
      if (cloud.replicas.length > 1 && killedAt === undefined && taken >= c.total / 2) {
        killedAt = `${taken}/${c.total} had taken release 2, ${applied} applied`;
        cloud.replicas[0]!.child.kill('SIGKILL');
        process.stderr.write(`bench:fleet ${devices}: killed replica 1 (SIGKILL): ${killedAt}\n`);
      }
    });
    const rolloutS = (performance.now() - rolloutT0) / 1000;
    const rollout = await fleet.latency();
    const afterRollout = await fleet.memory();
    // Each process's own high-water mark, summed: the most the fleet can have held at once.
    const [rolloutRss, peakRss] = [afterRollout.rss / 2 ** 20, afterRollout.peakRss / 2 ** 20];
    const rolloutCloudRss = rssOf(cloud.replicas);
    // The cloud's own view, through a replica still alive: every device reported release 2.
    const alive = cloud.replicas.find((r) => r.child.signalCode === null)!;
    const seen = await cloudSees(alive, cloud.adminKey, v2.releaseId, devices, 10 * pollIntervalMs);
    proxyNote += `${proxyNote ? '; ' : ''}the cloud saw ${seen.running}/${devices} on release 2, ${seen.online} online, ${fmt(seen.afterMs)} after the fleet`;
    if (killedAt !== undefined) {
      const after = await waitForProxy(alive, cloud.adminKey, sample, 120_000);
      proxyNote += `; replica 1 killed when ${killedAt}; proxy after: ${after}/${sample.length} through the survivor`;
    }
    return [
      `| ${config} | steady | ${(steady.targetState.count / steadyS).toFixed(0)} | ${fmt(steady.targetState.p50Ms)} | ${fmt(steady.targetState.p99Ms)} | ${(steady.report.count / steadyS).toFixed(1)} | ${rss.toFixed(0)} MB (${((rss / devices) * 1000).toFixed(0)} MB per 1,000; ${workers} process${workers > 1 ? 'es' : ''}) | ${cloudRss.toFixed(0)} MB | start ${fmt(startMs)}, release 1 ${fmt(converge1)} |`,
      `| ${config} | rollout | ${(rollout.targetState.count / rolloutS).toFixed(0)} | ${fmt(rollout.targetState.p50Ms)} | ${fmt(rollout.targetState.p99Ms)} | ${(rollout.report.count / rolloutS).toFixed(1)} | ${rolloutRss.toFixed(0)} MB (peak ${peakRss.toFixed(0)} MB) | ${rolloutCloudRss.toFixed(0)} MB | **every device on release 2 in ${fmt(rolloutMs)}**${proxyNote ? `; ${proxyNote}` : ''} |`,
    ];
  } finally {
    await teardown.stop();
  }
}

/** Waits until the cloud (through this replica) has every device on the release and online. */
async function cloudSees(replica: Replica, adminKey: string, releaseId: number, devices: number, limitMs: number): Promise<{ running: number; online: number; afterMs: number }> {
  const t0 = performance.now();
  for (;;) {
    const p = await fleetProgress({ url: replica.url, apiKey: adminKey, fleet: 'bench' }, await fleetId(replica, adminKey), releaseId);
    if ((p.running === devices && p.online === devices) || performance.now() - t0 > limitMs) return { running: p.running, online: p.online, afterMs: performance.now() - t0 };
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function fleetId(replica: Replica, adminKey: string): Promise<number> {
  return ((await adminCall({ url: replica.url, adminKey }, 'GET', `/v6/application?$select=id&$filter=app_name eq 'bench'`)) as { d: Array<{ id: number }> }).d[0]!.id;
}

/** Devices of a killed replica come back through the balancer within their reconnect backoff. */
async function waitForProxy(replica: Replica, adminKey: string, uuids: readonly string[], limitMs: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const ok = await proxied(replica, adminKey, uuids);
    if (ok === uuids.length || performance.now() - t0 > limitMs) return ok;
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// A bench stopped with Ctrl-C or SIGTERM stops what it started (cloud, PostgreSQL, workers,
// balancer); a second signal kills what is still stopping, and the unwind goes on.
let current: Teardown | null = null;
let signalled = 0;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    signalled += 1;
    if (signalled > 1) {
      process.stderr.write(`bench:fleet: ${signal} again: killing what is left\n`);
      current?.force();
      return;
    }
    process.stderr.write(`bench:fleet: ${signal}: stopping what the run started\n`);
    void (current?.stop() ?? Promise.resolve()).catch((err) => process.stderr.write(`bench:fleet: ${String(err)}\n`)).finally(() => process.exit(130));
  });
}

const rows: string[] = [];
for (const n of sizes) rows.push(...(await runSize(n)));
const cloudLine = dbKind === 'sqlite' ? 'one cloud on SQLite (its own process)' : `${replicaCount} cloud replica${replicaCount > 1 ? 's' : ''} on PostgreSQL${replicaCount > 1 ? ' behind a TCP balancer' : ''}`;
console.log(`\nfleet simulation, ${cloudLine}, poll interval ${pollIntervalMs / 1000} s, this machine: ${(await import('node:os')).cpus().length} cores`);
console.log('| devices | database | phase | target-state polls/s | p50 | p99 | reports/s | fleet RSS | cloud RSS | |');
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
