/**
 * The fleet's cloud round-trip times, read off node:http's diagnostics channels while the
 * supervisor's own cloud client makes its calls.
 */
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CloudLatency } from '../sim/fleet/latency.js';
import { CloudClient } from '../src/supervisor/adapters/cloud/cloud-client.js';

const UUID = 'b'.repeat(32);
const server = createServer((req, res) => {
  // Headers at once, the body later: the time counted is to the headers.
  res.writeHead(req.method === 'GET' ? 304 : 200, { 'content-type': 'application/json' });
  setTimeout(() => res.end(req.method === 'GET' ? undefined : '{}'), 20);
});
let origin = '';

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('CloudLatency', () => {
  it("counts the cloud client's calls by kind, and only those to the origins it watches", async () => {
    const watch = new CloudLatency(new Set([origin]));
    const other = new CloudLatency(new Set(['http://127.0.0.1:1']));
    try {
      const client = new CloudClient({ url: origin, timeoutMs: 5_000, interactiveTimeoutMs: 5_000 });
      await client.fetchTarget(UUID, 'key', '"e"');
      await client.fetchTarget(UUID, 'key', '"e"');
      await client.report('key', {} as never);
      // Not the cloud client, same origin, another path: counted as other.
      await new Promise<void>((resolve, reject) => request(`${origin}/ping`, (res) => res.resume().on('end', resolve)).on('error', reject).end());
      expect(watch.summary('target-state').count).toBe(2);
      expect(watch.summary('report').count).toBe(1);
      expect(watch.summary('other').count).toBe(1);
      expect(watch.summary('target-state').maxMs).toBeGreaterThan(0);
      expect(other.summary('target-state').count).toBe(0);
      watch.reset();
      expect(watch.summary('report').count).toBe(0);
    } finally {
      watch.close();
      other.close();
    }
  });
});
