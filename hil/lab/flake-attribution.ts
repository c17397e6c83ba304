/**
 * Flake attribution: a test that fails on one lab board and, retried, passes on another points
 * at the board, not at the test. Every attempt of a test on a lab board is kept with its
 * outcome (./lease-store.ts); when an attempt passes, the run's earlier failures of that test
 * on other boards become `board-suspect` and count against those boards. A retry is steered to
 * a board other than the one its test failed on, waiting for one a bounded time, so that the
 * second attempt can tell. The lab file's `flakes` section sets both bounds. Pure: the store and
 * the worker's lease (./worker-lease.ts) do the rest.
 */
import { isMapping } from '../../src/mapping.js';

/** One `fleetlab test` run, shared by all its workers (set by the suite's global setup): a retry's earlier attempts are this run's. */
export const LAB_RUN_VARIABLE = 'FLEETLAB_LAB_RUN';

/** What an attempt on a board came to. `board-suspect`: a device failure that a pass on another board put on the board. */
export type AttemptOutcome = 'passed' | 'device-failure' | 'infrastructure-failure' | 'board-suspect';

/** One attempt of a test, as the store keeps it. */
export interface StoredAttempt {
  readonly id: number;
  readonly board: string;
  /** 0 for the first run of the test, 1 for its first retry, ... */
  readonly attempt: number;
  readonly outcome: AttemptOutcome;
}

/** A test's attempt on a device, as the harness's fixture saw it end. */
export interface TestAttempt {
  /** Playwright's id of the test: the same for each retry. */
  readonly test: string;
  readonly title: string;
  /** 0 for the first attempt, 1 for the first retry, ... */
  readonly retry: number;
  readonly passed: boolean;
  /** Why the lab, not the device, failed it (a board that did not come back after its power control). */
  readonly infrastructure?: string;
}

/** An annotation put on a test's report. */
export interface AttemptLabel {
  readonly type: string;
  readonly description: string;
}

export interface FlakeSettings {
  /** `lab status` and the page count each board's attempts over its last this many runs. */
  readonly runs: number;
  /** How long a retry waits for a board other than the one its test failed on before taking that one again. */
  readonly retryWaitMs: number;
}

export const FLAKE_DEFAULTS = { runs: 20, retryWaitSeconds: 120 } as const;

type Fields = Record<string, unknown>;

/** The lab file's `flakes` section (absent: the defaults). */
export function parseFlakes(raw: unknown, fail: (message: string) => never): FlakeSettings {
  if (raw === undefined) return { runs: FLAKE_DEFAULTS.runs, retryWaitMs: FLAKE_DEFAULTS.retryWaitSeconds * 1000 };
  if (!isMapping(raw)) return fail('"flakes" must be a mapping with "runs" and "retryWaitSeconds"');
  const unknown = Object.keys(raw).filter((k) => k !== 'runs' && k !== 'retryWaitSeconds');
  if (unknown.length) fail(`unknown field "flakes.${unknown[0]}" (known: runs, retryWaitSeconds)`);
  const whole = (key: string, min: number, max: number, fallback: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) fail(`"flakes.${key}" must be a whole number from ${min} to ${max}, got ${JSON.stringify(v)}`);
    return v as number;
  };
  return { runs: whole('runs', 1, 10_000, FLAKE_DEFAULTS.runs), retryWaitMs: whole('retryWaitSeconds', 0, 86_400, FLAKE_DEFAULTS.retryWaitSeconds) * 1000 };
}

/**
 * The earlier attempts of a test that a pass on `board` shows were their boards' fault: its
 * device failures on other boards. A failure on the board that passed says nothing of the board;
 * an infrastructure failure is counted as one already.
 */
export function suspectAttempts(earlier: readonly StoredAttempt[], board: string): StoredAttempt[] {
  return earlier.filter((a) => a.outcome === 'device-failure' && a.board !== board);
}

/** The report's words for a test that failed on `suspects`' boards and passed on `passed.board`. */
export function suspectDescription(suspects: readonly StoredAttempt[], passed: { board: string; attempt: number }): string {
  const failed = suspects.map((s) => `${s.board} (attempt ${s.attempt + 1})`).join(', ');
  const boards = [...new Set(suspects.map((s) => s.board))].join(', ');
  return `failed on ${failed}, passed on ${passed.board} (attempt ${passed.attempt + 1}): counted against ${boards}`;
}

/** A board's attempts over its last runs. */
export interface BoardCounts {
  /** The runs counted (at most the lab's `flakes.runs`). */
  readonly runs: number;
  readonly passed: number;
  readonly deviceFailures: number;
  readonly infrastructureFailures: number;
  readonly boardSuspect: number;
}

export const NO_COUNTS: BoardCounts = { runs: 0, passed: 0, deviceFailures: 0, infrastructureFailures: 0, boardSuspect: 0 };

/** Adds `n` attempts of `outcome` to `counts` (pure). */
export function addCount(counts: BoardCounts, outcome: AttemptOutcome, n: number): BoardCounts {
  switch (outcome) {
    case 'passed':
      return { ...counts, passed: counts.passed + n };
    case 'device-failure':
      return { ...counts, deviceFailures: counts.deviceFailures + n };
    case 'infrastructure-failure':
      return { ...counts, infrastructureFailures: counts.infrastructureFailures + n };
    case 'board-suspect':
      return { ...counts, boardSuspect: counts.boardSuspect + n };
  }
}

/** A board's counts as `lab status` prints them. */
export function countsText(c: BoardCounts | undefined): string {
  if (!c || c.runs === 0) return 'no runs recorded';
  return `last ${c.runs} run${c.runs === 1 ? '' : 's'}: ${c.passed} passed, ${c.deviceFailures} device, ${c.infrastructureFailures} infrastructure, ${c.boardSuspect} board-suspect`;
}
