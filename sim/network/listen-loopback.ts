/** Listens on 127.0.0.1 at a port the kernel picks; resolves with the port. */
import type { Server } from 'node:net';

export async function listenOnLoopback(server: Server, what: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (!address || typeof address !== 'object') throw new Error(`${what}: no listening address`);
  return address.port;
}
