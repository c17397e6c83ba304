import { afterEach, describe, expect, it } from 'vitest';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { startPartitionableLink, type PartitionableLink } from '../sim/network/partitionable-link.js';

let echo: Server;
let link: PartitionableLink;

async function startEcho(): Promise<number> {
  echo = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
  return (echo.address() as { port: number }).port;
}

const portOf = (l: PartitionableLink) => Number(new URL(l.url).port);

function connect(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = createConnection({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
  });
}

/** The next data within `ms`, or null when none came (the partition swallowed it). */
function nextData(s: Socket, ms: number): Promise<string | null> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => (s.off('data', on), resolve(null)), ms);
    const on = (d: Buffer) => (clearTimeout(timer), resolve(d.toString()));
    s.once('data', on);
  });
}

afterEach(async () => {
  await link?.close();
  await new Promise<void>((r) => (echo ? echo.close(() => r()) : r()));
});

describe('partitionable link', () => {
  it('forwards, swallows traffic while partitioned, and carries new connections after heal', async () => {
    link = await startPartitionableLink({ host: '127.0.0.1', port: await startEcho() });
    const before = await connect(portOf(link));
    before.write('one');
    expect(await nextData(before, 2000)).toBe('one');

    link.partition();
    expect(link.partitioned).toBe(true);
    before.write('two');
    expect(await nextData(before, 300)).toBeNull();
    const during = await connect(portOf(link));
    during.write('three');
    expect(await nextData(during, 300)).toBeNull();

    const closed = Promise.all([before, during].map((s) => new Promise((r) => s.once('close', r))));
    link.heal();
    await closed;
    const after = await connect(portOf(link));
    after.write('four');
    expect(await nextData(after, 2000)).toBe('four');
    after.destroy();
  });
});
