import { expect, test, type Device } from 'fleetlab/test';

// The example app's specs, written only against fleetlab/test. Every file gets a fresh device.
const V1 = 'compose.yaml';
const V2 = 'compose.v2.yaml';

/** A file in the app's `data` volume, as the device's file system holds it. */
async function dataFile(device: Device, name: string): Promise<string> {
  const dir = await device.files!.volumePath!(1, 'data');
  if (!dir) throw new Error('the data volume does not exist on the device');
  return `${dir}/${name}`;
}

const readText = async (device: Device, path: string) => (await device.files!.read(path)).toString('utf8');

test('release 1 runs both services and the recorder reads its own state', async ({ device }) => {
  const release = await device.deploy(V1);
  const status = await device.status();
  expect(status.release).toBe(String(release.releaseId));
  expect(status.containers.map((c) => `${c.serviceName} ${c.status}`).sort()).toEqual(['recorder Running', 'ticker Running']);
  // The app's logs are in the device's journal.
  await expect.poll(async () => (await device.journal({ grep: 'recorder 1: my state: {"status":"success"' })).length, { timeout: 20_000 }).toBeGreaterThan(0);
  await expect.poll(async () => (await device.journal({ grep: 'ticker: tick' })).length, { timeout: 20_000 }).toBeGreaterThan(0);
});

test('an update to release 2 keeps the data volume', async ({ device }) => {
  await device.deploy(V1);
  const boots = await dataFile(device, 'boots');
  await expect.poll(() => readText(device, boots)).toBe('v1\n');
  await device.deploy(V2);
  await expect.poll(() => readText(device, boots), { timeout: 20_000 }).toBe('v1\nv2\n');
});

test('an update waits while the app holds its update lock, and goes on once it lets go', async ({ device }) => {
  await device.deploy(V1);
  const boots = await dataFile(device, 'boots');
  const critical = await dataFile(device, 'critical');
  const lock = device.updateLockPath('recorder');
  await device.files!.write(critical, 'busy');
  await expect.poll(() => device.files!.exists(lock), { message: 'the recorder takes its lock' }).toBe(true);

  const v2 = await device.deploy(V2, { wait: false });
  // The supervisor takes the target (`release` names it) and fetches its images, but leaves
  // release 1 running: still applying, and the recorder of release 2 never started.
  await expect.poll(async () => (await device.journal({ grep: 'locked' })).length, { message: 'the supervisor logs that updates are locked' }).toBeGreaterThan(0);
  await new Promise((r) => setTimeout(r, 3_000));
  const during = await device.status();
  expect(during.appState).toBe('applying');
  expect(during.containers.find((c) => c.serviceName === 'recorder')?.status).toBe('Running');
  expect(await readText(device, boots)).toBe('v1\n');

  await device.files!.remove(critical);
  await device.waitForRelease(v2);
  await expect.poll(() => readText(device, boots)).toBe('v1\nv2\n');
});

test('the app blinks the LED through the supervisor API', async ({ device, needs }) => {
  needs('led');
  await device.deploy(V1);
  await device.files!.write(await dataFile(device, 'blink'), '');
  await expect.poll(async () => (await device.led!.timeline()).length, { timeout: 20_000, message: 'LED transitions' }).toBeGreaterThanOrEqual(4);
  const timeline = await device.led!.timeline();
  // Blink toggles every 200 ms: 1, 0, 1, 0 ...
  expect(timeline.slice(0, 4).map((t) => t.value)).toEqual([1, 0, 1, 0]);
});

test('a power cut in the middle of an update ends on release 2 with the data intact', async ({ device, needs }) => {
  needs('power.cycle');
  await device.deploy(V1);
  const boots = await dataFile(device, 'boots');
  await expect.poll(() => readText(device, boots)).toBe('v1\n');
  // The supervisor starts on a new target at once; the cut lands while it stops release 1.
  const v2 = await device.deploy(V2, { wait: false });
  await device.powerCycle();
  await device.waitForRelease(v2);
  await expect.poll(() => readText(device, boots), { timeout: 20_000 }).toMatch(/^v1\n(v1\n)*v2\n/);
});
