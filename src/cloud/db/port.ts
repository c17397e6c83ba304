/**
 * The database port of the cloud: parameterised SQL with `?` placeholders, run on SQLite
 * (better-sqlite3) or PostgreSQL (pg). Everything that differs between the two lives in
 * the Dialect; the planner and executor only ever see this interface.
 */
import type { Dialect } from './dialect.js';
import type { SqlValue } from './values.js';

export type { ConstraintViolation, SqlValue } from './values.js';
export type Row = Record<string, unknown>;

export interface Db {
  readonly dialect: Dialect;
  query<R extends Row = Row>(sql: string, params: SqlValue[]): Promise<R[]>;
  /** DDL or other statements without parameters or rows. */
  exec(sql: string): Promise<void>;
  /** Runs fn in one transaction; a throw rolls it back. Nested calls join the outer one. */
  transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}
