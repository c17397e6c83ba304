/**
 * A supervisor answering as an older upstream version (`supervisorVersion`), through `inject`
 * over real peers: the simulated engine (its containers keep the environment they were made
 * with), a private D-Bus with the simulated host services, and a real journal. Each version is
 * its own device; what it must answer comes from the spec's Versioning table
 * (docs/device-api.md, "Supervisor versions").
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimEngine, type SimEngineHandle } from '../sim/engine/index.js';
import { checkedLocal, startSupervisorFixture, twoServiceState, waitApplied, type SupervisorFixture } from './helpers/supervisor-fixture.js';

let dir: string;
let engine: SimEngineHandle;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fleetlab-versions-api-'));
  engine = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'engine'), bandwidth: 1_000_000_000 });
});
afterAll(async () => {
  await engine?.close();
  await rm(dir, { recursive: true, force: true });
});

/** A device of its own at `version`, closed after its describe block. */
function deviceAt(version: string): () => SupervisorFixture {
  let f: SupervisorFixture | undefined;
  beforeAll(async () => {
    f = await startSupervisorFixture({ dockerSocket: engine.socketPath, dir: join(dir, version), settings: { supervisorVersion: version } });
  });
  afterAll(async () => {
    await f?.close();
  });
  return () => f!;
}

async function call(f: SupervisorFixture, method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown, key: string | null = f.key()) {
  const res = await f.sup.api.inject({
    method,
    url: key === null ? url : `${url}${url.includes('?') ? '&' : '?'}apikey=${key}`,
    ...(body !== undefined ? { payload: typeof body === 'string' ? body : JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  return { status: res.statusCode, body: res.body, json: () => res.json() as Record<string, unknown> };
}

/** What a path that never existed answers: the shape every missing endpoint must match. */
async function unknownRoute(f: SupervisorFixture, method: 'GET' | 'POST', path: string, body?: unknown, key?: string | null) {
  const res = await call(f, method, path, body, key);
  return { status: res.status, body: res.body.replace(path, '<path>') };
}

async function envOf(f: SupervisorFixture, service: string): Promise<Record<string, string>> {
  const [c] = await f.sup.actions.containers(1, service);
  const info = await f.docker.getContainer(c!.id).inspect();
  return Object.fromEntries((info.Config.Env ?? []).map((e: string) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
}

describe('9.7.0', () => {
  const f = deviceAt('9.7.0');

  it('answers GET /v2/state/status, and reports 9.7.0 in /v1/device and /v2/version', async () => {
    const status = await call(f(), 'GET', '/v2/state/status');
    expect(status.status).toBe(200);
    expect(status.json()).toMatchObject({ status: 'success', appState: expect.stringMatching(/^(applied|applying)$/) });
    expect((await call(f(), 'GET', '/v1/device')).json().supervisor_version).toBe('9.7.0');
    expect((await call(f(), 'GET', '/v2/version')).json()).toEqual({ status: 'success', version: '9.7.0' });
  });

  it('answers GET /v2/device/name and POST /v2/journal-logs as a route that does not exist: 404 with a key, 401 without', async () => {
    for (const [method, path, body] of [['GET', '/v2/device/name', undefined], ['POST', '/v2/journal-logs', { count: 1 }], ['POST', '/v2/journal-logs', { count: -1, format: 'nope' }]] as const) {
      const missing = await unknownRoute(f(), method, path, body);
      expect(missing).toEqual(await unknownRoute(f(), method, `/v2/never-${method.toLowerCase()}`, body));
      expect(missing.status, `${method} ${path}`).toBe(404);
      expect(JSON.parse(missing.body)).toEqual({ status: 'failed', message: `Not found: ${method} <path>` });
      const keyless = await unknownRoute(f(), method, path, body, null);
      expect(keyless).toEqual(await unknownRoute(f(), method, `/v2/never-${method.toLowerCase()}`, body, null));
      expect(keyless.status).toBe(401);
    }
    // Bytes that are not JSON meet the same parser on both.
    expect(await unknownRoute(f(), 'POST', '/v2/journal-logs', '{nope')).toEqual(await unknownRoute(f(), 'POST', '/v2/never-post', '{nope'));
  });

  it('keeps what 9.7.0 had: the v2 service actions and the v1 endpoints', async () => {
    expect((await call(f(), 'GET', '/v2/containerId')).status).toBe(200);
    expect((await call(f(), 'GET', '/v1/healthy', undefined, null)).status).toBe(200);
    expect((await call(f(), 'POST', '/v2/applications/1/restart-service', { serviceName: 'main' })).status).toBe(404); // no app 1 yet: an app error, not a route's
    expect(JSON.parse((await call(f(), 'POST', '/v2/applications/1/restart-service', { serviceName: 'main' })).body).message).toBe('App 1 is not on this device');
  });
});

describe('7.20.0', () => {
  const f = deviceAt('7.20.0');
  beforeAll(async () => {
    // No local-mode endpoints before 7.21: the target goes to the supervisor as the local route would hand it.
    await f().sup.setLocalTarget(checkedLocal(twoServiceState()));
    await waitApplied(f().sup);
  });

  it('has no GET /v2/version, nor the local-mode endpoints', async () => {
    expect((await call(f(), 'GET', '/v2/version')).status).toBe(404);
    expect((await call(f(), 'GET', '/v2/local/target-state')).status).toBe(404);
    expect((await call(f(), 'GET', '/v2/applications/state')).status).toBe(200);
  });

  it('gives a labelled service its API variables with the legacy prefix RESIN_, and the rest with the vendor word', async () => {
    const env = await envOf(f(), 'main');
    expect(env).toMatchObject({ RESIN_SUPERVISOR_PORT: '48484', RESIN_SUPERVISOR_API_KEY: f().sup.keys.appKey(1), RESIN_APP_ID: '1', RESIN_DEVICE_NAME_AT_INIT: 'test-device', PLATFORM_DEVICE_UUID: f().sup.uuid, PLATFORM_APP_LOCK_PATH: '/tmp/platform/updates.lock' });
    expect(env.RESIN_SUPERVISOR_ADDRESS).toMatch(/^http:\/\//);
    expect(Object.keys(env).filter((k) => /^PLATFORM_(SUPERVISOR_|APP_ID|DEVICE_NAME_AT_INIT)/.test(k))).toEqual([]);
    const worker = await envOf(f(), 'worker');
    expect(Object.keys(worker).filter((k) => k.startsWith('RESIN_'))).toEqual([]);
  });

  it('names a service by imageId only: serviceName alone is a body with neither (before 8.2.2)', async () => {
    const byName = await call(f(), 'POST', '/v2/applications/1/restart-service', { serviceName: 'worker' });
    expect(byName.status).toBe(400);
    expect(byName.json()).toEqual({ status: 'failed', message: 'body must have serviceName or imageId' });
    // Both given: only imageId is read, so they cannot disagree.
    expect((await call(f(), 'POST', '/v2/applications/1/restart-service', { serviceName: 'main', imageId: 102 })).body).toBe('OK');
  });
});

/** Release 2 of twoServiceState's app drops `main`'s volume `data` from the target. */
function withoutVolume() {
  const state = twoServiceState({ releaseId: 2 });
  state.apps['1']!.services['11']!.volumes = [];
  state.apps['1']!.volumes = {};
  return state;
}

for (const [version, removed] of [['9.11.0', true], ['10.0.0', false]] as const) {
  describe(version, () => {
    const f = deviceAt(version);

    it(`an update ${removed ? 'removes' : 'keeps'} a volume its target no longer declares`, async () => {
      await f().sup.setLocalTarget(checkedLocal(twoServiceState()));
      await waitApplied(f().sup);
      const volume = f().sup.engine.volumeName(1, 'data');
      expect((await f().sup.engine.snapshot()).volumes.map((v) => v.name)).toContain(volume);
      await f().sup.setLocalTarget(checkedLocal(withoutVolume()));
      await waitApplied(f().sup);
      const names = (await f().docker.listVolumes()).Volumes.map((v) => v.Name);
      expect(names.includes(volume)).toBe(!removed);
      // GET /v2/cleanup-volumes came with 10.0, as the rule that updates keep volumes.
      expect((await call(f(), 'GET', '/v2/cleanup-volumes')).status).toBe(removed ? 404 : 200);
    });
  });
}

describe('10.2.0', () => {
  const f = deviceAt('10.2.0');
  beforeAll(async () => {
    await f().sup.setLocalTarget(checkedLocal(twoServiceState()));
    await waitApplied(f().sup);
  });

  it('takes journal-logs without format, since or until (10.3, 14.7.0): they are ignored as unknown fields', async () => {
    await f().journal.write({ message: 'an entry of 10.2', unit: 'demo.service' });
    await f().journal.flush();
    const res = await call(f(), 'POST', '/v2/journal-logs', { unit: 'demo.service', format: 'json', since: 'not a time', until: '-1' });
    expect(res.status).toBe(200);
    // journalctl's default output (short), not a JSON line; and no since/until to refuse.
    expect(res.body).toMatch(/^\w{3} \d\d \d\d:\d\d:\d\d \S+ .*an entry of 10\.2$/m);
    expect(res.body).not.toContain('"MESSAGE"');
  });

  it('changes the host config under an update lock: the PATCH respects locks from 12.11.34', async () => {
    mkdirSync(f().sup.locks.dir(1, 'main'), { recursive: true });
    writeFileSync(join(f().sup.locks.dir(1, 'main'), 'updates.lock'), '');
    expect((await call(f(), 'POST', '/v1/reboot')).status).toBe(423);
    const patched = await call(f(), 'PATCH', '/v1/device/host-config', { network: { hostname: 'old-supervisor' } });
    expect(patched.status).toBe(200);
    expect(await f().sup.host.getHostname()).toBe('old-supervisor');
  });
});
