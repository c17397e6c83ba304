/**
 * The harness's HTTP client for device APIs (hil/lib/http.ts) against a real local server:
 * what a failed request says, and a session's own connection pool, which the qemu target
 * ends with the session because the next one may start from a restored VM snapshot.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { httpApi } from '../hil/lib/http.js';

const identity = (url: string) => ({ url, apiKey: 'k', uuid: 'u', vendor: 'platform' as const, lockRoot: '/tmp/locks' });

describe('httpApi', () => {
  let server: Server;
  let url: string;
  const sockets: Socket[] = [];

  beforeEach(async () => {
    sockets.length = 0;
    server = createServer((req, res) => {
      // A device that drops the connection instead of answering.
      if (req.url === '/drop') return req.socket.destroy();
      // A device still stopping a service with a long stop_grace_period.
      if (req.url === '/slow') return void setTimeout(() => res.end('late'), 2000);
      res.end('OK');
    });
    server.keepAliveTimeout = 60_000;
    server.on('connection', (s) => sockets.push(s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('names the request and the socket error when the connection fails', async () => {
    const api = httpApi(identity(url));
    await expect(api.request('GET', '/drop')).rejects.toThrow(/^GET \/drop: fetch failed: other side closed \(UND_ERR_SOCKET\)$/);
  });

  it('says what a request that outlives its timeout may be waiting on, and how to wait longer', async () => {
    const api = httpApi(identity(url));
    await expect(api.request('POST', '/slow', { timeoutMs: 200 })).rejects.toThrow(/^POST \/slow: no answer within 200 ms\. A stop or restart waits for each service's stop_grace_period.*\{ timeoutMs \}/);
    expect((await api.request('POST', '/slow', { timeoutMs: 5000 })).text).toBe('late');
  });

  it('keeps its connections alive in the given pool, and destroying the pool ends them at the device', async () => {
    const pool = new Agent();
    const api = httpApi(identity(url), { dispatcher: pool });
    expect((await api.request('GET', '/a')).text).toBe('OK');
    expect((await api.request('GET', '/b')).text).toBe('OK');
    const open = sockets.filter((s) => !s.destroyed);
    expect(open.length).toBeGreaterThan(0);
    const ended = Promise.all(open.map((s) => new Promise<void>((r) => s.once('close', () => r()))));
    await pool.destroy();
    await ended;
    expect(sockets.every((s) => s.destroyed)).toBe(true);
    await expect(api.request('GET', '/c')).rejects.toThrow(/^GET \/c: .*destroyed/i);
  });
});
