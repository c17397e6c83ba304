/**
 * HOST_CONFIG_<name> values of the target state, written as `<name>=<value>` lines into the
 * board's config.txt (docs/decisions.md item 15). Only a marked block is ours; lines the OS image
 * or a person wrote elsewhere in the file are kept as they are.
 */
import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../../atomic-file.js';

const BEGIN = '# --- fleetlab: HOST_CONFIG_* values, managed by the supervisor ---';
const END = '# --- end of fleetlab values ---';

export function renderBootConfig(existing: string, values: Record<string, string>): string {
  const lines = existing.split('\n');
  const start = lines.indexOf(BEGIN);
  const stop = lines.indexOf(END, start);
  const outside = start >= 0 && stop > start ? [...lines.slice(0, start), ...lines.slice(stop + 1)] : lines;
  while (outside.length && outside[outside.length - 1] === '') outside.pop();
  const entries = Object.entries(values).sort(([a], [b]) => a.localeCompare(b));
  const block = entries.length ? [BEGIN, ...entries.map(([k, v]) => `${k}=${v}`), END] : [];
  return [...outside, ...block].join('\n') + '\n';
}

export class BootConfig {
  constructor(private readonly path: string) {}

  /** Writes the values; true when config.txt changed (the board then needs a reboot). */
  async apply(values: Record<string, string>): Promise<boolean> {
    let existing = '';
    try {
      existing = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const next = renderBootConfig(existing, values);
    if (next === existing || (existing === '' && Object.keys(values).length === 0)) return false;
    await writeFileAtomic(this.path, next);
    return true;
  }
}
