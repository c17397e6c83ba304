/**
 * `fleetlab deploy --device URL --registry HOST:PORT`: the release is built, pushed to a real
 * registry (Debian's Distribution on loopback), and the device is told the registry
 * references. The device here shares the engine the release was built in, so it finds the
 * images without a pull; a device that pulls is test/release-registry.test.ts and the qemu target.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDeploy } from '../hil/harness/deploy-command.js';
import { startRegistry, type Registry } from '../hil/release/registry.js';
import { dockerSocket, startSupervisorFixture, type SupervisorFixture } from './helpers/supervisor-fixture.js';

let dir: string;
let registry: Registry;
let f: SupervisorFixture;
let url: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-deploy-registry-'));
  registry = await startRegistry({ dir: join(dir, 'registry') });
  f = await startSupervisorFixture();
  url = await f.sup.api.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  // The registry tags and the build's own content tag (greenhouse-sensor:<hash>).
  const pushed = (await f?.docker.listImages({ filters: { reference: [`${registry?.host}/*/*`, 'greenhouse-*'] } })) ?? [];
  await f?.close();
  for (const image of pushed) for (const tag of image.RepoTags ?? []) await f.docker.getImage(tag).remove().catch(() => undefined);
  await registry?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('fleetlab deploy --registry', () => {
  it('pushes the release and the device pulls it from the registry', async () => {
    const app = join(dir, 'greenhouse');
    mkdirSync(join(app, 'sensor'), { recursive: true });
    writeFileSync(join(app, 'sensor', 'Dockerfile'), 'FROM fleetlab/test-app:1\nENV ROLE=sensor\n');
    writeFileSync(join(app, 'compose.yaml'), 'services:\n  sensor:\n    build: ./sensor\n  clock:\n    image: fleetlab/test-app:2\n    depends_on: [sensor]\n');
    const lines: string[] = [];
    await runDeploy({ compose: app, device: url, apiKey: f.key(), dockerSocket, registry: registry.host, env: {}, wait: true, timeoutMs: 120_000, log: (l) => lines.push(l) });

    const running = await Promise.all(['sensor', 'clock'].map(async (n) => (await f.sup.actions.containers(1, n))[0]));
    const images = await Promise.all(running.map(async (c) => (await f.docker.getContainer(c!.id).inspect()).Config.Image));
    expect(images).toEqual([expect.stringMatching(new RegExp(`^${registry.host}/greenhouse/sensor:[0-9a-f]{16}$`)), expect.stringMatching(new RegExp(`^${registry.host}/greenhouse/clock:[0-9a-f]{16}$`))]);
    expect(lines.filter((l) => l.includes('pushed'))).toHaveLength(2);
    expect(lines.at(-1)).toMatch(/^release 1 runs: sensor, clock$/);
    for (const [i, service] of ['sensor', 'clock'].entries()) {
      const tags = (await (await fetch(`http://${registry.host}/v2/greenhouse/${service}/tags/list`)).json()) as { tags: string[] };
      expect(tags.tags).toEqual([images[i]!.slice(images[i]!.lastIndexOf(':') + 1)]);
    }
    expect(registry.pulls()).toEqual([]);
  });
});
