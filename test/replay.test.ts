/**
 * Capture a broken device, replay the bundle on a fresh device of the same target (issue 14):
 * the replay shows the same `/v2/state/status`, the same containers and the same stuck point
 * as the original, for three states a field device gets stuck in: an update waiting on a lock
 * the app holds, a service in a crash loop after a power cut, and an image pull that keeps
 * failing. On the sim target each device has a simulated engine of its own; on the container
 * target both run on the host's dockerd, one after the other, as `fleetlab replay --engine
 * docker` inside the device's container.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readBundle } from '../hil/capture/bundle.js';
import { captureDevice } from '../hil/capture/capture.js';
import { replayOnSim } from '../hil/capture/replay.js';
import { runReplay } from '../hil/harness/capture-command.js';
import { fileURLToPath } from 'node:url';
import { replaySpec } from '../hil/capture/replay-spec.js';
import { containerTarget } from '../hil/targets/container.js';
import type { DeviceUnderTest } from '../device-access/protocols.js';
import { simTarget } from '../hil/targets/sim.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { eventually } from './helpers/engine-targets.js';
import { freePort } from '../src/free-port.js';
import WebSocket from 'ws';

process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';

let dir: string;
const started: DeviceUnderTest[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-replay-test-'));
});
afterEach(async () => {
  await Promise.all(started.splice(0).map((d) => d.close()));
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

interface Status {
  appState: string;
  release?: string;
  containers: Array<{ appId: number; serviceName: string; status: string; imageId: number }>;
  images: Array<{ name: string; status: string; downloadError?: string }>;
}

async function call<T>(device: DeviceUnderTest, method: string, path: string, body?: unknown): Promise<T> {
  const res = await device.api.request(method, path, body === undefined ? {} : { body });
  if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${res.text}`);
  return res.json<T>();
}

/**
 * The status without what differs between any two devices (ids, times, download percentages)
 * or from one instant to the next (a failed pull's error, gone while its retry runs).
 */
async function stuckStatus(device: DeviceUnderTest): Promise<string[]> {
  const s = await call<Status>(device, 'GET', '/v2/state/status');
  return [
    `appState ${s.appState}`,
    `release ${s.release}`,
    ...s.containers.map((c) => `container ${c.appId}/${c.serviceName} ${c.status} image ${c.imageId}`).sort(),
    ...s.images.map((i) => `image ${i.name} ${i.status}`).sort(),
  ];
}

/** The images whose last pull failed, with why. */
async function failingPulls(device: DeviceUnderTest): Promise<string[] | undefined> {
  const s = await call<Status>(device, 'GET', '/v2/state/status');
  const failing = s.images.filter((i) => i.downloadError).map((i) => i.name);
  return failing.length ? failing : undefined;
}

/** The device's engine, as the capture reaches it. */
const engineOf = (device: DeviceUnderTest) => new Docker({ socketPath: device.paths!.dockerHost!.replace(/^unix:\/\//, '') });
const filtersOf = (device: DeviceUnderTest, ...more: string[]) => ({ label: [`${LABEL.device}=${device.api.identity.uuid}`, ...more] });

/** The device's containers as its engine has them: name, service, release, state. */
async function engineContainers(device: DeviceUnderTest): Promise<string[]> {
  const list = await engineOf(device).listContainers({ all: true, filters: filtersOf(device) });
  return list.map((c) => `${c.Names[0]} ${c.Labels[LABEL.serviceName]} release ${c.Labels[LABEL.releaseId]} ${c.State === 'restarting' ? 'running' : c.State}`).sort();
}

const until = <T>(what: string, fn: () => Promise<T | undefined>, ms = 60_000) => eventually(fn, ms, what);

const applied = (device: DeviceUnderTest, containers: number) =>
  until('the target applied', async () => {
    const s = await call<Status>(device, 'GET', '/v2/state/status');
    return s.appState === 'applied' && s.containers.length === containers && s.containers.every((c) => c.status === 'Running') ? s : undefined;
  });

const logSays = (device: DeviceUnderTest, pattern: RegExp) =>
  until(`the supervisor's log saying ${pattern}`, async () => (pattern.test(await device.supervisorLog()) ? true : undefined));

const lockFile = (device: DeviceUnderTest, service: string) => `${device.paths!.lockRoot}/1/${service}/updates.lock`;

const app = (image: string): Service => ({ serviceName: 'main', serviceId: 11, imageId: image.endsWith(':2') ? 102 : 101, image, volumes: ['data:/data'] });
const worker: Service = { serviceName: 'worker', serviceId: 12, imageId: 103, image: 'fleetlab/test-app:1', environment: { API_TOKEN: 'tok-never-in-bundles-123' } };
const crasher: Service = { serviceName: 'crasher', serviceId: 13, imageId: 104, image: 'fleetlab/test-app:1', command: ['sh', '-c', 'echo starting; sleep 1; exit 3'], restart: 'always' };
// Port 9 (discard) on loopback: no registry answers, on dockerd as on the simulated engine.
const unpullable = '127.0.0.1:9/fleetlab/field-app:2';

/**
 * The device's shell, with its clock read as a board whose clock is `seconds` ahead would print
 * it (this host's clock cannot be set for one device).
 */
function clockAhead(exec: NonNullable<DeviceUnderTest['exec']>, seconds: number): NonNullable<DeviceUnderTest['exec']> {
  return {
    ...exec,
    run: (argv, o) => exec.run(argv[0] === 'sh' && argv[2]?.startsWith('date -u') ? ['sh', '-c', `date -u -d @$(( $(date +%s) + ${seconds} )) +%Y-%m-%dT%H:%M:%S.%NZ; cat /proc/uptime`] : argv, o),
  };
}

/** The time of the supervisor's last log line (pino's `time`, from its wall clock). */
async function lastLogTime(device: DeviceUnderTest): Promise<number> {
  const lines = (await device.supervisorLog()).trim().split('\n').filter((l) => l.startsWith('{'));
  return (JSON.parse(lines.at(-1)!) as { time: number }).time;
}

interface Where {
  name: string;
  start(bundle?: string): Promise<DeviceUnderTest>;
}

const targets: Where[] = [
  { name: 'sim', start: (bundle) => simTarget.start({ engine: 'sim', ...(bundle ? { bundle } : {}) }) },
  { name: 'container', start: (bundle) => containerTarget.start(bundle ? { bundle } : {}) },
];

describe.each(targets)('replay on a fresh $name device', (where) => {
  async function startOriginal(): Promise<DeviceUnderTest> {
    const device = await where.start();
    started.push(device);
    return device;
  }

  async function captureAndReplay(original: DeviceUnderTest, name: string, options: { clockAheadS?: number } = {}) {
    const out = join(dir, `${where.name}-${name}.tar.gz`);
    const manifest = await captureDevice({
      out,
      source: { kind: 'api', address: original.api.identity.url },
      api: original.api,
      key: original.api.identity.apiKey,
      exec: options.clockAheadS ? clockAhead(original.exec!, options.clockAheadS) : original.exec!,
      paths: original.paths!,
      redaction: 'default',
      fleetlab: '0.0.0-test',
      volumeBytes: 1 << 20,
    });
    expect(manifest.steps.filter((s) => ['store', 'locks', 'engine', 'volumes'].includes(s.name)).map((s) => `${s.name} ${s.status}`)).toEqual(['store ok', 'locks ok', 'engine ok', 'volumes ok']);
    const before = { status: await stuckStatus(original), containers: await engineContainers(original) };
    // FLEETLAB_KEEP_BUNDLES=DIR keeps each bundle (the HIL suite's replay specs start from such bundles).
    if (process.env.FLEETLAB_KEEP_BUNDLES) copyFileSync(out, join(process.env.FLEETLAB_KEEP_BUNDLES, `${name}.bundle.tar.gz`));
    // The field device is gone: only the bundle is left.
    await original.close();
    const replayed = await where.start(out);
    started.push(replayed);
    expect(replayed.api.identity.uuid).toBe(original.api.identity.uuid);
    expect(replayed.api.identity.apiKey).not.toBe(original.api.identity.apiKey);
    return { before, replayed, bundle: out };
  }

  it('(a) an update waiting on a lock the app holds: waits on it again, and goes on once it is released', async () => {
    const original = await startOriginal();
    await call(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1'), worker]));
    await applied(original, 2);
    // What the app keeps in its volume travels with the bundle.
    const data = (await original.files!.volumePath!(1, 'data'))!;
    await original.files!.write(`${data}/readings/1.csv`, 't,v\n1,20.5\n');
    // The host as the field device had it: its name and its proxy (whose password no API shows).
    const hostConfig = { network: { hostname: 'field-pi-17', proxy: { type: 'socks5', ip: '10.0.0.9', port: '1080', login: 'fieldops', noProxy: ['10.0.0.0/8'] } } };
    await original.api.request('PATCH', '/v1/device/host-config', { body: { network: { ...hostConfig.network, proxy: { ...hostConfig.network.proxy, port: 1080, password: 'proxy-pw-never-in-bundles' } } } });
    // The worker's app takes its update lock, as an app does (the file's existence is the lock).
    await original.files!.write(lockFile(original, 'worker'), '');
    await call(original, 'POST', '/v2/local/target-state', target(2, [app('fleetlab/test-app:2'), worker]));
    await logSays(original, /Updates are locked for app 1/);

    const { before, replayed, bundle } = await captureAndReplay(original, 'locked');
    expect(await call(replayed, 'GET', '/v1/device/host-config')).toEqual(hostConfig);
    expect(before.status).toContain('appState applying');
    expect(before.containers.every((c) => c.includes('release 1 running'))).toBe(true);
    await logSays(replayed, /Updates are locked for app 1, retrying: .*service \\"worker\\"/);
    expect(await stuckStatus(replayed)).toEqual(before.status);
    expect(await engineContainers(replayed)).toEqual(before.containers);
    expect(await replayed.files!.exists(lockFile(replayed, 'worker'))).toBe(true);
    const replayedData = (await replayed.files!.volumePath!(1, 'data'))!;
    expect((await replayed.files!.read(`${replayedData}/readings/1.csv`)).toString()).toBe('t,v\n1,20.5\n');

    // The stuck point is live: once the app lets go, the replayed device updates.
    await replayed.files!.remove(lockFile(replayed, 'worker'));
    await until('the update after the lock is released', async () => {
      const containers = await engineContainers(replayed);
      return containers.length === 2 && containers.every((c) => c.includes('release 2 running')) ? true : undefined;
    }, 90_000);

    if (where.name === 'sim') {
      // The spec a developer starts from: release the app's lock, reach release 2, keep the volume.
      const spec = replaySpec(await readBundle(bundle), './locked.bundle.tar.gz');
      expect(spec).toContain("test.use({ fromBundle: './locked.bundle.tar.gz' });");
      expect(spec).toMatch(/ \*   update lock of service worker of app 1, held by the app: /);
      expect(spec).toContain("  await device.files!.remove(device.updateLockPath('worker', 1));\n  await device.waitForRelease({ releaseId: 2, services: ['main', 'worker'] }, { timeoutMs: 60_000 });");
      expect(spec).toContain("  expect(await device.files!.volumePath!(1, 'data'), 'volume data is kept').toBeTruthy();");
    }
  }, 300_000);

  it('(b) a service in a crash loop after a power cut: crash-loops again, and nothing is recreated', async () => {
    const original = await startOriginal();
    await call(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1'), crasher]));
    await applied(original, 2);
    await original.power!.cycle();
    const crasherOf = async (device: DeviceUnderTest) => {
      const [c] = await engineOf(device).listContainers({ all: true, filters: filtersOf(device, `${LABEL.serviceName}=crasher`) });
      return c ? engineOf(device).getContainer(c.Id).inspect() : undefined;
    };
    await until('the crasher restarting after the power cut', async () => (((await crasherOf(original))?.RestartCount ?? 0) >= 2 ? true : undefined));

    // This field device's clock ran two days ahead; the replayed supervisor's does too.
    const { before, replayed } = await captureAndReplay(original, 'crash-loop', { clockAheadS: 2 * 86_400 });
    await logSays(replayed, /listening on/);
    expect(await lastLogTime(replayed)).toBeGreaterThan(Date.now() + 2 * 86_400_000 - 60_000);
    const firstId = (await crasherOf(replayed))!.Id;
    await until('the replayed crasher restarting', async () => (((await crasherOf(replayed))?.RestartCount ?? 0) >= 2 ? true : undefined));
    // The same container keeps crashing: the supervisor took it for what the target wants.
    expect((await crasherOf(replayed))!.Id).toBe(firstId);
    expect(await replayed.supervisorLog()).not.toMatch(/Removing (main|crasher)|Installing (main|crasher)/);
    // The crasher's own line flips between running and exited as it loops: the rest must match.
    const steady = (lines: string[]) => lines.filter((l) => !/\bcrasher\b/.test(l));
    expect(steady(await stuckStatus(replayed))).toEqual(steady(before.status));
    expect(steady(await engineContainers(replayed))).toEqual(steady(before.containers));
    expect((await engineContainers(replayed)).filter((l) => /\bcrasher\b/.test(l))).toHaveLength(1);
  }, 300_000);

  it('(c) an image pull that keeps failing: fails again, and the old release keeps running', async () => {
    const original = await startOriginal();
    await call(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1')]));
    await applied(original, 1);
    await call(original, 'POST', '/v2/local/target-state', target(2, [app(unpullable)]));
    expect(await until('the pull failing', () => failingPulls(original))).toEqual([unpullable]);

    const { before, replayed } = await captureAndReplay(original, 'pull-failing');
    expect(before.status).toContain(`image ${unpullable} Downloading`);
    expect(await until('the replayed pull failing', () => failingPulls(replayed))).toEqual([unpullable]);
    expect(await stuckStatus(replayed)).toEqual(before.status);
    expect(await engineContainers(replayed)).toEqual(before.containers);
  }, 300_000);
});

describe('replay refuses what it cannot do', () => {
  it('--target container or qemu with what only a simulated device here takes: names the flags, starts nothing', async () => {
    const bundle = join(fileURLToPath(new URL('../hil/specs/bundles', import.meta.url)), 'locked.bundle.tar.gz');
    const base = { bundle, port: 0, engine: 'sim' as const, dockerSocket: '', listenAddress: '127.0.0.1' };
    await expect(runReplay({ ...base, target: 'container', paused: true, cloudPort: 0 })).rejects.toThrow('--paused, --cloud go with --target sim: the container target makes its own device');
    await expect(runReplay({ ...base, target: 'qemu', dataDir: '/tmp/x' })).rejects.toThrow('--data-dir goes with --target sim: the qemu target makes its own device');
    await expect(runReplay({ ...base, bundle: join(dir, 'no-such.tar.gz'), target: 'container' })).rejects.toThrow(/no-such\.tar\.gz/);
  });

  it('a bundle captured without a shell: names the step and how to capture', async () => {
    const original = await simTarget.start({ engine: 'sim' });
    started.push(original);
    const out = join(dir, 'api-only.tar.gz');
    await captureDevice({ out, source: { kind: 'api', address: original.api.identity.url }, api: original.api, key: original.api.identity.apiKey, redaction: 'default', fleetlab: '0.0.0-test' });
    await expect(replayOnSim({ bundle: out })).rejects.toThrow(/has no supervisor\/store\.json, which a replay starts from: the capture's "store" step failed: needs a shell on the device/);
  });

  it('a shared engine that runs the captured device already: says to stop it, and creates nothing', async () => {
    const original = await simTarget.start({ engine: 'sim' });
    started.push(original);
    const out = join(dir, 'still-running.tar.gz');
    await captureDevice({ out, source: { kind: 'api', address: original.api.identity.url }, api: original.api, key: original.api.identity.apiKey, exec: original.exec!, paths: original.paths!, redaction: 'default', fleetlab: '0.0.0-test' });
    await call(original, 'POST', '/v2/local/target-state', target(1, [app('fleetlab/test-app:1')]));
    await applied(original, 1);
    const socket = original.paths!.dockerHost!.replace(/^unix:\/\//, '');
    await expect(replayOnSim({ bundle: out, engine: 'docker', dockerSocket: socket })).rejects.toThrow(
      new RegExp(`the engine at ${socket} already has containers of device ${original.api.identity.uuid} \\(/\\w+_main_1\\): stop that device \\(the original, or an earlier replay\\) first`),
    );
    expect(await engineContainers(original)).toHaveLength(1);
  });
});

describe('replay --paused', () => {
  it('starts the supervisor stopped before its first line; it runs once a debugger lets it go', async () => {
    const original = await simTarget.start({ engine: 'sim' });
    started.push(original);
    const out = join(dir, 'paused.tar.gz');
    await captureDevice({ out, source: { kind: 'api', address: original.api.identity.url }, api: original.api, key: original.api.identity.apiKey, exec: original.exec!, paths: original.paths!, redaction: 'default', fleetlab: '0.0.0-test' });
    await original.close();

    const inspector = await freePort();
    const { device } = await replayOnSim({ bundle: out, inspectBrk: inspector });
    try {
      const ping = () => fetch(`${device.url}/ping`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status, () => 'no answer');
      await new Promise((r) => setTimeout(r, 1500));
      expect(await ping()).toBe('no answer');
      const [target] = (await eventually(async () => fetch(`http://127.0.0.1:${inspector}/json/list`).then((r) => r.json() as Promise<Array<{ webSocketDebuggerUrl: string }>>, () => undefined), 10_000, 'the inspector')) ?? [];
      // What a debugger does when the developer presses "continue".
      const ws = new WebSocket(target!.webSocketDebuggerUrl);
      await new Promise((resolve, reject) => (ws.once('open', resolve), ws.once('error', reject)));
      ws.send(JSON.stringify({ id: 1, method: 'Runtime.runIfWaitingForDebugger' }));
      expect(await eventually(async () => ((await ping()) === 200 ? 200 : undefined), 30_000, 'the supervisor answering')).toBe(200);
      ws.close();
    } finally {
      await device.stop();
    }
  }, 120_000);
});

