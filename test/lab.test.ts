/**
 * A lab of boards (hil/lab/): the lab file, the lease store on SQLite and on a real
 * PostgreSQL, the queue, and `fleetlab lab` as a process, including a run killed with
 * kill -9 whose board comes free within the lease's time to live.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { parseLabFile } from '../hil/lab/lab-file.js';
import { leaseBoard } from '../hil/lab/lease-board.js';
import { LeaseLostError, LeaseStore } from '../hil/lab/lease-store.js';
import { openLab, readLab } from '../hil/lab/lab-command.js';
import { watchLab } from '../hil/lab/lab-watch.js';
import { labCapabilities, labSelection, WorkerLease } from '../hil/lab/worker-lease.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';
import { until } from '../src/wait.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const board = (name: string, tags: string, port: number) => `  - name: ${name}\n    tags: [${tags}]\n    host: 127.0.0.1\n    sshPort: ${port}\n    privateKey: ./lab-key\n`;

describe('the lab file', () => {
  const parse = (text: string) => parseLabFile(text, '/lab/fleetlab.lab.yaml', { home: '/home/me' });

  it('reads boards with tags, serial and board config, and fills the defaults', () => {
    const lab = parse(`boards:\n${board('pi-a', 'rpi4, 4gb', 22)}    serial: /dev/ttyUSB0\n    power: { cycle: "pdu 3 cycle" }\n${board('pi-b', 'rpi3', 2222)}`);
    expect(lab.store).toBe('sqlite:/lab/.fleetlab/lab-leases.db');
    expect(lab.ttlSeconds).toBe(60);
    expect(lab.boards.map((b) => [b.name, b.tags, b.serial, b.config.host, b.config.sshPort, b.config.privateKey, b.config.power.cycle])).toEqual([
      ['pi-a', ['rpi4', '4gb'], '/dev/ttyUSB0', '127.0.0.1', 22, '/lab/lab-key', 'pdu 3 cycle'],
      ['pi-b', ['rpi3'], undefined, '127.0.0.1', 2222, '/lab/lab-key', undefined],
    ]);
    // What `lab run` hands the board target: the fields as written (the console too, for its capture), the key made absolute.
    expect(lab.boards[0]!.raw).toEqual({ host: '127.0.0.1', sshPort: 22, privateKey: '/lab/lab-key', serial: '/dev/ttyUSB0', power: { cycle: 'pdu 3 cycle' } });
    expect(lab.boards[0]!.config.serial).toEqual({ device: '/dev/ttyUSB0', baud: 115200 });
  });

  it('takes the lease store and time to live it is given', () => {
    expect(parse(`leases: { store: "sqlite:leases.db", ttlSeconds: 5 }\nboards:\n${board('a', 'x', 22)}`)).toMatchObject({ store: 'sqlite:/lab/leases.db', ttlSeconds: 5 });
    expect(parse(`leases: { store: "postgres://lab@db/lab" }\nboards:\n${board('a', 'x', 22)}`).store).toBe('postgres://lab@db/lab');
  });

  it.each([
    ['boards: [', /not valid YAML/],
    ["boardz: []", /unknown field "boardz" \(known: leases, health, flakes, boards\)/],
    ['boards: []', /"boards" must be a list of at least one board/],
    [`leases: { store: "mysql://x" }\nboards:\n${board('a', 'x', 22)}`, /"leases.store" must be sqlite:FILE or postgres:/],
    [`leases: { ttlSeconds: 1 }\nboards:\n${board('a', 'x', 22)}`, /"leases.ttlSeconds" must be a whole number of seconds from 2/],
    [`leases: { owner: me }\nboards:\n${board('a', 'x', 22)}`, /unknown field "leases.owner"/],
    [`boards:\n${board('a', 'x', 22)}${board('a', 'y', 23)}`, /boards\[1\] \(a\): another board is already called a/],
    [`boards:\n  - name: "two words"\n    host: h\n    privateKey: k\n`, /boards\[0\].name must be a word/],
    [`boards:\n  - name: a\n    tags: rpi4\n    host: h\n    privateKey: k\n`, /boards\[0\] \(a\).tags must be a list of words/],
    [`boards:\n${board('a', 'x', 22)}    serial: ttyUSB0\n`, /serial must be the serial device's absolute path/],
    // The board's own config fields are checked by the board target's parser, naming the board.
    [`boards:\n  - name: a\n    privateKey: k\n`, /fleetlab.lab.yaml boards\[0\] \(a\): "host" is required/],
    [`boards:\n${board('a', 'x', 70000)}`, /boards\[0\] \(a\): "sshPort" must be an integer 1-65535/],
  ])('refuses %j, saying what to fix and showing an example', (text, message) => {
    expect(() => parse(text)).toThrow(message);
    expect(() => parse(text)).toThrow(/example[^]*- name: pi4-a/);
  });
});

describe.each(['sqlite', 'postgres'] as const)('the lease store on %s', (kind) => {
  let cluster: PostgresCluster | undefined;
  let dir: string;
  let url: string;
  const dbs: Db[] = [];
  /**
   * A store as a CI job has one: on PostgreSQL a connection of its own; on SQLite the one
   * connection of this process (a process queues its statements on it; other processes'
   * connections wait for SQLite's lock, which the kill -9 test below has two of).
   */
  const store = async () => {
    if (kind === 'sqlite' && dbs[0]) return LeaseStore.open(dbs[0]);
    const db = kind === 'sqlite' ? openSqlite(url) : openPostgres(url, { max: 2 });
    dbs.push(db);
    return LeaseStore.open(db);
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-'));
    if (kind === 'sqlite') url = join(dir, 'leases.db');
    else {
      cluster = await startPostgres();
      url = await cluster.createDatabase('lab');
    }
  }, 60_000);
  afterAll(async () => {
    for (const db of dbs) await db.close();
    await cluster?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('gives a board to one holder at a time, and logs each lease', async () => {
    const s = await store();
    const a = await s.acquire(['b1'], 'run-a', 10_000);
    expect(a).toMatchObject({ board: 'b1', holder: 'run-a' });
    expect(await s.acquire(['b1'], 'run-b', 10_000)).toBeNull();
    const b = await s.acquire(['b1', 'b2'], 'run-b', 10_000);
    expect(b?.board).toBe('b2');
    expect([...(await s.current()).keys()].sort()).toEqual(['b1', 'b2']);
    expect(await s.release(a!.lease)).toBe(true);
    expect(await s.release(a!.lease)).toBe(false);
    expect((await s.acquire(['b1'], 'run-c', 10_000))?.holder).toBe('run-c');
    const log = (await s.history('b1')).map((e) => [e.event, e.holder]);
    expect(log).toEqual([
      ['acquired', 'run-a'],
      ['released', 'run-a'],
      ['acquired', 'run-c'],
    ]);
  });

  it('lets a lease nobody renews lapse: the board goes to the next run, logged as expired, and the old holder has lost it', async () => {
    const s = await store();
    const a = await s.acquire(['e1'], 'crashed-run', 300);
    expect(await s.renew(a!.lease, 300)).toBeGreaterThan(a!.expiresAt - 1);
    expect(await s.acquire(['e1'], 'next-run', 300)).toBeNull();
    await sleep(450);
    expect((await s.current()).has('e1')).toBe(false);
    const b = await s.acquire(['e1'], 'next-run', 10_000);
    expect(b?.holder).toBe('next-run');
    await expect(s.renew(a!.lease, 300)).rejects.toBeInstanceOf(LeaseLostError);
    expect((await s.history('e1')).map((e) => [e.event, e.holder])).toEqual([
      ['acquired', 'crashed-run'],
      ['expired', 'crashed-run'],
      ['acquired', 'next-run'],
    ]);
  });

  it('ends a lease by force, logged with who did it; its holder loses it at its next renewal', async () => {
    const s = await store();
    const a = await s.acquire(['f1'], 'stuck-run', 60_000);
    expect((await s.forceRelease('f1', 'ops@lab'))?.holder).toBe('stuck-run');
    expect(await s.forceRelease('f1', 'ops@lab')).toBeNull();
    await expect(s.renew(a!.lease, 60_000)).rejects.toThrow(/expired .* or was released with --force/);
    expect((await s.history('f1')).at(-1)).toMatchObject({ event: 'forced', holder: 'stuck-run', detail: 'released by ops@lab' });
  });

  it('gives nobody a board marked offline, ends its lease with it, logs both, and hands it out again once online', async () => {
    const s = await store();
    const lab = parseLabFile(`leases: { ttlSeconds: 60 }\nboards:\n${board('o1', 'pwr', 22)}${board('o2', 'pwr', 23)}`, '/lab/fleetlab.lab.yaml', {});
    const held = await leaseBoard(s, lab, { tags: ['pwr'], holder: 'run-a', waitMs: 5000, pollMs: 50 });
    expect(held.board.name).toBe('o1');
    await held.markOffline('did not answer within 30 s after power cycle');
    expect((await s.current()).has('o1')).toBe(false);
    expect((await s.offline()).get('o1')).toMatchObject({ reason: 'did not answer within 30 s after power cycle', markedBy: 'run-a' });
    // The other board is given; with both offline a run is told at once, not left waiting.
    const other = await leaseBoard(s, lab, { tags: ['pwr'], holder: 'run-b', waitMs: 5000, pollMs: 50 });
    expect(other.board.name).toBe('o2');
    await s.markOffline('o2', 'relay stuck', 'ops@lab');
    const started = Date.now();
    await expect(leaseBoard(s, lab, { tags: ['pwr'], holder: 'run-c', waitMs: 60_000, pollMs: 50 })).rejects.toThrow(/every board with tags \[pwr\] is offline: o1 \(did not answer .*\); o2 \(relay stuck\)\. Once a board is fixed: fleetlab lab online <board>/);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(await s.acquire(['o1'], 'sneaky', 60_000)).toBeNull();
    expect(await s.markOnline('o1', 'ops@lab')).toBe(true);
    expect(await s.markOnline('o1', 'ops@lab')).toBe(false);
    expect((await s.acquire(['o1'], 'run-d', 60_000))?.board).toBe('o1');
    expect((await s.history('o1')).map((e) => [e.event, e.holder])).toEqual([
      ['acquired', 'run-a'],
      ['offline', 'run-a'],
      ['online', 'ops@lab'],
      ['acquired', 'run-d'],
    ]);
    await s.markOnline('o2', 'ops@lab');
  });

  it('takes its migrations once, also on a store made before they existed, and keeps its leases and offline boards', async () => {
    // A store as fleetlab made it before migrations: the four tables, a lease and an offline board in them.
    const db = kind === 'sqlite' ? openSqlite(join(dir, 'old.db')) : openPostgres(await cluster!.createDatabase('old'), { max: 2 });
    dbs.push(db);
    for (const t of [
      'CREATE TABLE lab_lease (board TEXT PRIMARY KEY, lease TEXT NOT NULL UNIQUE, holder TEXT NOT NULL, acquired_at BIGINT NOT NULL, expires_at BIGINT NOT NULL)',
      'CREATE TABLE lab_lease_log (id {pk}, at BIGINT NOT NULL, board TEXT NOT NULL, lease TEXT NOT NULL, holder TEXT NOT NULL, event TEXT NOT NULL, detail TEXT)',
      'CREATE TABLE lab_waiter (id TEXT PRIMARY KEY, holder TEXT NOT NULL, boards TEXT NOT NULL, since BIGINT NOT NULL, seen_at BIGINT NOT NULL)',
      'CREATE TABLE lab_board_offline (board TEXT PRIMARY KEY, since BIGINT NOT NULL, reason TEXT NOT NULL, marked_by TEXT NOT NULL)',
    ])
      await db.exec(db.dialect.renderDdl(t)!);
    await db.query(`INSERT INTO lab_lease (board, lease, holder, acquired_at, expires_at) VALUES ('m1', 'old-lease', 'old-run', 0, ${db.dialect.nowMs} + 60000)`, []);
    await db.query("INSERT INTO lab_board_offline (board, since, reason, marked_by) VALUES ('m2', 0, 'relay stuck', 'ops')", []);
    // Opened twice at once (on PostgreSQL on two connections): one migrates, the other finds it done.
    const [s, again] = await Promise.all([LeaseStore.open(db), LeaseStore.open(db)]);
    expect(await s.migrations()).toEqual(['001-leases', '002-health', '003-attempts']);
    expect(await again.migrations()).toEqual(['001-leases', '002-health', '003-attempts']);
    expect((await s.current()).get('m1')?.holder).toBe('old-run');
    expect((await s.offline()).get('m2')).toMatchObject({ kind: 'offline', reason: 'relay stuck' });
    expect(await s.renew('old-lease', 60_000)).toBeGreaterThan(0);
  });

  it('stores checks; a failing one quarantines the board and ends the checker\'s lease, a passing one brings it back (never an offline board)', async () => {
    const s = await store();
    const pass = { ok: true, steps: [{ step: 'ssh', status: 'pass', detail: 'answers', ms: 3 }] };
    const fail = { ok: false, failedStep: 'supervisor', reason: 'supervisor: connect ECONNREFUSED', steps: [] };
    const l = await s.acquire(['h1'], 'checker', 60_000);
    expect(await s.recordCheck('h1', fail, 'checker', l!.lease)).toBe('quarantined');
    expect((await s.current()).has('h1')).toBe(false);
    expect((await s.offline()).get('h1')).toMatchObject({ kind: 'quarantined', reason: 'health check failed at supervisor: connect ECONNREFUSED', markedBy: 'checker' });
    expect(await s.acquire(['h1'], 'run', 60_000)).toBeNull();
    expect(await s.recordCheck('h1', fail, 'checker')).toBe('failed, already out');
    expect(await s.recordCheck('h1', pass, 'checker')).toBe('passed, back in the lab');
    expect(await s.recordCheck('h1', pass, 'checker')).toBe('passed');
    const last = (await s.lastChecks()).get('h1')!;
    expect(last).toMatchObject({ ok: true, failedStep: null, checkedBy: 'checker', steps: pass.steps });
    expect(Math.abs(last.at - (await s.clock()))).toBeLessThan(5000);
    expect((await s.checks('h1')).map((c) => c.ok)).toEqual([true, true, false, false]);
    expect((await s.history('h1')).map((e) => [e.event, e.detail])).toEqual([
      ['acquired', null],
      ['quarantined', 'health check failed at supervisor: connect ECONNREFUSED'],
      ['online', 'passed its health check'],
    ]);
    // Power failures stay until someone says the board is fixed.
    await s.markOffline('h2', 'did not answer within 30 s after power cycle', 'run');
    expect(await s.recordCheck('h2', fail, 'checker')).toBe('failed, already out');
    expect(await s.recordCheck('h2', pass, 'checker')).toBe('passed');
    expect((await s.offline()).get('h2')?.kind).toBe('offline');
    expect(await s.markOnline('h2', 'ops')).toBe(true);
  });

  it('quarantines a board at its K-th infrastructure failure within the window, not before, not for old ones', async () => {
    const s = await store();
    const policy = { count: 3, windowMs: 400 };
    expect(await s.recordInfraFailure('k1', 'power cycle 1', 'run', policy)).toBe(false);
    await sleep(500);
    expect(await s.recordInfraFailure('k1', 'power cycle 2', 'run', policy)).toBe(false);
    expect(await s.recordInfraFailure('k1', 'power cycle 3', 'run', policy)).toBe(false);
    const l = await s.acquire(['k1'], 'run', 60_000);
    expect(await s.recordInfraFailure('k1', 'power cycle 4', 'run', policy, l!.lease)).toBe(true);
    expect((await s.offline()).get('k1')).toMatchObject({ kind: 'quarantined', reason: '3 infrastructure failures within 0.4 s; the last: power cycle 4' });
    expect((await s.current()).has('k1')).toBe(false);
    await s.markOnline('k1', 'ops');
  });

  it('gives a board only after its check when the last is too old; a failing board is quarantined and the next one given, all failing is said at once', async () => {
    const s = await store();
    const lab = parseLabFile(`leases: { ttlSeconds: 60 }\nhealth: { maxAgeSeconds: 60 }\nboards:\n${board('g1', 'chk', 22)}${board('g2', 'chk', 23)}`, '/lab/fleetlab.lab.yaml', {});
    const sick = new Set(['g1']);
    const checked: string[] = [];
    const told: string[] = [];
    const check = async (b: { name: string }) => (checked.push(b.name), sick.has(b.name) ? { ok: false, failedStep: 'supervisor' as const, reason: 'supervisor: /ping answered 503', steps: [] } : { ok: true, steps: [] });
    const opts = { tags: ['chk'], waitMs: 10_000, pollMs: 50, check, onCheck: (b: string, _r: unknown, o: string) => told.push(`${b} ${o}`) };
    const a = await leaseBoard(s, lab, { ...opts, holder: 'run-a' });
    expect(a.board.name).toBe('g2');
    expect(checked).toEqual(['g1', 'g2']);
    expect(told).toEqual(['g1 quarantined', 'g2 passed']);
    await a.release();
    // Checked a moment ago: given without another.
    const b = await leaseBoard(s, lab, { ...opts, holder: 'run-b' });
    expect(b.board.name).toBe('g2');
    expect(checked).toHaveLength(2);
    await b.release();
    sick.add('g2');
    const started = Date.now();
    // g2's last check is recent: it is given unchecked; then with maxAge 0 it is checked and fails.
    const lab0 = parseLabFile(`leases: { ttlSeconds: 60 }\nhealth: { maxAgeSeconds: 0 }\nboards:\n${board('g1', 'chk', 22)}${board('g2', 'chk', 23)}`, '/lab/fleetlab.lab.yaml', {});
    await sleep(5);
    await expect(leaseBoard(s, lab0, { ...opts, holder: 'run-c', waitMs: 60_000 })).rejects.toThrow(/every board with tags \[chk\] is out of the lab: g1 \(quarantined: health check failed at supervisor: \/ping answered 503\); g2 \(quarantined: .*\)\. A quarantined board comes back when it passes a check/);
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await s.current()).has('g2')).toBe(false);
    await s.markOnline('g1', 'ops');
    await s.markOnline('g2', 'ops');
  });

  it('keeps the lease of a board under a check that outlasts the time to live: nobody else is given it meanwhile', async () => {
    const s = await store();
    const lab = parseLabFile(`leases: { ttlSeconds: 2 }\nhealth: {}\nboards:\n${board('t1', 'slow', 22)}`, '/lab/fleetlab.lab.yaml', {});
    let during: unknown = 'not asked';
    const check = async () => {
      await sleep(2600);
      during = await s.acquire(['t1'], 'sneaky', 60_000);
      return { ok: true, steps: [] };
    };
    const held = await leaseBoard(s, lab, { tags: ['slow'], holder: 'run-a', waitMs: 10_000, pollMs: 50, check });
    expect(during).toBeNull();
    expect((await s.current()).get('t1')?.lease).toBe(held.lease);
    await held.release();
    expect((await s.history('t1')).map((e) => [e.event, e.holder])).toEqual([
      ['acquired', 'run-a'],
      ['released', 'run-a'],
    ]);
  });

  it('runs one lab watch at a time: a second is refused naming the first, a check round leaves held boards alone', async () => {
    const s = await store();
    const lab = parseLabFile(`leases: { ttlSeconds: 60 }\nhealth: { everySeconds: 5 }\nboards:\n${board('w1', 'wat', 22)}${board('w2', 'wat', 23)}`, '/lab/fleetlab.lab.yaml', {});
    const held = await s.acquire(['w2'], 'some-run', 60_000);
    const lines: string[] = [];
    const stop = new AbortController();
    const check = async () => ({ ok: true, steps: [] });
    const first = watchLab(s, lab, { check, by: 'watch-1', log: (l) => lines.push(l), signal: stop.signal });
    for (let i = 0; i < 50 && !lines.some((l) => l.startsWith('w2')); i++) await sleep(50);
    await expect(watchLab(s, lab, { check, by: 'watch-2', log: () => undefined, signal: stop.signal, rounds: 1 })).rejects.toThrow(/another fleetlab lab watch is running \(watch-1, its lease renewed until .*\); one watch per lab/);
    stop.abort();
    await first;
    expect(lines).toEqual(['watching 2 board(s) every 5 s as watch-1', 'w1: passed []', 'w2: not checked, leased by some-run']);
    // Its lease is given back: the next watch starts at once.
    await watchLab(s, lab, { check, by: 'watch-3', log: () => undefined, signal: new AbortController().signal, rounds: 1 });
    expect((await s.current()).get('w2')?.lease).toBe(held!.lease);
    expect((await s.history('w1')).map((e) => [e.event, e.holder])).toEqual([
      ['acquired', 'watch-1'],
      ['released', 'watch-1'],
      ['acquired', 'watch-3'],
      ['released', 'watch-3'],
    ]);
    await s.release(held!.lease);
  });

  it('never gives one board to two of many runs asking at once', async () => {
    const stores = await Promise.all(Array.from({ length: 6 }, () => store()));
    const results = await Promise.all(stores.flatMap((s, i) => [0, 1].map((j) => s.acquire(['c1', 'c2'], `run-${i}-${j}`, 60_000))));
    const won = results.filter((r) => r !== null);
    expect(won.map((r) => r!.board).sort()).toEqual(['c1', 'c2']);
    expect((await stores[0]!.history()).filter((e) => e.board.startsWith('c') && e.event === 'acquired')).toHaveLength(2);
  });

  it('queues waiters first come first served among runs wanting the same boards; a waiter that stops asking drops out', async () => {
    const s = await store();
    const first = await s.enqueue('first', ['q1', 'q2']);
    await sleep(5);
    const second = await s.enqueue('second', ['q2']);
    const other = await s.enqueue('other', ['q3']);
    expect(await s.position(first, 60_000)).toBe(0);
    expect(await s.position(second, 60_000)).toBe(1);
    expect(await s.position(other, 60_000)).toBe(0);
    await sleep(400);
    // `first` stopped asking: after the time to live it no longer holds `second` back.
    expect(await s.position(second, 300)).toBe(0);
    await s.dequeue(first);
    await s.dequeue(second);
    await s.dequeue(other);
  });
});

describe('the lease store failing under a check', () => {
  let dir: string;
  const dbs: Db[] = [];
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-flaky-'));
  });
  afterAll(async () => {
    for (const db of dbs) await db.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** A store whose next `times` statements matching `what` fail as an unreachable PostgreSQL does. */
  const flakyStore = async () => {
    const rule = { what: '', times: 0 };
    const db = openSqlite(join(dir, `flaky-${dbs.length}.db`));
    dbs.push(db);
    const wrap = (d: Db): Db => ({
      dialect: d.dialect,
      query: (sql, params) => (sql.includes(rule.what) && rule.times-- > 0 ? Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432')) : d.query(sql, params)),
      exec: (sql) => d.exec(sql),
      transaction: (fn) => d.transaction((tx) => fn(wrap(tx))),
      close: () => d.close(),
    });
    return { store: await LeaseStore.open(wrap(db)), fail: (what: string, times = 1) => Object.assign(rule, { what, times }) };
  };
  const lab = parseLabFile(`leases: { ttlSeconds: 60 }\nhealth: { everySeconds: 5 }\nboards:\n${board('s1', 'flk', 22)}`, '/lab/fleetlab.lab.yaml', {});
  const passing = async () => ({ ok: true, steps: [] });

  it('a run whose check cannot be stored fails with the store\'s error and keeps no lease (its heartbeat stopped)', async () => {
    const { store: s, fail } = await flakyStore();
    fail('INSERT INTO lab_health_check');
    await expect(leaseBoard(s, lab, { tags: ['flk'], holder: 'run-a', waitMs: 5000, pollMs: 50, check: passing })).rejects.toThrow(/ECONNREFUSED/);
    expect((await s.current()).has('s1')).toBe(false);
    expect((await s.history('s1')).map((e) => e.event)).toEqual(['acquired', 'released']);
    // Without an onCheck, a failing board is still quarantined and its lease ended.
    const failing = async () => ({ ok: false, failedStep: 'disk' as const, reason: 'disk: 3 MiB free on / (at least 500 MiB)', steps: [] });
    await expect(leaseBoard(s, lab, { tags: ['flk'], holder: 'run-b', waitMs: 5000, pollMs: 50, check: failing })).rejects.toThrow(/every board with tags \[flk\] is out of the lab: s1 \(quarantined: health check failed at disk: 3 MiB free/);
    expect((await s.current()).has('s1')).toBe(false);
  });

  it('lab watch says a round failed and checks again at the next', async () => {
    const { store: s, fail } = await flakyStore();
    fail('FROM lab_lease WHERE expires_at >=');
    const lines: string[] = [];
    await watchLab(s, lab, { check: passing, by: 'watch', log: (l) => lines.push(l), signal: new AbortController().signal, rounds: 2 });
    expect(lines).toEqual(['watching 1 board(s) every 5 s as watch', 'round 1 failed: connect ECONNREFUSED 127.0.0.1:5432; the next in 5 s', 's1: passed []']);
    expect((await s.current()).size).toBe(0);
  }, 20_000);
});

describe('fleetlab lab, as a process', () => {
  let dir: string;
  let labFile: string;
  const cli = (args: string[], opts: { detached?: boolean; env?: NodeJS.ProcessEnv } = {}) =>
    spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'lab', args[0]!, '--lab', labFile, ...args.slice(1)], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], detached: opts.detached, env: opts.env ?? process.env });
  const run = (args: string[]) =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const child = cli(args);
      let out = '';
      let err = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      child.once('exit', (code) => resolve({ code, out, err }));
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-cli-'));
    labFile = join(dir, 'fleetlab.lab.yaml');
    await writeFile(labFile, `leases:\n  store: sqlite:leases.db\n  ttlSeconds: 2\nboards:\n${board('pi-a', 'rpi4', 1)}`);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('runs a command on a leased board with its config, and hands back its exit code', async () => {
    const r = await run(['run', '--tag', 'rpi4', '--', 'sh', '-c', 'echo "$FLEETLAB_LAB_BOARD $(grep -c 127.0.0.1 "$FLEETLAB_BOARD_CONFIG")"; exit 7']);
    expect(r.code).toBe(7);
    expect(r.out).toBe('pi-a 1\n');
    expect(r.err).toMatch(/leased pi-a \[rpi4\][^]*released pi-a/);
  });

  it('keeps its lease past the time to live while the command runs (the heartbeat renews it)', async () => {
    const open = await openLab(labFile);
    try {
      const finished = run(['run', '--tag', 'rpi4', '--', 'sleep', '5']);
      let lease: string | undefined;
      for (let i = 0; i < 100 && !lease; i++) {
        lease = (await open.store.current()).get('pi-a')?.lease;
        if (!lease) await sleep(100);
      }
      // Twice the time to live (2 s) later, the same lease, never free between.
      for (let i = 0; i < 8; i++) {
        await sleep(500);
        expect((await open.store.current()).get('pi-a')?.lease).toBe(lease);
      }
      expect((await finished).code).toBe(0);
      expect((await open.store.history('pi-a')).filter((e) => e.lease === lease).map((e) => e.event)).toEqual(['acquired', 'released']);
    } finally {
      await open.close();
    }
  });

  it('frees the board of a run killed with kill -9 within the time to live; a waiting run prints its place and then gets it', async () => {
    // A run killed with -9 cannot remove its board's config; in a TMPDIR of the test's, it goes with the test's directory.
    const killedTmp = join(dir, 'killed-run-tmp');
    await mkdir(killedTmp);
    const killed = cli(['run', '--tag', 'rpi4', '--', 'sleep', '60'], { detached: true, env: { ...process.env, TMPDIR: killedTmp } });
    const open = await openLab(labFile);
    try {
      for (let i = 0; i < 100 && !(await open.store.current()).has('pi-a'); i++) await sleep(100);
      expect((await open.store.current()).get('pi-a')?.holder).toMatch(new RegExp(`pid ${killed.pid}$`));
      const queued: number[] = [];
      const waiting = leaseBoard(open.store, open.lab, { tags: ['rpi4'], holder: 'next-run', waitMs: 20_000, pollMs: 100, onQueue: (p) => queued.push(p) });
      await sleep(500);
      process.kill(-killed.pid!, 'SIGKILL'); // the run and its command, as a crashed CI job
      const t0 = Date.now();
      const held = await waiting;
      const waited = Date.now() - t0;
      expect(held.board.name).toBe('pi-a');
      // Within the time to live (2 s) of the kill, and some polls: not a speed figure, the
      // property the lease exists for (a lapsed run's board is not stuck).
      expect(waited).toBeLessThan(2_000 + 1_500);
      expect(queued[0]).toBe(0);
      await held.release();
      const log = (await open.store.history('pi-a')).slice(-4).map((e) => [e.event, e.holder.replace(/pid \d+$/, 'pid N')]);
      expect(log).toEqual([
        ['acquired', expect.stringMatching(/pid N$/)],
        ['expired', expect.stringMatching(/pid N$/)],
        ['acquired', 'next-run'],
        ['released', 'next-run'],
      ]);
    } finally {
      await open.close();
    }
  });

  it("refuses to end another run's lease without --force, and logs it with --force", async () => {
    const open = await openLab(labFile);
    try {
      await open.store.acquire(['pi-a'], 'someone-else', 60_000);
      const refused = await run(['release', 'pi-a']);
      expect(refused.code).toBe(1);
      expect(refused.err).toMatch(/pi-a is leased by someone-else until .*; ending another run's lease takes --force/);
      const forced = await run(['release', 'pi-a', '--force']);
      expect(forced.code).toBe(0);
      expect(forced.out).toMatch(/ended the lease of someone-else \(logged as forced by /);
      expect((await run(['log', '--board', 'pi-a'])).out.trim().split('\n').at(-1)).toMatch(/pi-a +forced +someone-else .*released by /);
      expect((await run(['status'])).out).toMatch(/pi-a +\[rpi4\] +127\.0\.0\.1:1 +unreachable +supervisor - +free/);
    } finally {
      await open.close();
    }
  });

  it('checks boards with lab check (an unreachable one quarantined, exit 1), and serves the lab page until Ctrl-C', async () => {
    const noHealth = await run(['check']);
    expect(noHealth.code).toBe(1);
    expect(noHealth.err).toMatch(/the lab file has no "health" section: add one \(health: \{\} takes every default\)/);
    const healthLab = join(dir, 'health.lab.yaml');
    await writeFile(healthLab, `leases:\n  store: sqlite:health-leases.db\n  ttlSeconds: 2\nhealth: { stepTimeoutSeconds: 2 }\nboards:\n${board('pi-h', 'rpi4', 1)}`);
    const check = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'lab', 'check', '--lab', healthLab], { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.once('exit', (code) => resolve({ code, out }));
    });
    expect(check.code).toBe(1);
    expect(check.out).toMatch(/^pi-h: quarantined at ssh: .*\[ssh fail \(.*\), supervisor fail \(.*\), clock skip \(not run: SSH did not answer\)/);

    const serve = spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'lab', 'serve', '--port', '0', '--lab', healthLab], { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    serve.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => serve.once('exit', (code) => resolve(code)));
    try {
      const at = await until('lab serve says where it listens', async () => /at (http:\/\/127\.0\.0\.1:\d+)\//.exec(err)?.[1], (u) => u !== undefined, { timeoutMs: 30_000, intervalMs: 100 });
      expect(err).toMatch(/\(read-only\); stop with Ctrl-C/);
      const state = (await (await fetch(`${at!}/api/state`)).json()) as { boards: Array<{ name: string; state: string; out?: { reason: string } }> };
      expect(state.boards).toEqual([expect.objectContaining({ name: 'pi-h', state: 'quarantined', out: expect.objectContaining({ reason: expect.stringMatching(/^health check failed at ssh: /) }) })]);
    } finally {
      serve.kill('SIGINT');
    }
    expect(await exited).toBe(0);
  });

  it('says what is wrong with a missing lab file or an unknown tag', async () => {
    const missing = await new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'lab', 'status', '--lab', join(dir, 'nope.yaml')], { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.once('exit', (code) => resolve({ code, err }));
    });
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/lab file .*nope.yaml: cannot read it .*name yours with --lab\nexample:/);
    const tag = await run(['run', '--tag', 'rpi5', '--', 'true']);
    expect(tag.code).toBe(1);
    expect(tag.err).toMatch(/no board has the tags \[rpi5\]; boards: pi-a \[rpi4\]/);
    // The file is fine: no example of one.
    expect(tag.err).not.toMatch(/example:/);
  });
});

describe('a lab board per Playwright worker (hil/lab/worker-lease.ts)', () => {
  let dir: string;
  let labFile: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-worker-'));
    labFile = join(dir, 'fleetlab.lab.yaml');
    const led = '    led: { gpio: "pinctrl-bcm2835:17" }\n';
    await writeFile(labFile, `leases:\n  store: sqlite:leases.db\n  ttlSeconds: 2\nboards:\n${board('pi-a', 'rpi4', 1)}${led}${board('pi-b', 'rpi4', 2)}${board('pi-c', 'rpi3', 3)}${led}`);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('reads the lab and tags from the environment fleetlab test sets', () => {
    expect(labSelection({})).toBeUndefined();
    expect(labSelection({ FLEETLAB_LAB: labFile, FLEETLAB_LAB_TAGS: 'rpi4, 4gb', FLEETLAB_LAB_WAIT_S: '5' })).toEqual({ file: labFile, tags: ['rpi4', '4gb'], waitMs: 5000 });
  });

  it('offers what every board with the tags can do (an LED only if all have one), and names the boards when none has them', () => {
    const lab = readLab(labFile);
    expect(labCapabilities(lab, ['rpi4'])).not.toContain('led');
    expect(labCapabilities(lab, ['rpi3'])).toContain('led');
    expect(() => labCapabilities(lab, ['rpi5'])).toThrow(/no board has the tags \[rpi5\]; boards: pi-a \[rpi4\], pi-b \[rpi4\], pi-c \[rpi3\]/);
  });

  it('gives each worker its own board, keeps it across spec files, queues a third worker until one is given back', async () => {
    const lines: string[] = [];
    const selection = { file: labFile, tags: ['rpi4'], waitMs: 30_000 };
    const workers = [0, 1, 2].map((i) => new WorkerLease(selection, (l) => lines.push(`${i}: ${l}`)));
    try {
      const [a, b] = [await workers[0]!.config(), await workers[1]!.config()];
      expect(new Set([a.sshPort, b.sshPort])).toEqual(new Set([1, 2]));
      expect((await workers[0]!.config()).sshPort).toBe(a.sshPort);
      const third = workers[2]!.config();
      await sleep(1500);
      expect(lines.some((l) => l.startsWith('2: boards busy (pi-a, pi-b)'))).toBe(true);
      await workers[0]!.release();
      expect((await third).sshPort).toBe(a.sshPort);
      expect(lines).toContain(`0: released ${workers[2]!.boardName}`);
    } finally {
      for (const w of workers) await w.release();
    }
    const open = await openLab(labFile);
    try {
      const log = await open.store.history();
      const holders = log.filter((e) => e.event === 'acquired').map((e) => e.holder);
      expect(holders).toHaveLength(3);
      for (const h of holders) expect(h).toMatch(new RegExp(`pid ${process.pid} worker \\d+ run \\S+$`));
      expect(log.filter((e) => e.event === 'released')).toHaveLength(3);
    } finally {
      await open.close();
    }
  });
  it("counts a board's infrastructure failures, and the lab file's count of them within its window quarantines it: the worker leases another", async () => {
    // Every check step skipped: the boards pass the check before a lease, and only failures count.
    const healthLab = join(dir, 'health.lab.yaml');
    const skipAll = 'skip: [ssh, supervisor, clock, disk, rootfs, engine, throttling]';
    await writeFile(healthLab, `leases:\n  store: sqlite:health-leases.db\n  ttlSeconds: 2\nhealth: { ${skipAll}, infraFailures: { count: 2, windowSeconds: 600 } }\nboards:\n${board('pi-a', 'rpi4', 1)}${board('pi-b', 'rpi4', 2)}`);
    const lines: string[] = [];
    const worker = new WorkerLease({ file: healthLab, tags: ['rpi4'], waitMs: 10_000 }, (l) => lines.push(l));
    try {
      await worker.config();
      const first = worker.boardName!;
      await worker.infraFailure('SSH did not answer');
      expect(worker.boardName).toBe(first);
      expect(lines.at(-1)).toBe(`infrastructure failure on ${first} counted (2 within 600 s quarantine it): SSH did not answer`);
      await worker.infraFailure('SSH did not answer again');
      expect(lines.at(-1)).toBe(`quarantined ${first}: 2 infrastructure failures within 600 s; the next spec file leases another board`);
      expect(worker.boardName).toBeUndefined();
      await worker.config();
      expect(worker.boardName).not.toBe(first);
      const open = await openLab(healthLab);
      try {
        const out = (await open.store.offline()).get(first);
        expect(out).toMatchObject({ kind: 'quarantined', reason: '2 infrastructure failures within 600 s; the last: SSH did not answer again' });
        // The quarantine ended the lease it was counted under: no heartbeat renews a lease that is gone.
        await sleep(2500);
        expect([...(await open.store.current()).values()].map((l) => l.board)).toEqual([worker.boardName]);
        expect(lines.filter((l) => l.includes("may now be another run's"))).toEqual([]);
      } finally {
        await open.close();
      }
    } finally {
      await worker.release();
    }
  });
});
