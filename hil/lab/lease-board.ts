/**
 * Holding a lab board for a run: queue for a board with the wanted tags, take it, keep the
 * lease alive with a heartbeat, give it back. What a run does while waiting (print its place
 * in the queue) and when its lease is lost (stop) is the caller's.
 */
import { labError, matchingBoards, type Lab, type LabBoard } from './lab-file.js';
import { LeaseLostError, type LeaseStore } from './lease-store.js';
import { until } from '../../src/wait.js';

export interface HeldBoard {
  board: LabBoard;
  lease: string;
  /** Takes the board out of the lab, ending this lease: it did not come back after its power control. */
  markOffline(reason: string): Promise<void>;
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
}

export async function leaseBoard(store: LeaseStore, lab: Lab, opts: LeaseBoardOptions): Promise<HeldBoard> {
  const candidates = matchingBoards(lab, opts.tags);
  const names = candidates.map((b) => b.name);
  const ttlMs = lab.ttlSeconds * 1000;
  const pollMs = opts.pollMs ?? 1000;
  const waiter = await store.enqueue(opts.holder, names);
  try {
    let last = -1;
    let attempt = 0;
    const take = async (): Promise<HeldBoard | undefined> => {
      // Waiting on boards that are all out of the lab would never end: say so at once.
      const offline = await store.offline();
      if (names.every((n) => offline.has(n))) {
        const why = names.map((n) => `${n} (${offline.get(n)!.reason})`).join('; ');
        throw labError(lab.source, `every board with tags [${opts.tags.join(', ')}] is offline: ${why}. Once a board is fixed: fleetlab lab online <board>`, { example: false });
      }
      const position = await store.position(waiter, ttlMs);
      if (position === 0) {
        const lease = await store.acquire(names, opts.holder, ttlMs);
        if (lease) return hold(store, candidates.find((b) => b.name === lease.board)!, lease.lease, ttlMs, opts.holder);
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

/** A taken lease, renewed at a third of its time to live so two missed beats still keep it. */
function hold(store: LeaseStore, board: LabBoard, lease: string, ttlMs: number, holder: string): HeldBoard {
  let markLost: (err: LeaseLostError) => void = () => undefined;
  const lost = new Promise<LeaseLostError>((resolve) => (markLost = resolve));
  let beating = true;
  let beat: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    beat = store.renew(lease, ttlMs).then(
      () => undefined,
      (err: unknown) => {
        // A database hiccup is retried at the next beat; only a lost lease ends the hold.
        if (err instanceof LeaseLostError && beating) {
          beating = false;
          clearInterval(timer);
          markLost(err);
        }
      },
    );
  }, Math.max(200, Math.floor(ttlMs / 3)));
  timer.unref();
  return {
    board,
    lease,
    lost,
    async markOffline(reason: string) {
      beating = false;
      clearInterval(timer);
      await beat;
      await store.markOffline(board.name, reason, holder, lease);
    },
    async release() {
      beating = false;
      clearInterval(timer);
      await beat;
      await store.release(lease);
    },
  };
}
