/**
 * A fleet of virtual devices against a real fleetlab cloud (SQLite, this process): they
 * register with the fleet's provisioning key, run the fleet's release, and roll out the next
 * one while a fifth of them are cut from the cloud; those catch up once the link heals, and
 * no device loses its volume's data. Devices drawn for `pull-fails` fail with the engine's
 * error, which the fleet reports as why they are stuck. What the cloud believes agrees.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCompose } from '../hil/release/compose.js';
import { fleetProgress, publishRelease, type PublishedRelease } from '../hil/release/publish.js';
import { parseFault } from '../sim/fleet/fault-plan.js';
import { Fleet } from '../sim/fleet/fleet.js';
import type { FleetDevice } from '../sim/fleet/fleet-device.js';
import { startFleetCloud, type FleetCloud } from '../sim/stack.js';
import { eventually } from './helpers/engine-targets.js';

const DEVICES = 20;
let dir: string;
let cloud: FleetCloud;
let fleet: Fleet;

const release = (tag: string, commit: string) => ({
  project: parseCompose(`services:\n  main:\n    image: fleetlab/test-app:${tag}\n    command: ["sleep", "100000"]\n    volumes: ["data:/data"]\nvolumes:\n  data: {}\n`, '/fleet/compose.yaml'),
  images: { main: `fleetlab/test-app:${tag}` },
  imageIds: {},
  commit,
  pulledAsNamed: [],
});
const deploy = (tag: string, commit: string) => publishRelease(release(tag, commit), { url: cloud.url, apiKey: cloud.adminKey, fleet: cloud.fleet.name });

const withFault = (kind: string) => (d: FleetDevice) => d.faults.includes(kind as never);
const without = (...kinds: string[]) => (d: FleetDevice) => !kinds.some((k) => d.faults.includes(k as never));

/** The data volume's directory of an applied device (the simulated engine keeps volumes as directories). */
function dataDir(d: FleetDevice): string {
  const volume = d.engine.engine.volumes.records().find((v) => v.name.endsWith('_1_data'));
  if (!volume) throw new Error(`device ${d.index} has no data volume`);
  return volume.mountpoint;
}

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  await eventually(async () => (check() ? true : undefined), timeoutMs, `${what} (${JSON.stringify(fleet.counts())}; stuck: ${JSON.stringify(fleet.stuck(null, 3))})`);
}

const appliedOn = (devices: readonly FleetDevice[], r: PublishedRelease) => devices.every((d) => {
  const s = d.status();
  return s.phase === 'applied' && s.releaseId === r.releaseId;
});

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
  it('registers, rolls out through a partition, catches up after it heals, keeps volumes, and says why devices are stuck', async () => {
    const v1 = await deploy('1', 'f1eef1eef1eef1eef1eef1eef1eef1ee');
    fleet = await Fleet.start({
      devices: DEVICES,
      cloudUrl: cloud.url,
      provisioningKey: cloud.provisioningKey,
      dataDir: join(dir, 'fleet'),
      faults: [parseFault('partition:20%'), parseFault('pull-fails:10%')],
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
    expect([all.length, partitioned.length, pullFails.length]).toEqual([DEVICES, 4, 2]);

    const reachable = all.filter(without('pull-fails'));
    await until('every device without pull-fails runs release 1', () => appliedOn(reachable, v1), 60_000);
    for (const d of reachable) writeFileSync(join(dataDir(d), 'reading.txt'), `device ${d.index}`);
    for (const d of pullFails.filter(without('partition'))) {
      expect(d.status()).toMatchObject({ phase: 'failed', reason: expect.stringContaining('connection reset by peer') });
    }

    fleet.partition();
    const v2 = await deploy('2', 'f2eef2eef2eef2eef2eef2eef2eef2ee');
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

    const data = join(dir, 'fleet');
    await fleet.close();
    expect(existsSync(join(data, 'devices', '0', 'supervisor'))).toBe(true);
  });
});
