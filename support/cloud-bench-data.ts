/**
 * The cloud's benchmark data and query mix, shared by bench/cloud.bench.ts (speed) and
 * test/cloud-query-plans.test.ts (which indexes each query's SQL uses). Seeded straight
 * into the database: 100 fleets, 10,000 devices with 2 tags and 2 environment variables
 * each; then targets for the device state endpoint. Or the fleets, devices and tags through
 * an API (seedThroughApi), which is also how the pinejs peer is seeded.
 */
import type { Db, SqlValue } from '../src/cloud/db/port.js';
import { createUser } from '../src/cloud/api/key-routes.js';
import { storeApiKey } from '../src/cloud/auth/keys.js';
import { prepareDatabase } from '../src/cloud/bootstrap.js';

export const FLEETS = 100;
const DEVICES_PER_FLEET = 100;

/** Device i's last contact: a minute after device i - 1's, from this instant. */
const CONTACT_BASE = Date.parse('2026-01-01T00:00:00.000Z');
const contactOf = (i: number) => new Date(CONTACT_BASE + i * 60_000).toISOString();

/**
 * The fields of device i that both seeds write (straight into the database, or POSTed
 * through an API), as a balena-sdk client reads them: what the wider shapes of the mix
 * filter on (is_online, status, last_connectivity_event), order by and select.
 */
const DEVICE_FIELDS = ['device_name', 'is_online', 'status', 'os_version', 'os_variant', 'supervisor_version', 'ip_address', 'mac_address', 'last_connectivity_event', 'memory_usage', 'memory_total', 'cpu_temp'] as const;

function deviceFields(i: number): Record<(typeof DEVICE_FIELDS)[number], SqlValue> {
  return {
    device_name: `device-${i}`,
    is_online: i % 3 !== 0,
    status: i % 5 ? 'Idle' : 'Updating',
    os_version: i % 2 ? 'balenaOS 6.0.0' : 'balenaOS 5.1.0',
    os_variant: i % 7 ? 'prod' : 'dev',
    supervisor_version: `17.${i % 4}.0`,
    ip_address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    mac_address: `02:00:00:${[(i >> 16) & 255, (i >> 8) & 255, i & 255].map((b) => b.toString(16).padStart(2, '0')).join(':')}`,
    last_connectivity_event: contactOf(i),
    memory_usage: 200 + (i % 300),
    memory_total: 4096,
    cpu_temp: 40 + (i % 30),
  };
}

/** The many fields a device list of balena-sdk selects (of those both seeds write). */
const DEVICE_LIST_FIELDS = DEVICE_FIELDS.join(',');

async function insertMany(db: Db, table: string, cols: string[], rows: SqlValue[][]): Promise<number[]> {
  const ids: number[] = [];
  const per = Math.max(1, Math.floor(900 / cols.length));
  for (let i = 0; i < rows.length; i += per) {
    const chunk = rows.slice(i, i + per);
    const values = chunk.map(() => `(${cols.map(() => '?').join(', ')})`).join(', ');
    const res = await db.query<{ id: number }>(`INSERT INTO "${table}" (${cols.map((c) => `"${c}"`).join(', ')}) VALUES ${values} RETURNING id`, chunk.flat());
    ids.push(...res.map((r) => Number(r.id)).sort((a, b) => a - b));
  }
  return ids;
}

/**
 * A table as a database in use has it: PostgreSQL's autovacuum analyses a table once enough
 * rows change, and vacuums it after enough inserts (which marks its pages all-visible, so
 * an index can answer alone), so a bulk load measured before that measures the planner's
 * guesses. SQLite gathers no statistics unless asked, and the cloud does not ask.
 */
const analyzed = async (db: Db) => {
  if (db.dialect.name === 'postgres') await db.exec('VACUUM ANALYZE');
};

export async function seed(db: Db): Promise<{ key: string; uuids: string[] }> {
  await prepareDatabase(db);
  const now = new Date().toISOString();
  const user = await createUser(db, { username: 'bench', email: null, isAdmin: false, now: new Date() });
  const uuids: string[] = [];
  await db.transaction(async (tx) => {
    const type = Number((await tx.query<{ id: number }>('SELECT id FROM "device_type" WHERE slug = ?', ['raspberrypi4-64']))[0]!.id);
    const appActors = await insertMany(tx, 'actor', ['created_at'], Array.from({ length: FLEETS }, () => [now]));
    const apps = await insertMany(
      tx,
      'application',
      ['created_at', 'app_name', 'slug', 'uuid', 'actor', 'organization', 'is_for__device_type'],
      appActors.map((actor, i) => [now, `fleet-${i}`, `bench/fleet-${i}`, `app${i.toString(16).padStart(30, '0')}`, actor, user.organization, type]),
    );
    const devActors = await insertMany(tx, 'actor', ['created_at'], Array.from({ length: FLEETS * DEVICES_PER_FLEET }, () => [now]));
    const devRows: SqlValue[][] = devActors.map((actor, i) => {
      const uuid = `dev${i.toString(16).padStart(29, '0')}`;
      uuids.push(uuid);
      const fields = deviceFields(i);
      return [now, now, uuid, actor, apps[Math.floor(i / DEVICES_PER_FLEET)]!, type, ...DEVICE_FIELDS.map((f) => fields[f])];
    });
    const devices = await insertMany(tx, 'device', ['created_at', 'modified_at', 'uuid', 'actor', 'belongs_to__application', 'is_of__device_type', ...DEVICE_FIELDS], devRows);
    await insertMany(tx, 'device_tag', ['created_at', 'device', 'tag_key', 'value'], devices.flatMap((d, i) => [[now, d, 'env', i % 4 ? 'prod' : 'dev'], [now, d, 'rack', String(i % 20)]]));
    await insertMany(tx, 'device_environment_variable', ['created_at', 'device', 'name', 'value'], devices.flatMap((d, i) => [[now, d, 'MODE', i % 2 ? 'a' : 'b'], [now, d, 'LEVEL', String(i % 10)]]));
  });
  await analyzed(db);
  return { key: user.apiKey, uuids };
}

export const TARGET_SERVICES = ['web', 'worker', 'cache'];
const KEYED_DEVICES = 500;

/**
 * Gives every fleet a 3-service release as its target, with fleet environment and config
 * variables, and every 20th device (500) a device key and a config variable of its own.
 */
export async function seedTargets(db: Db): Promise<Array<{ uuid: string; key: string }>> {
  const now = new Date().toISOString();
  const composition = JSON.stringify({
    services: Object.fromEntries(
      TARGET_SERVICES.map((name) => [name, { labels: { 'io.balena.features.supervisor-api': '1' }, environment: { SERVICE: name }, volumes: [`${name}-data:/data`], restart: 'always' }]),
    ),
    volumes: Object.fromEntries(TARGET_SERVICES.map((name) => [`${name}-data`, {}])),
  });
  const keyed: Array<{ uuid: string; key: string }> = [];
  await db.transaction(async (tx) => {
    const apps = (await tx.query<{ id: number }>('SELECT id FROM "application" ORDER BY id', [])).map((a) => Number(a.id));
    const releases = await insertMany(tx, 'release', ['created_at', 'belongs_to__application', 'commit', 'status', 'composition', 'semver'], apps.map((a) => [now, a, `commit${a}`, 'success', composition, '1.0.0']));
    const services = await insertMany(tx, 'service', ['created_at', 'application', 'service_name'], apps.flatMap((a) => TARGET_SERVICES.map((name) => [now, a, name])));
    const images = await insertMany(tx, 'image', ['created_at', 'is_a_build_of__service', 'is_stored_at__image_location', 'status', 'image_size'], services.map((svc, i) => [now, svc, `registry.local/v2/${i}@sha256:${'0'.repeat(64)}`, 'success', 50_000_000]));
    await insertMany(tx, 'image__is_part_of__release', ['created_at', 'image', 'is_part_of__release'], images.map((img, i) => [now, img, releases[Math.floor(i / TARGET_SERVICES.length)]!]));
    for (let i = 0; i < apps.length; i++) await tx.query('UPDATE "application" SET should_be_running__release = ? WHERE id = ?', [releases[i]!, apps[i]!]);
    await insertMany(tx, 'application_environment_variable', ['created_at', 'application', 'name', 'value'], apps.flatMap((a) => [[now, a, 'MODE', 'fleet'], [now, a, 'REGION', 'eu']]));
    await insertMany(tx, 'application_config_variable', ['created_at', 'application', 'name', 'value'], apps.flatMap((a) => [[now, a, 'HOST_CONFIG_gpu_mem', '64'], [now, a, 'SUPERVISOR_POLL_INTERVAL', '900000']]));
    const devices = await tx.query<{ id: number; uuid: string; actor: number }>('SELECT id, uuid, actor FROM "device" WHERE id % 20 = 0 ORDER BY id', []);
    for (const d of devices.slice(0, KEYED_DEVICES)) {
      const key = `bench-device-key-${d.uuid}`;
      await storeApiKey(tx, Number(d.actor), key, { name: 'device key' });
      keyed.push({ uuid: d.uuid, key });
    }
    await insertMany(tx, 'device_config_variable', ['created_at', 'device', 'name', 'value'], devices.slice(0, KEYED_DEVICES).map((d) => [now, Number(d.id), 'HOST_CONFIG_gpu_mem', '128']));
  });
  await analyzed(db);
  return keyed;
}

/** One query of the mix: `url(n)` is its n-th request. */
export interface MixQuery {
  id: string;
  label: string;
  url: (n: number) => string;
  /**
   * Expanded collections whose records a `$top` without `$orderby` picks (which ones is
   * unspecified): two servers agree on their number and fields, not on the records.
   */
  unordered?: string[];
}

/**
 * The query mix, as an ordinary (non-admin) user asks it, so each carries the permission
 * filter: (a) a fleet's devices through a link filter, (b) a device by uuid, (c) a
 * two-level $expand, (d) $count with any(), (e) a composite-key lookup, (f) $orderby +
 * $top + $skip paging; then the shapes a balena-sdk client sends besides: (g) $count with
 * a filter, (h) a filter on a boolean and a text field, (i) a filter on a date, (j)
 * $orderby on a column no index orders, (k) $expand with its own $filter and $orderby,
 * (l) a device by uuid with many fields and its fleet and type expanded (device.get),
 * (m) a fleet's online devices with many fields and their fleet expanded
 * (device.getAllByApplication). `url(n)` varies the values with the request number.
 * Device i of the seed has `uuids[i]` and `deviceIds[i]`, fleet f `fleetIds[f]` (seeded
 * straight: ids from 1).
 */
export function queryMix(
  uuids: readonly string[],
  deviceIds: readonly number[] = uuids.map((_, i) => i + 1),
  fleetIds: readonly number[] = Array.from({ length: FLEETS }, (_, i) => i + 1),
): MixQuery[] {
  const devicePick = (n: number) => (n * 7919) % uuids.length;
  const fleetPick = (n: number) => (n * 31) % FLEETS;
  const inFleet = (n: number) => `belongs_to__application eq ${fleetIds[fleetPick(n)]}`;
  // Half of fleet f's devices were last seen before this instant.
  const halfWay = (n: number) => contactOf(fleetPick(n) * DEVICES_PER_FLEET + DEVICES_PER_FLEET / 2);
  return [
    { id: 'a', label: 'filter through a link', url: (n) => `/v6/device?$select=id,device_name&$filter=belongs_to__application/app_name eq 'fleet-${n % FLEETS}' and is_online eq true` },
    { id: 'b', label: 'key lookup by uuid', url: (n) => `/v6/device(uuid='${uuids[devicePick(n)]}')?$select=id,device_name,is_online` },
    {
      id: 'c',
      label: '$expand two levels',
      url: (n) => `/v6/application?$select=app_name&$filter=app_name eq 'fleet-${n % FLEETS}'&$expand=owns__device($select=device_name;$top=20;$expand=device_tag($select=tag_key,value))`,
      unordered: ['owns__device'],
    },
    { id: 'd', label: '$count with any()', url: (n) => `/v6/device/$count?$filter=device_tag/any(t:t/tag_key eq 'rack' and t/value eq '${n % 20}')` },
    { id: 'e', label: 'composite key lookup', url: (n) => `/v6/device_tag(device=${deviceIds[devicePick(n)]},tag_key='rack')?$select=value` },
    { id: 'f', label: '$orderby $top $skip', url: (n) => `/v6/device?$select=id,device_name&$orderby=device_name asc&$top=50&$skip=${(n % 20) * 50}` },
    { id: 'g', label: '$count with a filter', url: (n) => `/v6/device/$count?$filter=${inFleet(n)} and is_online eq false` },
    { id: 'h', label: 'filter on a boolean', url: (n) => `/v6/device?$select=id,device_name,status&$filter=${inFleet(n)} and is_online eq true and status eq 'Idle'` },
    { id: 'i', label: 'filter on a date', url: (n) => `/v6/device?$select=id,device_name,last_connectivity_event&$filter=${inFleet(n)} and last_connectivity_event lt datetime'${halfWay(n)}'` },
    { id: 'j', label: '$orderby a plain column', url: (n) => `/v6/device?$select=id,device_name,os_version&$filter=${inFleet(n)}&$orderby=last_connectivity_event desc&$top=20` },
    {
      id: 'k',
      label: '$expand $filter $orderby',
      url: (n) => `/v6/application?$select=app_name&$filter=app_name eq 'fleet-${fleetPick(n)}'&$expand=owns__device($select=device_name,status;$filter=is_online eq true;$orderby=device_name desc;$top=10)`,
    },
    {
      id: 'l',
      label: 'device.get, many fields',
      url: (n) => `/v6/device(uuid='${uuids[devicePick(n)]}')?$select=${DEVICE_LIST_FIELDS},belongs_to__application&$expand=belongs_to__application($select=id,app_name),is_of__device_type($select=slug)`,
    },
    {
      id: 'm',
      label: 'device list, many fields',
      url: (n) => `/v6/device?$select=${DEVICE_LIST_FIELDS}&$filter=${inFleet(n)} and is_online eq true&$expand=belongs_to__application($select=id,app_name)&$orderby=device_name asc`,
    },
  ];
}

export const API_SEED_CLIENTS = 16;

export interface ApiSeed {
  /** Device i's uuid and id, and fleet f's id, as queryMix takes them. */
  uuids: string[];
  deviceIds: number[];
  fleetIds: number[];
  rows: number;
  seconds: number;
}

/**
 * The mix's fleets, devices and tags (not the environment variables), POSTed through an API
 * with API_SEED_CLIENTS requests in flight: 100 fleets, then 10,000 devices, then 2 tags
 * each; each level waits for the one it links to. `post` answers the created record.
 */
export async function seedThroughApi(
  post: (path: string, payload: object) => Promise<{ id: number; uuid?: string }>,
  owner: { organization: number; deviceType: number },
): Promise<ApiSeed> {
  const inFlight = async <T>(count: number, one: (i: number) => Promise<T>): Promise<T[]> => {
    const out: T[] = new Array(count);
    let next = 0;
    await Promise.all(
      Array.from({ length: API_SEED_CLIENTS }, async () => {
        while (next < count) {
          const i = next++;
          out[i] = await one(i);
        }
      }),
    );
    return out;
  };
  const t0 = performance.now();
  const fleets = await inFlight(FLEETS, (i) => post('/v6/application', { app_name: `fleet-${i}`, organization: owner.organization, is_for__device_type: owner.deviceType }));
  const devices = await inFlight(FLEETS * DEVICES_PER_FLEET, (i) =>
    post('/v6/device', { ...deviceFields(i), belongs_to__application: fleets[Math.floor(i / DEVICES_PER_FLEET)]!.id, is_of__device_type: owner.deviceType }),
  );
  await inFlight(devices.length * 2, (i) => post('/v6/device_tag', { device: devices[i >> 1]!.id, tag_key: i % 2 ? 'rack' : 'env', value: String(i % 20) }));
  const seconds = (performance.now() - t0) / 1000;
  return { uuids: devices.map((d) => d.uuid!), deviceIds: devices.map((d) => d.id), fleetIds: fleets.map((f) => f.id), rows: FLEETS + devices.length * 3, seconds };
}
