/**
 * A forwarding process of the balancer (balancer.ts): takes the connections its parent
 * accepted and pipes each to a backend. It exits when its parent goes (the channel closes),
 * and its connections close with it.
 */
import type { Socket } from 'node:net';
import { forward, type Backend } from './balancer.js';

const backends = JSON.parse(process.argv[2] ?? '[]') as Backend[];

process.on('message', (message: { start: number }, client: Socket | undefined) => {
  if (client) forward(client, backends, message.start);
});
process.on('disconnect', () => process.exit(0));
process.on('SIGINT', () => undefined);
