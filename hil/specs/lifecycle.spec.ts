/**
 * Service lifecycle as docs/device-api.md "Service lifecycle" states it: stop is
 * temporary (a reboot starts the service again: the API's reboot here, which the supervisor
 * starts from as from any other), start starts a stopped service, restart and purge remove
 * and recreate containers, purge clears the app's volumes.
 */
import { APP_ID, containerOf, twoServiceRelease, waitRebooted, waitRunning } from '../lib/apps.js';
import { expect, pollUntil, since, test } from 'fleetlab/test';

test.beforeEach(async ({ api, device }) => {
  expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['main', 'worker']);
});

test('stop-service keeps the container; an update does not undo it; start-service starts it', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api }) => {
  const before = await containerOf(api, 'worker');
  const res = await api.stopService(APP_ID, { imageId: 102 });
  expect(res.status).toBe(200);
  expect(res.text).toBe('OK');
  const stopped = await pollUntil('worker stopped', () => containerOf(api, 'worker'), (c) => c?.status !== 'Running');
  expect(stopped?.id).toBe(before?.id);
  expect((await api.applicationsState()).body.hilapp!.services.worker!.status).toBe('Stopped');
  expect((await api.update()).status).toBe(204);
  // The span in which the worker must stay stopped after an update: measured, not awaited.
  await new Promise((r) => setTimeout(r, 2000));
  expect((await containerOf(api, 'worker'))?.status).not.toBe('Running');
  expect((await api.startService(APP_ID, { serviceName: 'worker' })).status).toBe(200);
  const started = await pollUntil('worker running', () => containerOf(api, 'worker'), (c) => c?.status === 'Running');
  expect(started?.id).toBe(before?.id);
});

test('v1 reboot (no lock) answers 202 {Data: OK} and a stopped service runs again after it', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api }) => {
  expect((await api.stopService(APP_ID, { serviceName: 'worker' })).status).toBe(200);
  const res = await api.reboot();
  expect(res.status).toBe(202);
  expect(res.body).toEqual({ Data: 'OK', Error: '' });
  await waitRebooted(api);
  await waitRunning(api, '1', ['main', 'worker']);
});

test('restart-service recreates one container; restart (v2, v1) recreates all', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api }) => {
  const worker = await containerOf(api, 'worker');
  const main = await containerOf(api, 'main');
  expect((await api.restartService(APP_ID, { serviceName: 'worker' })).status).toBe(200);
  const worker2 = await containerOf(api, 'worker');
  expect(worker2?.id).not.toBe(worker?.id);
  expect((await containerOf(api, 'main'))?.id).toBe(main?.id);

  const v2 = await api.restartApp(APP_ID);
  expect(v2.status).toBe(200);
  expect(v2.text).toBe('OK');
  await waitRunning(api, '1', ['main', 'worker']);
  const mid = [(await containerOf(api, 'main'))?.id, (await containerOf(api, 'worker'))?.id];
  expect(mid).not.toContain(main?.id);
  expect(mid).not.toContain(worker2?.id);

  const v1 = await api.restartV1({ appId: APP_ID });
  expect(v1.status).toBe(200);
  expect(v1.text).toBe('OK');
  await waitRunning(api, '1', ['main', 'worker']);
  const after = [(await containerOf(api, 'main'))?.id, (await containerOf(api, 'worker'))?.id];
  expect(after.some((id) => mid.includes(id))).toBe(false);
});

test('purge (v1 and v2) clears the app volume and recreates the containers', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('files', 'files.volumes');
  const files = device.files!;
  const volume = await files.volumePath!(APP_ID, 'data');
  expect(volume, 'the data volume exists').toBeTruthy();
  await files.write(`${volume}/kept.txt`, 'kept');
  expect(await files.list(volume!)).toContain('kept.txt');
  const main = await containerOf(api, 'main');
  const res = await api.purgeV1({ appId: APP_ID });
  expect(res.status).toBe(200);
  expect(res.body).toEqual({ Data: 'OK', Error: '' });
  await waitRunning(api, '1', ['main', 'worker']);
  expect((await containerOf(api, 'main'))?.id).not.toBe(main?.id);
  const after = await files.volumePath!(APP_ID, 'data');
  expect(after ? await files.list(after) : []).not.toContain('kept.txt');

  await files.write(`${after}/again.txt`, 'again');
  const v2 = await api.purgeApp(APP_ID);
  expect(v2.status).toBe(200);
  expect(v2.text).toBe('OK');
  await waitRunning(api, '1', ['main', 'worker']);
  const last = await files.volumePath!(APP_ID, 'data');
  expect(last ? await files.list(last) : []).toEqual([]);
});

test('cleanup-volumes answers success and keeps volumes in use', { annotation: since('10.0.0', 'GET /v2/cleanup-volumes') }, async ({ api, device }) => {
  const res = await api.cleanupVolumes();
  expect(res.status).toBe(200);
  expect(res.body).toEqual({ status: 'success' });
  if (device.files?.volumePath) expect(await device.files.volumePath(APP_ID, 'data')).toBeTruthy();
});
