/**
 * The device API on the supervisor network's gateway address (or, with the supervisor in a
 * container on that network, its address there), beside where it listens already: how a
 * service on a bridge network reaches it (supervisor-network.ts). A second
 * node server hands its requests to the same fastify instance, as fastify's own extra
 * bindings do, since fastify listens on one address of its own choosing.
 */
import { createServer, type Server } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { errorText } from '../errors.js';
import { listenCovers, peerInSubnet } from './supervisor-network.js';

export interface GatewayListenerDeps {
  api: FastifyInstance;
  port: number;
  /** Where the API listens already. */
  listenAddress: string;
  log: { info(msg: string): void; warn(msg: string): void };
}

export class GatewayListener {
  private server: Server | null = null;
  private bound: string | null = null;
  /** Gateways tried and found wanting, so a failure is logged once, not at every apply round. */
  private readonly refused = new Set<string>();
  private opening: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(private readonly deps: GatewayListenerDeps) {}

  /** Listens on `gateway` (once; a later call for another gateway moves there). Never throws: the API elsewhere stays up. */
  open(network: { apiHost: string; subnet: string }): Promise<void> {
    this.opening = this.opening.then(() => this.openNow(network));
    return this.opening;
  }

  private async openNow({ apiHost: gateway, subnet }: { apiHost: string; subnet: string }): Promise<void> {
    if (this.closed || this.bound === gateway || this.refused.has(gateway)) return;
    if (listenCovers(this.deps.listenAddress, gateway)) return;
    await this.closeServer();
    const { api, port } = this.deps;
    // As the main listener's (server.ts): a request without a Host header gets the API's answer.
    const server = createServer({ requireHostHeader: false }, (req, res) => api.routing(req, res));
    const { keepAliveTimeout } = api.initialConfig;
    if (keepAliveTimeout !== undefined) server.keepAliveTimeout = keepAliveTimeout;
    // The address chosen to listen on (loopback, say) kept the API local; the gateway is reachable
    // from wherever routes lead to this host, so only the network's own hosts are answered: its
    // services, and this host, whose address on that bridge is the gateway itself.
    server.on('connection', (socket) => {
      if (!peerInSubnet(socket.remoteAddress, subnet)) socket.destroy();
    });
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, gateway, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      this.refused.add(gateway);
      const code = (err as NodeJS.ErrnoException).code;
      // A simulated engine's network has no interface on this host; nothing on it can call.
      if (code === 'EADDRNOTAVAIL') this.deps.log.info(`Device API not on the supervisor network's gateway ${gateway}: no such address on this host`);
      else this.deps.log.warn(`Device API cannot listen on the supervisor network's gateway ${gateway}:${port}: ${errorText(err)}`);
      return;
    }
    this.server = server;
    this.bound = gateway;
    this.deps.log.info(`Device API listening on the supervisor network's gateway too: http://${gateway}:${port}`);
  }

  private async closeServer(): Promise<void> {
    const server = this.server;
    this.server = null;
    this.bound = null;
    if (!server) return;
    const done = new Promise<void>((resolve) => server.close(() => resolve()));
    // Journal follow streams stay open, as on the main listener (forceCloseConnections).
    server.closeAllConnections();
    await done;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.opening;
    await this.closeServer();
  }
}
