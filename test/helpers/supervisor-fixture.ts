/**
 * An in-process supervisor over real peers, for route tests with `inject`: the real dockerd,
 * a private dbus-daemon with the simulated hostname1/systemd1/login1, and a journal written
 * by journal-remote. Only the LED is absent (it needs a mount namespace: see the sim device
 * tests).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { loadConfig, type SupervisorConfig } from '../../src/supervisor/config.js';
import { createHostAdapter } from '../../src/supervisor/adapters/host.js';
import { createJournalAdapter } from '../../src/supervisor/adapters/journal.js';
import { removeDeviceLeftovers } from '../../sim/device-leftovers.js';
import { Supervisor } from '../../src/supervisor/supervisor.js';
import { Teardown } from '../../src/teardown.js';
import { startPrivateBus, type PrivateBus } from '../../sim/dbus/private-bus.js';
import { startHostPeer, type HostPeer } from '../../sim/dbus/host-peer.js';
import { startJournalSim, type JournalSim } from '../../sim/journal/journal-sim.js';
import type { WireLocalState } from '../../src/protocol/target-state.js';
import { checkTarget, problemText, type CheckedTarget } from '../../src/protocol/checked-target.js';
import { sharedEngineNetwork } from '../../sim/supervisor-network.js';

export const dockerSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';

export interface SupervisorFixture {
  sup: Supervisor;
  dir: string;
  bus: PrivateBus;
  peer: HostPeer;
  journal: JournalSim;
  docker: Docker;
  key(): string;
  close(): Promise<void>;
}

const quietLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** `dockerSocket`: another engine than this machine's dockerd, such as a simulated one; `settings`: more of the supervisor's flags. */
export async function startSupervisorFixture(options: { localMode?: boolean; dir?: string; dockerSocket?: string; settings?: Partial<Record<keyof SupervisorConfig, unknown>> } = {}): Promise<SupervisorFixture> {
  const engineSocket = options.dockerSocket ?? dockerSocket;
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), 'fleetlab-test-')));
  const bus = await startPrivateBus({ dir: join(dir, 'dbus') });
  const peer = await startHostPeer({ busAddress: bus.address, stateDir: join(dir, 'host'), defaultHostname: 'fleetlab' });
  const journal = await startJournalSim({ directory: await mkdtempIn(dir, 'journal') });
  const config = loadConfig({
    flags: {
      port: 48484,
      dataDir: join(dir, 'supervisor'),
      lockRoot: join(dir, 'locks'),
      localMode: options.localMode ?? true,
      dockerSocket: engineSocket,
      proxyConfigDir: join(dir, 'boot', 'system-proxy'),
      bootConfigPath: join(dir, 'boot', 'config.txt'),
      journalDirectory: journal.directory,
      dbusAddress: bus.address,
      ...sharedEngineNetwork(),
      ...options.settings,
    },
  });
  const sup = new Supervisor({
    config,
    logger: quietLog,
    host: createHostAdapter({ busAddress: bus.address, proxyConfigDir: config.proxyConfigDir }),
    journal: createJournalAdapter({ directory: journal.directory }),
  });
  await sup.start();
  await sup.api.ready();
  const docker = new Docker({ socketPath: engineSocket });
  return {
    sup, dir, bus, peer, journal, docker,
    key: () => sup.keys.deviceKey(),
    async close() {
      // Every step runs even when one before it failed, and the failures are thrown together:
      // a removal that failed here used to leave its volume on the shared dockerd unseen.
      const teardown = new Teardown();
      if (!options.dir) teardown.defer({ name: `the test directory ${dir}`, stop: () => rm(dir, { recursive: true, force: true }) });
      teardown.defer({ name: 'the D-Bus daemon', stop: () => bus.stop() });
      teardown.defer({ name: 'the host peer', stop: () => peer.close() });
      teardown.defer({ name: 'the journal peer', stop: () => journal.close() });
      teardown.defer({ name: "the device's containers, networks and volumes", stop: () => removeDeviceLeftovers(docker, sup.uuid) });
      teardown.defer({ name: 'the supervisor', stop: () => sup.close() });
      await teardown.stop();
    },
  };
}

async function mkdtempIn(dir: string, name: string): Promise<string> {
  const { mkdir } = await import('node:fs/promises');
  const path = join(dir, name);
  await mkdir(path, { recursive: true });
  return path;
}


/** A two-service app: `main` carries the supervisor-api label and a data volume. */
export function twoServiceState(overrides: { releaseId?: number; mainImage?: string; config?: Record<string, string>; name?: string } = {}): WireLocalState {
  return {
    name: overrides.name ?? 'test-device',
    config: { SUPERVISOR_LOCAL_MODE: '1', ...overrides.config },
    apps: {
      '1': {
        name: 'myapp',
        commit: `commit${overrides.releaseId ?? 1}`,
        releaseId: String(overrides.releaseId ?? 1),
        services: {
          '11': {
            serviceName: 'main', serviceId: 11, imageId: 101, image: overrides.mainImage ?? 'fleetlab/test-app:1',
            environment: { GREETING: 'hello' }, labels: { 'io.platform.features.supervisor-api': '1' }, volumes: ['data:/data'],
          },
          '12': { serviceName: 'worker', serviceId: 12, imageId: 102, image: 'fleetlab/test-app:2', environment: {}, labels: {} },
        },
        volumes: { data: {} },
        networks: {},
      },
    },
  };
}

/**
 * Two apps on one device, for scoped keys: app 1 is twoServiceState's (`main`, `worker`,
 * volume `data`), app 2 `other` has one service `solo` with its own volume `store`.
 */
/** A wire target checked as the local route checks it: the supervisor takes checked targets only. */
export function checkedLocal(wire: WireLocalState): CheckedTarget {
  const checked = checkTarget(wire, 'local.config');
  if (!checked.ok) throw new Error(`test target refused: ${problemText(checked.problems)}`);
  return checked.target;
}

export function twoAppState(): WireLocalState {
  const state = twoServiceState();
  state.apps['2'] = {
    name: 'other', commit: 'other7', releaseId: '7', networks: {}, volumes: { store: {} },
    services: {
      '21': {
        serviceName: 'solo', serviceId: 21, imageId: 201, image: 'fleetlab/test-app:1', environment: { MODE: 'one' },
        labels: { 'io.platform.features.supervisor-api': '1' }, volumes: ['store:/data'],
      },
    },
  };
  return state;
}

/** Waits (bounded) until the state engine reports applied and every target service runs. */
export async function waitApplied(sup: Supervisor, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await sup.state.settled();
    const view = await sup.state.view();
    if (view.appState === 'applied' && view.services.every((s) => s.status === 'Running' || !sup.state.getTarget().apps.some((a) => a.services.some((t) => t.serviceName === s.serviceName && t.running)))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`state not applied within ${timeoutMs} ms: ${JSON.stringify((await sup.state.view()).services.map((s) => [s.serviceName, s.status]))} ${sup.state.lastError ?? ''}`);
}
