/**
 * The cloud's one error shape (docs/errors.md, "Cloud API responses"), from every place an
 * error can start: a route's own refusal, fastify's schema validation and body parser, the
 * router (an undecodable URL, no route), the database (unique, referenced), the proxy, the
 * tunnel upgrade, and a database that has gone away. Each on SQLite and PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asCloudError } from '../src/cloud/api/errors.js';
import { cloudError, type Answer } from './helpers/cloud-error-shape.js';
import { cloudOn, databases, type CloudFixture, type DbKind } from './helpers/cloud-fixture.js';
import { upgradeAnswer } from './helpers/tunnel-upgrade.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

describe.each<DbKind>(['sqlite', 'postgres'])('cloud errors on %s', (kind) => {
  let c: CloudFixture;
  let alice: { apiKey: string; organization: number };
  let fleet: number;
  let provisioning: string;
  let deviceKey: string;
  let deviceId: number;

  const call = async (key: string | null, method: string, url: string, payload?: unknown, headers: Record<string, string> = {}): Promise<Answer> => {
    const r = await c.app.inject({
      method: method as 'GET',
      url,
      headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...headers },
      ...(payload === undefined ? {} : { payload: payload as string }),
    });
    return { status: r.statusCode, headers: r.headers, body: r.body };
  };

  beforeAll(async () => {
    c = await cloudOn(await dbs.open(kind));
    alice = JSON.parse((await call(c.adminKey, 'POST', '/fleetlab/users', { username: 'alice' })).body) as typeof alice;
    fleet = (JSON.parse((await call(alice.apiKey, 'POST', '/v6/application', { app_name: 'errs', organization: alice.organization, device_type: 'raspberrypi3' })).body) as { id: number }).id;
    provisioning = JSON.parse((await call(alice.apiKey, 'POST', `/api-key/application/${fleet}/provisioning`, {})).body) as string;
    deviceKey = 'a-device-key-of-errs-0000000001';
    const reg = await call(provisioning, 'POST', '/device/register', { uuid: 'e'.repeat(32), api_key: deviceKey, device_type: 'raspberrypi3' });
    expect(reg.status).toBe(201);
    deviceId = (JSON.parse(reg.body) as { id: number }).id;
  });

  afterAll(() => c?.close());

  it('a first fleet without an organization: 400 that says what to give and where to find it', async () => {
    const e = cloudError(await call(alice.apiKey, 'POST', '/v6/application', { app_name: 'first', device_type: 'raspberrypi3' }));
    expect(e).toMatchObject({ status: 400, code: 'CLOUD_ERR_BAD_REQUEST' });
    expect(e.message).toBe('application: organization (the id of an organization; GET /v6/organization lists those you can use) is required');
    // and the hint works: the caller's organization is there
    const orgs = JSON.parse((await call(alice.apiKey, 'GET', '/v6/organization?$select=id')).body) as { d: { id: number }[] };
    expect(orgs.d).toEqual([{ id: alice.organization }]);
    // every missing required field at once, with its type
    expect(cloudError(await call(alice.apiKey, 'POST', '/v6/release', { belongs_to__application: fleet })).message).toBe('release: commit (text), status (text) are required');
  });

  it('each source of a refusal answers in the one shape, with the code that names it', async () => {
    const cases: Array<[what: string, answer: Promise<Answer>, status: number, code: string, message?: RegExp]> = [
      ['no key', call(null, 'GET', '/v6/device'), 401, 'CLOUD_ERR_UNAUTHORIZED', /^Unauthorized$/],
      ['unknown key', call('not-a-key', 'GET', '/v6/device'), 401, 'CLOUD_ERR_UNAUTHORIZED'],
      ['malformed OData', call(alice.apiKey, 'GET', "/v6/device?$filter=device_name eq 'x' and"), 400, 'CLOUD_ERR_BAD_REQUEST', /^Malformed OData URL/],
      ['unknown field', call(alice.apiKey, 'GET', '/v6/device?$select=nope'), 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['route schema', call(provisioning, 'POST', '/device/register', { uuid: 'x' }), 400, 'CLOUD_ERR_BAD_REQUEST', /body must/],
      ['malformed JSON', call(alice.apiKey, 'POST', '/v6/device_tag', '{"tag_key":', { 'content-type': 'application/json' }), 400, 'CLOUD_ERR_BAD_REQUEST', /^Invalid JSON body/],
      ['not JSON', call(alice.apiKey, 'POST', '/v6/device_tag', 'a=1', { 'content-type': 'application/x-www-form-urlencoded' }), 400, 'CLOUD_ERR_BAD_REQUEST', /send JSON/],
      ['undecodable URL', call(alice.apiKey, 'GET', '/v6/dev%ZZice'), 400, 'CLOUD_ERR_BAD_REQUEST', /^Malformed URL/],
      ['undecodable URL, no route', call(alice.apiKey, 'GET', '/%'), 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['no route', call(alice.apiKey, 'GET', '/nope'), 404, 'CLOUD_ERR_NOT_FOUND', /^Not found: GET \/nope$/],
      ['no version', call(alice.apiKey, 'GET', '/v7/device'), 404, 'CLOUD_ERR_NOT_FOUND'],
      ['wrong kind of key', call(deviceKey, 'POST', '/api-key/user/full', { name: 'x' }), 401, 'CLOUD_ERR_FORBIDDEN'],
      ['proxy, no online device', call(alice.apiKey, 'POST', '/supervisor/v1/blink', { uuid: 'e'.repeat(32) }), 404, 'CLOUD_ERR_DEVICE_OFFLINE'],
      ['proxy, two selectors', call(alice.apiKey, 'POST', '/supervisor/v1/blink', { uuid: 'e'.repeat(32), appId: fleet }), 400, 'CLOUD_ERR_BAD_REQUEST'],
      ['register, taken uuid (the database)', call(provisioning, 'POST', '/device/register', { uuid: 'e'.repeat(32), api_key: 'another-device-key-0000002', device_type: 'raspberrypi3' }), 409, 'CLOUD_ERR_UNIQUE', /^"uuid" must be unique\.$/],
      ['a chosen device key already in use (the database)', call(provisioning, 'POST', `/api-key/device/${deviceId}/device-key`, { apiKey: deviceKey }), 409, 'CLOUD_ERR_UNIQUE'],
      ['create a record only device reports write (was a 500 from the database)', call(alice.apiKey, 'POST', '/v6/image_install', {}), 401, 'CLOUD_ERR_FORBIDDEN'],
      ['delete a fleet with devices (the database)', call(alice.apiKey, 'DELETE', `/v6/application(${fleet})`), 409, 'CLOUD_ERR_REFERENCED'],
    ];
    for (const [what, answer, status, code, message] of cases) {
      const a = await answer;
      const e = cloudError(a);
      expect({ what, status: e.status, code: e.code }).toEqual({ what, status, code });
      if (message) expect(e.message, what).toMatch(message);
    }
  });

  it('a NOT NULL violation from either database is the caller\'s input (400), naming the column', async () => {
    const err = await c.db.query('INSERT INTO "device_tag" (created_at, tag_key, value) VALUES (?, ?, ?)', [new Date().toISOString(), 'k', 'v']).then(
      () => new Error('the insert went through'),
      (e: unknown) => e,
    );
    const mapped = asCloudError(err, c.db.dialect, 'POST');
    expect({ code: mapped.code, message: mapped.message }).toEqual({ code: 'CLOUD_ERR_BAD_REQUEST', message: 'device is required (it cannot be null)' });
  });

  it('a unique violation keeps the body pinejs-client upsert reads (docs/decisions.md item 17)', async () => {
    await call(alice.apiKey, 'POST', '/v6/device_tag', { device: deviceId, tag_key: 'k', value: '1' });
    const a = await call(alice.apiKey, 'POST', '/v6/device_tag', { device: deviceId, tag_key: 'k', value: '2' });
    expect(a.body).toBe('"\\"device\\" and \\"tag_key\\" must be unique."');
    expect(cloudError(a).code).toBe('CLOUD_ERR_UNIQUE');
  });

  it('a refused tunnel upgrade is an error in the same shape', async () => {
    const base = await c.app.listen({ port: 0, host: '127.0.0.1' });
    const upgrade = (path: string, key: string) => upgradeAnswer(base, path, key);
    expect(cloudError(await upgrade(`/device/v3/${'e'.repeat(32)}/tunnel`, alice.apiKey))).toMatchObject({ status: 401, code: 'CLOUD_ERR_UNAUTHORIZED' });
    expect(cloudError(await upgrade('/v6/device', deviceKey))).toMatchObject({ status: 404, code: 'CLOUD_ERR_NOT_FOUND' });
  });

  it('a database that has gone away: 500 in the same shape, told to the cloud\'s log (4xx are not)', async () => {
    const told: string[] = [];
    const gone = await cloudOn(await dbs.open(kind), { log: { warn: (m) => told.push(m) } });
    const refused = await gone.app.inject({ method: 'GET', url: '/v6/device', headers: { authorization: 'Bearer not-a-key' } });
    expect(refused.statusCode).toBe(401);
    expect(told).toEqual([]);
    await gone.db.close();
    const r = await gone.app.inject({ method: 'GET', url: '/v6/device?$top=1', headers: { authorization: `Bearer ${gone.adminKey}` } });
    const err = cloudError({ status: r.statusCode, headers: r.headers, body: r.body });
    expect(err).toMatchObject({ status: 500, code: 'CLOUD_ERR_INTERNAL' });
    expect(told).toEqual([`GET /v6/device: 500 CLOUD_ERR_INTERNAL: ${err.message}`]);
    await gone.close();
  });
});
