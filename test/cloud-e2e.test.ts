/**
 * End to end: a real cloud (SQLite and PostgreSQL) and a simulated device registered to it
 * with its own simulated engine. Releases set on the fleet reach the device, its reports
 * reach the cloud, tags and the proxy work through the device's tunnel, and a partitioned
 * device catches up after the link heals.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Docker from 'dockerode';
import type { FastifyInstance } from 'fastify';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import type { Db } from '../src/cloud/db/port.js';
import { buildCloud } from '../src/cloud/server.js';
import { SimDevice } from '../sim/device.js';
import { databases, type DbKind } from './helpers/cloud-fixture.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

interface Answer {
  status: number;
  body: unknown;
  text: string;
}

async function call(base: string, key: string, method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // plain-text answers (the device's "OK") stay text
  }
  return { status: res.status, body: parsed, text };
}

/** Polls `probe` until it returns a value (not undefined), at most `ms`. */
async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

describe.each<DbKind>(['sqlite', 'postgres'])('cloud and a simulated device on %s', (kind) => {
  let db: Db;
  let cloud: FastifyInstance;
  let base: string;
  let alice: { key: string; organization: number };
  let bobKey: string;
  let fleet: number;
  let device: SimDevice;
  let deviceId: number;
  let uuid: string;
  const ask = (method: string, path: string, body?: unknown) => call(base, alice.key, method, path, body);
  const d = <T>(a: Answer) => (a.body as { d: T[] }).d;

  /** Creates a one-service release of `image` and makes it the fleet's target. */
  async function release(commit: string, image: string): Promise<number> {
    const services = d<{ id: number }>(await ask('GET', `/v6/service?$filter=application eq ${fleet} and service_name eq 'main'`));
    const service = services[0]?.id ?? ((await ask('POST', '/v6/service', { application: fleet, service_name: 'main' })).body as { id: number }).id;
    const img = (await ask('POST', '/v6/image', { is_a_build_of__service: service, is_stored_at__image_location: image, status: 'success' })).body as { id: number };
    const composition = { services: { main: { labels: { 'io.platform.features.supervisor-api': '1' }, volumes: ['data:/data'] } }, volumes: { data: {} } };
    const rel = await ask('POST', '/v6/release', { belongs_to__application: fleet, commit, status: 'success', composition });
    expect(rel.status).toBe(201);
    const releaseId = (rel.body as { id: number }).id;
    expect((await ask('POST', '/v6/release_image', { image: img.id, is_part_of__release: releaseId })).status).toBe(201);
    expect((await ask('PATCH', `/v6/application(${fleet})`, { should_be_running__release: releaseId })).status).toBe(200);
    return releaseId;
  }

  const runningRelease = async (id: number) => {
    const rows = d<{ is_running__release: { __id: number } | null; status: string }>(await ask('GET', `/v6/device(${deviceId})?$select=is_running__release,status`));
    return rows[0]?.is_running__release?.__id === id ? rows[0] : undefined;
  };

  beforeAll(async () => {
    db = await dbs.open(kind);
    const admin = await prepareDatabase(db);
    cloud = buildCloud({ db, tunnelHeartbeatMs: 1000, proxyTimeoutMs: 5000 });
    base = (await cloud.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
    const user = async (username: string) => (await call(base, admin.key!, 'POST', '/fleetlab/users', { username })).body as { apiKey: string; organization: number };
    const a = await user('alice');
    alice = { key: a.apiKey, organization: a.organization };
    bobKey = (await user('bob')).apiKey;
    const app = await ask('POST', '/v6/application', { app_name: 'e2e', organization: alice.organization, device_type: 'raspberrypi3' });
    expect(app.status).toBe(201);
    fleet = (app.body as { id: number }).id;
    const provisioning = await ask('POST', `/api-key/application/${fleet}/provisioning`, { name: 'e2e' });
    expect(provisioning.status).toBe(200);
    device = await SimDevice.start({
      port: 0,
      engine: 'sim',
      dockerSocket: '',
      localMode: false,
      bandwidth: 50_000_000,
      cloud: { url: base, provisioningKey: provisioning.body as string, pollIntervalMs: 1000, reportIntervalMs: 300 },
    });
    uuid = device.info().uuid;
  }, 120_000);

  afterAll(async () => {
    await device?.stop();
    await cloud?.close();
  });

  it('registers with the provisioning key and comes online through its tunnel', async () => {
    const row = await until('the device online in the fleet', 30_000, async () => {
      const rows = d<{ id: number; uuid: string; is_online: boolean; supervisor_version: string }>(await ask('GET', `/v6/device?$filter=belongs_to__application eq ${fleet}`));
      return rows[0]?.is_online ? rows[0] : undefined;
    });
    expect(row.uuid).toBe(uuid);
    expect(row.supervisor_version).toMatch(/^\d+\.\d+\.\d+/);
    deviceId = row.id;
    // The cloud marks the device online when it accepts the tunnel; the device sees the tunnel
    // open a moment later (its WebSocket's open event), so its own view may trail by that moment.
    const vpn = await until('the device seeing its tunnel open', 10_000, async () => {
      const res = await call(device.url, device.info().apiKey, 'GET', '/v2/device/vpn');
      return (res.body as { vpn?: { connected?: boolean } }).vpn?.connected ? res : undefined;
    });
    expect(vpn.body).toEqual({ status: 'success', vpn: { enabled: true, connected: true } });
    // Another user sees nothing of it.
    expect(d(await call(base, bobKey, 'GET', `/v6/device(uuid='${uuid}')`))).toEqual([]);
  });

  it('applies a release set on the fleet and reports it, with merged variables in the container', async () => {
    expect((await ask('POST', '/v6/application_environment_variable', { application: fleet, name: 'MODE', value: 'fleet' })).status).toBe(201);
    expect((await ask('POST', '/v6/device_environment_variable', { device: deviceId, name: 'MODE', value: 'device' })).status).toBe(201);
    const r1 = await release('c1', 'fleetlab/test-app:1');
    // Tell the device to poll now, through the proxy (the fleet's devices get the same call).
    const update = await ask('POST', '/supervisor/v1/update', { uuid });
    expect(update.status).toBe(204);
    const row = await until('the release running', 60_000, () => runningRelease(r1));
    expect(row.status).toBe('Idle');
    const installs = d<{ status: string; download_progress: number | null; installs__image: { __id: number } }>(await ask('GET', `/v6/image_install?$filter=device eq ${deviceId}`));
    expect(installs.map((i) => i.status)).toEqual(['Running']);
    const state = await call(device.url, device.info().apiKey, 'GET', '/v2/applications/state');
    expect(JSON.stringify(state.body)).toContain('"commit":"c1"');
    const engine = new Docker({ socketPath: device.options.dockerSocket });
    const [container] = await engine.listContainers({ filters: { label: [`io.fleetlab.device=${uuid}`] } });
    const env = (await engine.getContainer(container!.Id).inspect()).Config.Env;
    // Device variables win over fleet variables.
    expect(env).toContain('MODE=device');
    expect(env.some((e) => e.startsWith('PLATFORM_SUPERVISOR_API_KEY='))).toBe(true);
  });

  it('serves tags set in the cloud to the app through /v2/device/tags', async () => {
    expect((await ask('POST', '/v6/device_tag', { device: deviceId, tag_key: 'room', value: 'lab-2' })).status).toBe(201);
    const tags = await call(device.url, device.info().apiKey, 'GET', '/v2/device/tags');
    expect(tags.body).toEqual({ status: 'success', tags: [{ id: expect.any(Number), name: 'room', value: 'lab-2' }] });
  });

  it('proxies calls: one device passes through, a fleet gives 207, no match 404', async () => {
    const since = Date.now();
    const blink = await ask('POST', '/supervisor/v1/blink', { uuid });
    expect(blink).toMatchObject({ status: 200, text: '' });
    const seen = await until('blink transitions on the LED line', 5_000, async () => {
      const t = device.gpio.transitions(device.ledGpio).filter((x) => x.at >= since - 50);
      return t.length >= 4 ? t : undefined;
    });
    expect(seen[0]!.value).toBe(1);

    const ping = await ask('POST', '/supervisor/ping', { deviceId, method: 'GET' });
    expect(ping).toMatchObject({ status: 200, text: 'OK' });
    const fleetCall = await ask('POST', '/supervisor/v1/device', { appId: fleet, method: 'GET' });
    expect(fleetCall.status).toBe(207);
    expect(fleetCall.body).toEqual([{ uuid, statusCode: 200, body: expect.objectContaining({ status: 'Idle', commit: 'c1' }) }]);
    expect((await ask('POST', '/supervisor/v1/device', { uuid: 'f'.repeat(32), method: 'GET' })).status).toBe(404);
    // Bob cannot reach Alice's device, whatever he names.
    expect((await call(base, bobKey, 'POST', '/supervisor/v1/blink', { uuid })).status).toBe(404);
    expect((await call(base, bobKey, 'POST', '/supervisor/v1/blink', { appId: fleet })).status).toBe(404);
    expect((await ask('POST', '/supervisor/v1/blink', { uuid, appId: fleet })).status).toBe(400);
  });

  it('a partitioned device goes offline, then catches up with the release set meanwhile', async () => {
    device.cloudLink!.partition();
    await until('the device offline', 20_000, async () => {
      const rows = d<{ is_online: boolean }>(await ask('GET', `/v6/device(${deviceId})?$select=is_online`));
      return rows[0]?.is_online === false ? true : undefined;
    });
    expect((await ask('POST', '/supervisor/ping', { uuid, method: 'GET' })).status).toBe(404);
    const r2 = await release('c2', 'fleetlab/test-app:2');
    const tags = await call(device.url, device.info().apiKey, 'GET', '/v2/device/tags');
    expect(tags.status).toBe(503);
    device.cloudLink!.heal();
    await until('the new release running after the heal', 90_000, () => runningRelease(r2));
    await until('the device online again', 60_000, async () => {
      const rows = d<{ is_online: boolean }>(await ask('GET', `/v6/device(${deviceId})?$select=is_online`));
      return rows[0]?.is_online ? true : undefined;
    });
  });

  it('a release whose image cannot be pulled shows as update_failed in the cloud, until a release that can be had', async () => {
    const updateFailed = async () => d<{ update_failed: boolean }>(await ask('GET', `/v6/device(${deviceId})?$select=update_failed`))[0]?.update_failed;
    expect(await updateFailed()).toBe(false);
    await release('c3', 'fleetlab/not-in-any-registry:1');
    await ask('POST', '/supervisor/v1/update', { uuid });
    await until('update_failed reported to the cloud', 60_000, async () => ((await updateFailed()) ? true : undefined));
    // The device stays up, and says why on its own API.
    const status = await call(device.url, device.info().apiKey, 'GET', '/v2/state/status');
    expect((status.body as { images: Array<{ downloadError?: string }> }).images[0]?.downloadError).toMatch(/not-in-any-registry/);
    expect((await ask('PATCH', `/v6/device(${deviceId})`, { update_failed: false })).status).toBe(400);
    const r4 = await release('c4', 'fleetlab/test-app:1');
    await ask('POST', '/supervisor/v1/update', { uuid });
    await until('the pullable release running', 90_000, () => runningRelease(r4));
    await until('update_failed cleared', 30_000, async () => ((await updateFailed()) === false ? true : undefined));
  });
});
