/** Flag values more than one command group checks the same way. */
import { UsageError } from '../src/command/usage-hint.js';

/** A port flag: 0 (pick a free one) to 65535. */
export function parsePort(flag: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be 0..65535, got ${raw}`);
  return n;
}
