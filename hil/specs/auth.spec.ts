/**
 * Authentication (docs/decisions.md items 2-4): the key as `?apikey=` or Bearer, 401 with one body,
 * open endpoints, and keys scoped to one app.
 */
import { APP_ID, singleServiceRelease, waitRunning } from '../lib/apps.js';
import { expect, since, test } from 'fleetlab/test';

const UNAUTHORIZED = { status: 'failed', message: 'Unauthorized' };

test('a missing or wrong key is refused with 401 and the error body', { annotation: since('1.6.0', 'GET /v1/device') }, async ({ api }) => {
  for (const key of [null, 'wrong-key', '']) {
    const res = await api.device({ key });
    expect(res.status, `key ${JSON.stringify(key)}`).toBe(401);
    expect(res.body).toEqual(UNAUTHORIZED);
  }
  const query = await api.device({ key: 'wrong-key', keyInQuery: true });
  expect(query.status).toBe(401);
  expect(query.body).toEqual(UNAUTHORIZED);
});

test('the key is accepted as Authorization: Bearer and as ?apikey=', { annotation: since('1.6.0', 'GET /v1/device') }, async ({ api }) => {
  expect((await api.device()).status).toBe(200);
  expect((await api.device({ keyInQuery: true })).status).toBe(200);
  // A non-Bearer scheme carrying the right key is not a key.
  const raw = await api.protocol.request('GET', '/v1/device', { key: null, headers: { authorization: `Basic ${api.key}` } });
  expect(raw.status).toBe(401);
});

test('/ping and /v1/healthy are open; other endpoints are not', { annotation: since('6.5.0', 'GET /v1/healthy') }, async ({ api }) => {
  expect((await api.ping({ key: null })).status).toBe(200);
  expect((await api.healthy({ key: null })).status).toBe(200);
  for (const [method, path] of [['GET', '/v2/version'], ['GET', '/v2/state/status'], ['POST', '/v1/blink'], ['GET', '/v1/device/host-config']] as const) {
    expect((await api.call(method, path, undefined, { key: null })).status, path).toBe(401);
  }
});

test('local-mode endpoints are open without a key while the device is in local mode', { annotation: since('7.21.0', 'local mode endpoints') }, async ({ api }) => {
  // The sim target starts devices in local mode; a device that is not would answer 401.
  expect((await api.localTargetState({ key: null })).status).toBe(200);
  expect((await api.deviceInfo({ key: null })).status).toBe(200);
});

test('an app-scoped key reaches its own app and gets 401 for another app', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device }) => {
  expect((await api.setLocalTargetState(singleServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['solo']);
  const app = await api.appV1(APP_ID);
  expect(app.status).toBe(200);
  const V = device.api.identity.vendor.toUpperCase();
  const appKey = app.body.env[`${V}_SUPERVISOR_API_KEY`];
  expect(appKey).toMatch(/^\S{16,}$/);
  expect(appKey).not.toBe(api.key);
  expect((await api.appState(APP_ID, { key: appKey })).status).toBe(200);
  expect((await api.appState(APP_ID + 1, { key: appKey })).status).toBe(401);
  expect((await api.restartV1({ appId: APP_ID + 1 }, { key: appKey })).status).toBe(401);
  expect(Object.keys((await api.applicationsState({ key: appKey })).body)).toEqual(['hilapp']);

  // Regenerating with the app key replaces that key only: the old one is refused at once.
  const regen = await api.regenerateApiKey({ key: appKey });
  expect(regen.status).toBe(200);
  const newKey = regen.text;
  expect(newKey).toMatch(/^\S{16,}$/);
  expect(newKey).not.toBe(appKey);
  expect((await api.appState(APP_ID, { key: appKey })).status).toBe(401);
  expect((await api.appState(APP_ID, { key: newKey })).status).toBe(200);
  expect((await api.device()).status).toBe(200);
});
