/**
 * `led` on the device container: the GPIO sim's transition file (one JSON transition a line,
 * written inside the container), and the observer's own record of power losses beside it: the
 * observer sees the line drop when power goes, which the dead sim cannot write.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import type { LedProtocol, LedTransition } from '../../../device-access/protocols.js';

/** The LED transitions in these files (each line a JSON transition), oldest first. */
function readLed(...files: string[]): LedTransition[] {
  const out: LedTransition[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        const t = JSON.parse(line) as { value: number; at: number };
        out.push({ at: t.at, value: t.value ? 1 : 0 });
      } catch {
        // a line being appended right now
      }
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

export interface FileLed extends LedProtocol {
  /** The device lost power: a lit line goes dark now. */
  lostPower(): void;
}

export function ledFromFiles(o: { simFile: string; powerLossFile: string; line: string }): FileLed {
  const read = () => readLed(o.simFile, o.powerLossFile);
  return {
    line: o.line,
    level: async () => read().at(-1)?.value ?? 0,
    transitions: async (sinceMs = 0) => read().filter((t) => t.at >= sinceMs),
    lostPower: () => {
      if (read().at(-1)?.value === 1) appendFileSync(o.powerLossFile, `${JSON.stringify({ value: 0, at: Date.now() })}\n`);
    },
  };
}
