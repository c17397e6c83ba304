/**
 * The device state report (src/cloud/device/state-report*.ts) on both databases: what it
 * writes to the device and its installs, what it refuses, that concurrent reports lose
 * nothing, and on PostgreSQL that a report is one statement (one round trip), whatever it
 * carries. The rows are read back with SQL, so both databases must leave the same rows.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/cloud/db/port.js';
import { applyReport } from '../src/cloud/device/state-report.js';
import type { DeviceReport } from '../src/protocol/device-cloud.js';
import { cloudOn, databases, type CloudFixture, type DbKind } from './helpers/cloud-fixture.js';
import { countingDb } from './helpers/counting-db.js';
import { changedTables, snapshot } from './helpers/db-snapshot.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

interface Device {
  id: number;
  uuid: string;
  key: string;
}

const uuidOf = (n: number) => n.toString(16).padStart(32, 'e');
const running = (imageId: number, releaseId: number) => ({ image: `registry.local/${imageId}`, image_id: imageId, status: 'Running', download_progress: 100, release_id: releaseId });

describe.each<DbKind>(['sqlite', 'postgres'])('device state report on %s', (kind) => {
  let c: CloudFixture;
  let user: string;
  let fleet: number;
  /** Two releases of the fleet, one of another fleet; images of main and side, one of the other fleet. */
  let r1: number, r2: number, rOther: number;
  let iMain: number, iSide: number, iMain2: number, iOther: number;
  let provisioning: string;
  let next = 1;

  const call = async (app: FastifyInstance, key: string, method: string, url: string, payload?: unknown) => {
    const r = await app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${key}` }, ...(payload === undefined ? {} : { payload: payload as object }) });
    return { status: r.statusCode, body: r.body };
  };
  const ok = async (method: string, url: string, payload?: unknown) => {
    const r = await call(c.app, user, method, url, payload);
    if (r.status >= 300) throw new Error(`${method} ${url}: ${r.status} ${r.body}`);
    return JSON.parse(r.body) as { id: number };
  };
  const register = async (): Promise<Device> => {
    const n = next++;
    const d = { uuid: uuidOf(n), key: `device-key-of-report-${n}-0000000` };
    const r = await call(c.app, provisioning, 'POST', '/device/register', { uuid: d.uuid, api_key: d.key, device_type: 'raspberrypi4-64', device_name: `r${n}` });
    if (r.status !== 201) throw new Error(`register: ${r.status} ${r.body}`);
    return { ...d, id: (JSON.parse(r.body) as { id: number }).id };
  };
  const report = (d: Device, body: DeviceReport) => call(c.app, d.key, 'PATCH', '/device/v3/state', { [d.uuid]: body });

  /** What a report writes, read back with SQL (numbers as numbers on both databases). */
  async function written(d: Device) {
    const [row] = await c.db.query<Record<string, unknown>>(
      'SELECT status, os_version, supervisor_version, ip_address, mac_address, update_failed, is_running__release, api_heartbeat_state FROM "device" WHERE id = ?',
      [d.id],
    );
    const installs = await c.db.query<Record<string, unknown>>(
      'SELECT installs__image, status, download_progress, is_provided_by__release FROM "image_install" WHERE device = ? ORDER BY installs__image',
      [d.id],
    );
    const n = (v: unknown) => (v === null ? null : Number(v));
    return {
      device: { ...row, update_failed: Boolean(row!.update_failed), is_running__release: n(row!.is_running__release) },
      installs: installs.map((i) => ({ image: Number(i.installs__image), status: i.status, progress: n(i.download_progress), release: n(i.is_provided_by__release) })),
    };
  }

  beforeAll(async () => {
    c = await cloudOn(await dbs.open(kind));
    const u = JSON.parse((await call(c.app, c.adminKey, 'POST', '/fleetlab/users', { username: 'rita' })).body) as { apiKey: string; organization: number };
    user = u.apiKey;
    fleet = (await ok('POST', '/v6/application', { app_name: 'reports', organization: u.organization, device_type: 'raspberrypi4-64' })).id;
    const other = (await ok('POST', '/v6/application', { app_name: 'elsewhere', organization: u.organization, device_type: 'raspberrypi4-64' })).id;
    const image = async (app: number, name: string, tag: string) => {
      const service = (await ok('POST', '/v6/service', { application: app, service_name: `${name}-${tag}` })).id;
      return (await ok('POST', '/v6/image', { is_a_build_of__service: service, is_stored_at__image_location: `registry.local/${name}:${tag}`, status: 'success' })).id;
    };
    r1 = (await ok('POST', '/v6/release', { belongs_to__application: fleet, commit: 'r1', status: 'success' })).id;
    r2 = (await ok('POST', '/v6/release', { belongs_to__application: fleet, commit: 'r2', status: 'success' })).id;
    rOther = (await ok('POST', '/v6/release', { belongs_to__application: other, commit: 'o1', status: 'success' })).id;
    iMain = await image(fleet, 'main', '1');
    iSide = await image(fleet, 'side', '1');
    iMain2 = await image(fleet, 'main', '2');
    iOther = await image(other, 'main', 'o');
    provisioning = JSON.parse((await call(c.app, user, 'POST', `/api-key/application/${fleet}/provisioning`, {})).body) as string;
  }, 120_000);
  afterAll(() => c?.close());

  it('writes the device, the release it runs and one install per service; installs it no longer names are gone', async () => {
    const d = await register();
    expect((await report(d, { status: 'Idle', os_version: 'os 1', supervisor_version: '1.0.0', ip_address: '10.0.0.1', mac_address: '02:00:00:00:00:01', update_failed: false, apps: { [fleet]: { release_id: r1, services: { main: running(iMain, r1), side: running(iSide, r1) } } } })).status).toBe(200);
    expect(await written(d)).toEqual({
      device: { status: 'Idle', os_version: 'os 1', supervisor_version: '1.0.0', ip_address: '10.0.0.1', mac_address: '02:00:00:00:00:01', update_failed: false, is_running__release: r1, api_heartbeat_state: 'online' },
      installs: [
        { image: iMain, status: 'Running', progress: 100, release: r1 },
        { image: iSide, status: 'Running', progress: 100, release: r1 },
      ].sort((a, b) => a.image - b.image),
    });

    // Mid-update: the new image downloading, the side service gone from the target.
    expect((await report(d, { status: 'Updating', update_failed: true, apps: { [fleet]: { release_id: r2, services: { main: { ...running(iMain2, r2), status: 'Downloading', download_progress: 40 } } } } })).status).toBe(200);
    expect(await written(d)).toEqual({
      device: { status: 'Updating', os_version: 'os 1', supervisor_version: '1.0.0', ip_address: '10.0.0.1', mac_address: '02:00:00:00:00:01', update_failed: true, is_running__release: null, api_heartbeat_state: 'online' },
      installs: [{ image: iMain2, status: 'Downloading', progress: 40, release: r2 }],
    });

    // A report without apps leaves the installs and the running release as they were.
    expect((await report(d, { ip_address: '10.0.0.2' })).status).toBe(200);
    expect(await written(d)).toMatchObject({ device: { status: 'Updating', ip_address: '10.0.0.2', is_running__release: null }, installs: [{ image: iMain2, status: 'Downloading', progress: 40, release: r2 }] });

    // The same install again, now running: updated in place, not added.
    expect((await report(d, { status: 'Idle', update_failed: false, apps: { [fleet]: { release_id: r2, services: { main: running(iMain2, r2) } } } })).status).toBe(200);
    expect(await written(d)).toMatchObject({ device: { status: 'Idle', update_failed: false, is_running__release: r2 }, installs: [{ image: iMain2, status: 'Running', progress: 100, release: r2 }] });

    // Apps present and empty: no installs left, nothing running.
    expect((await report(d, { apps: {} })).status).toBe(200);
    expect(await written(d)).toMatchObject({ device: { is_running__release: null }, installs: [] });
  });

  it('records only releases of the device\'s own fleet; an image named twice keeps what was said last', async () => {
    const d = await register();
    expect((await report(d, { apps: { [fleet]: { release_id: rOther, services: { main: running(iMain, rOther) } } } })).status).toBe(200);
    expect(await written(d)).toMatchObject({ device: { is_running__release: null }, installs: [{ image: iMain, status: 'Running', release: null }] });

    const twice = { apps: { [fleet]: { release_id: r1, services: { a: { ...running(iMain, r1), status: 'Downloading', download_progress: 10 }, b: running(iMain, r1) } } } };
    expect((await report(d, twice)).status).toBe(200);
    expect((await written(d)).installs).toEqual([{ image: iMain, status: 'Running', progress: 100, release: r1 }]);
  });

  it('refuses an image of another fleet with 400, and writes nothing at all', async () => {
    const d = await register();
    await report(d, { status: 'Idle', apps: { [fleet]: { release_id: r1, services: { main: running(iMain, r1) } } } });
    const before = await snapshot(c.db);
    const r = await report(d, { status: 'pwned', ip_address: '6.6.6.6', apps: { [fleet]: { release_id: r1, services: { side: running(iSide, r1), main: running(iOther, r1) } } } });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.body)).toBe(`image ${iOther} is not an image of this device's fleet`);
    expect(changedTables(before, await snapshot(c.db))).toEqual([]);
  });

  it('loses nothing when many devices report at once, nor when one device\'s reports overlap', async () => {
    const devices = await Promise.all(Array.from({ length: 12 }, () => register()));
    const rounds = await Promise.all(
      devices.flatMap((d, i) => [
        report(d, { status: `s${i}`, ip_address: `10.1.0.${i}`, apps: { [fleet]: { release_id: r1, services: { main: running(iMain, r1), side: running(iSide, r1) } } } }),
        // The same device again before the first is answered (a retry after a timeout): the
        // same installs, never a unique violation.
        report(d, { status: `s${i}`, apps: { [fleet]: { release_id: r1, services: { main: running(iMain, r1), side: running(iSide, r1) } } } }),
      ]),
    );
    expect(rounds.map((r) => r.status)).toEqual(rounds.map(() => 200));
    for (const [i, d] of devices.entries()) {
      expect(await written(d)).toMatchObject({
        device: { status: `s${i}`, ip_address: `10.1.0.${i}`, is_running__release: r1, api_heartbeat_state: 'online' },
        installs: [iMain, iSide].sort((a, b) => a - b).map((image) => ({ image, status: 'Running', release: r1 })),
      });
    }
  });

  it.runIf(kind === 'postgres')('is one statement on PostgreSQL (one round trip, no transaction), whatever the report carries', async () => {
    const d = await register();
    await report(d, { apps: { [fleet]: { release_id: r1, services: { main: running(iMain, r1), side: running(iSide, r1) } } } });
    const counted = countingDb(c.db);
    // One install updated, one added, one removed, the device's fields and running release.
    await applyReport(counted.db, d.id, { status: 'Updating', ip_address: '10.2.0.1', update_failed: false, apps: { [fleet]: { release_id: r2, services: { main: running(iMain, r2), next: { ...running(iMain2, r2), status: 'Downloading', download_progress: 5 } } } } }, new Date());
    expect(counted.calls).toEqual([{ kind: 'query', sql: expect.stringMatching(/^WITH input AS/) }]);
    expect(await written(d)).toMatchObject({ device: { status: 'Updating', ip_address: '10.2.0.1', is_running__release: null }, installs: [{ image: iMain, release: r2 }, { image: iMain2, status: 'Downloading', progress: 5 }] });
  });

  it.runIf(kind === 'postgres')('a report sets no column a trigger watches, and leaves the target version as it was', async () => {
    const d = await register();
    const version = async () => Number((await c.db.query<{ v: number }>('SELECT target_version AS v FROM "device" WHERE id = ?', [d.id]))[0]!.v);
    const before = await version();
    await report(d, { status: 'Idle', ip_address: '10.3.0.1', apps: { [fleet]: { release_id: r1, services: { main: running(iMain, r1) } } } });
    expect(await version()).toBe(before);
    // The triggers on the tables a report writes: none per row on image_install, and on the
    // device only ones that watch columns a report never sets.
    const triggers = await c.db.query<{ table: string; name: string; definition: string }>(
      `SELECT c.relname AS "table", t.tgname AS name, pg_get_triggerdef(t.oid) AS definition FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE NOT t.tgisinternal AND c.relname IN ('device', 'image_install') ORDER BY 1, 2`,
      [],
    );
    const reportSets = ['status', 'os_version', 'supervisor_version', 'ip_address', 'mac_address', 'update_failed', 'is_running__release', 'api_heartbeat_state', 'last_connectivity_event', 'modified_at'];
    for (const t of triggers) {
      expect(t.table, t.definition).toBe('device');
      const watched = /UPDATE OF (.*?)(?: OR | ON )/.exec(t.definition)?.[1]?.split(',').map((s) => s.trim().replace(/"/g, '')) ?? [];
      expect(watched.length, `${t.name} fires on any update: ${t.definition}`).toBeGreaterThan(0);
      expect(watched.filter((col) => reportSets.includes(col)), t.definition).toEqual([]);
    }
  });
});

/** Keeps the port honest for the counting test above: the wrapper forwards, and counts. */
describe('counting db', () => {
  it('counts each call and forwards it', async () => {
    const seen: string[] = [];
    const inner = { dialect: { name: 'sqlite' }, query: async (sql: string) => (seen.push(sql), []), exec: async () => undefined, transaction: async (fn: (tx: Db) => Promise<unknown>) => fn(inner as unknown as Db), close: async () => undefined } as unknown as Db;
    const counted = countingDb(inner);
    await counted.db.transaction(async (tx) => tx.query('SELECT 1', []));
    expect(counted.calls).toEqual([{ kind: 'transaction' }, { kind: 'query', sql: 'SELECT 1' }]);
    expect(seen).toEqual(['SELECT 1']);
  });
});
