/**
 * A rollout to a fleet (issue 18): 500 virtual devices, a tenth of them cut from the cloud
 * while release 2 goes out. Every connected device is on release 2 within 5 minutes, the cut
 * ones catch up within a minute of the link healing (plus the apply), and no device made its
 * volume again. The fleet runs in the worker's process, the same on every target: it runs
 * under the sim project only, and says so elsewhere.
 */
import { expect, test } from 'fleetlab/test';

const release = (tag: string) => `services:\n  recorder:\n    image: fleetlab/test-app:${tag}\n    command: ["sleep", "1000000"]\n    volumes: ["readings:/data"]\nvolumes:\n  readings: {}\n`;

test.use({ fleetOptions: { devices: 500, faults: ['partition:10%'], seed: 18 } });
// Decided from the project alone, before the fleet fixture would start 500 devices for nothing.
test.skip(({ target }) => target !== 'sim', "a fleet runs in the test's own process whatever the target: it runs under the sim project");

test('a release reaches the fleet through a partition, and the rest once it heals, with volumes kept', async ({ fleet }) => {
  test.setTimeout(900_000);
  const v1 = await fleet.deploy(release('1'));
  await expect(fleet).toConverge({ release: v1, within: 180_000 });
  const volumesBefore = fleet.volumes();

  fleet.partition();
  const v2 = await fleet.deploy(release('2'));
  await expect(fleet).toConverge({ release: v2, within: 300_000, except: 'partition' });
  const cut = fleet.stuck(v2, 500);
  expect(cut).toHaveLength(50);
  expect(cut.every((d) => d.faults.includes('partition') && d.releaseId === v1.id)).toBe(true);

  fleet.heal();
  // A device that failed to reach the cloud retries after at most a minute (full-jitter backoff).
  await expect(fleet).toConverge({ release: v2, within: 90_000 });
  expect(fleet.volumes()).toEqual(volumesBefore);
});
