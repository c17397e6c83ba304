/**
 * Power as the bench does it, not through the API: a hard power cycle (no clean shutdown)
 * and a power cut. The device comes back with its key, its release and its host config.
 */
import { twoServiceRelease, waitRunning } from '../lib/apps.js';
import { expect, pollUntil, scaled, since, sleep, test } from 'fleetlab/test';

test('a hard power cycle: the device boots with its key, host config and release', { tag: '@smoke', annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('power.cycle');
  expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['main', 'worker']);
  expect((await api.patchHostConfig({ network: { hostname: 'cycled-box' } })).status).toBe(200);
  await device.power!.cycle();
  expect((await api.device()).status).toBe(200);
  expect((await api.hostConfig()).body.network.hostname).toBe('cycled-box');
  await waitRunning(api, '1', ['main', 'worker']);
});

test('a power cut: the API is gone until power returns, then the release runs again', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('power.cut');
  expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['main', 'worker']);
  await device.power!.off();
  const down = await api.ping({ timeoutMs: 2000 }).then((r) => r.status, () => 0);
  expect(down).toBe(0);
  await device.power!.on();
  expect((await api.ping()).status).toBe(200);
  await waitRunning(api, '1', ['main', 'worker']);
});

test('POST /v1/shutdown answers 202 {Data: OK}, the device powers off until power returns', async ({ api, device, needs }) => {
  needs('power.cut');
  const res = await api.shutdown();
  expect(res.status).toBe(202);
  expect(res.body).toEqual({ Data: 'OK', Error: '' });
  // A slow answer is not "gone": the ping waits as long as the target is slow.
  const ping = () => api.ping({ timeoutMs: scaled(1000) }).then((r) => r.status, () => 0);
  await pollUntil('device API gone after shutdown', ping, (s) => s === 0, { timeoutMs: 30_000, intervalMs: 100 });
  // It stays off: nothing brings it back but power. A span the spec measures, not a wait.
  await sleep(2000);
  expect(await ping()).toBe(0);
  await device.power!.on();
  expect((await api.ping()).status).toBe(200);
});
