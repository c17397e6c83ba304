/**
 * A TCP load balancer on loopback in front of several cloud replicas, standing for the one
 * a deployment puts there (HAProxy, nginx `stream`, a cloud load balancer in TCP mode).
 * Connections go round-robin; a backend that refuses (its process is dead) is skipped for
 * the next, as a health-checked balancer does. When a backend dies its connections close,
 * and the devices' new connections land on the replicas still alive.
 */
import { createConnection, createServer, type Socket } from 'node:net';

export interface Balancer {
  /** `http://127.0.0.1:<port>`: give this to devices and users instead of a replica's URL. */
  readonly url: string;
  close(): Promise<void>;
}

export interface Backend {
  readonly host: string;
  readonly port: number;
}

export async function startBalancer(backends: readonly Backend[]): Promise<Balancer> {
  if (backends.length === 0) throw new Error('balancer: give at least one backend');
  const sockets = new Set<Socket>();
  let next = 0;
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  };

  const server = createServer((client) => {
    track(client);
    client.pause();
    client.on('error', () => undefined);
    // Each backend at most once per connection, starting from the next in turn.
    const start = next++ % backends.length;
    const attempt = (tried: number): void => {
      if (tried === backends.length || client.destroyed) return void client.destroy();
      const remote = createConnection(backends[(start + tried) % backends.length]!);
      track(remote);
      remote.once('error', () => attempt(tried + 1));
      remote.once('connect', () => {
        remote.removeAllListeners('error');
        remote.on('error', () => client.destroy());
        client.on('error', () => remote.destroy());
        client.on('close', () => remote.destroy());
        remote.on('close', () => client.destroy());
        client.pipe(remote);
        remote.pipe(client);
        client.resume();
      });
    };
    attempt(0);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (!address || typeof address !== 'object') throw new Error('balancer: no listening address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
