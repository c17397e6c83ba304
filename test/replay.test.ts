/**
 * Capture a broken device, replay the bundle on a fresh simulated device (issue 14): the
 * replay shows the same `/v2/state/status`, the same containers and the same stuck point as
 * the original, for three states a field device gets stuck in: an update waiting on a lock the
 * app holds, a service in a crash loop after a power cut, and an image pull that keeps failing.
 * Each original runs on its own simulated engine; each replay on another, fresh one.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { captureDevice } from '../hil/capture/capture.js';
import { readBundle } from '../hil/capture/bundle.js';
import { replayOnSim } from '../hil/capture/replay.js';
import { replaySpec } from '../hil/capture/replay-spec.js';
import { httpApi } from '../hil/lib/http.js';
import { hostShell } from '../hil/targets/host-shell.js';
import { SimDevice } from '../sim/device.js';
import { LABEL } from '../src/supervisor/adapters/engine.js';
import { eventually } from './helpers/engine-targets.js';

let dir: string;
const started: SimDevice[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-replay-test-'));
});
afterEach(async () => {
  await Promise.all(started.splice(0).map((d) => d.stop()));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

type Service = { serviceName: string; serviceId: number; imageId: number; image: string; environment?: Record<string, string>; labels?: Record<string, string>; command?: string[]; restart?: string; volumes?: string[] };

function target(release: number, services: Service[]) {
  return {
    local: {
      name: 'field-device',
      config: { SUPERVISOR_LOCAL_MODE: '1' },
      apps: {
        '1': {
          name: 'fieldapp',
          commit: `commit${release}`,
          releaseId: String(release),
          services: Object.fromEntries(services.map((s) => [String(s.serviceId), { environment: {}, labels: {}, ...s }])),
          volumes: { data: {} },
          networks: {},
        },
      },
    },
  };
}

async function api<T>(device: { url: string; key: string }, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${device.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${device.key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

async function startOriginal(): Promise<{ sim: SimDevice; url: string; key: string }> {
  const sim = await SimDevice.start({ port: 0, engine: 'sim', dockerSocket: '', localMode: true });
  started.push(sim);
  return { sim, url: sim.url, key: sim.info().apiKey };
}

interface Status {
  appState: string;
  release?: string;
  containers: Array<{ appId: number; serviceName: string; status: string; imageId: number }>;
  images: Array<{ name: string; status: string; downloadError?: string }>;
}

/** The status without what differs between any two devices (ids, times, download percentages). */
async function stuckStatus(device: { url: string; key: string }): Promise<string[]> {
  const s = await api<Status>(device, 'GET', '/v2/state/status');
  return [
    `appState ${s.appState}`,
    `release ${s.release}`,
    ...s.containers.map((c) => `container ${c.appId}/${c.serviceName} ${c.status} image ${c.imageId}`).sort(),
    ...s.images.map((i) => `image ${i.name} ${i.status}${i.downloadError ? ' failing' : ''}`).sort(),
  ];
}

/** The device's containers as its engine has them: name, service, release, state. */
async function engineContainers(sim: SimDevice): Promise<string[]> {
  const docker = new Docker({ socketPath: sim.options.dockerSocket });
  const list = await docker.listContainers({ all: true, filters: { label: [`${LABEL.device}=${sim.info().uuid}`] } });
  return list.map((c) => `${c.Names[0]} ${c.Labels[LABEL.serviceName]} release ${c.Labels[LABEL.releaseId]} ${c.State === 'restarting' ? 'running' : c.State}`).sort();
}

const until = <T>(what: string, fn: () => Promise<T | undefined>, ms = 30_000) => eventually(fn, ms, what);

const applied = (device: { url: string; key: string }, containers: number) =>
  until('the target applied', async () => {
    const s = await api<Status>(device, 'GET', '/v2/state/status');
    return s.appState === 'applied' && s.containers.length === containers && s.containers.every((c) => c.status === 'Running') ? s : undefined;
  });

const logSays = (sim: SimDevice, pattern: RegExp) =>
  until(`the supervisor's log saying ${pattern}`, async () => (pattern.test(readFileSync(sim.supervisorLog, 'utf8')) ? true : undefined));

async function captureAndReplay(original: { sim: SimDevice; url: string; key: string }, name: string) {
  const out = join(dir, `${name}.tar.gz`);
  const manifest = await captureDevice({
    out,
    source: { kind: 'api', address: original.url },
    api: httpApi({ url: original.url, apiKey: original.key, uuid: '', vendor: '', lockRoot: '' }),
    key: original.key,
    exec: hostShell,
    paths: original.sim.paths,
    redaction: 'default',
    fleetlab: '0.0.0-test',
  });
  expect(manifest.steps.filter((s) => ['store', 'locks', 'engine'].includes(s.name)).map((s) => `${s.name} ${s.status}`)).toEqual(['store ok', 'locks ok', 'engine ok']);
  const before = { status: await stuckStatus(original), containers: await engineContainers(original.sim) };
  // The field device is gone: only the bundle is left.
  await original.sim.stop();
  const notes: string[] = [];
  const { device } = await replayOnSim({ bundle: out, log: (line) => notes.push(line) });
  started.push(device);
  const replayed = { sim: device, url: device.url, key: device.info().apiKey };
  expect(device.info().uuid).toBe(original.sim.info().uuid);
  expect(replayed.key).not.toBe(original.key);
  return { before, replayed, notes };
}

const app = (image: string): Service => ({ serviceName: 'main', serviceId: 11, imageId: image.endsWith(':2') ? 102 : 101, image, volumes: ['data:/data'] });
const worker: Service = { serviceName: 'worker', serviceId: 12, imageId: 103, image: 'fleetlab/test-app:1', environment: { API_TOKEN: 'tok-never-in-bundles-123' } };

describe('replay of a captured device on a fresh simulated device', () => {
  it('(a) an update waiting on a lock the app holds: waits on it again, and goes on once it is released', async () => {
    const original = await startOriginal();
    await api(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1'), worker]));
    await applied(original, 2);
    // The worker's app takes its update lock, as an app does (O_EXCL, empty).
    const lockDir = join(original.sim.lockRoot, '1', 'worker');
    mkdirSync(lockDir, { recursive: true });
    writeFileSync(join(lockDir, 'updates.lock'), '', { flag: 'wx' });
    await api(original, 'POST', '/v2/local/target-state', target(2, [app('fleetlab/test-app:2'), worker]));
    await logSays(original.sim, /Updates are locked for app 1/);

    const { before, replayed, notes } = await captureAndReplay(original, 'locked');
    expect(before.status).toContain('appState applying');
    expect(before.containers.every((c) => c.includes('release 1 running'))).toBe(true);
    await logSays(replayed.sim, /Updates are locked for app 1, retrying: .*service \\"worker\\"/);
    expect(await stuckStatus(replayed)).toEqual(before.status);
    expect(await engineContainers(replayed.sim)).toEqual(before.containers);
    expect(notes.join('\n')).toMatch(/lock files: .*\/locks\/1\/worker\/updates\.lock/);

    // The spec a developer starts from: release the app's lock, reach release 2, keep the volume.
    const spec = replaySpec(await readBundle(join(dir, 'locked.tar.gz')), './locked.bundle.tar.gz');
    expect(spec).toContain("test.use({ fromBundle: './locked.bundle.tar.gz' });");
    expect(spec).toMatch(/ \*   update lock of service worker of app 1, held by the app: /);
    expect(spec).toContain("  await device.files!.remove(device.updateLockPath('worker', 1));\n  await device.waitForRelease({ releaseId: 2, services: ['main', 'worker'] }, { timeoutMs: 60_000 });");
    expect(spec).toContain("  expect(await device.files!.volumePath!(1, 'data'), 'volume data is kept').toBeTruthy();");

    // The stuck point is live: once the app lets go, the replayed device updates.
    rmSync(join(replayed.sim.lockRoot, '1', 'worker', 'updates.lock'));
    await until('the update after the lock is released', async () => {
      const containers = await engineContainers(replayed.sim);
      return containers.length === 2 && containers.every((c) => c.includes('release 2 running')) ? true : undefined;
    }, 60_000);
  }, 120_000);

  it('(b) a service in a crash loop after a power cut: crash-loops again, and nothing is recreated', async () => {
    const original = await startOriginal();
    const crasher: Service = { serviceName: 'crasher', serviceId: 13, imageId: 104, image: 'fleetlab/test-app:1', command: ['sh', '-c', 'echo starting; sleep 1; exit 3'], restart: 'always' };
    await api(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1'), crasher]));
    await applied(original, 2);
    await original.sim.reboot();
    const crasherOf = async (sim: SimDevice) => {
      const docker = new Docker({ socketPath: sim.options.dockerSocket });
      const list = await docker.listContainers({ all: true, filters: { label: [`${LABEL.serviceName}=crasher`] } });
      return list[0] ? await docker.getContainer(list[0].Id).inspect() : undefined;
    };
    await until('the crasher restarting after the power cut', async () => ((await crasherOf(original.sim))?.RestartCount ?? 0) >= 2 ? true : undefined);

    const { before, replayed } = await captureAndReplay(original, 'crash-loop');
    const firstId = (await crasherOf(replayed.sim))!.Id;
    await until('the replayed crasher restarting', async () => ((await crasherOf(replayed.sim))?.RestartCount ?? 0) >= 2 ? true : undefined);
    // The same container keeps crashing: the supervisor took it for what the target wants.
    expect((await crasherOf(replayed.sim))!.Id).toBe(firstId);
    expect(readFileSync(replayed.sim.supervisorLog, 'utf8')).not.toMatch(/Removing (main|crasher)|Installing (main|crasher)/);
    expect(await stuckStatus(replayed)).toEqual(before.status);
    expect(await engineContainers(replayed.sim)).toEqual(before.containers);
  }, 120_000);

  it('(c) an image pull that keeps failing: fails again, and the old release keeps running', async () => {
    const original = await startOriginal();
    await api(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1')]));
    await applied(original, 1);
    await api(original, 'POST', '/v2/local/target-state', target(2, [app('fleetlab/field-app:2')]));
    await until('the pull failing', async () => ((await stuckStatus(original)).some((l) => l.endsWith('failing')) ? true : undefined));

    const { before, replayed, notes } = await captureAndReplay(original, 'pull-failing');
    expect(before.status).toContain('image fleetlab/field-app:2 Downloading failing');
    await until('the replayed pull failing', async () => ((await stuckStatus(replayed)).some((l) => l.endsWith('failing')) ? true : undefined));
    expect(await stuckStatus(replayed)).toEqual(before.status);
    expect(await engineContainers(replayed.sim)).toEqual(before.containers);
    expect(notes.join('\n')).toMatch(/images the device did not have, not there either: fleetlab\/field-app:2/);
  }, 120_000);
});

describe('replay refuses a bundle it cannot start from', () => {
  it('one captured without a shell names the step and how to capture', async () => {
    const original = await startOriginal();
    const out = join(dir, 'api-only.tar.gz');
    await captureDevice({
      out,
      source: { kind: 'api', address: original.url },
      api: httpApi({ url: original.url, apiKey: original.key, uuid: '', vendor: '', lockRoot: '' }),
      key: original.key,
      redaction: 'default',
      fleetlab: '0.0.0-test',
    });
    await expect(replayOnSim({ bundle: out })).rejects.toThrow(/has no supervisor\/store\.json, which a replay starts from: the capture's "store" step failed: needs a shell on the device/);
    expect(existsSync(out)).toBe(true);
  });
});
