/**
 * Each target's deadlines in one table. A board's are stated at timeScale 1 and stretched by
 * its config's timeScale (a Pi 4 from power-on to the API is 30-60 s, an SD card in a slow lab
 * takes longer, the emulated Pi 4-5 min); the other targets' are measured on what they run
 * (QEMU under TCG on a 2-core machine) and never stretched, so their timeScale only reaches the
 * specs' own deadlines (hil/lib/wait.ts `scaled`).
 */

type Deadlines = Record<string, number>;

export interface TimeoutTable<Stretched extends Deadlines, Fixed extends Deadlines> {
  /** Milliseconds at timeScale 1: multiplied by the device's timeScale. */
  readonly stretched: Stretched;
  /** Milliseconds whatever the device's speed: a lab command. */
  readonly fixed: Fixed;
}

export const BOARD_TIMEOUTS = {
  stretched: {
    ready: 180_000,
    reach: 60_000,
    /** After login1 Reboot or a cut, how long the API may keep answering before that is an error. */
    down: 60_000,
    /** Stopping the supervisor and removing its containers. */
    reset: 60_000,
  },
  fixed: {
    labCommand: 120_000,
  },
} satisfies TimeoutTable<Deadlines, Deadlines>;

export const QEMU_TIMEOUTS = {
  stretched: {},
  fixed: {
    /** Boot to API under TCG: 4-5 min for raspi3b on a 2-core machine, longer when it is shared. */
    boot: 900_000,
    ready: 300_000,
    down: 60_000,
    reset: 120_000,
  },
} satisfies TimeoutTable<Deadlines, Deadlines>;

export const CONTAINER_TIMEOUTS = {
  stretched: {},
  fixed: {
    ready: 90_000,
    /** The supervisor process leaves the API in the same container: quicker than a board. */
    down: 30_000,
    stopGrace: 20_000,
  },
} satisfies TimeoutTable<Deadlines, Deadlines>;

export const SIM_TIMEOUTS = {
  stretched: {},
  fixed: { ready: 60_000 },
} satisfies TimeoutTable<Deadlines, Deadlines>;

/** The table's deadlines for a device `timeScale` times slower than timeScale 1. */
export function deadlines<S extends Deadlines, F extends Deadlines>(table: TimeoutTable<S, F>, timeScale = 1): Readonly<S & F> {
  const stretched = Object.fromEntries(Object.entries(table.stretched).map(([k, ms]) => [k, ms * timeScale])) as S;
  return { ...table.fixed, ...stretched };
}
