/**
 * Device key regeneration (docs/decisions.md item 4): the old key is refused from the next request
 * on and the new one works. That it survives a reboot through the OS is reboot.spec.ts's.
 */
import { expect, since, test } from 'fleetlab/test';

test('regenerate-api-key: old key refused at once, new key works', { annotation: since('1.6.0', 'GET /v1/device') }, async ({ api, device }) => {
  const old = api.key;
  const res = await api.regenerateApiKey();
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain/);
  const fresh = res.text;
  expect(fresh).toMatch(/^\S{16,}$/);
  expect(fresh).not.toBe(old);
  expect((await api.device({ key: old })).status).toBe(401);
  expect((await api.device({ key: old, keyInQuery: true })).status).toBe(401);
  expect((await api.device({ key: fresh })).status).toBe(200);
  device.api.useKey(fresh);
  expect((await api.device()).status).toBe(200);
});
