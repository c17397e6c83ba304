/**
 * Every endpoint of the device API through `inject`, over real peers: dockerd with the local
 * test images, the simulated D-Bus services on a private dbus-daemon, and a real journal.
 * The tests run in order on one device, as a user's session would.
 */
import { writeFileSync, existsSync, mkdirSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceStore } from '../src/supervisor/state/store.js';
import { startSupervisorFixture, twoServiceState, waitApplied, type SupervisorFixture } from './helpers/supervisor-fixture.js';

let f: SupervisorFixture;

beforeAll(async () => {
  f = await startSupervisorFixture();
});
afterAll(async () => {
  await f?.close();
});

type Method = 'GET' | 'POST' | 'PATCH';
async function call(method: Method, url: string, body?: unknown, key: string | null = f.key()) {
  const sep = url.includes('?') ? '&' : '?';
  const res = await f.sup.api.inject({
    method,
    url: key === null ? url : `${url}${sep}apikey=${key}`,
    ...(body !== undefined ? { payload: body as object, headers: { 'content-type': 'application/json' } } : {}),
  });
  return { status: res.statusCode, body: res.body, json: () => res.json() as any, headers: res.headers };
}

async function containerOf(service: string) {
  const [c] = await f.sup.actions.containers(1, service);
  return c;
}

async function execIn(containerId: string, cmd: string[]): Promise<string> {
  const exec = await f.docker.getContainer(containerId).exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({});
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve) => {
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve());
  });
  // Strip the engine's 8-byte multiplexing headers.
  const raw = Buffer.concat(chunks);
  const out: Buffer[] = [];
  for (let i = 0; i + 8 <= raw.length; ) {
    const len = raw.readUInt32BE(i + 4);
    out.push(raw.subarray(i + 8, i + 8 + len));
    i += 8 + len;
  }
  return Buffer.concat(out).toString();
}

const lockFile = (service: string) => join(f.sup.locks.dir(1, service), 'updates.lock');
function holdLock(service: string) {
  mkdirSync(f.sup.locks.dir(1, service), { recursive: true });
  writeFileSync(lockFile(service), '');
}

describe('auth', () => {
  it('ping is open and answers OK', async () => {
    const res = await call('GET', '/ping', undefined, null);
    expect(res.status).toBe(200);
    expect(res.body).toBe('OK');
  });

  it('refuses a missing or wrong key with 401 and the one error body', async () => {
    for (const key of [null, 'wrong']) {
      const res = await call('GET', '/v1/device', undefined, key);
      expect(res.status).toBe(401);
      expect(res.json()).toEqual({ status: 'failed', message: 'Unauthorized' });
    }
  });

  it('accepts the key as a Bearer header too', async () => {
    const res = await f.sup.api.inject({ method: 'GET', url: '/v1/device', headers: { authorization: `Bearer ${f.key()}` } });
    expect(res.statusCode).toBe(200);
    const wrong = await f.sup.api.inject({ method: 'GET', url: '/v1/device', headers: { authorization: 'Bearer nope' } });
    expect(wrong.statusCode).toBe(401);
  });

  it('/v1/healthy is open and 200 while the engine answers', async () => {
    const res = await call('GET', '/v1/healthy', undefined, null);
    expect(res.status).toBe(200);
    expect(res.body).toBe('');
  });
});

describe('local target state', () => {
  it('reads an empty state before one is set', async () => {
    const res = await call('GET', '/v2/local/target-state');
    expect(res.status).toBe(200);
    expect(res.json()).toMatchObject({ status: 'success', state: { local: { apps: {} } } });
  });

  it('rejects bad bodies with 400 naming the field', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{}, /local/],
      [{ local: { name: 'x', config: {}, apps: { '1': { name: 'a', commit: 'c', releaseId: 1, services: { '1': { serviceName: 'main', serviceId: 1, imageId: 1 } } } } } }, /image/],
      [{ local: { name: 'x', config: {}, apps: { '1': { name: 'a', commit: 'c', releaseId: 1, services: { '2': { serviceName: 'main', serviceId: 1, imageId: 1, image: 'i' } } } } } }, /serviceId must equal its key/],
      [{ local: { name: 'x', config: { SUPERVISOR_POLL_INTERVAL: '5' }, apps: {} } }, /SUPERVISOR_POLL_INTERVAL/],
      [{ local: { name: 'x', config: {}, apps: { abc: {} } } }, /apps/],
    ];
    for (const [body, message] of cases) {
      const res = await call('POST', '/v2/local/target-state', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json().status).toBe('failed');
      expect(res.json().message).toMatch(message);
    }
  });

  it('rejects malformed JSON with 400', async () => {
    const res = await f.sup.api.inject({ method: 'POST', url: `/v2/local/target-state?apikey=${f.key()}`, payload: '{"local":', headers: { 'content-type': 'application/json' } });
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(/JSON/);
  });

  it('takes an empty body of any type as no body, and refuses a non-JSON one with 400', async () => {
    // busybox wget --post-data='' labels its empty body as a form, as apps in containers send it.
    const form = await f.sup.api.inject({ method: 'POST', url: `/v1/blink?apikey=${f.key()}`, payload: '', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(form.statusCode).toBe(200);
    const filled = await f.sup.api.inject({ method: 'POST', url: `/v1/update?apikey=${f.key()}`, payload: 'force=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(filled.statusCode).toBe(400);
    expect(filled.json()).toEqual({ status: 'failed', message: 'Unsupported body type application/x-www-form-urlencoded: send JSON with Content-Type: application/json' });
  });

  it('applies a two-service app: containers, network, volume, env', async () => {
    const res = await call('POST', '/v2/local/target-state', { local: twoServiceState() });
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ status: 'success', message: 'OK' });
    await waitApplied(f.sup);
    const main = await containerOf('main');
    const worker = await containerOf('worker');
    expect(main?.state).toBe('running');
    expect(worker?.state).toBe('running');
    const inspect = await f.docker.getContainer(main!.id).inspect();
    const env = new Map(inspect.Config.Env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
    expect(env.get('GREETING')).toBe('hello');
    expect(env.get('PLATFORM_APP_ID')).toBe('1');
    expect(env.get('PLATFORM_SUPERVISOR_API_KEY')).toBe(f.sup.keys.appKey(1));
    expect(env.get('PLATFORM_SUPERVISOR_ADDRESS')).toMatch(/^http:/);
    expect(env.get('PLATFORM_DEVICE_NAME_AT_INIT')).toBe('test-device');
    expect(env.get('PLATFORM_APP_LOCK_PATH')).toBe('/tmp/platform/updates.lock');
    const workerEnv = (await f.docker.getContainer(worker!.id).inspect()).Config.Env.join('\n');
    expect(workerEnv).not.toMatch(/PLATFORM_SUPERVISOR_API_KEY/);
    expect(inspect.Mounts.map((m) => m.Destination).sort()).toEqual(['/data', '/tmp/platform']);
    const state = await call('GET', '/v2/local/target-state');
    expect(state.json().state.local.apps['1'].services['11'].image).toBe('fleetlab/test-app:1');
  });
});

describe('device config', () => {
  it('writes HOST_CONFIG_* values into config.txt, keeping other lines', async () => {
    const { readFileSync } = await import('node:fs');
    mkdirSync(join(f.dir, 'boot'), { recursive: true });
    writeFileSync(f.sup.config.bootConfigPath, 'kernel=own.img\n');
    const res = await call('POST', '/v2/local/target-state', { local: twoServiceState({ config: { HOST_CONFIG_gpu_mem: '64', HOST_CONFIG_dtparam: '"i2c_arm=on","spi=on"' } }) });
    expect(res.status).toBe(200);
    const text = readFileSync(f.sup.config.bootConfigPath, 'utf8');
    expect(text.split('\n')).toEqual(expect.arrayContaining(['kernel=own.img', 'gpu_mem=64', 'dtparam="i2c_arm=on","spi=on"']));
    await call('POST', '/v2/local/target-state', { local: twoServiceState() });
    expect(readFileSync(f.sup.config.bootConfigPath, 'utf8')).toBe('kernel=own.img\n');
    await waitApplied(f.sup);
  });
});

describe('state endpoints', () => {
  it('GET /v1/device', async () => {
    const body = (await call('GET', '/v1/device')).json();
    expect(body).toMatchObject({ api_port: 48484, commit: 'commit1', status: 'Idle', download_progress: null, update_pending: false, update_downloaded: false, update_failed: false });
    for (const k of ['ip_address', 'mac_address', 'os_version', 'supervisor_version']) expect(typeof body[k]).toBe('string');
  });

  it('GET /v2/applications/state is keyed by app name', async () => {
    const body = (await call('GET', '/v2/applications/state')).json();
    expect(body).toEqual({
      myapp: {
        appId: 1,
        commit: 'commit1',
        services: {
          main: { status: 'Running', releaseId: 1, downloadProgress: null },
          worker: { status: 'Running', releaseId: 1, downloadProgress: null },
        },
      },
    });
  });

  it('GET /v2/applications/:appId/state is keyed by service id; unknown app 404', async () => {
    const res = await call('GET', '/v2/applications/1/state');
    expect(res.json()).toEqual({
      local: { '1': { services: { '11': { status: 'Running', releaseId: 1, download_progress: null }, '12': { status: 'Running', releaseId: 1, download_progress: null } } } },
      commit: 'commit1',
    });
    expect((await call('GET', '/v2/applications/99/state')).status).toBe(404);
    expect((await call('GET', '/v2/applications/abc/state')).status).toBe(400);
  });

  it('GET /v2/state/status', async () => {
    const body = (await call('GET', '/v2/state/status')).json();
    expect(body).toMatchObject({ status: 'success', appState: 'applied', overallDownloadProgress: null, release: '1' });
    expect(body.containers).toHaveLength(2);
    for (const c of body.containers) {
      expect(Object.keys(c).sort()).toEqual(['appId', 'containerId', 'createdAt', 'imageId', 'serviceId', 'serviceName', 'status']);
      expect(Number.isNaN(Date.parse(c.createdAt))).toBe(false);
    }
    expect(body.images.map((i: any) => i.name).sort()).toEqual(['fleetlab/test-app:1', 'fleetlab/test-app:2']);
    expect(body.images[0]).toMatchObject({ status: 'Downloaded', downloadProgress: null, engineImageId: expect.stringMatching(/^sha256:/) });
  });

  it('GET /v2/version, /v2/device/name, /v2/device/vpn, /v2/device/tags', async () => {
    expect((await call('GET', '/v2/version')).json()).toEqual({ status: 'success', version: f.sup.version });
    expect((await call('GET', '/v2/device/name')).json()).toEqual({ status: 'success', deviceName: 'test-device' });
    expect((await call('GET', '/v2/device/vpn')).json()).toEqual({ status: 'success', vpn: { enabled: true, connected: false } });
    const tags = await call('GET', '/v2/device/tags');
    expect(tags.status).toBe(503);
    expect(tags.json().status).toBe('failed');
  });

  it('GET /v2/containerId with and without service', async () => {
    const main = await containerOf('main');
    const all = (await call('GET', '/v2/containerId')).json();
    expect(all.status).toBe('success');
    expect(all.services.main).toBe(main!.id);
    expect((await call('GET', '/v2/containerId?service=main')).json()).toEqual({ status: 'success', containerId: main!.id });
    expect((await call('GET', '/v2/containerId?service=nope')).status).toBe(404);
  });

  it('POST /v1/update answers 204 and GET /v2/local/device-info', async () => {
    const res = await call('POST', '/v1/update', { force: false });
    expect(res.status).toBe(204);
    expect(res.body).toBe('');
    expect((await call('POST', '/v1/update', { force: 'yes' })).status).toBe(400);
    const info = (await call('GET', '/v2/local/device-info')).json();
    expect(info).toEqual({ status: 'success', info: { arch: expect.any(String), deviceType: 'raspberrypi3' } });
  });

  it('POST /v1/blink answers 200 with an empty body', async () => {
    const res = await call('POST', '/v1/blink');
    expect(res.status).toBe(200);
    expect(res.body).toBe('');
    f.sup.blinker.stop();
  });
});

describe('v1 app endpoints', () => {
  it('refuse a multi-container app with 400 and an unknown app with 404', async () => {
    for (const [m, url] of [['GET', '/v1/apps/1'], ['POST', '/v1/apps/1/stop'], ['POST', '/v1/apps/1/start']] as const) {
      const res = await call(m, url);
      expect(res.status, url).toBe(400);
      expect(res.json().message).toMatch(/v2/);
    }
    expect((await call('GET', '/v1/apps/7')).status).toBe(404);
  });
});

describe('v1 app endpoints on a single-service app', () => {
  it('GET /v1/apps/:appId, stop and start', async () => {
    const state = twoServiceState();
    state.apps['2'] = {
      name: 'solo', commit: 'solo1', releaseId: '5', volumes: {}, networks: {},
      services: { '21': { serviceName: 'solo', serviceId: 21, imageId: 201, image: 'fleetlab/test-app:1', environment: { MODE: 'one' }, labels: {} } },
    };
    expect((await call('POST', '/v2/local/target-state', { local: state })).status).toBe(200);
    await waitApplied(f.sup);
    const [solo] = await f.sup.actions.containers(2, 'solo');
    const app = (await call('GET', '/v1/apps/2')).json();
    expect(app).toMatchObject({ appId: 2, commit: 'solo1', imageId: 'fleetlab/test-app:1', containerId: solo!.id });
    expect(app.env).toMatchObject({ MODE: 'one', PLATFORM_APP_LOCK_PATH: '/tmp/platform/updates.lock' });
    const stop = await call('POST', '/v1/apps/2/stop');
    expect(stop.status).toBe(200);
    expect(stop.json()).toEqual({ containerId: solo!.id });
    expect((await f.sup.actions.containers(2, 'solo'))[0]?.state).toBe('exited');
    const start = await call('POST', '/v1/apps/2/start');
    expect(start.json()).toEqual({ containerId: solo!.id });
    expect((await f.sup.actions.containers(2, 'solo'))[0]?.state).toBe('running');
    // Back to the one app the later tests expect; the removed app's containers go.
    await call('POST', '/v2/local/target-state', { local: twoServiceState() });
    await waitApplied(f.sup);
    expect(await f.sup.actions.containers(2)).toEqual([]);
  });
});

describe('v2 service actions', () => {
  it('validate the selector: missing 400, unknown 404, mismatched 400', async () => {
    expect((await call('POST', '/v2/applications/1/stop-service', {})).status).toBe(400);
    expect((await call('POST', '/v2/applications/1/stop-service', { serviceName: 'nope' })).status).toBe(404);
    expect((await call('POST', '/v2/applications/1/stop-service', { imageId: 999 })).status).toBe(404);
    const mismatch = await call('POST', '/v2/applications/1/stop-service', { serviceName: 'main', imageId: 102 });
    expect(mismatch.status).toBe(400);
    expect(mismatch.json().message).toMatch(/different services/);
    expect((await call('POST', '/v2/applications/1/stop-service', { serviceName: 5 })).status).toBe(400);
    expect((await call('POST', '/v2/applications/42/stop-service', { serviceName: 'main' })).status).toBe(404);
  });

  it('stop-service keeps the container; start-service starts it again', async () => {
    const before = await containerOf('worker');
    const stop = await call('POST', '/v2/applications/1/stop-service', { imageId: 102 });
    expect(stop.status).toBe(200);
    expect(stop.body).toBe('OK');
    const stopped = await containerOf('worker');
    expect(stopped?.id).toBe(before?.id);
    expect(stopped?.state).toBe('exited');
    expect((await call('GET', '/v2/applications/state')).json().myapp.services.worker.status).toBe('Stopped');
    // An update cycle does not undo a user's stop.
    await call('POST', '/v1/update');
    await f.sup.state.settled();
    expect((await containerOf('worker'))?.state).toBe('exited');
    const start = await call('POST', '/v2/applications/1/start-service', { serviceName: 'worker' });
    expect(start.status).toBe(200);
    expect((await containerOf('worker'))?.state).toBe('running');
  });

  it('restart-service recreates the container', async () => {
    const before = await containerOf('worker');
    const res = await call('POST', '/v2/applications/1/restart-service', { serviceName: 'worker' });
    expect(res.status).toBe(200);
    const after = await containerOf('worker');
    expect(after?.id).not.toBe(before?.id);
    expect(after?.state).toBe('running');
  });

  it('restart (v2 and v1) recreates every container', async () => {
    const before = [(await containerOf('main'))!.id, (await containerOf('worker'))!.id];
    expect((await call('POST', '/v2/applications/1/restart', {})).status).toBe(200);
    const mid = [(await containerOf('main'))!.id, (await containerOf('worker'))!.id];
    expect(mid.some((id) => before.includes(id))).toBe(false);
    const v1 = await call('POST', '/v1/restart', { appId: 1 });
    expect(v1.status).toBe(200);
    expect(v1.body).toBe('OK');
    const after = [(await containerOf('main'))!.id, (await containerOf('worker'))!.id];
    expect(after.some((id) => mid.includes(id))).toBe(false);
    expect((await call('POST', '/v1/restart', {})).status).toBe(400);
    expect((await call('POST', '/v1/restart', { appId: 'one' })).json().message).toMatch(/appId/);
  });
});

describe('update locks', () => {
  it('a lock held by the app refuses stop, restart, purge with 423; force overrides', async () => {
    holdLock('main');
    const before = await containerOf('main');
    for (const [url, body] of [
      ['/v2/applications/1/restart-service', { serviceName: 'main' }],
      ['/v2/applications/1/stop-service', { serviceName: 'main' }],
      ['/v2/applications/1/restart', {}],
      ['/v1/restart', { appId: 1 }],
    ] as const) {
      const res = await call('POST', url, body);
      expect(res.status, url).toBe(423);
      expect(res.json()).toEqual({ status: 'failed', message: expect.stringMatching(/lock/) });
    }
    const purge = await call('POST', '/v1/purge', { appId: 1 });
    expect(purge.status).toBe(423);
    expect(purge.json()).toEqual({ Data: '', Error: expect.stringMatching(/lock/) });
    expect((await containerOf('main'))?.id).toBe(before?.id);
    // start does not respect locks
    expect((await call('POST', '/v2/applications/1/start-service', { serviceName: 'main' })).status).toBe(200);
    const forced = await call('POST', '/v2/applications/1/restart-service', { serviceName: 'main', force: true });
    expect(forced.status).toBe(200);
    expect((await containerOf('main'))?.id).not.toBe(before?.id);
    expect(existsSync(lockFile('main'))).toBe(false);
  });

  it('an update waits for the lock: new images downloaded, old release runs, then installs', async () => {
    holdLock('main');
    const old = await containerOf('main');
    await call('POST', '/v2/local/target-state', { local: twoServiceState({ releaseId: 2, mainImage: 'fleetlab/test-app:2' }) });
    // Bounded wait for the engine to try and be refused by the lock.
    for (let i = 0; i < 100 && !f.sup.state.updateLocked; i++) await new Promise((r) => setTimeout(r, 50));
    expect(f.sup.state.updateLocked).toBe(true);
    expect((await containerOf('main'))?.id).toBe(old?.id);
    const status = (await call('GET', '/v2/state/status')).json();
    expect(status.appState).toBe('applying');
    expect((await call('GET', '/v1/device')).json().update_pending).toBe(true);
    const services = (await call('GET', '/v2/applications/state')).json().myapp.services;
    expect(services.main.status).toBe('Downloaded');
    writeFileSync(lockFile('main'), '');
    const { rmSync } = await import('node:fs');
    rmSync(lockFile('main'));
    await waitApplied(f.sup);
    const now = await containerOf('main');
    expect(now?.id).not.toBe(old?.id);
    expect(now?.releaseId).toBe(2);
  });
});

describe('purge and volumes', () => {
  it('purge clears /data and recreates the containers', async () => {
    const main = await containerOf('main');
    await execIn(main!.id, ['sh', '-c', 'echo kept > /data/file']);
    expect(await execIn(main!.id, ['cat', '/data/file'])).toBe('kept\n');
    const res = await call('POST', '/v1/purge', { appId: 1 });
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ Data: 'OK', Error: '' });
    const after = await containerOf('main');
    expect(after?.id).not.toBe(main?.id);
    expect(await execIn(after!.id, ['ls', '/data'])).toBe('');
    expect((await call('POST', '/v2/applications/1/purge', {})).status).toBe(200);
    expect((await call('POST', '/v1/purge', {})).json()).toEqual({ Data: '', Error: expect.stringMatching(/appId/) });
  });

  it('cleanup-volumes removes unreferenced volumes only', async () => {
    await f.sup.engine.createVolume(1, 'orphan');
    const res = await call('GET', '/v2/cleanup-volumes');
    expect(res.json()).toEqual({ status: 'success' });
    const names = (await f.sup.engine.snapshot()).volumes.map((v) => v.volume);
    expect(names).toContain('data');
    expect(names).not.toContain('orphan');
  });
});

describe('scoped keys and regeneration', () => {
  it('an app key reaches its own app and is refused for another', async () => {
    const appKey = f.sup.keys.appKey(1);
    expect((await call('GET', '/v2/applications/1/state', undefined, appKey)).status).toBe(200);
    expect((await call('GET', '/v2/applications/2/state', undefined, appKey)).status).toBe(401);
    expect((await call('POST', '/v1/restart', { appId: 2 }, appKey)).status).toBe(401);
    expect(Object.keys((await call('GET', '/v2/applications/state', undefined, appKey)).json())).toEqual(['myapp']);
  });

  it('regenerating the app key refuses the old one at once', async () => {
    const old = f.sup.keys.appKey(1);
    const res = await call('POST', '/v1/regenerate-api-key', undefined, old);
    expect(res.status).toBe(200);
    expect(res.body).toMatch(/^[0-9a-f]{32}$/);
    expect((await call('GET', '/v2/applications/1/state', undefined, old)).status).toBe(401);
    expect((await call('GET', '/v2/applications/1/state', undefined, res.body)).status).toBe(200);
  });

  it('regenerating the device key persists across a restart', async () => {
    const old = f.key();
    const res = await call('POST', '/v1/regenerate-api-key', undefined, old);
    expect(res.status).toBe(200);
    expect((await call('GET', '/v1/device', undefined, old)).status).toBe(401);
    expect((await call('GET', '/v1/device', undefined, res.body)).status).toBe(200);
    const reopened = DeviceStore.open(f.sup.config.dataDir, () => ({ uuid: '', deviceKey: 'fresh', appKeys: {}, localMode: false, deviceName: '', localTarget: null, cloudTarget: null, registered: false, cloudKey: '', generation: 0 }));
    expect(reopened.get().deviceKey).toBe(res.body);
  });
});

describe('host config', () => {
  it('reads the hostname and no proxy at first', async () => {
    const res = await call('GET', '/v1/device/host-config');
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ network: { hostname: 'fleetlab' } });
  });

  it('sets the hostname through hostname1 and the proxy through redsocks + systemd1', async () => {
    const res = await call('PATCH', '/v1/device/host-config', {
      network: { hostname: 'bench-7', proxy: { type: 'socks5', ip: 'proxy.local', port: 1080, login: 'u', password: 'secret', noProxy: ['10.0.0.0/8'] } },
    });
    expect(res.status).toBe(200);
    expect(res.body).toBe('OK');
    expect(f.peer.hostname).toBe('bench-7');
    expect(f.peer.unitRestarts.map((r) => r.unit)).toContain('redsocks.service');
    const read = (await call('GET', '/v1/device/host-config')).json();
    expect(read).toEqual({ network: { hostname: 'bench-7', proxy: { type: 'socks5', ip: 'proxy.local', port: '1080', login: 'u', noProxy: ['10.0.0.0/8'] } } });
  });

  it('leaves absent fields alone and resets with null, "" and {}', async () => {
    await call('PATCH', '/v1/device/host-config', { network: { hostname: 'other' } });
    expect((await call('GET', '/v1/device/host-config')).json().network.proxy?.ip).toBe('proxy.local');
    await call('PATCH', '/v1/device/host-config', { network: { proxy: {} } });
    expect((await call('GET', '/v1/device/host-config')).json()).toEqual({ network: { hostname: 'other' } });
    await call('PATCH', '/v1/device/host-config', { network: { hostname: '' } });
    expect(f.peer.hostname).toBe(f.sup.uuid.slice(0, 7));
  });

  it('rejects bad input with 400 naming the field', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ network: { proxy: { type: 'ftp', ip: 'a', port: 1 } } }, /type/],
      [{ network: { proxy: { type: 'socks5', ip: 'a', port: 70000 } } }, /port/],
      [{ network: { proxy: { type: 'socks5', ip: 'a' } } }, /port/],
      [{ network: { proxy: { type: 'socks5', ip: 'a', port: 1, password: 'x"; evil' } } }, /password/],
      [{ network: { hostname: 'bad name!' } }, /hostname/],
      [{ network: { hostname: 7 } }, /hostname/],
    ];
    for (const [body, message] of cases) {
      const res = await call('PATCH', '/v1/device/host-config', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json().message).toMatch(message);
    }
  });

  it('respects update locks; force at the top level or inside network overrides', async () => {
    holdLock('worker');
    const refused = await call('PATCH', '/v1/device/host-config', { network: { hostname: 'locked' } });
    expect(refused.status).toBe(423);
    expect(f.peer.hostname).not.toBe('locked');
    expect((await call('PATCH', '/v1/device/host-config', { network: { hostname: 'forced1', force: true } })).status).toBe(200);
    holdLock('worker');
    expect((await call('PATCH', '/v1/device/host-config', { network: { hostname: 'forced2' }, force: true })).status).toBe(200);
    expect(f.peer.hostname).toBe('forced2');
    const { rmSync } = await import('node:fs');
    rmSync(lockFile('worker'), { force: true });
  });
});

describe('journal logs', () => {
  it('streams entries with count, unit and format', async () => {
    await f.journal.write({ message: 'first line', unit: 'demo.service' });
    await f.journal.write({ message: 'second line', unit: 'demo.service' });
    await f.journal.write({ message: 'other unit', unit: 'other.service' });
    await f.journal.flush();
    const res = await call('POST', '/v2/journal-logs', { count: 1, unit: 'demo.service', format: 'json' });
    expect(res.status).toBe(200);
    const lines = res.body.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.MESSAGE)).toEqual(['second line']);
    const short = await call('POST', '/v2/journal-logs', { unit: 'demo.service', format: 'cat' });
    expect(short.body).toBe('first line\nsecond line\n');
  });

  it('rejects bad fields with 400 naming them', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ count: 0 }, /count/],
      [{ count: 'ten' }, /count/],
      [{ unit: '--help' }, /unit/],
      [{ format: 'xml' }, /format/],
      [{ since: 'yesterday-ish' }, /since/],
      // journalctl matches a pattern once, when it starts: a follow of one that matches nothing would never show an entry.
      [{ unit: 'no-such-*.service', follow: true }, /unit "no-such-\*\.service" matches no unit/],
    ];
    for (const [body, message] of cases) {
      const res = await call('POST', '/v2/journal-logs', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json().message).toMatch(message);
    }
  });

  it('a follow answers its head at once, before there is an entry to send, and streams the entry when it comes', async () => {
    const address = await f.sup.api.listen({ port: 0, host: '127.0.0.1' });
    const unit = 'quiet-until-now.service';
    const req = request(`${address}/v2/journal-logs?apikey=${f.key()}`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    req.end(JSON.stringify({ follow: true, unit, format: 'cat' }));
    // fastify alone sends a stream's head with its first chunk, and a quiet unit may never write one.
    const res = await new Promise<IncomingMessage>((resolve, reject) => req.once('response', resolve).once('error', reject));
    try {
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/plain/);
      await f.journal.write({ message: 'finally', unit });
      let text = '';
      for await (const chunk of res) {
        text += String(chunk);
        if (text.includes('\n')) break;
      }
      expect(text).toBe('finally\n');
    } finally {
      req.destroy();
    }
  });
});

describe('power', () => {
  it('reboot and shutdown: 423 under a lock, 202 {Data, Error} and login1 called with force', async () => {
    holdLock('main');
    const refused = await call('POST', '/v1/reboot', {});
    expect(refused.status).toBe(423);
    expect(refused.json()).toEqual({ Data: '', Error: expect.stringMatching(/lock/) });
    expect((await call('POST', '/v1/shutdown')).status).toBe(423);
    const res = await call('POST', '/v1/reboot', { force: true });
    expect(res.status).toBe(202);
    expect(res.json()).toEqual({ Data: 'OK', Error: '' });
    for (let i = 0; i < 200 && f.peer.powerRequests.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(f.peer.powerRequests.map((p) => p.action)).toEqual(['reboot']);
    // Services were stopped first.
    expect((await containerOf('main'))?.state).toBe('exited');
  });
});

describe('leaving local mode', () => {
  it('local endpoints then need a key and refuse a new target state', async () => {
    await call('POST', '/v2/local/target-state', { local: { ...twoServiceState({ releaseId: 2, mainImage: 'fleetlab/test-app:2' }), config: { SUPERVISOR_LOCAL_MODE: '0' } } });
    expect(f.sup.localMode()).toBe(false);
    expect((await call('GET', '/v2/local/target-state', undefined, null)).status).toBe(401);
    expect((await call('GET', '/v2/local/target-state')).status).toBe(200);
    const res = await call('POST', '/v2/local/target-state', { local: twoServiceState() });
    expect(res.status).toBe(400);
    expect(res.json().message).toMatch(/local mode/);
    expect((await call('GET', '/v2/local/device-info')).status).toBe(400);
  });
});
