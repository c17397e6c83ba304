/**
 * The tunnel hub's online/offline bookkeeping when the database is slow: a device that drops
 * its tunnel and reconnects while its first online write still waits must end online, with
 * the writes landing in the order the events came (src/cloud/device/tunnel-hub.ts).
 */
import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { TunnelHub } from '../src/cloud/device/tunnel-hub.js';

const uuid = 'b'.repeat(32);

describe('tunnel hub bookkeeping', () => {
  let server: Server | undefined;
  let hub: TunnelHub | undefined;
  afterEach(async () => {
    await hub?.close();
    await new Promise((r) => server?.close(r));
  });

  it('a reconnect during a slow online write ends online: writes land in event order', async () => {
    let releaseFirst: () => void = () => undefined;
    const firstHeld = new Promise<void>((r) => (releaseFirst = r));
    const landed: boolean[] = [];
    let calls = 0;
    hub = new TunnelHub({
      authenticate: async () => ({ deviceId: 1 }),
      async onChange(_uuid, _id, online) {
        // The first write waits on the database, as one does behind a busy pool.
        if (calls++ === 0) await firstHeld;
        landed.push(online);
      },
      heartbeatMs: 60_000,
      log: { warn: () => undefined },
    });
    server = createServer();
    hub.attach(server);
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `ws://127.0.0.1:${(server.address() as { port: number }).port}/device/v3/${uuid}/tunnel`;
    const open = async () => {
      const ws = new WebSocket(url, { headers: { authorization: 'Bearer k' } });
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      return ws;
    };
    const until = async (what: string, ok: () => boolean) => {
      for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
      if (!ok()) throw new Error(`not reached: ${what}`);
    };

    const first = await open();
    await until('the first tunnel adopted', () => hub!.isOnline(uuid));
    first.close();
    await until('the first tunnel gone', () => !hub!.isOnline(uuid));
    const second = await open();
    await until('the second tunnel adopted', () => hub!.isOnline(uuid));
    releaseFirst();
    await until('three writes landed', () => landed.length === 3);
    expect(landed).toEqual([true, false, true]);
    second.close();
  });
});
