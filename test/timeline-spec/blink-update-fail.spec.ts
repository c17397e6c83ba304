/**
 * Fails on purpose, for test/timeline-browser.test.ts: a release, the LED's blink, an update,
 * then a wrong expectation. Its report's device timeline must show all three and the failure.
 */
import { fileURLToPath } from 'node:url';
import { expect, test } from 'fleetlab/test';

const APP = fileURLToPath(new URL('./compose.yaml', import.meta.url));

test('blinks, updates, then fails', async ({ device }) => {
  await device.deploy(APP);
  expect((await device.api.request('POST', '/v1/blink')).status).toBe(200);
  // Three periods of the 200 ms blink.
  await expect.poll(async () => (await device.led!.timeline()).length, { timeout: 10_000 }).toBeGreaterThanOrEqual(6);
  await device.deploy(APP, { env: { RELEASE: '2' } });
  expect((await device.status()).containers.map((c) => c.status), 'the deliberate failure').toEqual(['Exited']);
});
