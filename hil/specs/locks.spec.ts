/**
 * Update locks as an app takes them (docs/decisions.md item 7): a file `updates.lock` in the
 * service's lock directory under the lock root. Lock-respecting actions answer 423 (v1
 * {Data, Error} actions with that envelope), `force: true` overrides and removes the app's
 * lock, and a released lock lets the action through. `start` ignores locks.
 */
import { APP_ID, containerOf, twoServiceRelease, waitRebooted, waitRunning } from '../lib/apps.js';
import { expect, pollUntil, since, test, type Device, type DeviceApi } from 'fleetlab/test';

const lockPath = (device: Device, service: string) => `${device.api.identity.lockRoot}/${APP_ID}/${service}/updates.lock`;

async function deploy(api: DeviceApi, device: Device) {
  expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['main', 'worker']);
}

test('a lock refuses restart, stop, purge with 423; nothing changes; start still works', { annotation: since('12.11.34', 'host config PATCH respects update locks') }, async ({ api, device, needs }) => {
  needs('files');
  await deploy(api, device);
  const files = device.files!;
  await files.write(lockPath(device, 'main'), '');
  const before = await containerOf(api, 'main');
  const refusedJson: Array<[string, () => Promise<{ status: number; body: unknown }>]> = [
    ['restart-service', () => api.restartService(APP_ID, { serviceName: 'main' })],
    ['stop-service', () => api.stopService(APP_ID, { serviceName: 'main' })],
    ['v2 restart', () => api.restartApp(APP_ID)],
    ['v2 purge', () => api.purgeApp(APP_ID)],
    ['v1 restart', () => api.restartV1({ appId: APP_ID })],
  ];
  for (const [what, call] of refusedJson) {
    const res = await call();
    expect(res.status, what).toBe(423);
    expect(res.body, what).toEqual({ status: 'failed', message: expect.stringMatching(/lock/i) });
  }
  for (const [what, call] of [['v1 purge', () => api.purgeV1({ appId: APP_ID })], ['v1 reboot', () => api.reboot()], ['v1 shutdown', () => api.shutdown()]] as const) {
    const res = await call();
    expect(res.status, what).toBe(423);
    expect(res.body, what).toEqual({ Data: '', Error: expect.stringMatching(/lock/i) });
  }
  const hostConfig = await api.patchHostConfig({ network: { hostname: 'locked-out' } });
  expect(hostConfig.status).toBe(423);
  expect((await api.hostConfig()).body.network.hostname).not.toBe('locked-out');
  const after = await containerOf(api, 'main');
  expect(after).toEqual(before);
  expect(await files.exists(lockPath(device, 'main'))).toBe(true);
  // start does not respect locks
  expect((await api.startService(APP_ID, { serviceName: 'main' })).status).toBe(200);
});

test('force overrides a lock and removes it; a released lock lets the action through', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('files');
  await deploy(api, device);
  const files = device.files!;
  await files.write(lockPath(device, 'main'), '');
  const before = await containerOf(api, 'main');
  const forced = await api.restartService(APP_ID, { serviceName: 'main', force: true });
  expect(forced.status).toBe(200);
  expect(forced.text).toBe('OK');
  const afterForce = await containerOf(api, 'main');
  expect(afterForce?.id).not.toBe(before?.id);
  expect(await files.exists(lockPath(device, 'main'))).toBe(false);

  await files.write(lockPath(device, 'worker'), '');
  expect((await api.restartService(APP_ID, { serviceName: 'worker' })).status).toBe(423);
  await files.remove(lockPath(device, 'worker'));
  const worker = await containerOf(api, 'worker');
  const released = await api.restartService(APP_ID, { serviceName: 'worker' });
  expect(released.status).toBe(200);
  expect((await containerOf(api, 'worker'))?.id).not.toBe(worker?.id);

  // host-config: force at the top level and inside network both override.
  await files.write(lockPath(device, 'worker'), '');
  expect((await api.patchHostConfig({ network: { hostname: 'forced-one', force: true } })).status).toBe(200);
  await files.write(lockPath(device, 'worker'), '');
  expect((await api.patchHostConfig({ network: { hostname: 'forced-two' }, force: true })).status).toBe(200);
  expect((await api.hostConfig()).body.network.hostname).toBe('forced-two');
  await files.remove(lockPath(device, 'worker'));
});

test('reboot under a lock: 423, then with force: 202 {Data: OK} and the device comes back', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('files');
  await deploy(api, device);
  await device.files!.write(lockPath(device, 'main'), '');
  expect((await api.reboot()).status).toBe(423);
  const res = await api.reboot({ force: true });
  expect(res.status).toBe(202);
  expect(res.body).toEqual({ Data: 'OK', Error: '' });
  // The API goes away while the device reboots, then answers again with the release running.
  await waitRebooted(api);
  await waitRunning(api, '1', ['main', 'worker']);
  // A lock root lives on tmpfs: the reboot cleared the stale lock.
  expect(await device.files!.exists(lockPath(device, 'main'))).toBe(false);
});

test('an update under a lock downloads but waits; the old release keeps running until the lock goes', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('files');
  await deploy(api, device);
  await device.files!.write(lockPath(device, 'main'), '');
  const old = await containerOf(api, 'main');
  expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor, { releaseId: 2, mainImage: 'fleetlab/test-app:2' }))).status).toBe(200);
  const waiting = await pollUntil('main Downloaded while locked', async () => (await api.applicationsState()).body, (s) => s.hilapp?.services.main?.status === 'Downloaded', { timeoutMs: 30_000 });
  expect(waiting.hilapp!.services.main!.releaseId).toBe(2);
  expect((await api.stateStatus()).body.appState).toBe('applying');
  expect((await api.device()).body.update_pending).toBe(true);
  expect((await containerOf(api, 'main'))?.id).toBe(old?.id);
  await device.files!.remove(lockPath(device, 'main'));
  await waitRunning(api, '2', ['main', 'worker']);
  expect((await containerOf(api, 'main'))?.id).not.toBe(old?.id);
});
