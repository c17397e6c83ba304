/**
 * Cloud scope: user B (bob), his device key and his fleet's provisioning key against user A's
 * (alice's) fleets, devices, keys, logs and the proxy to her devices' supervisors. Every
 * read row has a control (the admin or alice sees the records), so an empty answer means
 * "filtered", not "absent"; every write row compares every table before and after, and its
 * body would change something if the check were gone. The proxy rows run against devices
 * connected through the supervisor's own tunnel client, which records every call that
 * reaches them. The cloud keeps no logs of its own: a device's logs are reached through the
 * proxy (`/supervisor/v2/journal-logs`), so that is where the log rows are.
 *
 * Extends test/cloud-api.test.ts ("another user's fleet is invisible and unchangeable",
 * "device keys see their own device") and cloud-e2e's proxy row, without repeating them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelRequest, TunnelResponse } from '../src/protocol/device-cloud.js';
import { defaultBackoff } from '../src/supervisor/adapters/cloud/backoff.js';
import { Tunnel } from '../src/supervisor/adapters/cloud/tunnel.js';
import { cloudError, type Answer } from './helpers/cloud-error-shape.js';
import { cloudOn, databases, type CloudFixture, type DbKind } from './helpers/cloud-fixture.js';
import { changedTables, snapshot } from './helpers/db-snapshot.js';
import { upgradeAnswer } from './helpers/tunnel-upgrade.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

interface User {
  key: string;
  organization: number;
  id: number;
  actor: number;
}
interface Device {
  id: number;
  uuid: string;
  key: string;
}

const uuidOf = (n: number) => n.toString(16).padStart(32, 'd');

describe.each<DbKind>(['sqlite', 'postgres'])('cloud scope on %s', (kind) => {
  let c: CloudFixture;
  let base: string;
  let alice: User;
  let bob: User;
  let aliceKey2: { key: string; id: number };
  let bobKeyId: number;
  /** alice's private fleet, alice's public fleet, bob's fleet */
  let A: number, P: number, B: number;
  let rA: number, rB: number, iA: number;
  let pA: string, pB: string;
  let dA1: Device, dA2: Device, dP: Device, dB: Device;
  const tunnels: Tunnel[] = [];
  /** What reached each connected device through its tunnel. */
  const reached = new Map<string, TunnelRequest[]>();

  const call = async (key: string | null, method: string, url: string, payload?: unknown): Promise<Answer & { json: unknown }> => {
    const r = await c.app.inject({ method: method as 'GET', url, headers: key === null ? {} : { authorization: `Bearer ${key}` }, ...(payload === undefined ? {} : { payload: payload as object }) });
    let json: unknown;
    try {
      json = JSON.parse(r.body);
    } catch {
      json = r.body;
    }
    return { status: r.statusCode, headers: r.headers, body: r.body, json };
  };
  const ok = async (key: string, method: string, url: string, payload?: unknown) => {
    const r = await call(key, method, url, payload);
    if (r.status >= 300) throw new Error(`${method} ${url}: ${r.status} ${r.body}`);
    return r.json as Record<string, unknown> & { id: number; d: Array<Record<string, unknown>> };
  };
  const ids = async (key: string, url: string) => (await ok(key, 'GET', url)).d.map((r) => Number(r.id));

  async function register(provisioning: string, n: number, name: string): Promise<Device> {
    const d = { uuid: uuidOf(n), key: `device-key-of-${name}-00000000` };
    const r = await ok(provisioning, 'POST', '/device/register', { uuid: d.uuid, api_key: d.key, device_type: 'raspberrypi4-64', device_name: name });
    return { ...d, id: r.id };
  }

  /** Connects a device through the supervisor's tunnel client; it answers 200 and records each call. */
  function connect(d: Device): Tunnel {
    reached.set(d.uuid, []);
    const tunnel = new Tunnel({
      url: `${base.replace('http', 'ws')}/device/v3/${d.uuid}/tunnel`,
      deviceKey: () => d.key,
      handle: async (req): Promise<TunnelResponse> => {
        reached.get(d.uuid)!.push(req);
        return { type: 'response', id: req.id, status: 200, contentType: 'text/plain', body: `${d.uuid} answered ${req.method} ${req.path}` };
      },
      backoff: defaultBackoff,
      heartbeatMs: 60_000,
      log: { info: () => undefined, warn: () => undefined },
    });
    tunnel.start();
    tunnels.push(tunnel);
    return tunnel;
  }

  beforeAll(async () => {
    c = await cloudOn(await dbs.open(kind));
    base = (await c.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
    const user = async (username: string): Promise<User> => {
      const u = await ok(c.adminKey, 'POST', '/fleetlab/users', { username });
      return { key: u.apiKey as string, organization: u.organization as number, id: u.id, actor: u.actor as number };
    };
    alice = await user('alice');
    bob = await user('bob');
    const fleet = async (u: User, app_name: string, extra = {}) => (await ok(u.key, 'POST', '/v6/application', { app_name, organization: u.organization, device_type: 'raspberrypi4-64', ...extra })).id;
    A = await fleet(alice, 'private');
    P = await fleet(alice, 'public', { is_public: true });
    B = await fleet(bob, 'bobs');

    const secret = alice.key;
    aliceKey2 = { key: JSON.parse((await call(secret, 'POST', '/api-key/user/full', { name: 'ci' })).body) as string, id: 0 };
    aliceKey2.id = Number((await ok(secret, 'GET', "/v6/api_key?$filter=name eq 'ci'&$select=id")).d[0]!.id);
    bobKeyId = Number((await ok(bob.key, 'GET', '/v6/api_key?$select=id')).d[0]!.id);

    rA = (await ok(secret, 'POST', '/v6/release', { belongs_to__application: A, commit: 'a1', status: 'success', composition: { services: { main: {} } } })).id;
    rB = (await ok(bob.key, 'POST', '/v6/release', { belongs_to__application: B, commit: 'b1', status: 'success' })).id;
    const sA = (await ok(secret, 'POST', '/v6/service', { application: A, service_name: 'main' })).id;
    iA = (await ok(secret, 'POST', '/v6/image', { is_a_build_of__service: sA, is_stored_at__image_location: 'registry.local/alice/main:1', status: 'success' })).id;
    await ok(secret, 'POST', '/v6/image__is_part_of__release', { image: iA, is_part_of__release: rA });
    await ok(secret, 'PATCH', `/v6/application(${A})`, { should_be_running__release: rA });
    for (const app of [A, P]) {
      await ok(secret, 'POST', '/v6/application_environment_variable', { application: app, name: 'TOKEN', value: `secret-${app}` });
      await ok(secret, 'POST', '/v6/application_config_variable', { application: app, name: 'SUPERVISOR_POLL_INTERVAL', value: '60000' });
      await ok(secret, 'POST', '/v6/application_tag', { application: app, tag_key: 'team', value: 'alice' });
    }

    pA = JSON.parse((await call(secret, 'POST', `/api-key/application/${A}/provisioning`, {})).body) as string;
    const pP = JSON.parse((await call(secret, 'POST', `/api-key/application/${P}/provisioning`, {})).body) as string;
    pB = JSON.parse((await call(bob.key, 'POST', `/api-key/application/${B}/provisioning`, {})).body) as string;
    dA1 = await register(pA, 1, 'alice-1');
    dA2 = await register(pA, 2, 'alice-2');
    dP = await register(pP, 3, 'alice-public');
    dB = await register(pB, 4, 'bob-1');
    for (const d of [dA1, dP]) {
      await ok(secret, 'POST', '/v6/device_tag', { device: d.id, tag_key: 'room', value: 'lab' });
      await ok(secret, 'POST', '/v6/device_environment_variable', { device: d.id, name: 'PASSWORD', value: `secret-${d.uuid}` });
      await ok(secret, 'POST', '/v6/device_config_variable', { device: d.id, name: 'SUPERVISOR_LOCAL_MODE', value: '0' });
    }
    // an image_install, as the device's own report writes it
    await ok(dA1.key, 'PATCH', '/device/v3/state', {
      [dA1.uuid]: { status: 'Idle', apps: { [A]: { release_id: rA, services: { main: { image: 'registry.local/alice/main:1', image_id: iA, status: 'Running', download_progress: null, release_id: rA } } } } },
    });

    connect(dA1);
    connect(dP);
    // both tunnels up: the cloud marks a device online when its tunnel is adopted (bounded wait, not a timing assertion)
    const online = () => ids(c.adminKey, `/v6/device?$filter=is_online eq true&$select=id&$orderby=id`);
    for (let i = 0; i < 300 && (await online()).length < 2; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await online()).toEqual([dA1.id, dP.id]);
  }, 120_000);

  afterAll(async () => {
    for (const t of tunnels) t.close();
    await c?.close();
  });

  /** alice's rows of each resource, by id, read with the admin key (which sees everything). */
  async function aliceRows(): Promise<Record<string, number[]>> {
    const adm = (url: string) => ids(c.adminKey, url);
    const devices = [dA1.id, dA2.id, dP.id].join(',');
    const actorsOf = async (resource: string, list: string) => (await ok(c.adminKey, 'GET', `/v6/${resource}?$filter=id in (${list})&$select=actor`)).d.map((r) => Number(r.actor));
    const actors = [alice.actor, ...(await actorsOf('device', devices)), ...(await actorsOf('application', `${A},${P}`))];
    return {
      // P is public: bob may read the fleet itself (cloud-api.test.ts), nothing below it
      application: [A],
      my_application: [A, P],
      device: [dA1.id, dA2.id, dP.id],
      device_tag: await adm(`/v6/device_tag?$filter=device in (${devices})&$select=id`),
      device_environment_variable: await adm(`/v6/device_environment_variable?$filter=device in (${devices})&$select=id`),
      device_config_variable: await adm(`/v6/device_config_variable?$filter=device in (${devices})&$select=id`),
      image_install: await adm(`/v6/image_install?$filter=device in (${devices})&$select=id`),
      application_tag: await adm(`/v6/application_tag?$filter=application in (${A},${P})&$select=id`),
      application_environment_variable: await adm(`/v6/application_environment_variable?$filter=application in (${A},${P})&$select=id`),
      application_config_variable: await adm(`/v6/application_config_variable?$filter=application in (${A},${P})&$select=id`),
      service: await adm(`/v6/service?$filter=application in (${A},${P})&$select=id`),
      release: await adm(`/v6/release?$filter=belongs_to__application in (${A},${P})&$select=id`),
      image: [iA],
      release_image: await adm(`/v6/release_image?$filter=image eq ${iA}&$select=id`),
      image__is_part_of__release: await adm(`/v6/release_image?$filter=image eq ${iA}&$select=id`),
      api_key: await adm(`/v6/api_key?$filter=is_of__actor in (${actors.join(',')})&$select=id`),
      user: [alice.id],
      organization: [alice.organization],
      organization_membership: await adm(`/v6/organization_membership?$filter=user eq ${alice.id}&$select=id`),
      actor: actors,
    };
  }

  /** One request that must change nothing at all: every table compared before and after. */
  async function unchanged(key: string, method: string, url: string, body?: unknown) {
    const before = await snapshot(c.db);
    const answer = await call(key, method, url, body);
    return { answer, changed: changedTables(before, await snapshot(c.db)) };
  }

  it("reads: no resource shows bob, his device key or his provisioning key any of alice's records", async () => {
    const rows = await aliceRows();
    const callers: Array<[string, string]> = [['bob', bob.key], ["bob's device key", dB.key], ["bob's provisioning key", pB]];
    for (const [resource, mine] of Object.entries(rows)) {
      // control: the records exist and can be read (my_application is only ever the caller's own)
      const control = await ids(resource === 'my_application' ? alice.key : c.adminKey, `/v6/${resource}?$select=id`);
      expect({ resource, count: mine.length, missing: mine.filter((id) => !control.includes(id)) }).toEqual({ resource, count: expect.any(Number), missing: [] });
      expect(mine.length, resource).toBeGreaterThan(0);
      for (const [who, key] of callers) {
        const got = await ids(key, `/v6/${resource}?$select=id`);
        expect({ who, resource, leaked: got.filter((id) => mine.includes(id)) }).toEqual({ who, resource, leaked: [] });
        const count = (await ok(key, 'GET', `/v6/${resource}/$count`)).d as unknown as number;
        expect({ who, resource, count }).toEqual({ who, resource, count: got.length });
      }
    }
    // by key, through old version paths, and a device key within alice's own fleet
    expect(await ids(bob.key, `/v6/device(uuid='${dA1.uuid}')?$select=id`)).toEqual([]);
    expect(await ids(dB.key, `/v6/device(${dA1.id})?$select=id`)).toEqual([]);
    expect(await ids(bob.key, '/v1/environment_variable?$select=id')).toEqual([]);
    expect(await ids(alice.key, '/v1/environment_variable?$select=id')).toHaveLength(2);
    expect(await ids(bob.key, `/v3/device(${dA1.id})?$select=id`)).toEqual([]);
    expect(await ids(dA2.key, '/v6/device_environment_variable?$select=id')).toEqual([]);
    expect(await ids(dA1.key, '/v6/device_environment_variable?$select=id')).toHaveLength(1);
  });

  it("a public fleet shows bob the fleet, never what hangs off it: not in $expand, $count, or as a $filter oracle", async () => {
    const rows: Array<[url: string, bobSees: unknown, aliceSees: unknown]> = [
      [`/v6/application(${P})?$select=id&$expand=owns__device($select=id),owns__release($select=id),service($select=id),application_environment_variable($select=value),application_tag($select=value)`,
        [{ id: P, owns__device: [], owns__release: [], service: [], application_environment_variable: [], application_tag: [] }],
        [{ id: P, owns__device: [{ id: dP.id }], owns__release: [], service: [], application_environment_variable: [{ value: `secret-${P}` }], application_tag: [{ value: 'alice' }] }]],
      [`/v6/application(${P})?$select=id&$expand=owns__device/$count`, [{ id: P, owns__device: 0 }], [{ id: P, owns__device: 1 }]],
      [`/v6/application?$select=id&$filter=owns__device/any(d:d/device_name eq 'alice-public')`, [], [{ id: P }]],
      [`/v6/application?$select=id&$filter=application_environment_variable/any(v:v/value eq 'secret-${P}')`, [], [{ id: P }]],
      [`/v6/application?$select=id&$filter=id eq ${P} and owns__device/$count gt 0`, [], [{ id: P }]],
      [`/v6/device_type?$select=slug&$filter=slug eq 'raspberrypi4-64'&$expand=describes_device($select=id;$filter=belongs_to__application eq ${P})`,
        [{ slug: 'raspberrypi4-64', describes_device: [] }], [{ slug: 'raspberrypi4-64', describes_device: [{ id: dP.id }] }]],
    ];
    for (const [url, bobSees, aliceSees] of rows) {
      expect({ url, d: (await ok(alice.key, 'GET', url)).d }).toEqual({ url, d: aliceSees });
      expect({ url, d: (await ok(bob.key, 'GET', url)).d }).toEqual({ url, d: bobSees });
    }
  });

  it("writes: bob's changes to alice's records match nothing or are refused, and no table changes", async () => {
    const past = '2000-01-01T00:00:00Z';
    const rows: Array<[who: string, key: string, method: string, url: string, body: unknown, status: number, code?: string]> = [
      ['bob', bob.key, 'PATCH', `/v6/application(${A})`, { app_name: 'pwned' }, 200],
      ['bob', bob.key, 'PATCH', `/v6/application(${P})`, { app_name: 'pwned', is_public: false }, 200],
      ['bob', bob.key, 'DELETE', `/v6/application(${P})`, undefined, 200],
      ['bob', bob.key, 'PATCH', '/v6/application_environment_variable', { value: 'pwned' }, 200],
      ['bob', bob.key, 'DELETE', '/v6/device_tag', undefined, 200],
      ['bob', bob.key, 'PATCH', `/v6/device(${dA1.id})`, { belongs_to__application: B }, 200],
      ['bob', bob.key, 'PATCH', `/v6/release(${rA})`, { status: 'failed' }, 200],
      ['bob', bob.key, 'POST', '/v6/application', { app_name: 'squat', organization: alice.organization, device_type: 'raspberrypi4-64' }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'POST', '/v6/organization_membership', { user: bob.id, is_member_of__organization: alice.organization }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'PATCH', `/v6/application(${B})`, { organization: alice.organization }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'PATCH', `/v6/device(${dB.id})`, { belongs_to__application: A }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      // pinning his device to her release would hand her composition to his device's target state
      ['bob', bob.key, 'PATCH', `/v6/device(${dB.id})`, { should_be_running__release: rA }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'POST', '/v6/image__is_part_of__release', { image: iA, is_part_of__release: rB }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'POST', '/v6/device_environment_variable', { device: dA1.id, name: 'X', value: 'y' }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'POST', '/v6/release', { belongs_to__application: A, commit: 'evil', status: 'success' }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      // her public fleet is his to read, not to add to: the insert is rolled back
      ['bob', bob.key, 'POST', '/v6/device', { belongs_to__application: P, device_name: 'squatter' }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ['bob', bob.key, 'POST', '/v6/application_tag', { application: P, tag_key: 'owner', value: 'bob' }, 401, 'CLOUD_ERR_FORBIDDEN'],
      // keys: hers are not his to expire, delete, mint or take over
      ['bob', bob.key, 'PATCH', `/v6/api_key(${aliceKey2.id})`, { expiry_date: past }, 200],
      ['bob', bob.key, 'DELETE', `/v6/api_key(${aliceKey2.id})`, undefined, 200],
      ['bob', bob.key, 'PATCH', `/v6/api_key(${bobKeyId})`, { is_of__actor: alice.actor }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['bob', bob.key, 'POST', `/api-key/application/${A}/provisioning`, {}, 401, 'CLOUD_ERR_FORBIDDEN'],
      ['bob', bob.key, 'POST', `/api-key/device/${dA1.id}/device-key`, { apiKey: 'a-key-bob-chose-for-alice-1' }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ['bob', bob.key, 'POST', '/fleetlab/users', { username: 'eve' }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["bob's provisioning key", pB, 'POST', `/api-key/device/${dA1.id}/device-key`, { apiKey: 'a-key-bob-chose-for-alice-2' }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["bob's provisioning key", pB, 'POST', '/v6/device', { belongs_to__application: A }, 400, 'CLOUD_ERR_BAD_REQUEST'],
      ["bob's provisioning key", pB, 'PATCH', `/v6/device(${dA1.id})`, { device_name: 'pwned' }, 200],
      ["bob's device key", dB.key, 'PATCH', `/v6/device(${dA1.id})`, { device_name: 'pwned' }, 200],
      ["bob's device key", dB.key, 'PATCH', `/v6/device_environment_variable`, { value: 'pwned' }, 200],
      ["bob's device key", dB.key, 'POST', '/api-key/user/full', { name: 'x' }, 401, 'CLOUD_ERR_FORBIDDEN'],
      // the device endpoints: a device key reads and reports its own device only, even within one fleet
      ["bob's device key", dB.key, 'GET', `/device/v3/${dA1.uuid}/state`, undefined, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["bob's device key", dB.key, 'PATCH', '/device/v3/state', { [dA1.uuid]: { status: 'pwned' } }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["alice's other device", dA2.key, 'GET', `/device/v3/${dA1.uuid}/state`, undefined, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["alice's other device", dA2.key, 'PATCH', '/device/v3/state', { [dA1.uuid]: { status: 'pwned' } }, 401, 'CLOUD_ERR_FORBIDDEN'],
    ];
    for (const [who, key, method, url, body, status, code] of rows) {
      const { answer, changed } = await unchanged(key, method, url, body);
      const row = `${who}: ${method} ${url} ${JSON.stringify(body) ?? ''}`;
      expect({ row, status: answer.status, changed }).toEqual({ row, status, changed: [] });
      if (code) expect({ row, code: cloudError(answer).code }).toEqual({ row, code });
    }
    // what those rows would have broken, checked from alice's side
    expect(await ids(aliceKey2.key, `/v6/application(${A})?$select=id`)).toEqual([A]);
    expect(await ids(bob.key, `/v6/application(${A})?$select=id`)).toEqual([]);
    expect((await call('a-key-bob-chose-for-alice-1', 'GET', '/v6/device')).status).toBe(401);
    expect((await ok(dA1.key, 'GET', `/device/v3/${dA1.uuid}/state`))[dA1.uuid]).toBeDefined();
  });

  it("the proxy and logs: nothing bob sends reaches alice's devices, whatever he names them by", async () => {
    const log = () => ({ [dA1.uuid]: reached.get(dA1.uuid)!.splice(0), [dP.uuid]: reached.get(dP.uuid)!.splice(0) });
    // control: alice reaches both, one by uuid and a fleet by appId
    expect(await call(alice.key, 'POST', '/supervisor/v2/journal-logs', { uuid: dA1.uuid, data: { count: 5 } })).toMatchObject({ status: 200, body: `${dA1.uuid} answered POST /v2/journal-logs` });
    expect((await call(alice.key, 'POST', '/supervisor/v1/device', { appId: P, method: 'GET' })).status).toBe(207);
    expect(log()).toEqual({ [dA1.uuid]: [expect.objectContaining({ path: '/v2/journal-logs', body: { count: 5 } })], [dP.uuid]: [expect.objectContaining({ path: '/v1/device' })] });

    const rows: Array<[who: string, key: string, path: string, body: object, status: number, code: string]> = [
      ['bob', bob.key, '/supervisor/v2/journal-logs', { uuid: dA1.uuid, data: { count: 5 } }, 404, 'CLOUD_ERR_DEVICE_OFFLINE'],
      ['bob', bob.key, '/supervisor/v2/journal-logs', { deviceId: dP.id, data: { follow: false } }, 404, 'CLOUD_ERR_DEVICE_OFFLINE'],
      ['bob', bob.key, '/supervisor/v1/blink', { deviceId: dA1.id }, 404, 'CLOUD_ERR_DEVICE_OFFLINE'],
      ['bob', bob.key, '/supervisor/v2/applications/state', { appId: A, method: 'GET' }, 404, 'CLOUD_ERR_DEVICE_OFFLINE'],
      ['bob', bob.key, '/supervisor/v1/reboot', { appId: P, data: { force: true } }, 404, 'CLOUD_ERR_DEVICE_OFFLINE'],
      ["bob's device key", dB.key, '/supervisor/v1/blink', { uuid: dA1.uuid }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["bob's provisioning key", pB, '/supervisor/v1/blink', { appId: A }, 401, 'CLOUD_ERR_FORBIDDEN'],
      // nor the device's own key, nor its fleet's provisioning key: the proxy is a user's
      ["alice's device's own key", dA1.key, '/supervisor/v2/journal-logs', { uuid: dA1.uuid }, 401, 'CLOUD_ERR_FORBIDDEN'],
      ["alice's provisioning key", pA, '/supervisor/v1/blink', { appId: A }, 401, 'CLOUD_ERR_FORBIDDEN'],
    ];
    for (const [who, key, path, body, status, code] of rows) {
      const { answer, changed } = await unchanged(key, 'POST', path, body);
      const row = `${who}: POST ${path} ${JSON.stringify(body)}`;
      expect({ row, status: answer.status, code: cloudError(answer).code, changed, reached: log() }).toEqual({ row, status, code, changed: [], reached: { [dA1.uuid]: [], [dP.uuid]: [] } });
    }
  });

  it("a tunnel: another device's key cannot open alice's device's, nor take it over", async () => {
    for (const [who, key] of [["bob's device key", dB.key], ["alice's other device", dA2.key], ['bob', bob.key]] as const) {
      const refused = await upgradeAnswer(base, `/device/v3/${dA1.uuid}/tunnel`, key);
      expect({ who, ...cloudError(refused) }).toMatchObject({ who, status: 401, code: 'CLOUD_ERR_UNAUTHORIZED' });
    }
    // the real device's tunnel is still the one the proxy uses
    reached.get(dA1.uuid)!.splice(0);
    expect((await call(alice.key, 'POST', '/supervisor/v1/blink', { uuid: dA1.uuid })).status).toBe(200);
    expect(reached.get(dA1.uuid)!.map((r) => r.path)).toEqual(['/v1/blink']);
  });
});
