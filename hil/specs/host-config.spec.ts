/**
 * Host config (docs/device-api.md "Host config" rules, docs/decisions.md items 8-10): hostname
 * through hostname1, proxy as redsocks configuration plus a unit restart through systemd1,
 * both read back over the API and from the host's files. That both survive a reboot is
 * reboot.spec.ts's.
 */
import { expect, since, test } from 'fleetlab/test';
import { PROXY, PROXY_READ_BACK } from '../lib/host-config.js';

test('GET host-config before any change: a hostname, no proxy', { annotation: since('6.6.0', 'GET and PATCH /v1/device/host-config') }, async ({ api }) => {
  const res = await api.hostConfig();
  expect(res.status).toBe(200);
  expect(res.body.network.hostname).toEqual(expect.any(String));
  expect(res.body.network).not.toHaveProperty('proxy');
});

// The @smoke set has PATCH and its read-back in reboot.spec.ts, across a reboot.
test('PATCH hostname and proxy: applied on the host, read back without the password', { annotation: since('6.6.0', 'GET and PATCH /v1/device/host-config') }, async ({ api, device, needs }) => {
  needs('files');
  const paths = device.api.identity.hostPaths;
  test.skip(!paths, `target ${device.target} cannot tell where the host keeps its hostname`);
  const res = await api.patchHostConfig({ network: { hostname: 'hil-bench-7', proxy: PROXY } });
  expect(res.status).toBe(200);
  expect(res.text).toBe('OK');
  const expected = { network: { hostname: 'hil-bench-7', proxy: PROXY_READ_BACK } };
  expect((await api.hostConfig()).body).toEqual(expected);
  // hostname1 wrote the static hostname; the supervisor wrote redsocks' files.
  const files = device.files!;
  expect((await files.read(paths!.hostname)).toString().trim()).toBe('hil-bench-7');
  const redsocks = (await files.read(`${paths!.proxyConfigDir}/redsocks.conf`)).toString();
  expect(redsocks).toMatch(/type\s*=\s*socks5/);
  expect(redsocks).toMatch(/ip\s*=\s*proxy\.example/);
  expect(redsocks).toMatch(/port\s*=\s*1080/);
  expect((await files.read(`${paths!.proxyConfigDir}/no_proxy`)).toString()).toMatch(/10\.0\.0\.0\/8/);
});

test('absent fields are left alone; null, "" and {} reset to the defaults', { annotation: since('6.6.0', 'GET and PATCH /v1/device/host-config') }, async ({ api, device }) => {
  expect((await api.patchHostConfig({ network: { hostname: 'first-name', proxy: PROXY } })).status).toBe(200);
  expect((await api.patchHostConfig({ network: { hostname: 'second-name' } })).status).toBe(200);
  expect((await api.hostConfig()).body.network.proxy?.ip).toBe('proxy.example');
  expect((await api.patchHostConfig({ network: { proxy: {} } })).status).toBe(200);
  expect((await api.hostConfig()).body).toEqual({ network: { hostname: 'second-name' } });
  expect((await api.patchHostConfig({ network: { proxy: PROXY } })).status).toBe(200);
  expect((await api.patchHostConfig({ network: { proxy: null } })).status).toBe(200);
  expect((await api.hostConfig()).body.network).not.toHaveProperty('proxy');
  // The default hostname is the first 7 characters of the uuid.
  expect((await api.patchHostConfig({ network: { hostname: '' } })).status).toBe(200);
  expect((await api.hostConfig()).body.network.hostname).toBe(device.api.identity.uuid.slice(0, 7));
  expect((await api.patchHostConfig({ network: { hostname: 'again' } })).status).toBe(200);
  expect((await api.patchHostConfig({ network: { hostname: null as unknown as string } })).status).toBe(200);
  expect((await api.hostConfig()).body.network.hostname).toBe(device.api.identity.uuid.slice(0, 7));
});

test('bad input is a 400 naming the field, and changes nothing', { annotation: since('6.6.0', 'GET and PATCH /v1/device/host-config') }, async ({ api }) => {
  expect((await api.patchHostConfig({ network: { hostname: 'stable-name' } })).status).toBe(200);
  const cases: Array<[unknown, RegExp]> = [
    [{ network: { proxy: { type: 'ftp', ip: 'a', port: 1 } } }, /type/],
    [{ network: { proxy: { type: 'socks5', ip: 'a', port: 70000 } } }, /port/],
    [{ network: { proxy: { type: 'socks5', ip: 'a' } } }, /port/],
    [{ network: { hostname: 'bad name!' } }, /hostname/],
    [{ network: { hostname: 7 } }, /hostname/],
    [{ network: 'x' }, /network/],
  ];
  for (const [body, message] of cases) {
    const res = await api.call<{ status: string; message: string }>('PATCH', '/v1/device/host-config', body);
    expect(res.status, JSON.stringify(body)).toBe(400);
    expect(res.body.status).toBe('failed');
    expect(res.body.message).toMatch(message);
  }
  const malformed = await api.call<{ message: string }>('PATCH', '/v1/device/host-config', undefined, { rawBody: { contentType: 'application/json', data: '{"network":' } });
  expect(malformed.status).toBe(400);
  expect((await api.hostConfig()).body.network.hostname).toBe('stable-name');
});
