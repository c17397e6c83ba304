/**
 * A service's host settings (privileged, capabilities, devices, tmpfs, ports) from the target
 * state to the Engine API, checked on the real dockerd; and a container made before these
 * settings existed keeps its config hash, so a supervisor upgrade recreates nothing.
 */
import { randomUUID } from 'node:crypto';
import Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine, hostSettings } from '../src/supervisor/adapters/engine.js';
import { desiredContainer, type SpecContext } from '../src/supervisor/state/container-spec.js';
import { normaliseService, type TargetApp } from '../src/protocol/target-state.js';
import { freePort } from '../src/free-port.js';

const SOCKET = '/var/run/docker.sock';
const docker = new Docker({ socketPath: SOCKET });
const device = randomUUID().replace(/-/g, '');
const created: string[] = [];

afterAll(async () => {
  for (const id of created) await docker.getContainer(id).remove({ force: true }).catch(() => undefined);
});

describe('hostSettings', () => {
  it("maps compose's forms onto HostConfig", () => {
    expect(hostSettings({ privileged: true, capAdd: ['NET_ADMIN'], capDrop: ['MKNOD'], devices: ['/dev/i2c-1', '/dev/ttyUSB0:/dev/ttyS9:rw'], tmpfs: ['/run', '/cache:size=1m,mode=1777'], ports: ['8080:80', '127.0.0.1:5353:53/udp', '[::1]:9000:90'] })).toEqual({
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
    expect(hostSettings({})).toEqual({ hostConfig: {} });
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
});
