import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

const EPHEMERAL_RANGE_FILE = '/proc/sys/net/ipv4/ip_local_port_range';
/** How far below the ephemeral range it looks: wide enough that two pickers rarely meet. */
const SPAN = 12_000;
const TRIES = 50;

/**
 * A TCP port free on 127.0.0.1 right now, for a process that binds it a moment later.
 *
 * It is taken from just below the kernel's ephemeral range: a port the OS hands out itself can
 * become the source port of any outgoing loopback connection before its owner binds it (seen in
 * CI as EADDRINUSE when a supervisor started a few seconds after its port was picked), and a port
 * outside that range is never handed out that way. Where the range cannot be read, the OS picks.
 */
export async function freePort(options: { rangeFile?: string; span?: number } = {}): Promise<number> {
  const low = ephemeralLow(options.rangeFile ?? EPHEMERAL_RANGE_FILE);
  if (low !== undefined && low > 2048) {
    const from = Math.max(1024, low - (options.span ?? SPAN));
    for (let i = 0; i < TRIES; i++) {
      const port = from + Math.floor(Math.random() * (low - from));
      if (await bindable(port)) return port;
    }
  }
  return osPickedPort();
}

function ephemeralLow(rangeFile: string): number | undefined {
  try {
    const low = Number(readFileSync(rangeFile, 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : undefined;
  } catch {
    return undefined;
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolveBindable) => {
    const server = createServer();
    server.once('error', () => resolveBindable(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolveBindable(true)));
  });
}

function osPickedPort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no free port'))));
    });
  });
}
