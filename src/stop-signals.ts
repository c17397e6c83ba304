import { constants } from 'node:os';

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];

export interface StopSignalOptions {
  /**
   * A second signal while `stop` runs (a second Ctrl-C): end what is left at once. Default:
   * exit now, for a process with nothing of its own to kill.
   */
  force?: () => void;
  /** The first signal arrived (to say that a second one forces). */
  onSignal?: (signal: StopSignal) => void;
}

const exitCodeOf = (signal: StopSignal) => 128 + constants.signals[signal];

/**
 * One Ctrl-C may arrive twice: the terminal signals the whole foreground group, and a wrapper
 * in it that passes signals on (npm does, to its child) sends its own copy. A repeat this soon
 * is that copy, not a second press (a person pressing again to force reads the "stopping"
 * line first).
 */
const SAME_PRESS_MS = 500;

/**
 * Runs `stop` once, on the first SIGINT, SIGTERM or SIGHUP (or `trigger()`); `done` settles
 * with it. A second signal forces (`options.force`), a third exits at once; a signal that
 * repeats the one before within SAME_PRESS_MS counts as that one. The listeners stay
 * until `stop` has settled: without one, Node's default action, or signal-exit (which execa
 * loads, and which re-raises a signal it finds no other listener for), would end the process
 * with its children still running.
 */
export function untilStopped(stop: () => Promise<void>, options: StopSignalOptions = {}): { done: Promise<void>; trigger: () => void } {
  let signals = 0;
  let last: { signal: StopSignal; at: number } | undefined;
  let stopping: Promise<void> | undefined;
  let finish: (result: Promise<void>) => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const trigger = () => {
    stopping ??= (async () => stop())();
    finish(
      stopping.finally(() => {
        for (const s of STOP_SIGNALS) process.off(s, onSignal);
      }),
    );
  };
  const onSignal = (signal: StopSignal) => {
    if (last && signal === last.signal && Date.now() - last.at < SAME_PRESS_MS) return;
    last = { signal, at: Date.now() };
    signals += 1;
    if (signals === 1) {
      options.onSignal?.(signal);
      trigger();
    } else if (signals === 2 && options.force) {
      process.exitCode = exitCodeOf(signal);
      options.force();
    } else {
      process.exit(exitCodeOf(signal));
    }
  };
  for (const s of STOP_SIGNALS) process.on(s, onSignal);
  return { done, trigger };
}
