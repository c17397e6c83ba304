/**
 * The app read endpoints and service selectors: v2 state views, containerId, the v1 app
 * endpoints (single-service only), 400s and 404s.
 */
import { APP_ID, containerOf, singleServiceRelease, twoServiceRelease, waitRunning } from '../lib/apps.js';
import { expect, since, test } from 'fleetlab/test';

test.describe('a two-service app', { annotation: since('9.7.0', 'GET /v2/state/status') }, () => {
  test.beforeEach(async ({ api, device }) => {
    expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor))).status).toBe(200);
    await waitRunning(api, '1', ['main', 'worker']);
  });

  test('GET /v2/applications/state is keyed by app name', async ({ api }) => {
    const res = await api.applicationsState();
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      hilapp: {
        appId: 1,
        commit: 'commit1',
        services: {
          main: { status: 'Running', releaseId: 1, downloadProgress: null },
          worker: { status: 'Running', releaseId: 1, downloadProgress: null },
        },
      },
    });
  });

  test('GET /v2/applications/:appId/state is keyed by service id; unknown app 404, bad id 400', async ({ api }) => {
    const res = await api.appState(APP_ID);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      local: { '1': { services: { '11': { status: 'Running', releaseId: 1, download_progress: null }, '12': { status: 'Running', releaseId: 1, download_progress: null } } } },
      commit: 'commit1',
    });
    expect((await api.appState(99)).status).toBe(404);
    expect((await api.appState('abc')).status).toBe(400);
  });

  test('GET /v2/containerId with and without service; unknown service 404', async ({ api }) => {
    const main = await containerOf(api, 'main');
    const all = await api.containerIds();
    expect(all.status).toBe(200);
    expect(all.body.status).toBe('success');
    expect(Object.keys(all.body.services).sort()).toEqual(['main', 'worker']);
    expect(all.body.services.main).toBe(main?.id);
    expect((await api.containerId('main')).body).toEqual({ status: 'success', containerId: main?.id });
    expect((await api.containerId('nope')).status).toBe(404);
  });

  test('service selectors: missing 400, unknown 404, mismatched serviceName/imageId 400, wrong type 400', async ({ api }) => {
    expect((await api.stopService(APP_ID, {})).status).toBe(400);
    expect((await api.stopService(APP_ID, { serviceName: 'nope' })).status).toBe(404);
    expect((await api.stopService(APP_ID, { imageId: 999 })).status).toBe(404);
    const mismatch = await api.call<{ message: string }>('POST', `/v2/applications/${APP_ID}/stop-service`, { serviceName: 'main', imageId: 102 });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.message).toMatch(/serviceName|imageId|different/);
    expect((await api.stopService(APP_ID, { serviceName: 5 })).status).toBe(400);
    expect((await api.stopService(42, { serviceName: 'main' })).status).toBe(404);
    expect((await api.restartV1({ appId: 'one' })).status).toBe(400);
    expect((await api.call('POST', '/v1/restart', {})).status).toBe(400);
    const purge = await api.call('POST', '/v1/purge', {});
    expect(purge.status).toBe(400);
    expect(purge.body).toEqual({ Data: '', Error: expect.stringMatching(/appId/) });
    expect((await api.update({ force: 'yes' as unknown as boolean })).status).toBe(400);
    // Nothing was stopped by the refused calls.
    expect((await containerOf(api, 'main'))?.status).toBe('Running');
  });

  test('the v1 app endpoints refuse a multi-container app with 400, an unknown app with 404', async ({ api }) => {
    for (const [what, call] of [['GET', () => api.appV1(APP_ID)], ['stop', () => api.stopAppV1(APP_ID)], ['start', () => api.startAppV1(APP_ID)]] as const) {
      const res = await call();
      expect(res.status, what).toBe(400);
    }
    expect((await api.appV1(7)).status).toBe(404);
  });

  test('POST /v1/update answers 204 with an empty body', async ({ api }) => {
    const res = await api.update({ force: false });
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
  });
});

test('the v1 app endpoints on a single-service app: GET, stop, start', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device }) => {
  const vendor = device.api.identity.vendor;
  expect((await api.setLocalTargetState(singleServiceRelease(vendor))).status).toBe(200);
  await waitRunning(api, '1', ['solo']);
  const solo = await containerOf(api, 'solo');
  const app = await api.appV1(APP_ID);
  expect(app.status).toBe(200);
  expect(app.body).toMatchObject({ appId: 1, commit: 'solo1', imageId: 'fleetlab/test-app:1', containerId: solo?.id });
  expect(app.body.env).toMatchObject({ MODE: 'one', [`${vendor.toUpperCase()}_APP_ID`]: '1', [`${vendor.toUpperCase()}_APP_LOCK_PATH`]: `/tmp/${vendor}/updates.lock` });
  const stop = await api.stopAppV1(APP_ID);
  expect(stop.status).toBe(200);
  expect(stop.body).toEqual({ containerId: solo?.id });
  expect((await containerOf(api, 'solo'))?.status).not.toBe('Running');
  const start = await api.startAppV1(APP_ID);
  expect(start.status).toBe(200);
  expect(start.body).toEqual({ containerId: solo?.id });
  expect((await containerOf(api, 'solo'))?.status).toBe('Running');
});
