/**
 * Fleet simulation at scale: N virtual devices (sim/fleet) in this process against a fleetlab
 * cloud on SQLite in its own process, as a fleet and its cloud run. For each size:
 *
 *   start      wall time to start the devices (spread over one poll interval, as a fleet comes up)
 *   converge1  from the last device started to every device applying the fleet's first release
 *   steady     one poll interval with nothing to do (after the last reports of release 1):
 *              target-state polls/s, p50, p99
 *   rollout    a new release: time until every device has applied it, polls/s, reports/s, p99
 *   memory     this process's RSS, per 1,000 devices; the cloud's RSS
 *
 *   npm run bench:fleet -- [--devices 1000,10000] [--poll-interval-ms 60000]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fleetRelease } from '../hil/harness/fleet.js';
import { publishRelease } from '../hil/release/publish.js';
import { cliCommand } from '../sim/entry.js';
import { DEFAULT_REPORT_INTERVAL_MS, Fleet } from '../sim/fleet/fleet.js';
import { provisioningKeyFor } from '../sim/fleet/provisioning.js';
import { describeCounts } from '../sim/fleet/run.js';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : fallback;
}

const sizes = arg('--devices', '1000,10000').split(',').map(Number);
const pollIntervalMs = Number(arg('--poll-interval-ms', '60000'));
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

async function startCloud(dataDir: string): Promise<{ url: string; adminKey: string; child: ChildProcess }> {
  const { file, args } = cliCommand(['cloud', '--port', '0', '--data-dir', dataDir]);
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  for await (const line of createInterface({ input: child.stdout! })) {
    const ready = JSON.parse(line) as { event?: string; url?: string; adminKey?: string };
    if (ready.event === 'ready') return { url: ready.url!, adminKey: ready.adminKey!, child };
  }
  throw new Error('the cloud exited before it was ready');
}

async function adminCall(cloud: { url: string; adminKey: string }, method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(new URL(path, cloud.url), { method, headers: { authorization: `Bearer ${cloud.adminKey}`, 'content-type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** A release of the test app that sleeps (quiet: ten thousand ticking apps would be what is measured). */
const release = (tag: string) => fleetRelease(`services:\n  main:\n    image: fleetlab/test-app:${tag}\n    command: ["sleep", "1000000"]\n    volumes: ["data:/data"]\nvolumes:\n  data: {}\n`);

async function until(fleet: Fleet, releaseId: number, limitMs: number): Promise<number> {
  const t0 = performance.now();
  let said = t0;
  for (;;) {
    const c = fleet.counts();
    if (performance.now() - said >= 10_000) {
      said = performance.now();
      process.stderr.write(`bench:fleet ${c.total}: waiting for release ${releaseId}: ${describeCounts(c)}\n`);
    }
    if (fleet.appliedOn(releaseId) === c.total) return performance.now() - t0;
    if (performance.now() - t0 > limitMs) throw new Error(`not converged on release ${releaseId} within ${limitMs / 1000} s: ${JSON.stringify(c)}; ${JSON.stringify(fleet.stuck(releaseId, 3))}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const fmt = (ms: number) => (ms >= 10_000 ? `${(ms / 1000).toFixed(0)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms.toFixed(1)} ms`);

async function runSize(devices: number): Promise<string[]> {
  const dir = mkdtempSync(join(scratch, 'fleetlab-bench-fleet-'));
  const cloud = await startCloud(join(dir, 'cloud'));
  let fleet: Fleet | undefined;
  try {
    const org = ((await adminCall(cloud, 'GET', `/v6/organization?$filter=handle eq 'admin'`)) as { d: Array<{ id: number }> }).d[0]!.id;
    await adminCall(cloud, 'POST', '/v6/application', { app_name: 'bench', organization: org, device_type: 'raspberrypi3' });
    const { provisioningKey } = await provisioningKeyFor({ cloud: cloud.url, apiKey: cloud.adminKey, fleet: 'bench' });
    const target = { url: cloud.url, apiKey: cloud.adminKey, fleet: 'bench' };
    const v1 = await publishRelease(release('1'), target);

    const t0 = performance.now();
    fleet = await Fleet.start({ devices, cloudUrl: cloud.url, provisioningKey, dataDir: join(dir, 'fleet'), pollIntervalMs });
    const startMs = performance.now() - t0;
    const converge1 = await until(fleet, v1.releaseId, 10 * pollIntervalMs);
    process.stderr.write(`bench:fleet ${devices}: started in ${fmt(startMs)}, release 1 everywhere ${fmt(converge1)} later\n`);

    // The reports of that release land within one report interval; steady starts after them.
    await new Promise((r) => setTimeout(r, DEFAULT_REPORT_INTERVAL_MS + 1000));
    fleet.resetLatency();
    const steadyT0 = performance.now();
    await new Promise((r) => setTimeout(r, pollIntervalMs));
    const steadyS = (performance.now() - steadyT0) / 1000;
    const steady = fleet.latency();
    const rss = rssMb(process.pid);
    const cloudRss = rssMb(cloud.child.pid!);

    fleet.resetLatency();
    const v2 = await publishRelease(release('2'), target);
    const rolloutT0 = performance.now();
    const rolloutMs = await until(fleet, v2.releaseId, 10 * pollIntervalMs);
    const rolloutS = (performance.now() - rolloutT0) / 1000;
    const rollout = fleet.latency();
    const peakRss = rssMb(process.pid);
    return [
      `| ${devices} | steady | ${(steady.targetState.count / steadyS).toFixed(0)} | ${fmt(steady.targetState.p50Ms)} | ${fmt(steady.targetState.p99Ms)} | ${(steady.report.count / steadyS).toFixed(1)} | ${rss.toFixed(0)} MB (${((rss / devices) * 1000).toFixed(0)} MB per 1,000) | ${cloudRss.toFixed(0)} MB | start ${fmt(startMs)}, release 1 ${fmt(converge1)} |`,
      `| ${devices} | rollout | ${(rollout.targetState.count / rolloutS).toFixed(0)} | ${fmt(rollout.targetState.p50Ms)} | ${fmt(rollout.targetState.p99Ms)} | ${(rollout.report.count / rolloutS).toFixed(1)} | ${peakRss.toFixed(0)} MB | ${rssMb(cloud.child.pid!).toFixed(0)} MB | **every device on release 2 in ${fmt(rolloutMs)}** |`,
    ];
  } finally {
    await fleet?.close();
    cloud.child.kill('SIGTERM');
    await new Promise((r) => cloud.child.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows: string[] = [];
for (const n of sizes) rows.push(...(await runSize(n)));
console.log(`\nfleet simulation, one cloud on SQLite (its own process), poll interval ${pollIntervalMs / 1000} s, this machine: ${(await import('node:os')).cpus().length} cores`);
console.log('| devices | phase | target-state polls/s | p50 | p99 | reports/s | fleet RSS | cloud RSS | |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
