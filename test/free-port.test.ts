import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/free-port.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-port-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A stand-in for /proc/sys/net/ipv4/ip_local_port_range holding `range`. */
function rangeFile(range: string): string {
  const file = join(mkdtempSync(join(dir, 'range-')), 'range');
  writeFileSync(file, `${range}\n`);
  return file;
}

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

describe('freePort', () => {
  it('picks below the kernel ephemeral range, where no outgoing connection takes it, and the port binds', async () => {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      expect(port).toBeLessThan(low!);
      expect(port).toBeGreaterThanOrEqual(Math.max(1024, low! - 12_000));
      (await listen(port)).close();
    }
  });

  it('passes over a port something already listens on', async () => {
    // One candidate below the range, held here: every try fails and the OS picks instead.
    const held = await listen(0);
    const heldPort = (held.address() as { port: number }).port;
    try {
      const port = await freePort({ rangeFile: rangeFile(`${heldPort + 1} 60999`), span: 1 });
      expect(port).not.toBe(heldPort);
      (await listen(port)).close();
    } finally {
      held.close();
    }
  });

  it('lets the OS pick where the range cannot be read', async () => {
    const port = await freePort({ rangeFile: '/nonexistent/ip_local_port_range' });
    expect(port).toBeGreaterThan(0);
    (await listen(port)).close();
  });
});
