import { expect, test } from 'fleetlab/test';

// Fails on purpose: the package check runs it alone and reads how the failure reads.
test('a reading from a release that never was @expected-failure', async ({ device }) => {
  await device.deploy();
  const dir = await device.files!.volumePath!(1, 'readings');
  await expect.poll(async () => (await device.files!.read(`${dir}/log`)).toString('utf8'), { timeout: 3_000 }).toContain('from release 9');
});
