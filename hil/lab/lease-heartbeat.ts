/**
 * A held lease's heartbeat: renewed at a third of its time to live, so two missed beats still
 * keep it. A database hiccup is retried at the next beat; only a lost lease (expired, or
 * forced away) ends it, and `lost` says so. After `stop()`, nothing is reported.
 */
import { LeaseLostError, type LeaseStore } from './lease-store.js';

export interface Heartbeat {
  /** Resolves if the lease is lost while beating. */
  readonly lost: Promise<LeaseLostError>;
  /** Stops beating, after the beat under way. */
  stop(): Promise<void>;
}

export function heartbeat(store: LeaseStore, lease: string, ttlMs: number): Heartbeat {
  let markLost: (err: LeaseLostError) => void = () => undefined;
  const lost = new Promise<LeaseLostError>((resolve) => (markLost = resolve));
  let beating = true;
  let beat: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    beat = store.renew(lease, ttlMs).then(
      () => undefined,
      (err: unknown) => {
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
    lost,
    async stop() {
      beating = false;
      clearInterval(timer);
      await beat;
    },
  };
}
