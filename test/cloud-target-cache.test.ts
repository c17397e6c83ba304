/**
 * The device state endpoint serves a target built once per change (src/cloud/device/
 * target-cache.ts; the triggers of migration 005 keep the versions). The oracle is the
 * target built from the database with no cache at all: after every write that can change a
 * device's target, both replicas on the database answer it, with a new ETag; after writes
 * that cannot, the version stays and the old ETag still gets a 304.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey } from '../src/cloud/auth/keys.js';
import { deviceTargetVersion } from '../src/cloud/device/target-cache.js';
import { composeTarget, loadTargetRows } from '../src/cloud/device/target-state.js';
import { buildCloud } from '../src/cloud/server.js';
import { cloudError } from './helpers/cloud-error-shape.js';
import { cloudOn, databases, type CloudFixture, type DbKind } from './helpers/cloud-fixture.js';
import { countingDb } from './helpers/counting-db.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

describe.each<DbKind>(['sqlite', 'postgres'])('device target state served from its version on %s', (kind) => {
  let c: CloudFixture;
  /** A second replica on the same database, with a cache of its own. */
  let other: FastifyInstance;
  let user: string;
  let fleet: number, fleet2: number;
  let device: { id: number; uuid: string; key: string };
  let r1: number, service: number, image1: number;
  let etag = '';

  const call = async (app: FastifyInstance, key: string, method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) => {
    const r = await app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${key}`, ...headers }, ...(payload === undefined ? {} : { payload: payload as object }) });
    return { status: r.statusCode, body: r.body, etag: String(r.headers.etag ?? '') };
  };
  const ok = async (method: string, url: string, payload?: unknown) => {
    const r = await call(c.app, user, method, url, payload);
    if (r.status >= 300) throw new Error(`${method} ${url}: ${r.status} ${r.body}`);
    return (r.body ? JSON.parse(r.body) : {}) as { id: number };
  };
  const poll = (app: FastifyInstance, ifNoneMatch = etag) =>
    call(app, device.key, 'GET', `/device/v3/${device.uuid}/state`, undefined, ifNoneMatch ? { 'if-none-match': ifNoneMatch } : {});
  const uncached = async () => JSON.parse(JSON.stringify({ [device.uuid]: composeTarget(await loadTargetRows(c.db, device.id)) })) as unknown;
  const version = async () => (await deviceTargetVersion(c.db, device.key, new Date()))!.version;

  /** Both replicas answer the uncached target under a new ETag, then 304 to it. */
  async function expectChanged(): Promise<void> {
    const want = await uncached();
    for (const app of [c.app, other]) {
      const r = await poll(app);
      expect(r.status).toBe(200);
      expect(JSON.parse(r.body)).toEqual(want);
      expect(r.etag).not.toBe(etag);
      expect((await poll(app, r.etag)).status).toBe(304);
    }
    etag = (await poll(c.app, '')).etag;
  }

  beforeAll(async () => {
    c = await cloudOn(await dbs.open(kind));
    other = buildCloud({ db: c.db });
    await other.ready();
    const u = JSON.parse((await call(c.app, c.adminKey, 'POST', '/fleetlab/users', { username: 'ann' })).body) as { apiKey: string; organization: number };
    user = u.apiKey;
    fleet = (await ok('POST', '/v6/application', { app_name: 'one', organization: u.organization, device_type: 'raspberrypi4-64' })).id;
    fleet2 = (await ok('POST', '/v6/application', { app_name: 'two', organization: u.organization, device_type: 'raspberrypi4-64' })).id;
    const provisioning = JSON.parse((await call(c.app, user, 'POST', `/api-key/application/${fleet}/provisioning`, {})).body) as string;
    device = { id: 0, uuid: 'c0ffee'.padEnd(32, '0'), key: 'device-key-of-the-cached-one-000' };
    const reg = await call(c.app, provisioning, 'POST', '/device/register', { uuid: device.uuid, api_key: device.key, device_type: 'raspberrypi4-64', device_name: 'cached' });
    device.id = (JSON.parse(reg.body) as { id: number }).id;
    r1 = (await ok('POST', '/v6/release', { belongs_to__application: fleet, commit: 'r1', status: 'success', composition: { services: { main: { labels: { a: '1' } } } } })).id;
    service = (await ok('POST', '/v6/service', { application: fleet, service_name: 'main' })).id;
    image1 = (await ok('POST', '/v6/image', { is_a_build_of__service: service, is_stored_at__image_location: 'registry.local/main:1', status: 'success' })).id;
    await ok('POST', '/v6/release_image', { image: image1, is_part_of__release: r1 });
    etag = (await poll(c.app, '')).etag;
    // Both replicas have built the empty target before the first write.
    expect((await poll(other)).status).toBe(304);
  });
  afterAll(async () => {
    await other?.close();
    await c?.close();
  });

  it('follows every write that changes the target, on both replicas', async () => {
    const writes: Array<[string, () => Promise<unknown>]> = [
      ['the fleet gets a target release', () => ok('PATCH', `/v6/application(${fleet})`, { should_be_running__release: r1 })],
      ['a fleet variable is added', () => ok('POST', '/v6/application_environment_variable', { application: fleet, name: 'MODE', value: 'a' })],
      ['a fleet variable changes', async () => {
        const [v] = ((await ok('GET', `/v6/application_environment_variable?$filter=application eq ${fleet}`)) as unknown as { d: Array<{ id: number }> }).d;
        return ok('PATCH', `/v6/application_environment_variable(${v!.id})`, { value: 'b' });
      }],
      ['a device variable overrides it', () => ok('POST', '/v6/device_environment_variable', { device: device.id, name: 'MODE', value: 'c' })],
      ['the device variable is removed', async () => {
        const [v] = ((await ok('GET', `/v6/device_environment_variable?$filter=device eq ${device.id}`)) as unknown as { d: Array<{ id: number }> }).d;
        return ok('DELETE', `/v6/device_environment_variable(${v!.id})`);
      }],
      ['a fleet config variable', () => ok('POST', '/v6/application_config_variable', { application: fleet, name: 'HOST_CONFIG_gpu_mem', value: '64' })],
      ['a device config variable', () => ok('POST', '/v6/device_config_variable', { device: device.id, name: 'HOST_CONFIG_gpu_mem', value: '128' })],
      ['the device is renamed', () => ok('PATCH', `/v6/device(${device.id})`, { device_name: 'renamed' })],
      ['the fleet is renamed', () => ok('PATCH', `/v6/application(${fleet})`, { app_name: 'one-renamed' })],
      ['the image moves to another location', () => ok('PATCH', `/v6/image(${image1})`, { is_stored_at__image_location: 'registry.local/main:1b' })],
      ['the service is renamed', () => ok('PATCH', `/v6/service(${service})`, { service_name: 'app' })],
      ['the release composition changes', () => ok('PATCH', `/v6/release(${r1})`, { composition: { services: { app: { labels: { a: '2' } } } } })],
      ['an image joins the release', async () => {
        const s2 = (await ok('POST', '/v6/service', { application: fleet, service_name: 'side' })).id;
        const i2 = (await ok('POST', '/v6/image', { is_a_build_of__service: s2, is_stored_at__image_location: 'registry.local/side:1', status: 'success' })).id;
        return ok('POST', '/v6/release_image', { image: i2, is_part_of__release: r1 });
      }],
      ['the device is pinned to another release', async () => {
        const r2 = (await ok('POST', '/v6/release', { belongs_to__application: fleet, commit: 'r2', status: 'success' })).id;
        await ok('POST', '/v6/release_image', { image: image1, is_part_of__release: r2 });
        return ok('PATCH', `/v6/device(${device.id})`, { should_be_running__release: r2 });
      }],
      ['an image leaves the pinned release', async () => {
        const pinned = ((await ok('GET', `/v6/release?$filter=commit eq 'r2'`)) as unknown as { d: Array<{ id: number }> }).d[0]!.id;
        const [link] = ((await ok('GET', `/v6/release_image?$filter=is_part_of__release eq ${pinned}`)) as unknown as { d: Array<{ id: number }> }).d;
        return ok('DELETE', `/v6/release_image(${link!.id})`);
      }],
      ['the pinned release is deleted (the device falls back to its fleet)', async () => {
        const pinned = ((await ok('GET', `/v6/release?$filter=commit eq 'r2'`)) as unknown as { d: Array<{ id: number }> }).d[0]!.id;
        return ok('DELETE', `/v6/release(${pinned})`);
      }],
      ['the device moves to another fleet', () => ok('PATCH', `/v6/device(${device.id})`, { belongs_to__application: fleet2 })],
      ['it moves back', () => ok('PATCH', `/v6/device(${device.id})`, { belongs_to__application: fleet })],
    ];
    for (const [what, write] of writes) {
      const before = await version();
      await write();
      expect(await version(), what).not.toBe(before);
      await expectChanged().catch((err: Error) => {
        throw new Error(`${what}: ${err.message}`);
      });
    }
  });

  it('keeps its version through writes the target does not show: a 304 for the old ETag', async () => {
    const before = await version();
    const report = await call(c.app, device.key, 'PATCH', '/device/v3/state', { [device.uuid]: { status: 'Idle', is_online: true, ip_address: '10.0.0.9' } });
    expect(report.status).toBe(200);
    await ok('PATCH', `/v6/device(${device.id})`, { note: 'on the bench' });
    await ok('POST', '/v6/device_tag', { device: device.id, tag_key: 'rack', value: '3' });
    await ok('PATCH', `/v6/application(${fleet})`, { is_public: true });
    expect(await version()).toBe(before);
    for (const app of [c.app, other]) expect((await poll(app)).status).toBe(304);
  });

  it('answers every other key as the general authentication does', async () => {
    const asked = async (key: string | null, uuid = device.uuid) => {
      const r = await c.app.inject({ method: 'GET', url: `/device/v3/${uuid}/state`, headers: key === null ? {} : { authorization: `Bearer ${key}` } });
      const { code, message } = cloudError({ status: r.statusCode, headers: r.headers, body: r.body });
      return `${r.statusCode} ${code}: ${message}`;
    };
    expect(await asked(null)).toBe('401 CLOUD_ERR_UNAUTHORIZED: Unauthorized');
    expect(await asked('no-such-key')).toBe('401 CLOUD_ERR_UNAUTHORIZED: Unauthorized');
    expect(await asked(user)).toBe('401 CLOUD_ERR_FORBIDDEN: This endpoint takes a device key');
    expect(await asked(device.key, 'f'.repeat(32))).toBe('401 CLOUD_ERR_FORBIDDEN: A device key reads only its own target state');
    await c.db.query('UPDATE "api_key" SET expiry_date = ? WHERE key_hash = ?', [new Date(Date.now() - 60_000).toISOString(), hashKey(device.key)]);
    expect(await asked(device.key)).toBe('401 CLOUD_ERR_UNAUTHORIZED: Unauthorized');
  });
});

describe.each<DbKind>(['sqlite', 'postgres'])('a rollout on %s', (kind) => {
  it("reads the release's rows once for a fleet's devices, and again only when the release changes", async () => {
    const c = await cloudOn(await dbs.open(kind));
    const counted = countingDb(c.db);
    const app = buildCloud({ db: counted.db });
    await app.ready();
    try {
      const call = async (key: string, method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) => {
        const r = await app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${key}`, ...headers }, ...(payload === undefined ? {} : { payload: payload as object }) });
        if (r.statusCode >= 300) throw new Error(`${method} ${url}: ${r.statusCode} ${r.body}`);
        return r;
      };
      const id = async (method: string, url: string, payload: unknown) => (JSON.parse((await call(c.adminKey, method, url, payload)).body) as { id: number }).id;
      const org = (JSON.parse((await call(c.adminKey, 'GET', `/v6/organization?$filter=handle eq 'admin'`)).body) as { d: Array<{ id: number }> }).d[0]!.id;
      const fleet = await id('POST', '/v6/application', { app_name: 'rollout', organization: org, device_type: 'raspberrypi4-64' });
      const release = await id('POST', '/v6/release', { belongs_to__application: fleet, commit: 'r1', status: 'success' });
      const service = await id('POST', '/v6/service', { application: fleet, service_name: 'main' });
      const image = await id('POST', '/v6/image', { is_a_build_of__service: service, is_stored_at__image_location: 'registry.local/main:1', status: 'success' });
      await call(c.adminKey, 'POST', '/v6/release_image', { image, is_part_of__release: release });
      const provisioning = JSON.parse((await call(c.adminKey, 'POST', `/api-key/application/${fleet}/provisioning`, {})).body) as string;
      const devices = await Promise.all(
        Array.from({ length: 6 }, async (_, i) => {
          const d = { uuid: (0xbee0 + i).toString(16).padStart(32, '0'), key: `device-key-of-rollout-${i}-0000000` };
          await call(provisioning, 'POST', '/device/register', { uuid: d.uuid, api_key: d.key, device_type: 'raspberrypi4-64' });
          return d;
        }),
      );
      const releaseReads = () => counted.calls.filter((q) => q.kind === 'query' && q.sql.startsWith('SELECT id, "commit", composition FROM "release"')).length;
      const pollAll = () => Promise.all(devices.map((d) => call(d.key, 'GET', `/device/v3/${d.uuid}/state`)));

      await call(c.adminKey, 'PATCH', `/v6/application(${fleet})`, { should_be_running__release: release });
      const before = releaseReads();
      const bodies = (await pollAll()).map((r) => JSON.parse(r.body) as Record<string, { apps: Record<string, { releaseId: number; services: Record<string, { image: string }> }> }>);
      expect(releaseReads() - before).toBe(1);
      for (const [i, body] of bodies.entries()) expect(Object.values(body[devices[i]!.uuid]!.apps)[0]!.services[String(service)]!.image).toBe('registry.local/main:1');

      // The release's image moves: every device rebuilds, from one read of the release.
      await call(c.adminKey, 'PATCH', `/v6/image(${image})`, { is_stored_at__image_location: 'registry.local/main:1b' });
      const moved = releaseReads();
      for (const r of await pollAll()) expect(r.body).toContain('registry.local/main:1b');
      expect(releaseReads() - moved).toBe(1);
    } finally {
      await app.close();
      await c.close();
    }
  });
});
