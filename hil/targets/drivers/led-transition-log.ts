/** What an LED observer records, and how it reads a stream of levels. */
import type { LedProtocol, LedTransition } from '../../../device-access/protocols.js';

/** An LED protocol the target started and stops with the device. */
export interface LedObserver extends LedProtocol {
  stop(): Promise<void>;
}

/** Transitions as an observer records them: a sample equal to the last level is not one. */
export class TransitionLog {
  readonly #entries: LedTransition[] = [];

  record(value: 0 | 1, at = Date.now()): void {
    if (this.#entries.at(-1)?.value === value) return;
    this.#entries.push({ at, value });
  }

  get last(): 0 | 1 | undefined {
    return this.#entries.at(-1)?.value;
  }

  since(sinceMs: number): LedTransition[] {
    return this.#entries.filter((t) => t.at >= sinceMs);
  }
}

/** Feeds complete `0`/`1` lines of a byte stream to `onValue`; anything else is ignored. */
export function lineSplitter(onValue: (v: 0 | 1) => void): (chunk: Buffer) => void {
  let pending = '';
  return (chunk) => {
    pending += chunk.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const v = line.trim();
      if (v === '0' || v === '1') onValue(v === '1' ? 1 : 0);
    }
  };
}
