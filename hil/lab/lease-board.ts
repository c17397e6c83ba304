/**
 * Holding a lab board for a run: queue for a board with the wanted tags, take it, check its
 * health if its last check is too old (a board failing it is quarantined and the next one
 * taken), keep the lease alive with a heartbeat, give it back. A retry prefers a board other
 * than the one its test failed on, for a bounded wait. What a run does while waiting (print its
 * place in the queue) and when its lease is lost (stop) is the caller's.
 */
import { labError, matchingBoards, type Lab, type LabBoard } from './lab-file.js';
import { checkDue, type HealthResult } from './health-check.js';
import { heartbeat } from './lease-heartbeat.js';
import type { CheckOutcome, LeaseLostError, LeaseStore, OfflineBoard } from './lease-store.js';
import { until } from '../../src/wait.js';

export interface HeldBoard {
  board: LabBoard;
  lease: string;
  /** Takes the board out of the lab, ending this lease: it did not come back after its power control. */
  markOffline(reason: string): Promise<void>;
  /** Stores a failed health check: the board is quarantined and this lease ends with it. */
  failedCheck(result: HealthResult): Promise<CheckOutcome>;
  /**
   * Counts an infrastructure failure against the board; resolves true when it was the
   * `policy.count`-th within `policy.windowMs`, which quarantines the board and ends this lease.
   */
  infraFailure(detail: string, policy: { count: number; windowMs: number }): Promise<boolean>;
  /** Resolves if the lease is lost (expired or forced away) while held. */
  lost: Promise<LeaseLostError>;
  /** Stops the heartbeat and gives the board back. */
  release(): Promise<void>;
}

export interface LeaseBoardOptions {
  tags: readonly string[];
  /** Who holds it, as the lab shows it: user@host and what runs. */
  holder: string;
  /** How often a waiting run asks again. */
  pollMs?: number;
  /** How long to wait for a board before giving up. */
  waitMs: number;
  /** Called when the place in the queue changes (0: a board is being taken). */
  onQueue?: (position: number, busy: readonly string[]) => void;
  /** Aborts the wait. */
  signal?: AbortSignal;
  /**
   * Checks a board's health (hil/lab/health-probes.ts's checkBoard), run on a board just
   * taken whose last check is older than the lab file's `health.maxAgeSeconds`. Without it,
   * or without a `health` section, boards are given unchecked.
   */
  check?: (board: LabBoard) => Promise<HealthResult>;
  /** Told each check run before a lease, and what it did to the board. */
  onCheck?: (board: string, result: HealthResult, outcome: CheckOutcome) => void;
  /**
   * Boards to take only if no other comes free within `waitMs` (a retry's test failed on them:
   * ./flake-attribution.ts). Ignored when every other matching board is out of the lab.
   */
  avoid?: { boards: readonly string[]; waitMs: number; onGiveUp?: (boards: readonly string[]) => void };
}

/**
 * The boards to try now: all of `names`, or those not avoided while the avoidance lasts and one
 * of them is in the lab (pure).
 */
export function boardsToTry(names: readonly string[], out: ReadonlyMap<string, unknown>, avoid: ReadonlySet<string>, avoiding: boolean): readonly string[] {
  if (!avoiding || avoid.size === 0) return names;
  const others = names.filter((n) => !avoid.has(n) && !out.has(n));
  return others.length ? others : names;
}

/** Why a run cannot be given any of `names`: every one is out of the lab (pure). */
export function allOutMessage(tags: readonly string[], names: readonly string[], out: ReadonlyMap<string, OfflineBoard>): string | undefined {
  if (!names.every((n) => out.has(n))) return undefined;
  const boards = names.map((n) => out.get(n)!);
  // The message a lab had before quarantine, kept where every board is offline.
  if (boards.every((b) => b.kind === 'offline')) return `every board with tags [${tags.join(', ')}] is offline: ${boards.map((b) => `${b.board} (${b.reason})`).join('; ')}. Once a board is fixed: fleetlab lab online <board>`;
  return `every board with tags [${tags.join(', ')}] is out of the lab: ${boards.map((b) => `${b.board} (${b.kind}: ${b.reason})`).join('; ')}. A quarantined board comes back when it passes a check (fleetlab lab check <board>, or fleetlab lab watch); any board with fleetlab lab online <board>`;
}

export async function leaseBoard(store: LeaseStore, lab: Lab, opts: LeaseBoardOptions): Promise<HeldBoard> {
  const candidates = matchingBoards(lab, opts.tags);
  const names = candidates.map((b) => b.name);
  const ttlMs = lab.ttlSeconds * 1000;
  const pollMs = opts.pollMs ?? 1000;
  const avoid = new Set(opts.avoid?.boards ?? []);
  const avoidUntil = Date.now() + (opts.avoid?.waitMs ?? 0);
  const waiter = await store.enqueue(opts.holder, names);
  try {
    let last = -1;
    let attempt = 0;
    let gaveUp = false;
    let tried = false;
    const take = async (): Promise<HeldBoard | undefined> => {
      // Waiting on boards that are all out of the lab would never end: say so at once.
      const out = await store.offline();
      const allOut = allOutMessage(opts.tags, names, out);
      if (allOut) throw labError(lab.source, allOut, { example: false });
      const position = await store.position(waiter, ttlMs);
      if (position === 0) {
        // The first try prefers the others even with no wait: a free one is taken at once.
        const avoiding = !tried || Date.now() < avoidUntil;
        tried = true;
        if (!avoiding && avoid.size && !gaveUp && opts.avoid!.waitMs > 0) {
          gaveUp = true;
          opts.avoid?.onGiveUp?.([...avoid]);
        }
        const lease = await store.acquire(boardsToTry(names, out, avoid, avoiding), opts.holder, ttlMs);
        if (lease) {
          const held = hold(store, candidates.find((b) => b.name === lease.board)!, lease.lease, ttlMs, opts.holder);
          let ok: boolean;
          try {
            ok = await healthy(store, lab, held, opts);
          } catch (err) {
            // The store or the check failed: stop the heartbeat (no lease is kept for a run that goes no further), give the board back if the store lets it.
            await held.release().catch(() => undefined);
            throw err;
          }
          // A board that failed is quarantined with this lease; the next poll takes another (or says all are out).
          if (ok) return held;
        }
      }
      if (position !== last) {
        last = position;
        const held = await store.current();
        opts.onQueue?.(position, names.filter((n) => held.has(n)));
      }
      // Expired waiters pile up only as fast as runs are killed; a tenth of the polls prune.
      if (attempt++ % 10 === 0) await store.pruneWaiters(ttlMs * 2);
      return undefined;
    };
    const held = await until(`a board with tags [${opts.tags.join(', ')}]`, take, (board) => board !== undefined, {
      timeoutMs: opts.waitMs,
      intervalMs: pollMs,
      ...(opts.signal ? { signal: opts.signal } : {}),
      // Every board offline, or the lease store failing, is not cured by waiting.
      stopOn: () => true,
      fail: (f) => {
        if (f.end === 'aborted') return labError(lab.source, 'stopped while waiting for a board', { example: false });
        if (f.end === 'timeout') return labError(lab.source, `no board with tags [${opts.tags.join(', ')}] came free within ${Math.round(opts.waitMs / 1000)} s (${names.length} such board${names.length > 1 ? 's' : ''}; 'fleetlab lab status' shows who holds them)`, { example: false });
        return undefined;
      },
    });
    return held!;
  } finally {
    await store.dequeue(waiter);
  }
}

/** Whether a board just taken may be given: its last check is recent, or it passes one now. */
async function healthy(store: LeaseStore, lab: Lab, held: HeldBoard, opts: LeaseBoardOptions): Promise<boolean> {
  if (!lab.health || !held.board.health || !opts.check) return true;
  const [last, now] = await Promise.all([store.lastChecks(), store.clock()]);
  if (!checkDue(last.get(held.board.name)?.at, now, lab.health.maxAgeMs)) return true;
  const result = await opts.check(held.board);
  // Stored before the caller is told: `onCheck?.(..., await ...)` would skip the store without an onCheck.
  const outcome = result.ok ? await store.recordCheck(held.board.name, result, opts.holder, held.lease) : await held.failedCheck(result);
  opts.onCheck?.(held.board.name, result, outcome);
  return result.ok;
}

/** A taken lease, kept by its heartbeat until given back, quarantined or marked offline. */
function hold(store: LeaseStore, board: LabBoard, lease: string, ttlMs: number, holder: string): HeldBoard {
  const beat = heartbeat(store, lease, ttlMs);
  return {
    board,
    lease,
    lost: beat.lost,
    async markOffline(reason: string) {
      await beat.stop();
      await store.markOffline(board.name, reason, holder, lease);
    },
    async failedCheck(result: HealthResult) {
      await beat.stop();
      return store.recordCheck(board.name, result, holder, lease);
    },
    async infraFailure(detail, policy) {
      const quarantined = await store.recordInfraFailure(board.name, detail, holder, policy, lease);
      // The lease went with the quarantine: a beat now would find it gone.
      if (quarantined) await beat.stop();
      return quarantined;
    },
    async release() {
      await beat.stop();
      await store.release(lease);
    },
  };
}
