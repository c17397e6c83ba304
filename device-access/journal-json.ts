/**
 * `journalctl -o json` output as the journal protocol's entries. journalctl exits 1 on an
 * empty journal, which is "no entries", not a failure: callers pass its exit code here.
 */
import type { JournalEntryText } from './protocols.js';

export function journalEntries(stdout: string, exitCode: number): JournalEntryText[] {
  if (exitCode !== 0 && stdout.trim() === '') return [];
  return stdout
    .split('\n')
    .filter(Boolean)
    .map((line): JournalEntryText => {
      const e = JSON.parse(line) as Record<string, unknown>;
      // journald gives non-UTF-8 or binary messages as byte arrays.
      const message = Array.isArray(e.MESSAGE) ? Buffer.from(e.MESSAGE as number[]).toString() : String(e.MESSAGE ?? '');
      const unit = typeof e._SYSTEMD_UNIT === 'string' ? e._SYSTEMD_UNIT : undefined;
      return { ...(unit ? { unit } : {}), message, realtimeUs: Number(e.__REALTIME_TIMESTAMP) };
    });
}
