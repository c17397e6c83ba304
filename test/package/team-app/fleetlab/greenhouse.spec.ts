import { expect, test, type Device } from 'fleetlab/test';

async function readings(device: Device): Promise<string> {
  const dir = await device.files!.volumePath!(1, 'readings');
  return dir ? (await device.files!.read(`${dir}/log`)).toString('utf8') : '';
}

test('readings survive an update', async ({ device }) => {
  await device.deploy();
  await expect.poll(() => readings(device), { timeout: 20_000 }).toContain('from release 1');
  await device.deploy(undefined, { env: { RELEASE: '2' } });
  await expect.poll(() => readings(device), { timeout: 20_000 }).toContain('from release 2');
  expect(await readings(device)).toContain('reading 1 from release 1');
});

test("an update waits while the sensor holds its lock", async ({ device }) => {
  await device.deploy();
  const dir = (await device.files!.volumePath!(1, 'readings'))!;
  await device.files!.write(`${dir}/calibrating`, '');
  await expect.poll(() => device.files!.exists(device.updateLockPath('sensor')), { timeout: 20_000 }).toBe(true);
  const next = await device.deploy(undefined, { env: { RELEASE: '3' }, wait: false });
  await new Promise((r) => setTimeout(r, 4_000));
  expect(await readings(device)).not.toContain('from release 3');
  await device.files!.remove(`${dir}/calibrating`);
  await device.waitForRelease(next);
  await expect.poll(() => readings(device), { timeout: 20_000 }).toContain('from release 3');
});
