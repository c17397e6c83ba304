/**
 * The pure planner: (engine snapshot, target state) -> next round of steps. Snapshots are
 * written by hand, round by round, as the engine would report them after the previous round.
 */
import { describe, expect, it } from 'vitest';
import { checkWireState, normaliseState, type WireApp, type WireLocalState } from '../src/protocol/target-state.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { type ContainerState, type EngineSnapshot, type ManagedContainer, type ManagedNetwork, type ManagedVolume, type SupervisorNetworkState } from '../src/supervisor/adapters/engine.js';
import { desiredContainer, type DesiredContainer, type SpecContext } from '../src/supervisor/state/container-spec.js';
import { checkDeviceConfig, readDeviceConfig, unknownConfigKeys } from '../src/protocol/device-config.js';
import { describeStep, plan, serviceKey, type Step } from '../src/supervisor/state/planner.js';

const ctx = (deviceName = 'bench-1'): SpecContext => ({
  vendor: 'platform',
  uuid: 'a1b2c3d4e5f60718293a4b5c6d7e8f90',
  deviceName,
  deviceType: 'raspberrypi3',
  arch: 'aarch64',
  supervisorAddress: 'http://127.0.0.1:48484',
  supervisorPort: 48484,
  appKey: (appId) => `app-key-${appId}`,
  lockDir: (appId, serviceName) => `/tmp/fleetlab/locks/${appId}/${serviceName}`,
  networkName: (appId, network) => `${appId}_${network}`,
  volumeName: (appId, volume) => `${appId}_${volume}`,
});

/** Two services: `web` (no volume) and `worker` (volume `data`). */
function demoApp(over: { releaseId?: number; webImage?: string; workerImage?: string; webEnv?: Record<string, string>; webRunning?: boolean } = {}): WireApp {
  return {
    name: 'demo',
    commit: `commit-${over.releaseId ?? 1}`,
    releaseId: over.releaseId ?? 1,
    services: {
      '11': {
        serviceName: 'web',
        serviceId: 11,
        imageId: 101,
        image: over.webImage ?? 'registry.local/web:1',
        environment: over.webEnv ?? { MODE: 'a' },
        ...(over.webRunning === undefined ? {} : { running: over.webRunning }),
      },
      '12': {
        serviceName: 'worker',
        serviceId: 12,
        imageId: 102,
        image: over.workerImage ?? 'registry.local/worker:1',
        volumes: ['data:/data'],
      },
    },
    volumes: { data: {} },
  };
}

function wire(apps: Record<string, WireApp>, config: Record<string, string> = {}): WireLocalState {
  return { name: 'bench-1', config, apps };
}

/** Target plus the desired container of each service, as the state engine builds them. */
function target(state: WireLocalState, context = ctx()) {
  const t = normaliseState(state);
  const desired = new Map<string, DesiredContainer>();
  for (const app of t.apps) {
    for (const service of app.services) desired.set(serviceKey(app.appId, service.serviceName), desiredContainer(app, service, context));
  }
  const want = (appId: number, serviceName: string) => {
    const d = desired.get(serviceKey(appId, serviceName));
    if (!d) throw new Error(`no desired container ${appId}/${serviceName}`);
    return d;
  };
  return { target: t, desired, want };
}

/** The container the engine reports after creating `d`. */
function containerOf(d: DesiredContainer, state: ContainerState = 'running', id = `${d.service.serviceName}-${d.configHash.slice(0, 8)}`): ManagedContainer {
  return {
    id,
    name: d.spec.name,
    appId: d.appId,
    serviceId: d.service.serviceId,
    serviceName: d.service.serviceName,
    imageId: d.service.imageId,
    releaseId: Number(d.spec.labels[LABEL.releaseId]),
    commit: d.spec.labels[LABEL.commit]!,
    configHash: d.configHash,
    state,
    createdAt: '2024-05-01T12:00:00.000Z',
    image: d.spec.image,
    engineImageId: `sha256:${d.service.imageId}`,
  };
}

const net = (appId: number, network: string): ManagedNetwork => ({ id: `net-${appId}-${network}`, name: `${appId}_${network}`, appId, network });
const vol = (appId: number, volume: string): ManagedVolume => ({ name: `${appId}_${volume}`, appId, volume });

function snapshot(parts: { containers?: ManagedContainer[]; networks?: ManagedNetwork[]; volumes?: ManagedVolume[]; images?: string[]; supervisorNetwork?: SupervisorNetworkState } = {}): EngineSnapshot {
  const images = new Map<string, string>();
  for (const ref of parts.images ?? []) images.set(ref, `sha256:${Buffer.from(ref).toString('hex').slice(0, 24)}`);
  return { containers: parts.containers ?? [], networks: parts.networks ?? [], volumes: parts.volumes ?? [], images, ...(parts.supervisorNetwork ? { supervisorNetwork: parts.supervisorNetwork } : {}) };
}

const allImages = ['registry.local/web:1', 'registry.local/worker:1'];

/** A compact, order-preserving view of a round, for exact comparisons. */
function brief(steps: Step[]): string[] {
  return steps.map((s) => {
    switch (s.action) {
      case 'fetch':
        return `fetch ${s.appId}/${s.serviceName} ${s.image}`;
      case 'createSupervisorNetwork':
        return 'createSupervisorNetwork';
      case 'createNetwork':
        return `createNetwork ${s.appId}/${s.network}`;
      case 'createVolume':
        return `createVolume ${s.appId}/${s.volume}`;
      case 'removeContainer':
        return `removeContainer ${s.appId}/${s.container.serviceName} ${s.container.id} (${s.reason})`;
      case 'createContainer':
        return `createContainer ${s.appId}/${s.desired.service.serviceName}`;
      case 'start':
        return `start ${s.appId}/${s.container.serviceName}`;
      case 'stop':
        return `stop ${s.appId}/${s.container.serviceName}`;
      case 'removeNetwork':
        return `removeNetwork ${s.appId}/${s.network.network}`;
      case 'removeVolume':
        return `removeVolume ${s.appId}/${s.volume.volume}`;
      case 'wait':
        return `wait ${s.appId}/${s.serviceName}: ${s.reason}`;
    }
  });
}

describe('plan: installing on an empty device', () => {
  it('creates the default network and the volume first, containers only in the next round', () => {
    const { target: t, desired } = target(wire({ '1': demoApp() }));
    const round1 = plan({ target: t, desired, current: snapshot({ images: allImages }) });
    expect(brief(round1)).toEqual(['createNetwork 1/default', 'createVolume 1/data']);

    // Network present, volume not yet: worker (needs the volume) waits, web may go.
    const partial = plan({ target: t, desired, current: snapshot({ images: allImages, networks: [net(1, 'default')] }) });
    expect(brief(partial)).toEqual(['createVolume 1/data', 'createContainer 1/web']);

    const round2 = plan({
      target: t,
      desired,
      current: snapshot({ images: allImages, networks: [net(1, 'default')], volumes: [vol(1, 'data')] }),
    });
    expect(brief(round2)).toEqual(['createContainer 1/web', 'createContainer 1/worker']);
    const created = round2.filter((s): s is Extract<Step, { action: 'createContainer' }> => s.action === 'createContainer');
    expect(created.map((s) => s.desired)).toEqual([desired.get('1/web'), desired.get('1/worker')]);
    expect(created[0]!.desired.spec.networkMode).toBe('1_default');
    expect(created[1]!.desired.spec.binds).toContain('1_data:/data');
  });

  it('names each step as a person reads it, for what an apply in flight is doing', () => {
    const { target: t, desired, want } = target(wire({ '1': demoApp() }));
    const fetching = plan({ target: t, desired, current: snapshot({}) });
    expect(fetching.map(describeStep)).toEqual(['creating network default', 'creating volume data', "fetching web's image", "fetching worker's image"]);
    const creating = plan({ target: t, desired, current: snapshot({ images: allImages, networks: [net(1, 'default')], volumes: [vol(1, 'data')] }) });
    expect(creating.map(describeStep)).toEqual(['creating web', 'creating worker']);
    const starting = plan({ target: t, desired, current: snapshot({ images: allImages, networks: [net(1, 'default')], volumes: [vol(1, 'data')], containers: [containerOf(want(1, 'web'), 'created')] }) });
    expect(starting.map(describeStep)).toContain('starting web');
  });

  it('creates containers, then starts them, then has nothing left to do', () => {
    const { target: t, desired, want } = target(wire({ '1': demoApp() }));
    const base = { images: allImages, networks: [net(1, 'default')], volumes: [vol(1, 'data')] };
    const round3 = plan({
      target: t,
      desired,
      current: snapshot({ ...base, containers: [containerOf(want(1, 'web'), 'created'), containerOf(want(1, 'worker'), 'created')] }),
    });
    expect(brief(round3)).toEqual(['start 1/web', 'start 1/worker']);
    const round4 = plan({
      target: t,
      desired,
      current: snapshot({ ...base, containers: [containerOf(want(1, 'web')), containerOf(want(1, 'worker'))] }),
    });
    expect(round4).toEqual([]);
  });

  it('fetches missing images alongside creating the network and volume, and creates no container', () => {
    const { target: t, desired } = target(wire({ '1': demoApp() }));
    const steps = plan({ target: t, desired, current: snapshot(), startExited: new Set(['web-1']) });
    expect(brief(steps)).toEqual([
      'createNetwork 1/default',
      'createVolume 1/data',
      'fetch 1/web registry.local/web:1',
      'fetch 1/worker registry.local/worker:1',
    ]);
  });

  it('creates declared app networks too, and a service on one joins it', () => {
    const app = demoApp();
    app.networks = { backend: {} };
    app.services['11']!.network_mode = 'backend';
    const { target: t, desired } = target(wire({ '1': app }));
    expect(brief(plan({ target: t, desired, current: snapshot({ images: allImages }) }))).toEqual([
      'createNetwork 1/default',
      'createNetwork 1/backend',
      'createVolume 1/data',
    ]);
    // default and the volume exist, backend does not: only worker (on default) may be created.
    const steps = plan({
      target: t,
      desired,
      current: snapshot({ images: allImages, networks: [net(1, 'default')], volumes: [vol(1, 'data')] }),
    });
    expect(brief(steps)).toEqual(['createNetwork 1/backend', 'createContainer 1/worker']);
    expect(desired.get('1/web')!.spec.networkMode).toBe('1_backend');
  });
});

describe('plan: networks and depends_on', () => {
  const base = { images: allImages, volumes: [vol(1, 'data')] };

  it('a service on several networks waits for all of them, is created on the first and joins the rest', () => {
    const app = demoApp();
    app.networks = { back: {}, front: {} };
    app.services['11']!.networks = ['front', 'back'];
    const { target: t, desired } = target(wire({ '1': app }));
    const steps = plan({ target: t, desired, current: snapshot({ ...base, networks: [net(1, 'default'), net(1, 'front')] }) });
    expect(brief(steps)).toEqual(['createNetwork 1/back', 'createContainer 1/worker']);
    const web = desired.get('1/web')!;
    expect(web.spec.networkMode).toBe('1_front');
    expect(web.spec.extraNetworks).toEqual(['1_back']);
    expect(web.spec.aliases).toEqual(['web']);
    const all = plan({ target: t, desired, current: snapshot({ ...base, networks: [net(1, 'default'), net(1, 'front'), net(1, 'back')] }) });
    expect(brief(all)).toEqual(['createContainer 1/web', 'createContainer 1/worker']);
  });

  it('networks are part of the container: changing them replaces it; a service without them keeps its hash', () => {
    const plain = target(wire({ '1': demoApp() }));
    const app = demoApp();
    app.networks = { back: {} };
    const declaredOnly = target(wire({ '1': app }));
    expect(declaredOnly.want(1, 'web').configHash).toBe(plain.want(1, 'web').configHash);
    app.services['11']!.networks = ['default', 'back'];
    expect(target(wire({ '1': app })).want(1, 'web').configHash).not.toBe(plain.want(1, 'web').configHash);
  });

  it('depends_on: a dependent is created only once what it depends on has started', () => {
    const app = demoApp();
    app.services['11']!.depends_on = ['worker'];
    const { target: t, desired, want } = target(wire({ '1': app }));
    const infra = { ...base, networks: [net(1, 'default')] };
    expect(brief(plan({ target: t, desired, current: snapshot(infra) }))).toEqual(['createContainer 1/worker']);
    // Created but not started: the dependent still waits.
    expect(brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: [containerOf(want(1, 'worker'), 'created')] }) }))).toEqual(['start 1/worker']);
    expect(brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: [containerOf(want(1, 'worker'))] }) }))).toEqual(['createContainer 1/web']);
    // A dependency that ran and exited has started, as compose's service_started means.
    expect(brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: [containerOf(want(1, 'worker'), 'exited')] }) }))).toEqual(['createContainer 1/web']);
  });

  it('depends_on after a reboot: the dependency is started first, its dependent in the next round', () => {
    const app = demoApp();
    app.services['11']!.depends_on = ['worker'];
    const { target: t, desired, want } = target(wire({ '1': app }));
    const infra = { ...base, networks: [net(1, 'default')] };
    const stopped = [containerOf(want(1, 'web'), 'exited'), containerOf(want(1, 'worker'), 'exited')];
    const startExited = new Set(stopped.map((c) => c.id));
    expect(brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: stopped }), startExited }))).toEqual(['start 1/worker']);
    startExited.delete(stopped[1]!.id);
    const next = [containerOf(want(1, 'web'), 'exited'), containerOf(want(1, 'worker'))];
    expect(brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: next }), startExited }))).toEqual(['start 1/web']);
  });

  it('depends_on is ordering only: it does not change the container', () => {
    const app = demoApp();
    app.services['11']!.depends_on = ['worker'];
    expect(target(wire({ '1': app })).want(1, 'web').configHash).toBe(target(wire({ '1': demoApp() })).want(1, 'web').configHash);
    app.services['11']!.depends_on = { worker: { condition: 'service_healthy' } };
    expect(target(wire({ '1': app })).want(1, 'web').configHash).toBe(target(wire({ '1': demoApp() })).want(1, 'web').configHash);
  });

  it('service_healthy: the dependent is created only once its dependency runs healthy; until then the round says why it waits', () => {
    const app = demoApp();
    app.services['11']!.depends_on = { worker: { condition: 'service_healthy' } };
    app.services['12']!.healthcheck = { test: ['CMD-SHELL', 'exit 0'], interval: '1s' };
    const { target: t, desired, want } = target(wire({ '1': app }));
    const infra = { ...base, networks: [net(1, 'default')] };
    const round = (worker?: Partial<ManagedContainer>) =>
      brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: worker ? [{ ...containerOf(want(1, 'worker')), ...worker }] : [] }) }));
    expect(round()).toEqual(['createContainer 1/worker']);
    expect(round({ state: 'created' })).toEqual(['start 1/worker']);
    expect(round({ health: 'starting' })).toEqual(["wait 1/web: web waits for worker's healthcheck has not passed yet"]);
    expect(round({ health: 'unhealthy' })).toEqual(['wait 1/web: web waits for worker is unhealthy']);
    expect(round({})).toEqual(['wait 1/web: web waits for worker has no healthcheck (give it one in the compose file or its image)']);
    expect(round({ state: 'exited' })).toEqual(['wait 1/web: web waits for worker is not running']);
    expect(round({ health: 'healthy' })).toEqual(['createContainer 1/web']);
    // A dependency of an older release does not count, however healthy.
    expect(round({ health: 'healthy', configHash: 'older' })).toEqual(['removeContainer 1/worker worker-' + want(1, 'worker').configHash.slice(0, 8) + ' (configuration changed)']);
  });

  it('service_healthy after a reboot: the dependent is started once its dependency is healthy again', () => {
    const app = demoApp();
    app.services['11']!.depends_on = { worker: { condition: 'service_healthy' } };
    const { target: t, desired, want } = target(wire({ '1': app }));
    const infra = { ...base, networks: [net(1, 'default')] };
    const web = containerOf(want(1, 'web'), 'exited');
    const plan2 = (worker: ManagedContainer) => brief(plan({ target: t, desired, current: snapshot({ ...infra, containers: [web, worker] }), startExited: new Set([web.id, worker.id]) }));
    expect(plan2(containerOf(want(1, 'worker'), 'exited'))).toEqual(['start 1/worker']);
    expect(plan2({ ...containerOf(want(1, 'worker')), health: 'starting' })).toEqual(["wait 1/web: web waits for worker's healthcheck has not passed yet"]);
    expect(plan2({ ...containerOf(want(1, 'worker')), health: 'healthy' })).toEqual(['start 1/web']);
  });
});

describe('plan: container settings', () => {
  const infra = { images: allImages, networks: [net(1, 'default')], volumes: [vol(1, 'data')] };
  const settings: Array<[string, Partial<WireApp['services'][string]>]> = [
    ['healthcheck', { healthcheck: { test: ['CMD', 'true'], interval: '5s' } }],
    ['entrypoint', { entrypoint: ['/bin/sh', '-c'] }],
    ['user', { user: '1000:1000' }],
    ['working_dir', { working_dir: '/srv' }],
    ['stop_signal', { stop_signal: 'SIGINT' }],
    ['stop_grace_period', { stop_grace_period: '1m30s' }],
    ['init', { init: true }],
    ['read_only', { read_only: true }],
    ['sysctls', { sysctls: { 'net.core.somaxconn': '1024' } }],
    ['ulimits', { ulimits: { nofile: { soft: 1024, hard: 4096 } } }],
    ['extra_hosts', { extra_hosts: ['db.local:10.0.0.5'] }],
    ['hostname', { hostname: 'web-1' }],
    ['shm_size', { shm_size: 134217728 }],
  ];

  it.each(settings)('a change of %s replaces the container; the same settings again replace nothing', (_key, setting) => {
    const before = target(wire({ '1': demoApp() }));
    const running = [containerOf(before.want(1, 'web')), containerOf(before.want(1, 'worker'))];
    const app = demoApp();
    Object.assign(app.services['11']!, setting);
    const after = target(wire({ '1': app }));
    expect(brief(plan({ target: after.target, desired: after.desired, current: snapshot({ ...infra, containers: running }) }))).toEqual([
      `removeContainer 1/web ${running[0]!.id} (configuration changed)`,
    ]);
    // The container read back carries the new hash: the next plans are empty, not a recreate loop.
    const again = target(wire({ '1': structuredClone(app) }));
    const replaced = [containerOf(again.want(1, 'web')), running[1]!];
    expect(plan({ target: again.target, desired: again.desired, current: snapshot({ ...infra, containers: replaced }) })).toEqual([]);
  });

  it('a service with none of them keeps the hash it had before they were carried', () => {
    const plain = target(wire({ '1': demoApp() })).want(1, 'web');
    const app = demoApp();
    Object.assign(app.services['11']!, { sysctls: {}, extra_hosts: [] });
    expect(target(wire({ '1': app })).want(1, 'web').configHash).toBe(plain.configHash);
  });
});

describe('plan: updating a running release', () => {
  const old = target(wire({ '1': demoApp() }));
  const running = [containerOf(old.want(1, 'web')), containerOf(old.want(1, 'worker'))];
  const infra = { networks: [net(1, 'default')], volumes: [vol(1, 'data')] };

  it('fetches a missing image while the old containers keep running', () => {
    const next = target(wire({ '1': demoApp({ releaseId: 2, webImage: 'registry.local/web:2', workerImage: 'registry.local/worker:2' }) }));
    // worker:2 already downloaded, web:2 not: the whole release waits, nothing is removed.
    const steps = plan({
      target: next.target,
      desired: next.desired,
      current: snapshot({ ...infra, containers: running, images: [...allImages, 'registry.local/worker:2'] }),
    });
    expect(brief(steps)).toEqual(['fetch 1/web registry.local/web:2']);
    expect(steps.some((s) => s.action === 'removeContainer' || s.action === 'createContainer' || s.action === 'stop')).toBe(false);
  });

  it('replaces containers only once every image of the release is present, create in a later round', () => {
    const next = target(wire({ '1': demoApp({ releaseId: 2, webImage: 'registry.local/web:2', workerImage: 'registry.local/worker:2' }) }));
    const images = [...allImages, 'registry.local/web:2', 'registry.local/worker:2'];
    const remove = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, containers: running, images }) });
    expect(brief(remove)).toEqual([
      `removeContainer 1/web ${running[0]!.id} (configuration changed)`,
      `removeContainer 1/worker ${running[1]!.id} (configuration changed)`,
    ]);
    const create = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, images }) });
    expect(brief(create)).toEqual(['createContainer 1/web', 'createContainer 1/worker']);
    const done = plan({
      target: next.target,
      desired: next.desired,
      current: snapshot({ ...infra, images, containers: [containerOf(next.want(1, 'web')), containerOf(next.want(1, 'worker'))] }),
    });
    expect(done).toEqual([]);
  });

  const changes: [string, WireApp, string[]][] = [
    ['environment', demoApp({ webEnv: { MODE: 'b' } }), allImages],
    ['image', demoApp({ webImage: 'registry.local/web:1.1' }), [...allImages, 'registry.local/web:1.1']],
  ];
  it.each(changes)('a changed %s removes the container, then creates its successor in a later round', (_what, app, images) => {
    const next = target(wire({ '1': app }));
    expect(next.want(1, 'web').configHash).not.toBe(old.want(1, 'web').configHash);
    expect(next.want(1, 'worker').configHash).toBe(old.want(1, 'worker').configHash);
    const round1 = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, containers: running, images }) });
    expect(brief(round1)).toEqual([`removeContainer 1/web ${running[0]!.id} (configuration changed)`]);
    const round2 = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, containers: [running[1]!], images }) });
    expect(brief(round2)).toEqual(['createContainer 1/web']);
    const created = round2[0] as Extract<Step, { action: 'createContainer' }>;
    expect(created.desired.configHash).toBe(next.want(1, 'web').configHash);
  });

  it('a new releaseId alone replaces every service of the app', () => {
    const next = target(wire({ '1': demoApp({ releaseId: 7 }) }));
    expect(next.want(1, 'web').configHash).not.toBe(old.want(1, 'web').configHash);
    const round1 = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, containers: running, images: allImages }) });
    expect(brief(round1).map((s) => s.split(' ').slice(0, 2).join(' '))).toEqual(['removeContainer 1/web', 'removeContainer 1/worker']);
    expect(round1.every((s) => s.action === 'removeContainer' && s.reason === 'configuration changed')).toBe(true);
    const round2 = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, images: allImages }) });
    expect(brief(round2)).toEqual(['createContainer 1/web', 'createContainer 1/worker']);
    expect((round2[0] as Extract<Step, { action: 'createContainer' }>).desired.spec.name).toMatch(/_web_7$/);
  });

  it('a changed device name does not force a recreate of a service with the API label', () => {
    const app = demoApp();
    app.services['11']!.labels = { 'io.platform.features.supervisor-api': '1' };
    const before = target(wire({ '1': app }), ctx('old-name')).want(1, 'web');
    const after = target(wire({ '1': app }), ctx('new-name')).want(1, 'web');
    expect(after.spec.env).toContain('PLATFORM_DEVICE_NAME_AT_INIT=new-name');
    expect(after.configHash).toBe(before.configHash);
  });

  it('a service dropped from the release is removed once the release is ready', () => {
    const app = demoApp();
    delete app.services['12'];
    const next = target(wire({ '1': app }));
    const steps = plan({ target: next.target, desired: next.desired, current: snapshot({ ...infra, containers: running, images: allImages }) });
    expect(brief(steps)).toEqual([`removeContainer 1/worker ${running[1]!.id} (service is not in the target release)`]);
  });
});

describe('plan: converged and run state', () => {
  const t = target(wire({ '1': demoApp() }));
  const infra = { networks: [net(1, 'default')], volumes: [vol(1, 'data')], images: allImages };
  const withStates = (web: ContainerState, worker: ContainerState = 'running') => [containerOf(t.want(1, 'web'), web), containerOf(t.want(1, 'worker'), worker)];

  it('no steps when every container matches its desired hash and runs', () => {
    const containers = withStates('running');
    for (const startExited of [new Set<string>(), new Set(containers.map((c) => c.id))]) {
      expect(plan({ target: t.target, desired: t.desired, current: snapshot({ ...infra, containers }), startExited })).toEqual([]);
    }
  });

  it('an image named without a tag matches the engine\'s ":latest" reference (no fetch)', () => {
    const app = demoApp({ webImage: 'busybox', workerImage: 'registry.local:5000/team/worker' });
    const b = target(wire({ '1': app }));
    const current = snapshot({
      ...infra,
      images: ['busybox:latest', 'registry.local:5000/team/worker:latest'],
      containers: [containerOf(b.want(1, 'web')), containerOf(b.want(1, 'worker'))],
    });
    expect(plan({ target: b.target, desired: b.desired, current })).toEqual([]);
  });

  it('running: false stops a running (or restarting) container', () => {
    const s = target(wire({ '1': demoApp({ webRunning: false }) }));
    const containers = (state: ContainerState) => [containerOf(s.want(1, 'web'), state), containerOf(s.want(1, 'worker'))];
    expect(brief(plan({ target: s.target, desired: s.desired, current: snapshot({ ...infra, containers: containers('running') }) }))).toEqual(['stop 1/web']);
    const all = (state: ContainerState) => new Set(containers(state).map((c) => c.id));
    expect(brief(plan({ target: s.target, desired: s.desired, current: snapshot({ ...infra, containers: containers('restarting') }), startExited: all('restarting') }))).toEqual(['stop 1/web']);
    // Already stopped, or never started: nothing to do, and never a start.
    for (const state of ['exited', 'created'] as const) {
      expect(plan({ target: s.target, desired: s.desired, current: snapshot({ ...infra, containers: containers(state) }), startExited: all(state) })).toEqual([]);
    }
  });

  it('a created container is started', () => {
    const steps = plan({ target: t.target, desired: t.desired, current: snapshot({ ...infra, containers: withStates('created') }) });
    expect(brief(steps)).toEqual(['start 1/web']);
    expect((steps[0] as Extract<Step, { action: 'start' }>).container.id).toBe(withStates('created')[0]!.id);
  });

  it('an exited container is started only when it is one of startExited (found exited when the supervisor started)', () => {
    const containers = withStates('exited');
    const current = snapshot({ ...infra, containers });
    expect(plan({ target: t.target, desired: t.desired, current })).toEqual([]);
    expect(plan({ target: t.target, desired: t.desired, current, startExited: new Set(['another-container']) })).toEqual([]);
    expect(brief(plan({ target: t.target, desired: t.desired, current, startExited: new Set([containers[0]!.id]) }))).toEqual(['start 1/web']);
  });

  it('of two containers for one service, one is removed and the other kept', () => {
    const a = containerOf(t.want(1, 'web'), 'running', 'web-a');
    const b = containerOf(t.want(1, 'web'), 'running', 'web-b');
    const steps = plan({ target: t.target, desired: t.desired, current: snapshot({ ...infra, containers: [a, b, containerOf(t.want(1, 'worker'))] }) });
    expect(brief(steps)).toEqual(['removeContainer 1/web web-b (duplicate container)']);
    // The round after: converged, no create for the service that kept one container.
    expect(plan({ target: t.target, desired: t.desired, current: snapshot({ ...infra, containers: [a, containerOf(t.want(1, 'worker'))] }) })).toEqual([]);
  });

  it('an outdated container next to an up-to-date one: the outdated one goes, no create', () => {
    const stale = containerOf(target(wire({ '1': demoApp({ webEnv: { MODE: 'old' } }) })).want(1, 'web'), 'exited', 'web-old');
    const good = containerOf(t.want(1, 'web'), 'running', 'web-new');
    const steps = plan({ target: t.target, desired: t.desired, current: snapshot({ ...infra, containers: [stale, good, containerOf(t.want(1, 'worker'))] }) });
    expect(brief(steps)).toEqual(['removeContainer 1/web web-old (configuration changed)']);
  });
});

describe('plan: removing an app', () => {
  const both = target(wire({ '1': demoApp(), '2': demoApp() }));
  const onlyTwo = target(wire({ '2': demoApp() }));
  const app1 = [containerOf(both.want(1, 'web')), containerOf(both.want(1, 'worker'))];
  const app2 = [containerOf(both.want(2, 'web')), containerOf(both.want(2, 'worker'))];
  const networks = [net(1, 'default'), net(1, 'backend'), net(2, 'default')];
  const volumes = [vol(1, 'data'), vol(2, 'data')];

  it('removes its containers first, then its networks; volumes stay; the other app is untouched', () => {
    const round1 = plan({ target: onlyTwo.target, desired: onlyTwo.desired, current: snapshot({ networks, volumes, images: allImages, containers: [...app1, ...app2] }) });
    expect(brief(round1)).toEqual([
      `removeContainer 1/web ${app1[0]!.id} (app is not in the target state)`,
      `removeContainer 1/worker ${app1[1]!.id} (app is not in the target state)`,
    ]);
    const round2 = plan({ target: onlyTwo.target, desired: onlyTwo.desired, current: snapshot({ networks, volumes, images: allImages, containers: app2 }) });
    expect(brief(round2)).toEqual(['removeNetwork 1/default', 'removeNetwork 1/backend']);
    const round3 = plan({ target: onlyTwo.target, desired: onlyTwo.desired, current: snapshot({ networks: [net(2, 'default')], volumes, images: allImages, containers: app2 }) });
    expect(round3).toEqual([]);
  });

  it('an empty target removes every app, lowest appId first', () => {
    const empty = target(wire({}));
    const steps = plan({ target: empty.target, desired: empty.desired, current: snapshot({ networks, volumes, images: allImages, containers: [...app2, ...app1] }) });
    expect(steps.map((s) => `${s.action} ${'appId' in s ? s.appId : ''}`)).toEqual(['removeContainer 1', 'removeContainer 1', 'removeContainer 2', 'removeContainer 2']);
  });
});

describe('plan: unreferenced volumes, as supervisors before 10.0 removed them', () => {
  const old = target(wire({ '1': demoApp() }));
  // Release 2 of app 1 drops the worker's volume from its target.
  const next = demoApp({ releaseId: 2 });
  next.services['12']!.volumes = [];
  next.volumes = {};
  const updated = target(wire({ '1': next }));
  const infra = { images: allImages, networks: [net(1, 'default'), net(1, 'backend')], volumes: [vol(1, 'data'), vol(1, 'extra')] };
  const running = (t: typeof old) => [containerOf(t.want(1, 'web')), containerOf(t.want(1, 'worker'))];

  it('a normal update removes a volume no target declares once every container is of the target', () => {
    // The old release's containers still run and may mount it: no volume goes yet.
    const round1 = plan({ target: updated.target, desired: updated.desired, current: snapshot({ ...infra, containers: running(old) }), removeUnreferencedVolumes: true });
    expect(brief(round1).filter((s) => s.startsWith('removeVolume'))).toEqual([]);
    const round2 = plan({ target: updated.target, desired: updated.desired, current: snapshot({ ...infra, containers: running(updated) }), removeUnreferencedVolumes: true });
    expect(brief(round2)).toEqual(['removeVolume 1/data', 'removeVolume 1/extra']);
  });

  it('from 10.0 (the default) the same update keeps them', () => {
    const steps = plan({ target: updated.target, desired: updated.desired, current: snapshot({ ...infra, containers: running(updated) }) });
    expect(steps).toEqual([]);
  });

  it("a removed app's volumes go with its networks, once its containers are gone", () => {
    const empty = target(wire({}));
    const steps = plan({ target: empty.target, desired: empty.desired, current: snapshot({ ...infra }), removeUnreferencedVolumes: true });
    expect(brief(steps)).toEqual(['removeVolume 1/data', 'removeVolume 1/extra', 'removeNetwork 1/default', 'removeNetwork 1/backend']);
  });
});

describe('plan: shared images', () => {
  it('an image used by two services is fetched once', () => {
    const app = demoApp({ webImage: 'registry.local/shared:3', workerImage: 'registry.local/shared:3' });
    const s = target(wire({ '1': app }));
    const steps = plan({ target: s.target, desired: s.desired, current: snapshot({ networks: [net(1, 'default')], volumes: [vol(1, 'data')] }) });
    expect(brief(steps)).toEqual(['fetch 1/web registry.local/shared:3']);
  });

  it('the same image spelled with and without ":latest" is fetched once', () => {
    const s = target(wire({ '1': demoApp({ webImage: 'alpine', workerImage: 'alpine:latest' }) }));
    const steps = plan({ target: s.target, desired: s.desired, current: snapshot({ networks: [net(1, 'default')], volumes: [vol(1, 'data')] }) });
    expect(steps.filter((x) => x.action === 'fetch')).toHaveLength(1);
  });
});

describe('checkWireState', () => {
  it('accepts a sound state', () => {
    expect(checkWireState(wire({ '1': demoApp() }))).toEqual([]);
  });

  it('serviceId must equal its key', () => {
    const app = demoApp();
    app.services['11']!.serviceId = 13;
    const problems = checkWireState(wire({ '1': app }));
    expect(problems).toEqual(['local.apps.1.services.11.serviceId must equal its key 11']);
  });

  it('a volume a service mounts must be declared by the app', () => {
    const app = demoApp();
    app.services['11']!.volumes = ['cache:/cache:ro'];
    const problems = checkWireState(wire({ '1': app }));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain('local.apps.1.services.11.volumes');
    expect(problems[0]).toContain('"cache"');
  });

  it('networks must be declared (or default) and not combined with network_mode', () => {
    const app = demoApp();
    app.services['11']!.networks = ['default', 'back'];
    expect(checkWireState(wire({ '1': app }))).toEqual(['local.apps.1.services.11.networks: network "back" is not declared in local.apps.1.networks']);
    app.networks = { back: {} };
    app.services['11']!.network_mode = 'host';
    expect(checkWireState(wire({ '1': app }))).toEqual(['local.apps.1.services.11: networks and network_mode cannot both be set']);
  });

  it('depends_on must name services of the app, without a cycle', () => {
    const app = demoApp();
    app.services['11']!.depends_on = ['db'];
    expect(checkWireState(wire({ '1': app }))).toEqual(['local.apps.1.services.11.depends_on: "db" is not a service of this app']);
    app.services['11']!.depends_on = ['worker'];
    app.services['12']!.depends_on = ['web'];
    expect(checkWireState(wire({ '1': app }))).toEqual(['local.apps.1: depends_on has a cycle: web -> worker -> web']);
  });

  it('a service name used twice in one app is refused', () => {
    const app = demoApp();
    app.services['12']!.serviceName = 'web';
    expect(checkWireState(wire({ '1': app })).join('\n')).toContain('serviceName "web" is used twice');
  });
});

describe('checkDeviceConfig', () => {
  it('accepts sound values', () => {
    expect(
      checkDeviceConfig({
        SUPERVISOR_POLL_INTERVAL: '10000',
        SUPERVISOR_LOCAL_MODE: '1',
        SUPERVISOR_OVERRIDE_LOCK: '0',
        SUPERVISOR_DELTA_VERSION: '3',
        HOST_CONFIG_gpu_mem: '128',
      }),
    ).toEqual([]);
  });

  it('SUPERVISOR_POLL_INTERVAL below 10000 is rejected, naming the key', () => {
    for (const value of ['9999', '0', '-20000', '15s', '']) {
      const problems = checkDeviceConfig({ SUPERVISOR_POLL_INTERVAL: value });
      expect(problems, value).toHaveLength(1);
      expect(problems[0]).toContain('local.config.SUPERVISOR_POLL_INTERVAL');
      expect(problems[0]).toContain('10000');
    }
  });

  it('bad flag values are rejected, naming the key', () => {
    for (const key of ['SUPERVISOR_LOCAL_MODE', 'SUPERVISOR_OVERRIDE_LOCK', 'SUPERVISOR_VPN_CONTROL', 'SUPERVISOR_PERSISTENT_LOGGING']) {
      for (const value of ['yes', '2', '', ' 1']) {
        const problems = checkDeviceConfig({ [key]: value }, 'cloud.config');
        expect(problems, `${key}=${JSON.stringify(value)}`).toEqual([`cloud.config.${key} must be "1" or "0", got "${value}"`]);
      }
    }
  });

  it('a multi-line HOST_CONFIG_ value is rejected (it would inject config.txt lines)', () => {
    for (const value of ['1\ndtoverlay=evil', 'a\r\nb', 'x\0y']) {
      const problems = checkDeviceConfig({ HOST_CONFIG_dtparam: value });
      expect(problems).toEqual(['local.config.HOST_CONFIG_dtparam must be a single line']);
    }
  });

  it('unknown keys are kept and reported, never rejected', () => {
    const config = { SOMETHING_NEW: 'x', SUPERVISOR_POLL_INTERVAL: '60000', HOST_CONFIG_gpu_mem: '64' };
    expect(checkDeviceConfig(config)).toEqual([]);
    expect(unknownConfigKeys(config)).toEqual(['SOMETHING_NEW']);
    expect(normaliseState(wire({}, config)).config).toEqual(config);
    const typed = readDeviceConfig(config);
    expect(typed.pollIntervalMs).toBe(60000);
    expect(typed.hostConfig).toEqual({ gpu_mem: '64' });
  });
});

describe('plan: the supervisor network', () => {
  const labelled = (networkMode?: string) => {
    const app = demoApp();
    app.services['11']!.labels = { 'io.platform.features.supervisor-api': '1' };
    if (networkMode) app.services['11']!.network_mode = networkMode;
    return wire({ '1': app });
  };
  const found: SupervisorNetworkState = { id: 'sup-net', name: 'supervisor0', subnet: '10.114.104.0/25', gateway: '10.114.104.1', ours: true, apiHost: '10.114.104.1', usable: true };
  const infra = { networks: [net(1, 'default')], volumes: [vol(1, 'data')], images: allImages };

  it('is made before a labelled service that joins it, which waits for it; others do not wait', () => {
    const before = target(labelled());
    const round1 = plan({ target: before.target, desired: before.desired, current: snapshot(infra) });
    expect(brief(round1)).toEqual(['createSupervisorNetwork', 'createContainer 1/worker']);
    // The state engine builds the desired containers again with the network the engine now has.
    const after = target(labelled(), { ...ctx(), supervisorNetwork: { name: found.name, subnet: found.subnet, gateway: found.gateway, apiHost: found.apiHost } });
    const worker = containerOf(after.want(1, 'worker'));
    const round2 = plan({ target: after.target, desired: after.desired, current: snapshot({ ...infra, containers: [worker], supervisorNetwork: found }) });
    expect(brief(round2)).toEqual(['createContainer 1/web']);
    const web = (round2[0] as Extract<Step, { action: 'createContainer' }>).desired;
    expect(web.spec.supervisorNetwork).toBe('supervisor0');
    expect(web.spec.networkMode).toBe('1_default');
  });

  it('is made again when the one the engine has does not fit the settings', () => {
    const t = target(labelled(), { ...ctx(), supervisorNetwork: { name: found.name, subnet: found.subnet, gateway: found.gateway, apiHost: found.apiHost } });
    const steps = plan({ target: t.target, desired: t.desired, current: snapshot({ ...infra, supervisorNetwork: { ...found, subnet: '10.9.0.0/24', gateway: '10.9.0.1', usable: false } }) });
    expect(brief(steps)).toEqual(['createSupervisorNetwork', 'createContainer 1/worker']);
  });

  it("is made for a labelled service in a host network that is a container other than the supervisor's, which waits for it", () => {
    const holder = { ...ctx(), hostNetwork: { container: 'fleetlab-host-1', supervisorInside: false } };
    const before = target(labelled('host'), holder);
    expect(brief(plan({ target: before.target, desired: before.desired, current: snapshot(infra) }))).toEqual(['createSupervisorNetwork', 'createContainer 1/worker']);
    const after = target(labelled('host'), { ...holder, supervisorNetwork: { name: found.name, subnet: found.subnet, gateway: found.gateway, apiHost: found.apiHost } });
    const worker = containerOf(after.want(1, 'worker'));
    // Not while the network lacks that container (usable: false): the supervisor connects it first.
    expect(brief(plan({ target: after.target, desired: after.desired, current: snapshot({ ...infra, containers: [worker], supervisorNetwork: { ...found, usable: false } }) }))).toEqual(['createSupervisorNetwork']);
    const round = plan({ target: after.target, desired: after.desired, current: snapshot({ ...infra, containers: [worker], supervisorNetwork: found }) });
    expect(brief(round)).toEqual(['createContainer 1/web']);
    const web = (round[0] as Extract<Step, { action: 'createContainer' }>).desired;
    // In that container's namespace, which joined the network: the service joins nothing itself.
    expect([web.spec.networkMode, web.spec.supervisorNetwork, web.madeForSupervisorNetwork]).toEqual(['container:fleetlab-host-1', undefined, 'supervisor0']);
    // In the supervisor's own container, loopback is the API: nothing to wait for.
    const inside = target(labelled('host'), { ...ctx(), hostNetwork: { container: 'dev', supervisorInside: true } });
    expect(brief(plan({ target: inside.target, desired: inside.desired, current: snapshot({ ...infra, containers: [containerOf(inside.want(1, 'worker'))] }) }))).toEqual(['createContainer 1/web']);
  });

  it('is not made for a labelled service in the host network, nor for unlabelled ones', () => {
    for (const state of [labelled('host'), wire({ '1': demoApp() })]) {
      const t = target(state);
      const steps = plan({ target: t.target, desired: t.desired, current: snapshot(infra) });
      expect(brief(steps)).toEqual(['createContainer 1/web', 'createContainer 1/worker']);
    }
  });
});
