/**
 * `fleetlab capture` against a simulated device (issue 14): its API, its journal, and a shell
 * on the host that is "the device" for the sim target. The bundle holds what the device
 * shows and none of the secrets planted on it; a device that goes away half way gives a
 * bundle marked incomplete; a device that is not there or refuses the key gives no bundle.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBundle } from '../hil/capture/bundle.js';
import { captureDevice, type CaptureOptions } from '../hil/capture/capture.js';
import { simDevicePaths } from '../hil/harness/capture-command.js';
import { showBundle } from '../hil/capture/show.js';
import { httpApi } from '../hil/lib/http.js';
import { hostShell } from '../hil/targets/host-shell.js';
import { SimDevice } from '../sim/device.js';
import { freePort } from '../src/free-port.js';
import { supervisorUnit } from '../sim/journal/journal-sim.js';

let device: SimDevice;
let key: string;
let dir: string;
const dbPassword = `db-${Date.now().toString(36)}-not-for-bundles`;

const target = {
  local: {
    name: 'field-device',
    config: { SUPERVISOR_LOCAL_MODE: '1' },
    apps: {
      '1': {
        name: 'demo',
        commit: 'c0ffee1',
        releaseId: '1',
        services: {
          '11': { serviceName: 'main', serviceId: 11, imageId: 101, image: 'fleetlab/test-app:1', environment: { LOG_LEVEL: 'debug', DB_PASSWORD: dbPassword }, labels: {} },
        },
        volumes: {},
        networks: {},
      },
    },
  },
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-capture-test-'));
  device = await SimDevice.start({ port: 0, engine: 'sim', dockerSocket: '/var/run/docker.sock', localMode: true });
  key = device.info().apiKey;
  const api = httpApi({ url: device.url, apiKey: key, uuid: '', vendor: '', lockRoot: '' });
  expect((await api.request('POST', '/v2/local/target-state', { body: target })).status).toBe(200);
  for (let i = 0; i < 300; i++) {
    const status = (await api.request('GET', '/v2/state/status')).json<{ appState: string; containers: unknown[] }>();
    if (status.appState === 'applied' && status.containers.length === 1) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  // What a field device's journal holds: the supervisor failing on something, with its key in a URL.
  await device.journal.write({ unit: supervisorUnit, identifier: 'fleetlab-supervisor', priority: 3, message: `error: polling http://cloud.example/device/v3/state?apikey=${key} failed: ETIMEDOUT` });
  await device.journal.flush();
}, 120_000);

afterAll(async () => {
  await device?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const options = (out: string, extra: Partial<CaptureOptions> = {}): CaptureOptions => ({
  out,
  source: { kind: 'api', address: device.url },
  api: httpApi({ url: device.url, apiKey: key, uuid: '', vendor: '', lockRoot: '' }),
  key,
  exec: hostShell,
  paths: device.paths,
  redaction: 'default',
  fleetlab: '0.0.0-test',
  ...extra,
});

describe('capture from a simulated device', () => {
  it('holds what the device shows, says what it could not read, and none of the secrets', async () => {
    const out = join(dir, 'field.tar.gz');
    const progress: string[] = [];
    const manifest = await captureDevice(options(out, { progress: (line) => progress.push(line) }));
    expect(manifest.complete).toBe(true);
    const byName = Object.fromEntries(manifest.steps.map((s) => [s.name, s]));
    for (const step of ['supervisor', 'device', 'store', 'locks', 'engine', 'state', 'local-target', 'host-config', 'journal', 'clock', 'disk']) expect(byName[step]?.status, step).toBe('ok');
    // This device has no cloud: the device itself says why its tags are missing.
    expect(byName.tags).toMatchObject({ status: 'failed', error: expect.stringMatching(/503 .*cloud/) });
    expect(progress.find((line) => line.startsWith('tags:'))).toMatch(/^tags: failed: GET \/v2\/device\/tags: 503 .* \(\d+ ms\)$/);

    const bundle = await readBundle(out);
    const status = bundle.json<{ appState: string; containers: Array<{ serviceName: string; status: string }> }>('state/status.json');
    expect(status.appState).toBe('applied');
    expect(status.containers.map((c) => `${c.serviceName} ${c.status}`)).toEqual(['main Running']);
    const local = bundle.json<any>('state/local-target.json');
    expect(local.state.local.apps['1'].services['11'].environment).toEqual({ LOG_LEVEL: 'debug', DB_PASSWORD: '<redacted>' });
    expect(bundle.text('host/clock.txt')).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z\n[\d.]+ [\d.]+\n$/);

    // The supervisor's own store and what the engine holds for the device, keys blanked.
    const store = bundle.json<{ uuid: string; deviceKey: string; localTarget: { apps: Array<{ releaseId: number }> } }>('supervisor/store.json');
    expect(store.uuid).toBe(device.info().uuid);
    expect(store.deviceKey).toBe('<redacted>');
    expect(store.localTarget.apps.map((a) => a.releaseId)).toEqual([1]);
    expect(bundle.json('supervisor/locks.json')).toEqual({ root: device.lockRoot, files: [] });
    const containers = bundle.json<Array<{ Name: string; State: { Running: boolean }; Config: { Env: string[]; Labels: Record<string, string> } }>>('engine/containers.json');
    expect(containers.map((c) => [c.Name, c.State.Running, c.Config.Labels['io.fleetlab.service-name']])).toEqual([[`/${store.uuid.slice(0, 7)}_main_1`, true, 'main']]);
    expect(containers[0]!.Config.Env).toContain('DB_PASSWORD=<redacted>');
    const images = bundle.json<{ present: Array<{ RepoTags: string[] }>; missing: string[] }>('engine/images.json');
    expect(images.present.flatMap((i) => i.RepoTags)).toContain('fleetlab/test-app:1');
    expect(images.missing).toEqual([]);

    const bytes = gunzipSync(readFileSync(out));
    expect(bytes.includes(key)).toBe(false);
    expect(bytes.includes(dbPassword)).toBe(false);
    expect(bundle.text('journal/journal.jsonl')).toContain('apikey=<redacted> failed: ETIMEDOUT');

    const shown = showBundle(bundle);
    expect(shown).toContain('complete: the capture ran every step');
    expect(shown).toContain('app 1 main: Running');
    expect(shown).toContain('app 1 demo release 1 (c0ffee1): main fleetlab/test-app:1');
    expect(shown).toMatch(/last errors in the supervisor's log \(newest last\):\n {2}\S+ error: polling http:\/\/cloud\.example\/device\/v3\/state\?apikey=<redacted> failed: ETIMEDOUT/);
    expect(shown).toMatch(/not captured:\n {2}tags: GET \/v2\/device\/tags: 503/);
  });

  it('without a shell, the host facts are recorded as not captured, in one line', async () => {
    const out = join(dir, 'api-only.tar.gz');
    const manifest = await captureDevice(options(out, { exec: undefined }));
    expect(manifest.complete).toBe(true);
    expect(manifest.steps.filter((s) => s.status === 'failed').map((s) => s.name)).toEqual(['store', 'locks', 'engine', 'tags', 'dmesg', 'clock', 'disk', 'network']);
    expect(showBundle(await readBundle(out))).toContain('  store, locks, engine, dmesg, clock, disk, network: needs a shell on the device; this capture has only its API');
  });

  it('--redact-env drops every environment value; --no-redact keeps them', async () => {
    const env = join(dir, 'env.tar.gz');
    await captureDevice(options(env, { redaction: 'env' }));
    expect((await readBundle(env)).json<any>('state/local-target.json').state.local.apps['1'].services['11'].environment).toEqual({ LOG_LEVEL: '<redacted>', DB_PASSWORD: '<redacted>' });
    const none = join(dir, 'none.tar.gz');
    await captureDevice(options(none, { redaction: 'none' }));
    expect((await readBundle(none)).json<any>('state/local-target.json').state.local.apps['1'].services['11'].environment).toEqual({ LOG_LEVEL: 'debug', DB_PASSWORD: dbPassword });
  });

  it('a key the device refuses, or no device at the URL: an error and no file', async () => {
    const refused = join(dir, 'refused.tar.gz');
    await expect(captureDevice(options(refused, { api: httpApi({ url: device.url, apiKey: 'not-the-key', uuid: '', vendor: '', lockRoot: '' }) }))).rejects.toThrow("the device refused the key (401): pass the device's key");
    expect(existsSync(refused)).toBe(false);
    const nobody = join(dir, 'nobody.tar.gz');
    await expect(captureDevice(options(nobody, { api: httpApi({ url: `http://127.0.0.1:${await freePort()}`, apiKey: key, uuid: '', vendor: '', lockRoot: '' }) }))).rejects.toThrow(/cannot reach the device: .*ECONNREFUSED/);
    expect(existsSync(nobody)).toBe(false);
  });

  it('stopped (Ctrl-C) after a step: the bundle keeps that step and says it is incomplete', async () => {
    const out = join(dir, 'stopped.tar.gz');
    const stop = new AbortController();
    const manifest = await captureDevice(options(out, { signal: stop.signal, progress: (line) => line.startsWith('device:') && stop.abort() }));
    expect(manifest.complete).toBe(false);
    expect(manifest.steps.map((s) => s.name)).toEqual(['supervisor', 'device']);
    expect((await readBundle(out)).manifest.complete).toBe(false);
  });

  // Last: the device goes away for good.
  it('a device that goes away half way gives a bundle marked incomplete, holding what was read before', async () => {
    const out = join(dir, 'gone.tar.gz');
    const inner = httpApi({ url: device.url, apiKey: key, uuid: '', vendor: '', lockRoot: '' });
    let requests = 0;
    const api: CaptureOptions['api'] = {
      async request(method, path, requestOptions) {
        // The preflight and the "supervisor" and "device" steps get answers; then the power goes.
        if (++requests === 5) await device.powerOff();
        return inner.request(method, path, requestOptions);
      },
    };
    const manifest = await captureDevice(options(out, { api }));
    expect(manifest.complete).toBe(false);
    expect(manifest.steps.map((s) => `${s.name} ${s.status}`)).toEqual(['supervisor ok', 'device ok', 'store ok', 'locks ok', 'engine ok', 'state failed']);
    const bundle = await readBundle(out);
    expect(bundle.names()).toEqual([
      'device/device.json', 'device/name.json',
      'engine/containers.json', 'engine/images.json', 'engine/networks.json', 'engine/volumes.json',
      'supervisor/locks.json', 'supervisor/store.json', 'supervisor/version.json',
    ]);
    const shown = showBundle(bundle);
    expect(shown).toContain('INCOMPLETE: the capture stopped before its last step');
    expect(shown).toMatch(/not captured:\n {2}state: GET \/v2\/state\/status: .*ECONNREFUSED/);
  });
});

describe('--sim-dir', () => {
  it("finds the supervisor's files and engine from the state directory a simulated device prints", () => {
    expect(simDevicePaths(device.info().dataDir)).toEqual({ ...device.paths });
    expect(() => simDevicePaths(dir)).toThrow(`--sim-dir must be a simulated device's state directory (the "state:" line 'fleetlab sim device' prints), holding supervisor/device.json; ${dir} does not`);
  });
});

