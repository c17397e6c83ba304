/**
 * One reboot through the OS (login1, as a user of the board would) and what the device keeps
 * across it: the hostname and proxy set through the API (docs/decisions.md items 8-10) and a
 * regenerated API key (item 4: the new one works, the old stays refused). One reboot for both,
 * not one each: a reboot is the dearest step a spec takes on a board (30-60 s on a Pi, about a
 * minute on an emulated one). The checks before it stay in host-config.spec.ts and keys.spec.ts;
 * that a stopped service runs again after a reboot is lifecycle.spec.ts's (the API's reboot).
 */
import { expect, since, test } from 'fleetlab/test';
import { PROXY, PROXY_READ_BACK } from '../lib/host-config.js';

test('hostname, proxy and a regenerated key kept across a reboot through the OS', { tag: '@smoke', annotation: since('6.6.0', 'GET and PATCH /v1/device/host-config') }, async ({ api, device, needs }) => {
  needs('power.reboot');
  expect((await api.patchHostConfig({ network: { hostname: 'hil-bench-7', proxy: PROXY } })).status).toBe(200);
  const hostConfig = { network: { hostname: 'hil-bench-7', proxy: PROXY_READ_BACK } };
  expect((await api.hostConfig()).body).toEqual(hostConfig);

  const old = api.key;
  const regenerated = await api.regenerateApiKey();
  expect(regenerated.status).toBe(200);
  const fresh = regenerated.text;
  device.api.useKey(fresh);

  await device.power!.reboot();

  expect((await api.device({ key: fresh })).status).toBe(200);
  expect((await api.device({ key: old })).status).toBe(401);
  expect((await api.hostConfig()).body).toEqual(hostConfig);
  // Where the host keeps them, when the target says: hostname1's file and redsocks' configuration.
  const paths = device.api.identity.hostPaths;
  if (paths && device.files) {
    expect((await device.files.read(paths.hostname)).toString().trim()).toBe('hil-bench-7');
    expect((await device.files.read(`${paths.proxyConfigDir}/redsocks.conf`)).toString()).toMatch(/ip\s*=\s*proxy\.example/);
  }
});
