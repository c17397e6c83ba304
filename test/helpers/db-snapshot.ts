/**
 * Every row of every cloud table, as one comparable value: what a refused request must leave
 * exactly as it found it (the fuzz and scope tests compare one before and after).
 */
import type { Db } from '../../src/cloud/db/port.js';
import { buildModel } from '../../src/cloud/model/resources.js';

/** The model's tables, and the actors that tie keys to users, fleets and devices. */
export function cloudTables(): string[] {
  return [...new Set(['actor', ...[...buildModel().resources.values()].map((r) => r.table)])].sort();
}

export type Snapshot = Record<string, unknown[]>;

export async function snapshot(db: Db, tables: string[] = cloudTables()): Promise<Snapshot> {
  const out: Snapshot = {};
  // Through JSON, so driver types (Date, bigint strings) compare as what they print.
  for (const t of tables) out[t] = JSON.parse(JSON.stringify(await db.query(`SELECT * FROM "${t}" ORDER BY id`, [])));
  return out;
}

/** Tables whose rows differ between two snapshots, with a row count each. */
export function changedTables(before: Snapshot, after: Snapshot): string[] {
  return Object.keys({ ...before, ...after })
    .filter((t) => JSON.stringify(before[t]) !== JSON.stringify(after[t]))
    .map((t) => `${t} (${before[t]?.length ?? 0} -> ${after[t]?.length ?? 0} rows)`);
}
