/**
 * Leases on a lab's boards, kept in SQLite (one CI host) or PostgreSQL (several hosts
 * sharing one lab): the same SQL on both, through the cloud's database port. A lease lasts
 * until its expiry, which its holder's heartbeat moves on; a holder that dies (kill -9)
 * stops renewing, and the board is free again once the lease expires. Every time is the
 * database's clock, so hosts with skewed clocks agree on what has expired.
 *
 * Taking a board is one conditional statement (insert if absent, take over if expired), so
 * two runs can never hold one board, whatever the isolation level. Runs that find every
 * matching board busy wait in a queue, first come first served among runs that want the
 * same boards. The log records every lease's life: acquired, renewed is not logged (it
 * would drown the rest), released, expired (noticed when the board is next taken) and
 * forced; and a board marked offline (it did not come back after its power control: nobody
 * is given it until someone marks it online again), quarantined (it failed its health check,
 * or failed infrastructure too often: a passing check brings it back) or online. Health check
 * results are kept with their time, on the same clock, and their failed step; each attempt of a
 * test on a board with its outcome (./flake-attribution.ts).
 */
import { randomBytes } from 'node:crypto';
import type { Db, SqlValue } from '../../src/cloud/db/port.js';
import { FleetlabError } from '../../src/errors.js';
import { addCount, NO_COUNTS, suspectAttempts, type AttemptOutcome, type BoardCounts, type StoredAttempt } from './flake-attribution.js';

/**
 * The store's migrations, run in order, each once, recorded in lab_migration. Frozen once
 * shipped: a change is a new entry. The first is the schema stores had before migrations
 * (IF NOT EXISTS), so a store made then takes the later ones like a new one.
 */
const MIGRATIONS: ReadonlyArray<{ name: string; statements: readonly string[] }> = [
  {
    name: '001-leases',
    statements: [
      `CREATE TABLE IF NOT EXISTS lab_lease (board TEXT PRIMARY KEY, lease TEXT NOT NULL UNIQUE, holder TEXT NOT NULL, acquired_at BIGINT NOT NULL, expires_at BIGINT NOT NULL)`,
      `CREATE TABLE IF NOT EXISTS lab_lease_log (id {pk}, at BIGINT NOT NULL, board TEXT NOT NULL, lease TEXT NOT NULL, holder TEXT NOT NULL, event TEXT NOT NULL, detail TEXT)`,
      `CREATE TABLE IF NOT EXISTS lab_waiter (id TEXT PRIMARY KEY, holder TEXT NOT NULL, boards TEXT NOT NULL, since BIGINT NOT NULL, seen_at BIGINT NOT NULL)`,
      `CREATE TABLE IF NOT EXISTS lab_board_offline (board TEXT PRIMARY KEY, since BIGINT NOT NULL, reason TEXT NOT NULL, marked_by TEXT NOT NULL)`,
    ],
  },
  {
    name: '002-health',
    statements: [
      // Out of the lab for a power failure (offline: back by `lab online`) or a failed check (quarantined: back by a passing one too).
      `ALTER TABLE lab_board_offline ADD COLUMN kind TEXT NOT NULL DEFAULT 'offline'`,
      `CREATE TABLE lab_health_check (id {pk}, board TEXT NOT NULL, at BIGINT NOT NULL, ok INTEGER NOT NULL, failed_step TEXT, reason TEXT, steps TEXT NOT NULL, checked_by TEXT NOT NULL)`,
      `CREATE INDEX lab_health_check_board ON lab_health_check (board, at)`,
      `CREATE TABLE lab_board_failure (id {pk}, board TEXT NOT NULL, at BIGINT NOT NULL, kind TEXT NOT NULL, detail TEXT)`,
      `CREATE INDEX lab_board_failure_board ON lab_board_failure (board, at)`,
    ],
  },
  {
    name: '003-attempts',
    statements: [
      // Each attempt of a test on a lab board (./flake-attribution.ts); `run` is one fleetlab test run, `test` Playwright's id of the test.
      `CREATE TABLE lab_test_attempt (id {pk}, at BIGINT NOT NULL, run TEXT NOT NULL, board TEXT NOT NULL, test TEXT NOT NULL, title TEXT NOT NULL, attempt INTEGER NOT NULL, outcome TEXT NOT NULL)`,
      `CREATE INDEX lab_test_attempt_run ON lab_test_attempt (run, test)`,
      `CREATE INDEX lab_test_attempt_board ON lab_test_attempt (board, id)`,
    ],
  },
];

/** Any constant: the key of PostgreSQL's advisory lock that makes hosts opening one store migrate it one at a time. */
const MIGRATION_LOCK = 4_301_043;

export type LeaseEvent = 'acquired' | 'released' | 'expired' | 'forced' | 'offline' | 'quarantined' | 'online';

/**
 * A board taken out of the lab: `offline`, it did not come back after its power control (back
 * by `lab online`); `quarantined`, it failed its health check or failed infrastructure too
 * often (back by a passing check, or `lab online`).
 */
export interface OfflineBoard {
  board: string;
  kind: 'offline' | 'quarantined';
  since: number;
  reason: string;
  markedBy: string;
}

/** A stored health check result (hil/lab/health-check.ts), at the store's clock. */
export interface StoredCheck {
  board: string;
  at: number;
  ok: boolean;
  failedStep: string | null;
  reason: string | null;
  steps: unknown[];
  checkedBy: string;
}

/** What recording a check did to the board. */
export type CheckOutcome = 'passed' | 'passed, back in the lab' | 'quarantined' | 'failed, already out';

export interface Lease {
  board: string;
  lease: string;
  holder: string;
  acquiredAt: number;
  expiresAt: number;
}

export interface LeaseLogEntry {
  at: number;
  board: string;
  lease: string;
  holder: string;
  event: LeaseEvent;
  detail: string | null;
}

const newId = () => randomBytes(12).toString('hex');

type CheckRow = {
  board: string;
  at: number;
  ok: number;
  failed_step: string | null;
  reason: string | null;
  steps: string;
  checked_by: string;
};
const checkOf = (r: CheckRow): StoredCheck => ({ board: r.board, at: Number(r.at), ok: Number(r.ok) === 1, failedStep: r.failed_step, reason: r.reason, steps: JSON.parse(r.steps) as unknown[], checkedBy: r.checked_by });

export class LeaseLostError extends FleetlabError {
  constructor(lease: string) {
    super('HIL_ERR_LAB', `lease ${lease} is gone: it expired (no heartbeat within its time to live) or was released with --force`);
  }
}

export class LeaseStore {
  private constructor(private readonly db: Db) {}

  /** The store in `db`, its tables made if they are not there. */
  static async open(db: Db): Promise<LeaseStore> {
    // Most opens find every migration taken: a read says so without the write lock a migration
    // takes, which every run, worker and page of a lab would otherwise queue on.
    const taken = await db.query<{ name: string }>('SELECT name FROM lab_migration', []).then(
      (rows) => new Set(rows.map((r) => r.name)),
      () => new Set<string>(),
    );
    if (MIGRATIONS.every((m) => taken.has(m.name))) return new LeaseStore(db);
    await db.transaction(async (tx) => {
      // SQLite's transactions here begin IMMEDIATE, one writer at a time; PostgreSQL's need the
      // lock, taken before anything is made (two hosts making one table at once collide).
      if (tx.dialect.name === 'postgres') await tx.query('SELECT pg_advisory_xact_lock(?) AS locked', [MIGRATION_LOCK]);
      await tx.exec('CREATE TABLE IF NOT EXISTS lab_migration (name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)');
      const done = new Set((await tx.query<{ name: string }>('SELECT name FROM lab_migration', [])).map((r) => r.name));
      for (const m of MIGRATIONS.filter((x) => !done.has(x.name))) {
        for (const statement of m.statements) await tx.exec(tx.dialect.renderDdl(statement)!);
        await tx.query(`INSERT INTO lab_migration (name, applied_at) VALUES (?, ${tx.dialect.nowMs})`, [m.name]);
      }
    });
    return new LeaseStore(db);
  }

  /** The migrations this store has taken, in order. */
  async migrations(): Promise<string[]> {
    return (await this.db.query<{ name: string }>('SELECT name FROM lab_migration ORDER BY name', [])).map((r) => r.name);
  }

  private get now(): string {
    return this.db.dialect.nowMs;
  }

  /** The database's clock, in epoch ms. */
  async clock(): Promise<number> {
    const [row] = await this.db.query<{ now: number }>(`SELECT ${this.now} AS now`, []);
    return Number(row!.now);
  }

  private async log(db: Db, entry: Omit<LeaseLogEntry, 'at'>): Promise<void> {
    await db.query(`INSERT INTO lab_lease_log (at, board, lease, holder, event, detail) VALUES (${this.now}, ?, ?, ?, ?, ?)`, [entry.board, entry.lease, entry.holder, entry.event, entry.detail]);
  }

  /**
   * Takes the first of `boards` that nobody holds (or whose lease expired) for `holder`,
   * for `ttlMs`; null when all are held.
   */
  async acquire(boards: readonly string[], holder: string, ttlMs: number): Promise<Lease | null> {
    for (const board of boards) {
      const lease = newId();
      const taken = await this.db.transaction(async (tx) => {
        // An offline board is nobody's until it is marked online: a run would only wait on it again.
        if ((await tx.query('SELECT 1 AS x FROM lab_board_offline WHERE board = ?', [board])).length) return null;
        const [old] = await tx.query<{ lease: string; holder: string; expired: number | boolean }>(`SELECT lease, holder, (expires_at < ${this.now}) AS expired FROM lab_lease WHERE board = ?`, [board]);
        const params: SqlValue[] = [lease, holder, ttlMs];
        let rows: Array<{ acquired_at: number; expires_at: number }>;
        if (!old) {
          rows = await tx.query(
            `INSERT INTO lab_lease (board, lease, holder, acquired_at, expires_at) VALUES (?, ?, ?, ${this.now}, ${this.now} + ?) ON CONFLICT (board) DO NOTHING RETURNING acquired_at, expires_at`,
            [board, ...params],
          );
        } else if (old.expired === true || old.expired === 1) {
          // Only if it is still that expired lease: another run may have taken it meanwhile.
          rows = await tx.query(
            `UPDATE lab_lease SET lease = ?, holder = ?, acquired_at = ${this.now}, expires_at = ${this.now} + ? WHERE board = ? AND lease = ? AND expires_at < ${this.now} RETURNING acquired_at, expires_at`,
            [...params, board, old.lease],
          );
          if (rows.length) await this.log(tx, { board, lease: old.lease, holder: old.holder, event: 'expired', detail: `taken over by ${holder}` });
        } else {
          return null;
        }
        if (!rows.length) return null;
        await this.log(tx, { board, lease, holder, event: 'acquired', detail: null });
        return { board, lease, holder, acquiredAt: Number(rows[0]!.acquired_at), expiresAt: Number(rows[0]!.expires_at) };
      });
      if (taken) return taken;
    }
    return null;
  }

  /** Moves the lease's expiry to `ttlMs` from now; LeaseLostError if it expired or was forced away. */
  async renew(lease: string, ttlMs: number): Promise<number> {
    const rows = await this.db.query<{ expires_at: number }>(`UPDATE lab_lease SET expires_at = ${this.now} + ? WHERE lease = ? AND expires_at >= ${this.now} RETURNING expires_at`, [ttlMs, lease]);
    if (!rows.length) throw new LeaseLostError(lease);
    return Number(rows[0]!.expires_at);
  }

  /** Gives the board back; false if the lease was already gone. */
  async release(lease: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const rows = await tx.query<{ board: string; holder: string }>('DELETE FROM lab_lease WHERE lease = ? RETURNING board, holder', [lease]);
      if (rows[0]) await this.log(tx, { board: rows[0].board, lease, holder: rows[0].holder, event: 'released', detail: null });
      return rows.length > 0;
    });
  }

  /** Ends whatever lease `board` has, for `by` (logged with who and why); the lease ended, if any. */
  async forceRelease(board: string, by: string): Promise<Lease | null> {
    return this.db.transaction(async (tx) => {
      const rows = await tx.query<{ lease: string; holder: string; acquired_at: number; expires_at: number }>('DELETE FROM lab_lease WHERE board = ? RETURNING lease, holder, acquired_at, expires_at', [board]);
      const r = rows[0];
      if (!r) return null;
      await this.log(tx, { board, lease: r.lease, holder: r.holder, event: 'forced', detail: `released by ${by}` });
      return { board, lease: r.lease, holder: r.holder, acquiredAt: Number(r.acquired_at), expiresAt: Number(r.expires_at) };
    });
  }

  /**
   * Takes `board` out of the lab (its lease, if `lease` names the one it has, ends with it):
   * the lease log says when, why and by whom.
   */
  async markOffline(board: string, reason: string, by: string, lease?: string): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.query(`INSERT INTO lab_board_offline (board, kind, since, reason, marked_by) VALUES (?, 'offline', ${this.now}, ?, ?) ON CONFLICT (board) DO UPDATE SET kind = 'offline', reason = excluded.reason, marked_by = excluded.marked_by`, [board, reason, by]);
      if (lease) await tx.query('DELETE FROM lab_lease WHERE board = ? AND lease = ?', [board, lease]);
      await this.log(tx, { board, lease: lease ?? '-', holder: by, event: 'offline', detail: reason });
    });
  }

  /**
   * Takes `board` out of the lab for a failed check or too many infrastructure failures, in
   * `tx`; a board already offline (power) stays offline, so a passing check cannot bring it
   * back. Its lease, if `lease` names the one it has, ends. True if it was in the lab.
   */
  private async quarantine(tx: Db, board: string, reason: string, by: string, lease?: string): Promise<boolean> {
    const out = await tx.query('SELECT 1 AS x FROM lab_board_offline WHERE board = ?', [board]);
    if (lease) await tx.query('DELETE FROM lab_lease WHERE board = ? AND lease = ?', [board, lease]);
    if (out.length) return false;
    await tx.query(`INSERT INTO lab_board_offline (board, kind, since, reason, marked_by) VALUES (?, 'quarantined', ${this.now}, ?, ?)`, [board, reason, by]);
    await this.log(tx, { board, lease: lease ?? '-', holder: by, event: 'quarantined', detail: reason });
    return true;
  }

  /**
   * Stores a health check's result for `board`. A failed one quarantines the board (ending
   * `lease`, the checker's own, if given); a passing one brings a quarantined board back.
   */
  async recordCheck(board: string, result: { ok: boolean; failedStep?: string; reason?: string; steps: readonly unknown[] }, by: string, lease?: string): Promise<CheckOutcome> {
    return this.db.transaction(async (tx) => {
      await tx.query(`INSERT INTO lab_health_check (board, at, ok, failed_step, reason, steps, checked_by) VALUES (?, ${this.now}, ?, ?, ?, ?, ?)`, [board, result.ok ? 1 : 0, result.failedStep ?? null, result.reason ?? null, JSON.stringify(result.steps), by]);
      if (!result.ok) return (await this.quarantine(tx, board, `health check failed at ${result.reason ?? result.failedStep ?? '?'}`, by, lease)) ? 'quarantined' : 'failed, already out';
      const back = await tx.query("DELETE FROM lab_board_offline WHERE board = ? AND kind = 'quarantined' RETURNING board", [board]);
      if (!back.length) return 'passed';
      await this.log(tx, { board, lease: lease ?? '-', holder: by, event: 'online', detail: 'passed its health check' });
      return 'passed, back in the lab';
    });
  }

  /** Each board's latest check, by board. */
  async lastChecks(): Promise<Map<string, StoredCheck>> {
    const rows = await this.db.query<CheckRow>(`SELECT c.board, c.at, c.ok, c.failed_step, c.reason, c.steps, c.checked_by FROM lab_health_check c WHERE c.id = (SELECT MAX(id) FROM lab_health_check WHERE board = c.board)`, []);
    return new Map(rows.map((r) => [r.board, checkOf(r)]));
  }

  /** `board`'s latest checks, newest first. */
  async checks(board: string, limit = 10): Promise<StoredCheck[]> {
    const rows = await this.db.query<CheckRow>('SELECT board, at, ok, failed_step, reason, steps, checked_by FROM lab_health_check WHERE board = ? ORDER BY id DESC LIMIT ?', [board, limit]);
    return rows.map(checkOf);
  }

  /**
   * Records an infrastructure failure of `board` (the lab failed the test, not the device);
   * the `count`-th within `windowMs` quarantines it. Whether it did.
   */
  async recordInfraFailure(board: string, detail: string, by: string, policy: { count: number; windowMs: number }, lease?: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      await tx.query(`INSERT INTO lab_board_failure (board, at, kind, detail) VALUES (?, ${this.now}, 'infrastructure', ?)`, [board, detail]);
      const [row] = await tx.query<{ n: number | string }>(`SELECT COUNT(*) AS n FROM lab_board_failure WHERE board = ? AND kind = 'infrastructure' AND at >= ${this.now} - ?`, [board, policy.windowMs]);
      const n = Number(row!.n);
      if (n < policy.count) return false;
      return this.quarantine(tx, board, `${n} infrastructure failures within ${policy.windowMs / 1000} s; the last: ${detail}`, by, lease);
    });
  }

  /** Puts `board` back in the lab (offline or quarantined); false if it was not out. */
  async markOnline(board: string, by: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const rows = await tx.query('DELETE FROM lab_board_offline WHERE board = ? RETURNING board', [board]);
      if (rows.length) await this.log(tx, { board, lease: '-', holder: by, event: 'online', detail: null });
      return rows.length > 0;
    });
  }

  /** The boards out of the lab (offline or quarantined), by board. */
  async offline(): Promise<Map<string, OfflineBoard>> {
    const rows = await this.db.query<{ board: string; kind: OfflineBoard['kind']; since: number; reason: string; marked_by: string }>('SELECT board, kind, since, reason, marked_by FROM lab_board_offline', []);
    return new Map(rows.map((r) => [r.board, { board: r.board, kind: r.kind, since: Number(r.since), reason: r.reason, markedBy: r.marked_by }]));
  }

  /** The leases that have not expired, by board. */
  async current(): Promise<Map<string, Lease>> {
    const rows = await this.db.query<{ board: string; lease: string; holder: string; acquired_at: number; expires_at: number }>(
      `SELECT board, lease, holder, acquired_at, expires_at FROM lab_lease WHERE expires_at >= ${this.now}`,
      [],
    );
    return new Map(rows.map((r) => [r.board, { board: r.board, lease: r.lease, holder: r.holder, acquiredAt: Number(r.acquired_at), expiresAt: Number(r.expires_at) }]));
  }

  /** The lease log, oldest first; of one board if given. */
  async history(board?: string): Promise<LeaseLogEntry[]> {
    const rows = await this.db.query<{ at: number; board: string; lease: string; holder: string; event: LeaseEvent; detail: string | null }>(
      `SELECT at, board, lease, holder, event, detail FROM lab_lease_log ${board ? 'WHERE board = ?' : ''} ORDER BY id`,
      board ? [board] : [],
    );
    return rows.map((r) => ({ ...r, at: Number(r.at) }));
  }

  /** The latest `limit` lease events, newest first. */
  async latest(limit: number): Promise<LeaseLogEntry[]> {
    const rows = await this.db.query<{ at: number; board: string; lease: string; holder: string; event: LeaseEvent; detail: string | null }>('SELECT at, board, lease, holder, event, detail FROM lab_lease_log ORDER BY id DESC LIMIT ?', [limit]);
    return rows.map((r) => ({ ...r, at: Number(r.at) }));
  }

  /**
   * Stores an attempt of `test` in `run` on `board`. A pass turns the run's earlier device
   * failures of the test on other boards into `board-suspect`; those, if any.
   */
  async recordAttempt(a: { run: string; board: string; test: string; title: string; attempt: number; outcome: AttemptOutcome }): Promise<StoredAttempt[]> {
    return this.db.transaction(async (tx) => {
      let suspects: StoredAttempt[] = [];
      if (a.outcome === 'passed') {
        const earlier = await tx.query<{ id: number; board: string; attempt: number; outcome: AttemptOutcome }>('SELECT id, board, attempt, outcome FROM lab_test_attempt WHERE run = ? AND test = ? ORDER BY id', [a.run, a.test]);
        suspects = suspectAttempts(earlier.map((r) => ({ ...r, id: Number(r.id), attempt: Number(r.attempt) })), a.board);
        for (const s of suspects) await tx.query("UPDATE lab_test_attempt SET outcome = 'board-suspect' WHERE id = ?", [s.id]);
      }
      await tx.query(`INSERT INTO lab_test_attempt (at, run, board, test, title, attempt, outcome) VALUES (${this.now}, ?, ?, ?, ?, ?, ?)`, [a.run, a.board, a.test, a.title, a.attempt, a.outcome]);
      return suspects;
    });
  }

  /** The boards `run`'s tests failed on (device failures) that have not passed since: a retry goes elsewhere if it can. */
  async suspectBoards(run: string): Promise<string[]> {
    const rows = await this.db.query<{ board: string }>(
      "SELECT DISTINCT f.board FROM lab_test_attempt f WHERE f.run = ? AND f.outcome = 'device-failure' AND NOT EXISTS (SELECT 1 FROM lab_test_attempt p WHERE p.run = f.run AND p.test = f.test AND p.outcome = 'passed') ORDER BY f.board",
      [run],
    );
    return rows.map((r) => r.board);
  }

  /** Each board's attempts by outcome over the last `runs` runs that used it. */
  async boardCounts(runs: number): Promise<Map<string, BoardCounts>> {
    const rows = await this.db.query<{ board: string; outcome: AttemptOutcome; n: number | string; runs: number | string }>(
      `WITH board_run AS (SELECT board, run, MAX(id) AS last FROM lab_test_attempt GROUP BY board, run),
       recent AS (SELECT board, run FROM (SELECT board, run, ROW_NUMBER() OVER (PARTITION BY board ORDER BY last DESC) AS k FROM board_run) ranked WHERE k <= ?)
       SELECT a.board, a.outcome, COUNT(*) AS n, (SELECT COUNT(*) FROM recent r2 WHERE r2.board = a.board) AS runs
       FROM lab_test_attempt a JOIN recent r ON r.board = a.board AND r.run = a.run GROUP BY a.board, a.outcome`,
      [runs],
    );
    const counts = new Map<string, BoardCounts>();
    for (const r of rows) counts.set(r.board, addCount({ ...(counts.get(r.board) ?? NO_COUNTS), runs: Number(r.runs) }, r.outcome, Number(r.n)));
    return counts;
  }

  /** Joins the queue for any of `boards`; the waiter's id. */
  async enqueue(holder: string, boards: readonly string[]): Promise<string> {
    const id = newId();
    await this.db.query(`INSERT INTO lab_waiter (id, holder, boards, since, seen_at) VALUES (?, ?, ?, ${this.now}, ${this.now})`, [id, holder, JSON.stringify(boards)]);
    return id;
  }

  /**
   * Marks the waiter alive and answers how many live waiters (seen within `ttlMs`) came
   * before it wanting one of the same boards: 0 means it is its turn. A waiter that stopped
   * asking (a killed run) drops out of everyone's count after `ttlMs`.
   */
  async position(waiter: string, ttlMs: number): Promise<number> {
    return this.db.transaction(async (tx) => {
      await tx.query(`UPDATE lab_waiter SET seen_at = ${this.now} WHERE id = ?`, [waiter]);
      const rows = await tx.query<{ id: string; boards: string; since: number }>(`SELECT id, boards, since FROM lab_waiter WHERE seen_at >= ${this.now} - ? ORDER BY since, id`, [ttlMs]);
      const mine = rows.findIndex((r) => r.id === waiter);
      if (mine < 0) throw new FleetlabError('HIL_ERR_LAB', `waiter ${waiter} is not in the queue (it stopped asking for longer than the lease time to live)`);
      const wanted = new Set(JSON.parse(rows[mine]!.boards) as string[]);
      return rows.slice(0, mine).filter((r) => (JSON.parse(r.boards) as string[]).some((b) => wanted.has(b))).length;
    });
  }

  async dequeue(waiter: string): Promise<void> {
    await this.db.query('DELETE FROM lab_waiter WHERE id = ?', [waiter]);
  }

  /** Drops waiters not seen for `ms`, so the table does not grow with killed runs. */
  async pruneWaiters(ms: number): Promise<void> {
    await this.db.query(`DELETE FROM lab_waiter WHERE seen_at < ${this.now} - ?`, [ms]);
  }
}
