/**
 * planReplay on captured devices built the way the supervisor builds them (desiredContainer
 * with the original device's context): what was what the target asked for stays so under the
 * replay's own lock root, address and keys; what was not, is still not; the store and the lock
 * files move to the replay's lock root with the dead supervisor's marks intact.
 */
import { describe, expect, it } from 'vitest';
import { planReplay, type CapturedDevice, type InspectedContainer, type ReplayContext } from '../hil/capture/replay-plan.js';
import { REDACTED } from '../hil/capture/redact.js';
import { clockReading } from '../hil/capture/capture.js';
import { desiredContainer, type SpecContext } from '../src/supervisor/state/container-spec.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { deviceObjectName } from '../src/supervisor/adapters/engine.js';
import type { TargetApp, TargetState } from '../src/protocol/target-state.js';
import type { DeviceRecord } from '../src/supervisor/state/store.js';

const UUID = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
const VENDOR = 'balena';

const original: SpecContext = {
  vendor: VENDOR,
  uuid: UUID,
  deviceName: 'pi-17',
  deviceType: 'raspberrypi4-64',
  arch: 'aarch64',
  supervisorAddress: 'http://127.0.0.1:48484',
  supervisorPort: 48484,
  appKey: () => 'original-app-key-0123456789',
  lockDir: (appId, service) => `/tmp/balena-supervisor/services/${appId}/${service}`,
  networkName: (appId, n) => deviceObjectName(UUID, appId, n),
  volumeName: (appId, v) => deviceObjectName(UUID, appId, v),
};

const replay: ReplayContext = {
  lockRoot: '/tmp/fleetlab-replay-x/locks',
  supervisorAddress: 'http://127.0.0.1:40001',
  supervisorPort: 40001,
  arch: 'amd64',
  newKey: (() => {
    let n = 0;
    return () => `new-key-${++n}`;
  })(),
};

function app(release: number, env: Record<string, string>): TargetApp {
  return {
    appId: 1,
    name: 'greenhouse',
    commit: `c${release}`,
    releaseId: release,
    volumes: ['readings'],
    networks: ['default'],
    services: [{
      serviceName: 'sensor', serviceId: 11, imageId: 100 + release, image: 'registry.example/greenhouse-sensor:1',
      environment: env, labels: { 'io.balena.features.supervisor-api': '1' }, volumes: [{ volume: 'readings', path: '/data', readOnly: false }],
      restart: 'always', running: true,
    }],
  } as unknown as TargetApp;
}

/** The container the original supervisor made for the app's service, as `docker inspect` shows it after redaction. */
function inspected(a: TargetApp): InspectedContainer {
  const d = desiredContainer(a, a.services[0]!, original);
  const redacted = d.spec.env.map((e) => (/API_KEY=|TOKEN=/.test(e) ? `${e.slice(0, e.indexOf('=') + 1)}${REDACTED}` : e));
  return {
    Name: `/${d.spec.name}`,
    Config: { Image: d.spec.image, Cmd: ['node', 'sensor.js'], Env: ['PATH=/usr/local/bin:/usr/bin', ...redacted], Labels: { ...d.spec.labels, [LABEL.supervised]: 'true', [LABEL.device]: UUID } },
    HostConfig: { Binds: d.spec.binds, NetworkMode: d.spec.networkMode, RestartPolicy: { Name: 'always' } },
    State: { Status: 'running', Running: true, Restarting: false, ExitCode: 0 },
    NetworkSettings: { Networks: { [d.spec.networkMode]: { Aliases: ['sensor'] } } },
  };
}

function device(target: TargetState, container: InspectedContainer): CapturedDevice {
  const store: DeviceRecord = {
    uuid: UUID, deviceKey: REDACTED, appKeys: { 1: REDACTED }, localMode: true, deviceName: 'pi-17',
    localTarget: target, cloudTarget: null, registered: false, cloudKey: REDACTED, generation: 7,
    supervisorLocks: [{ file: '/tmp/balena-supervisor/services/1/sensor/updates.lock', owner: { instance: 'dead', boot: 'b', pid: 42 } }],
  };
  return {
    store,
    locks: {
      root: '/tmp/balena-supervisor/services',
      files: [{ path: '1/sensor/updates.lock', content: '{"lockedBy":"fleetlab-supervisor","instance":"dead","boot":"b","pid":42}' }],
    },
    containers: [container],
    images: { present: [{ Id: 'sha256:abc', RepoTags: ['registry.example/greenhouse-sensor:1'], Config: { Cmd: ['node', 'sensor.js'], Env: ['PATH=/usr/local/bin:/usr/bin'], Labels: { 'org.opencontainers.image.title': 'sensor "v1"' } } }], missing: [] },
    volumes: [{ Name: deviceObjectName(UUID, 1, 'readings'), Labels: { [LABEL.device]: UUID } }],
    networks: [{ Name: deviceObjectName(UUID, 1, 'default'), Labels: { [LABEL.device]: UUID } }],
  };
}

const targetOf = (a: TargetApp): TargetState => ({ name: 'pi-17', config: {}, apps: [a] });

describe('planReplay', () => {
  it('a container that was what the target asked for gets the hash the replayed supervisor computes for it', () => {
    const a = app(3, { INTERVAL: '5', API_TOKEN: 'secret' });
    const plan = planReplay(device(targetOf(a), inspected(a)), replay);
    const [c] = plan.containers;
    const wanted = desiredContainer(a, a.services[0]!, {
      ...original,
      arch: replay.arch,
      supervisorAddress: replay.supervisorAddress,
      supervisorPort: replay.supervisorPort,
      appKey: () => plan.store.appKeys['1']!,
      lockDir: (appId, service) => `${replay.lockRoot}/${appId}/${service}`,
    });
    expect(c!.create.Labels[LABEL.configHash]).toBe(wanted.configHash);
    expect(c!.create.HostConfig.Binds).toEqual(wanted.spec.binds);
    // The replay's own address and key, and the target's value where the bundle had none.
    expect(c!.create.Env).toEqual(expect.arrayContaining([
      'BALENA_SUPERVISOR_ADDRESS=http://127.0.0.1:40001',
      `BALENA_SUPERVISOR_API_KEY=${plan.store.appKeys['1']}`,
      'BALENA_DEVICE_ARCH=amd64',
      'BALENA_DEVICE_TYPE=raspberrypi4-64',
      'API_TOKEN=secret',
    ]));
    expect(plan.notes.join('\n')).not.toMatch(/redacted in the bundle/);
    expect(plan.vendor).toBe(VENDOR);
    expect(plan.deviceType).toBe('raspberrypi4-64');
  });

  it('a container of an older release, or with other settings, keeps its captured hash: the replay replaces it as the original would have', () => {
    const running = app(3, { INTERVAL: '5', API_TOKEN: 'secret' });
    const captured = inspected(running);
    const hash = captured.Config.Labels![LABEL.configHash];
    for (const target of [app(4, { INTERVAL: '5', API_TOKEN: 'secret' }), app(3, { INTERVAL: '10', API_TOKEN: 'secret' }), app(3, { INTERVAL: '5' })]) {
      const plan = planReplay(device(targetOf(target), captured), replay);
      expect(plan.containers[0]!.create.Labels[LABEL.configHash]).toBe(hash);
    }
    const plan = planReplay(device(targetOf(app(4, {})), captured), replay);
    expect(plan.containers[0]!.create.Env).toContain(`API_TOKEN=${REDACTED}`);
    expect(plan.notes.join('\n')).toContain(`1 environment values were redacted in the bundle and are "${REDACTED}" in the replayed containers`);
  });

  it('new keys, the lock files and their records under the replay\'s lock root with the dead supervisor\'s marks, as captured', () => {
    const a = app(3, {});
    const plan = planReplay(device(targetOf(a), inspected(a)), replay);
    expect(plan.store.deviceKey).toMatch(/^new-key-/);
    expect(plan.store.appKeys['1']).toMatch(/^new-key-/);
    expect(plan.store.cloudKey).toBe('');
    expect(plan.store.generation).toBe(7);
    expect(plan.store.supervisorLocks).toEqual([{ file: `${replay.lockRoot}/1/sensor/updates.lock`, owner: { instance: 'dead', boot: 'b', pid: 42 } }]);
    expect(plan.locks).toEqual([{ file: `${replay.lockRoot}/1/sensor/updates.lock`, content: '{"lockedBy":"fleetlab-supervisor","instance":"dead","boot":"b","pid":42}' }]);
  });

  it('stand-in images carry the captured config as import changes; the container joins its network under its alias', () => {
    const a = app(3, {});
    const plan = planReplay(device(targetOf(a), inspected(a)), replay);
    expect(plan.images).toEqual([{
      tags: ['registry.example/greenhouse-sensor:1'],
      changes: ['CMD ["node","sensor.js"]', 'ENV "PATH"="/usr/local/bin:/usr/bin"', 'LABEL "org.opencontainers.image.title"="sensor \\"v1\\""'],
    }]);
    const net = deviceObjectName(UUID, 1, 'default');
    expect(plan.containers[0]!.create.NetworkingConfig).toEqual({ EndpointsConfig: { [net]: { Aliases: ['sensor'] } } });
    expect(plan.containers[0]!.state).toBe('running');
  });
});

describe('the host and the clock of a replay', () => {
  const plain = () => device(targetOf(app(1, {})), inspected(app(1, {})));

  it("the hostname and the proxy files as the supervisor writes them; the proxy's password is in no capture, said so", () => {
    const plan = planReplay({ ...plain(), hostConfig: { network: { hostname: 'pi-17', proxy: { type: 'socks5', ip: '10.0.0.9', port: '1080', login: 'ops', noProxy: ['10.0.0.0/8', 'local'] } } } }, replay);
    expect(plan.host.hostname).toBe('pi-17');
    expect(plan.host.redsocksConf).toContain('type = socks5;');
    expect(plan.host.redsocksConf).toContain('login = "ops";');
    expect(plan.host.redsocksConf).not.toContain('password');
    expect(plan.host.noProxy).toBe('10.0.0.0/8\nlocal\n');
    expect(plan.notes).toContain("the proxy's password is in no capture (the API never shows it): the replayed proxy has its login and no password");
  });

  it('a proxy the supervisor would refuse is not replayed, and the replay says why', () => {
    const plan = planReplay({ ...plain(), hostConfig: { network: { hostname: 'pi-17', proxy: { type: 'socks5', ip: '10.0.0.9; evil', port: '1080' } } } }, replay);
    expect(plan.host).toEqual({ hostname: 'pi-17' });
    expect(plan.notes.join('\n')).toMatch(/the captured proxy is not replayed: .*ip/);
  });

  it('a clock off by more than the reading can tell is replayed; one within it is not; an unread one is said so', () => {
    expect(planReplay({ ...plain(), clock: { offsetMs: -3_600_000, roundTripMs: 80 } }, replay).clockOffsetMs).toBe(-3_600_000);
    const close = planReplay({ ...plain(), clock: { offsetMs: 700, roundTripMs: 80 } }, replay);
    expect(close.clockOffsetMs).toBeUndefined();
    expect(planReplay({ ...plain(), clock: { offsetMs: 1500, roundTripMs: 2000 } }, replay).clockOffsetMs).toBeUndefined();
    expect(planReplay(plain(), replay).notes).toContain("the device's clock was not read against the capturing host's (a bundle older than host/clock.json): the replay runs on time");
  });

  it("reads the device's date against the host's clock around it", () => {
    const asked = Date.parse('2026-11-26T10:00:00.000Z');
    expect(clockReading('2026-11-28T10:00:01.123456789Z\n41239.01 45760.07\n', asked, asked + 100)).toEqual({ device: '2026-11-28T10:00:01.123Z', capturedAt: '2026-11-26T10:00:00.050Z', offsetMs: 172_801_073, roundTripMs: 100 });
    expect(() => clockReading('not a date\n', asked, asked)).toThrow(/not a time/);
  });
});
