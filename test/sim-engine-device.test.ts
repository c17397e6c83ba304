/**
 * The real supervisor over the simulated engine: a simulated device started with
 * `engine: 'sim'` (no dockerd involved). Pulls from the simulated registry exercise the
 * supervisor's download path (`Downloading` with progress), and faults injected into the
 * engine (a pull failing midway, a crash loop, an engine restart, a full disk) show up in
 * what the supervisor reports and recover once lifted.
 */
import { readFileSync } from 'node:fs';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { SimDevice } from '../sim/device.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { dockerSocket, twoServiceState } from './helpers/supervisor-fixture.js';
import { eventually } from './helpers/engine-targets.js';
import { deviceHttp } from './helpers/device-http.js';

let device: SimDevice;
let url: string;
let key: string;
let docker: Docker;

beforeAll(async () => {
  device = await SimDevice.start({
    port: 0,
    engine: 'sim',
    dockerSocket,
    localMode: true,
    // ≈4 MB to fetch for the first release: about 4 s at this rate, so progress is observable.
    bandwidth: 1_000_000,
    scenario: { pulls: [{ image: 'fleetlab/test-app:1', failAfterBytes: 400_000, message: 'simulated: connection reset by peer', times: 1 }] },
  });
  ({ url, apiKey: key } = device.info());
  docker = new Docker({ socketPath: device.simEngine!.socketPath });
});
afterAll(async () => {
  await device?.stop();
});

const api = deviceHttp(() => ({ url, key }));

type ServiceState = { status: string; releaseId: number; downloadProgress: number | null };

async function services(): Promise<Record<string, ServiceState>> {
  return (await api('GET', '/v2/applications/state')).json().myapp?.services ?? {};
}

async function waitAllRunning(releaseId: number, timeoutMs = 60_000) {
  return eventually(async () => {
    const s = await services();
    const all = Object.values(s);
    return all.length === 2 && all.every((x) => x.status === 'Running' && x.releaseId === releaseId) ? s : undefined;
  }, timeoutMs, `release ${releaseId} running`);
}

async function workerContainer() {
  const [c] = await docker.listContainers({ all: true, filters: { label: [`${LABEL.serviceName}=worker`, `${LABEL.device}=${device.info().uuid}`] } });
  if (!c) throw new Error('no worker container');
  return docker.getContainer(c.Id);
}

describe('supervisor over the simulated engine', () => {
  it('runs without dockerd: the engine socket lives in the device data dir', async () => {
    expect(device.simEngine!.socketPath.startsWith(device.info().dataDir)).toBe(true);
    expect((await docker.version()).Version).toMatch(/fleetlab-sim/);
  });

  it('pulls a two-service release: Downloading with progress, a failed pull is retried, then Running', async () => {
    const res = await api('POST', '/v2/local/target-state', { local: twoServiceState() });
    expect(res.status).toBe(200);
    const progress = new Set<number>();
    await eventually(async () => {
      const s = await services();
      for (const x of Object.values(s)) if (x.status === 'Downloading' && x.downloadProgress !== null) progress.add(x.downloadProgress);
      const all = Object.values(s);
      return all.length === 2 && all.every((x) => x.status === 'Running') ? true : undefined;
    }, 90_000, 'release 1 running');
    // Several distinct percentages: progress advanced while the bytes moved.
    expect(progress.size).toBeGreaterThanOrEqual(2);
    expect([...progress].every((p) => p >= 0 && p <= 100)).toBe(true);
    // The injected failure was reported with its cause...
    const log = readFileSync(device.supervisorLog, 'utf8');
    expect(log).toMatch(/Failed to download image fleetlab\/test-app:1: container engine: pulling fleetlab\/test-app:1 failed: simulated: connection reset by peer/);
    expect(log).toMatch(/apply failed: could not download fleetlab\/test-app:1 \(service \w+ of app 1\): .*connection reset by peer/);
    // ...and retried: the same image downloaded afterwards.
    expect(log.indexOf('Downloaded image fleetlab/test-app:1')).toBeGreaterThan(log.indexOf('connection reset by peer'));
    expect((await docker.getImage('fleetlab/test-app:1').inspect()).RepoTags).toContain('fleetlab/test-app:1');
  }, 120_000);

  it("the labelled service joins the supervisor network, balena's, besides its app network, and is told the gateway", async () => {
    const uuid = device.info().uuid;
    const [net] = (await docker.listNetworks({ filters: { name: ['supervisor0'] } })).filter((n) => n.Name === 'supervisor0');
    expect(net?.IPAM?.Config).toEqual([{ Subnet: '10.114.104.0/25', Gateway: '10.114.104.1' }]);
    expect(net?.Labels).toMatchObject({ [LABEL.device]: uuid, [LABEL.supervisorNetwork]: 'true' });
    expect(net?.Options).toEqual({ 'com.docker.network.bridge.enable_icc': 'false', 'com.docker.network.bridge.name': 'supervisor0' });
    const mainId = (await api('GET', '/v2/containerId?service=main')).json().containerId as string;
    const main = await docker.getContainer(mainId).inspect();
    const port = new URL(url).port;
    expect(main.Config.Env).toEqual(expect.arrayContaining([`PLATFORM_SUPERVISOR_ADDRESS=http://10.114.104.1:${port}`, 'PLATFORM_SUPERVISOR_HOST=10.114.104.1', `PLATFORM_SUPERVISOR_PORT=${port}`]));
    const endpoints = main.NetworkSettings.Networks;
    expect(Object.keys(endpoints).sort()).toEqual([`${uuid.slice(0, 7)}_1_default`, 'supervisor0']);
    // Its service name is an alias on its app's network only: the supervisor network is every app's.
    expect(endpoints.supervisor0).toMatchObject({ Aliases: [mainId.slice(0, 12)], Gateway: '10.114.104.1', IPPrefixLen: 25 });
    expect(endpoints[`${uuid.slice(0, 7)}_1_default`]?.Aliases).toContain('main');
    expect(endpoints.supervisor0?.IPAddress).toMatch(/^10\.114\.104\.(\d|[1-9]\d|1[01]\d|12[0-6])$/);
    const workerId = (await api('GET', '/v2/containerId?service=worker')).json().containerId as string;
    expect(Object.keys((await docker.getContainer(workerId).inspect()).NetworkSettings.Networks)).toEqual([`${uuid.slice(0, 7)}_1_default`]);
    // Nothing on a simulated network can call: its gateway is no address of this host.
    expect(readFileSync(device.supervisorLog, 'utf8')).toMatch(/Device API not on the supervisor network's gateway 10\.114\.104\.1: no such address on this host/);
  });

  it('journals simulated container output through the same Engine API', async () => {
    const containerId = (await api('GET', '/v2/containerId?service=worker')).json().containerId as string;
    let text = '';
    for (let i = 0; i < 50 && !/tick/.test(text); i++) {
      text = (await api('POST', '/v2/journal-logs', { containerId, format: 'cat', count: 5 })).text;
      if (!/tick/.test(text)) await new Promise((r) => setTimeout(r, 200));
    }
    expect(text).toMatch(/test-app v2: tick/);
  });

  it('a crash loop shows in the engine (restart count grows) and ends when the fault is lifted', async () => {
    device.simEngine!.addContainerFault({ match: { label: `${LABEL.serviceName}=worker` }, exitCode: 3, afterMs: 200 });
    const worker = await workerContainer();
    await worker.kill({ signal: 'SIGTERM' });
    const looping = await eventually(async () => {
      const i = await worker.inspect();
      return i.RestartCount >= 3 ? i : undefined;
    }, 30_000, 'restart count >= 3');
    expect(looping.HostConfig.RestartPolicy?.Name).toBe('always');
    const status = (await api('GET', '/v2/state/status')).json();
    expect(status.containers.find((c: { serviceName: string }) => c.serviceName === 'worker')).toBeDefined();
    device.simEngine!.clearFaults();
    const settled = await eventually(async () => {
      const i = await worker.inspect();
      return i.State.Running && !i.State.Restarting && Date.now() - Date.parse(i.State.StartedAt) > 1500 ? i : undefined;
    }, 90_000, 'worker runs steadily again');
    expect(settled.State.ExitCode).toBe(0);
    await waitAllRunning(1);
  }, 150_000);

  it('an engine restart stops the containers; they come back by restart policy and the supervisor reconnects', async () => {
    const before = (await (await workerContainer()).inspect()).State.StartedAt;
    await device.simEngine!.restartEngine({ downMs: 1000 });
    const after = await eventually(async () => {
      const i = await (await workerContainer()).inspect();
      return i.State.Running && i.State.StartedAt !== before ? i : undefined;
    }, 30_000, 'worker restarted with the engine');
    expect(after.State.Running).toBe(true);
    await waitAllRunning(1);
  }, 60_000);

  it('a reboot through login1 restarts the engine with the OS; the release comes back', async () => {
    const engineBefore = device.simEngine!.engine;
    const rebooted = new Promise<void>((r) => device.once('reboot', () => r()));
    expect((await api('POST', '/v1/reboot')).status).toBe(202);
    await rebooted;
    expect(device.simEngine!.engine).not.toBe(engineBefore);
    await waitAllRunning(1);
    // The supervisor stopped by the reboot it asked for says so, not that the reboot failed.
    expect(readFileSync(device.supervisorLog, 'utf8')).not.toMatch(/reboot failed/);
  }, 90_000);

  it('a full disk fails the next pull; the supervisor reports it and converges once space is back', async () => {
    device.simEngine!.setDiskFull(true);
    // A failure here must not leave the disk full for the specs after this one.
    onTestFinished(() => device.simEngine!.setDiskFull(false));
    const state = twoServiceState({ releaseId: 2 });
    const worker = state.apps['1']!.services['12']!;
    worker.image = 'busybox:latest';
    worker.command = ['sleep', '3600'];
    expect((await api('POST', '/v2/local/target-state', { local: state })).status).toBe(200);
    // The log line reaches its file through the device's stdout pipe, and another step (a
    // container create on the full disk) may fail the round before the pull does: wait for both.
    const pullFailed = /pulling busybox:latest failed: write \/var\/lib\/docker\/tmp\/GetImageBlob\d+: no space left on device/;
    await eventually(async () => {
      const failed = (await api('GET', '/v1/device')).json().update_failed === true;
      return failed && pullFailed.test(readFileSync(device.supervisorLog, 'utf8')) ? true : undefined;
    }, 60_000, 'update_failed, with the pull failure logged');
    device.simEngine!.setDiskFull(false);
    await waitAllRunning(2, 90_000);
    expect((await api('GET', '/v1/device')).json().update_failed).toBe(false);
  }, 180_000);

  it('a service without a restart policy that crashes shows Exited in the supervisor\'s status', async () => {
    const state = twoServiceState({ releaseId: 3 });
    state.apps['1']!.services['12']!.restart = 'no';
    device.simEngine!.addContainerFault({ match: { label: `${LABEL.serviceName}=worker` }, exitCode: 3, afterMs: 1500, times: 1 });
    expect((await api('POST', '/v2/local/target-state', { local: state })).status).toBe(200);
    const seen = new Set<string>();
    await eventually(async () => {
      const worker = (await services()).worker;
      if (worker?.releaseId === 3) seen.add(worker.status);
      return seen.has('Exited') ? true : undefined;
    }, 30_000, 'worker Exited');
    expect(seen.has('Running') || seen.has('Starting') || seen.has('Installing')).toBe(true);
    const inspect = await (await workerContainer()).inspect();
    expect(inspect.State.ExitCode).toBe(3);
  }, 60_000);
});
