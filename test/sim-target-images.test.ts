/**
 * The sim target's `images` protocol on the simulated engine: a release is built in the host's
 * dockerd, pushed to a registry on loopback, and the device's simulated engine pulls it from
 * there (sim/engine/registry-client.ts), as a board pulls from the cloud. The capability is not
 * declared there (the simulated engine plays containers, it does not run the release's code),
 * so this drives the protocol directly, the way device.deploy() does (hil/harness/device.ts).
 */
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { DeviceApi } from '../hil/lib/device-api.js';
import { loadCompose } from '../hil/release/compose.js';
import { deployLocal } from '../hil/release/local-deploy.js';
import { createSimTarget, simTarget } from '../hil/targets/sim.js';
import type { DeviceUnderTest } from '../device-access/protocols.js';
import { dockerdSocket } from './helpers/engine-targets.js';

const APP = fileURLToPath(new URL('../fixtures/apps/counter', import.meta.url));
const host = new Docker({ socketPath: dockerdSocket });
const pushedTags: string[] = [];
const answers = (registry: string) => fetch(`http://${registry}/v2/`, { signal: AbortSignal.timeout(2_000) }).then((r) => r.ok, () => false);

afterAll(async () => {
  // pushRelease tags the built images with their registry references in dockerd.
  for (const ref of pushedTags) await host.getImage(ref).remove().catch(() => undefined);
});

describe('sim target on the simulated engine: images', () => {
  it('one registry per worker: a release built in dockerd is pulled from it by the device and runs; dispose stops it', async () => {
    const driver = createSimTarget();
    const devices: DeviceUnderTest[] = [];
    try {
      const a = await driver.start({ engine: 'sim' });
      devices.push(a);
      expect(a.capabilities.has('images')).toBe(false);
      const engine = await a.images!.prepare();
      expect(engine).toEqual({ engineSocket: dockerdSocket, registry: expect.stringMatching(/^127\.0\.0\.1:\d+$/) });
      const registry = engine.registry!;

      const release = await deployLocal({ api: new DeviceApi(a.api), project: loadCompose(APP), docker: new Docker({ socketPath: engine.engineSocket }), registry, log: () => undefined });
      pushedTags.push(...Object.values(release.images));
      expect(release.images.counter).toMatch(new RegExp(`^${registry.replace(/\./g, '\\.')}/counter/counter:[0-9a-f]{16}$`));
      const status = (await new DeviceApi(a.api).stateStatus()).body;
      expect(status.containers.map((c) => `${c.serviceName} ${c.status}`).sort()).toEqual(['counter Running', 'idle Running']);
      // The device's engine has the registry's image: dockerd's id, and the digest it pulled.
      const deviceEngine = new Docker({ socketPath: a.paths!.dockerHost!.replace(/^unix:\/\//, '') });
      const pulled = await deviceEngine.getImage(release.images.counter!).inspect();
      const built = await host.getImage(release.images.counter!).inspect();
      expect(pulled.Id).toBe(built.Id);
      const repo = release.images.counter!.slice(0, release.images.counter!.lastIndexOf(':'));
      expect(pulled.RepoDigests).toEqual(built.RepoDigests.filter((d) => d.startsWith(`${repo}@`)));

      // A second device of the worker gets the same registry; closing a device keeps it.
      const b = await driver.start({ engine: 'sim' });
      devices.push(b);
      expect((await b.images!.prepare()).registry).toBe(registry);
      await a.close();
      expect(await answers(registry)).toBe(true);
      await b.close();
      await driver.dispose!();
      expect(await answers(registry)).toBe(false);
    } finally {
      for (const d of devices) await d.close().catch(() => undefined);
      await driver.dispose?.();
    }
  }, 180_000);

  it('a device started outside a worker owns its registry: it stops when the device closes', async () => {
    const device = await simTarget.start({ engine: 'sim' });
    let registry = '';
    try {
      registry = (await device.images!.prepare()).registry!;
      expect(await answers(registry)).toBe(true);
    } finally {
      await device.close();
    }
    expect(await answers(registry)).toBe(false);
  }, 60_000);

  it('without dockerd, prepare() says what to install or start', async () => {
    const device = await simTarget.start({ engine: 'sim', dockerSocket: '/nonexistent/fleetlab/docker.sock' });
    try {
      await expect(device.images!.prepare()).rejects.toThrow(/no container engine answers at \/nonexistent\/fleetlab\/docker\.sock .*apt-get install docker\.io/);
    } finally {
      await device.close();
    }
  }, 60_000);
});
