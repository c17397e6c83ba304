/**
 * SQLite adapter: one connection, WAL, foreign keys on. The driver is Node's own `node:sqlite`
 * where the running Node has it (22.13 and later, 24), else better-sqlite3 (Node 20). On
 * Node 24.19 and later better-sqlite3 12 aborts the process when a garbage collection with no
 * JavaScript context finalizes a statement (its ObjectWrap cleanup hook), and 13, which
 * fixes that, no longer runs on Node 20; `node:sqlite` has neither problem and needs no
 * native build. Both drivers are synchronous, but a transaction spans awaits (permission
 * checks between writes), so every use of the connection goes through one queue: a request
 * never runs inside another request's open transaction.
 */
import { createRequire } from 'node:module';
import { sqliteDialect } from './dialect.js';
import type { Db, Row, SqlValue } from './port.js';

interface Statement {
  /** Whether it returns rows (a SELECT, or anything with RETURNING). */
  readonly reads: boolean;
  all(values: unknown[]): Row[];
  run(values: unknown[]): void;
}

interface Driver {
  readonly name: 'node:sqlite' | 'better-sqlite3';
  exec(sql: string): void;
  prepare(sql: string): Statement;
  close(): void;
}

/** The subset of `node:sqlite` used here (this project's Node types predate the module). */
interface NodeSqlite {
  DatabaseSync: new (path: string) => {
    exec(sql: string): void;
    prepare(sql: string): { all(...v: unknown[]): Array<Record<string, unknown>>; run(...v: unknown[]): unknown; columns(): unknown[] };
    close(): void;
  };
}

/** SQLite's extended result codes that the dialect tells apart, by number (node:sqlite reports the number). */
const RESULT_CODES: Record<number, string> = {
  18: 'SQLITE_TOOBIG',
  20: 'SQLITE_MISMATCH',
  25: 'SQLITE_RANGE',
  275: 'SQLITE_CONSTRAINT_CHECK',
  787: 'SQLITE_CONSTRAINT_FOREIGNKEY',
  1299: 'SQLITE_CONSTRAINT_NOTNULL',
  1555: 'SQLITE_CONSTRAINT_PRIMARYKEY',
  1811: 'SQLITE_CONSTRAINT_TRIGGER',
  2067: 'SQLITE_CONSTRAINT_UNIQUE',
};

/** node:sqlite's error, with the code better-sqlite3 would give it, which the dialect reads. */
function withSqliteCode(err: unknown): unknown {
  const e = err as { errcode?: number; message?: string };
  if (typeof e?.errcode !== 'number') return err;
  return Object.assign(new Error(e.message, { cause: err }), { code: RESULT_CODES[e.errcode] ?? (e.errcode % 256 === 19 ? 'SQLITE_CONSTRAINT' : 'SQLITE_ERROR') });
}

function builtinSqlite(): NodeSqlite | undefined {
  try {
    return process.getBuiltinModule?.('node:sqlite') as NodeSqlite | undefined;
  } catch {
    return undefined; // a Node that knows the name but keeps it behind a flag
  }
}

function nodeSqliteDriver(mod: NodeSqlite, file: string): Driver {
  const conn = new mod.DatabaseSync(file);
  const guard = <T>(fn: () => T): T => {
    try {
      return fn();
    } catch (err) {
      throw withSqliteCode(err);
    }
  };
  return {
    name: 'node:sqlite',
    exec: (sql) => guard(() => conn.exec(sql)),
    prepare: (sql) => {
      const stmt = guard(() => conn.prepare(sql));
      return {
        reads: stmt.columns().length > 0,
        // Rows come with a null prototype; callers compare and serialise plain objects.
        all: (values) => guard(() => stmt.all(...values).map((row) => ({ ...row }))),
        run: (values) => void guard(() => stmt.run(...values)),
      };
    },
    close: () => conn.close(),
  };
}

function betterSqliteDriver(file: string): Driver {
  type Database = import('better-sqlite3').Database;
  const BetterSqlite = createRequire(import.meta.url)('better-sqlite3') as new (path: string) => Database;
  const conn = new BetterSqlite(file);
  return {
    name: 'better-sqlite3',
    exec: (sql) => void conn.exec(sql),
    prepare: (sql) => {
      const stmt = conn.prepare(sql);
      return { reads: stmt.reader, all: (values) => stmt.all(...values) as Row[], run: (values) => void stmt.run(...values) };
    },
    close: () => conn.close(),
  };
}

/** Which driver `openSqlite` uses on this Node. */
export function sqliteDriverName(): Driver['name'] {
  return builtinSqlite() ? 'node:sqlite' : 'better-sqlite3';
}

export function openSqlite(file: string, options: { driver?: Driver['name'] } = {}): Db {
  const builtin = builtinSqlite();
  const wanted = options.driver ?? (builtin ? 'node:sqlite' : 'better-sqlite3');
  if (wanted === 'node:sqlite' && !builtin) throw new Error(`node:sqlite is not available on Node ${process.version}`);
  const conn = wanted === 'node:sqlite' ? nodeSqliteDriver(builtin!, file) : betterSqliteDriver(file);
  conn.exec('PRAGMA journal_mode = WAL');
  conn.exec('PRAGMA foreign_keys = ON');
  conn.exec('PRAGMA busy_timeout = 5000');
  let queue: Promise<unknown> = Promise.resolve();

  const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = queue.then(fn, fn);
    queue = run.catch(() => undefined);
    return run;
  };

  // Statements differ by shape, not by value (values are parameters), so a small cache of
  // prepared statements serves almost every request.
  const statements = new Map<string, Statement>();
  const prepare = (sql: string): Statement => {
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
    if (stmt.reads) return stmt.all(values);
    stmt.run(values);
    return [];
  };

  const inTx: Db = {
    dialect: sqliteDialect,
    query: async <R extends Row>(sql: string, params: SqlValue[]) => raw(sql, params) as R[],
    exec: async (sql) => conn.exec(sql),
    transaction: (fn) => fn(inTx),
    close: async () => undefined,
  };

  return {
    dialect: sqliteDialect,
    query: <R extends Row>(sql: string, params: SqlValue[]) => exclusive(async () => raw(sql, params) as R[]),
    exec: (sql) => exclusive(async () => conn.exec(sql)),
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
    close: () => exclusive(async () => conn.close()),
  };
}
