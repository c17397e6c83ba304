/**
 * The open endpoints and the read-only information endpoints, as a client sees them.
 */
import { expect, since, test } from 'fleetlab/test';

test('GET /ping answers OK without a key', { tag: '@smoke' }, async ({ api }) => {
  const res = await api.ping();
  expect(res.status).toBe(200);
  expect(res.text).toBe('OK');
});

test('GET /v1/healthy answers 200 with an empty body, without a key', { annotation: since('6.5.0') }, async ({ api }) => {
  const res = await api.healthy();
  expect(res.status).toBe(200);
  expect(res.text).toBe('');
});

test('GET /v2/version answers success and a semver-like version, the one /v1/device reports', { annotation: since('7.21.0') }, async ({ api }) => {
  const res = await api.version();
  expect(res.status).toBe(200);
  expect(res.body.status).toBe('success');
  expect(res.body.version).toMatch(/^\d+\.\d+\.\d+/);
  expect((await api.device()).body.supervisor_version).toBe(res.body.version);
});

test('GET /v1/device has the spec fields with their types', { tag: '@smoke', annotation: since('1.6.0') }, async ({ api }) => {
  const res = await api.device();
  expect(res.status).toBe(200);
  const d = res.body;
  expect(typeof d.api_port).toBe('number');
  for (const field of ['ip_address', 'mac_address', 'os_version', 'supervisor_version'] as const) expect(typeof d[field], field).toBe('string');
  expect(['Stopping', 'Starting', 'Downloading', 'Installing', 'Idle']).toContain(d.status);
  for (const field of ['update_pending', 'update_downloaded', 'update_failed'] as const) expect(typeof d[field], field).toBe('boolean');
  expect(d.download_progress === null || typeof d.download_progress === 'number').toBe(true);
});

test('GET /v2/device/name, /v2/local/device-info', { annotation: since('9.11.0') }, async ({ api }) => {
  const name = await api.deviceName();
  expect(name.status).toBe(200);
  expect(name.body).toEqual({ status: 'success', deviceName: expect.any(String) });
  const info = await api.deviceInfo();
  expect(info.status).toBe(200);
  expect(info.body).toEqual({ status: 'success', info: { arch: expect.any(String), deviceType: expect.any(String) } });
});

test('GET /v2/device/vpn answers enabled/connected; without a cloud it is not connected', { annotation: since('11.4.0') }, async ({ api }) => {
  const res = await api.vpn();
  expect(res.status).toBe(200);
  expect(res.body.status).toBe('success');
  expect(typeof res.body.vpn.enabled).toBe('boolean');
  expect(res.body.vpn.connected).toBe(false);
});

test('GET /v2/device/tags does not work without the cloud: 503 and the error body', { annotation: since('9.11.0') }, async ({ api }) => {
  // The spec: "Does not work without a connection to the cloud API"; docs/decisions.md item 5: 503.
  const res = await api.tags();
  expect(res.status).toBe(503);
  expect(res.body).toEqual({ status: 'failed', message: expect.any(String) });
});

test('unknown paths answer 404 with the one error body', async ({ api }) => {
  const res = await api.call<{ status: string; message: string }>('GET', '/v2/no-such-endpoint');
  expect(res.status).toBe(404);
  expect(res.body.status).toBe('failed');
});
