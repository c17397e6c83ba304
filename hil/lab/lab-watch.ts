/**
 * `fleetlab lab check` and `fleetlab lab watch`: health checks of a lab's boards outside any
 * run. A free board is checked under a lease of the checker's own, so no run is given it
 * halfway through; a quarantined or offline board (nobody is given it) is checked without one;
 * a board another run holds is left alone. A failing check quarantines the board, a passing
 * one brings a quarantined board back (hil/lab/lease-store.ts).
 *
 * A round that fails (the store out of reach) is said and the next round tries again; the
 * watch ends only when stopped, or when it loses its own lease.
 *
 * One `lab watch` per lab: it holds the lease of the pseudo-board WATCH_BOARD (no lab board can
 * be called that) for as long as it runs, so a second one is refused naming the first, and a
 * killed one's place is free again within the lease's time to live.
 */
import { FleetlabError, errorText } from '../../src/errors.js';
import { sleep } from '../../src/wait.js';
import { labError, type Lab, type LabBoard } from './lab-file.js';
import type { HealthResult } from './health-check.js';
import { heartbeat } from './lease-heartbeat.js';
import type { CheckOutcome, Lease, LeaseStore, OfflineBoard } from './lease-store.js';

/** The watcher's own lease: not a board name (those start with a letter or digit). */
export const WATCH_BOARD = '@lab-watch';

export type RoundStep =
  | { readonly board: LabBoard; readonly action: 'lease-and-check' }
  | { readonly board: LabBoard; readonly action: 'check'; readonly why: string }
  | { readonly board: LabBoard; readonly action: 'skip'; readonly why: string };

/** What one round does with each board (pure): `names` limits it to those boards. */
export function planRound(lab: Lab, leases: ReadonlyMap<string, Lease>, out: ReadonlyMap<string, OfflineBoard>, names?: readonly string[]): RoundStep[] {
  const boards = names?.length ? lab.boards.filter((b) => names.includes(b.name)) : lab.boards;
  return boards.map((board): RoundStep => {
    const o = out.get(board.name);
    if (o) return { board, action: 'check', why: `${o.kind}: nobody is given it` };
    const lease = leases.get(board.name);
    if (lease) return { board, action: 'skip', why: `leased by ${lease.holder}` };
    return { board, action: 'lease-and-check' };
  });
}

export interface RoundLine {
  readonly board: string;
  /** What happened: `passed`, `quarantined`, ... or `skipped`. */
  readonly outcome: CheckOutcome | 'skipped' | 'busy';
  readonly text: string;
}

export interface RoundOptions {
  readonly check: (board: LabBoard) => Promise<HealthResult>;
  /** Who checks, as the lease log shows it. */
  readonly by: string;
  /** Only these boards (all when empty). */
  readonly names?: readonly string[];
}

const stepsText = (r: HealthResult) => r.steps.map((s) => `${s.step} ${s.status}${s.status === 'pass' ? '' : ` (${s.detail})`}`).join(', ');

/** One round: every board checked (or skipped, saying why) at once; a line per board. */
export async function checkRound(store: LeaseStore, lab: Lab, opts: RoundOptions): Promise<RoundLine[]> {
  if (!lab.health) throw labError(lab.source, 'the lab file has no "health" section: add one (health: {} takes every default) to check its boards');
  const unknown = (opts.names ?? []).filter((n) => !lab.boards.some((b) => b.name === n));
  if (unknown.length) throw labError(lab.source, `no board called ${unknown.join(', ')}; boards: ${lab.boards.map((b) => b.name).join(', ')}`, { example: false });
  const [leases, out] = await Promise.all([store.current(), store.offline()]);
  const ttlMs = lab.ttlSeconds * 1000;
  return Promise.all(
    planRound(lab, leases, out, opts.names).map(async (step): Promise<RoundLine> => {
      const name = step.board.name;
      if (step.action === 'skip') return { board: name, outcome: 'skipped', text: `${name}: not checked, ${step.why}` };
      let lease: Lease | null = null;
      if (step.action === 'lease-and-check') {
        lease = await store.acquire([name], opts.by, ttlMs);
        // Taken between the plan and now: a run has it.
        if (!lease) return { board: name, outcome: 'busy', text: `${name}: not checked, a run took it just now` };
      }
      const beat = lease ? heartbeat(store, lease.lease, ttlMs) : undefined;
      let result: HealthResult;
      try {
        result = await opts.check(step.board);
      } catch (err) {
        await beat?.stop();
        if (lease) await store.release(lease.lease);
        throw err;
      }
      await beat?.stop();
      const outcome = await store.recordCheck(name, result, opts.by, lease?.lease);
      // A passing check under a lease gives the board back; a failing one ended the lease with the quarantine.
      if (lease && result.ok) await store.release(lease.lease);
      return { board: name, outcome, text: `${name}: ${outcome}${result.ok ? '' : ` at ${result.reason}`} [${stepsText(result)}]` };
    }),
  );
}

export interface WatchOptions extends RoundOptions {
  readonly log: (line: string) => void;
  /** Stops the watch (SIGINT, SIGTERM): the round under way finishes, then the watch ends. */
  readonly signal: AbortSignal;
  /** Rounds to run before ending; unbounded until `signal` when absent. */
  readonly rounds?: number;
}

/**
 * Checks every board each `health.everySeconds` until stopped. Refused at once if another
 * `lab watch` holds the lab's watch lease; ends with an error if it loses that lease (its
 * store was out of reach for a whole time to live, or someone released it with --force).
 */
export async function watchLab(store: LeaseStore, lab: Lab, opts: WatchOptions): Promise<void> {
  if (!lab.health) throw labError(lab.source, 'the lab file has no "health" section: add one (health: {} takes every default) to watch its boards');
  const ttlMs = lab.ttlSeconds * 1000;
  const mine = await store.acquire([WATCH_BOARD], opts.by, ttlMs);
  if (!mine) {
    const other = (await store.current()).get(WATCH_BOARD);
    throw labError(lab.source, `another fleetlab lab watch is running (${other?.holder ?? 'it just ended'}${other ? `, its lease renewed until ${new Date(other.expiresAt).toISOString()}` : ''}); one watch per lab: stop that one, or wait for its lease to lapse if it was killed`, { example: false });
  }
  const beat = heartbeat(store, mine.lease, ttlMs);
  let lostErr: FleetlabError | undefined;
  const gone = new AbortController();
  void beat.lost.then((err) => {
    lostErr = labError(lab.source, `${err.message}: this watch stops (another may have started)`, { example: false });
    gone.abort();
  });
  const stop = AbortSignal.any([opts.signal, gone.signal]);
  opts.log(`watching ${lab.boards.length} board(s) every ${Math.round(lab.health.everyMs / 1000)} s as ${opts.by}`);
  try {
    for (let round = 1; !stop.aborted && (opts.rounds === undefined || round <= opts.rounds); round++) {
      try {
        for (const line of await checkRound(store, lab, opts)) opts.log(line.text);
      } catch (err) {
        // The store out of reach, or a check's edge failing: the next round tries again. A board
        // this round leased keeps its lease no longer than its time to live (nobody renews it).
        opts.log(`round ${round} failed: ${errorText(err).split('\n')[0]}; the next in ${Math.round(lab.health.everyMs / 1000)} s`);
      }
      if (opts.rounds !== undefined && round >= opts.rounds) break;
      await sleep(lab.health.everyMs, stop).catch(() => undefined);
    }
  } finally {
    await beat.stop();
    if (!lostErr) await store.release(mine.lease);
  }
  if (lostErr) throw lostErr;
}
