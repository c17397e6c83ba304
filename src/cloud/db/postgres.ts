/**
 * PostgreSQL adapter (pg pool). int8 and numeric come back as JS numbers (counts, image
 * sizes): values stay below 2^53 in this model.
 */
import pg from 'pg';
import { postgresDialect } from './dialect.js';
import type { Db, Row, SqlValue } from './port.js';
import { StatementNames } from './statement-names.js';

const numeric = (v: string) => Number(v);
const types = {
  getTypeParser(oid: number, format?: string) {
    if (oid === 20 || oid === 1700) return numeric;
    return (pg.types.getTypeParser as (o: number, f?: string) => unknown)(oid, format);
  },
};

/** Connections per process when not told: enough for two cores' worth of requests in flight, a tenth of PostgreSQL's default max_connections. */
export const DEFAULT_POOL_SIZE = 10;

/**
 * Planner settings of the cloud's sessions. The cloud's working set (devices, tags, keys) is
 * small and read all the time, so it is in memory, where a random page read costs about
 * what a sequential one does: PostgreSQL's documentation suggests 1.1 for that (and for
 * SSDs) against the default 4, which is tuned for spinning disks and makes the planner
 * scan a table rather than probe an index a few hundred times. `?options=` in the
 * connection string replaces this.
 */
export const SESSION_OPTIONS = '-c random_page_cost=1.1';

export function openPostgres(connectionString: string, opts: { max?: number } = {}): Db {
  const pool = new pg.Pool({ connectionString, max: opts.max ?? DEFAULT_POOL_SIZE, types: types as pg.CustomTypesConfig, options: SESSION_OPTIONS });
  // An idle client losing its connection must not crash the process.
  pool.on('error', () => undefined);
  const statements = new StatementNames();

  const run = async (client: pg.Pool | pg.PoolClient, sql: string, params: SqlValue[]): Promise<Row[]> => {
    const text = postgresDialect.placeholders(sql);
    const values = params.map((p) => postgresDialect.toDriver(p));
    return (await client.query({ name: statements.nameOf(text), text, values })).rows as Row[];
  };

  const withClient = (client: pg.PoolClient): Db => {
    const db: Db = {
      dialect: postgresDialect,
      query: async <R extends Row>(sql: string, params: SqlValue[]) => (await run(client, sql, params)) as R[],
      exec: async (sql) => void (await client.query(sql)),
      transaction: (fn) => fn(db),
      close: async () => undefined,
    };
    return db;
  };

  return {
    dialect: postgresDialect,
    query: async <R extends Row>(sql: string, params: SqlValue[]) => (await run(pool, sql, params)) as R[],
    exec: async (sql) => void (await pool.query(sql)),
    async transaction(fn) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await fn(withClient(client));
        await client.query('COMMIT');
        return result;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}
