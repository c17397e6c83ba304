/**
 * SQLite adapter (better-sqlite3): one connection, WAL, foreign keys on. better-sqlite3 is
 * synchronous, but a transaction spans awaits (permission checks between writes), so every
 * use of the connection goes through one queue: a request never runs inside another
 * request's open transaction.
 */
import Database from 'better-sqlite3';
import { sqliteDialect } from './dialect.js';
import type { Db, Row, SqlValue } from './port.js';

export function openSqlite(file: string): Db {
  const conn = new Database(file);
  conn.pragma('journal_mode = WAL');
  conn.pragma('foreign_keys = ON');
  conn.pragma('busy_timeout = 5000');
  let queue: Promise<unknown> = Promise.resolve();

  const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = queue.then(fn, fn);
    queue = run.catch(() => undefined);
    return run;
  };

  // Statements differ by shape, not by value (values are parameters), so a small cache of
  // prepared statements serves almost every request.
  const statements = new Map<string, Database.Statement>();
  const prepare = (sql: string): Database.Statement => {
    let stmt = statements.get(sql);
    if (!stmt) {
      stmt = conn.prepare(sql);
      if (statements.size >= 500) statements.delete(statements.keys().next().value!);
      statements.set(sql, stmt);
    }
    return stmt;
  };

  const raw = (sql: string, params: SqlValue[]): Row[] => {
    const stmt = prepare(sql);
    const values = params.map((p) => sqliteDialect.toDriver(p));
    return stmt.reader ? (stmt.all(...values) as Row[]) : (stmt.run(...values), []);
  };

  const inTx: Db = {
    dialect: sqliteDialect,
    query: async <R extends Row>(sql: string, params: SqlValue[]) => raw(sql, params) as R[],
    exec: async (sql) => void conn.exec(sql),
    transaction: (fn) => fn(inTx),
    close: async () => undefined,
  };

  return {
    dialect: sqliteDialect,
    query: <R extends Row>(sql: string, params: SqlValue[]) => exclusive(async () => raw(sql, params) as R[]),
    exec: (sql) => exclusive(async () => void conn.exec(sql)),
    transaction: (fn) =>
      exclusive(async () => {
        conn.exec('BEGIN IMMEDIATE');
        try {
          const result = await fn(inTx);
          conn.exec('COMMIT');
          return result;
        } catch (err) {
          conn.exec('ROLLBACK');
          throw err;
        }
      }),
    close: () => exclusive(async () => void conn.close()),
  };
}
