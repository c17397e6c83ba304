/**
 * Everything a process started, as a stack of stop steps: the one path a normal end, a failed
 * start and a signal all take. Steps are undone last-started first, each awaited before the
 * next, so nothing is stopped under a program that still uses it (the supervisor before its
 * D-Bus, a device's containers after the supervisor that would recreate them).
 */
import { FleetlabError, errorText } from './errors.js';

export interface StopStep {
  /** What the step stops, as a failure names it. */
  readonly name: string;
  /** Stops it and resolves once it is gone. */
  stop(): Promise<void>;
  /** Ends it at once (SIGKILL) for a forced stop; its `stop` still runs, and then finds it gone. */
  kill?(): void;
}

export class Teardown {
  readonly #steps: StopStep[] = [];
  #running: StopStep | undefined;
  #stopping: Promise<void> | undefined;
  #done = false;
  #forced = false;

  /** Adds what was just started; it is undone before everything added earlier. */
  defer(step: StopStep): void {
    // A step added after the stack was unwound would never be undone.
    if (this.#done) throw new FleetlabError('SUP_ERR_INTERNAL', `${step.name} was started after its owner had stopped`);
    this.#steps.push(step);
  }

  get stopping(): boolean {
    return this.#stopping !== undefined;
  }

  get forced(): boolean {
    return this.#forced;
  }

  /**
   * Undoes every step, last added first, awaiting each; a step that fails does not keep the
   * others from running, and the failures are thrown together at the end. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#unwind();
    return this.#stopping;
  }

  /**
   * Kills what is left at once (the step being stopped and every step after it); the unwind
   * carries on, so what can still be removed (containers, directories) is removed.
   */
  force(): void {
    this.#forced = true;
    for (const step of [this.#running, ...[...this.#steps].reverse()]) {
      try {
        step?.kill?.();
      } catch {
        // Already gone: nothing left to kill.
      }
    }
  }

  async #unwind(): Promise<void> {
    const failures: string[] = [];
    for (let step = this.#steps.pop(); step; step = this.#steps.pop()) {
      this.#running = step;
      try {
        await step.stop();
      } catch (err) {
        failures.push(`${step.name}: ${errorText(err)}`);
      }
    }
    this.#running = undefined;
    this.#done = true;
    if (failures.length > 0) throw new FleetlabError('SUP_ERR_INTERNAL', `stopping failed for ${failures.join('; ')}`);
  }
}
