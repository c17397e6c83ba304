/** The variable that tells shifted-clock.ts how far off the wall clock is (ms). Kept apart, so reading it loads no clock. */
export const CLOCK_OFFSET_VARIABLE = 'FLEETLAB_CLOCK_OFFSET_MS';
