/**
 * Flake attribution in a lab (hil/lab/flake-attribution.ts): each attempt of a test is kept
 * against its board, on SQLite and on a real PostgreSQL; a retry's worker leases a board other
 * than the one its test failed on when one comes free in time; a pass there labels the test
 * `board-suspect` and counts the failure against the first board, which `fleetlab lab status`
 * and the run's summary show. The done-when on two QEMU boards is in test/qemu-boards/lab-health.test.ts.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestCase, TestResult } from '@playwright/test/reporter';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Db } from '../src/cloud/db/port.js';
import { openPostgres } from '../src/cloud/db/postgres.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { FLAKE_DEFAULTS, parseFlakes, suspectAttempts } from '../hil/lab/flake-attribution.js';
import { parseLabFile } from '../hil/lab/lab-file.js';
import { leaseBoard } from '../hil/lab/lease-board.js';
import { LeaseStore } from '../hil/lab/lease-store.js';
import { labStatus, openLab } from '../hil/lab/lab-command.js';
import { WorkerLease } from '../hil/lab/worker-lease.js';
import FlakeReporter from '../hil/lib/flake-reporter.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';

const board = (name: string, port: number) => `  - name: ${name}\n    tags: [rpi4]\n    host: 127.0.0.1\n    sshPort: ${port}\n    privateKey: ./lab-key\n`;
const fail = (message: string): never => {
  throw new Error(message);
};

describe('the lab file\'s "flakes" section', () => {
  it('takes the defaults without one, and the bounds it is given', () => {
    expect(parseFlakes(undefined, fail)).toEqual({ runs: FLAKE_DEFAULTS.runs, retryWaitMs: FLAKE_DEFAULTS.retryWaitSeconds * 1000 });
    expect(parseFlakes({ runs: 5, retryWaitSeconds: 0 }, fail)).toEqual({ runs: 5, retryWaitMs: 0 });
    expect(parseLabFile(`flakes: { runs: 3 }\nboards:\n${board('a', 22)}`, '/lab/l.yaml').flakes).toEqual({ runs: 3, retryWaitMs: 120_000 });
  });

  it.each([
    [[1, 2], /"flakes" must be a mapping/],
    [{ run: 5 }, /unknown field "flakes.run" \(known: runs, retryWaitSeconds\)/],
    [{ runs: 0 }, /"flakes.runs" must be a whole number from 1 to 10000, got 0/],
    [{ retryWaitSeconds: 1.5 }, /"flakes.retryWaitSeconds" must be a whole number from 0 to 86400, got 1.5/],
  ])('refuses %j, saying what it takes', (raw, message) => {
    expect(() => parseFlakes(raw, fail)).toThrow(message);
  });

  it('puts on a board only the device failures of other boards than the one that passed', () => {
    const earlier = [
      { id: 1, board: 'a', attempt: 0, outcome: 'device-failure' as const },
      { id: 2, board: 'b', attempt: 1, outcome: 'device-failure' as const },
      { id: 3, board: 'c', attempt: 2, outcome: 'infrastructure-failure' as const },
    ];
    expect(suspectAttempts(earlier, 'b').map((a) => a.id)).toEqual([1]);
    expect(suspectAttempts(earlier, 'd').map((a) => a.id)).toEqual([1, 2]);
  });
});

describe.each(['sqlite', 'postgres'] as const)('attempts in the lease store on %s', (kind) => {
  let cluster: PostgresCluster | undefined;
  let dir: string;
  let db: Db;
  let store: LeaseStore;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-flakes-'));
    if (kind === 'sqlite') db = openSqlite(join(dir, 'leases.db'));
    else {
      cluster = await startPostgres();
      db = openPostgres(await cluster.createDatabase('lab'), { max: 2 });
    }
    store = await LeaseStore.open(db);
  }, 60_000);
  afterAll(async () => {
    await db?.close();
    await cluster?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('turns a failure into board-suspect when the test passes on another board, and steers the run away from a board until then', async () => {
    const attempt = (run: string, board: string, test: string, n: number, outcome: 'passed' | 'device-failure' | 'infrastructure-failure') => store.recordAttempt({ run, board, test, title: `title of ${test}`, attempt: n, outcome });
    expect(await attempt('r1', 'a', 't1', 0, 'device-failure')).toEqual([]);
    expect(await attempt('r1', 'b', 't2', 0, 'device-failure')).toEqual([]);
    expect(await store.suspectBoards('r1')).toEqual(['a', 'b']);
    expect(await store.suspectBoards('r2')).toEqual([]);
    // t2 passes on the board it failed on: a flake, not the board's.
    expect(await attempt('r1', 'b', 't2', 1, 'passed')).toEqual([]);
    const suspects = await attempt('r1', 'b', 't1', 1, 'passed');
    expect(suspects.map((s) => [s.board, s.attempt, s.outcome])).toEqual([['a', 0, 'device-failure']]);
    expect(await store.suspectBoards('r1')).toEqual([]);
    await attempt('r1', 'c', 't3', 0, 'infrastructure-failure');

    const counts = await store.boardCounts(20);
    expect(Object.fromEntries(counts)).toEqual({
      a: { runs: 1, passed: 0, deviceFailures: 0, infrastructureFailures: 0, boardSuspect: 1 },
      b: { runs: 1, passed: 2, deviceFailures: 1, infrastructureFailures: 0, boardSuspect: 0 },
      c: { runs: 1, passed: 0, deviceFailures: 0, infrastructureFailures: 1, boardSuspect: 0 },
    });
  });

  it("counts each board over its own last N runs", async () => {
    for (const run of ['old', 'mid', 'new']) await store.recordAttempt({ run, board: 'n', test: 't', title: 't', attempt: 0, outcome: run === 'old' ? 'device-failure' : 'passed' });
    expect((await store.boardCounts(2)).get('n')).toEqual({ runs: 2, passed: 2, deviceFailures: 0, infrastructureFailures: 0, boardSuspect: 0 });
    expect((await store.boardCounts(3)).get('n')).toEqual({ runs: 3, passed: 2, deviceFailures: 1, infrastructureFailures: 0, boardSuspect: 0 });
    // Board a's one run is its last, whatever other boards ran since.
    expect((await store.boardCounts(1)).get('a')?.runs).toBe(1);
  });
});

describe('a retry on another board', () => {
  let dir: string;
  let labFile: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-retry-'));
    labFile = join(dir, 'fleetlab.lab.yaml');
    await writeFile(labFile, `leases:\n  store: sqlite:leases.db\n  ttlSeconds: 5\nflakes: { retryWaitSeconds: 1 }\nboards:\n${board('pi-a', 1)}${board('pi-b', 2)}`);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('prefers a board other than the avoided one, waits a bounded time for one, and takes the avoided one after, saying so', async () => {
    const open = await openLab(labFile);
    try {
      const take = (holder: string, avoid: string[], waitMs: number, gaveUp: string[][] = []) => leaseBoard(open.store, open.lab, { tags: ['rpi4'], holder, waitMs: 10_000, pollMs: 100, avoid: { boards: avoid, waitMs, onGiveUp: (b) => gaveUp.push([...b]) } });
      const first = await take('retry-1', ['pi-a'], 1000);
      expect(first.board.name).toBe('pi-b');
      const gaveUp: string[][] = [];
      const started = Date.now();
      const second = await take('retry-2', ['pi-b'], 0, gaveUp);
      expect(second.board.name).toBe('pi-a');
      expect(gaveUp).toEqual([]);
      await second.release();
      // pi-b is held: the retry waits its bound for it, then takes pi-a.
      const third = await take('retry-3', ['pi-a'], 800, gaveUp);
      expect(third.board.name).toBe('pi-a');
      expect(Date.now() - started).toBeGreaterThanOrEqual(800);
      expect(gaveUp).toEqual([['pi-a']]);
      await third.release();
      // Every other board out of the lab: no wait for one that cannot come.
      await open.store.markOffline('pi-b', 'power', 'test');
      await first.release();
      const fourth = await take('retry-4', ['pi-a'], 60_000);
      expect(fourth.board.name).toBe('pi-a');
      await fourth.release();
      await open.store.markOnline('pi-b', 'test');
    } finally {
      await open.close();
    }
  });

  it("labels a test that failed on one worker's board and passed on the retry's other board board-suspect, counted against the first", async () => {
    const lines: string[] = [];
    const selection = { file: labFile, tags: ['rpi4'], waitMs: 10_000 };
    const attempt = { test: 'spec-1', title: 'clock.spec.ts › the clock is right' };
    // The first worker: its test fails on pi-a (the file's first board).
    const first = new WorkerLease(selection, (l) => lines.push(`1: ${l}`), 'run-7');
    try {
      expect((await first.config()).sshPort).toBe(1);
      expect(await first.attemptEnded({ ...attempt, retry: 0, passed: false })).toBeUndefined();
    } finally {
      await first.release();
    }
    // Playwright's retry runs in a new worker of the same run: it is given pi-b, and passes.
    const retry = new WorkerLease(selection, (l) => lines.push(`2: ${l}`), 'run-7');
    try {
      expect(retry.boardName).toBeUndefined();
      expect((await retry.config()).sshPort).toBe(2);
      const label = await retry.attemptEnded({ ...attempt, retry: 1, passed: true });
      expect(label).toEqual({ type: 'board-suspect', description: 'failed on pi-a (attempt 1), passed on pi-b (attempt 2): counted against pi-a' });
      expect(lines).toContain("2: this run's failed tests ran on pi-a: a board other than that is taken if one comes free within 1 s");
      expect(lines).toContain(`2: board-suspect: ${attempt.title}: ${label!.description}`);
      // An attempt the lab failed (SSH did not answer at its start) counts as the lab's.
      await retry.infraFailure('SSH did not answer');
      expect(await retry.attemptEnded({ test: 'spec-2', title: 'other', retry: 0, passed: false })).toBeUndefined();
    } finally {
      await retry.release();
    }
    const open = await openLab(labFile);
    try {
      const status = (await labStatus(open, 200)).join('\n');
      expect(status).toMatch(/pi-a .*last 1 run: 0 passed, 0 device, 0 infrastructure, 1 board-suspect +free/);
      expect(status).toMatch(/pi-b .*last 1 run: 1 passed, 0 device, 1 infrastructure, 0 board-suspect +free/);
    } finally {
      await open.close();
    }
  });

  it("does not wait for another board when the others are held by the run's own workers", async () => {
    const busyLab = join(dir, 'busy.lab.yaml');
    await writeFile(busyLab, `leases:\n  store: sqlite:busy-leases.db\n  ttlSeconds: 5\nflakes: { retryWaitSeconds: 600 }\nboards:\n${board('pi-a', 1)}${board('pi-b', 2)}`);
    const lines: string[] = [];
    const selection = { file: busyLab, tags: ['rpi4'], waitMs: 10_000 };
    const worker = (n: number) => new WorkerLease(selection, (l) => lines.push(`${n}: ${l}`), 'run-9-abcdef');
    const [first, keeper] = [worker(1), worker(2)];
    try {
      expect((await first.config()).sshPort).toBe(1);
      expect((await keeper.config()).sshPort).toBe(2);
      await first.attemptEnded({ test: 't', title: 't', retry: 0, passed: false });
      await first.release();
      // The retry's worker: pi-b is this run's other worker's until it ends, so pi-a again at once.
      const retry = worker(3);
      try {
        expect((await retry.config()).sshPort).toBe(1);
        expect(lines).toContain("3: this run's failed tests ran on pi-a; the other boards are this run's own (pi-b), so no wait for one");
      } finally {
        await retry.release();
      }
    } finally {
      await first.release();
      await keeper.release();
    }
  });

  it('are listed apart in the run summary, with the boards', () => {
    const reporter = new FlakeReporter();
    const test = { titlePath: () => ['', 'board', 'clock.spec.ts', 'the clock is right'], annotations: [] } as unknown as TestCase;
    const result = (status: TestResult['status'], annotations: TestResult['annotations']) => ({ status, annotations }) as unknown as TestResult;
    reporter.onTestEnd(test, result('failed', []));
    reporter.onTestEnd(test, result('passed', [{ type: 'board-suspect', description: 'failed on pi-a (attempt 1), passed on pi-b (attempt 2): counted against pi-a' }]));
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    try {
      reporter.onEnd({ status: 'passed' } as never);
      const out = String(log.mock.calls[0]![0]);
      expect(out).toContain('HIL flake summary: 1 flaky of 1 tests');
      expect(out).toContain('HIL board-suspect (failed on one lab board, passed on another): 1\n    - [board] clock.spec.ts › the clock is right: failed on pi-a (attempt 1), passed on pi-b (attempt 2): counted against pi-a');
    } finally {
      log.mockRestore();
    }
  });
});
