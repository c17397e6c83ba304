/**
 * The sweep's update-lock invariant (hil/sweep/lock-watch.ts): the judgement over samples
 * (pure), and the watch on a real simulated device over dockerd with the example app, whose
 * recorder holds its update lock while /data/critical exists. An update waits for the lock and
 * is not flagged; the recorder's container removed under the app's lock (here by the engine, as
 * a supervisor that ignored the lock would stop it) is what the watch must see.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ignoredLock, watchLocks, type LockSample } from '../hil/sweep/lock-watch.js';
import type { TargetDriver } from '../hil/targets/target-driver.js';
import { sweepSimTarget } from './helpers/sweep-target.js';
import { targetDevices } from '../hil/harness/sweep-command.js';
import type { Device } from '../hil/harness/device.js';
import { dockerOnDevice } from '../hil/sweep/engine-shell.js';
import { sleep, until } from '../src/wait.js';

const sample = (atMs: number, held: boolean | undefined, container?: string): LockSample =>
  held === undefined ? { atMs } : { atMs, appHolds: new Map([['recorder', held]]), running: new Map([['recorder', container]]) };

describe('update-lock judgement', () => {
  it('flags a container replaced or stopped between two samples that both saw the app holding the lock', () => {
    expect(ignoredLock([sample(0, true, 'a'), sample(250, true, 'b')])?.detail).toMatch(/recorder was replaced \(container a → b\) between 0 and 250 ms while the app held its update lock/);
    expect(ignoredLock([sample(0, true, 'a'), sample(250, true, undefined)])?.detail).toMatch(/recorder was stopped between 0 and 250 ms/);
  });

  it('does not flag a change where the lock was free at either end, or where a sample is missing', () => {
    expect(ignoredLock([sample(0, true, 'a'), sample(250, false, 'a'), sample(500, false, 'b')])).toBeUndefined();
    expect(ignoredLock([sample(0, false, 'a'), sample(250, true, 'b')])).toBeUndefined();
    // Power off between: the lock's tmpfs went with it, and the app took it again after.
    expect(ignoredLock([sample(0, true, 'a'), sample(250, undefined), sample(500, true, 'b')])).toBeUndefined();
    expect(ignoredLock([sample(0, true, undefined), sample(250, true, 'b')])).toBeUndefined();
  });
});

describe('the update-lock watch on a simulated device', () => {
  let driver: TargetDriver;
  beforeAll(async () => {
    driver = await sweepSimTarget('sweep-locks test');
  }, 300_000);
  afterAll(async () => {
    await driver?.dispose?.();
  });

  it('sees the update wait for the app lock, and sees the service removed under it', async () => {
    const devices = targetDevices(driver, { log: () => undefined });
    try {
      const device = (await devices.fresh()) as Device;
      const v1 = await device.deploy('examples/device-app/compose.yaml');
      const recorder = () => device.status().then((s) => s.containers.find((c) => c.serviceName === 'recorder' && c.status === 'Running')?.containerId);
      const lockFile = device.updateLockPath('recorder', v1.appId);
      await dockerOnDevice(device, ['exec', (await recorder())!, 'touch', '/data/critical']);
      await until('the recorder holds its lock', () => device.exec!.run(['test', '-e', lockFile]), (r) => r.exitCode === 0, { timeoutMs: 15_000, intervalMs: 200 });

      const services = ['recorder', 'ticker'];
      const waiting = watchLocks(device, { appId: v1.appId, services, intervalMs: 100, maxSamples: 200 });
      const v2 = await device.deploy('examples/device-app/compose.v2.yaml', { wait: false });
      await sleep(3_000);
      const held = await waiting.stop();
      // Two samples in a row at least, so the judgement below had something to judge (a loaded machine samples slower).
      expect(held.filter((s) => s.appHolds?.get('recorder')).length).toBeGreaterThanOrEqual(2);
      expect(new Set(held.map((s) => s.running?.get('recorder')).filter(Boolean)).size).toBe(1);
      expect(ignoredLock(held)).toBeUndefined();

      const removed = watchLocks(device, { appId: v1.appId, services, intervalMs: 100, maxSamples: 200 });
      await sleep(500);
      // SIGKILL: the recorder's trap never runs, so its lock file stays, as under a supervisor that did not look.
      expect((await dockerOnDevice(device, ['rm', '-f', (await recorder())!]))?.exitCode).toBe(0);
      await sleep(1_000);
      const broken = ignoredLock(await removed.stop());
      expect(broken?.invariant).toBe('update-lock');
      expect(broken?.detail).toMatch(/^recorder was (replaced|stopped) between \d+ and \d+ ms while the app held its update lock$/);
      expect(v2.releaseId).not.toBe(v1.releaseId);
    } finally {
      await devices.close();
    }
  }, 300_000);
});
