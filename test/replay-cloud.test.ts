/**
 * `fleetlab replay --cloud` (issue 14, item 6): a device that follows a fleetlab cloud is
 * stuck (an update waits on a lock its app holds); it is captured with a shell on it and its
 * rows of the cloud, and replayed with a local cloud seeded from the bundle. The local cloud
 * serves the replayed supervisor the same target state the real one served the original,
 * holds the device's rows as the real one did, and hears from the replay: once the lock goes,
 * the replay installs the pending release and the local cloud sees it run it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBundle } from '../hil/capture/bundle.js';
import { runCapture, runReplay } from '../hil/harness/capture-command.js';
import { replayOnSim, type Replayed } from '../hil/capture/replay.js';
import { parseCompose } from '../hil/release/compose.js';
import { publishRelease } from '../hil/release/publish.js';
import type { Release } from '../hil/release/release.js';
import { SimDevice } from '../sim/device.js';
import { startFleetCloud, type FleetCloud } from '../sim/stack.js';
import { eventually } from './helpers/engine-targets.js';

let dir: string;
let cloud: FleetCloud;
let device: SimDevice;
let uuid: string;
const password = `pw-${Date.now().toString(36)}-not-for-bundles`;

interface Status {
  appState: string;
  release?: string;
  containers: Array<{ serviceName: string; status: string; imageId: number; releaseId?: number }>;
}

const cloudLink = { pollIntervalMs: 1000, reportIntervalMs: 500 };

function release(image: string, commit: string): Release {
  const project = parseCompose(`name: greenhouse\nservices:\n  main:\n    image: ${image}\n    environment: { MODE: field }\n    volumes: [data:/data]\nvolumes: { data: {} }\n`, join(dir, 'compose.yaml'));
  return { project, images: { main: image }, imageIds: {}, commit, pulledAsNamed: [] };
}

async function status(url: string, key: string): Promise<Status> {
  const res = await fetch(`${url}/v2/state/status`, { headers: { authorization: `Bearer ${key}` } });
  return (await res.json()) as Status;
}

/** What a status says of the stuck point, without what differs between two devices. */
const stuck = (s: Status) => [`appState ${s.appState}`, `release ${s.release}`, ...s.containers.map((c) => `${c.serviceName} ${c.status} image ${c.imageId}`).sort()];

async function targetFrom(url: string, key: string): Promise<unknown> {
  const res = await fetch(`${url}/device/v3/${uuid}/state`, { headers: { authorization: `Bearer ${key}` } });
  expect(res.status).toBe(200);
  return res.json();
}

const logSays = (log: string, pattern: RegExp) => eventually(async () => (pattern.test(readFileSync(log, 'utf8')) ? true : undefined), 60_000, `the supervisor's log saying ${pattern}`);

let bundlePath: string;
let releaseIds: { first: number; second: number };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-replay-cloud-'));
  cloud = await startFleetCloud({ port: 0, dataDir: join(dir, 'cloud'), fleetName: 'greenhouse' });
  device = await SimDevice.start({ port: 0, dataDir: join(dir, 'original'), engine: 'sim', dockerSocket: '', localMode: false, cloud: { url: cloud.url, provisioningKey: cloud.provisioningKey, ...cloudLink } });
  uuid = device.info().uuid;
  const row = await eventually(async () => {
    const [d] = ((await cloud.call('GET', `/v6/device(uuid='${uuid}')?$select=id,is_online`)) as { d: Array<{ id: number; is_online: boolean }> }).d;
    return d?.is_online ? d : undefined;
  }, 30_000, 'the device online in the cloud');
  await cloud.call('PATCH', `/v6/device(${row.id})`, { device_name: 'greenhouse-7' });
  await cloud.call('POST', '/v6/device_tag', { device: row.id, tag_key: 'room', value: 'east' });
  await cloud.call('POST', '/v6/device_environment_variable', { device: row.id, name: 'DB_PASSWORD', value: password });
  await cloud.call('POST', '/v6/device_environment_variable', { device: row.id, name: 'INTERVAL', value: '5' });
  await cloud.call('POST', '/v6/application_environment_variable', { application: cloud.fleet.id, name: 'REGION', value: 'eu' });
  await cloud.call('POST', '/v6/device_config_variable', { device: row.id, name: 'SUPERVISOR_VPN_CONTROL', value: '1' });

  const target = { url: cloud.url, apiKey: cloud.adminKey, fleet: 'greenhouse' };
  const info = device.info();
  const first = await publishRelease(release('fleetlab/test-app:1', 'a'.repeat(32)), target);
  await eventually(async () => {
    const s = await status(info.url, info.apiKey);
    return s.appState === 'applied' && s.release === String(first.releaseId) && s.containers.some((c) => c.status === 'Running') ? s : undefined;
  }, 60_000, 'release 1 running');
  // The app takes its update lock; the next release waits for it.
  mkdirSync(join(device.lockRoot, String(cloud.fleet.id), 'main'), { recursive: true });
  writeFileSync(join(device.lockRoot, String(cloud.fleet.id), 'main', 'updates.lock'), '');
  const second = await publishRelease(release('fleetlab/test-app:2', 'b'.repeat(32)), target);
  releaseIds = { first: first.releaseId, second: second.releaseId };
  await logSays(device.supervisorLog, /holds the update lock/);
  // Stuck, and said so to the cloud: release 2 downloaded, nothing more to report.
  await eventually(async () => {
    const [d] = ((await cloud.call('GET', `/v6/device(${row.id})?$select=status`)) as { d: Array<{ status: string }> }).d;
    return d?.status === 'Idle' ? d : undefined;
  }, 60_000, 'the original reporting Idle');

  bundlePath = join(dir, 'stuck.tar.gz');
  await runCapture({ device: info.url, apiKey: info.apiKey, simDir: join(dir, 'original'), cloud: cloud.url, cloudKey: cloud.adminKey, out: bundlePath, redaction: 'default', force: false, log: () => undefined });
}, 180_000);

afterAll(async () => {
  await device?.stop();
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('replay with a local cloud seeded from the bundle', () => {
  let replayed: Replayed | undefined;
  afterAll(async () => {
    await replayed?.device.stop();
    await replayed?.cloud?.close();
  });

  it('serves the same target, holds the same rows, shows the same stuck point, and hears the replay apply the pending release once the lock goes', async () => {
    const bundle = await readBundle(bundlePath);
    expect(bundle.manifest.steps.find((s) => s.name === 'cloud')?.status).toBe('ok');
    expect(bundle.manifest.steps.find((s) => s.name === 'store')?.status).toBe('ok');
    const original = bundle.json<Status>('state/status.json');
    expect(stuck(original)).toEqual(['appState applying', `release ${releaseIds.second}`, 'main Running image 1']);

    const lines: string[] = [];
    replayed = await replayOnSim({ bundle: bundlePath, cloud: cloudLink, log: (l) => lines.push(l) });
    const local = replayed.cloud!;
    expect(lines).toContain(`local cloud ${local.url} (admin key ${local.adminKey}): fleet greenhouse (id ${cloud.fleet.id}) as captured, device ${uuid} registered in it`);
    expect(lines).toContain('note: variables redacted in the bundle are seeded as "<redacted>": DB_PASSWORD');

    // The target each cloud serves its device, byte for byte but the redacted password.
    const originalKey = (JSON.parse(readFileSync(join(dir, 'original', 'supervisor', 'device.json'), 'utf8')) as { cloudKey: string }).cloudKey;
    const served = JSON.stringify(await targetFrom(cloud.url, originalKey)).replace(password, '<redacted>');
    expect(JSON.stringify(await targetFrom(local.url, local.deviceKey))).toBe(served);

    const info = replayed.device.info();
    await logSays(replayed.device.supervisorLog, /holds the update lock/);
    expect(stuck(await status(info.url, info.apiKey))).toEqual(stuck(original));

    const call = async <T>(path: string) => ((await (await fetch(`${local.url}${path}`, { headers: { authorization: `Bearer ${local.adminKey}` } })).json()) as { d: T[] }).d;
    const [row] = await call<{ id: number; device_name: string }>(`/v6/device?$filter=uuid eq '${uuid}'`);
    expect(row?.device_name).toBe('greenhouse-7');
    expect((await call<{ tag_key: string; value: string }>(`/v6/device_tag?$filter=device eq ${row!.id}`)).map((t) => `${t.tag_key}=${t.value}`)).toEqual(['room=east']);
    expect((await call<{ name: string; value: string }>(`/v6/device_environment_variable?$filter=device eq ${row!.id}`)).map((v) => `${v.name}=${v.value}`).sort()).toEqual(['DB_PASSWORD=<redacted>', 'INTERVAL=5']);
    expect((await call<{ name: string; value: string }>('/v6/application_environment_variable')).map((v) => `${v.name}=${v.value}`)).toEqual(['REGION=eu']);

    // The replay reports to its cloud what the original reported to the real one (a report
    // naming an image or release the cloud lacks would be refused, and set nothing).
    const reported = ['status', 'update_failed', 'os_version', 'supervisor_version', 'api_heartbeat_state', 'is_running__release'] as const;
    const pick = (d: Record<string, unknown>) => Object.fromEntries(reported.map((k) => [k, d[k]]));
    const seen = await eventually(async () => {
      const [d] = await call<Record<string, unknown>>(`/v6/device?$filter=uuid eq '${uuid}'`);
      return d?.ip_address ? d : undefined;
    }, 30_000, "the replay's first report in the local cloud");
    expect(pick(seen)).toEqual(pick(bundle.json<Record<string, unknown>>('cloud/device.json')));
    expect(readFileSync(replayed.device.supervisorLog, 'utf8')).not.toMatch(/State report failed|Target state poll failed/);
    const runs = (id: number) => async () => {
      const [d] = await call<{ is_running__release: { __id: number } | null }>(`/v6/device?$filter=uuid eq '${uuid}'&$select=is_running__release`);
      return d?.is_running__release?.__id === id ? d : undefined;
    };

    // The app lets go: the replay installs the pending release and tells its cloud.
    rmSync(join(replayed.device.lockRoot, String(cloud.fleet.id), 'main', 'updates.lock'));
    await eventually(runs(releaseIds.second), 90_000, `the local cloud seeing the replay run release ${releaseIds.second}`);
  }, 240_000);

  it('refuses a bundle without cloud rows, and --cloud with --spec', async () => {
    const plain = join(dir, 'plain.tar.gz');
    const info = device.info();
    await runCapture({ device: info.url, apiKey: info.apiKey, simDir: join(dir, 'original'), out: plain, redaction: 'default', force: false, log: () => undefined });
    await expect(replayOnSim({ bundle: plain, cloud: {} })).rejects.toThrow(`${plain} has no cloud rows (cloud/device.json), which a replay with a local cloud is seeded from: capture with --cloud URL --cloud-key KEY`);
    await expect(runReplay({ bundle: plain, port: 0, engine: 'sim', dockerSocket: '', listenAddress: '127.0.0.1', spec: join(dir, 'x.spec.ts'), cloudPort: 0 })).rejects.toThrow('--cloud goes with a replay, not with --spec');
  }, 120_000);
});
