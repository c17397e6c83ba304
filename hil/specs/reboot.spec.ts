/**
 * One reboot through the OS (login1, as a user of the board would) and what the device keeps
 * and undoes across it: the hostname and proxy set through the API (docs/decisions.md items
 * 8-10), a regenerated API key (item 4: the new one works, the old stays refused), and a
 * stopped service, which runs again (stop is temporary, docs/device-api.md "Service
 * lifecycle"). One reboot for the three, not one each: a reboot is the dearest step a spec
 * takes on a board (30-60 s on a Pi, about a minute on an emulated one), and the checks before
 * it (host-config, keys and lifecycle specs) stay in their own files.
 */
import { APP_ID, containerOf, twoServiceRelease, waitRunning } from '../lib/apps.js';
import { expect, pollUntil, since, test, type ProxyConfig } from 'fleetlab/test';

const PROXY: ProxyConfig = { type: 'socks5', ip: 'proxy.example', port: 1080, login: 'user', password: 'hunter2', noProxy: ['10.0.0.0/8', '192.168.7.7'] };

test('hostname, proxy and a regenerated key kept across a reboot through the OS; a stopped service runs again', { tag: '@smoke', annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('power.reboot');
  expect((await api.setLocalTargetState(twoServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['main', 'worker']);

  expect((await api.patchHostConfig({ network: { hostname: 'hil-bench-7', proxy: PROXY } })).status).toBe(200);
  const hostConfig = { network: { hostname: 'hil-bench-7', proxy: { type: 'socks5', ip: 'proxy.example', port: '1080', login: 'user', noProxy: ['10.0.0.0/8', '192.168.7.7'] } } };
  expect((await api.hostConfig()).body).toEqual(hostConfig);

  const old = api.key;
  const regenerated = await api.regenerateApiKey();
  expect(regenerated.status).toBe(200);
  const fresh = regenerated.text;
  device.api.useKey(fresh);

  expect((await api.stopService(APP_ID, { serviceName: 'worker' })).status).toBe(200);
  await pollUntil('worker stopped', () => containerOf(api, 'worker'), (c) => c?.status !== 'Running');

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
  await waitRunning(api, '1', ['main', 'worker']);
});
