/**
 * A TCP load balancer on loopback in front of several cloud replicas, standing for the one
 * a deployment puts there (HAProxy, nginx `stream`, a cloud load balancer in TCP mode).
 * Connections go round-robin; a backend that refuses (its process is dead) is skipped for
 * the next, as a health-checked balancer does. When a backend dies its connections close,
 * and the devices' new connections land on the replicas still alive.
 *
 * Each connection holds two descriptors (the client's and the backend's), so ten thousand
 * devices (two connections each) need 40,000: more than one process may open under a usual
 * limit. With `processes` above 1 this process only accepts, and hands each connection to one
 * of that many forwarding processes (balancer-worker.ts), as Node's cluster module does.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { simWorker } from '../entry.js';
import { listenOnLoopback } from './listen-loopback.js';
import { joinStreams } from '../../src/join-streams.js';

export interface Balancer {
  /** `http://127.0.0.1:<port>`: give this to devices and users instead of a replica's URL. */
  readonly url: string;
  close(): Promise<void>;
}

export interface Backend {
  readonly host: string;
  readonly port: number;
}

/** Pipes `client` to the first backend that accepts, trying each once from `start` on. */
export function forward(client: Socket, backends: readonly Backend[], start: number, track: (s: Socket) => void = () => undefined): void {
  track(client);
  client.pause();
  client.on('error', () => undefined);
  const attempt = (tried: number): void => {
    if (tried === backends.length || client.destroyed) return void client.destroy();
    const remote = createConnection(backends[(start + tried) % backends.length]!);
    track(remote);
    remote.once('error', () => attempt(tried + 1));
    remote.once('connect', () => {
      remote.removeAllListeners('error');
      joinStreams(client, remote);
      client.resume();
    });
  };
  attempt(0);
}

export async function startBalancer(backends: readonly Backend[], options: { processes?: number } = {}): Promise<Balancer> {
  if (backends.length === 0) throw new Error('balancer: give at least one backend');
  const processes = options.processes ?? 1;
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  };
  const workers: ChildProcess[] = [];
  let next = 0;
  let server: Server;
  if (processes <= 1) {
    server = createServer((client) => forward(client, backends, next++ % backends.length, track));
  } else {
    const { module, execArgv } = simWorker('network/balancer-worker');
    for (let i = 0; i < processes; i++) workers.push(fork(module, [JSON.stringify(backends)], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    // Paused until the worker takes it; sent, the handle is closed here.
    server = createServer({ pauseOnConnect: true }, (client) => {
      const n = next++;
      const worker = workers[n % workers.length]!;
      if (!worker.connected) return void client.destroy();
      worker.send({ start: n % backends.length }, client);
    });
  }
  const port = await listenOnLoopback(server, 'balancer');
  return {
    url: `http://127.0.0.1:${port}`,
    async close() {
      for (const s of sockets) s.destroy();
      const gone = workers.map((w) => (w.exitCode !== null || w.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => w.once('exit', () => r()))));
      for (const w of workers) w.kill('SIGTERM');
      await new Promise<void>((r) => server.close(() => r()));
      await Promise.all(gone);
    },
  };
}
