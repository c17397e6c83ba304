import { createServer, connect, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { joinStreams } from '../src/join-streams.js';

/** The servers' own ends: a reset by the far end is what some of these tests make happen. */
const ignore = () => undefined;

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** A server on loopback that hands each connection to `onSocket` (a reset by the far end ignored); its port. */
async function serve(onSocket: (s: Socket) => void): Promise<number> {
  const server = createServer((s) => onSocket(s.on('error', ignore)));
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as { port: number }).port;
}

/**
 * The device's end of a forward, as an SSH channel under an emulated board is: it takes each
 * chunk only after a while (the peer's window opens slowly), so what the host sent waits in it.
 */
function slowChannel(): Duplex & { received: Buffer[] } {
  const received: Buffer[] = [];
  const channel = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, done) {
      setTimeout(() => (received.push(chunk), done()), 2);
    },
    final(done) {
      this.push(null);
      done();
    },
  });
  return Object.assign(channel, { received });
}

describe('joinStreams', () => {
  it('delivers every byte the far end sent before it closed, to an end that takes them slowly', async () => {
    const payload = Buffer.alloc(4 * 1024 * 1024, 7);
    const channel = slowChannel();
    const port = await serve((s) => s.end(payload));
    await new Promise<void>((resolve) => joinStreams(channel, connect(port, '127.0.0.1'), resolve));
    expect(Buffer.concat(channel.received).length).toBe(payload.length);
    expect(channel.destroyed).toBe(true);
  });

  it('destroys the other end at once when one end fails mid-stream', async () => {
    const channel = slowChannel();
    const port = await serve((s) => {
      s.write(Buffer.alloc(64 * 1024, 1));
      setTimeout(() => s.resetAndDestroy(), 20);
    });
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => joinStreams(channel, socket, resolve));
    expect(channel.destroyed).toBe(true);
    expect(socket.destroyed).toBe(true);
  });

  it('destroys the other end at once when one end is destroyed (a client that hung up)', async () => {
    const channel = slowChannel();
    const socket = connect(await serve((s) => s.write(Buffer.alloc(1024, 1))), '127.0.0.1');
    const ended = new Promise<void>((resolve) => joinStreams(channel, socket, resolve));
    await once(socket, 'connect');
    channel.destroy();
    await ended;
    expect(socket.destroyed).toBe(true);
  });
});
