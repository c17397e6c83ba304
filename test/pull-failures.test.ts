/**
 * A failed image pull is a state, never a crash (issue 16 item 2). The supervisor runs over
 * the real dockerd, which pulls from Debian's Distribution registry on loopback: once with
 * the image missing (404 at once), once with no registry listening, once through a link that
 * cuts every layer download half way. Each time the supervisor stays up, reports the failure
 * (`downloadError` in /v2/state/status, `update_failed` in /v1/device), retries with backoff,
 * and applies once the image can be had.
 */
import { createServer, request, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/free-port.js';
import type { WireLocalState } from '../src/protocol/target-state.js';
import { loadCompose } from '../hil/release/compose.js';
import { buildServiceImage } from '../hil/release/image-build.js';
import { startRegistry, type Registry } from '../hil/release/registry.js';
import { streamDone } from '../src/engine-client/engine-stream.js';
import { startSupervisorFixture, waitApplied, type SupervisorFixture } from './helpers/supervisor-fixture.js';

let f: SupervisorFixture;
let dir: string;
const registries: Registry[] = [];
const pulledRefs: string[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);

beforeAll(async () => {
  process.on('unhandledRejection', onUnhandled);
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-pulls-'));
  f = await startSupervisorFixture();
}, 60_000);

afterAll(async () => {
  process.off('unhandledRejection', onUnhandled);
  await f?.close();
  for (const ref of pulledRefs) await f.docker.getImage(ref).remove({ force: true }).catch(() => undefined);
  for (const r of registries) await r.close();
  rmSync(dir, { recursive: true, force: true });
});

async function registryOn(port?: number): Promise<Registry> {
  const r = await startRegistry({ dir: mkdtempSync(join(dir, 'registry-')), ...(port ? { port } : {}) });
  registries.push(r);
  return r;
}

/**
 * Puts an image into a registry under `ref`, leaving no copy of `ref` in dockerd. `source` is
 * pushed; by default the local test image, whose layers dockerd already has, so a pull
 * downloads only the manifest and config.
 */
async function push(ref: string, source = 'fleetlab/test-app:1'): Promise<void> {
  const [repo, tag] = [ref.slice(0, ref.lastIndexOf(':')), ref.slice(ref.lastIndexOf(':') + 1)];
  await f.docker.getImage(source).tag({ repo, tag });
  await streamDone(f.docker, await f.docker.getImage(ref).push({ authconfig: { serveraddress: repo.slice(0, repo.indexOf('/')) } }));
  await f.docker.getImage(ref).remove();
}

function oneService(image: string, releaseId: number): WireLocalState {
  return {
    name: 'pull-test',
    config: { SUPERVISOR_LOCAL_MODE: '1' },
    apps: {
      '7': {
        name: 'pulls',
        commit: `pulls${releaseId}`,
        releaseId: String(releaseId),
        services: { '71': { serviceName: 'app', serviceId: 71, imageId: 700 + releaseId, image, environment: {}, labels: {} } },
        volumes: {},
        networks: {},
      },
    },
  };
}

async function api(method: 'GET' | 'POST', url: string, body?: unknown): Promise<any> {
  const res = await f.sup.api.inject({
    method,
    url: `${url}?apikey=${f.key()}`,
    ...(body === undefined ? {} : { payload: body as object, headers: { 'content-type': 'application/json' } }),
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

/** Waits (bounded) until the image's pull has failed and the API says so; returns the error. */
async function reportedFailure(image: string): Promise<string> {
  const deadline = Date.now() + 150_000;
  for (;;) {
    const status = await api('GET', '/v2/state/status');
    const entry = status.images.find((i: { name: string }) => i.name === image);
    if (entry?.downloadError) {
      expect(entry.status).toBe('Downloading');
      expect(status.appState).toBe('applying');
      expect((await api('GET', '/v1/device')).update_failed).toBe(true);
      return entry.downloadError as string;
    }
    if (Date.now() > deadline) throw new Error(`no pull failure reported for ${image}: ${JSON.stringify(status.images)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function expectAppliedWith(image: string): Promise<void> {
  await waitApplied(f.sup, 120_000);
  const status = await api('GET', '/v2/state/status');
  expect(status.images).toEqual([expect.objectContaining({ name: image, status: 'Downloaded' })]);
  expect(status.images[0].downloadError).toBeUndefined();
  expect(status.containers.map((c: { serviceName: string; status: string }) => [c.serviceName, c.status])).toEqual([['app', 'Running']]);
  expect((await api('GET', '/v1/device')).update_failed).toBe(false);
  expect(unhandled).toEqual([]);
}

describe('a failed pull is a state, retried until the image is there', () => {
  it('an image the registry does not have (404 at once)', async () => {
    const registry = await registryOn();
    const image = `${registry.host}/pulltest/missing:1`;
    pulledRefs.push(image);
    await api('POST', '/v2/local/target-state', { local: oneService(image, 1) });
    expect(await reportedFailure(image)).toMatch(/not found|manifest unknown/i);
    expect(unhandled).toEqual([]);
    await push(image);
    await expectAppliedWith(image);
  }, 240_000);

  it('a registry that is down', async () => {
    const port = await freePort();
    const image = `127.0.0.1:${port}/pulltest/down:2`;
    pulledRefs.push(image);
    await api('POST', '/v2/local/target-state', { local: oneService(image, 2) });
    expect(await reportedFailure(image)).toMatch(/connection refused/i);
    await registryOn(port);
    await push(image);
    await expectAppliedWith(image);
  }, 240_000);

  it('a link that cuts every layer download half way', async () => {
    const registry = await registryOn();
    const link = await cuttingLink(registry.port);
    try {
      const image = `127.0.0.1:${link.port}/pulltest/cut:3`;
      pulledRefs.push(image);
      // A layer dockerd has never seen (1 MiB of random bytes), so the pull must download it;
      // pushed straight to the registry, so only the pull goes through the cutting link.
      const built = await uniqueImage();
      await push(`${registry.host}/pulltest/cut:3`, built);
      await f.docker.getImage(built).remove();
      await api('POST', '/v2/local/target-state', { local: oneService(image, 3) });
      await reportedFailure(image);
      expect(link.cuts()).toBeGreaterThan(0);
      link.heal();
      await expectAppliedWith(image);
    } finally {
      await link.close();
    }
  }, 300_000);
});

/** Builds, through the release path, an image with a layer of its own; returns its reference. */
async function uniqueImage(): Promise<string> {
  const app = mkdtempSync(join(dir, 'app-'));
  writeFileSync(join(app, 'blob'), randomBytes(1 << 20));
  writeFileSync(join(app, 'Dockerfile'), 'FROM fleetlab/busybox:latest\nCOPY blob /blob\nCMD ["sleep", "3600"]\n');
  writeFileSync(join(app, 'compose.yaml'), 'services:\n  app:\n    build: .\n    image: fleetlab-pulltest/cut:source\n');
  const project = loadCompose(app);
  await buildServiceImage(project, project.services[0]!, { docker: f.docker });
  return 'fleetlab-pulltest/cut:source';
}

/**
 * A loopback HTTP link to the registry that, until healed, sends half of every blob (layer)
 * body and then drops the connection: a pull that fails half way, as on a flaky uplink.
 */
async function cuttingLink(registryPort: number): Promise<{ port: number; cuts(): number; heal(): void; close(): Promise<void> }> {
  let cutting = true;
  let cuts = 0;
  const server: Server = createServer((req, res) => {
    const upstream = request({ host: '127.0.0.1', port: registryPort, method: req.method, path: req.url, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      const length = Number(up.headers['content-length'] ?? 0);
      if (!cutting || req.method !== 'GET' || !/\/blobs\/sha256:/.test(req.url ?? '') || length < 2) {
        up.pipe(res);
        return;
      }
      let sent = 0;
      up.on('data', (chunk: Buffer) => {
        const room = Math.floor(length / 2) - sent;
        if (room <= 0) return;
        res.write(chunk.subarray(0, room));
        sent += Math.min(room, chunk.length);
        if (sent >= Math.floor(length / 2)) {
          cuts += 1;
          up.destroy();
          res.socket?.destroy();
        }
      });
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    port,
    cuts: () => cuts,
    heal: () => {
      cutting = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
