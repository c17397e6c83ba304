/**
 * Property-based fuzzing of every device API endpoint (issue 16), over HTTP to a supervisor
 * on real peers (dockerd, the simulated D-Bus services, journalctl) with two apps running.
 * Requests come from test/helpers/device-api-arbitraries.ts. For each request:
 *
 * - no answer is 5xx;
 * - an answer of 4xx changed nothing: the device store (but its write counter), the target,
 *   containers, volumes, networks, update lock files, hostname, proxy and power requests;
 * - every error body has the documented shape (docs/errors.md): `{status:"failed",message}`,
 *   `{Data:"",Error}` on reboot, shutdown and v1 purge, and exactly
 *   `{"status":"failed","message":"Unauthorized"}` for a 401.
 *
 * The apps hold the update lock of every service for the whole run, so a well-formed action
 * is refused with 423 and must change nothing either, rather than restart services.
 *
 * Seeded and bounded: the seed is printed; FLEETLAB_FUZZ_SEED=<seed> reruns a run and
 * FLEETLAB_FUZZ_RUNS=<n> sets the runs per endpoint (default 10: about a minute in all).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL } from '../src/protocol/engine-labels.js';
import { deviceApiFuzzers, type EndpointFuzzer, type FuzzRequest } from './helpers/device-api-arbitraries.js';
import { checkedLocal, startSupervisorFixture, twoAppState, waitApplied, type SupervisorFixture } from './helpers/supervisor-fixture.js';

const runs = Number(process.env.FLEETLAB_FUZZ_RUNS ?? 10);

/** Inputs that once broke a property, tried first on every run. */
const regressions: Record<string, FuzzRequest[]> = {
  // A URL fastify cannot decode was answered with fastify's own error body.
  'any method, any path': [{ method: 'GET', url: '/v2/applications/%/state', key: 'device', payload: { kind: 'none' } }],
};
const malformedRegressions = [
  // A bad URL answered, then the rest read as a second request.
  'GET /v2/applications/%/state HTTP/1.1\r\n\r\n{}',
  // Not HTTP at all: fastify's clientError body ({error, message: "Client Error", statusCode}).
  'NOT HTTP\r\n\r\n',
  // No Host header: node's own 400 with an empty body.
  'GET /v1/device HTTP/1.1\r\n\r\n',
];
const seed = Number(process.env.FLEETLAB_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const services: Array<[number, string]> = [[1, 'main'], [1, 'worker'], [2, 'solo']];

let f: SupervisorFixture;
let port: number;
let containerIds: string[] = [];

const fuzzers = deviceApiFuzzers({ containerIds: () => containerIds, wholeState: twoAppState() });

beforeAll(async () => {
  console.log(`device API fuzz: seed ${seed}, ${runs} runs per endpoint (rerun with FLEETLAB_FUZZ_SEED=${seed}; more with FLEETLAB_FUZZ_RUNS)`);
  f = await startSupervisorFixture();
  await f.sup.setLocalTarget(checkedLocal(twoAppState()));
  await waitApplied(f.sup);
  containerIds = (await f.sup.engine.snapshot()).containers.map((c) => c.id);
  for (const [appId, service] of services) {
    mkdirSync(f.sup.locks.dir(appId, service), { recursive: true });
    writeFileSync(lockFile(appId, service), '');
  }
  const address = await f.sup.api.listen({ port: 0, host: '127.0.0.1' });
  port = Number(new URL(address).port);
});

afterAll(async () => {
  for (const [appId, service] of services) if (f) rmSync(lockFile(appId, service), { force: true });
  f?.sup.blinker.stop();
  await f?.close();
});

const lockFile = (appId: number, service: string) => join(f.sup.locks.dir(appId, service), 'updates.lock');

function lockFiles(): string[] {
  const root = f.sup.config.lockRoot;
  if (!existsSync(root)) return [];
  return (readdirSync(root, { recursive: true }) as string[]).filter((p) => p.endsWith('updates.lock')).sort();
}

/** What a rejected request must leave as it was. */
async function fingerprint() {
  const { generation: _writes, ...stored } = f.sup.store.get();
  // The supervisor's ledger of its own locks in flight: absent and empty say the same.
  const record = { ...stored, supervisorLocks: (stored as { supervisorLocks?: unknown[] }).supervisorLocks ?? [] };
  // The device's own engine objects, by its label (the engine's image list is long and not per device).
  const filters = { label: [`${LABEL.device}=${f.sup.uuid}`] };
  const [containers, volumes, networks] = await Promise.all([
    f.docker.listContainers({ all: true, filters }),
    f.docker.listVolumes({ filters }),
    f.docker.listNetworks({ filters }),
  ]);
  const bootConfig = f.sup.config.bootConfigPath;
  return {
    record,
    target: f.sup.state.getTarget(),
    containers: containers.map((c) => `${c.Id} ${c.State}`).sort(),
    volumes: (volumes.Volumes ?? []).map((v) => v.Name).sort(),
    networks: networks.map((n) => n.Name).sort(),
    locks: lockFiles(),
    hostname: f.peer.hostname,
    proxy: await f.sup.host.getProxy(),
    unitRestarts: f.peer.unitRestarts.length,
    power: f.peer.powerRequests.length,
    bootConfig: existsSync(bootConfig) ? readFileSync(bootConfig, 'utf8') : null,
  };
}

function withKey(req: FuzzRequest): { path: string; headers: Record<string, string> } {
  const add = (key: string) => `${req.url}${req.url.includes('?') ? '&' : '?'}apikey=${key}`;
  const device = f.sup.keys.deviceKey();
  switch (req.key) {
    case 'device': return { path: add(device), headers: {} };
    case 'device-bearer': return { path: req.url, headers: { authorization: `Bearer ${device}` } };
    case 'app1': return { path: add(f.sup.keys.appKey(1)), headers: {} };
    case 'app2': return { path: add(f.sup.keys.appKey(2)), headers: {} };
    case 'wrong': return { path: add('0'.repeat(32)), headers: {} };
    case 'twice': return { path: `${add(device)}&apikey=${device}`, headers: {} };
    case 'none': return { path: req.url, headers: {} };
  }
}

interface Answer {
  status: number;
  contentType: string;
  body: string;
}

/** One request over a fresh connection; a 2xx of a streaming endpoint is left after its head. */
function send(req: FuzzRequest, streams: boolean): Promise<Answer> {
  const { path, headers } = withKey(req);
  let body: Buffer | undefined;
  if (req.payload.kind === 'json') {
    body = Buffer.from(JSON.stringify(req.payload.value) ?? 'null');
    headers['content-type'] = 'application/json';
  } else if (req.payload.kind === 'raw') {
    body = Buffer.from(req.payload.text);
    headers['content-type'] = req.payload.contentType;
  }
  // Well-formed HTTP (node sends a GET's body unframed otherwise); malformed HTTP has its own property below.
  if (body) headers['content-length'] = String(body.length);
  return new Promise((resolve, reject) => {
    const r = httpRequest({ host: '127.0.0.1', port, method: req.method, path, headers, agent: false }, (res) => {
      const status = res.statusCode ?? 0;
      const contentType = String(res.headers['content-type'] ?? '');
      if (streams && status < 300) {
        res.destroy();
        resolve({ status, contentType, body: '' });
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status, contentType, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(body);
  });
}

function expectErrorShape(fuzzer: EndpointFuzzer, req: FuzzRequest, answer: Answer): void {
  if (req.method === 'HEAD') return;
  expect(answer.contentType).toMatch(/^application\/json/);
  const json = JSON.parse(answer.body) as Record<string, unknown>;
  if (answer.status === 401) {
    expect(json).toEqual({ status: 'failed', message: 'Unauthorized' });
    return;
  }
  const dataError = { Data: '', Error: expect.stringMatching(/\S/) };
  const statusError = { status: 'failed', message: expect.stringMatching(/\S/) };
  if (fuzzer.dataErrorEnvelope) expect(json).toEqual(dataError);
  // A random path may land on one of the {Data, Error} routes.
  else if (fuzzer.name === 'any method, any path' && 'Error' in json) expect(json).toEqual(dataError);
  else expect(json).toEqual(statusError);
}

/**
 * The one documented 5xx a request can get here: tags come from the cloud, and this device
 * has none (docs/decisions.md item 5, SUP_ERR_CLOUD_UNREACHABLE).
 */
function cloudNeeded(fuzzer: EndpointFuzzer, answer: Answer): boolean {
  return fuzzer.name === 'GET /v2/device/tags' && answer.status === 503 && /cloud/.test(answer.body);
}

/** Puts the device's own target back after a fuzzed target state that happened to be valid. */
async function restoreTarget(): Promise<void> {
  await f.sup.setLocalTarget(checkedLocal(twoAppState()));
  await f.sup.state.settled();
}

describe.each(fuzzers.map((fuzzer, index) => ({ fuzzer, index, name: fuzzer.name })))('$name', ({ fuzzer, index }) => {
  it('answers below 500, changes nothing when it refuses, and refuses in the documented shape', async () => {
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(fuzzer.request, async (req) => {
        await f.sup.state.settled();
        const before = await fingerprint();
        const answer = await send(req, fuzzer.streams ?? false);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        const what = `${req.method} ${req.url} -> ${answer.status} ${answer.body.slice(0, 300)}`;
        expect(answer.status, what).toBeGreaterThanOrEqual(200);
        if (!cloudNeeded(fuzzer, answer)) expect(answer.status, what).toBeLessThan(500);
        if (answer.status >= 400) {
          expectErrorShape(fuzzer, req, answer);
          await f.sup.state.settled();
          expect(await fingerprint(), what).toEqual(before);
        } else if (fuzzer.name === 'POST /v2/local/target-state') {
          await restoreTarget();
        }
      }),
      { seed: seed + index, numRuns: runs, examples: (regressions[fuzzer.name] ?? []).map((r) => [r] as [FuzzRequest]) },
    );
    console.log(`${fuzzer.name}: ${[...statuses].sort(([a], [b]) => a - b).map(([s, n]) => `${s}x${n}`).join(' ')}`);
  }, Math.max(60_000, runs * 3_000));
});

/** Bytes that are not (quite) HTTP; the server's answer, if any, as raw text. */
const malformedHttp = fc.oneof(
  fc
    .record({
      method: fc.constantFrom('GET', 'POST', 'PATCH', 'G ET', '', '\u0000', 'FOO', 'get'),
      path: fc.constantFrom('/v1/device', '/ping', '*', 'http://x/ping', '/%', '/%zz', ' ', '/\u00ff', '/v2/applications/%/state', ''),
      version: fc.constantFrom('1.1', '1.0', '2.0', '9', '1.1x', ''),
      headers: fc.array(
        fc.constantFrom(
          'Host: x', 'Content-Length: -1', 'Content-Length: abc', 'Content-Length: 5\r\nContent-Length: 6', 'Transfer-Encoding: chunked',
          'Transfer-Encoding: gzip, chunked', `X-Big: ${'a'.repeat(20_000)}`, 'Bad Header', ': novalue', 'Content-Type: application/json',
          'Authorization: Bearer', 'Expect: 100-continue',
        ),
        { maxLength: 4 },
      ),
      body: fc.constantFrom('', '{}', 'zz\r\n', '0\r\n\r\n', '5\r\n{"a":\r\n', '{"force":'),
    })
    .map(({ method, path, version, headers, body }) => `${method} ${path} HTTP/${version}\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n${body}`),
  fc.string({ unit: 'binary', maxLength: 200 }),
);

function sendRaw(bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    // Bounded: a server that neither answers nor closes fails the property with what it sent.
    socket.setTimeout(10_000, () => socket.destroy(new Error(`no answer and no close for ${JSON.stringify(bytes.slice(0, 200))}`)));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.on('error', (err: Error & { code?: string }) => (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? undefined : reject(err)));
    socket.end(Buffer.from(bytes, 'utf8'));
  });
}

describe('malformed HTTP', () => {
  it('is answered below 500 in the documented shape, or the connection is closed', async () => {
    await fc.assert(
      fc.asyncProperty(malformedHttp, async (bytes) => {
        const before = await fingerprint();
        const raw = await sendRaw(bytes);
        const what = `${JSON.stringify(bytes.slice(0, 200))} -> ${JSON.stringify(raw.slice(0, 300))}`;
        if (raw !== '') {
          const status = Number(/^HTTP\/1\.[01] (\d{3}) /.exec(raw)?.[1]);
          expect(status, what).toBeGreaterThanOrEqual(100);
          expect(status, what).toBeLessThan(500);
          if (status >= 400) {
            // The first answer only: bytes after a request can be read as a second one.
            const head = raw.slice(0, raw.indexOf('\r\n\r\n'));
            const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1]);
            const body = raw.slice(head.length + 4, head.length + 4 + length);
            expect(JSON.parse(body), what).toEqual({ status: 'failed', message: expect.stringMatching(/\S/) });
            await f.sup.state.settled();
            expect(await fingerprint(), what).toEqual(before);
          }
        }
      }),
      { seed: seed + fuzzers.length, numRuns: runs * 2, examples: malformedRegressions.map((b) => [b] as [string]) },
    );
  }, Math.max(60_000, runs * 3_000));
});

describe('after the fuzz', () => {
  it('every journalctl a request started is gone (bounded wait: clients left streams early)', async () => {
    const children = async () => (await execa('ps', ['-o', 'pid=,comm=', '--ppid', String(process.pid)], { reject: false })).stdout;
    for (let i = 0; i < 100 && /journalctl/.test(await children()); i++) await new Promise((r) => setTimeout(r, 100));
    expect(await children()).not.toMatch(/journalctl/);
  });

  it('the device still runs both apps as before', async () => {
    const view = await f.sup.state.view();
    expect(view.services.map((s) => `${s.appId}/${s.serviceName} ${s.status}`).sort()).toEqual(['1/main Running', '1/worker Running', '2/solo Running']);
  });
});
