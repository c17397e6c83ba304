/**
 * Two `fleetlab cloud` processes on one SQLite file: both serve the API, but SQLite carries no
 * messages between them, so a proxy call that lands on the process not holding the device's
 * tunnel is refused with CLOUD_ERR_REPLICA (502) and a message that says to use PostgreSQL,
 * not a 404 that would say the device is offline. The process holding the tunnel answers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fleetRelease } from '../hil/harness/fleet.js';
import { publishRelease } from '../hil/release/publish.js';
import { Fleet } from '../sim/fleet/fleet.js';
import { simulatedAddresses } from '../sim/fleet/fleet-device.js';
import { provisioningKeyFor } from '../sim/fleet/provisioning.js';
import { cloudError } from './helpers/cloud-error-shape.js';
import { startCloudProcess, type CloudProcess } from './helpers/cloud-process.js';
import { eventually } from './helpers/engine-targets.js';

const KEY = 'sqlite-replicas-admin-key-000000';
let dir: string;
const clouds: CloudProcess[] = [];
let fleet: Fleet | undefined;

async function call(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, headers: Object.fromEntries(res.headers), body: await res.text() };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-sqlite-replicas-test-'));
  const database = `sqlite:${join(dir, 'cloud.db')}`;
  // One after the other: the first creates the schema and the admin, the second finds them.
  for (const name of ['a', 'b']) clouds.push(await startCloudProcess(['--database', database, '--data-dir', join(dir, name), '--admin-key', KEY]));
}, 90_000);

afterAll(async () => {
  await fleet?.close();
  for (const c of clouds) await c.stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

describe('two cloud processes on one SQLite file', () => {
  it('the proxy answers from the process holding the tunnel; the other says the tunnel is on another process and to use PostgreSQL', { timeout: 120_000 }, async () => {
    const [a, b] = clouds as [CloudProcess, CloudProcess];
    expect(a.ready.replica).not.toBe(b.ready.replica);
    const org = JSON.parse((await call(a.ready.url, 'GET', `/v6/organization?$filter=handle eq 'admin'`)).body) as { d: Array<{ id: number }> };
    await call(a.ready.url, 'POST', '/v6/application', { app_name: 'shed', organization: org.d[0]!.id, device_type: 'raspberrypi3' });
    const { fleetId, provisioningKey } = await provisioningKeyFor({ cloud: a.ready.url, apiKey: KEY, fleet: 'shed' });
    const v1 = await publishRelease(fleetRelease(`services:\n  main:\n    image: fleetlab/test-app:1\n    command: ["sleep", "1000000"]\n`), { url: a.ready.url, apiKey: KEY, fleet: 'shed' });

    // Every device's tunnel is on process a: they are given only its address.
    fleet = await Fleet.start({ devices: 2, cloudUrl: a.ready.url, provisioningKey, dataDir: join(dir, 'fleet'), pollIntervalMs: 2_000, reportIntervalMs: 1_000, tunnelHeartbeatMs: 1_000, startRate: 100 });
    await eventually(async () => (fleet!.appliedOn(v1.releaseId) === 2 ? true : undefined), 60_000, `both devices on release 1 (${JSON.stringify(fleet.counts())})`);

    for (const device of fleet.devices) {
      const uuid = device.uuid!;
      const here = await eventually(async () => {
        const answer = await call(a.ready.url, 'POST', '/supervisor/v1/device', { uuid, method: 'GET' });
        return answer.status === 200 ? answer : undefined;
      }, 30_000, `process a reaches ${uuid} through its tunnel`);
      expect((JSON.parse(here.body) as { ip_address: string }).ip_address).toBe(simulatedAddresses(device.index).ip);

      const there = cloudError(await call(b.ready.url, 'POST', '/supervisor/v1/device', { uuid, method: 'GET' }));
      expect({ status: there.status, code: there.code }).toEqual({ status: 502, code: 'CLOUD_ERR_REPLICA' });
      expect(there.message).toContain(a.ready.replica);
      expect(there.message).toMatch(/PostgreSQL/);
    }
    // Both processes see the same database: the devices process a registered are online in b's view too.
    const seen = JSON.parse((await call(b.ready.url, 'GET', `/v6/device?$select=uuid,is_online&$filter=belongs_to__application eq ${fleetId}&$orderby=uuid`)).body) as { d: Array<{ uuid: string; is_online: boolean }> };
    expect(seen.d).toEqual(fleet.devices.map((d) => ({ uuid: d.uuid!, is_online: true })).sort((x, y) => x.uuid.localeCompare(y.uuid)));
  });
});
