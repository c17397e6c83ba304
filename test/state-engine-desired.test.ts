/**
 * What the state engine keeps and shares, and when it must not:
 * - it builds a target's desired containers once per change of the target or of what the
 *   context lends them (src/supervisor/state/container-spec.ts `specInputs`): every API read
 *   and apply round asks for them. A kept build must never outlive a change that would build
 *   them differently: each such change here gives new containers, equal to a build from scratch;
 * - concurrent status reads share one engine read, but never one that began before a write
 *   (an app action, an apply round) ended;
 * - one round's new containers are made side by side, and the round ends only once each is settled.
 * - on its first apply it starts the containers it found exited (a reboot undoes a stop), each once,
 *   and no container that ran and exited during that apply.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkTarget, type CheckedTarget } from '../src/protocol/checked-target.js';
import { Engine, type ContainerState, type EngineSnapshot, type ManagedContainer } from '../src/supervisor/adapters/engine.js';
import { desiredContainer, type SpecContext } from '../src/supervisor/state/container-spec.js';
import { UpdateLocks } from '../src/supervisor/state/locks.js';
import { StateEngine } from '../src/supervisor/state/state-engine.js';
import { DeviceStore } from '../src/supervisor/state/store.js';
import { initialRecord } from './helpers/store-writer.js';

let dir: string;
let engine: Engine;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fleetlab-desired-'));
  // Never reached: building desired containers reads no engine.
  engine = new Engine({ socketPath: join(dir, 'no-engine.sock'), device: 'd'.repeat(32) });
});
afterEach(async () => {
  engine.close();
  await rm(dir, { recursive: true, force: true });
});

const target = (image: string): CheckedTarget => {
  const checked = checkTarget(
    {
      name: 'dev',
      config: {},
      apps: { '1': { name: 'app', commit: 'c1', releaseId: 1, services: { '1': { serviceName: 'main', serviceId: 1, imageId: 1, image, environment: { A: '1' }, labels: { 'io.balena.features.supervisor-api': '1' } } }, volumes: {}, networks: {} } },
    },
    'local.config',
  );
  if (!checked.ok) throw new Error('test target refused');
  return checked.target;
};

/** The context of a device named `dev` whose app key is `key`, its lock directories under the test's. */
const deviceDev = (): SpecContext => ({
  vendor: 'balena', uuid: 'd'.repeat(32), deviceName: 'dev', deviceType: 'raspberrypi4-64', arch: 'aarch64', supervisorAddress: 'http://127.0.0.1:48484', supervisorPort: 48484,
  appKey: () => 'key',
  lockDir: (appId, service) => join(dir, 'locks', String(appId), service),
  networkName: (appId, n) => `${appId}_${n}`,
  volumeName: (appId, v) => `${appId}_${v}`,
});

const locksOf = (store: DeviceStore) => new UpdateLocks({ lockRoot: join(dir, 'locks'), ledger: store.lockLedger(), owner: { instance: 'i', boot: 'b', pid: process.pid } });

it('keeps the build while nothing changes; a new target, device name or app key builds anew', () => {
  const store = DeviceStore.open(join(dir, 'data'), initialRecord);
  const ctx = { vendor: 'balena', uuid: 'd'.repeat(32), deviceName: 'first', deviceType: 'raspberrypi4-64', arch: 'aarch64', supervisorAddress: 'http://127.0.0.1:48484', supervisorPort: 48484, appKey: 'key-1' };
  const specContext = (): SpecContext => ({
    ...ctx,
    appKey: () => ctx.appKey,
    lockDir: (appId, service) => join(dir, 'locks', String(appId), service),
    networkName: (appId, n) => `${appId}_${n}`,
    volumeName: (appId, v) => `${appId}_${v}`,
  });
  const locks = new UpdateLocks({ lockRoot: join(dir, 'locks'), ledger: store.lockLedger(), owner: { instance: 'i', boot: 'b', pid: process.pid } });
  const state = new StateEngine({ engine, locks, log: { info: () => undefined, warn: () => undefined, error: () => undefined }, specContext }, target('img:1'));
  const fromScratch = () => desiredContainer(state.getTarget().apps[0]!, state.getTarget().apps[0]!.services[0]!, specContext());
  const envOf = () => state.desired().get('1/main')!.environment;

  const first = state.desired();
  expect(state.desired()).toBe(first);
  expect(first.get('1/main')).toEqual(fromScratch());

  const changes: Array<[string, () => void, (env: Record<string, string>) => void]> = [
    ['the device is renamed', () => (ctx.deviceName = 'second'), (env) => expect(Object.values(env)).toContain('second')],
    ['the app key is regenerated', () => (ctx.appKey = 'key-2'), (env) => expect(Object.values(env)).toContain('key-2')],
    ['a new target', () => state.setTarget(target('img:2')), () => expect(state.desired().get('1/main')!.spec.image).toBe('img:2')],
  ];
  for (const [what, change, check] of changes) {
    const before = state.desired();
    change();
    const after = state.desired();
    expect(after, what).not.toBe(before);
    expect(after.get('1/main'), what).toEqual(fromScratch());
    check(envOf());
    expect(state.desired(), `${what}, asked again`).toBe(after);
  }
  state.close();
});

it('shares a status read among concurrent readers, but not one begun before a write ended', async () => {
  const store = DeviceStore.open(join(dir, 'data'), initialRecord);
  const specContext = deviceDev;
  const locks = locksOf(store);
  // Each engine read waits until the test lets it answer: the race, made to happen every time.
  const reads: Array<(s: EngineSnapshot) => void> = [];
  engine.snapshot = () => new Promise<EngineSnapshot>((resolve) => reads.push(resolve));
  const snapshot = (state: ContainerState): EngineSnapshot => ({
    containers: [{ id: `c-${state}`, name: 'main_1_1_c1', appId: 1, serviceName: 'main', serviceId: 1, imageId: 1, releaseId: 1, commit: 'c1', configHash: 'h', state, createdAt: new Date(0).toISOString(), image: 'img:1', engineImageId: 'sha256:1' }],
    volumes: [],
    networks: [],
    images: new Map(),
  });
  const state = new StateEngine({ engine, locks, log: { info: () => undefined, warn: () => undefined, error: () => undefined }, specContext }, target('img:1'));
  const flush = () => new Promise((r) => setImmediate(r));

  // A dashboard's poll reads; a second reader meanwhile shares its read.
  const poll = state.view();
  const alongside = state.view();
  await flush();
  expect(reads).toHaveLength(1);
  // A client starts a service (a write that ends while the poll's read is out), then asks.
  await state.exclusive(async () => undefined);
  const afterStart = state.view();
  await flush();
  expect(reads, "the client's read shares the poll's, which began before its start").toHaveLength(2);
  reads[0]!(snapshot('exited'));
  reads[1]!(snapshot('running'));
  const [p, a, c] = await Promise.all([poll, alongside, afterStart]);
  expect(a).toEqual(p);
  expect(JSON.stringify(c)).toContain('c-running');
  expect(JSON.stringify(c)).not.toContain('c-exited');
  state.close();
});

const twoServices = (): CheckedTarget => {
  const service = (id: number, name: string) => ({ serviceName: name, serviceId: id, imageId: id, image: `img:${name}`, environment: {}, labels: {} });
  const checked = checkTarget({ name: 'dev', config: {}, apps: { '1': { name: 'app', commit: 'c1', releaseId: 1, services: { '1': service(1, 'a'), '2': service(2, 'b') }, volumes: {}, networks: {} } } }, 'local.config');
  if (!checked.ok) throw new Error('test target refused');
  return checked.target;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A state engine on an engine that has both images and the app's network, and records what it is asked to make. */
function applier(create: (service: string) => Promise<void>) {
  const store = DeviceStore.open(join(dir, 'data'), initialRecord);
  const specContext = deviceDev;
  const locks = locksOf(store);
  /** What happened, in order: each container made, each round that failed. */
  const events: string[] = [];
  const containers: ManagedContainer[] = [];
  const state = new StateEngine({ engine, locks, log: { info: () => undefined, warn: () => undefined, error: (m: string) => void events.push(`failed: ${m}`) }, specContext, retryDelayMs: () => 60_000 }, twoServices());
  engine.snapshot = async () => ({
    containers: containers.map((c) => ({ ...c })),
    volumes: [],
    networks: [{ id: 'n1', name: '1_default', appId: 1, network: 'default' }],
    images: new Map([['img:a', 'sha256:a'], ['img:b', 'sha256:b']]),
  });
  engine.createContainer = async (spec) => {
    const want = [...state.desired().values()].find((d) => d.spec === spec)!;
    await create(want.service.serviceName);
    events.push(`made ${want.service.serviceName}`);
    containers.push(containerFor(state, want.service.serviceName));
    return `c-${want.service.serviceName}`;
  };
  engine.start = async (id) => {
    containers.find((c) => c.id === id)!.state = 'running';
  };
  return { state, events, containers };
}

/** Service `serviceName`'s container as the engine lists it once made: up to date, not started. */
function containerFor(state: StateEngine, serviceName: string): ManagedContainer {
  const want = state.desired().get(`1/${serviceName}`)!;
  return { id: `c-${serviceName}`, name: want.spec.name, appId: 1, serviceName, serviceId: want.service.serviceId, imageId: 1, releaseId: 1, commit: 'c1', configHash: want.configHash, state: 'created', createdAt: new Date(0).toISOString(), image: want.spec.image, engineImageId: 'sha256:x' };
}

describe("one round's new containers", () => {
  it('are made side by side', async () => {
    let inFlight = 0;
    let most = 0;
    const { state, containers } = applier(async () => {
      most = Math.max(most, ++inFlight);
      await sleep(20);
      inFlight--;
    });
    state.trigger();
    await state.settled();
    expect(containers.map((c) => `${c.serviceName} ${c.state}`).sort()).toEqual(['a running', 'b running']);
    expect(most).toBe(2);
    state.close();
  });

  it('all settle before a failed one fails the round, so none is still being made when the next round plans', async () => {
    const { state, events } = applier(async (service) => {
      if (service === 'b') throw new Error('no space left on device');
      await sleep(50);
    });
    state.trigger();
    await state.settled();
    expect(events).toEqual(['made a', expect.stringContaining('no space left on device')]);
    state.close();
  });
});

describe('exited containers on the first apply', () => {
  it('one found exited when the supervisor started is started once; one that ran and exited during that apply stays exited', async () => {
    const { state, events, containers } = applier(async () => undefined);
    // Service a's container of this very release, stopped when the supervisor came up (a reboot).
    containers.push({ ...containerFor(state, 'a'), state: 'exited' });
    const started: string[] = [];
    // Both are run-once services: each exits as soon as it starts, before the next round reads the engine.
    engine.start = async (id) => {
      started.push(id);
      containers.find((c) => c.id === id)!.state = 'exited';
    };
    state.trigger();
    await state.settled();
    expect(events).toEqual(['made b']);
    expect(started.sort()).toEqual(['c-a', 'c-b']);
    expect(state.lastError).toBeNull();
    state.close();
  });
});
