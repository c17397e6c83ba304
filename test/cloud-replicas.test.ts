/**
 * Two `fleetlab cloud` processes on one PostgreSQL database, behind one load balancer, serve
 * one fleet of virtual devices. Either replica reaches any device through the proxy, whichever
 * replica holds its tunnel. One replica killed with SIGKILL half way through a rollout: its
 * accepted writes are there, its devices reconnect to the other, and every device ends on the
 * new release. The replica bus carries a message larger than a notification through a row.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { startPostgresBus } from '../src/cloud/cluster/postgres-bus.js';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { fleetRelease } from '../hil/harness/fleet.js';
import { fleetProgress, publishRelease } from '../hil/release/publish.js';
import { Fleet } from '../sim/fleet/fleet.js';
import { simulatedAddresses } from '../sim/fleet/fleet-device.js';
import { startBalancer, type Balancer } from '../sim/network/balancer.js';
import { startCloudProcess, type CloudProcess } from './helpers/cloud-process.js';
import { eventually } from './helpers/engine-targets.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';

const DEVICES = 24;
let dir: string;
let cluster: PostgresCluster;
let database: string;
let replicas: CloudProcess[] = [];
let balancer: Balancer;
let fleet: Fleet | undefined;

const release = (tag: string) => fleetRelease(`services:\n  main:\n    image: fleetlab/test-app:${tag}\n    command: ["sleep", "1000000"]\n`);

async function call(base: string, key: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  // The key routes answer a JSON string as text/plain, as the spec's examples show.
  return { status: res.status, body: text ? parseOrText(text) : text };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-replicas-test-'));
  cluster = await startPostgres();
  database = await cluster.createDatabase('replicas');
}, 120_000);

afterAll(async () => {
  await fleet?.close();
  await balancer?.close();
  for (const r of replicas) await r.stop().catch(() => undefined);
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('cloud replicas on PostgreSQL', () => {
  it('two replicas started together bootstrap one database once', { timeout: 60_000 }, async () => {
    // Both migrate and create the admin at the same moment; the advisory lock lets one do it.
    const started = await Promise.all(['a', 'b'].map((n) => startCloudProcess(['--database', database, '--data-dir', join(dir, n), '--admin-key', 'replicas-admin-key-0000000000000'])));
    replicas = started;
    expect(new Set(started.map((r) => r.ready.replica)).size).toBe(2);
    for (const r of started) {
      const users = await call(r.ready.url, 'replicas-admin-key-0000000000000', 'GET', `/v6/user?$select=username`);
      expect(users).toEqual({ status: 200, body: { d: [{ username: 'admin' }] } });
    }
  });

  it('serve one fleet: the proxy reaches every device from either replica; a replica killed mid-rollout loses nothing and its devices move', { timeout: 300_000 }, async () => {
    const key = 'replicas-admin-key-0000000000000';
    const [a, b] = replicas as [CloudProcess, CloudProcess];
    const backends = [a, b].map((r) => ({ host: '127.0.0.1', port: Number(new URL(r.ready.url).port) }));
    // Two forwarding processes: the path a big fleet takes (balancer.ts).
    balancer = await startBalancer(backends, { processes: 2 });

    const org = (await call(balancer.url, key, 'GET', `/v6/organization?$filter=handle eq 'admin'`)).body as { d: Array<{ id: number }> };
    const app = (await call(balancer.url, key, 'POST', '/v6/application', { app_name: 'orchard', organization: org.d[0]!.id, device_type: 'raspberrypi3' })).body as { id: number };
    const provisioningKey = (await call(balancer.url, key, 'POST', `/api-key/application/${app.id}/provisioning`, { name: 'orchard' })).body as string;
    const target = { url: balancer.url, apiKey: key, fleet: 'orchard' };
    const v1 = await publishRelease(release('1'), target);

    fleet = await Fleet.start({
      devices: DEVICES,
      cloudUrl: balancer.url,
      provisioningKey,
      dataDir: join(dir, 'fleet'),
      faults: [],
      seed: 1,
      pollIntervalMs: 2_000,
      reportIntervalMs: 1_000,
      tunnelHeartbeatMs: 1_000,
      startRate: 100,
    });
    const all = fleet.devices;
    await until('every device runs release 1', () => fleet!.appliedOn(v1.releaseId) === DEVICES, 90_000);

    // The tunnels are spread over both replicas (round-robin), recorded in the database.
    const db = new pg.Client({ connectionString: database });
    await db.connect();
    try {
      const owners = await eventually(async () => {
        const rows = (await db.query<{ replica: string; n: string }>('SELECT replica, count(*) AS n FROM device_tunnel GROUP BY replica')).rows;
        const total = rows.reduce((s, r) => s + Number(r.n), 0);
        // Thrown, not undefined: a timeout then says how far it got, and why devices are not applied.
        if (total !== DEVICES) throw new Error(`${total} of ${DEVICES} tunnel rows ${JSON.stringify(rows)}; devices not applied: ${all.map((d) => ({ index: d.index, ...d.status() })).filter((d) => d.phase !== 'applied').slice(0, 5).map((d) => `${d.index} ${d.phase}: ${d.reason ?? ''}`).join('; ') || 'none'}`);
        return rows;
      }, 30_000, 'a tunnel row for every device');
      expect(owners.map((r) => r.replica).sort()).toEqual([a.ready.replica, b.ready.replica].sort());

      // Any device from either replica, whichever holds its tunnel.
      for (const r of [a, b]) {
        for (const d of all) {
          const answer = await call(r.ready.url, key, 'POST', '/supervisor/v1/device', { uuid: d.uuid!, method: 'GET' });
          expect(answer.status, `${d.uuid} through replica ${r.ready.replica}`).toBe(200);
          expect((answer.body as { ip_address: string }).ip_address).toBe(simulatedAddresses(d.index).ip);
        }
        const everyone = (await call(r.ready.url, key, 'POST', '/supervisor/v1/device', { appId: app.id, method: 'GET' })).body as Array<{ uuid: string; statusCode: number }>;
        expect(everyone.map((e) => e.statusCode)).toEqual(all.map(() => 200));
      }

      // A write accepted by the replica about to die.
      const tagged = await call(a.ready.url, key, 'POST', '/v6/device_tag', { device: (await deviceIds(a.ready.url, key))[0], tag_key: 'shelf', value: '3' });
      expect(tagged.status).toBe(201);

      const v2 = await publishRelease(release('2'), target);
      await until('the rollout has begun', () => fleet!.appliedOn(v2.releaseId) >= 1, 60_000);
      await a.kill();

      await until('every device runs release 2 after a replica died', () => fleet!.appliedOn(v2.releaseId) === DEVICES, 180_000);
      // The survivor holds every tunnel and sees every device online on release 2.
      await eventually(async () => {
        const progress = await fleetProgress({ url: b.ready.url, apiKey: key, fleet: 'orchard' }, app.id, v2.releaseId);
        return progress.running === DEVICES && progress.online === DEVICES ? progress : undefined;
      }, 60_000, 'the surviving replica sees every device online on release 2');
      const left = (await db.query<{ replica: string }>('SELECT DISTINCT replica FROM device_tunnel')).rows.map((r) => r.replica);
      expect(left).toEqual([b.ready.replica]);
      expect((await call(b.ready.url, key, 'GET', `/v6/device_tag?$select=tag_key,value`)).body).toEqual({ d: [{ tag_key: 'shelf', value: '3' }] });
      const everyone = (await call(b.ready.url, key, 'POST', '/supervisor/v1/device', { appId: app.id, method: 'GET' })).body as Array<{ statusCode: number }>;
      expect(everyone.map((e) => e.statusCode)).toEqual(all.map(() => 200));
    } finally {
      await db.end();
    }
  });

  it('the replica bus carries a message larger than a notification through a row it then removes', { timeout: 60_000 }, async () => {
    const url = await cluster.createDatabase('bus');
    const db = openPostgres(url);
    await prepareDatabase(db);
    const got: unknown[] = [];
    const [one, two] = await Promise.all(['0a', '0b'].map((replica) => startPostgresBus({ connectionString: url, db, replica, log: { warn: () => undefined } })));
    try {
      two!.listen((m) => got.push(m));
      const big = { body: 'x'.repeat(20_000) };
      await one!.send('0b', { small: true });
      await one!.send('0b', big);
      await eventually(async () => (got.length === 2 ? true : undefined), 10_000, 'both messages arrive');
      expect(got).toEqual([{ small: true }, big]);
      expect(await db.query('SELECT id FROM "cloud_message"', [])).toEqual([]);
    } finally {
      await one!.close();
      await two!.close();
      await db.close();
    }
  });
});

function parseOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  await eventually(async () => (check() ? true : undefined), timeoutMs, `${what} (${JSON.stringify(fleet?.counts())}; stuck: ${JSON.stringify(fleet?.stuck(null, 3))})`);
}

async function deviceIds(base: string, key: string): Promise<number[]> {
  const devices = (await call(base, key, 'GET', '/v6/device?$select=id&$orderby=id')).body as { d: Array<{ id: number }> };
  return devices.d.map((d) => d.id);
}
