/**
 * Retry delays for everything the supervisor does against the cloud. Full jitter: after a
 * cloud outage a whole fleet retries at once, and a uniformly random delay in [0, cap]
 * spreads those retries instead of letting them arrive in waves.
 */
export interface BackoffPolicy {
  /** Cap of the first retry's delay. */
  readonly baseMs: number;
  /** No delay exceeds this. */
  readonly maxMs: number;
}

export const defaultBackoff: BackoffPolicy = { baseMs: 500, maxMs: 60_000 };

/** Delay before retry number `attempt` (1 = first retry). */
export function backoffDelay(attempt: number, policy: BackoffPolicy, random: () => number = Math.random): number {
  const cap = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 30));
  return Math.floor(random() * cap);
}
