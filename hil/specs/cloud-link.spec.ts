/**
 * The device and its cloud, as a fleet operator sees them: the device registers to a fleet of
 * a lab cloud, follows the fleet's release, reads its tags from the cloud, answers calls
 * through the cloud's proxy, and catches up after a network partition. Needs `network`: the
 * harness must be able to cut the device's path to the cloud.
 */
import { expect, pollUntil, since, test, type FleetCloud } from 'fleetlab/test';

test.use({ withCloud: true });

type Rows<T> = { d: T[] };

/** A one-service release of `image` set as the fleet's target; returns its id. */
async function setRelease(cloud: FleetCloud, commit: string, image: string, vendor: string): Promise<number> {
  const fleet = cloud.fleet.id;
  const existing = (await cloud.call('GET', `/v6/service?$filter=application eq ${fleet} and service_name eq 'main'`)) as Rows<{ id: number }>;
  const service = existing.d[0]?.id ?? ((await cloud.call('POST', '/v6/service', { application: fleet, service_name: 'main' })) as { id: number }).id;
  const img = (await cloud.call('POST', '/v6/image', { is_a_build_of__service: service, is_stored_at__image_location: image, status: 'success' })) as { id: number };
  const composition = { services: { main: { labels: { [`io.${vendor}.features.supervisor-api`]: '1' } } } };
  const release = (await cloud.call('POST', '/v6/release', { belongs_to__application: fleet, commit, status: 'success', composition })) as { id: number };
  await cloud.call('POST', '/v6/release_image', { image: img.id, is_part_of__release: release.id });
  await cloud.call('PATCH', `/v6/application(${fleet})`, { should_be_running__release: release.id });
  return release.id;
}

async function deviceRow(cloud: FleetCloud, uuid: string) {
  const rows = (await cloud.call('GET', `/v6/device?$select=id,is_online,status,is_running__release&$filter=uuid eq '${uuid}'`)) as Rows<{
    id: number;
    is_online: boolean;
    status: string;
    is_running__release: { __id: number } | null;
  }>;
  return rows.d[0];
}

/**
 * The device's row once it is online: each spec that needs the device registered and its
 * tunnel up waits for that itself, so it holds when run alone (`--grep`) on a fresh device.
 */
function onlineRow(cloud: FleetCloud, uuid: string) {
  return pollUntil('device online in the cloud', () => deviceRow(cloud, uuid), (r) => r?.is_online === true, { timeoutMs: 30_000 });
}

test.beforeEach(({ needs }) => needs('network'));

test('the device registers to the fleet with its provisioning key and its tunnel comes up', { tag: '@smoke', annotation: since('11.4.0', 'GET /v2/device/vpn') }, async ({ api, device, cloud }) => {
  const row = await onlineRow(cloud!, device.api.identity.uuid);
  expect(row!.status).toBeTruthy();
  const vpn = await api.vpn();
  expect(vpn.body).toEqual({ status: 'success', vpn: { enabled: true, connected: true } });
});

test('a release set on the fleet runs on the device and the cloud records it', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, cloud }) => {
  const releaseId = await setRelease(cloud!, 'r1', 'fleetlab/test-app:1', device.api.identity.vendor);
  const row = await pollUntil('release running per the cloud', () => deviceRow(cloud!, device.api.identity.uuid), (r) => r?.is_running__release?.__id === releaseId, { timeoutMs: 90_000 });
  expect(row!.status).toBe('Idle');
  const status = await api.stateStatus();
  expect(status.body.release).toBe(String(releaseId));
  expect(status.body.containers.map((c) => c.serviceName)).toEqual(['main']);
});

test('tags set in the cloud are what the app reads from /v2/device/tags', { annotation: since('9.11.0', 'GET /v2/device/tags') }, async ({ api, device, cloud }) => {
  const row = await onlineRow(cloud!, device.api.identity.uuid);
  await cloud!.call('POST', '/v6/device_tag', { device: row!.id, tag_key: 'bench', value: 'b-7' });
  const tags = await api.tags();
  expect(tags.status).toBe(200);
  expect(tags.body.tags).toEqual([{ id: expect.any(Number), name: 'bench', value: 'b-7' }]);
});

test('the cloud proxy reaches the device: blink through it shows on the LED line', { annotation: since('1.6.0', 'GET /v1/device') }, async ({ device, cloud, needs }) => {
  needs('led');
  await onlineRow(cloud!, device.api.identity.uuid);
  const since = Date.now();
  const answer = await cloud!.call('POST', '/supervisor/v1/blink', { uuid: device.api.identity.uuid });
  expect(answer).toBeUndefined(); // 200 with the device's empty body, passed through
  const seen = await pollUntil('blink on the LED line', () => device.led!.transitions(since), (t) => t.length >= 4, { timeoutMs: 5_000 });
  expect(seen[0]!.value).toBe(1);
  const fleetWide = (await cloud!.call('POST', '/supervisor/v1/device', { appId: cloud!.fleet.id, method: 'GET' })) as Array<{ uuid: string; statusCode: number }>;
  expect(fleetWide).toEqual([expect.objectContaining({ uuid: device.api.identity.uuid, statusCode: 200 })]);
});

test('a partitioned device goes offline, and after the heal runs the release set meanwhile', { annotation: since('11.4.0', 'GET /v2/device/vpn') }, async ({ api, device, cloud }) => {
  await device.network!.partition();
  let releaseId = 0;
  try {
    await pollUntil('device offline in the cloud', () => deviceRow(cloud!, device.api.identity.uuid), (r) => r?.is_online === false, { timeoutMs: 30_000 });
    expect((await api.tags()).status).toBe(503);
    // The device notices by its own tunnel heartbeat (two missed pongs), as a board would.
    await pollUntil('the device sees its tunnel down', () => api.vpn(), (v) => v.body.vpn.connected === false, { timeoutMs: 20_000 });
    releaseId = await setRelease(cloud!, 'r2', 'fleetlab/test-app:2', device.api.identity.vendor);
  } finally {
    await device.network!.heal();
  }
  await pollUntil('release running after the heal', () => deviceRow(cloud!, device.api.identity.uuid), (r) => r?.is_running__release?.__id === releaseId && r.is_online, { timeoutMs: 120_000 });
  expect((await api.stateStatus()).body.release).toBe(String(releaseId));
});
