/**
 * A local cloud for a replayed device (`fleetlab replay --cloud`): a fresh fleetlab cloud on
 * SQLite, seeded from a bundle so that it serves the replayed supervisor the target it last
 * had from the real one, and holds the device's rows as the real one did (its name, tags,
 * variables, its fleet's variables, its pin). The replayed supervisor then polls it and
 * reports to it as it did to the real cloud.
 *
 * The target's ids are the device's view of its app (app, release, service and image ids are in
 * its containers' labels and its store), so the fleet, services, images and release are created
 * with the captured ids: SQLite's AUTOINCREMENT counter is set just below each before its row
 * is created through the API. The device row is made by registering the captured uuid with a
 * new key, as a board registers; what the bundle redacted is seeded as the redaction marker.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomicSync } from '../../src/atomic-file.js';
import { FleetlabError } from '../../src/errors.js';
import { CloudClient } from '../../src/supervisor/adapters/cloud/cloud-client.js';
import { toWireState, type TargetApp, type TargetState } from '../../src/protocol/target-state.js';
import type { DeviceRecord } from '../../src/supervisor/state/store.js';
import { adminOrganization, startLocalCloud, type LocalCloud } from '../../sim/stack.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import type { Bundle } from './bundle.js';
import type { InspectedContainer } from './replay-plan.js';
import type { CloudRows } from './cloud-access.js';
import { REDACTED } from './redact.js';

export interface ReplayCloud {
  readonly url: string;
  readonly adminKey: string;
  readonly provisioningKey: string;
  /** What the replayed device authenticates to this cloud with (its store's `cloudKey`). */
  readonly deviceKey: string;
  readonly fleet: { readonly id: number; readonly name: string };
  /** What the seeding could not make as it was; the command prints these. */
  readonly notes: readonly string[];
  close(): Promise<void>;
}

export interface ReplayCloudOptions {
  dataDir: string;
  port?: number;
  rows: CloudRows;
  store: DeviceRecord;
  /** The device's containers as captured: the releases they run are rows of the fleet too. */
  containers: readonly InspectedContainer[];
  deviceType: string;
  newKey: () => string;
}

const replayError = (message: string) => new FleetlabError('HIL_ERR_CAPTURE', message);

/** The device's cloud rows a capture with `--cloud` stored; a bundle without them says how to get them. */
export function capturedCloudRows(bundle: Bundle, path: string): CloudRows {
  if (!bundle.has('cloud/device.json')) {
    const why = bundle.manifest.steps.find((s) => s.name === 'cloud')?.error;
    throw replayError(`${path} has no cloud rows (cloud/device.json), which a replay with a local cloud is seeded from: ${why ? `the capture's "cloud" step failed: ${why}` : 'capture with --cloud URL --cloud-key KEY'}`);
  }
  const optional = <T>(file: string, absent: T): T => (bundle.has(file) ? bundle.json<T>(file) : absent);
  return {
    device: bundle.json<Record<string, unknown>>('cloud/device.json'),
    tags: optional('cloud/tags.json', []),
    deviceVariables: optional('cloud/device-variables.json', []),
    fleet: optional<Record<string, unknown> | undefined>('cloud/fleet.json', undefined),
    fleetVariables: optional('cloud/fleet-variables.json', []),
    release: optional<Record<string, unknown> | undefined>('cloud/release.json', undefined),
  };
}

/** The next row of `table` gets `id`: SQLite AUTOINCREMENT takes max(counter, max rowid) + 1. */
async function nextIdIs(cloud: LocalCloud, table: string, id: number): Promise<void> {
  const [max] = await cloud.db.query<{ m: number | null }>(`SELECT MAX(id) AS m FROM "${table}"`, []);
  if (max?.m !== null && max?.m !== undefined && Number(max.m) >= id) throw replayError(`seeding the local cloud: ${table} ${id} comes after ${table} ${max.m}; the captured ids are out of order`);
  await cloud.db.query('DELETE FROM sqlite_sequence WHERE name = ?', [table]);
  await cloud.db.query('INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)', [table, id - 1]);
}

async function create(cloud: LocalCloud, table: string, id: number, body: Record<string, unknown>): Promise<void> {
  await nextIdIs(cloud, table, id);
  const made = (await cloud.call('POST', `/v6/${table}`, body)) as { id: number };
  if (made.id !== id) throw replayError(`seeding the local cloud: ${table} came out as ${made.id}, not the captured ${id}`);
}

const linkId = (link: unknown): number | undefined => {
  if (typeof link === 'number') return link;
  const id = (link as { __id?: unknown } | null)?.__id;
  return typeof id === 'number' ? id : undefined;
};

const pairs = (rows: ReadonlyArray<Record<string, unknown>>) => rows.map((r) => ({ name: String(r.name), value: String(r.value) }));

/**
 * A release row's composition that gives back `app`'s services: what the captured release row
 * holds when it is the same release, else one made from the target (the variables, seeded
 * as rows, are taken out of each service's environment, as the cloud merges them back in).
 */
function compositionFor(app: TargetApp, rows: CloudRows, variables: ReadonlySet<string>): unknown {
  const captured = rows.release;
  // The data API gives a composition back as it was stored: JSON text, or an object.
  if (captured?.commit === app.commit && captured.composition) return typeof captured.composition === 'string' ? (JSON.parse(captured.composition) as unknown) : captured.composition;
  const wire = toWireState({ name: '', config: {}, apps: [app] }).apps[String(app.appId)]!;
  const services: Record<string, unknown> = {};
  for (const s of Object.values(wire.services)) {
    // Ids, the image and `running` are the release's rows and the device's, not the composition's.
    const { serviceName, serviceId: _id, imageId: _image, image: _ref, running: _running, environment, ...rest } = s;
    services[serviceName] = { ...rest, environment: Object.fromEntries(Object.entries(environment ?? {}).filter(([name]) => !variables.has(name))) };
  }
  return { services, volumes: wire.volumes ?? {}, networks: wire.networks ?? {} };
}

interface FleetRows {
  services: Map<number, string>;
  images: Map<number, { serviceId: number; ref: string }>;
  releases: Map<number, { commit: string; images: number[] }>;
}

/**
 * The fleet's services, images and releases the device knows of: the target's, and those its
 * containers run (by their labels), so its reports name only rows the cloud has. In id order.
 */
export function fleetRows(fleetId: number, app: TargetApp | undefined, containers: readonly InspectedContainer[]): FleetRows {
  const services = new Map<number, string>();
  const images = new Map<number, { serviceId: number; ref: string }>();
  const releases = new Map<number, { commit: string; images: Set<number> }>();
  const add = (s: { serviceId: number; serviceName: string; imageId: number; image: string }, releaseId: number, commit: string) => {
    services.set(s.serviceId, s.serviceName);
    images.set(s.imageId, { serviceId: s.serviceId, ref: s.image });
    const release = releases.get(releaseId) ?? { commit, images: new Set<number>() };
    release.images.add(s.imageId);
    releases.set(releaseId, release);
  };
  for (const s of app?.services ?? []) add(s, app!.releaseId, app!.commit);
  for (const c of containers) {
    const l = c.Config.Labels ?? {};
    const n = (key: string) => Number(l[key]);
    if (n(LABEL.appId) !== fleetId || !Number.isInteger(n(LABEL.releaseId)) || !Number.isInteger(n(LABEL.imageId)) || !Number.isInteger(n(LABEL.serviceId))) continue;
    add({ serviceId: n(LABEL.serviceId), serviceName: l[LABEL.serviceName] ?? `service${n(LABEL.serviceId)}`, imageId: n(LABEL.imageId), image: c.Config.Image }, n(LABEL.releaseId), l[LABEL.commit] ?? '');
  }
  const ordered = <V>(m: Map<number, V>) => new Map([...m].sort(([a], [b]) => a - b));
  return { services: ordered(services), images: ordered(images), releases: new Map([...ordered(releases)].map(([id, r]) => [id, { commit: r.commit, images: [...r.images].sort((a, b) => a - b) }])) };
}

/** What a resumed replay needs of its cloud: kept beside the cloud's database. */
const KEYS_FILE = 'replay-cloud.json';
type Kept = Pick<ReplayCloud, 'adminKey' | 'provisioningKey' | 'deviceKey' | 'fleet'>;

/**
 * The replay's cloud: seeded from the bundle in `dataDir` the first time; started again on what
 * it holds when a replay resumes (its device then keeps the key it has).
 */
export async function openReplayCloud(o: ReplayCloudOptions): Promise<ReplayCloud> {
  const kept = join(o.dataDir, KEYS_FILE);
  if (!existsSync(kept)) {
    const cloud = await seedReplayCloud(o);
    const keys: Kept = { adminKey: cloud.adminKey, provisioningKey: cloud.provisioningKey, deviceKey: cloud.deviceKey, fleet: cloud.fleet };
    writeFileAtomicSync(kept, JSON.stringify(keys, null, 2));
    return cloud;
  }
  const keys = JSON.parse(readFileSync(kept, 'utf8')) as Kept;
  const cloud = await startLocalCloud({ port: o.port ?? 0, dataDir: o.dataDir, adminKey: keys.adminKey });
  return { ...keys, url: cloud.url, notes: [], close: () => cloud.close() };
}

async function seedReplayCloud(o: ReplayCloudOptions): Promise<ReplayCloud> {
  const { rows, store } = o;
  const target: TargetState | null = store.cloudTarget;
  const notes: string[] = [];
  const fleetName = typeof rows.fleet?.app_name === 'string' ? rows.fleet.app_name : undefined;
  const fleetId = linkId(rows.device.belongs_to__application);
  if (!fleetName || fleetId === undefined) throw replayError('the bundle has no fleet row for the device (cloud/fleet.json): capture with --cloud to replay with a local cloud');
  const app = target?.apps.find((a) => a.appId === fleetId);
  if (target && target.apps.some((a) => a.appId !== fleetId)) notes.push(`apps other than the fleet's (${target.apps.filter((a) => a.appId !== fleetId).map((a) => a.appId).join(', ')}) are not seeded: a fleetlab cloud serves one app per device`);

  const cloud = await startLocalCloud({ port: o.port ?? 0, dataDir: o.dataDir });
  try {
    await create(cloud, 'application', fleetId, { app_name: fleetName, organization: await adminOrganization(cloud), device_type: o.deviceType });
    const fleetVariables = pairs(rows.fleetVariables);
    const deviceVariables = pairs(rows.deviceVariables);
    for (const v of fleetVariables) await cloud.call('POST', '/v6/application_environment_variable', { application: fleetId, ...v });

    const seeds = fleetRows(fleetId, app, o.containers);
    const composition = app ? compositionFor(app, rows, new Set([...fleetVariables, ...deviceVariables].map((v) => v.name))) : undefined;
    // Each table's rows in id order: the counter only moves up.
    for (const [id, name] of seeds.services) await create(cloud, 'service', id, { application: fleetId, service_name: name });
    for (const [id, r] of seeds.releases) await create(cloud, 'release', id, { belongs_to__application: fleetId, commit: r.commit, status: 'success', ...(id === app?.releaseId ? { composition } : {}) });
    for (const [id, image] of seeds.images) await create(cloud, 'image', id, { is_a_build_of__service: image.serviceId, is_stored_at__image_location: image.ref, status: 'success' });
    for (const [id, r] of seeds.releases) for (const image of r.images) await cloud.call('POST', '/v6/release_image', { image, is_part_of__release: id });
    const releaseId = app?.releaseId;
    if (!app) notes.push('the device had no target from the cloud for its fleet: the local cloud asks for no release');

    const provisioningKey = (await cloud.call('POST', `/api-key/application/${fleetId}/provisioning`, { name: `replay of ${store.uuid}` })) as string;
    const deviceKey = o.newKey();
    const deviceName = typeof rows.device.device_name === 'string' ? rows.device.device_name : store.deviceName;
    // Registered as the device itself registers: the supervisor's own cloud client.
    const device = await new CloudClient({ url: cloud.url, timeoutMs: 30_000, interactiveTimeoutMs: 30_000 }).register(provisioningKey, {
      uuid: store.uuid, api_key: deviceKey, device_type: o.deviceType, ...(deviceName ? { device_name: deviceName } : {}),
    });
    if (device === 'already-registered') throw replayError(`seeding the local cloud: device ${store.uuid} was there already`);
    // The device's own pin (a device pinned apart from its fleet), else the fleet's.
    const pinned = linkId(rows.device.should_be_running__release) !== undefined;
    if (releaseId !== undefined) await cloud.call('PATCH', pinned ? `/v6/device(${device.id})` : `/v6/application(${fleetId})`, { should_be_running__release: releaseId });
    for (const v of deviceVariables) await cloud.call('POST', '/v6/device_environment_variable', { device: device.id, ...v });
    for (const t of rows.tags) await cloud.call('POST', '/v6/device_tag', { device: device.id, tag_key: String(t.tag_key), value: String(t.value) });
    // The target's config is the fleet's and the device's config variables merged; seeded as the device's.
    for (const [name, value] of Object.entries(target?.config ?? {})) await cloud.call('POST', '/v6/device_config_variable', { device: device.id, name, value });

    const redacted = [...fleetVariables, ...deviceVariables].filter((v) => v.value === REDACTED).map((v) => v.name);
    if (redacted.length) notes.push(`variables redacted in the bundle are seeded as "${REDACTED}": ${redacted.join(', ')}`);
    return { url: cloud.url, adminKey: cloud.adminKey, provisioningKey, deviceKey, fleet: { id: fleetId, name: fleetName }, notes, close: () => cloud.close() };
  } catch (err) {
    await cloud.close();
    throw err;
  }
}
