/**
 * A service's container settings (privileged, capabilities, devices, tmpfs, ports,
 * healthcheck, entrypoint, user, working_dir, stop signal and grace period, init, read_only,
 * sysctls, ulimits, extra_hosts, hostname, shm_size) from the target state to the Engine API,
 * checked on the real dockerd; and a container made before these settings existed keeps its
 * config hash, so a supervisor upgrade recreates nothing.
 */
import { randomUUID } from 'node:crypto';
import Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine, containerSettings, healthOfStatus, portBindings } from '../src/supervisor/adapters/engine.js';
import { desiredContainer, type SpecContext } from '../src/supervisor/state/container-spec.js';
import { checkWireState, normaliseService, normaliseState, toWireState, type TargetApp } from '../src/protocol/target-state.js';
import { freePort } from '../src/free-port.js';

const SOCKET = '/var/run/docker.sock';
const docker = new Docker({ socketPath: SOCKET });
const device = randomUUID().replace(/-/g, '');
const created: string[] = [];

afterAll(async () => {
  for (const id of created) await docker.getContainer(id).remove({ force: true }).catch(() => undefined);
});

describe('containerSettings', () => {
  it("maps compose's host forms onto HostConfig", () => {
    expect(containerSettings({ privileged: true, capAdd: ['NET_ADMIN'], capDrop: ['MKNOD'], devices: ['/dev/i2c-1', '/dev/ttyUSB0:/dev/ttyS9:rw'], tmpfs: ['/run', '/cache:size=1m,mode=1777'], ports: ['8080:80', '127.0.0.1:5353:53/udp', '[::1]:9000:90'] })).toEqual({
      config: {},
      hostConfig: {
        Privileged: true,
        CapAdd: ['NET_ADMIN'],
        CapDrop: ['MKNOD'],
        Devices: [
          { PathOnHost: '/dev/i2c-1', PathInContainer: '/dev/i2c-1', CgroupPermissions: 'rwm' },
          { PathOnHost: '/dev/ttyUSB0', PathInContainer: '/dev/ttyS9', CgroupPermissions: 'rw' },
        ],
        Tmpfs: { '/run': '', '/cache': 'size=1m,mode=1777' },
        PortBindings: { '80/tcp': [{ HostIp: '', HostPort: '8080' }], '53/udp': [{ HostIp: '127.0.0.1', HostPort: '5353' }], '90/tcp': [{ HostIp: '::1', HostPort: '9000' }] },
      },
      exposedPorts: { '80/tcp': {}, '53/udp': {}, '90/tcp': {} },
    });
    expect(containerSettings({})).toEqual({ config: {}, hostConfig: {} });
  });

  it('maps the rest as docker compose does: durations in ns, the grace period in whole seconds, sizes in bytes', () => {
    const service = normaliseService({
      serviceName: 'web', serviceId: 1, imageId: 1, image: 'x',
      healthcheck: { test: ['CMD-SHELL', 'wget -q -O- http://localhost/health'], interval: '1m30s', timeout: '500ms', start_period: '2s', retries: 5 },
      entrypoint: [], user: 'app:staff', working_dir: '/srv', stop_signal: 'SIGINT', stop_grace_period: '1m30.9s', hostname: 'web-1',
      init: true, read_only: true, sysctls: { 'net.core.somaxconn': '1024' }, ulimits: { nofile: { soft: 1024, hard: 4096 }, nproc: 512 },
      extra_hosts: ['db.local=10.0.0.5', 'v6:[::1]', 'old:10.0.0.6'], shm_size: '64m',
    });
    expect(containerSettings(service)).toEqual({
      config: {
        Healthcheck: { Test: ['CMD-SHELL', 'wget -q -O- http://localhost/health'], Interval: 90e9, Timeout: 500e6, StartPeriod: 2e9, Retries: 5 },
        Entrypoint: [], User: 'app:staff', WorkingDir: '/srv', StopSignal: 'SIGINT', StopTimeout: 90, Hostname: 'web-1',
      },
      hostConfig: {
        Init: true, ReadonlyRootfs: true, Sysctls: { 'net.core.somaxconn': '1024' },
        Ulimits: [{ Name: 'nofile', Soft: 1024, Hard: 4096 }, { Name: 'nproc', Soft: 512, Hard: 512 }],
        ExtraHosts: ['db.local:10.0.0.5', 'v6:::1', 'old:10.0.0.6'], ShmSize: 67108864,
      },
    });
  });

  it('binds every published port at the publish address when one is set, the spec\'s own host IP included', () => {
    const ports = ['8080:80', '127.0.0.1:5353:53/udp', '[::1]:9000:90', '0.0.0.0:8081:80'];
    expect(portBindings(ports, '127.77.3.9')).toEqual({
      '80/tcp': [{ HostIp: '127.77.3.9', HostPort: '8080' }, { HostIp: '127.77.3.9', HostPort: '8081' }],
      '53/udp': [{ HostIp: '127.77.3.9', HostPort: '5353' }],
      '90/tcp': [{ HostIp: '127.77.3.9', HostPort: '9000' }],
    });
    // Unset is what a board does: as the compose file says.
    expect(portBindings(ports)).toEqual({
      '80/tcp': [{ HostIp: '', HostPort: '8080' }, { HostIp: '0.0.0.0', HostPort: '8081' }],
      '53/udp': [{ HostIp: '127.0.0.1', HostPort: '5353' }],
      '90/tcp': [{ HostIp: '::1', HostPort: '9000' }],
    });
    expect(containerSettings({ ports: ['8080:80'] }, '127.77.3.9').hostConfig.PortBindings).toEqual({ '80/tcp': [{ HostIp: '127.77.3.9', HostPort: '8080' }] });
    expect(containerSettings({ privileged: true }, '127.77.3.9')).toEqual({ config: {}, hostConfig: { Privileged: true } });
  });

  it("reads a listed container's health from its status, as Engine API 1.41 gives it", () => {
    expect(healthOfStatus('Up 3 seconds (healthy)')).toBe('healthy');
    expect(healthOfStatus('Up About a minute (unhealthy)')).toBe('unhealthy');
    expect(healthOfStatus('Up Less than a second (health: starting)')).toBe('starting');
    expect(healthOfStatus('Up 2 hours')).toBeUndefined();
  });
});

const ctx: SpecContext = {
  vendor: 'platform', uuid: device, deviceName: 'd', deviceType: 'raspberrypi3', arch: 'amd64',
  supervisorAddress: 'http://127.0.0.1:48484', supervisorPort: 48484,
  appKey: () => 'k', lockDir: () => '/tmp/locks', networkName: (a, n) => `${a}_${n}`, volumeName: (a, v) => `${a}_${v}`,
};
const app = (services: TargetApp['services']): TargetApp => ({ appId: 1, name: 'a', commit: 'c', releaseId: 1, services, volumes: [], networks: [] });

describe('the config hash', () => {
  it('is the same for a service without host settings as before they existed', () => {
    const plain = normaliseService({ serviceName: 'web', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', environment: {}, labels: {} });
    // What the supervisor before host settings (commit f1ef60f) computed for this service and device.
    expect(desiredContainer(app([plain]), plain, { ...ctx, uuid: 'abcdef0123456789abcdef0123456789' }).configHash).toBe('129302ba7dbf3530c0f28ab2f8163353');
    const privileged = normaliseService({ serviceName: 'web', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', environment: {}, labels: {}, privileged: true });
    // A setting changed is a container to replace.
    expect(desiredContainer(app([privileged]), privileged, ctx).configHash).not.toBe(desiredContainer(app([plain]), plain, ctx).configHash);
  });
});

describe('the publish address', () => {
  const web = normaliseService({ serviceName: 'web', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', environment: {}, labels: {}, ports: ['8080:80'] });
  const plain = normaliseService({ serviceName: 'db', serviceId: 2, imageId: 2, image: 'fleetlab/test-app:1', environment: {}, labels: {} });

  it('reaches the spec of a service that publishes ports, and its hash, so a moved address recreates it', () => {
    const at = (publishAddress?: string) => desiredContainer(app([web]), web, { ...ctx, ...(publishAddress ? { publishAddress } : {}) });
    expect(at('127.77.3.9').spec.publishAddress).toBe('127.77.3.9');
    expect(at().spec.publishAddress).toBeUndefined();
    expect(at('127.77.3.9').configHash).not.toBe(at().configHash);
    expect(at('127.77.3.9').configHash).not.toBe(at('127.77.3.10').configHash);
  });

  it('leaves a service without ports alone', () => {
    const withAddress = desiredContainer(app([plain]), plain, { ...ctx, publishAddress: '127.77.3.9' });
    expect(withAddress.spec.publishAddress).toBeUndefined();
    expect(withAddress.configHash).toBe(desiredContainer(app([plain]), plain, ctx).configHash);
  });
});

describe('the target state', () => {
  it('reads back as it was sent, so GET /v2/local/target-state shows what was posted', () => {
    const wire = {
      serviceName: 'web', serviceId: 1, imageId: 1, image: 'x', running: true, environment: {}, labels: {}, restart: 'always' as const,
      healthcheck: { test: ['CMD', 'true'], interval: '5s', start_period: '1s', retries: 2 }, entrypoint: ['/bin/sh'], user: '1000',
      working_dir: '/srv', stop_signal: 'SIGQUIT', stop_grace_period: '20s', init: false, read_only: true, sysctls: { 'net.ipv4.ip_forward': '1' },
      ulimits: { nofile: { soft: 10, hard: 20 } }, extra_hosts: ['db:10.0.0.5'], hostname: 'h', shm_size: 1024,
      depends_on: { db: { condition: 'service_healthy' as const }, cache: { condition: 'service_started' as const } },
    };
    const state = { name: 'd', config: {}, apps: { '1': { name: 'a', commit: 'c', releaseId: 1, services: { '1': wire }, volumes: {}, networks: {} } } };
    expect(toWireState(normaliseState(state)).apps['1']!.services['1']).toEqual(wire);
  });

  it('refuses what its schema cannot say, naming the field', () => {
    const base = { serviceName: 'web', serviceId: 1, imageId: 1, image: 'x' };
    const problems = (extra: object) => checkWireState({ name: 'd', config: {}, apps: { '1': { name: 'a', commit: 'c', releaseId: 1, services: { '1': { ...base, ...extra } } } } });
    expect(problems({ healthcheck: { test: ['curl', 'x'] } })).toEqual(['local.apps.1.services.1.healthcheck.test must be ["NONE"], ["CMD", program, args...] or ["CMD-SHELL", command]']);
    expect(problems({ ulimits: { nofile: { soft: 20, hard: 10 } } })).toEqual(['local.apps.1.services.1.ulimits.nofile: soft (20) must not exceed hard (10)']);
    expect(problems({ depends_on: { db: { condition: 'service_healthy' } } })).toEqual(['local.apps.1.services.1.depends_on: "db" is not a service of this app']);
  });
});

describe('on dockerd', () => {
  it('creates the container with those settings', async () => {
    const port = await freePort();
    const service = normaliseService({
      serviceName: 'io', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', environment: {}, labels: {},
      privileged: false, cap_add: ['NET_ADMIN'], cap_drop: ['MKNOD'], devices: ['/dev/null:/dev/fleetlab-null:r'], tmpfs: ['/scratch:size=1m'], ports: [`127.0.0.1:${port}:80`],
    });
    const desired = desiredContainer({ ...app([service]), networks: [] }, { ...service, networkMode: 'bridge' }, ctx);
    const engine = new Engine({ socketPath: SOCKET, device });
    const id = await engine.createContainer({ ...desired.spec, name: `fleetlab-host-settings-${process.pid}`, binds: [] });
    created.push(id);
    const { HostConfig, Config } = await docker.getContainer(id).inspect();
    expect(HostConfig.Privileged).toBe(false);
    expect(HostConfig.CapAdd).toEqual(['NET_ADMIN']);
    expect(HostConfig.CapDrop).toEqual(['MKNOD']);
    expect(HostConfig.Devices).toEqual([{ PathOnHost: '/dev/null', PathInContainer: '/dev/fleetlab-null', CgroupPermissions: 'r' }]);
    expect(HostConfig.Tmpfs).toEqual({ '/scratch': 'size=1m' });
    expect(HostConfig.PortBindings).toEqual({ '80/tcp': [{ HostIp: '127.0.0.1', HostPort: String(port) }] });
    expect(Config.ExposedPorts).toEqual({ '80/tcp': {} });
  });

  it('creates, runs and stops the container with the settings compose keys give it', async () => {
    const service = normaliseService({
      serviceName: 'run', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', environment: {}, labels: {},
      healthcheck: { test: ['CMD-SHELL', 'exit 0'], interval: '1s', retries: 2 }, user: '1000:1000', working_dir: '/tmp', stop_signal: 'SIGINT',
      stop_grace_period: '3s', init: true, read_only: true, sysctls: { 'net.ipv4.ip_unprivileged_port_start': '80' }, ulimits: { nofile: { soft: 512, hard: 1024 } },
      extra_hosts: ['db.local=10.0.0.5'], hostname: 'web-1', shm_size: '32m', entrypoint: ['/bin/sh', '-c'],
      command: ['echo "$(id -u) $(pwd) $(hostname) $(grep db.local /etc/hosts)"; trap "echo got INT; exit 0" INT; while :; do sleep 1 & wait $!; done'],
    });
    const desired = desiredContainer(app([service]), { ...service, networkMode: 'bridge' }, ctx);
    const engine = new Engine({ socketPath: SOCKET, device });
    const id = await engine.createContainer({ ...desired.spec, name: `fleetlab-run-settings-${process.pid}`, binds: [] });
    created.push(id);
    const { HostConfig, Config } = await docker.getContainer(id).inspect();
    expect(Config).toMatchObject({ User: '1000:1000', WorkingDir: '/tmp', StopSignal: 'SIGINT', StopTimeout: 3, Hostname: 'web-1', Entrypoint: ['/bin/sh', '-c'] });
    expect(Config.Healthcheck).toEqual({ Test: ['CMD-SHELL', 'exit 0'], Interval: 1e9, Retries: 2 });
    expect(HostConfig).toMatchObject({
      Init: true, ReadonlyRootfs: true, Sysctls: { 'net.ipv4.ip_unprivileged_port_start': '80' }, Ulimits: [{ Name: 'nofile', Soft: 512, Hard: 1024 }],
      ExtraHosts: ['db.local:10.0.0.5'], ShmSize: 32 * 1024 * 1024,
    });
    await engine.start(id);
    // The container the engine lists comes back healthy once a probe passed (the state endpoints read it from here).
    const deadline = Date.now() + 30_000;
    let listed = (await engine.snapshot()).containers.find((c) => c.id === id);
    while (listed?.health !== 'healthy' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      listed = (await engine.snapshot()).containers.find((c) => c.id === id);
    }
    expect(listed?.health).toBe('healthy');
    await engine.stop(id);
    const logs = (await docker.getContainer(id).logs({ stdout: true, stderr: true })).toString('utf8');
    expect(logs).toContain('1000 /tmp web-1 10.0.0.5');
    // Stopped by its own stop signal (SIGINT, which the script traps), not killed after the grace period.
    expect(logs).toContain('got INT');
    expect((await docker.getContainer(id).inspect()).State.ExitCode).toBe(0);
  });
});
