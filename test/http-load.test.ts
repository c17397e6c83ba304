/**
 * The benches' load generator against a real node:http server: it sends what it says,
 * frames answers however the bytes arrive, keeps to its schedule, counts what failed, and
 * refuses a plan it cannot run.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { AnswerFramer, runLoad, runLoadProcess } from '../bench/http-load.js';

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

async function serve(handler: Parameters<typeof createServer>[1]): Promise<number> {
  server = createServer(handler);
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

describe('AnswerFramer', () => {
  const answers = 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello' + 'HTTP/1.1 404 Not Found\r\ncontent-length:0\r\n\r\n' + 'HTTP/1.1 201 Created\r\nX-A: b\r\nContent-Length: 2\r\n\r\n{}';
  it('frames answers that arrive together, and byte by byte', () => {
    const whole: number[] = [];
    new AnswerFramer().feed(Buffer.from(answers), (s) => whole.push(s));
    expect(whole).toEqual([200, 404, 201]);
    const bytes: number[] = [];
    const framer = new AnswerFramer();
    for (const b of Buffer.from(answers)) framer.feed(Buffer.from([b]), (s) => bytes.push(s));
    expect(bytes).toEqual([200, 404, 201]);
  });
  it('frames chunked answers, with and without trailer fields, split anywhere', () => {
    const chunked = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nA\r\n0123456789\r\n0\r\n\r\n' + 'HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1\r\n\r\n' + 'HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n';
    for (const size of [chunked.length, 1, 2, 3, 7]) {
      const seen: number[] = [];
      const framer = new AnswerFramer();
      const bytes = Buffer.from(chunked);
      for (let i = 0; i < bytes.length; i += size) framer.feed(bytes.subarray(i, i + size), (s) => seen.push(s));
      expect(seen, `pieces of ${size}`).toEqual([200, 500, 204]);
    }
  });
  it('refuses a close-delimited answer and one that is not HTTP, saying so', () => {
    expect(() => new AnswerFramer().feed(Buffer.from('HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nbody'), () => {})).toThrow(/neither Content-Length nor chunked/);
    expect(() => new AnswerFramer().feed(Buffer.from('SSH-2.0-OpenSSH\r\n\r\n'), () => {})).toThrow(/not an HTTP/);
  });
});

describe('runLoad', () => {
  it('closed loop: answers every request over at most its connections, by status', async () => {
    let requests = 0;
    const sockets = new Set<unknown>();
    const port = await serve((req, res) => {
      requests++;
      sockets.add(req.socket);
      expect(req.url).toBe('/v1/device?apikey=k');
      res.writeHead(requests % 5 === 0 ? 401 : 200, { 'content-type': 'application/json' }).end('{"status":"Idle"}');
    });
    const r = await runLoad({ mode: 'closed', port, path: '/v1/device?apikey=k', connections: 4, total: 500 });
    expect(requests).toBe(500);
    expect(r.answered).toBe(500);
    expect(r.statuses).toEqual({ 200: 400, 401: 100 });
    expect(r.errors).toBe(0);
    expect(sockets.size).toBeLessThanOrEqual(4);
    expect(r.connections).toBe(4);
    expect(r.latencyMs.p50).toBeGreaterThan(0);
    expect(r.latencyMs.p99).toBeGreaterThanOrEqual(r.latencyMs.p50);
  });

  it('paced: keeps to its schedule (100 at 200 req/s take at least 495 ms), open loop past a slow answer', async () => {
    let requests = 0;
    const port = await serve((_req, res) => {
      // One answer held 150 ms: an open loop sends on meanwhile over another connection.
      if (++requests === 10) setTimeout(() => res.end('ok'), 150);
      else res.end('ok');
    });
    const r = await runLoad({ mode: 'paced', port, path: '/ping', rps: 200, total: 100 });
    expect(r.answered).toBe(100);
    expect(r.seconds).toBeGreaterThanOrEqual(0.495);
    expect(r.connections).toBeGreaterThan(1);
    expect(r.latencyMs.max).toBeGreaterThanOrEqual(140);
    expect(r.sendLateP99Ms).toBeTypeOf('number');
  });

  it('counts requests whose connection was cut, and goes on over new connections', async () => {
    let requests = 0;
    const port = await serve((req, res) => {
      if (++requests % 10 === 0) req.socket.destroy();
      else res.end('ok');
    });
    const r = await runLoad({ mode: 'closed', port, path: '/', connections: 2, total: 100 });
    expect(r.errors).toBe(10);
    expect(r.answered).toBe(90);
    expect(r.firstError).toMatch(/closed|reset/);
  });

  it('stops after a bounded number of failures when nothing listens', async () => {
    const port = await serve((_req, res) => res.end());
    await new Promise((resolve) => server!.close(resolve));
    server = undefined;
    const r = await runLoad({ mode: 'closed', port, path: '/', connections: 3, total: 1_000_000 });
    expect(r.answered).toBe(0);
    expect(r.errors).toBe(100);
    expect(r.firstError).toMatch(/ECONNREFUSED/);
  });

  it('refuses a plan it cannot run, saying what to fix', () => {
    expect(() => runLoad({ mode: 'closed', host: '10.0.0.1' as '127.0.0.1', port: 80, path: '/', connections: 1, total: 1 })).toThrow(/only to 127\.0\.0\.1/);
    expect(() => runLoad({ mode: 'closed', port: 80, path: 'v1/device', connections: 1, total: 1 })).toThrow(/path must start with \//);
    expect(() => runLoad({ mode: 'closed', port: 80, path: '/', connections: 0, total: 1 })).toThrow(/connections must be a whole number/);
    expect(() => runLoad({ mode: 'paced', port: 80, path: '/', rps: 0, total: 1 })).toThrow(/rps must be above 0/);
  });
});

describe('runLoadProcess', () => {
  it('runs the load in a node process of its own and returns its result', async () => {
    const clients = new Set<number | undefined>();
    const port = await serve((req, res) => {
      clients.add(req.socket.remotePort);
      res.end('ok');
    });
    const r = await runLoadProcess({ mode: 'closed', port, path: '/ping', connections: 2, total: 200 });
    expect(r.answered).toBe(200);
    expect(r.statuses).toEqual({ 200: 200 });
    expect(clients.size).toBe(2);
  });
  it('is stopped by its signal', async () => {
    const port = await serve((_req, res) => res.end('ok'));
    const stop = new AbortController();
    const run = runLoadProcess({ mode: 'paced', port, path: '/ping', rps: 10, total: 1_000 }, stop.signal);
    setTimeout(() => stop.abort(), 300);
    await expect(run).rejects.toThrow(/abort/i);
  });
});
