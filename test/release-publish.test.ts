/**
 * `fleetlab deploy --fleet`: a release published to a real fleetlab cloud (SQLite, in this
 * process) through its data API, and what a device of the fleet is then told to run.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { parseEnvFlags, runDeploy } from '../hil/harness/deploy-command.js';
import { parseCompose } from '../hil/release/compose.js';
import { compositionOf, fleetProgress, publishRelease } from '../hil/release/publish.js';
import type { Release } from '../hil/release/release.js';
import { startFleetCloud, type FleetCloud } from '../sim/stack.js';
import { composeTarget } from '../src/cloud/device/target-state.js';
import { checkWireState } from '../src/protocol/target-state.js';

let dir: string;
let cloud: FleetCloud;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-publish-'));
  cloud = await startFleetCloud({ port: 0, dataDir: dir, fleetName: 'greenhouse' });
});
afterAll(async () => {
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

const project = parseCompose(
  'services:\n  sensor:\n    build: ./sensor\n    environment: { RELEASE: "1" }\n    volumes: [readings:/data]\n    privileged: true\n    ports: ["8080:80"]\n    networks: [default, telemetry]\n  uploader:\n    image: fleetlab/busybox:latest\n    command: [sleep, "9"]\n    networks: [telemetry]\n    depends_on: [sensor]\nvolumes: { readings: {} }\nnetworks: { telemetry: {} }\n',
  '/t/greenhouse/compose.yaml',
);
const release = (commit: string): Release => ({ project, images: { sensor: 'greenhouse-sensor:abc', uploader: 'fleetlab/busybox:latest' }, imageIds: {}, commit, pulledAsNamed: [] });

describe('publishRelease', () => {
  it('creates the rows, pins the fleet, and says so', async () => {
    const lines: string[] = [];
    const published = await publishRelease(release('c0ffee01'), { url: cloud.url, apiKey: cloud.adminKey, fleet: 'greenhouse' }, (l) => lines.push(l));
    expect(published).toEqual({ fleetId: cloud.fleet.id, releaseId: expect.any(Number), commit: 'c0ffee01' });
    expect(lines).toEqual([`release ${published.releaseId} (c0ffee01) created on fleet greenhouse: sensor, uploader`, `fleet greenhouse (id ${cloud.fleet.id}) now runs release ${published.releaseId}`]);

    const fleet = (await cloud.call('GET', `/v6/application(${cloud.fleet.id})?$select=should_be_running__release`)) as { d: Array<{ should_be_running__release: { __id: number } }> };
    expect(fleet.d[0]!.should_be_running__release.__id).toBe(published.releaseId);
    const rel = (await cloud.call('GET', `/v6/release(${published.releaseId})?$select=commit,composition&$expand=release_image($expand=image($select=is_stored_at__image_location))`)) as {
      d: Array<{ composition: unknown; release_image: Array<{ image: Array<{ is_stored_at__image_location: string }> }> }>;
    };
    expect(rel.d[0]!.composition).toEqual(compositionOf(release('c0ffee01')));
    expect(rel.d[0]!.release_image.map((ri) => ri.image[0]!.is_stored_at__image_location).sort()).toEqual(['fleetlab/busybox:latest', 'greenhouse-sensor:abc']);
  });

  it('reuses a release already published, and the services of the fleet', async () => {
    const lines: string[] = [];
    const again = await publishRelease(release('c0ffee01'), { url: cloud.url, apiKey: cloud.adminKey, fleet: String(cloud.fleet.id) }, (l) => lines.push(l));
    expect(lines[0]).toBe(`release c0ffee01 is already on the cloud (release ${again.releaseId})`);
    const second = await publishRelease(release('c0ffee02'), { url: cloud.url, apiKey: cloud.adminKey, fleet: 'greenhouse' });
    expect(second.releaseId).not.toBe(again.releaseId);
    const services = (await cloud.call('GET', `/v6/service?$filter=application eq ${cloud.fleet.id}`)) as { d: unknown[] };
    expect(services.d).toHaveLength(2);
  });

  it("is what a fleet's device is told to run: each service with its settings", () => {
    const target = composeTarget({
      device: { uuid: 'u', name: 'd' },
      app: { id: 1, name: 'greenhouse' },
      release: { id: 7, commit: 'c0ffee01', composition: JSON.stringify(compositionOf(release('c0ffee01'))) },
      images: [
        { imageId: 11, location: 'greenhouse-sensor:abc', serviceId: 1, serviceName: 'sensor' },
        { imageId: 12, location: 'fleetlab/busybox:latest', serviceId: 2, serviceName: 'uploader' },
      ],
      env: { app: { FLEET: 'y' }, device: {} },
      config: { app: {}, device: {} },
    });
    expect(checkWireState(target)).toEqual([]);
    const app = target.apps['1']!;
    expect(app.volumes).toEqual({ readings: {} });
    expect(app.networks).toEqual({ telemetry: {} });
    expect(app.services['1']).toEqual({
      serviceName: 'sensor', serviceId: 1, imageId: 11, image: 'greenhouse-sensor:abc',
      environment: { RELEASE: '1', FLEET: 'y' }, labels: {}, volumes: ['readings:/data'], privileged: true, ports: ['8080:80'], networks: ['default', 'telemetry'],
    });
    expect(app.services['2']).toMatchObject({ image: 'fleetlab/busybox:latest', command: ['sleep', '9'], networks: ['telemetry'], depends_on: ['sensor'] });
  });

  it('counts the fleet: no devices yet', async () => {
    expect(await fleetProgress({ url: cloud.url, apiKey: cloud.adminKey, fleet: 'greenhouse' }, cloud.fleet.id, 1)).toEqual({ devices: 0, online: 0, running: 0 });
  });

  it('names what is wrong: fleet, key, cloud', async () => {
    await expect(publishRelease(release('x'), { url: cloud.url, apiKey: cloud.adminKey, fleet: 'nope' })).rejects.toThrow(`no fleet "nope" on ${cloud.url} that this key may see`);
    await expect(publishRelease(release('x'), { url: cloud.url, apiKey: 'wrong', fleet: 'greenhouse' })).rejects.toThrow('the cloud refused the key (401)');
    await expect(publishRelease(release('x'), { url: 'http://127.0.0.1:9', apiKey: 'k', fleet: 'greenhouse' })).rejects.toThrow('the cloud at http://127.0.0.1:9 does not answer');
  });
});

describe('fleetlab deploy arguments', () => {
  const base = { compose: '/nowhere', dockerSocket: '/var/run/docker.sock', env: {}, wait: false, timeoutMs: 1000, log: () => undefined };
  it('wants exactly one destination and a key', async () => {
    await expect(runDeploy(base)).rejects.toThrow('name one destination: --device URL (a device in local mode) or --fleet NAME --cloud URL');
    await expect(runDeploy({ ...base, device: 'http://x', fleet: 'f' })).rejects.toThrow('name one destination');
    await expect(runDeploy({ ...base, device: 'http://x' })).rejects.toThrow("--api-key: the device's API key is needed");
  });
  it('wants --registry for --arch, and HOST:PORT', async () => {
    await expect(runDeploy({ ...base, device: 'http://x', apiKey: 'k', arch: 'arm64' })).rejects.toThrow('--arch arm64 needs --registry HOST:PORT: a board pulls its release from a registry (fleetlab registry serves one)');
    await expect(runDeploy({ ...base, device: 'http://x', apiKey: 'k', registry: 'http://r:5000/' })).rejects.toThrow('--registry "http://r:5000/": write HOST:PORT, e.g. 127.0.0.1:5000');
  });
  it('leaves out the keys --ignore-key names, with a warning each, and refuses the rest', async () => {
    const appDir = mkdtempSync(join(tmpdir(), 'fleetlab-deploy-ignore-'));
    onTestFinished(() => rmSync(appDir, { recursive: true, force: true }));
    const compose = join(appDir, 'compose.yaml');
    writeFileSync(compose, 'services:\n  web:\n    image: fleetlab/test-app:1\n    logging: { driver: syslog }\n');
    const lines: string[] = [];
    const go = (ignoreKeys: string[]) => runDeploy({ ...base, compose, device: 'http://127.0.0.1:9', apiKey: 'k', dockerSocket: join(appDir, 'no-engine.sock'), ignoreKeys, log: (l) => lines.push(l) });
    await expect(go([])).rejects.toThrow(`${compose}:4: services.web.logging: is not supported by fleetlab yet`);
    // Past the compose file, the deploy stops at the device nothing answers for; what it said first is the point.
    await expect(go(['logging', 'expose'])).rejects.toThrow('no device answers at http://127.0.0.1:9');
    expect(lines.slice(0, 3)).toEqual([
      `warning: ${compose}:4: services.web.logging is ignored (ignoreComposeKeys: "logging"): the device runs the service without it`,
      `warning: --ignore-key expose names no key fleetlab refuses in ${compose}`,
      `${compose}: 1 service (web)`,
    ]);
  });

  it('reads --env as KEY=VALUE', () => {
    expect(parseEnvFlags(['A=1', 'B=x=y', 'C='])).toEqual({ A: '1', B: 'x=y', C: '' });
    expect(() => parseEnvFlags(['NOEQ'])).toThrow('--env "NOEQ": write KEY=VALUE');
  });
});
