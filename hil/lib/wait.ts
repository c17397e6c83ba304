/**
 * Bounded polling for state a spec waits on over the wire. Every loop has a deadline and
 * reports the last value it saw, so a timeout says where the device got stuck.
 */

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

/** Polls `read` until `done`; `timeoutMs` (default 60 s) is scaled to the target. */
export async function pollUntil<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const timeoutMs = scaled(options.timeoutMs ?? 60_000);
  const deadline = Date.now() + timeoutMs;
  let last: unknown = '(nothing read)';
  while (Date.now() < deadline) {
    try {
      const value = await read();
      if (done(value)) return value;
      last = value;
    } catch (err) {
      // The device may be rebooting; keep polling until the deadline.
      last = err instanceof Error ? `error: ${err.message}` : err;
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 200));
  }
  throw new Error(`${what}: not reached within ${timeoutMs} ms; last seen ${JSON.stringify(last)?.slice(0, 1000)}`);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
