/**
 * The cloud bench's own parts: what it takes as "the same answer" from fleetlab and pinejs,
 * which Node it runs them on, how it starts a server process, and the CPU time it reads
 * from /proc.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { comparable } from '../bench/cloud-peer.js';
import { postgresCpuMs, processCpuMs } from '../bench/cpu-time.js';
import { satisfiesCaretRange } from '../bench/peers/pinejs.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';
import { startReadyProcess } from '../support/ready-process.js';

describe('comparable: the records two servers must agree on', () => {
  const unordered = { ordered: false };
  it('ignores ids, key order and the order of an unordered collection', () => {
    const a = { d: [{ id: 1, device_name: 'x', is_online: true }, { id: 2, device_name: 'y', is_online: false }] };
    const b = { d: [{ is_online: false, device_name: 'y', id: 9 }, { device_name: 'x', id: 7, is_online: true }] };
    expect(JSON.stringify(comparable(a, unordered))).toBe(JSON.stringify(comparable(b, unordered)));
  });
  it('tells apart a different value, a missing record and a different order under $orderby', () => {
    const a = { d: [{ id: 1, device_name: 'x' }, { id: 2, device_name: 'y' }] };
    expect(JSON.stringify(comparable(a, unordered))).not.toBe(JSON.stringify(comparable({ d: [{ id: 1, device_name: 'x' }, { id: 2, device_name: 'z' }] }, unordered)));
    expect(JSON.stringify(comparable(a, unordered))).not.toBe(JSON.stringify(comparable({ d: [{ id: 1, device_name: 'x' }] }, unordered)));
    const reversed = { d: [...a.d].reverse() };
    expect(JSON.stringify(comparable(a, { ordered: true }))).not.toBe(JSON.stringify(comparable(reversed, { ordered: true })));
  });
  it('compares a $top inside $expand by count and fields only, not by which records', () => {
    const opts = { ordered: false, shapeOnly: ['owns__device'] };
    const a = { d: [{ app_name: 'f', owns__device: [{ device_name: 'a' }, { device_name: 'b' }] }] };
    const b = { d: [{ app_name: 'f', owns__device: [{ device_name: 'c' }, { device_name: 'd' }] }] };
    const fewer = { d: [{ app_name: 'f', owns__device: [{ device_name: 'c' }] }] };
    expect(JSON.stringify(comparable(a, opts))).toBe(JSON.stringify(comparable(b, opts)));
    expect(JSON.stringify(comparable(a, opts))).not.toBe(JSON.stringify(comparable(fewer, opts)));
  });
  it('compares a $count', () => {
    expect(comparable({ d: 500 }, unordered)).toEqual({ d: 500 });
  });
});

describe("satisfiesCaretRange: pinejs's engines.node", () => {
  const range = '^22.2.0 || ^24.5.0';
  it.each([
    ['v22.2.0', true],
    ['v22.13.1', true],
    ['v24.5.0', true],
    ['24.21.0', true],
    ['v20.20.2', false],
    ['v22.1.9', false],
    ['v24.4.1', false],
    ['v23.0.0', false],
    ['v25.0.0', false],
  ])('%s: %s', (version, inside) => expect(satisfiesCaretRange(version, range)).toBe(inside));
  it('refuses a range it cannot read rather than guess', () => {
    expect(() => satisfiesCaretRange('v24.0.0', '>=22')).toThrow(/not a \^ range/);
  });
});

describe('startReadyProcess', () => {
  const node = (script: string) => startReadyProcess<{ event: string }>(process.execPath, ['-e', script], { label: 'probe', timeoutMs: 5_000 });
  it('answers the parsed ready line, and says why the process is gone once it is', async () => {
    const p = await node(`console.log(JSON.stringify({ event: 'ready' })); console.error('bye'); setTimeout(() => process.exit(3), 50)`);
    expect(p.ready).toEqual({ event: 'ready' });
    expect(p.pid).toBeGreaterThan(0);
    expect(p.gone()).toBeUndefined();
    for (let i = 0; i < 50 && !p.gone(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await p.stop()).toBe(3);
    expect(p.gone()).toMatch(/probe exited \(code 3\): bye/);
  });
  it('leaves a process that got ready running past the start timeout', async () => {
    const p = await startReadyProcess(process.execPath, ['-e', `console.log('{"event":"ready"}'); setInterval(() => {}, 1000)`], { label: 'probe', timeoutMs: 1_500 });
    // Long enough for a node to start on a loaded machine (200 ms was not, on CI's Node 24 run).
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(p.gone()).toBeUndefined();
    expect(await p.stop()).toBeNull(); // SIGTERM's default: killed by it, no exit code
  });
  it('fails with the stderr of a process that exits before its ready line', async () => {
    await expect(node(`console.error('no database'); process.exit(2)`)).rejects.toThrow(/probe exited with 2 before its ready line: no database/);
  });
  it('fails on a first line that is not JSON, and kills the process', async () => {
    await expect(node(`console.log('starting...'); setInterval(() => {}, 1000)`)).rejects.toThrow(/not a JSON ready line: starting/);
  });
  it('kills a process that stays silent past the timeout', async () => {
    const t0 = Date.now();
    await expect(startReadyProcess(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { label: 'silent', timeoutMs: 500 })).rejects.toThrow(/silent: no ready line within 0.5 s/);
    expect(Date.now() - t0).toBeLessThan(5_000);
  });
  it('stops with SIGKILL a process that ignores SIGTERM past the grace time', async () => {
    const p = await node(`process.on('SIGTERM', () => {}); console.log('{"event":"ready"}'); setInterval(() => {}, 1000)`);
    expect(await p.stop(200)).toBeNull();
    expect(p.gone()).toMatch(/SIGKILL/);
  });
});

describe('CPU time from /proc', () => {
  let cluster: PostgresCluster;
  let busyUrl: string;
  let idleUrl: string;
  beforeAll(async () => {
    cluster = await startPostgres();
    busyUrl = await cluster.createDatabase('busy');
    idleUrl = await cluster.createDatabase('idle');
  }, 60_000);
  afterAll(() => cluster?.stop());

  it("counts a process's own CPU", () => {
    // Spun until Node's own account says 200 ms of CPU were used, not for a wall time: on a
    // loaded machine 300 ms of wall time gave only 80 ms of CPU. /proc must say the same.
    const before = processCpuMs(process.pid);
    const node0 = process.cpuUsage();
    const deadline = Date.now() + 30_000;
    const nodeMs = () => { const u = process.cpuUsage(node0); return (u.user + u.system) / 1000; };
    while (nodeMs() < 200 && Date.now() < deadline); // spin
    const used = nodeMs();
    expect(used).toBeGreaterThanOrEqual(200);
    // /proc counts in clock ticks (10 ms): allow a few of them either way.
    expect(Math.abs(processCpuMs(process.pid) - before - used)).toBeLessThanOrEqual(40);
    expect(processCpuMs(2 ** 22 + 1)).toBeNaN();
  });

  it("counts the CPU of one database's backends and not another's", async () => {
    const busy = new pg.Client({ connectionString: busyUrl });
    const idle = new pg.Client({ connectionString: idleUrl });
    await busy.connect();
    await idle.connect();
    try {
      const postmaster = cluster.postmasterPid();
      const [busy0, idle0] = [postgresCpuMs(postmaster, 'busy'), postgresCpuMs(postmaster, 'idle')];
      await busy.query('SELECT count(*) FROM generate_series(1, 3000000)');
      expect(postgresCpuMs(postmaster, 'busy') - busy0).toBeGreaterThanOrEqual(100);
      expect(postgresCpuMs(postmaster, 'idle') - idle0).toBeLessThan(50);
    } finally {
      await busy.end();
      await idle.end();
    }
  });
});
