/**
 * The harness's waits for state a spec waits on over the wire, on src/wait.ts's until: every
 * wait has a deadline, scaled to the target, and reports the last value it saw, so a timeout
 * says where the device got stuck.
 */
import { until } from '../../src/wait.js';

export { sleep } from '../../src/wait.js';

/** The variable the device fixture sets from the target's `facts.timeScale`. */
export const TIME_SCALE_VARIABLE = 'FLEETLAB_HIL_TIME_SCALE';

/**
 * A spec's wait, stretched by how much slower the target is than the simulator (an emulated
 * board under TCG starts a container in a minute, not a second). Only deadlines scale: what
 * a spec measures about the device (the LED's period, a 15 s blink) never does.
 */
export function scaled(ms: number): number {
  const factor = Number(process.env[TIME_SCALE_VARIABLE] ?? 1);
  return Number.isFinite(factor) && factor > 0 ? Math.round(ms * factor) : ms;
}

/**
 * Polls `read` until `done`; `timeoutMs` (default 60 s) is scaled to the target. A read that
 * throws is retried (the device may be rebooting). The timeout is a FleetlabError
 * `SUP_ERR_TIMEOUT`: `<what>: not reached within <ms> ms; last seen <value>`.
 */
export function pollUntil<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  return until(what, read, done, { timeoutMs: scaled(options.timeoutMs ?? 60_000), intervalMs: options.intervalMs ?? 200 });
}
