/**
 * A test's device timeline as data: lanes on one time axis (ms from the test's start), the
 * failure moment, and what could not be recorded. The recorder fills it, the renderer draws it,
 * `fleetlab bundle show --html` builds one from a bundle. JSON all the way, so a page and a
 * test read the same thing.
 */

/** A level line (the LED): `[at, value]` from each change on; the level holds until the next. */
export interface LevelLane {
  readonly kind: 'level';
  readonly id: string;
  readonly name: string;
  readonly points: ReadonlyArray<readonly [number, number]>;
  /** Oldest points left out to keep the recording bounded. */
  readonly dropped: number;
}

/** A stretch of time with a name: a power cut, a harness step, a container running, a state. */
export interface Span {
  readonly from: number;
  /** Undefined while still open when the test ended: drawn to the end. */
  readonly to?: number;
  readonly label: string;
  /** Shown on hover. */
  readonly detail?: string;
  /** Lanes with several rows (one per container) name the row. */
  readonly row?: string;
  readonly tone?: Tone;
}

/** A moment with text: a journal line, a serial line, a container event. */
export interface Mark {
  readonly at: number;
  readonly text: string;
  readonly row?: string;
  readonly tone?: Tone;
}

export type Tone = 'ok' | 'warn' | 'bad' | 'info';

export interface EventLane {
  readonly kind: 'events';
  readonly id: string;
  readonly name: string;
  readonly spans: readonly Span[];
  readonly marks: readonly Mark[];
  readonly dropped: number;
}

/** Sampled numbers (the supervisor's CPU and RSS). */
export interface SeriesLane {
  readonly kind: 'series';
  readonly id: string;
  readonly name: string;
  readonly unit: string;
  readonly points: ReadonlyArray<readonly [number, number]>;
  readonly dropped: number;
}

/**
 * A lane this target could not record, drawn with the reason: an empty lane would read as a
 * device that did nothing.
 */
export interface AbsentLane {
  readonly kind: 'absent';
  readonly id: string;
  readonly name: string;
  readonly why: string;
  readonly dropped: 0;
}

export type Lane = LevelLane | EventLane | SeriesLane | AbsentLane;

/** Every lane a recording can have, top to bottom, with its name on the page. */
export const LANES = {
  led: 'LED',
  power: 'power',
  network: 'network',
  containers: 'containers',
  supervisor: 'supervisor state',
  steps: 'harness steps',
  journal: 'journal',
  serial: 'serial console',
  cpu: 'supervisor CPU',
  rss: 'supervisor RSS',
} as const;

export type LaneId = keyof typeof LANES;

export interface Timeline {
  readonly version: 1;
  readonly title: string;
  /** Where the device was: the target, or the bundle's source. */
  readonly subject: string;
  /** Epoch ms of `0` on the axis. */
  readonly origin: number;
  /** The axis's end, ms from `origin`. */
  readonly end: number;
  readonly failure?: { readonly at: number; readonly error: string };
  readonly lanes: readonly Lane[];
  /** What is missing and why (a lane a target cannot record, a source that failed). */
  readonly notes: readonly string[];
}

/**
 * Caps on what one test keeps, oldest dropped first (the end of a test is what a failure
 * explains). At these caps a page stays under the size test/timeline-render.test.ts states.
 */
export const LIMITS = {
  /** LED changes: 10 minutes of the 200 ms blink is 3 000. */
  levelPoints: 6_000,
  steps: 1_500,
  /** Journal and serial lines, each. */
  lines: 1_500,
  /** Characters kept of one line's text. */
  textChars: 240,
  containerEvents: 1_000,
  stateChanges: 500,
  /** One a second: an hour. */
  samples: 3_600,
} as const;

/** A bounded list that forgets its oldest entries and counts them. */
export class Ring<T> {
  readonly #items: T[] = [];
  #start = 0;
  #dropped = 0;

  constructor(readonly capacity: number) {}

  push(item: T): void {
    if (this.size === this.capacity) {
      this.#start++;
      this.#dropped++;
      // Compact now and then rather than shifting on every push.
      if (this.#start >= this.capacity) this.#items.splice(0, this.#start), (this.#start = 0);
    }
    this.#items.push(item);
  }

  get size(): number {
    return this.#items.length - this.#start;
  }

  get dropped(): number {
    return this.#dropped;
  }

  toArray(): T[] {
    return this.#items.slice(this.#start);
  }
}

/** A list of at most `capacity` newest items, with how many older ones were left out. */
export function keepNewest<T>(items: readonly T[], capacity: number): { items: T[]; dropped: number } {
  const dropped = Math.max(0, items.length - capacity);
  return { items: items.slice(dropped), dropped };
}

export function clip(text: string, chars: number = LIMITS.textChars): string {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}
