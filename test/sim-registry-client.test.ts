/**
 * The simulated engine's client of a loopback registry (sim/engine/registry-client.ts), against
 * a small registry served here on 127.0.0.1: the answers Debian's registry does not give (a
 * manifest list, NAME_UNKNOWN, no Docker-Content-Digest header, a config that does not match
 * its digest). The path against the real registry is in test/engine-contract.test.ts.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineApiError } from '../sim/engine/api-error.js';
import { loopbackRef, RegistryClient } from '../sim/engine/registry-client.js';

const digestOf = (b: string) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

const config = JSON.stringify({ created: '2026-02-03T04:05:06Z', config: { Cmd: ['sleep', '5'], Env: ['A=1'], Labels: { k: 'v' }, WorkingDir: '/w' } });
const manifest = JSON.stringify({
  schemaVersion: 2,
  mediaType: 'application/vnd.oci.image.manifest.v1+json',
  config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: digestOf(config), size: config.length },
  layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: `sha256:${'a'.repeat(64)}`, size: 1234 }],
});
const index = JSON.stringify({
  schemaVersion: 2,
  mediaType: 'application/vnd.oci.image.index.v1+json',
  manifests: [
    { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: `sha256:${'b'.repeat(64)}`, size: 10, platform: { os: 'linux', architecture: 'arm64' } },
    { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: digestOf(manifest), size: manifest.length, platform: { os: 'linux', architecture: 'amd64' } },
  ],
});
const badConfig = JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.docker.distribution.manifest.v2+json', config: { digest: `sha256:${'c'.repeat(64)}`, size: 2 }, layers: [] });

let server: Server;
let host: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const url = req.url ?? '';
    const json = (status: number, body: string, headers: Record<string, string> = {}) => res.writeHead(status, { 'Content-Type': 'application/json', ...headers }).end(body);
    if (url === '/v2/') return json(200, '{}');
    if (url === '/v2/app/manifests/plain' || url === `/v2/app/manifests/${digestOf(manifest)}`) return json(200, manifest);
    if (url === '/v2/app/manifests/multi') return json(200, index, { 'Docker-Content-Digest': digestOf(index) });
    if (url === '/v2/app/manifests/bad') return json(200, badConfig);
    if (url === `/v2/app/blobs/${digestOf(config)}`) return json(200, config);
    if (url === `/v2/app/blobs/sha256:${'c'.repeat(64)}`) return json(200, '{}');
    if (url.startsWith('/v2/gone/')) return json(404, '{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry","detail":{"name":"gone"}}]}');
    return json(404, '{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const resolve = (ref: string) => new RegistryClient({ timeoutMs: 5_000 }).resolve(ref, loopbackRef(ref)!);
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (err: EngineApiError) => ({ status: err.status, message: err.message }));

describe('loopbackRef', () => {
  it('takes loopback registries with a port and nothing else', () => {
    expect(loopbackRef('127.0.0.1:5000/p/s:0123')).toEqual({ domain: '127.0.0.1:5000', dial: '127.0.0.1:5000', path: 'p/s', tag: '0123' });
    expect(loopbackRef('localhost:5000/s:1')).toMatchObject({ domain: 'localhost:5000', dial: '127.0.0.1:5000' });
    expect(loopbackRef('[::1]:5000/s:1')).toMatchObject({ dial: '[::1]:5000' });
    expect(loopbackRef('127.1.2.3:80/s:latest')).toMatchObject({ path: 's' });
    for (const other of ['busybox:latest', 'registry.example.com:5000/s:1', '10.0.0.1:5000/s:1', 'localhost/s:1', '127.0.0.1:5000/s@sha256:00']) expect(loopbackRef(other)).toBeUndefined();
  });
});

describe('RegistryClient', () => {
  it('resolves an OCI manifest: config digest is the id, sha256 of the manifest bytes its digest', async () => {
    const image = await resolve(`${host}/app:plain`);
    expect(image).toEqual({
      ref: `${host}/app:plain`,
      layers: [{ digest: `sha256:${'a'.repeat(64)}`, size: 1234 }],
      config: { Cmd: ['sleep', '5'], Entrypoint: null, Env: ['A=1'], Labels: { k: 'v' }, WorkingDir: '/w' },
      id: digestOf(config),
      digest: digestOf(manifest),
      created: '2026-02-03T04:05:06Z',
    });
  });

  it('resolves an index for linux/amd64; the digest pulled is the index\'s', async () => {
    const image = await resolve(`${host}/app:multi`);
    expect(image.id).toBe(digestOf(config));
    expect(image.digest).toBe(digestOf(index));
  });

  it('maps registry errors to dockerd\'s words', async () => {
    expect(await failure(resolve(`${host}/app:nope`))).toEqual({ status: 404, message: `manifest for ${host}/app:nope not found: manifest unknown: manifest unknown` });
    expect(await failure(resolve(`${host}/gone:1`))).toEqual({ status: 404, message: `repository ${host}/gone not found: name unknown: repository name not known to registry` });
    expect(await failure(resolve(`${host}/app:bad`))).toEqual({ status: 500, message: `filesystem layer verification failed for digest sha256:${'c'.repeat(64)}` });
  });
});
