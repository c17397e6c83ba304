/**
 * Brings a database to a usable cloud: migrations, seeded device types, and the admin
 * user. The admin's key is stored hashed, so it can be printed only when it is created;
 * main keeps a copy in a 0600 file in the data directory (see docs/cloud-model.md).
 */
import { createUser } from './api/key-routes.js';
import { hashKey } from './auth/keys.js';
import type { Db } from './db/port.js';
import { migrate } from './model/migrations.js';
import { seedDeviceTypes } from './model/seed.js';

export interface AdminInfo {
  /** The admin key, when this call created it or was given it; null if it existed already. */
  key: string | null;
  created: boolean;
}

export async function prepareDatabase(db: Db, opts: { adminKey?: string; now?: Date } = {}): Promise<AdminInfo> {
  // Replicas started together on one PostgreSQL database take turns: one migrates and
  // creates the admin, the others then find both done. (SQLite serialises writers itself.)
  return db.transaction(async (tx) => {
    if (tx.dialect.name === 'postgres') await tx.query('SELECT pg_advisory_xact_lock(?)', [BOOTSTRAP_LOCK]);
    return prepare(tx, opts);
  });
}

/** Arbitrary, fixed: the advisory lock key of the bootstrap. */
const BOOTSTRAP_LOCK = 0x666c6c62;

async function prepare(db: Db, opts: { adminKey?: string; now?: Date }): Promise<AdminInfo> {
  const now = opts.now ?? new Date();
  await migrate(db);
  await seedDeviceTypes(db, now);
  const admins = await db.query<{ actor: number }>('SELECT actor FROM "user" WHERE username = ?', ['admin']);
  if (admins.length === 0) {
    const created = await createUser(db, { username: 'admin', email: null, isAdmin: true, now, key: opts.adminKey, keyName: 'admin' });
    return { key: created.apiKey, created: true };
  }
  if (opts.adminKey) {
    // A key given on a later start becomes (another) admin key, so --admin-key always works.
    const have = await db.query('SELECT id FROM "api_key" WHERE key_hash = ?', [hashKey(opts.adminKey)]);
    if (have.length === 0) {
      await db.query('INSERT INTO "api_key" (created_at, name, is_of__actor, key_hash) VALUES (?, ?, ?, ?)', [now.toISOString(), 'admin', Number(admins[0]!.actor), hashKey(opts.adminKey)]);
    }
    return { key: opts.adminKey, created: false };
  }
  return { key: null, created: false };
}
