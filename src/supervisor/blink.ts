/**
 * The identify blink (docs/decisions.md item 11): on 200 ms, off 200 ms for 15 s, then off. A blink
 * while blinking pushes the end of the window out; it never starts a second loop.
 *
 * Each edge is due on a grid counted from the blink's start, not 200 ms after the previous timer
 * fired: on a loaded board (an emulated Pi under TCG) every timer fires some ms late, and re-arming
 * from the late callback stretched each period by that much (32 pulses in 15 s where 37 are due).
 */
import { errorText } from '../errors.js';
import type { LedPort } from './adapters/ports.js';

export interface BlinkTimers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

/** Structurally a subset of pino's and fastify's logger. */
export interface BlinkLog {
  warn(obj: object, msg?: string): void;
}

export interface BlinkerOptions {
  led: LedPort;
  onMs?: number;
  offMs?: number;
  durationMs?: number;
  /** Injected by tests using fake timers; the globals are looked up at call time otherwise. */
  timers?: BlinkTimers;
  log?: BlinkLog;
}

const globalTimers: BlinkTimers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
  // Monotonic: a Pi has no RTC, and the clock timesyncd steps back or forward may come mid-blink.
  now: () => performance.now(),
};

const stderrLog: BlinkLog = {
  warn: (obj, msg) => console.warn(msg ?? 'blink', obj),
};

export class Blinker {
  readonly #led: LedPort;
  readonly #onMs: number;
  readonly #offMs: number;
  readonly #durationMs: number;
  readonly #timers: BlinkTimers;
  readonly #log: BlinkLog;
  #windowTimer: unknown;
  #phaseTimer: unknown;
  #blinking = false;
  // LED writes are chained so they land in the order they were decided, whatever their latency.
  #writes: Promise<void> = Promise.resolve();
  #failures = 0;
  #idleWaiters: (() => void)[] = [];

  constructor(options: BlinkerOptions) {
    this.#led = options.led;
    this.#onMs = options.onMs ?? 200;
    this.#offMs = options.offMs ?? 200;
    this.#durationMs = options.durationMs ?? 15_000;
    // Phases of no length would never let the grid advance past now.
    if (!(this.#onMs > 0 && this.#offMs > 0)) throw new RangeError(`blink phases must last some time (on ${this.#onMs} ms, off ${this.#offMs} ms)`);
    this.#timers = options.timers ?? globalTimers;
    this.#log = options.log ?? stderrLog;
  }

  get isBlinking(): boolean {
    return this.#blinking;
  }

  /** Starts blinking, or restarts the window of the blink in progress. Never throws. */
  blink(): void {
    if (this.#windowTimer !== undefined) this.#timers.clearTimeout(this.#windowTimer);
    this.#windowTimer = this.#timers.setTimeout(() => this.#finish(), this.#durationMs);
    if (this.#blinking) return;
    this.#blinking = true;
    this.#failures = 0;
    this.#phase(true, this.#timers.now());
  }

  /** Ends the blink now and turns the LED off; a no-op when not blinking. */
  stop(): void {
    if (this.#blinking) this.#finish();
  }

  /** Resolves once no blink is running and every LED write decided so far has completed. */
  async whenIdle(): Promise<void> {
    if (this.#blinking) await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    let seen: Promise<void>;
    do {
      seen = this.#writes;
      await seen;
    } while (seen !== this.#writes);
  }

  /** Starts the phase due at `startsAt`; a phase that ended while its timer was late is skipped. */
  #phase(on: boolean, startsAt: number): void {
    const now = this.#timers.now();
    let endsAt = startsAt + this.#length(on);
    while (endsAt <= now) {
      on = !on;
      endsAt += this.#length(on);
    }
    this.#write(on);
    this.#phaseTimer = this.#timers.setTimeout(() => this.#phase(!on, endsAt), endsAt - now);
  }

  #length(on: boolean): number {
    return on ? this.#onMs : this.#offMs;
  }

  #finish(): void {
    this.#timers.clearTimeout(this.#phaseTimer);
    this.#timers.clearTimeout(this.#windowTimer);
    this.#phaseTimer = undefined;
    this.#windowTimer = undefined;
    this.#blinking = false;
    this.#write(false);
    this.#writes = this.#writes.then(() => {
      if (this.#failures > 1) this.#log.warn({ failures: this.#failures }, 'LED writes failed during the blink');
    });
    for (const resolve of this.#idleWaiters.splice(0)) resolve();
  }

  #write(on: boolean): void {
    this.#writes = this.#writes
      .then(() => this.#led.set(on))
      .catch((err: unknown) => {
        // One warning per blink: a missing LED would otherwise log every 200 ms.
        if (this.#failures++ === 0) this.#log.warn({ err }, `LED write failed: ${errorText(err)}`);
      });
  }
}
