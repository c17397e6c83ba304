/**
 * The check that holds a run to leaving nothing behind (hil/lib/run-leftovers.ts), against the
 * real dockerd: it names what a test left, with the test, even after the test's own store is
 * gone; and it leaves alone what is not the run's (made before it, or by another run whose
 * objects carry the same labels). A check that could not fail would let every leak through.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL } from '../src/protocol/engine-labels.js';
import { deviceObjectName } from '../src/supervisor/adapters/engine.js';
import { removeDeviceLeftovers } from '../sim/device-leftovers.js';
import { RunLeftovers, describeLeftovers, makeOwnerDir, removeLeftovers } from '../hil/lib/run-leftovers.js';
import { dockerSocket } from './helpers/supervisor-fixture.js';

const docker = new Docker({ socketPath: dockerSocket });
const uuid = () => randomUUID().replace(/-/g, '');
const labels = (device: string) => ({ [LABEL.supervised]: 'true', [LABEL.device]: device, [LABEL.appId]: '1' });

/** A device store as the supervisor writes it, in `dir`. */
function writeStore(dir: string, device: string): void {
  mkdirSync(join(dir, 'supervisor'), { recursive: true });
  writeFileSync(join(dir, 'supervisor', 'device.json'), JSON.stringify({ uuid: device, deviceKey: 'k' }));
}

let scratch: string;
const devices: string[] = [];

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'fleetlab-leftovers-test-'));
});

afterAll(async () => {
  for (const d of devices) await removeDeviceLeftovers(docker, d);
  rmSync(scratch, { recursive: true, force: true });
});

describe('the leftover check', () => {
  it("names a test's container, volume, network and directory with the test, and nothing of another run or from before", async () => {
    const runDir = mkdtempSync(join(scratch, 'run-'));
    const [before, mine, other] = [uuid(), uuid(), uuid()];
    devices.push(before, mine, other);
    // Made before the run: a device whose store is not the run's.
    writeStore(join(scratch, 'elsewhere'), before);
    await docker.createVolume({ Name: deviceObjectName(before, 1, 'data'), Labels: labels(before) });

    const watch = await RunLeftovers.start({ dockerSocket, runDir });
    try {
      const fileDir = makeOwnerDir(runDir, 'test/leaky.test.ts');
      const deviceDir = join(fileDir, 'fleetlab-sim-x');
      writeStore(deviceDir, mine);
      await docker.createVolume({ Name: deviceObjectName(mine, 1, 'data'), Labels: labels(mine) });
      await docker.createNetwork({ Name: deviceObjectName(mine, 1, 'default'), Labels: labels(mine) });
      await docker.createContainer({ name: `${mine.slice(0, 7)}_main_1`, Image: 'fleetlab/test-app:1', Labels: labels(mine) });
      // Another run's device, on the same engine at the same time, with the same labels.
      await docker.createVolume({ Name: deviceObjectName(other, 1, 'data'), Labels: labels(other) });
      // tsx's compile cache is no test's leftover.
      mkdirSync(join(fileDir, 'tsx-0'));
      await watch.sync();
      // The test removes its data dir, as a clean stop does, but not its engine objects.
      rmSync(deviceDir, { recursive: true });
      mkdirSync(join(fileDir, 'fleetlab-left-'));
      // A user's own directory stays, as in /tmp; what the run left in it does not.
      mkdirSync(join(fileDir, 'fleetlab-1000'));
      mkdirSync(join(fileDir, 'fleetlab-0', 'fleetlab-ctr-left'), { recursive: true });

      const found = await watch.leftovers();
      expect(found.map((l) => `${l.owner} ${l.kind} ${l.name}`).sort()).toEqual([
        `test/leaky.test.ts container ${mine.slice(0, 7)}_main_1`,
        `test/leaky.test.ts directory ${join(fileDir, 'fleetlab-0', 'fleetlab-ctr-left')}`,
        `test/leaky.test.ts directory ${join(fileDir, 'fleetlab-left-')}`,
        `test/leaky.test.ts network ${deviceObjectName(mine, 1, 'default')}`,
        `test/leaky.test.ts volume ${deviceObjectName(mine, 1, 'data')}`,
      ]);
      expect(describeLeftovers(found)).toContain(`test/leaky.test.ts:\n  `);

      expect(await removeLeftovers(dockerSocket, found)).toBeUndefined();
      expect(await watch.leftovers()).toEqual([]);
      expect((await docker.listVolumes({ filters: { label: [`${LABEL.device}=${other}`] } })).Volumes).toHaveLength(1);
      expect((await docker.listVolumes({ filters: { label: [`${LABEL.device}=${before}`] } })).Volumes).toHaveLength(1);
    } finally {
      watch.close();
    }
  });

  it('finds a device through the host directory of a container-target device a child of its process started', async () => {
    const runDir = mkdtempSync(join(scratch, 'run-'));
    const device = uuid();
    devices.push(device);
    const watch = await RunLeftovers.start({ dockerSocket, runDir });
    try {
      // A child of the owner's process started it (its pid in the label), as a Playwright worker
      // under the runner does; the device runs in a host directory outside the run's.
      makeOwnerDir(runDir, 'test/container.test.ts', process.ppid);
      const hostDir = mkdtempSync(join(scratch, 'ctr-'));
      writeStore(join(hostDir, 'device'), device);
      await docker.createVolume({ Name: deviceObjectName(device, 1, 'data'), Labels: labels(device) });
      await docker.createContainer({
        name: `fleetlab-leftovers-test-${device.slice(0, 7)}`,
        Image: 'fleetlab/test-app:1',
        Labels: { 'io.fleetlab.hil.owner-pid': String(process.pid), 'io.fleetlab.hil.dir': hostDir, [LABEL.device]: device },
      });
      const found = await watch.leftovers();
      expect(found.map((l) => `${l.owner} ${l.kind} ${l.name}`).sort()).toEqual([
        `test/container.test.ts container fleetlab-leftovers-test-${device.slice(0, 7)}`,
        `test/container.test.ts directory ${hostDir}`,
        `test/container.test.ts volume ${deviceObjectName(device, 1, 'data')}`,
      ]);
      expect(await removeLeftovers(dockerSocket, found)).toBeUndefined();
      expect(await watch.leftovers()).toEqual([]);
    } finally {
      watch.close();
    }
  });
});
