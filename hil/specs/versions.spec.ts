/**
 * Devices that answer as older supervisors (`test.use({ supervisorVersion })`), as an app on a
 * fleet's older boards meets them: the endpoints a version did not have are unknown routes, a
 * labelled service of a supervisor before 7.22.0 gets the legacy variable prefix, and before
 * 10.0 an update removes the volume its release dropped (docs/device-api.md, "Supervisor
 * versions"). The emulation is the supervisor's own; the sim project shows it (the version
 * matrix projects run other specs at other versions), FLEETLAB_HIL_VERSIONS_EVERYWHERE=1 on
 * every target.
 */
import { expect, pollUntil, since, test, type FleetCloud } from 'fleetlab/test';
import { APP_ID, twoServiceRelease, waitRunning } from '../lib/apps.js';

test.skip(({ target }) => target !== 'sim' && !process.env.FLEETLAB_HIL_VERSIONS_EVERYWHERE, 'the version emulation runs on the sim project (FLEETLAB_HIL_VERSIONS_EVERYWHERE=1: on every target)');
// Each block is a device of its own: the two workers share them.
test.describe.configure({ mode: 'parallel' });

test.describe('a device at 9.7.0', () => {
  test.use({ supervisorVersion: '9.7.0' });

  test('answers GET /v2/state/status, says 9.7.0 in /v1/device, and 404s what came later', async ({ api }) => {
    expect((await api.stateStatus()).body).toMatchObject({ status: 'success', appState: 'applied' });
    expect((await api.device()).body.supervisor_version).toBe('9.7.0');
    expect((await api.version()).body).toEqual({ status: 'success', version: '9.7.0' });
    for (const res of [await api.deviceName(), await api.journalLogs({ count: 1 }), await api.vpn()]) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ status: 'failed', message: expect.stringMatching(/^Not found: (GET|POST) \/v2\//) });
    }
    // Without a key, as any unknown path: 401.
    expect((await api.deviceName({ key: null })).status).toBe(401);
  });

  test('a test marked since(9.11.0) is skipped here, with the reason', { annotation: since('9.11.0', 'GET /v2/device/name') }, async () => {
    throw new Error('ran on a device older than its since()');
  });
});

test.describe('a device at 7.20.0', () => {
  test.use({ supervisorVersion: '7.20.0', withCloud: true });

  /** A one-service release with the supervisor-api label, set on the fleet (no local-mode API before 7.21). */
  async function setRelease(cloud: FleetCloud, vendor: string): Promise<void> {
    const fleet = cloud.fleet.id;
    const service = (await cloud.call('POST', '/v6/service', { application: fleet, service_name: 'main' })) as { id: number };
    const image = (await cloud.call('POST', '/v6/image', { is_a_build_of__service: service.id, is_stored_at__image_location: 'fleetlab/test-app:1', status: 'success' })) as { id: number };
    const composition = { services: { main: { labels: { [`io.${vendor}.features.supervisor-api`]: '1' } } } };
    const release = (await cloud.call('POST', '/v6/release', { belongs_to__application: fleet, commit: 'legacy1', status: 'success', composition })) as { id: number };
    await cloud.call('POST', '/v6/release_image', { image: image.id, is_part_of__release: release.id });
    await cloud.call('PATCH', `/v6/application(${fleet})`, { should_be_running__release: release.id });
  }

  test('has no GET /v2/version, and gives a labelled service its variables with the legacy prefix', async ({ api, device, cloud, needs }) => {
    needs('network');
    expect((await api.version()).status).toBe(404);
    expect((await api.localTargetState()).status).toBe(404);
    await setRelease(cloud!, device.api.identity.vendor);
    // GET /v1/apps/:appId (1.8) shows a single-service app's environment.
    const app = await pollUntil('the release running, its container made', () => api.appV1(cloud!.fleet.id), (r) => r.status === 200 && r.body.containerId !== '', { timeoutMs: 90_000 });
    const env = app.body.env;
    const V = device.api.identity.vendor.toUpperCase();
    expect(env).toMatchObject({ RESIN_SUPERVISOR_PORT: expect.any(String), RESIN_SUPERVISOR_API_KEY: expect.any(String), RESIN_APP_ID: String(cloud!.fleet.id) });
    expect(env.RESIN_SUPERVISOR_ADDRESS).toMatch(/^http:\/\//);
    expect(env[`${V}_SUPERVISOR_ADDRESS`]).toBeUndefined();
    expect(env[`${V}_DEVICE_UUID`]).toBe(device.api.identity.uuid);
  });
});

/** Release 2 drops the `data` volume of release 1's `main`. */
function withoutVolume(vendor: string) {
  const release = twoServiceRelease(vendor, { releaseId: 2 });
  release.apps[String(APP_ID)]!.services['11']!.volumes = [];
  release.apps[String(APP_ID)]!.volumes = {};
  return release;
}

for (const [version, removed] of [['9.11.0', true], ['10.0.0', false]] as const) {
  test.describe(`a device at ${version}`, () => {
    test.use({ supervisorVersion: version });

    test(`an update ${removed ? 'removes' : 'keeps'} the volume its release no longer declares`, async ({ api, device, needs }) => {
      needs('files', 'files.volumes');
      const vendor = device.api.identity.vendor;
      expect((await api.setLocalTargetState(twoServiceRelease(vendor))).status).toBe(200);
      await waitRunning(api, '1', ['main', 'worker']);
      expect(await device.files!.volumePath!(APP_ID, 'data')).toBeTruthy();
      expect((await api.setLocalTargetState(withoutVolume(vendor))).status).toBe(200);
      await waitRunning(api, '2', ['main', 'worker']);
      expect(Boolean(await device.files!.volumePath!(APP_ID, 'data'))).toBe(!removed);
    });
  });
}
