/**
 * A wall clock set off from this host's, for a simulated device whose clock is to be wrong by
 * a known amount (a replayed device whose captured clock was off): loaded with `--import`
 * into the supervisor's process, it makes `Date` read FLEETLAB_CLOCK_OFFSET_MS later (earlier
 * when negative). Timers and the monotonic clock are left alone, as a wrong wall clock on a
 * board leaves them. A preload patches the process's global by nature; nothing else here does.
 */
import { CLOCK_OFFSET_VARIABLE } from './offset.js';

const offset = Number(process.env[CLOCK_OFFSET_VARIABLE] ?? 0);
if (Number.isFinite(offset) && offset !== 0) {
  const RealDate = Date;
  class ShiftedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + offset);
      else super(...(args as [string | number | Date]));
    }

    static override now(): number {
      return RealDate.now() + offset;
    }
  }
  globalThis.Date = ShiftedDate as DateConstructor;
}
