/**
 * `fleetlab capture --cloud` (issue 14): a device registered to a fleetlab cloud, captured
 * through the cloud's remote proxy with a user's key, with the device's rows of the cloud's
 * data API (the device, its tags and variables, its fleet and its fleet's variables). Secrets
 * stay out: the user's key, the device's key, and the values of variables whose names look secret.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBundle } from '../hil/capture/bundle.js';
import { runCapture } from '../hil/harness/capture-command.js';
import { showBundle } from '../hil/capture/show.js';
import { SimDevice } from '../sim/device.js';
import { startFleetCloud, type FleetCloud } from '../sim/stack.js';
import { eventually } from './helpers/engine-targets.js';

let dir: string;
let cloud: FleetCloud;
let device: SimDevice;
let uuid: string;
const password = `pw-${Date.now().toString(36)}-not-for-bundles`;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-capture-cloud-'));
  cloud = await startFleetCloud({ port: 0, dataDir: join(dir, 'cloud'), fleetName: 'field' });
  device = await SimDevice.start({
    port: 0, engine: 'sim', dockerSocket: '', localMode: false,
    cloud: { url: cloud.url, provisioningKey: cloud.provisioningKey, pollIntervalMs: 1000, reportIntervalMs: 500, tunnelHeartbeatMs: 1000 },
  });
  uuid = device.info().uuid;
  const row = await eventually(async () => {
    const [d] = (await cloud.call('GET', `/v6/device(uuid='${uuid}')?$select=id,is_online`) as { d: Array<{ id: number; is_online: boolean }> }).d;
    return d?.is_online ? d : undefined;
  }, 30_000, 'the device online in the cloud');
  await cloud.call('POST', '/v6/device_tag', { device: row.id, tag_key: 'room', value: 'greenhouse-2' });
  await cloud.call('POST', '/v6/device_environment_variable', { device: row.id, name: 'DB_PASSWORD', value: password });
  await cloud.call('POST', '/v6/device_environment_variable', { device: row.id, name: 'INTERVAL', value: '5' });
  await cloud.call('POST', '/v6/application_environment_variable', { application: cloud.fleet.id, name: 'REGION', value: 'eu' });
}, 120_000);

afterAll(async () => {
  await device?.stop();
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('capture through the cloud', () => {
  it("holds what the device shows through the proxy and its rows in the cloud, none of the secrets", async () => {
    const out = join(dir, 'through-cloud.tar.gz');
    const progress: string[] = [];
    await runCapture({ cloud: cloud.url, cloudKey: cloud.adminKey, uuid, out, redaction: 'default', force: false, log: (line) => progress.push(line) });
    expect(progress[0]).toBe(`capturing cloud ${cloud.url} (device ${uuid}) into ${out}`);
    const bundle = await readBundle(out);
    expect(bundle.manifest.source).toEqual({ kind: 'cloud', address: cloud.url, uuid });
    const byName = Object.fromEntries(bundle.manifest.steps.map((s) => [s.name, s]));
    for (const step of ['supervisor', 'device', 'state', 'host-config', 'tags', 'cloud', 'journal']) expect(byName[step]?.status, `${step}: ${byName[step]?.error}`).toBe('ok');
    // Through the proxy the capture has no shell on the device.
    expect(byName.store).toMatchObject({ status: 'failed', error: expect.stringMatching(/needs a shell/) });

    expect(bundle.json<{ uuid: string; is_online: boolean }>('cloud/device.json')).toMatchObject({ uuid, is_online: true });
    expect(bundle.json<Array<{ tag_key: string; value: string }>>('cloud/tags.json').map((t) => `${t.tag_key}=${t.value}`)).toEqual(['room=greenhouse-2']);
    expect(bundle.json<Array<{ name: string; value: string }>>('cloud/device-variables.json').map((v) => `${v.name}=${v.value}`).sort()).toEqual(['DB_PASSWORD=<redacted>', 'INTERVAL=5']);
    expect(bundle.json<Array<{ name: string; value: string }>>('cloud/fleet-variables.json').map((v) => `${v.name}=${v.value}`)).toEqual(['REGION=eu']);
    expect(bundle.json<{ app_name: string }>('cloud/fleet.json').app_name).toBe('field');
    expect(bundle.json<{ appState: string }>('state/status.json').appState).toBeDefined();
    // The device reads its tags from the cloud; through the proxy that works too.
    expect(bundle.text('device/tags.json')).toContain('greenhouse-2');

    expect(showBundle(bundle)).toContain('cloud: online, fleet field; tags room=greenhouse-2');

    const bytes = gunzipSync(readFileSync(out));
    for (const secret of [cloud.adminKey, device.info().apiKey, password]) expect(bytes.includes(secret), secret.slice(0, 6)).toBe(false);
  }, 120_000);

  it('a device the cloud does not know, or a key it refuses: an error that says so, and no bundle', async () => {
    const out = join(dir, 'none.tar.gz');
    await expect(runCapture({ cloud: cloud.url, cloudKey: cloud.adminKey, uuid: 'f'.repeat(32), out, redaction: 'default', force: false, log: () => undefined }))
      .rejects.toThrow(/the device answered GET \/v1\/device with 404/);
    await expect(runCapture({ cloud: cloud.url, cloudKey: 'not-a-key', uuid, out, redaction: 'default', force: false, log: () => undefined }))
      .rejects.toThrow(/refused the key \(401\)/);
    expect(() => readFileSync(out)).toThrow();
    await expect(runCapture({ cloud: cloud.url, uuid, out, redaction: 'default', force: false, log: () => undefined })).rejects.toThrow(/--cloud needs --cloud-key/);
  });
});
