/**
 * The replica directory on both databases: a device that moved to another replica is not
 * taken offline by the old one closing late; a replica that stopped beating is swept with its
 * tunnels (its devices offline); a replica that was swept while paused finds out at its next
 * beat and claims its tunnels again.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { ReplicaDirectory } from '../src/cloud/cluster/replica-directory.js';
import type { Db } from '../src/cloud/db/port.js';
import { buildCloud } from '../src/cloud/server.js';
import { databases } from './helpers/cloud-fixture.js';
import { countingDb } from './helpers/counting-db.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

const STALE_MS = 300;
const at = () => new Date().toISOString();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A database with two registered devices (through the cloud's own routes), and their ids. */
async function withDevices(db: Db): Promise<Array<{ uuid: string; id: number }>> {
  const adminKey = (await prepareDatabase(db)).key!;
  const app = buildCloud({ db });
  try {
    const call = async (key: string, method: 'GET' | 'POST', url: string, payload?: object) => {
      const res = await app.inject({ method, url, headers: { authorization: `Bearer ${key}` }, ...(payload ? { payload } : {}) });
      return JSON.parse(res.body) as unknown;
    };
    const orgs = (await call(adminKey, 'GET', `/v6/organization?$filter=handle eq 'admin'`)) as { d: Array<{ id: number }> };
    const fleet = (await call(adminKey, 'POST', '/v6/application', { app_name: 'replicas', organization: orgs.d[0]!.id, device_type: 'raspberrypi3' })) as { id: number };
    const provisioning = (await call(adminKey, 'POST', `/api-key/application/${fleet.id}/provisioning`, {})) as string;
    const devices = [];
    for (const c of ['a', 'b']) {
      const uuid = c.repeat(32);
      const registered = (await call(provisioning, 'POST', '/device/register', { uuid, api_key: `device-key-long-enough-${c.repeat(12)}`, device_type: 'raspberrypi3' })) as { id: number };
      devices.push({ uuid, id: registered.id });
    }
    return devices;
  } finally {
    await app.close();
  }
}

const onlineOf = async (db: Db, uuid: string) => {
  const rows = await db.query<{ is_online: unknown }>('SELECT is_online FROM "device" WHERE uuid = ?', [uuid]);
  return Boolean(rows[0]!.is_online);
};

describe.each(['sqlite', 'postgres'] as const)('replica directory on %s', (kind) => {
  it('moves, sweeps and reclaims tunnels', { timeout: 60_000 }, async () => {
    const db = await dbs.open(kind);
    const [one, two] = await withDevices(db);
    const a = new ReplicaDirectory({ db, id: 'aa', staleAfterMs: STALE_MS });
    const b = new ReplicaDirectory({ db, id: 'bb', staleAfterMs: STALE_MS });
    await a.register();
    await b.register();

    // Device one connects to A, moves to B, and A's close of the old tunnel comes late.
    await a.connected(one!.uuid, one!.id, at());
    expect(await onlineOf(db, one!.uuid)).toBe(true);
    await b.connected(one!.uuid, one!.id, at());
    await a.disconnected(one!.uuid, at());
    expect(await onlineOf(db, one!.uuid)).toBe(true);
    expect(await a.owners([one!.uuid])).toEqual(new Map([[one!.uuid, 'bb']]));

    // Device two stays on A; A stops beating and B sweeps it away.
    await a.connected(two!.uuid, two!.id, at());
    await sleep(STALE_MS + 100);
    expect(await b.beat()).toBe(true);
    expect(await b.sweep(at())).toEqual(['aa']);
    expect(await onlineOf(db, two!.uuid)).toBe(false);
    expect(await onlineOf(db, one!.uuid)).toBe(true);
    expect(await b.owners([one!.uuid, two!.uuid])).toEqual(new Map([[one!.uuid, 'bb']]));

    // A was only paused: its next beat finds its row gone, and it claims device two again.
    expect(await a.beat()).toBe(false);
    await a.reclaim([{ uuid: two!.uuid, deviceId: two!.id }], at());
    expect(await onlineOf(db, two!.uuid)).toBe(true);
    expect(await b.owners([two!.uuid])).toEqual(new Map([[two!.uuid, 'aa']]));

    // B leaves cleanly: its device is offline at once, A's is not touched.
    await b.leave(at());
    expect(await onlineOf(db, one!.uuid)).toBe(false);
    expect(await onlineOf(db, two!.uuid)).toBe(true);

    // Device two's tunnel on A closes: offline, and its row is gone.
    await a.disconnected(two!.uuid, at());
    expect(await onlineOf(db, two!.uuid)).toBe(false);
    expect(await a.owners([two!.uuid])).toEqual(new Map());

    // On PostgreSQL a tunnel opening or closing is one statement (one round trip, no transaction).
    if (kind === 'postgres') {
      const counted = countingDb(db);
      const c = new ReplicaDirectory({ db: counted.db, id: 'cc', staleAfterMs: STALE_MS });
      await c.connected(one!.uuid, one!.id, at());
      await c.disconnected(one!.uuid, at());
      expect(counted.calls.map((q) => q.kind)).toEqual(['query', 'query']);
    }
  });
});
