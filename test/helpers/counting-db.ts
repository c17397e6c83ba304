/**
 * A database port that records every call it forwards: how a test tells how many round
 * trips a piece of code makes (on PostgreSQL each query is one, a transaction two more).
 */
import type { Db, Row, SqlValue } from '../../src/cloud/db/port.js';

export type DbCall = { kind: 'query'; sql: string } | { kind: 'exec'; sql: string } | { kind: 'transaction' };

export function countingDb(inner: Db): { db: Db; calls: DbCall[] } {
  const calls: DbCall[] = [];
  const wrap = (db: Db): Db => ({
    dialect: db.dialect,
    query: <R extends Row>(sql: string, params: SqlValue[]) => (calls.push({ kind: 'query', sql }), db.query<R>(sql, params)),
    exec: (sql) => (calls.push({ kind: 'exec', sql }), db.exec(sql)),
    transaction: (fn) => (calls.push({ kind: 'transaction' }), db.transaction((tx) => fn(wrap(tx)))),
    close: () => db.close(),
  });
  return { db: wrap(inner), calls };
}
