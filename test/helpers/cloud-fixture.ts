/**
 * A cloud over a real database for tests: SQLite in a temp directory, or a database in a
 * throwaway PostgreSQL cluster. `inject` requests go through the whole fastify app.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { prepareDatabase } from '../../src/cloud/bootstrap.js';
import type { Db } from '../../src/cloud/db/port.js';
import { openPostgres } from '../../src/cloud/db/postgres.js';
import { openSqlite } from '../../src/cloud/db/sqlite.js';
import { buildCloud, type CloudDeps } from '../../src/cloud/server.js';
import { startPostgres, type PostgresCluster } from '../../support/postgres.js';

export type DbKind = 'sqlite' | 'postgres';

export interface CloudFixture {
  app: FastifyInstance;
  db: Db;
  adminKey: string;
  close(): Promise<void>;
}

/** One PostgreSQL cluster per test file, shared by its fixtures. */
export function databases() {
  let cluster: PostgresCluster | null = null;
  let n = 0;
  const cleanups: (() => Promise<void>)[] = [];
  return {
    /** `pool`: PostgreSQL connections (1 pins every query to one session). */
    async open(kind: DbKind, opts: { pool?: number } = {}): Promise<Db> {
      if (kind === 'sqlite') {
        const dir = await mkdtemp(join(tmpdir(), 'fleetlab-cloud-'));
        const db = openSqlite(join(dir, 'cloud.db'));
        cleanups.push(async () => {
          await db.close();
          await rm(dir, { recursive: true, force: true });
        });
        return db;
      }
      cluster ??= await startPostgres();
      const db = openPostgres(await cluster.createDatabase(`t${process.pid}_${n++}`), { max: opts.pool ?? 4 });
      cleanups.push(() => db.close());
      return db;
    },
    async closeAll() {
      for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
      await cluster?.stop();
      cluster = null;
    },
  };
}

export async function cloudOn(db: Db, deps: Omit<CloudDeps, 'db'> = {}): Promise<CloudFixture> {
  const admin = await prepareDatabase(db);
  const app = buildCloud({ db, ...deps });
  await app.ready();
  return { app, db, adminKey: admin.key!, close: () => app.close() };
}
