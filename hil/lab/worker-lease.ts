/**
 * One lab board per Playwright worker: `fleetlab test --target board --lab FILE --tag T` sets
 * FLEETLAB_LAB and FLEETLAB_LAB_TAGS, and the `board` target of each worker leases its own
 * board with those tags at its first spec file, keeps it (the lease's heartbeat runs in the
 * worker) until the worker ends, and waits in the lab's queue, saying its place, while every
 * such board is busy. A worker killed with `kill -9` stops beating, and its board is free
 * again within the lease's time to live.
 *
 * Each test's attempt on the board is kept against it (./flake-attribution.ts): a worker that
 * starts after a failure (Playwright's retry) leases a board other than the one the run's
 * failing tests ran on if one comes free within the lab's `flakes.retryWaitSeconds`, and a test
 * that passes there after failing elsewhere is `board-suspect`.
 */
import { boardCapabilities, type BoardConfig } from './board-config.js';
import type { Capability } from '../../device-access/protocols.js';
import { leaseChecks, openLab, whoAmI, type OpenLab } from './lab-command.js';
import { labError, matchingBoards, type Lab } from './lab-file.js';
import { leaseBoard, type HeldBoard } from './lease-board.js';
import { LAB_RUN_VARIABLE, suspectDescription, type AttemptLabel, type TestAttempt } from './flake-attribution.js';

export const LAB_VARIABLE = 'FLEETLAB_LAB';
export const LAB_TAGS_VARIABLE = 'FLEETLAB_LAB_TAGS';
/** How long a worker waits in the queue for a board (a run's whole budget, not a spec's). */
export const LAB_WAIT_VARIABLE = 'FLEETLAB_LAB_WAIT_S';
const DEFAULT_WAIT_S = 3600;

export interface LabSelection {
  readonly file: string;
  readonly tags: readonly string[];
  readonly waitMs: number;
}

/** The lab this run's workers lease from, if FLEETLAB_LAB names one. */
export function labSelection(env: NodeJS.ProcessEnv = process.env): LabSelection | undefined {
  const file = env[LAB_VARIABLE];
  if (!file) return undefined;
  const tags = (env[LAB_TAGS_VARIABLE] ?? '').split(',').map((t) => t.trim()).filter(Boolean);
  const wait = Number(env[LAB_WAIT_VARIABLE] ?? DEFAULT_WAIT_S);
  return { file, tags, waitMs: (Number.isFinite(wait) && wait >= 0 ? wait : DEFAULT_WAIT_S) * 1000 };
}

/**
 * What every board the run may get can do: a spec needing more than the least of them is
 * skipped on all, not on whichever worker drew the lesser board.
 */
export function labCapabilities(lab: Lab, tags: readonly string[]): Capability[] {
  const [first, ...rest] = matchingBoards(lab, tags).map((b) => boardCapabilities(b.config));
  return first!.filter((c) => rest.every((caps) => caps.includes(c)));
}

/** A worker's hold on its board: taken at the first spec file, given back at the worker's end. */
export class WorkerLease {
  readonly #selection: LabSelection;
  readonly #log: (line: string) => void;
  #open: OpenLab | undefined;
  #held: HeldBoard | undefined;
  #lost: Error | undefined;
  /** The board the worker's current test runs on, kept when its lease ends mid-test (offline, quarantined). */
  #attemptBoard: string | undefined;
  /** Whether the lab failed the current test (SSH did not answer at its start). */
  #attemptInfra = false;
  readonly #run: string;

  constructor(selection: LabSelection, log: (line: string) => void, run = process.env[LAB_RUN_VARIABLE] ?? `pid-${process.pid}`) {
    this.#selection = selection;
    this.#log = log;
    this.#run = run;
  }

  /**
   * How long a retry waits for a board other than `avoid`: the lab's bound, unless every other
   * board in the lab is held by this run's own workers, which keep theirs until they end.
   */
  async #retryWait(avoid: readonly string[], runTag: string): Promise<number> {
    const { store, lab } = this.#open!;
    const [leases, out] = await Promise.all([store.current(), store.offline()]);
    const others = matchingBoards(lab, this.#selection.tags).filter((b) => !avoid.includes(b.name) && !out.has(b.name));
    if (others.length && others.every((b) => leases.get(b.name)?.holder.endsWith(runTag))) {
      this.#log(`this run's failed tests ran on ${avoid.join(', ')}; the other boards are this run's own (${others.map((b) => b.name).join(', ')}), so no wait for one`);
      return 0;
    }
    if (others.length) this.#log(`this run's failed tests ran on ${avoid.join(', ')}: a board other than that is taken if one comes free within ${lab.flakes.retryWaitMs / 1000} s`);
    return lab.flakes.retryWaitMs;
  }

  /** The held board's name, for reports. */
  get boardName(): string | undefined {
    return this.#held?.board.name;
  }

  /** The board config of the worker's board, leasing one (and waiting for it) the first time. */
  async config(): Promise<BoardConfig> {
    if (this.#lost) throw this.#lost;
    if (this.#held) return this.#held.board.config;
    this.#open ??= await openLab(this.#selection.file);
    const worker = process.env.TEST_WORKER_INDEX ?? '0';
    // The run in the holder: the lab shows which run holds a board, and a retry sees which boards its own run's workers keep.
    const runTag = `run ${this.#run.slice(0, 8)}`;
    const holder = `${whoAmI()} pid ${process.pid} worker ${worker} ${runTag}`;
    const { store, lab } = this.#open;
    const avoid = await store.suspectBoards(this.#run);
    const waitMs = avoid.length ? await this.#retryWait(avoid, runTag) : 0;
    const held = await leaseBoard(store, lab, {
      tags: this.#selection.tags,
      holder,
      waitMs: this.#selection.waitMs,
      avoid: { boards: avoid, waitMs, onGiveUp: (boards) => this.#log(`no other board came free within ${waitMs / 1000} s; ${boards.join(', ')} may be taken again`) },
      onQueue: (position, busy) => this.#log(position === 0 ? `boards busy (${busy.join(', ')}); next in line` : `boards busy (${busy.join(', ')}); waiting, ${position} ahead in the queue`),
      ...leaseChecks(this.#log),
    });
    this.#held = held;
    this.#attemptBoard = held.board.name;
    // As `lab run` tells its command: a spec (or its report) can say which board it ran on.
    process.env.FLEETLAB_LAB_BOARD = held.board.name;
    void held.lost.then((err) => {
      this.#lost = labError(this.#open!.lab.source, `${err.message}: this worker's board ${held.board.name} may now be another run's, so its next spec file fails`, { example: false });
      this.#log(this.#lost.message);
    });
    this.#log(`leased ${held.board.name} [${held.board.tags.join(', ')}] (${held.board.config.host}) as ${holder}`);
    return held.board.config;
  }

  /**
   * The board did not come back after its power control: it leaves the lab (nobody is given it
   * until `fleetlab lab online`), this lease ends with it, and the worker's next spec file
   * leases another matching board, or fails at once saying they are all offline.
   */
  async markOffline(reason: string): Promise<void> {
    const held = this.#held;
    if (!held) return;
    this.#held = undefined;
    await held.markOffline(reason);
    this.#log(`marked ${held.board.name} offline in the lab: ${reason}`);
  }

  /**
   * The lab, not the device, failed a spec file on this board (SSH did not answer at its
   * start). With the lab file's `health` section it is counted against the board, and the
   * `health.infraFailures.count`-th within its window quarantines it: this lease ends with it,
   * and the worker's next spec file leases another matching board.
   */
  async infraFailure(detail: string): Promise<void> {
    this.#attemptInfra = true;
    const held = this.#held;
    const health = this.#open?.lab.health;
    if (!held || !health) return;
    const policy = { count: health.infraFailures, windowMs: health.infraWindowMs };
    if (!(await held.infraFailure(detail, policy))) return void this.#log(`infrastructure failure on ${held.board.name} counted (${policy.count} within ${policy.windowMs / 1000} s quarantine it): ${detail}`);
    this.#held = undefined;
    this.#log(`quarantined ${held.board.name}: ${policy.count} infrastructure failures within ${policy.windowMs / 1000} s; the next spec file leases another board`);
  }

  /**
   * Keeps a test's attempt against the board it ran on; on a pass after failures on other
   * boards, the label that says so. Nothing when no lab board was given to the test.
   */
  async attemptEnded(attempt: TestAttempt): Promise<AttemptLabel | undefined> {
    const board = this.#attemptBoard;
    const infra = this.#attemptInfra || attempt.infrastructure !== undefined;
    this.#attemptInfra = false;
    // The next test's board is the held one; a board taken out of the lab by this attempt is not.
    this.#attemptBoard = this.#held?.board.name;
    if (!board || !this.#open) return undefined;
    const outcome = attempt.passed ? 'passed' : infra ? 'infrastructure-failure' : 'device-failure';
    const suspects = await this.#open.store.recordAttempt({ run: this.#run, board, test: attempt.test, title: attempt.title, attempt: attempt.retry, outcome });
    if (!suspects.length) return undefined;
    const description = suspectDescription(suspects, { board, attempt: attempt.retry });
    this.#log(`board-suspect: ${attempt.title}: ${description}`);
    return { type: 'board-suspect', description };
  }

  async release(): Promise<void> {
    const held = this.#held;
    this.#held = undefined;
    try {
      if (held) {
        await held.release();
        this.#log(`released ${held.board.name}`);
      }
    } finally {
      const open = this.#open;
      this.#open = undefined;
      await open?.close();
    }
  }
}
