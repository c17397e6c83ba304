/**
 * A database by its URL: `sqlite:FILE` or `postgres://...`, as `fleetlab cloud --database`
 * and a lab file's lease store name one.
 */
import type { Db } from './port.js';
import { openPostgres } from './postgres.js';
import { openSqlite } from './sqlite.js';

/** What is wrong with a database URL, or null; the CLI asks before it starts anything. */
export function databaseUrlProblem(database: string): string | null {
  return database.startsWith('sqlite:') || /^postgres(ql)?:\/\//.test(database) ? null : `--database must be postgres://... or sqlite:FILE, got ${database}`;
}

/** `pool`: PostgreSQL connections of this process (default: DEFAULT_POOL_SIZE). */
export function openDatabase(database: string, pool?: number): Db {
  const problem = databaseUrlProblem(database);
  if (problem) throw new Error(problem);
  return database.startsWith('sqlite:') ? openSqlite(database.slice('sqlite:'.length)) : openPostgres(database, { max: pool });
}
