/**
 * The device's end of the cloud tunnel (src/supervisor/adapters/cloud/tunnel.ts) against a real
 * WebSocket server: a handshake slower than the heartbeat still opens the tunnel on its first
 * attempt (a lab's short heartbeat once cut every handshake through a busy cloud, and the
 * growing backoff kept devices offline), and a server that never answers the upgrade is given
 * up on and tried again.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { HANDSHAKE_MIN_MS, Tunnel } from '../src/supervisor/adapters/cloud/tunnel.js';

let server: Server | undefined;
let tunnel: Tunnel | undefined;
/** Upgrades not answered yet: their sockets and the timers that would answer them. */
const pending: Array<{ socket: Duplex; timer: NodeJS.Timeout }> = [];
afterEach(async () => {
  tunnel?.close();
  for (const p of pending.splice(0)) {
    clearTimeout(p.timer);
    p.socket.destroy();
  }
  server?.closeAllConnections();
  await new Promise((r) => (server ? server.close(r) : r(undefined)));
  server = tunnel = undefined;
});

/** A tunnel endpoint that answers each upgrade after `delayMs`; counts the upgrades asked for. */
async function slowCloud(delayMs: number): Promise<{ url: string; upgrades: () => number }> {
  let upgrades = 0;
  const wss = new WebSocketServer({ noServer: true });
  server = createServer();
  server.on('upgrade', (req, socket, head) => {
    upgrades += 1;
    socket.on('error', () => undefined);
    pending.push({ socket, timer: setTimeout(() => wss.handleUpgrade(req, socket, head, () => undefined), delayMs) });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return { url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/tunnel`, upgrades: () => upgrades };
}

/** Starts the tunnel; resolves with how long it took to open. */
function open(url: string, heartbeatMs: number): Promise<number> {
  const started = Date.now();
  return new Promise((resolve) => {
    tunnel = new Tunnel({
      url,
      deviceKey: () => 'key',
      handle: async () => ({ type: 'response', id: 0, status: 200, body: '' }),
      backoff: { baseMs: 100, maxMs: 200 },
      heartbeatMs,
      log: { info: () => undefined, warn: () => undefined },
      onChange: (connected) => connected && resolve(Date.now() - started),
    });
    tunnel.start();
  });
}

describe("the device's cloud tunnel", () => {
  it('opens through a handshake slower than its heartbeat, on the first attempt', async () => {
    const cloud = await slowCloud(1_500);
    const tookMs = await open(cloud.url, 300);
    expect(tookMs).toBeGreaterThanOrEqual(1_400);
    expect(cloud.upgrades()).toBe(1);
  });

  it('gives up on an upgrade that is not answered within the handshake floor, and tries again', { timeout: HANDSHAKE_MIN_MS * 3 }, async () => {
    const cloud = await slowCloud(HANDSHAKE_MIN_MS + 3_000);
    const notOpen = new Promise((r) => setTimeout(() => r('not open'), HANDSHAKE_MIN_MS + 1_500));
    await expect(Promise.race([open(cloud.url, 300), notOpen])).resolves.toBe('not open');
    expect(cloud.upgrades()).toBe(2);
    expect(tunnel!.lastProblem).toMatch(/timed out/i);
  });
});
