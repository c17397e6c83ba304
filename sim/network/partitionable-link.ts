/**
 * A TCP forwarder on loopback standing for the network path between a simulated device and
 * the cloud. `partition()` behaves like a cut cable rather than a refused port: live
 * connections stop carrying bytes and new ones are accepted but never answered, so the
 * device meets timeouts and dead heartbeats, as in the field. `heal()` restores the path;
 * the sockets held during the partition are reset, as a NAT that lost its state would.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { listenOnLoopback } from './listen-loopback.js';
import { joinStreams } from '../../src/join-streams.js';

export interface PartitionableLink {
  /** `http://127.0.0.1:<port>`: give this to the device instead of the cloud URL. */
  readonly url: string;
  readonly partitioned: boolean;
  partition(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function startPartitionableLink(upstream: { host: string; port: number }): Promise<PartitionableLink> {
  const pairs = new Set<[Socket, Socket]>();
  const held = new Set<Socket>();
  let partitioned = false;

  const server: Server = createServer((client) => {
    client.on('error', () => undefined);
    if (partitioned) {
      held.add(client);
      client.on('close', () => held.delete(client));
      return;
    }
    client.pause();
    const remote = createConnection(upstream, () => client.resume());
    const pair: [Socket, Socket] = [client, remote];
    pairs.add(pair);
    joinStreams(client, remote, () => pairs.delete(pair));
  });
  const port = await listenOnLoopback(server, 'link');
  return {
    url: `http://127.0.0.1:${port}`,
    get partitioned() {
      return partitioned;
    },
    partition() {
      partitioned = true;
      // Stop carrying bytes both ways without closing: the ends only notice by timing out.
      for (const [client, remote] of pairs) {
        client.unpipe(remote);
        remote.unpipe(client);
        client.pause();
        remote.pause();
        held.add(client);
        held.add(remote);
      }
      pairs.clear();
    },
    heal() {
      partitioned = false;
      for (const socket of held) socket.destroy();
      held.clear();
    },
    async close() {
      for (const [a, b] of pairs) (a.destroy(), b.destroy());
      for (const s of held) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
