/**
 * A device's published ports and host network are its own (DESIGN.md, "a device is a
 * device"): two simulated devices on the machine's one dockerd both deploy an app that
 * publishes 8080 and has a host-network service on 8081, both run it, and `device.address()`
 * reaches each one's own containers: the published port at the device's own loopback address,
 * read from what dockerd bound, the host-network one in the device's host-network container.
 * Before publishAddress the second device's web failed to start (both asked dockerd for 8080
 * on all interfaces); before the host-network container its beacon did (8081 was taken).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { devicePublishAddress, keptPublishAddress } from '../sim/publish-address.js';
import { Device } from '../hil/harness/device.js';
import { bindingFrom, publishedFrom } from '../hil/targets/engine-ports.js';
import { guestPortFor } from '../hil/targets/qemu-ports.js';
import { simTarget } from '../hil/targets/sim.js';
import type { DeviceUnderTest } from '../device-access/protocols.js';
import { dockerdSocket } from './helpers/engine-targets.js';
import { HOST_NETWORK_LABEL } from '../sim/host-network.js';

const APP = fileURLToPath(new URL('../fixtures/apps/greeter', import.meta.url));
const docker = new Docker({ socketPath: dockerdSocket });
const OWN_LOOPBACK = /^127\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d{1,3}\.\d{1,3}$/;

async function rejection(promise: Promise<unknown>): Promise<FleetlabError> {
  const err = await promise.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(FleetlabError);
  return err as FleetlabError;
}

describe('the publish address of a simulated device', () => {
  it('is drawn from 127.64.0.0/10, never a .0 or .255', () => {
    expect(devicePublishAddress(Buffer.from([0, 0, 0]))).toBe('127.64.0.1');
    expect(devicePublishAddress(Buffer.from([0xff, 0xff, 253]))).toBe('127.127.255.254');
    expect(devicePublishAddress(Buffer.from([0x80, 7, 254]))).toBe('127.64.7.1');
    for (let i = 0; i < 2000; i++) {
      const address = devicePublishAddress();
      expect(address).toMatch(OWN_LOOPBACK);
      expect(address).not.toMatch(/\.(0|255)$/);
    }
  });

  it('is kept in the data directory, so the device started again on the same data has it again', () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'fleetlab-publish-'));
    try {
      const first = keptPublishAddress(dataDir);
      expect(first).toMatch(OWN_LOOPBACK);
      expect(keptPublishAddress(dataDir, () => '127.64.9.9')).toBe(first);
      // A file that holds no address is drawn again.
      writeFileSync(join(dataDir, 'publish-address'), 'garbage\n');
      expect(keptPublishAddress(dataDir, () => '127.64.9.9')).toBe('127.64.9.9');
      expect(readFileSync(join(dataDir, 'publish-address'), 'utf8')).toBe('127.64.9.9\n');
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('where the harness reaches a published port', () => {
  it('reads the binding dockerd reports, a wildcard as loopback, IPv4 first', () => {
    expect(publishedFrom({ '80/tcp': [{ HostIp: '127.77.3.9', HostPort: '8080' }] }, '80/tcp')).toEqual({ host: '127.77.3.9', port: 8080 });
    expect(publishedFrom({ '80/tcp': [{ HostIp: '::', HostPort: '8081' }, { HostIp: '0.0.0.0', HostPort: '8081' }] }, '80/tcp')).toEqual({ host: '127.0.0.1', port: 8081 });
    expect(publishedFrom({ '80/tcp': [{ HostIp: '::', HostPort: '8081' }] }, '80/tcp')).toEqual({ host: '::1', port: 8081 });
    // Exposed but not published (dockerd's null), and not there at all.
    expect(publishedFrom({ '81/tcp': null }, '81/tcp')).toBeUndefined();
    expect(publishedFrom({}, '80/tcp')).toBeUndefined();
  });

  it('on an emulated board, forwards to a binding on all its addresses or the one a forward arrives at, and refuses its loopback', () => {
    const what = 'port 80/tcp of service web (app 1)';
    expect(bindingFrom({ '80/tcp': [{ HostIp: '::', HostPort: '8080' }, { HostIp: '0.0.0.0', HostPort: '8080' }] }, '80/tcp')).toEqual({ hostIp: '0.0.0.0', port: 8080 });
    for (const hostIp of [undefined, '', '0.0.0.0', '::', '10.0.2.15']) expect(guestPortFor({ hostIp, port: 8080 }, 80, what)).toBe(8080);
    const err = (() => {
      try {
        guestPortFor({ hostIp: '127.0.0.1', port: 8080 }, 80, what);
      } catch (e) {
        return e as FleetlabError;
      }
      return undefined;
    })();
    expect(err?.code).toBe('HIL_ERR_DEPLOY');
    expect(err?.message).toBe(`${what}: the board's engine binds it at 127.0.0.1:8080 only, which a forward from this machine cannot reach (it arrives at the board's 10.0.2.15); publish it on all of the board's addresses, e.g. ports: ["8080:80"]`);
  });

  it('is a capability error naming the target where the target has no ports', async () => {
    const dut = { target: 'board', capabilities: new Set(['api']), api: {}, supervisorLog: async () => '', close: async () => undefined } as unknown as DeviceUnderTest;
    const err = await rejection(new Device(dut, { startedAt: Date.now() }).address('web', 80));
    expect(err.code).toBe('HIL_ERR_CAPABILITY');
    expect(err.message).toContain('target board lacks capability ports');
  });
});

describe('two simulated devices on one dockerd, one app publishing 8080', () => {
  it('both run it, each at an address of its own that answers with its own container', async () => {
    const duts: DeviceUnderTest[] = [];
    try {
      // Both started at once; one that started is closed below even when the other failed.
      const started = await Promise.allSettled([simTarget.start({ engine: 'docker' }), simTarget.start({ engine: 'docker' })]);
      for (const r of started) if (r.status === 'fulfilled') duts.push(r.value);
      for (const r of started) if (r.status === 'rejected') throw r.reason;
      const devices = duts.map((d) => new Device(d, { startedAt: Date.now() }));
      expect(devices.every((d) => d.capabilities.has('ports'))).toBe(true);
      await Promise.all(devices.map((d, i) => d.deploy(APP, { env: { GREETING: `device ${i}` } })));
      for (const d of devices) expect((await d.status()).containers.map((c) => `${c.serviceName} ${c.status}`).sort()).toEqual(['beacon Running', 'web Running']);

      const urls = await Promise.all(devices.map((d) => d.address('web', 80)));
      const hosts = urls.map((u) => new URL(u).hostname);
      expect(urls.map((u) => new URL(u).port)).toEqual(['8080', '8080']);
      for (const host of hosts) expect(host).toMatch(OWN_LOOPBACK);
      expect(hosts[0]).not.toBe(hosts[1]);
      for (const [i, url] of urls.entries()) expect((await (await fetch(url)).text()).trim()).toBe(`device ${i}`);

      // What dockerd was asked for: the device's address, whatever the compose file said.
      for (const [i, d] of devices.entries()) {
        const [listed] = await docker.listContainers({ filters: { label: [`${LABEL.device}=${d.api.identity.uuid}`, `${LABEL.serviceName}=web`] } });
        const { HostConfig } = await docker.getContainer(listed!.Id).inspect();
        expect(HostConfig.PortBindings).toEqual({ '80/tcp': [{ HostIp: hosts[i], HostPort: '8080' }] });
      }

      // The host-network service of each listens on 8081 in the device's own host network,
      // a container of the device's (sim/host-network.ts), not in the machine's: both bound it.
      const beacons = await Promise.all(devices.map((d) => d.address('beacon', 8081)));
      expect(beacons.map((u) => new URL(u).port)).toEqual(['8081', '8081']);
      expect(new URL(beacons[0]!).hostname).not.toBe(new URL(beacons[1]!).hostname);
      for (const [i, url] of beacons.entries()) expect((await (await fetch(url)).text()).trim()).toBe(`device ${i}`);
      for (const d of devices) {
        const [beacon] = await docker.listContainers({ filters: { label: [`${LABEL.device}=${d.api.identity.uuid}`, `${LABEL.serviceName}=beacon`] } });
        const { HostConfig } = await docker.getContainer(beacon!.Id).inspect();
        const [holder] = await docker.listContainers({ filters: { label: [`${LABEL.device}=${d.api.identity.uuid}`, `${HOST_NETWORK_LABEL}=true`] } });
        // dockerd keeps the id of the container the name named.
        expect(HostConfig.NetworkMode).toBe(`container:${holder!.Id}`);
      }
      // Nothing of either device listens on the machine's own 8081.
      await expect(fetch('http://127.0.0.1:8081/', { signal: AbortSignal.timeout(2_000) })).rejects.toThrow();

      const unpublished = await rejection(devices[0]!.address('web', 81));
      expect(unpublished.code).toBe('HIL_ERR_DEPLOY');
      expect(unpublished.message).toContain('publishes 80/tcp');
      expect((await rejection(devices[0]!.address('db', 80))).message).toContain('no container of that service runs');
    } finally {
      for (const d of duts) await d.close().catch(() => undefined);
    }
    // The host-network containers went with their devices.
    for (const d of duts) expect(await docker.listContainers({ all: true, filters: { label: [`${LABEL.device}=${d.api.identity.uuid}`] } })).toEqual([]);
  }, 240_000);
});
