/**
 * API keys: 32 random bytes, base64url. Stored as sha256 hex. A slow password hash
 * (scrypt, argon2) defends low-entropy secrets against guessing; these keys carry 256
 * random bits, so a single sha256 is already infeasible to invert, and it keeps the
 * lookup a unique-index probe on every request instead of a 50 ms KDF.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../db/port.js';

export const newApiKey = (): string => randomBytes(32).toString('base64url');
export const hashKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

export async function storeApiKey(
  db: Db,
  actor: number,
  key: string,
  meta: { name?: string | null; description?: string | null; now?: Date } = {},
): Promise<number> {
  const rows = await db.query<{ id: number }>(
    'INSERT INTO "api_key" (created_at, name, description, is_of__actor, key_hash) VALUES (?, ?, ?, ?, ?) RETURNING id',
    [(meta.now ?? new Date()).toISOString(), meta.name ?? null, meta.description ?? null, actor, hashKey(key)],
  );
  return Number(rows[0]!.id);
}
