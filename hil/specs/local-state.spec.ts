/**
 * Local-mode target state (docs/device-api.md "Local mode", docs/decisions.md item 15): read before and
 * after a set, validation with 400s naming the field, and an apply observed as a user
 * sees it: `appState` going applying -> applied, recorded by polling.
 */
import { twoServiceRelease, waitRunning } from '../lib/apps.js';
import { expect, pollUntil, since, test, type StateStatus } from 'fleetlab/test';

test('GET /v2/local/target-state before any set: apps empty', { annotation: since('7.21.0', 'local mode endpoints') }, async ({ api }) => {
  const res = await api.localTargetState();
  expect(res.status).toBe(200);
  expect(res.body).toMatchObject({ status: 'success', state: { local: { apps: {} } } });
});

test('bad target states are a 400 naming the field; malformed JSON is a 400', { annotation: since('7.21.0', 'local mode endpoints') }, async ({ api, device }) => {
  const vendor = device.api.identity.vendor;
  const good = twoServiceRelease(vendor);
  const withService = (patch: Record<string, unknown>) => ({ ...good, apps: { '1': { ...good.apps['1']!, services: { '11': { ...good.apps['1']!.services['11']!, ...patch } } } } });
  const cases: Array<[string, unknown, RegExp]> = [
    ['no local', undefined, /local/],
    ['service without image', withService({ image: undefined }), /image/],
    ['serviceId not its key', withService({ serviceId: 99 }), /serviceId/],
    ['poll interval too short', { ...good, config: { SUPERVISOR_POLL_INTERVAL: '5' } }, /SUPERVISOR_POLL_INTERVAL/],
    ['app key not a number', { ...good, apps: { abc: good.apps['1'] } }, /apps/],
  ];
  for (const [what, local, message] of cases) {
    const res = await api.call<{ status: string; message: string }>('POST', '/v2/local/target-state', local === undefined ? {} : { local: JSON.parse(JSON.stringify(local)) });
    expect(res.status, what).toBe(400);
    expect(res.body.status, what).toBe('failed');
    expect(res.body.message, what).toMatch(message);
  }
  const malformed = await api.call<{ status: string; message: string }>('POST', '/v2/local/target-state', undefined, { rawBody: { contentType: 'application/json', data: '{"local":' } });
  expect(malformed.status).toBe(400);
  expect(malformed.body.message).toMatch(/JSON/i);
  expect((await api.localTargetState()).body.state.local.apps).toEqual({});
});

test('applying a release: appState applying -> applied, every service Running, the state reads back', { tag: '@smoke', annotation: since('9.11.0', 'GET /v2/device/name') }, async ({ api, device }) => {
  const release = twoServiceRelease(device.api.identity.vendor);
  const observed: StateStatus[] = [];
  const res = await api.setLocalTargetState(release);
  expect(res.status).toBe(200);
  expect(res.body).toEqual({ status: 'success', message: 'OK' });
  // Record what a user polling /v2/state/status sees, until it settles (bounded).
  const read = async () => {
    const s = (await api.stateStatus()).body;
    observed.push(s);
    return s;
  };
  const settled = (s: StateStatus) => s.appState === 'applied' && s.containers.filter((c) => c.status === 'Running').length === 2;
  // Not settling in time is left to the expects below, which say what was seen.
  await pollUntil('the release settles', read, settled, { timeoutMs: 90_000, intervalMs: 50 }).catch(() => undefined);
  const states = observed.map((s) => s.appState).filter((s, i, all) => i === 0 || all[i - 1] !== s);
  test.info().annotations.push({ type: 'observed appState', description: states.join(' -> ') });
  expect(states.at(-1)).toBe('applied');
  // applying is seen unless the whole apply finished between the POST and the first poll.
  expect(states.length === 1 || (states[0] === 'applying' && states.at(-1) === 'applied')).toBe(true);
  expect(states.filter((s) => s === 'applied').length).toBe(1);
  const progress = observed.map((s) => s.overallDownloadProgress).filter((p): p is number => typeof p === 'number');
  if (device.facts?.imagesArePulled) {
    // Images come from a registry: progress is reported and never goes down.
    expect(progress.length).toBeGreaterThan(0);
    for (let i = 1; i < progress.length; i++) expect(progress[i]!).toBeGreaterThanOrEqual(progress[i - 1]!);
  } else {
    // With a local image store (the docker engine, images built here) nothing is downloaded,
    // so no progress is shown; the simulated engine's registry is where progress is asserted.
    test.info().annotations.push({ type: 'note', description: `engine ${device.facts?.engine ?? 'unknown'}: images are local, download progress not asserted` });
  }
  const final = observed.at(-1)!;
  expect(final.status).toBe('success');
  expect(final.release).toBe('1');
  expect(final.overallDownloadProgress).toBeNull();
  for (const c of final.containers) {
    expect(Object.keys(c).sort()).toEqual(['appId', 'containerId', 'createdAt', 'imageId', 'serviceId', 'serviceName', 'status']);
    expect(Number.isNaN(Date.parse(c.createdAt))).toBe(false);
  }
  expect(final.images.map((i) => i.name).sort()).toEqual(['fleetlab/test-app:1', 'fleetlab/test-app:2']);
  for (const i of final.images) expect(i).toMatchObject({ status: 'Downloaded', downloadProgress: null, engineImageId: expect.any(String) });

  const back = (await api.localTargetState()).body.state.local;
  expect(back.apps['1']!.services['11']!.image).toBe('fleetlab/test-app:1');
  expect(back.name).toBe('hil-device');
  expect((await api.device()).body).toMatchObject({ status: 'Idle', commit: 'commit1', update_pending: false, update_failed: false, download_progress: null });
  expect((await api.deviceName()).body.deviceName).toBe('hil-device');
});

test('a new release replaces the containers and reports the new commit', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device }) => {
  const vendor = device.api.identity.vendor;
  expect((await api.setLocalTargetState(twoServiceRelease(vendor))).status).toBe(200);
  const first = await waitRunning(api, '1', ['main', 'worker']);
  expect((await api.setLocalTargetState(twoServiceRelease(vendor, { releaseId: 2, mainImage: 'fleetlab/test-app:2' }))).status).toBe(200);
  const second = await waitRunning(api, '2', ['main', 'worker']);
  const id = (s: StateStatus, name: string) => s.containers.find((c) => c.serviceName === name)?.containerId;
  expect(id(second, 'main')).not.toBe(id(first, 'main'));
  expect((await api.applicationsState()).body.hilapp).toMatchObject({ appId: 1, commit: 'commit2', services: { main: { status: 'Running', releaseId: 2, downloadProgress: null } } });
});

test('HOST_CONFIG_* values are written to the boot config.txt, other lines kept, removed when unset', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device, needs }) => {
  needs('files');
  const paths = device.api.identity.hostPaths;
  test.skip(!paths, `target ${device.target} cannot tell where the boot config lives`);
  const files = device.files!;
  const vendor = device.api.identity.vendor;
  const before = (await files.exists(paths!.bootConfig)) ? (await files.read(paths!.bootConfig)).toString() : '';
  await files.write(paths!.bootConfig, `${before}kernel=own.img\n`);
  const res = await api.setLocalTargetState(twoServiceRelease(vendor, { config: { HOST_CONFIG_gpu_mem: '64', HOST_CONFIG_dtparam: '"i2c_arm=on","spi=on"' } }));
  expect(res.status).toBe(200);
  const text = await pollUntil('config.txt written', async () => (await files.read(paths!.bootConfig)).toString(), (t) => t.includes('gpu_mem=64'), { timeoutMs: 20_000 });
  expect(text.split('\n')).toEqual(expect.arrayContaining(['kernel=own.img', 'gpu_mem=64', 'dtparam="i2c_arm=on","spi=on"']));
  expect((await api.setLocalTargetState(twoServiceRelease(vendor))).status).toBe(200);
  const after = await pollUntil('config.txt cleaned', async () => (await files.read(paths!.bootConfig)).toString(), (t) => !t.includes('gpu_mem'), { timeoutMs: 20_000 });
  expect(after.split('\n')).toContain('kernel=own.img');
});

test('leaving local mode: local endpoints then need a key and refuse a new target state', { annotation: since('7.21.0', 'local mode endpoints') }, async ({ api, device }) => {
  const vendor = device.api.identity.vendor;
  expect((await api.setLocalTargetState(twoServiceRelease(vendor, { config: { SUPERVISOR_LOCAL_MODE: '0' } }))).status).toBe(200);
  await pollUntil('local endpoints closed', () => api.localTargetState({ key: null }).then((r) => r.status), (s) => s === 401, { timeoutMs: 10_000 });
  expect((await api.localTargetState()).status).toBe(200);
  const refused = await api.setLocalTargetState(twoServiceRelease(vendor));
  expect(refused.status).toBe(400);
  expect(refused.body.message).toMatch(/local mode/);
});
