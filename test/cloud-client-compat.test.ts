/**
 * An unchanged standard OData client of this API against a real cloud: `pinejs-client-core`
 * (the client balena-sdk talks to the reference API with), subclassed only for transport
 * (`_request` over fetch, as balena-sdk's own subclass does over balena-request), against
 * a cloud listening on 127.0.0.1 over SQLite and PostgreSQL. Every URL below is the one the
 * client builds from its query objects, driven the way balena-sdk drives it; the data is
 * created through the same client. docs/decisions.md items 16-18 are what make this work: the
 * `{d: [...]}` envelope, `{d: N}` counts, and the 409 "must be unique" body `upsert` reads.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { PinejsClientCore, StatusError, type AnyObject } from 'pinejs-client-core';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { buildCloud } from '../src/cloud/server.js';
import { databases, type DbKind } from './helpers/cloud-fixture.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

/** What `_request` throws: the status and the parsed body, as balena-request's error carries them. */
class ApiError extends StatusError {
  constructor(
    message: string,
    statusCode: number,
    readonly body: unknown,
  ) {
    super(message, statusCode);
  }
}

/** balena-sdk's `PinejsClient`, with fetch in place of balena-request. */
class FetchPine extends PinejsClientCore {
  /** Every URL the client sent, for assertions on what it built. */
  readonly sent: string[] = [];

  constructor(
    private readonly base: string,
    private readonly apiKey: string,
  ) {
    super({ apiPrefix: `${base}/v6/` });
  }

  /** A non-OData endpoint, still through the client's `request` and `_request`. */
  call(method: 'POST' | 'GET', path: string, body?: AnyObject): Promise<unknown> {
    return this.request({ method, apiPrefix: `${this.base}/`, url: path, ...(body === undefined ? {} : { body }) });
  }

  override async _request(params: { method: string; url: string; body?: AnyObject } & AnyObject): Promise<NonNullable<unknown>> {
    const { method, url, body } = params;
    const u = new URL(url);
    if (u.hostname !== '127.0.0.1') throw new Error(`refusing to leave 127.0.0.1: ${url}`);
    this.sent.push(`${method} ${url.slice(this.base.length)}`);
    const res = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${this.apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let parsed: unknown = text;
    if (text !== '') {
      try {
        parsed = JSON.parse(text);
      } catch {
        // plain-text answers stay text
      }
    }
    if (!res.ok) throw new ApiError(`${method} ${url.slice(this.base.length)}: ${res.status} ${text}`, res.status, parsed);
    return parsed ?? '';
  }
}

interface Rec {
  id: number;
  [k: string]: unknown;
}
type Row = Record<string, unknown>;

const rejection = async (p: Promise<unknown>): Promise<ApiError> => {
  try {
    await p;
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected the request to fail');
};

describe.each<DbKind>(['sqlite', 'postgres'])('pinejs-client-core against the cloud on %s', (kind) => {
  let cloud: FastifyInstance;
  let base: string;
  let admin: FetchPine;
  let alice: FetchPine;
  let bob: FetchPine;
  let org: number;
  let rpi4: number;
  let fleet: Rec;
  let other: Rec;
  let release: Rec;
  /** uuid -> id of the fleet's devices */
  const devices = new Map<string, number>();
  const uuidOf = (n: number) => n.toString(16).padStart(32, 'a');

  beforeAll(async () => {
    const db = await dbs.open(kind);
    const adm = await prepareDatabase(db);
    cloud = buildCloud({ db });
    base = (await cloud.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
    admin = new FetchPine(base, adm.key!);
    const a = (await admin.call('POST', 'fleetlab/users', { username: 'alice' })) as { apiKey: string; organization: number };
    const b = (await admin.call('POST', 'fleetlab/users', { username: 'bob' })) as { apiKey: string; organization: number };
    alice = new FetchPine(base, a.apiKey);
    bob = new FetchPine(base, b.apiKey);
    org = a.organization;
  }, 120_000);

  afterAll(async () => {
    await cloud?.close();
  });

  it('reads seeded device types: $select, $filter with $in and $startswith, $orderby, $top, $skip, named key', async () => {
    const all = (await alice.get({ resource: 'device_type', options: { $select: ['id', 'slug', 'name'], $orderby: { slug: 'asc' } } })) as Rec[];
    const slugs = all.map((t) => t.slug as string);
    expect(slugs).toContain('raspberrypi4-64');
    expect(slugs).toEqual([...slugs].sort());
    expect(Object.keys(all[0]!).sort()).toEqual(['id', 'name', 'slug']);

    // $orderby as a bare string sorts ascending (docs/decisions.md item 18); an array of objects mixes directions
    expect(((await alice.get({ resource: 'device_type', options: { $select: 'slug', $orderby: 'slug' } })) as Rec[]).map((t) => t.slug)).toEqual(slugs);
    expect(((await alice.get({ resource: 'device_type', options: { $select: 'slug', $orderby: [{ slug: 'desc' }] } })) as Rec[]).map((t) => t.slug)).toEqual([...slugs].reverse());

    const page = (await alice.get({ resource: 'device_type', options: { $select: 'slug', $orderby: { slug: 'asc' }, $top: 3, $skip: 2 } })) as Rec[];
    expect(page.map((t) => t.slug)).toEqual(slugs.slice(2, 5));

    const picked = (await alice.get({
      resource: 'device_type',
      options: { $select: 'slug', $filter: { slug: { $in: ['raspberrypi3', 'raspberrypi4-64', 'no-such-board'] } }, $orderby: { slug: 'desc' } },
    })) as Rec[];
    expect(picked).toEqual([{ slug: 'raspberrypi4-64' }, { slug: 'raspberrypi3' }]);
    // a one-element $in compiles to `eq`
    expect((await alice.get({ resource: 'device_type', options: { $select: 'slug', $filter: { slug: { $in: ['raspberrypi5'] } } } })) as Rec[]).toEqual([{ slug: 'raspberrypi5' }]);

    const pis = (await alice.get({ resource: 'device_type', options: { $select: 'slug', $filter: { slug: { $startswith: 'raspberrypi' } } } })) as Rec[];
    expect(pis.map((t) => t.slug).sort()).toEqual(slugs.filter((s) => s.startsWith('raspberrypi')));
    expect(pis.length).toBeGreaterThanOrEqual(5);

    const one = (await alice.get({ resource: 'device_type', id: { slug: 'raspberrypi4-64' }, options: { $select: ['id', 'slug'] } })) as Rec | undefined;
    expect(one).toEqual({ id: all.find((t) => t.slug === 'raspberrypi4-64')!.id, slug: 'raspberrypi4-64' });
    rpi4 = one!.id;
    expect(await alice.get({ resource: 'device_type', id: one!.id, options: { $select: 'slug' } })).toEqual({ slug: 'raspberrypi4-64' });
    expect(await alice.get({ resource: 'device_type', id: { slug: 'no-such-board' } })).toBeUndefined();

    // $count, both ways the client asks for it: plain and with a $filter
    expect(await alice.get({ resource: 'device_type', options: { $count: {} } })).toBe(all.length);
    expect(await alice.get({ resource: 'device_type', options: { $count: { $filter: { slug: { $startswith: 'raspberrypi' } } } } })).toBe(pis.length);
    expect(alice.sent).toContain("GET /v6/device_type/$count?$filter=startswith(slug,'raspberrypi')");
  });

  it('creates fleets, a release, services and images with post, and reads them back with nested $expand', async () => {
    fleet = (await alice.post({ resource: 'application', body: { app_name: 'compat', organization: org, is_for__device_type: rpi4 } })) as Rec;
    expect(fleet).toMatchObject({ app_name: 'compat', slug: 'alice/compat', organization: { __id: org }, is_for__device_type: { __id: rpi4 } });
    other = (await alice.post({ resource: 'application', body: { app_name: 'other', organization: org, device_type: 'raspberrypi3' } })) as Rec;
    expect(other.slug).toBe('alice/other');

    release = (await alice.post({
      resource: 'release',
      body: { belongs_to__application: fleet.id, commit: 'c0ffee', status: 'success', composition: { services: { web: {}, worker: {}, cache: {} } }, semver: '1.2.3' },
    })) as Rec;
    expect(release).toMatchObject({ commit: 'c0ffee', status: 'success', semver: '1.2.3', belongs_to__application: { __id: fleet.id } });
    for (const name of ['web', 'worker', 'cache']) {
      const svc = (await alice.post({ resource: 'service', body: { application: fleet.id, service_name: name } })) as Rec;
      const img = (await alice.post({
        resource: 'image',
        body: { is_a_build_of__service: svc.id, is_stored_at__image_location: `registry.local/${name}:1`, status: 'success', image_size: 1_000_000 },
      })) as Rec;
      await alice.post({ resource: 'image__is_part_of__release', body: { image: img.id, is_part_of__release: release.id } });
    }
    await alice.patch({ resource: 'application', id: fleet.id, body: { should_be_running__release: release.id } });

    const [app] = (await alice.get({
      resource: 'application',
      options: {
        $select: ['app_name', 'should_be_running__release'],
        $filter: { slug: 'alice/compat' },
        $expand: {
          should_be_running__release: {
            $select: ['commit', 'semver'],
            $expand: { contains__image: { $select: 'id', $expand: { image: { $select: 'is_stored_at__image_location' } } } },
          },
          service: { $select: 'service_name', $orderby: { service_name: 'asc' }, $top: 2 },
          organization: { $select: 'handle' },
        },
      },
    })) as Row[];
    expect(app).toMatchObject({
      app_name: 'compat',
      service: [{ service_name: 'cache' }, { service_name: 'web' }],
      organization: [{ handle: 'alice' }],
    });
    const target = (app!.should_be_running__release as Rec[])[0]!;
    expect(target).toMatchObject({ commit: 'c0ffee', semver: '1.2.3' });
    const locations = (target.contains__image as Array<{ image: Rec[] }>).map((ri) => ri.image[0]!.is_stored_at__image_location).sort();
    expect(locations).toEqual(['registry.local/cache:1', 'registry.local/web:1', 'registry.local/worker:1']);

    // the service of one image, walked through to-one links in a $filter
    const webImages = (await alice.get({
      resource: 'image',
      options: { $select: 'is_stored_at__image_location', $filter: { $eq: [{ $: ['is_a_build_of__service', 'service_name'] }, 'web'] } },
    })) as Rec[];
    expect(webImages).toEqual([{ is_stored_at__image_location: 'registry.local/web:1' }]);
  });

  it('registers devices through /device/register with a provisioning key, and creates one with post', async () => {
    const provisioning = (await alice.call('POST', `api-key/application/${fleet.id}/provisioning`, { name: 'compat' })) as string;
    expect(typeof provisioning).toBe('string');
    const prov = new FetchPine(base, provisioning);
    for (let i = 1; i <= 4; i++) {
      const uuid = uuidOf(i);
      const reg = (await prov.call('POST', 'device/register', {
        uuid,
        api_key: `device-key-${uuid}`,
        device_type: 'raspberrypi4-64',
        device_name: i % 2 ? `odd-${i}` : `even-${i}`,
        supervisor_version: '17.0.0',
      })) as Rec;
      expect(reg).toEqual({ id: expect.any(Number), uuid, device_name: i % 2 ? `odd-${i}` : `even-${i}`, belongs_to__application: fleet.id });
      devices.set(uuid, reg.id);
    }
    // the same uuid again: the register endpoint's 409 names the field
    const again = await rejection(prov.call('POST', 'device/register', { uuid: uuidOf(1), api_key: 'another-device-key-1', device_type: 'raspberrypi4-64' }));
    expect(again.statusCode).toBe(409);
    expect(String(again.body)).toMatch(/must be unique/);

    // a user creating a device directly, as the model allows
    const made = (await alice.post({ resource: 'device', body: { belongs_to__application: other.id, uuid: uuidOf(99), device_name: 'elsewhere' } })) as Rec;
    expect(made).toMatchObject({ uuid: uuidOf(99), device_name: 'elsewhere', belongs_to__application: { __id: other.id }, is_of__device_type: { __id: expect.any(Number) } });

    // the device's own key reads itself through the same client
    const dev = new FetchPine(base, `device-key-${uuidOf(2)}`);
    expect(await dev.get({ resource: 'device', options: { $select: ['uuid', 'device_name'] } })).toEqual([{ uuid: uuidOf(2), device_name: 'even-2' }]);
    await dev.patch({ resource: 'device', id: { uuid: uuidOf(2) }, body: { is_online: true, os_version: 'balenaOS 6.1.0' } });
    expect(await alice.get({ resource: 'device', id: { uuid: uuidOf(2) }, options: { $select: ['is_online', 'os_version'] } })).toEqual({ is_online: true, os_version: 'balenaOS 6.1.0' });

    // tags and variables for the filters below
    for (const [uuid, id] of devices) {
      const n = Number.parseInt(uuid.slice(-1), 16);
      await alice.post({ resource: 'device_tag', body: { device: id, tag_key: 'rack', value: `r${n % 2}` } });
      if (n <= 2) await alice.post({ resource: 'device_environment_variable', body: { device: id, name: 'MODE', value: n === 1 ? 'a' : 'b' } });
    }
    await alice.post({ resource: 'device_tag', body: { device: devices.get(uuidOf(3))!, tag_key: 'location', value: 'lab-west' } });
  });

  it('filters the way balena-sdk does: $any lambdas, $in, $contains, $startswith, link paths, $not, $or, dates, null', async () => {
    const names = async (filter: AnyObject, extra: AnyObject = {}) =>
      ((await alice.get({ resource: 'device', options: { $select: 'device_name', $filter: filter, $orderby: { device_name: 'asc' }, ...extra } })) as Rec[]).map((d) => d.device_name);

    // to-many: device_tag/any(...)
    expect(await names({ device_tag: { $any: { $alias: 'dt', $expr: { dt: { tag_key: 'rack', value: 'r1' } } } } })).toEqual(['odd-1', 'odd-3']);
    expect(await names({ device_tag: { $any: { $alias: 'dt', $expr: { dt: { tag_key: 'location', value: { $startswith: 'lab-' } } } } } })).toEqual(['odd-3']);
    expect(await names({ device_tag: { $all: { $alias: 'dt', $expr: { dt: { tag_key: 'rack' } } } }, belongs_to__application: fleet.id })).toEqual(['even-2', 'even-4', 'odd-1']);
    // to-one: the SDK's usual `belongs_to__application/any(a: a/slug eq ...)`
    expect(await names({ belongs_to__application: { $any: { $alias: 'bta', $expr: { bta: { slug: 'alice/compat' } } } } })).toEqual(['even-2', 'even-4', 'odd-1', 'odd-3']);
    expect(await names({ belongs_to__application: { $any: { $alias: 'bta', $expr: { bta: { app_name: 'other' } } } } })).toEqual(['elsewhere']);
    expect(
      await names({
        is_of__device_type: { $any: { $alias: 'dt', $expr: { dt: { slug: 'raspberrypi4-64' } } } },
        belongs_to__application: { $any: { $alias: 'bta', $expr: { bta: { owns__device: { $any: { $alias: 'd', $expr: { d: { device_name: 'odd-3' } } } } } } } },
        device_environment_variable: { $any: { $alias: 'v', $expr: { v: { name: 'MODE' } } } },
      }),
    ).toEqual(['even-2', 'odd-1']);
    // is_running__release is unset: no device has one; an unset link is never `any`
    expect(await names({ is_running__release: { $any: { $alias: 'r', $expr: { r: { commit: 'c0ffee' } } } } })).toEqual([]);
    expect(await names({ is_running__release: null, belongs_to__application: other.id })).toEqual(['elsewhere']);
    expect(await names({ is_running__release: { $all: { $alias: 'r', $expr: { r: { commit: 'nope' } } } }, belongs_to__application: other.id })).toEqual(['elsewhere']);
    expect(await names({ belongs_to__application: { $all: { $alias: 'a', $expr: { a: { app_name: 'other' } } } } })).toEqual(['elsewhere']);
    // a to-one lambda inside a to-many one, and the other way round
    const fleetsWith = async (filter: AnyObject) =>
      ((await alice.get({ resource: 'application', options: { $select: 'app_name', $filter: filter, $orderby: 'app_name' } })) as Row[]).map((a) => a.app_name);
    expect(await fleetsWith({ owns__device: { $any: { $alias: 'd', $expr: { d: { is_of__device_type: { $any: { $alias: 't', $expr: { t: { slug: 'raspberrypi3' } } } } } } } } })).toEqual(['other']);
    expect(await fleetsWith({ owns__device: { $any: { $alias: 'd', $expr: { d: { belongs_to__application: { $any: { $alias: 'a', $expr: { a: { app_name: 'compat' } } } } } } } } })).toEqual(['compat']);
    // walking a to-one link the caller may not read finds nothing (a device key and its fleet's organization)
    const dev = new FetchPine(base, `device-key-${uuidOf(1)}`);
    const orgHandle = { organization: { $any: { $alias: 'o', $expr: { o: { handle: 'alice' } } } } };
    expect(await fleetsWith(orgHandle)).toEqual(['compat', 'other']);
    expect(await dev.get({ resource: 'application', options: { $select: 'app_name', $filter: orgHandle } })).toEqual([]);
    expect(await dev.get({ resource: 'application', options: { $select: 'app_name', $filter: { is_for__device_type: { $any: { $alias: 't', $expr: { t: { slug: 'raspberrypi4-64' } } } } } } })).toEqual([{ app_name: 'compat' }]);

    expect(await names({ device_name: { $in: ['odd-1', 'even-4', 'nope'] } })).toEqual(['even-4', 'odd-1']);
    expect(await names({ device_name: { $contains: 'dd' } })).toEqual(['odd-1', 'odd-3']);
    expect(await names({ device_name: { $startswith: 'even' } })).toEqual(['even-2', 'even-4']);
    expect(await names({ device_name: { $endswith: '-4' } })).toEqual(['even-4']);
    expect(await names({ $not: { device_name: { $startswith: 'even' } } })).toEqual(['elsewhere', 'odd-1', 'odd-3']);
    expect(await names({ $or: [{ device_name: 'odd-1' }, { is_online: true }] })).toEqual(['even-2', 'odd-1']);
    expect(await names({ $or: { device_name: 'odd-3', uuid: uuidOf(4) } })).toEqual(['even-4', 'odd-3']);
    expect(await names({ os_version: { $ne: null } })).toEqual(['even-2']);
    expect(await names({ created_at: { $gt: new Date('2000-01-01T00:00:00Z') }, id: { $le: devices.get(uuidOf(2))! } })).toEqual(['even-2', 'odd-1']);
    expect(await names({ created_at: { $lt: new Date('2000-01-01T00:00:00Z') } })).toEqual([]);
    // a path through a link with the `$` operator, and a value with a quote in it
    expect(await names({ $eq: [{ $: 'belongs_to__application/app_name' }, 'other'] })).toEqual(['elsewhere']);
    expect(await names({ device_name: "o'brien" })).toEqual([]);
    // a count of a to-many link inside a filter: with and without its own $filter
    expect(await names({ $eq: [{ device_tag: { $count: {} } }, 2] })).toEqual(['odd-3']);
    expect(await names({ $ge: [{ device_tag: { $count: { $filter: { tag_key: 'rack' } } } }, 1] })).toEqual(['even-2', 'even-4', 'odd-1', 'odd-3']);
    // $top/$skip over an ordered, filtered list
    expect(await names({ belongs_to__application: fleet.id }, { $top: 2, $skip: 1 })).toEqual(['even-4', 'odd-1']);

    expect(alice.sent).toContain(
      "GET /v6/device?$select=device_name&$filter=belongs_to__application/any(bta:bta/slug eq 'alice%2Fcompat')&$orderby=device_name asc",
    );
  });

  it('counts: top-level $count with a $filter, link counts in $expand, and $orderby by a count', async () => {
    expect(await alice.get({ resource: 'device', options: { $count: { $filter: { belongs_to__application: fleet.id } } } })).toBe(4);
    expect(
      await alice.get({
        resource: 'device',
        options: { $count: { $filter: { belongs_to__application: { $any: { $alias: 'a', $expr: { a: { app_name: 'compat' } } } }, device_tag: { $any: { $alias: 't', $expr: { t: { value: 'r0' } } } } } } },
      }),
    ).toBe(2);
    const fleets = (await alice.get({
      resource: 'application',
      options: {
        $select: 'app_name',
        $filter: { organization: org },
        $expand: { owns__device: { $count: {} }, owns__release: { $count: { $filter: { status: 'success' } } } },
        $orderby: { app_name: 'asc' },
      },
    })) as Row[];
    expect(fleets).toEqual([
      { app_name: 'compat', owns__device: 4, owns__release: 1 },
      { app_name: 'other', owns__device: 1, owns__release: 0 },
    ]);
    const byCount = (await alice.get({
      resource: 'application',
      options: { $select: 'app_name', $filter: { organization: org }, $orderby: { owns__device: { $count: {} }, $dir: 'desc' } },
    })) as Rec[];
    expect(byCount.map((a) => a.app_name)).toEqual(['compat', 'other']);
    const byFewest = (await alice.get({
      resource: 'application',
      options: { $select: 'app_name', $filter: { organization: org }, $orderby: [{ owns__device: { $count: {} }, $dir: 'asc' }, { app_name: 'desc' }] },
    })) as Row[];
    expect(byFewest.map((a) => a.app_name)).toEqual(['other', 'compat']);
    const byReleases = (await alice.get({
      resource: 'application',
      options: { $select: 'app_name', $filter: { organization: org }, $orderby: { owns__release: { $count: { $filter: { status: 'success' } } }, $dir: 'asc' } },
    })) as Row[];
    expect(byReleases.map((a) => a.app_name)).toEqual(['other', 'compat']);
    expect(alice.sent).toContain(`GET /v6/application?$select=app_name&$filter=organization eq ${org}&$orderby=owns__release/$count($filter=status eq 'success') asc`);
  });

  it('addresses by id, by uuid and by a composite key; patches by id and by filter', async () => {
    const id2 = devices.get(uuidOf(2))!;
    const byUuid = (await alice.get({
      resource: 'device',
      id: { uuid: uuidOf(2) },
      options: {
        $select: ['id', 'device_name', 'belongs_to__application'],
        $expand: { device_tag: { $select: ['tag_key', 'value'], $filter: { tag_key: { $ne: 'nope' } }, $orderby: { tag_key: 'asc' } }, belongs_to__application: { $select: 'slug' } },
      },
    })) as Row | undefined;
    expect(byUuid).toEqual({ id: id2, device_name: 'even-2', belongs_to__application: [{ slug: 'alice/compat' }], device_tag: [{ tag_key: 'rack', value: 'r0' }] });
    expect(await alice.get({ resource: 'device', id: id2, options: { $select: 'uuid' } })).toEqual({ uuid: uuidOf(2) });
    expect(await alice.get({ resource: 'device_tag', id: { device: id2, tag_key: 'rack' }, options: { $select: ['value', 'device'] } })).toEqual({ value: 'r0', device: { __id: id2 } });
    expect(await alice.get({ resource: 'device_tag', id: { device: id2, tag_key: 'nope' } })).toBeUndefined();

    await alice.patch({ resource: 'device', id: id2, body: { note: 'by id' } });
    await alice.patch({ resource: 'device', id: { uuid: uuidOf(4) }, body: { note: 'by uuid' } });
    await alice.patch({ resource: 'device', options: { $filter: { device_name: { $startswith: 'odd' }, belongs_to__application: fleet.id } }, body: { note: 'by filter' } });
    await alice.patch({ resource: 'device_tag', id: { device: id2, tag_key: 'rack' }, body: { value: 'r9' } });
    const notes = (await alice.get({ resource: 'device', options: { $select: ['device_name', 'note'], $filter: { belongs_to__application: fleet.id }, $orderby: 'device_name' } })) as Rec[];
    expect(notes).toEqual([
      { device_name: 'even-2', note: 'by id' },
      { device_name: 'even-4', note: 'by uuid' },
      { device_name: 'odd-1', note: 'by filter' },
      { device_name: 'odd-3', note: 'by filter' },
    ]);
    expect(await alice.get({ resource: 'device_tag', id: { device: id2, tag_key: 'rack' }, options: { $select: 'value' } })).toEqual({ value: 'r9' });

    // bob's client sees none of it and changes nothing
    expect(await bob.get({ resource: 'device', id: { uuid: uuidOf(2) } })).toBeUndefined();
    expect(await bob.get({ resource: 'device', options: { $count: {} } })).toBe(0);
    await bob.patch({ resource: 'device', id: id2, body: { note: 'bob was here' } });
    expect(await alice.get({ resource: 'device', id: id2, options: { $select: 'note' } })).toEqual({ note: 'by id' });
  });

  it('upsert: POST, then on a 409 "must be unique" PATCH by the natural key (docs/decisions.md item 17)', async () => {
    const id1 = devices.get(uuidOf(1))!;
    const before = alice.sent.length;
    const created = (await alice.upsert({ resource: 'device_tag', id: { device: id1, tag_key: 'owner' }, body: { value: 'ops' } })) as Rec;
    expect(created).toMatchObject({ tag_key: 'owner', value: 'ops', device: { __id: id1 } });
    const updated = await alice.upsert({ resource: 'device_tag', id: { device: id1, tag_key: 'owner' }, body: { value: 'dev' } });
    expect(updated).toBeUndefined();
    expect(alice.sent.slice(before)).toEqual([
      'POST /v6/device_tag',
      'POST /v6/device_tag',
      "PATCH /v6/device_tag?$filter=device eq " + id1 + " and tag_key eq 'owner'",
    ]);
    expect((await alice.get({ resource: 'device_tag', options: { $select: ['tag_key', 'value'], $filter: { device: id1, tag_key: 'owner' } } })) as Rec[]).toEqual([{ tag_key: 'owner', value: 'dev' }]);

    // fleet variables by (application, name); a device by its uuid
    await alice.upsert({ resource: 'application_environment_variable', id: { application: fleet.id, name: 'LOG' }, body: { value: 'info' } });
    await alice.upsert({ resource: 'application_environment_variable', id: { application: fleet.id, name: 'LOG' }, body: { value: 'debug' } });
    expect(await alice.get({ resource: 'application_environment_variable', options: { $select: ['name', 'value'], $filter: { application: fleet.id } } })).toEqual([{ name: 'LOG', value: 'debug' }]);
    await alice.upsert({ resource: 'device', id: { uuid: uuidOf(3) }, body: { belongs_to__application: fleet.id, device_name: 'renamed-3' } });
    expect(await alice.get({ resource: 'device', id: { uuid: uuidOf(3) }, options: { $select: 'device_name' } })).toEqual({ device_name: 'renamed-3' });
    expect(await alice.get({ resource: 'device', options: { $count: { $filter: { uuid: uuidOf(3) } } } })).toBe(1);

    // getOrCreate: a GET by the composite key, then a POST only when it found nothing
    const got = (await alice.getOrCreate({ resource: 'device_tag', id: { device: id1, tag_key: 'owner' }, body: { value: 'ignored' } })) as Rec;
    expect(got).toMatchObject({ tag_key: 'owner', value: 'dev' });
    const made = (await alice.getOrCreate({ resource: 'device_tag', id: { device: id1, tag_key: 'shelf' }, body: { value: '3' } })) as Rec;
    expect(made).toMatchObject({ tag_key: 'shelf', value: '3', device: { __id: id1 } });

    // a conflict that is not a unique violation is not swallowed
    const stray = await rejection(alice.upsert({ resource: 'device_tag', id: { device: 987654321, tag_key: 'x' }, body: { value: 'y' } }));
    expect(stray.statusCode).toBe(400);
  });

  it('delete by id and by filter; a referenced fleet is a 409; errors reach the client with their status', async () => {
    const id4 = devices.get(uuidOf(4))!;
    await alice.delete({ resource: 'device_tag', options: { $filter: { device: id4 } } });
    expect(await alice.get({ resource: 'device_tag', options: { $count: { $filter: { device: id4 } } } })).toBe(0);

    const inUse = await rejection(alice.delete({ resource: 'application', id: fleet.id }));
    expect(inUse.statusCode).toBe(409);
    expect(inUse).toBeInstanceOf(StatusError);

    await alice.delete({ resource: 'device', id: { uuid: uuidOf(4) } });
    expect(await alice.get({ resource: 'device', id: id4 })).toBeUndefined();
    const otherDevice = (await alice.get({ resource: 'device', options: { $select: 'id', $filter: { belongs_to__application: other.id } } })) as Rec[];
    await alice.delete({ resource: 'device', id: otherDevice[0]!.id });
    await alice.delete({ resource: 'application', id: other.id });
    expect(await alice.get({ resource: 'application', id: other.id })).toBeUndefined();
    expect(await alice.get({ resource: 'application', options: { $count: { $filter: { organization: org } } } })).toBe(1);

    expect((await rejection(alice.get({ resource: 'device', options: { $select: 'no_such_field' } }))).statusCode).toBe(400);
    expect((await rejection(alice.get({ resource: 'no_such_resource' }))).statusCode).toBe(400);
    expect((await rejection(new FetchPine(base, 'not-a-key').get({ resource: 'device' }))).statusCode).toBe(401);
  });
});
