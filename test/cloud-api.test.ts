/**
 * The cloud API through fastify `inject` over a real database (SQLite and PostgreSQL):
 * keys and permissions, the envelope and status codes of docs/decisions.md items 16-17, 409s,
 * 400s, old versions, and creating a release then making it the fleet's target.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cloudOn, databases, type CloudFixture, type DbKind } from './helpers/cloud-fixture.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

interface Reply {
  status: number;
  body: unknown;
  text: string;
}

describe.each<DbKind>(['sqlite', 'postgres'])('cloud API on %s', (kind) => {
  let c: CloudFixture;
  let alice: { key: string; organization: number };
  let bob: { key: string; organization: number };
  let rpi4: number;

  const call = async (key: string | null, method: string, url: string, payload?: unknown): Promise<Reply> => {
    const r = await c.app.inject({
      method: method as 'GET',
      url,
      headers: key === null ? {} : { authorization: `Bearer ${key}` },
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
    return { status: r.statusCode, text: r.body, body: r.body ? JSON.parse(r.body) : undefined };
  };
  const as = (key: string) => ({
    get: (url: string) => call(key, 'GET', url),
    post: (url: string, body: unknown) => call(key, 'POST', url, body),
    patch: (url: string, body: unknown) => call(key, 'PATCH', url, body),
    put: (url: string, body: unknown) => call(key, 'PUT', url, body),
    del: (url: string) => call(key, 'DELETE', url),
  });
  const d = (r: Reply) => (r.body as { d: Record<string, unknown>[] }).d;

  beforeAll(async () => {
    c = await cloudOn(await dbs.open(kind));
    const admin = as(c.adminKey);
    const mk = async (username: string) => {
      const r = await admin.post('/fleetlab/users', { username });
      expect(r.status).toBe(201);
      const u = r.body as { apiKey: string; organization: number };
      return { key: u.apiKey, organization: u.organization };
    };
    alice = await mk('alice');
    bob = await mk('bob');
    rpi4 = d(await admin.get("/v6/device_type(slug='raspberrypi4-64')?$select=id"))[0]!.id as number;
  });

  it('401 without a key, with an unknown key, with a malformed header', async () => {
    expect((await call(null, 'GET', '/v6/device')).status).toBe(401);
    expect(await call('not-a-key', 'GET', '/v6/device')).toMatchObject({ status: 401, body: 'Unauthorized' });
    const r = await c.app.inject({ method: 'GET', url: '/v6/device', headers: { authorization: 'Basic abc' } });
    expect(r.statusCode).toBe(401);
  });

  it('envelope and status codes (docs/decisions.md items 16-17)', async () => {
    const a = as(alice.key);
    const created = await a.post('/v6/application', { app_name: 'env-fleet', organization: alice.organization, is_for__device_type: rpi4 });
    expect(created.status).toBe(201);
    const app = created.body as Record<string, unknown>;
    expect(app).not.toHaveProperty('d');
    expect(app).toMatchObject({ app_name: 'env-fleet', slug: 'alice/env-fleet', organization: { __id: alice.organization }, is_for__device_type: { __id: rpi4 }, should_be_running__release: null });
    const id = app.id as number;

    const one = await a.get(`/v6/application(${id})`);
    expect(one.status).toBe(200);
    expect(d(one)).toHaveLength(1);
    expect(d(one)[0]).toEqual(app);
    expect(await a.get('/v6/application(987654)')).toMatchObject({ status: 200, body: { d: [] } });
    expect(await a.get(`/v6/application/$count?$filter=id eq ${id}`)).toMatchObject({ status: 200, body: { d: 1 } });

    const patched = await a.patch(`/v6/application(${id})`, { should_track_latest_release: false });
    expect(patched).toMatchObject({ status: 200, text: '' });
    expect(d(await a.get(`/v6/application(${id})?$select=should_track_latest_release`))).toEqual([{ should_track_latest_release: false }]);
    expect(await a.patch('/v6/application(987654)', { should_track_latest_release: false })).toMatchObject({ status: 200, text: '' });
    expect(await a.put(`/v6/application(${id})`, { app_name: 'env-fleet' })).toMatchObject({ status: 200, text: '' });
    expect(await a.del(`/v6/application(${id})`)).toMatchObject({ status: 200, text: '' });
    expect(await a.del(`/v6/application(${id})`)).toMatchObject({ status: 200, text: '' });
    expect(d(await a.get(`/v6/application(${id})`))).toEqual([]);
  });

  it('another user\'s fleet is invisible and unchangeable', async () => {
    const a = as(alice.key);
    const b = as(bob.key);
    const app = (await a.post('/v6/application', { app_name: 'private', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const dev = (await a.post('/v6/device', { belongs_to__application: app.id, device_name: 'secret' })).body as { id: number; uuid: string };
    await a.post('/v6/device_tag', { device: dev.id, tag_key: 'k', value: 'v' });

    expect(d(await b.get(`/v6/application(${app.id})`))).toEqual([]);
    expect(d(await b.get(`/v6/device(uuid='${dev.uuid}')`))).toEqual([]);
    expect(d(await b.get('/v6/device_tag'))).toEqual([]);
    expect((await b.get('/v6/device/$count')).body).toEqual({ d: 0 });
    expect(d(await b.get(`/v6/device_type?$filter=describes_device/any(x:x/id eq ${dev.id})`))).toEqual([]);
    expect(d(await b.get(`/v6/device_type(${rpi4})?$expand=describes_device`))[0]!.describes_device).toEqual([]);

    expect(await b.patch(`/v6/device(${dev.id})`, { device_name: 'pwned' })).toMatchObject({ status: 200 });
    expect(await b.patch(`/v6/device?$filter=id eq ${dev.id}`, { device_name: 'pwned' })).toMatchObject({ status: 200 });
    expect(await b.patch('/v6/device', { device_name: 'pwned' })).toMatchObject({ status: 200 });
    expect(await b.del(`/v6/device_tag?$filter=device eq ${dev.id}`)).toMatchObject({ status: 200 });
    expect(await b.del(`/v6/device(${dev.id})`)).toMatchObject({ status: 200 });
    expect(d(await a.get(`/v6/device(${dev.id})?$select=device_name&$expand=device_tag/$count`))).toEqual([{ device_name: 'secret', device_tag: 1 }]);

    // Creating into or linking to alice's fleet is refused; nothing is left behind.
    expect((await b.post('/v6/device', { belongs_to__application: app.id })).status).toBe(400);
    expect((await b.post('/v6/application', { app_name: 'x', organization: alice.organization, is_for__device_type: rpi4 })).status).toBe(400);
    expect((await a.get(`/v6/device/$count?$filter=belongs_to__application eq ${app.id}`)).body).toEqual({ d: 1 });

    // my_application is only the caller's own; public fleets show in application.
    expect(d(await a.get('/v6/my_application?$select=app_name')).map((x) => x.app_name)).toContain('private');
    expect(d(await b.get('/v6/my_application'))).toEqual([]);
    await a.patch(`/v6/application(${app.id})`, { is_public: true });
    expect(d(await b.get(`/v6/application(${app.id})?$select=app_name`))).toEqual([{ app_name: 'private' }]);
    expect(d(await b.get('/v6/my_application'))).toEqual([]);
    expect(await b.patch(`/v6/application(${app.id})`, { app_name: 'taken' })).toMatchObject({ status: 200 });
    // a public fleet's devices stay private
    expect(d(await b.get(`/v6/application(${app.id})?$select=id&$expand=owns__device`))).toEqual([{ id: app.id, owns__device: [] }]);
    expect(d(await a.get(`/v6/application(${app.id})?$select=app_name`))).toEqual([{ app_name: 'private' }]);
  });

  it('POST takes a device type slug as `device_type` (the v6 form) as well as the link', async () => {
    const a = as(alice.key);
    const app = await a.post('/v6/application', { app_name: 'by-slug', organization: alice.organization, device_type: 'raspberrypi4-64' });
    expect(app).toMatchObject({ status: 201, body: { is_for__device_type: { __id: rpi4 } } });
    const dev = await a.post('/v6/device', { belongs_to__application: (app.body as { id: number }).id, device_type: 'raspberrypi5' });
    const rpi5 = d(await a.get("/v6/device_type(slug='raspberrypi5')?$select=id"))[0]!.id;
    expect(dev).toMatchObject({ status: 201, body: { is_of__device_type: { __id: rpi5 } } });
    expect((await a.post('/v6/device', { belongs_to__application: (app.body as { id: number }).id, device_type: 'no-such-board' })).status).toBe(400);
  });

  it('409 on a unique violation, with the field named as a JSON string', async () => {
    const a = as(alice.key);
    const app = (await a.post('/v6/application', { app_name: 'uniq', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const dev = (await a.post('/v6/device', { belongs_to__application: app.id, uuid: 'feedc0de' })).body as { id: number };
    const again = await a.post('/v6/device', { belongs_to__application: app.id, uuid: 'feedc0de' });
    expect(again.status).toBe(409);
    expect(again.text).toBe('"\\"uuid\\" must be unique."');
    await a.post('/v6/device_tag', { device: dev.id, tag_key: 'k', value: '1' });
    const tag = await a.post('/v6/device_tag', { device: dev.id, tag_key: 'k', value: '2' });
    expect(tag).toMatchObject({ status: 409, body: '"device" and "tag_key" must be unique.' });
    const other = (await a.post('/v6/device', { belongs_to__application: app.id })).body as { id: number };
    expect((await a.patch(`/v6/device(${other.id})`, { uuid: 'feedc0de' })).status).toBe(409);
  });

  it('409 when deleting a referenced record; owned records go with their owner', async () => {
    const a = as(alice.key);
    const app = (await a.post('/v6/application', { app_name: 'refd', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const dev = (await a.post('/v6/device', { belongs_to__application: app.id })).body as { id: number };
    await a.post('/v6/device_environment_variable', { device: dev.id, name: 'A', value: '1' });
    const del = await a.del(`/v6/application(${app.id})`);
    expect(del.status).toBe(409);
    expect(typeof del.body).toBe('string');
    expect(d(await a.get(`/v6/application(${app.id})?$select=id`))).toHaveLength(1);
    expect((await a.del(`/v6/device(${dev.id})`)).status).toBe(200);
    expect((await a.get(`/v6/device_environment_variable/$count?$filter=device eq ${dev.id}`)).body).toEqual({ d: 0 });
    expect((await a.del(`/v6/application(${app.id})`)).status).toBe(200);
  });

  it('400 for unknown resources and fields, wrong types, malformed bodies and filters — never 500', async () => {
    const a = as(alice.key);
    const cases: [string, string, unknown?][] = [
      ['GET', '/v6/nope'],
      ['GET', '/v6/device?$select=nope'],
      ['GET', "/v6/device?$filter=device_name eq 'x' and"],
      ['GET', '/v6/device?$filter=id eq 1;DROP TABLE device'],
      ['GET', "/v6/device(uuid='x';DROP TABLE device)"],
      ['POST', '/v6/nope', { a: 1 }],
      ['POST', '/v6/application', { app_name: 'x', organization: alice.organization, is_for__device_type: rpi4, nope: 1 }],
      ['POST', '/v6/application', { app_name: 5, organization: alice.organization, is_for__device_type: rpi4 }],
      ['POST', '/v6/application', { app_name: 'x', organization: 'one', is_for__device_type: rpi4 }],
      ['POST', '/v6/application', { app_name: 'x', organization: { __id: 'one' }, is_for__device_type: rpi4 }],
      ['POST', '/v6/application', { organization: alice.organization, is_for__device_type: rpi4 }],
      ['POST', '/v6/application', [1, 2]],
      ['POST', '/v6/application', { app_name: 'x', organization: alice.organization, is_for__device_type: 999999 }],
      ['POST', '/v6/device(1)', { device_name: 'x' }],
      ['POST', '/v6/api_key', { name: 'x', is_of__actor: 1 }],
      ['PATCH', '/v6/device', { id: 5 }],
      ['PATCH', '/v6/device?$filter=nope eq 1', { device_name: 'x' }],
      ['PATCH', '/v6/device', { is_online: 'yes' }],
      ['PATCH', '/v6/device', { created_at: '2020-01-01' }],
      ['PATCH', '/v6/device', { last_connectivity_event: 'not a date' }],
      ['DELETE', '/v6/device?$filter=id eq'],
    ];
    for (const [method, url, body] of cases) {
      const r = await call(alice.key, method, url, body);
      expect(r.status, `${method} ${url} ${JSON.stringify(body)}: ${r.text}`).toBe(400);
      expect(typeof r.body).toBe('string');
    }
    const raw = await c.app.inject({ method: 'POST', url: '/v6/application', headers: { authorization: `Bearer ${alice.key}`, 'content-type': 'application/json' }, payload: '{"app_name":' });
    expect(raw.statusCode).toBe(400);
    expect((await a.get('/nope')).status).toBe(404);
    expect((await a.get('/v7/device')).status).toBe(404);
  });

  it('injection in keys and filters is data, never SQL', async () => {
    const a = as(alice.key);
    const app = (await a.post('/v6/application', { app_name: 'inj', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const evil = "x'); DELETE FROM device; --";
    const dev = (await a.post('/v6/device', { belongs_to__application: app.id, device_name: evil })).body as { id: number; device_name: string };
    expect(dev.device_name).toBe(evil);
    const before = (await call(c.adminKey, 'GET', '/v6/device/$count')).body;
    for (const url of [
      `/v6/device?$filter=device_name eq '${encodeURIComponent(evil.replace(/'/g, "''"))}'&$select=id`,
      `/v6/device(uuid='${encodeURIComponent("'' OR 1=1 --")}')`,
      `/v6/device?$filter=device_name eq '${encodeURIComponent('"; DROP TABLE "device"; --')}'`,
      `/v6/device?$filter=contains(device_name,'${encodeURIComponent('%')}')`,
      `/v6/device?$filter=startswith(device_name,'${encodeURIComponent('_')}')`,
      `/v6/device?$filter=device_name eq '${encodeURIComponent('ʼ OR ʼ1ʼ=ʼ1')}'`,
    ]) {
      const r = await a.get(url);
      expect(r.status, url).toBe(200);
    }
    expect(d(await a.get(`/v6/device?$filter=device_name eq '${encodeURIComponent(evil.replace(/'/g, "''"))}'&$select=id`))).toEqual([{ id: dev.id }]);
    expect(d(await a.get(`/v6/device?$filter=contains(device_name,'${encodeURIComponent('%')}')`))).toEqual([]);
    expect((await call(c.adminKey, 'GET', '/v6/device/$count')).body).toEqual(before);
  });

  it('old version paths read the same data as their v6 twin, with renames and removed fields as null', async () => {
    const a = as(alice.key);
    const app = (await a.post('/v6/application', { app_name: 'old', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const dev = (await a.post('/v6/device', { belongs_to__application: app.id, device_name: 'legacy' })).body as { id: number };
    const v6 = d(await a.get(`/v6/device(${dev.id})`))[0]!;
    const v5 = d(await a.get(`/v5/device(${dev.id})`))[0]!;
    const v3 = d(await a.get(`/v3/device(${dev.id})`))[0]!;
    expect(v5).toEqual({ ...v6, logs_channel: null, vpn_address: null });
    const { device_name, ...rest } = v6;
    expect(v3).toEqual({ ...rest, name: device_name, commit: null, logs_channel: null, vpn_address: null });
    expect(d(await a.get(`/v3/device?$filter=name eq 'legacy'&$select=name,commit`))).toEqual([{ name: 'legacy', commit: null }]);
    expect((await a.get(`/v3/device?$filter=commit eq 'x'`)).status).toBe(400);
    expect(await a.patch(`/v2/device(${dev.id})`, { name: 'renamed' })).toMatchObject({ status: 200 });
    expect(d(await a.get(`/v6/device(${dev.id})?$select=device_name`))).toEqual([{ device_name: 'renamed' }]);
    // renames apply inside $expand too
    expect(d(await a.get(`/v3/application(${app.id})?$select=app_name&$expand=owns__device($select=name)`))).toEqual([{ app_name: 'old', owns__device: [{ name: 'renamed' }] }]);
    await a.post('/v1/environment_variable', { application: app.id, name: 'OLD', value: '1' });
    expect(d(await a.get(`/v6/application_environment_variable?$filter=application eq ${app.id}&$select=name,value`))).toEqual([{ name: 'OLD', value: '1' }]);
  });

  it('a user creates a release (release, service, image, release-image link) and sets the fleet target', async () => {
    const a = as(alice.key);
    const app = (await a.post('/v6/application', { app_name: 'rel', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const release = await a.post('/v6/release', { belongs_to__application: app.id, commit: 'abc123', status: 'running', source: 'cloud', composition: { services: { main: { image: 'main' } } }, semver: '1.0.0' });
    expect(release.status).toBe(201);
    const rel = release.body as { id: number; composition: unknown; is_final: boolean };
    expect(rel.composition).toEqual({ services: { main: { image: 'main' } } });
    const svc = (await a.post('/v6/service', { application: app.id, service_name: 'main' })).body as { id: number };
    const img = (await a.post('/v6/image', { is_a_build_of__service: svc.id, is_stored_at__image_location: 'registry.local/v2/abc', status: 'success', image_size: 5_000_000_000, content_hash: 'sha256:00' })).body as { id: number; image_size: number };
    expect(img.image_size).toBe(5_000_000_000);
    expect((await a.post('/v6/image__is_part_of__release', { image: img.id, is_part_of__release: rel.id })).status).toBe(201);
    expect((await a.patch(`/v6/release(${rel.id})`, { status: 'success', end_timestamp: '2026-01-01T00:00:00Z' })).status).toBe(200);
    expect((await a.patch(`/v6/application(${app.id})`, { should_be_running__release: rel.id })).status).toBe(200);

    const fleet = d(await a.get(`/v6/application(${app.id})?$select=should_be_running__release&$expand=should_be_running__release($select=commit,status;$expand=contains__image($expand=image($select=is_stored_at__image_location)))`))[0]!;
    expect(fleet).toEqual({
      should_be_running__release: [{ commit: 'abc123', status: 'success', contains__image: [{ id: expect.any(Number), created_at: expect.any(String), image: [{ is_stored_at__image_location: 'registry.local/v2/abc' }], is_part_of__release: { __id: rel.id } }] }],
    });
    expect(d(await a.get(`/v6/release_image?$filter=is_part_of__release eq ${rel.id}&$select=image`))).toEqual([{ image: { __id: img.id } }]);

    // bob cannot point his fleet at alice's release, nor read it
    const b = as(bob.key);
    const bobApp = (await b.post('/v6/application', { app_name: 'rel', organization: bob.organization, is_for__device_type: rpi4 })).body as { id: number; slug: string };
    expect(bobApp.slug).toBe('bob/rel');
    expect((await b.patch(`/v6/application(${bobApp.id})`, { should_be_running__release: rel.id })).status).toBe(400);
    expect(d(await b.get(`/v6/release(${rel.id})`))).toEqual([]);
  });

  it('device keys see their own device and fleet releases; provisioning keys register devices', async () => {
    const a = as(alice.key);
    const app = (await a.post('/v6/application', { app_name: 'keys', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const other = (await a.post('/v6/application', { app_name: 'keys2', organization: alice.organization, is_for__device_type: rpi4 })).body as { id: number };
    const rel = (await a.post('/v6/release', { belongs_to__application: app.id, commit: 'k1', status: 'success' })).body as { id: number };
    const d1 = (await a.post('/v6/device', { belongs_to__application: app.id })).body as { id: number };
    const d2 = (await a.post('/v6/device', { belongs_to__application: app.id })).body as { id: number };
    const key = (await a.post(`/api-key/device/${d1.id}/device-key`, {})).body as string;
    expect(typeof key).toBe('string');
    const dev = as(key);
    expect(d(await dev.get('/v6/device?$select=id'))).toEqual([{ id: d1.id }]);
    expect(d(await dev.get('/v6/application?$select=id'))).toEqual([{ id: app.id }]);
    expect(d(await dev.get('/v6/release?$select=id'))).toEqual([{ id: rel.id }]);
    expect(await dev.patch(`/v6/device(${d1.id})`, { is_online: true, os_version: 'balenaOS 6.0.0' })).toMatchObject({ status: 200 });
    await dev.patch(`/v6/device(${d2.id})`, { is_online: true });
    await dev.patch(`/v6/application(${app.id})`, { app_name: 'hijack' });
    expect(d(await a.get(`/v6/device?$filter=belongs_to__application eq ${app.id}&$select=id,is_online&$orderby=id`))).toEqual([
      { id: d1.id, is_online: true },
      { id: d2.id, is_online: false },
    ]);
    expect(d(await a.get(`/v6/application(${app.id})?$select=app_name`))).toEqual([{ app_name: 'keys' }]);

    // walking a link to a record the key may not read finds nothing (here: organizations)
    expect(d(await a.get(`/v6/application?$filter=organization/handle eq 'alice' and id eq ${app.id}&$select=id`))).toEqual([{ id: app.id }]);
    expect(d(await dev.get("/v6/application?$filter=organization/handle eq 'alice'&$select=id"))).toEqual([]);
    expect(d(await dev.get('/v6/application?$filter=organization/handle eq null&$select=id'))).toEqual([{ id: app.id }]);
    expect(d(await dev.get('/v6/application?$select=id&$orderby=organization/handle'))).toEqual([{ id: app.id }]);
    const prov = (await a.post(`/api-key/application/${app.id}/provisioning`, {})).body as string;
    const p = as(prov);
    const reg = await p.post('/v6/device', { belongs_to__application: app.id, uuid: 'provisioned1' });
    expect(reg.status).toBe(201);
    // the registering device's own key, set through the provisioning key as balena's register flow does
    const chosen = 'device-chosen-key-0123456789';
    expect(await p.post(`/api-key/device/${(reg.body as { id: number }).id}/device-key`, { apiKey: chosen })).toMatchObject({ status: 200, body: chosen });
    expect(d(await as(chosen).get('/v6/device?$select=uuid'))).toEqual([{ uuid: 'provisioned1' }]);
    expect((await p.post(`/api-key/device/${d1.id}/device-key`, { apiKey: 'short' })).status).toBe(400);
    expect((await p.post('/v6/device', { belongs_to__application: other.id })).status).toBe(400);
    // the fleet is visible to the key, but creating a release is not its right: 401 as the reference
    expect(await p.post('/v6/release', { belongs_to__application: app.id, commit: 'x', status: 'success' })).toMatchObject({ status: 401 });
    expect((await a.get(`/v6/release/$count?$filter=belongs_to__application eq ${app.id}`)).body).toEqual({ d: 1 });
    // bob cannot mint keys for alice's records
    expect((await as(bob.key).post(`/api-key/device/${d1.id}/device-key`, {})).status).toBe(401);
    // user API keys: a named key works like the first one
    const named = (await a.post('/api-key/user/full', { name: 'ci' })).body as string;
    expect(d(await as(named).get(`/v6/application(${app.id})?$select=id`))).toEqual([{ id: app.id }]);
    const keys = d(await a.get('/v6/api_key?$select=name'));
    expect(keys.map((k) => k.name)).toContain('ci');
    expect(JSON.stringify(d(await a.get('/v6/api_key')))).not.toContain(named);
  });
});
