/**
 * One table of OData queries, run through the whole server against SQLite and a real
 * PostgreSQL cluster. Each row states the answer from the seed below; both databases must
 * give exactly that answer (same rows, same order).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cloudOn, databases, type CloudFixture, type DbKind } from './helpers/cloud-fixture.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

interface SeedDevice {
  name: string;
  app: 'alpha' | 'beta';
  online: boolean;
  os: string | null;
  tags: Record<string, string>;
  vars?: Record<string, string>;
}

const seedDevices: SeedDevice[] = [
  { name: 'a1', app: 'alpha', online: true, os: 'balenaOS 5.0.1', tags: { env: 'prod', rack: '1' }, vars: { VAR: '1' } },
  { name: 'a2', app: 'alpha', online: false, os: null, tags: { env: 'dev' } },
  { name: 'Ünïcode dév', app: 'alpha', online: true, os: 'balenaOS 6.1.0', tags: {} },
  { name: 'b1', app: 'beta', online: true, os: 'balenaOS 5.0.1', tags: { env: 'prod' } },
  { name: "it's", app: 'beta', online: false, os: 'balenaOS 2.0.0', tags: { rack: '2' } },
];

/** [url, names of the device records expected, in order] for /v6/device queries. */
const deviceQueries: [string, string[]][] = [
  ['$orderby=device_name', ['a1', 'a2', 'b1', "it's", 'Ünïcode dév']],
  ['$orderby=device_name desc', ['Ünïcode dév', "it's", 'b1', 'a2', 'a1']],
  ["$filter=device_name eq 'a1'", ['a1']],
  ["$filter=device_name ne 'a1'&$orderby=device_name", ['a2', 'b1', "it's", 'Ünïcode dév']],
  ["$filter=device_name eq 'it''s'", ["it's"]],
  ["$filter=device_name eq 'Ünïcode dév'", ['Ünïcode dév']],
  ['$filter=is_online eq true&$orderby=device_name', ['a1', 'b1', 'Ünïcode dév']],
  ['$filter=not(is_online eq true)&$orderby=device_name', ['a2', "it's"]],
  ['$filter=os_version eq null', ['a2']],
  ["$filter=os_version ne 'balenaOS 5.0.1'&$orderby=device_name", ['a2', "it's", 'Ünïcode dév']],
  ["$filter=os_version gt 'balenaOS 5'&$orderby=os_version desc,device_name", ['Ünïcode dév', 'a1', 'b1']],
  ["$filter=(is_online eq true and os_version eq 'balenaOS 5.0.1') or device_name eq 'a2'&$orderby=device_name", ['a1', 'a2', 'b1']],
  ["$filter=device_name in ('a1','b1','zz')&$orderby=device_name", ['a1', 'b1']],
  ["$filter=contains(device_name,'1')&$orderby=device_name", ['a1', 'b1']],
  ["$filter=startswith(device_name,'a')&$orderby=device_name", ['a1', 'a2']],
  ["$filter=endswith(device_name,'dév')", ['Ünïcode dév']],
  ["$filter=endswith(device_name,'a very long suffix that is longer')", []],
  ["$filter=substringof('t''s',device_name)", ["it's"]],
  ["$filter=tolower(device_name) eq 'a1' or toupper(device_name) eq 'B1'&$orderby=device_name", ['a1', 'b1']],
  ['$filter=length(device_name) gt 4', ['Ünïcode dév']],
  ['$filter=length(device_name) ge 4&$orderby=device_name', ["it's", 'Ünïcode dév']],
  ['$filter=id add 1 eq 3', ['a2']],
  ['$filter=id mod 2 eq 0&$orderby=id', ['a2', 'b1']],
  ['$filter=id mul 2 sub 1 eq 5', ['Ünïcode dév']],
  ['$filter=id div 2 eq 2&$orderby=id', ['b1', "it's"]],
  ["$filter=belongs_to__application/app_name eq 'beta'&$orderby=device_name", ['b1', "it's"]],
  ["$filter=belongs_to__application/organization/handle eq 'alice' and is_online eq false&$orderby=device_name", ['a2', "it's"]],
  ["$filter=is_of__device_type/slug eq 'raspberrypi3'&$orderby=device_name", ['b1', "it's"]],
  ["$filter=device_tag/any(t:t/tag_key eq 'env' and t/value eq 'prod')&$orderby=device_name", ['a1', 'b1']],
  ["$filter=device_tag/all(t:t/value ne 'dev')&$orderby=device_name", ['a1', 'b1', "it's", 'Ünïcode dév']],
  ["$filter=not device_tag/any(t:t/tag_key eq 'env')&$orderby=device_name", ["it's", 'Ünïcode dév']],
  ['$filter=device_tag/$count ge 2', ['a1']],
  ["$filter=device_environment_variable/any(v:v/name eq 'VAR' and v/value eq '1')", ['a1']],
  ["$filter=belongs_to__application/owns__release/any(r:r/status eq 'failed')&$orderby=device_name", ['a1', 'a2', 'Ünïcode dév']],
  ['$orderby=belongs_to__application/app_name desc,device_name', ['b1', "it's", 'a1', 'a2', 'Ünïcode dév']],
  ['$orderby=os_version,device_name', ['a2', "it's", 'a1', 'b1', 'Ünïcode dév']],
  ['$orderby=device_name&$top=2', ['a1', 'a2']],
  ['$orderby=device_name&$top=2&$skip=3', ["it's", 'Ünïcode dév']],
  ['$orderby=device_name&$skip=4', ['Ünïcode dév']],
  ["$filter=created_at gt datetime'2000-01-01T00:00:00Z'&$orderby=id", ['a1', 'a2', 'Ünïcode dév', 'b1', "it's"]],
  // Injection attempts are values: they match nothing and run nothing.
  ["$filter=device_name eq 'x'' or 1=1;--'", []],
  ["$filter=device_name eq '); DROP TABLE device;--'", []],
  ["$filter=device_name eq '\u{1F600}'' OR ''a''=''a'", []],
];

describe.each<DbKind>(['sqlite', 'postgres'])('OData on %s', (kind) => {
  let c: CloudFixture;
  const get = async (url: string) => {
    const r = await c.app.inject({ method: 'GET', url: encodeURI(url).replace(/%25(?=[0-9A-F]{2})/g, '%'), headers: { authorization: `Bearer ${c.adminKey}` } });
    return { status: r.statusCode, body: r.body ? (JSON.parse(r.body) as { d: unknown }) : null };
  };
  const post = async (resource: string, payload: object) => {
    const r = await c.app.inject({ method: 'POST', url: `/v6/${resource}`, headers: { authorization: `Bearer ${c.adminKey}` }, payload });
    if (r.statusCode !== 201) throw new Error(`POST ${resource}: ${r.statusCode} ${r.body}`);
    return JSON.parse(r.body) as { id: number };
  };

  beforeAll(async () => {
    c = await cloudOn(await dbs.open(kind));
    const user = await c.app.inject({ method: 'POST', url: '/fleetlab/users', headers: { authorization: `Bearer ${c.adminKey}` }, payload: { username: 'alice' } });
    const org = (JSON.parse(user.body) as { organization: number }).organization;
    const types = (await get("/v6/device_type?$filter=slug in ('raspberrypi4-64','raspberrypi3')&$orderby=slug")).body!.d as { id: number; slug: string }[];
    const type = Object.fromEntries(types.map((t) => [t.slug, t.id]));
    const apps = {
      alpha: (await post('application', { app_name: 'alpha', organization: org, is_for__device_type: type['raspberrypi4-64'] })).id,
      beta: (await post('application', { app_name: 'beta', organization: org, is_for__device_type: type.raspberrypi3 })).id,
    };
    for (const [app, commit, status] of [['alpha', 'aaa', 'success'], ['alpha', 'bbb', 'failed'], ['beta', 'ccc', 'success']] as const) {
      await post('release', { belongs_to__application: apps[app], commit, status });
    }
    for (const d of seedDevices) {
      const dev = await post('device', { device_name: d.name, belongs_to__application: apps[d.app], is_online: d.online, os_version: d.os });
      for (const [tag_key, value] of Object.entries(d.tags)) await post('device_tag', { device: dev.id, tag_key, value });
      for (const [name, value] of Object.entries(d.vars ?? {})) await post('device_environment_variable', { device: { __id: dev.id }, name, value });
    }
  });

  it.each(deviceQueries)(`GET /v6/device?%s`, async (query, names) => {
    const r = await get(`/v6/device?$select=device_name&${query}`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect((r.body!.d as { device_name: string }[]).map((d) => d.device_name)).toEqual(names);
  });

  it('$count of a collection and of a filtered collection', async () => {
    expect((await get('/v6/device/$count')).body).toEqual({ d: seedDevices.length });
    expect((await get('/v6/device/$count?$filter=is_online eq true')).body).toEqual({ d: seedDevices.filter((d) => d.online).length });
    expect((await get("/v6/device_tag/$count?$filter=tag_key eq 'env'")).body).toEqual({ d: 3 });
  });

  it('any() over a link no record holds (null link columns) is false, and not any() true', async () => {
    // No device pins a release: every device's should_be_running__release is null.
    const commits = async (filter: string) => ((await get(`/v6/release?$select=commit&$orderby=commit&$filter=${filter}`)).body!.d as { commit: string }[]).map((r) => r.commit);
    expect(await commits("should_be_running_on__device/any(d:d/device_name ne 'zz')")).toEqual([]);
    expect(await commits("not should_be_running_on__device/any(d:d/device_name ne 'zz')")).toEqual(['aaa', 'bbb', 'ccc']);
  });

  it('$expand two levels with nested $select/$filter/$orderby/$top, and link/$count', async () => {
    const r = await get(
      "/v6/application?$select=app_name&$orderby=app_name&$expand=owns__device($select=device_name;$orderby=device_name desc;$top=2;$expand=device_tag($select=tag_key,value;$orderby=tag_key)),owns__release/$count",
    );
    expect(r.status).toBe(200);
    expect(r.body!.d).toEqual([
      {
        app_name: 'alpha',
        owns__device: [
          { device_name: 'Ünïcode dév', device_tag: [] },
          { device_name: 'a2', device_tag: [{ tag_key: 'env', value: 'dev' }] },
        ],
        owns__release: 2,
      },
      {
        app_name: 'beta',
        owns__device: [
          { device_name: "it's", device_tag: [{ tag_key: 'rack', value: '2' }] },
          { device_name: 'b1', device_tag: [{ tag_key: 'env', value: 'prod' }] },
        ],
        owns__release: 1,
      },
    ]);
    const counts = await get('/v6/application?$select=app_name&$orderby=app_name&$expand=owns__device/$count($filter=is_online eq true)');
    expect(counts.body!.d).toEqual([
      { app_name: 'alpha', owns__device: 2 },
      { app_name: 'beta', owns__device: 1 },
    ]);
  });

  it('$skip with $top inside $expand apply per parent record', async () => {
    const r = await get('/v6/application?$select=app_name&$orderby=app_name&$expand=owns__device($select=device_name;$orderby=device_name;$skip=1;$top=1)');
    expect(r.body!.d).toEqual([
      { app_name: 'alpha', owns__device: [{ device_name: 'a2' }] },
      { app_name: 'beta', owns__device: [{ device_name: "it's" }] },
    ]);
  });

  it('an expanded record is the record as its own collection returns it: every field, typed alike', async () => {
    // Expanded records are built as JSON by the database; records of a collection are rows.
    // Booleans, nulls, numbers, JSON and text must come out the same from both.
    const apps = (await get("/v6/application?$filter=app_name eq 'alpha'&$expand=owns__device($orderby=device_name),owns__release($orderby=id)")).body!.d as Array<Record<string, unknown>>;
    const devices = (await get("/v6/device?$filter=belongs_to__application/app_name eq 'alpha'&$orderby=device_name")).body!.d;
    const releases = (await get("/v6/release?$filter=belongs_to__application/app_name eq 'alpha'&$orderby=id")).body!.d;
    expect(apps[0]!.owns__device).toEqual(devices);
    expect(apps[0]!.owns__release).toEqual(releases);
    const device = ((await get("/v6/device?$filter=device_name eq 'a2'&$expand=belongs_to__application")).body!.d as Array<Record<string, unknown>>)[0]!;
    const { owns__device: _d, owns__release: _r, ...app } = apps[0]!;
    expect(device.belongs_to__application).toEqual([app]);
  });

  it('links read as {__id}; an expanded to-one link is an array of one record', async () => {
    const r = await get("/v6/device?$filter=device_name eq 'b1'&$select=device_name,belongs_to__application,should_be_running__release&$expand=belongs_to__application($select=app_name;$expand=is_for__device_type($select=slug))");
    const [d] = r.body!.d as Record<string, unknown>[];
    expect(d).toEqual({ device_name: 'b1', belongs_to__application: [{ app_name: 'beta', is_for__device_type: [{ slug: 'raspberrypi3' }] }], should_be_running__release: null });
    const plain = await get("/v6/device?$filter=device_name eq 'b1'&$select=belongs_to__application");
    expect((plain.body!.d as Record<string, unknown>[])[0]).toEqual({ belongs_to__application: { __id: expect.any(Number) } });
  });

  it('keys: id, unique field, composite; a miss is 200 {"d":[]}', async () => {
    const a1 = ((await get("/v6/device?$filter=device_name eq 'a1'&$select=id,uuid")).body!.d as { id: number; uuid: string }[])[0]!;
    expect((await get(`/v6/device(${a1.id})?$select=device_name`)).body).toEqual({ d: [{ device_name: 'a1' }] });
    expect((await get(`/v6/device(uuid='${a1.uuid}')?$select=device_name`)).body).toEqual({ d: [{ device_name: 'a1' }] });
    expect((await get(`/v6/device_tag(device=${a1.id},tag_key='rack')?$select=value`)).body).toEqual({ d: [{ value: '1' }] });
    expect(await get('/v6/device(999999)')).toEqual({ status: 200, body: { d: [] } });
    expect(await get("/v6/device(uuid='x'' OR ''1''=''1')")).toEqual({ status: 200, body: { d: [] } });
  });

  it('malformed, unknown or ill-typed queries are 400 with a message, never 500', async () => {
    for (const url of [
      '/v6/device?$filter=device_name eq',
      '/v6/device?$filter=nope eq 1',
      '/v6/nope',
      "/v6/device?$filter=id eq 'x'",
      '/v6/device?$filter=id eq 1;DROP TABLE device',
      "/v6/device?$filter=device_name eq 'x';DROP TABLE device;--",
      '/v6/device?$expand=nope',
      '/v6/device?$orderby=device_tag',
      '/v6/device?$top=x',
      "/v6/device?$filter=device_tag/any(t:t/nope eq 'x')",
      "/v6/device?$filter=device_name eq 'a%00'",
      "/v6/release?$filter=composition eq 'x'",
    ]) {
      const r = await get(url);
      expect(r.status, url).toBe(400);
      expect(typeof r.body, url).toBe('string');
    }
    expect((await get('/v6/device/$count')).body).toEqual({ d: seedDevices.length });
  });

  it('values the database refuses are 400s on both databases', async () => {
    for (const url of ['/v6/device?$filter=id mul 9223372036854775807 mul 9223372036854775807 gt 0', '/v6/device?$filter=id div 0 eq 1', '/v6/device?$filter=id mod 0 eq 1']) {
      const r = await get(url);
      // SQLite answers NULL (no rows) where PostgreSQL raises; either way, never a 500
      expect([200, 400], `${url}: ${JSON.stringify(r.body)}`).toContain(r.status);
    }
  });

  it('a long `in` list (1,000 values) fits in one URL and one statement', async () => {
    const ids = Array.from({ length: 1000 }, (_, i) => i + 1);
    const r = await get(`/v6/device/$count?$filter=id in (${ids.join(',')})`);
    expect(r).toEqual({ status: 200, body: { d: seedDevices.length } });
  });
});
