/**
 * A fleet of virtual devices against a real fleetlab cloud (SQLite, this process): they
 * register with the fleet's provisioning key, run the fleet's release, and roll out the next
 * one while a fifth of them are cut from the cloud; those catch up once the link heals, and
 * no device loses its volume's data. Devices drawn for `pull-fails` fail with the engine's
 * error, which the fleet reports as why they are stuck. What the cloud believes agrees.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fleetRelease } from '../hil/harness/fleet.js';
import { fleetProgress, publishRelease, type PublishedRelease } from '../hil/release/publish.js';
import { assignFaults, clockSkewOf, parseFault } from '../sim/fleet/fault-plan.js';
import { Fleet } from '../sim/fleet/fleet.js';
import { startFleetControl } from '../sim/fleet/fleet-workers.js';
import { heapLimitMb } from '../sim/fleet/heap-budget.js';
import type { FleetDevice } from '../sim/fleet/fleet-device.js';
import { startFleetCloud, type FleetCloud } from '../sim/stack.js';
import { eventually } from './helpers/engine-targets.js';

const DEVICES = 20;
let dir: string;
let cloud: FleetCloud;
let fleet: Fleet;

/** A release of the test app that sleeps (quiet: ten thousand ticking apps would be what is measured). */
const release = (tag: string) => fleetRelease(`services:\n  main:\n    image: fleetlab/test-app:${tag}\n    command: ["sleep", "1000000"]\n    volumes: ["data:/data"]\nvolumes:\n  data: {}\n`);
const deploy = (tag: string) => publishRelease(release(tag), { url: cloud.url, apiKey: cloud.adminKey, fleet: cloud.fleet.name });

/** When the device's engine says its (one) container started, in ms since the epoch. */
const containerStartedAt = (d: FleetDevice) => Date.parse(d.engine.engine.listContainers(false, new Map())[0]!.state.startedAt);
const withFault = (kind: string) => (d: FleetDevice) => d.faults.includes(kind as never);
const without = (...kinds: string[]) => (d: FleetDevice) => !kinds.some((k) => d.faults.includes(k as never));

/** The data volume's directory of an applied device (the simulated engine keeps volumes as directories). */
function dataDir(d: FleetDevice): string {
  const volume = d.volumes().find((v) => v.name.endsWith('_1_data'));
  if (!volume) throw new Error(`device ${d.index} has no data volume`);
  return volume.mountpoint;
}

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  await eventually(async () => (check() ? true : undefined), timeoutMs, `${what} (${JSON.stringify(fleet.counts())}; stuck: ${JSON.stringify(fleet.stuck(null, 3))})`);
}

const appliedOn = (devices: readonly FleetDevice[], r: PublishedRelease) => fleet.appliedOn(r.releaseId, devices) === devices.length;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-fleet-test-'));
  cloud = await startFleetCloud({ port: 0, dataDir: join(dir, 'cloud'), fleetName: 'orchard' });
});
afterAll(async () => {
  await fleet?.close();
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('fleet simulation', () => {
  it('registers, rolls out through a partition, catches up after it heals, keeps volumes, says why devices are stuck, and answers the proxy', { timeout: 300_000 }, async () => {
    const v1 = await deploy('1');
    fleet = await Fleet.start({
      devices: DEVICES,
      cloudUrl: cloud.url,
      provisioningKey: cloud.provisioningKey,
      dataDir: join(dir, 'fleet'),
      faults: [parseFault('partition:20%'), parseFault('pull-fails:10%'), parseFault('clock-skew:20%')],
      seed: 42,
      pollIntervalMs: 2_000,
      reportIntervalMs: 1_000,
      tunnelHeartbeatMs: 1_000,
      startRate: 100,
    });
    const all = fleet.devices;
    const partitioned = all.filter(withFault('partition'));
    const pullFails = all.filter(withFault('pull-fails'));
    const healthy = all.filter(without('partition', 'pull-fails'));
    const skewed = all.filter(withFault('clock-skew'));
    expect([all.length, partitioned.length, pullFails.length, skewed.length]).toEqual([DEVICES, 4, 2, 4]);

    const reachable = all.filter(without('pull-fails'));
    await until('every device without pull-fails runs release 1', () => appliedOn(reachable, v1), 60_000);
    for (const d of reachable) writeFileSync(join(dataDir(d), 'reading.txt'), `device ${d.index}`);
    // A skewed device's engine stamps its containers with the device's own wrong time; the
    // others with this host's. The rollout does not depend on it (the cloud keeps its own time).
    for (const d of reachable) {
      const offBy = containerStartedAt(d) - Date.now();
      if (d.faults.includes('clock-skew')) expect(Math.abs(offBy - clockSkewOf(d.index, 42))).toBeLessThan(120_000);
      else expect(Math.abs(offBy)).toBeLessThan(120_000);
    }
    for (const d of pullFails.filter(without('partition'))) {
      expect(d.status()).toMatchObject({ phase: 'failed', reason: expect.stringContaining('connection reset by peer') });
    }

    fleet.partition();
    const v2 = await deploy('2');
    await until('the connected devices run release 2', () => appliedOn(healthy, v2), 60_000);
    // Cut off, the partitioned ones still hold release 1 and the fleet says why.
    await until('the partitioned devices are seen offline', () => partitioned.every((d) => d.status().phase === 'offline'), 30_000);
    expect(partitioned.every((d) => d.status().releaseId === v1.releaseId)).toBe(true);
    const stuck = fleet.stuck(v2.releaseId, DEVICES);
    expect(stuck.filter((s) => s.faults.includes('partition')).map((s) => s.reason)).toEqual(partitioned.map(() => 'partitioned from the cloud'));

    fleet.heal();
    // The longest retry backoff is a minute: the partitioned devices are back within that.
    await until('every device without pull-fails runs release 2 after the heal', () => appliedOn(reachable, v2), 90_000);
    for (const d of reachable) expect(readFileSync(join(dataDir(d), 'reading.txt'), 'utf8')).toBe(`device ${d.index}`);

    // The cloud's view, from the devices' reports.
    await eventually(async () => {
      const progress = await fleetProgress({ url: cloud.url, apiKey: cloud.adminKey, fleet: cloud.fleet.name }, cloud.fleet.id, v2.releaseId);
      return progress.devices === DEVICES && progress.running === reachable.length && progress.online === DEVICES ? progress : undefined;
    }, 30_000, 'the cloud sees every device online and the reachable ones on release 2');

    // The cloud's proxy reaches every device through its tunnel; each answers with its own address.
    const answers = (await cloud.call('POST', '/supervisor/v1/device', { appId: cloud.fleet.id, method: 'GET' })) as Array<{ uuid: string; statusCode: number; body: { ip_address: string } }>;
    expect(answers.map((a) => a.statusCode)).toEqual(all.map(() => 200));
    expect(new Set(answers.map((a) => a.body.ip_address)).size).toBe(DEVICES);

    // A reboot through the proxy: the device comes back on release 2 with its volume's data.
    const rebooted = healthy[0]!;
    const volumeBefore = rebooted.volumes();
    expect(await cloud.call('POST', '/supervisor/v1/reboot', { uuid: rebooted.uuid })).toEqual({ Data: 'OK', Error: '' });
    await until('the rebooted device goes down', () => rebooted.status().phase === 'starting', 30_000);
    await until('the rebooted device is back on release 2', () => appliedOn([rebooted], v2), 60_000);
    expect(rebooted.volumes()).toEqual(volumeBefore);
    expect(readFileSync(join(dataDir(rebooted), 'reading.txt'), 'utf8')).toBe(`device ${rebooted.index}`);

    const data = join(dir, 'fleet');
    await fleet.close();
    expect(existsSync(join(data, 'devices', '0', 'supervisor'))).toBe(true);
  });
});

describe('a fleet in worker processes', () => {
  it('runs the same devices with the same faults as one process, and answers as one fleet', { timeout: 180_000 }, async () => {
    // A third release: the simulated registry has test-app 1 and 2, so a new command makes it new.
    const v3 = await publishRelease(fleetRelease(`services:\n  main:\n    image: fleetlab/test-app:1\n    command: ["sleep", "2000000"]\n`), { url: cloud.url, apiKey: cloud.adminKey, fleet: cloud.fleet.name });
    const faults = [parseFault('partition:25%')];
    const control = await startFleetControl(
      { devices: 12, cloudUrl: cloud.url, provisioningKey: cloud.provisioningKey, dataDir: join(dir, 'workers'), faults, seed: 7, partitionFromStart: true, pollIntervalMs: 2_000, reportIntervalMs: 1_000, tunnelHeartbeatMs: 1_000, startRate: 100 },
      2,
    );
    try {
      const cut = [...assignFaults(12, faults, 7)].filter(([, kinds]) => kinds.includes('partition')).map(([i]) => i).sort((a, b) => a - b);
      expect(await control.faultCounts()).toEqual({ partition: cut.length });
      await eventually(async () => ((await control.appliedOn(v3.releaseId)) === 12 - cut.length ? true : undefined), 60_000, 'the connected devices run release 3');
      const counts = await control.counts();
      expect(counts).toMatchObject({ total: 12, applied: 12 - cut.length, offline: cut.length, byRelease: { [v3.releaseId]: 12 - cut.length } });
      const stuck = await control.stuck(v3.releaseId, 12);
      expect(stuck.map((s) => s.index).sort((a, b) => a - b)).toEqual(cut);
      expect(new Set(stuck.map((s) => s.reason))).toEqual(new Set(['partitioned from the cloud before it registered']));
      // Every unsettled device of both workers in one group, counted where it runs (devices 0-5 are worker 1/2's).
      const groups = await control.unsettled(v3.releaseId);
      expect(groups.map((g) => [g.key, g.count])).toEqual([['offline: partitioned from the cloud before it registered', cut.length]]);
      const inWorker = (w: string, from: number, to: number) => (cut.some((i) => i >= from && i < to) ? { [w]: cut.filter((i) => i >= from && i < to).length } : {});
      expect(groups[0]!.where).toEqual({ ...inWorker('1/2', 0, 6), ...inWorker('2/2', 6, 12) });
      // Each worker's own CPU and event loop, sampled in that worker.
      const health = await control.health();
      expect(health.map((h) => h.label)).toEqual(['1/2', '2/2']);
      expect(new Set(health.map((h) => h.pid)).size).toBe(2);
      expect(health.map((h) => h.pid)).not.toContain(process.pid);
      for (const h of health) expect(h.sinceMs).toBeGreaterThan(0);
      expect((await control.latency()).targetState.count).toBeGreaterThan(0);
      // Each worker's heap is sized to its six devices (heap-budget.ts), not the machine's default.
      const memory = await control.memory();
      expect(memory).toMatchObject({ processes: 2 });
      const perWorkerLimitMb = memory.heapLimit / 2 / 2 ** 20;
      expect(perWorkerLimitMb).toBeGreaterThanOrEqual(heapLimitMb(6));
      // The rest is the young generation: three 16 MB semi-spaces (48 MB), on every Node version.
      expect(perWorkerLimitMb).toBeLessThanOrEqual(heapLimitMb(6) + 64);
      expect(perWorkerLimitMb).toBeLessThan(getHeapStatistics().heap_size_limit / 2 ** 20);
      await control.heal();
      await eventually(async () => ((await control.appliedOn(v3.releaseId)) === 12 ? true : undefined), 90_000, 'every device runs release 3 after the heal');
    } finally {
      const closing = control.close();
      // A request racing the close (a Ctrl-C while the bench polls) is answered or refused: never an unhandled 'error' that ends the process.
      const racing = control.counts().then(() => 'answered', (err: Error) => err.message);
      await closing;
      expect(await racing).toMatch(/^answered$|fleet worker/);
      await expect(control.counts()).rejects.toThrow('a fleet worker is not running');
    }
  });
});

/** `fleetlab sim fleet` as a user runs it, read line by line from its stderr. */
function runFleetCli(tmp: string, extra: string[] = []): { child: ChildProcess; line: (match: RegExp) => Promise<RegExpExecArray> } {
  const root = fileURLToPath(new URL('..', import.meta.url));
  // A cloud nobody serves: the devices start and stay offline, which is all this needs.
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'sim', 'fleet', '--devices', '5', '--cloud', 'http://127.0.0.1:9', '--provisioning-key', 'unused-key-0000', '--every', '1', ...extra], { cwd: root, env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'ignore', 'pipe'] });
  const lines: string[] = [];
  const waiting = new Set<() => void>();
  createInterface({ input: child.stderr! }).on('line', (l) => (lines.push(l), waiting.forEach((w) => w())));
  const line = (match: RegExp) =>
    new Promise<RegExpExecArray>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no line matching ${match} within 60 s; got:\n${lines.join('\n')}`)), 60_000);
      const check = () => {
        for (const l of lines) {
          const m = match.exec(l);
          if (m) return (clearTimeout(timer), waiting.delete(check), resolve(m));
        }
      };
      waiting.add(check);
      check();
    });
  return { child, line };
}

/** Fleet worker processes started by a run with this TMPDIR (workers inherit the environment). */
function workersOf(tmp: string): number[] {
  const pids: number[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('fleet-worker')) continue;
      if (readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`TMPDIR=${tmp}`)) pids.push(Number(pid));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

const exited = (child: ChildProcess) => new Promise<string | number | null>((r) => child.once('exit', (code, signal) => r(signal ?? code)));

describe('fleetlab sim fleet', () => {
  it('refuses more devices than its open-file limit allows in one process, and by default spreads them over workers', { timeout: 120_000 }, async () => {
    const root = fileURLToPath(new URL('..', import.meta.url));
    const tmp = mkdtempSync(join(tmpdir(), 'fleetlab-fleet-cli-'));
    // At 600 descriptors, (600 - 512) / 2 = 44 devices fit in one process.
    const run = (extra: string) =>
      new Promise<string>((resolve) => {
        const child = spawn('bash', ['-c', `ulimit -n 600 && exec "${process.execPath}" --import tsx cli/main.ts sim fleet --devices 100 --cloud http://127.0.0.1:9 --provisioning-key unused-key-0000 --every 1 ${extra}`], { cwd: root, env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'ignore', 'pipe'] });
        let err = '';
        child.stderr.on('data', (d: Buffer) => {
          err += d.toString();
          if (/100 devices · offline 100/.test(err)) child.kill('SIGINT');
        });
        child.once('exit', () => resolve(err));
      });
    try {
      expect(await run('--workers 1')).toContain('100 devices in one process need more file descriptors than this process may open (600, ulimit -n); at most 44 fit: run them in 3 processes (fleetlab sim fleet --workers 3');
      const spread = await run('');
      expect(spread).toContain('running the devices in 3 worker processes');
      expect(spread).toContain('stopped every device');
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('kill -9 leaves its data directory (its workers stop), the next run removes it, and a Ctrl-C stop leaves nothing', { timeout: 120_000 }, async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'fleetlab-fleet-cli-'));
    try {
      const first = runFleetCli(tmp, ['--workers', '2']);
      await first.line(/running the devices in 2 worker processes/);
      const dataDir = (await first.line(/data in (\S+); stop with Ctrl-C/))[1]!;
      expect(existsSync(join(dataDir, 'devices', '4', 'supervisor'))).toBe(true);
      expect(workersOf(tmp)).toHaveLength(2);
      first.child.kill('SIGKILL');
      expect(await exited(first.child)).toBe('SIGKILL');
      expect(existsSync(dataDir)).toBe(true);
      // Orphaned, the workers see their channel close, stop their devices and exit.
      await eventually(async () => (workersOf(tmp).length === 0 ? true : undefined), 30_000, 'the killed run\'s workers exit');

      const second = runFleetCli(tmp, ['--workers', '2']);
      await second.line(new RegExp(`removed ${dataDir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}, left by a fleet run that was killed`));
      const secondDir = (await second.line(/data in (\S+); stop with Ctrl-C/))[1]!;
      expect(existsSync(dataDir)).toBe(false);
      await second.line(/5 devices · offline 5 .*\(2 workers\)/);
      second.child.kill('SIGINT');
      await second.line(/stopped every device/);
      await exited(second.child);
      expect(existsSync(secondDir)).toBe(false);
      expect(workersOf(tmp)).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
