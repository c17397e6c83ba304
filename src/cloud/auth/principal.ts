/**
 * Who is calling: the Bearer key's hash is looked up, and its actor is a user, a device
 * (device key) or a fleet (provisioning key). Unknown or expired: CLOUD_ERR_UNAUTHORIZED.
 */
import { FleetlabError } from '../../errors.js';
import type { Db } from '../db/port.js';
import { hashKey } from './keys.js';

export type Principal =
  | { kind: 'user'; userId: number; actor: number; isAdmin: boolean }
  | { kind: 'device'; deviceId: number; uuid: string; actor: number; applicationId: number }
  | { kind: 'provisioning'; applicationId: number; actor: number };

const unauthorized = () => new FleetlabError('CLOUD_ERR_UNAUTHORIZED', 'Unauthorized');

export function bearerKey(header: string | undefined): string {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!m) throw unauthorized();
  return m[1]!;
}

export async function principalOf(db: Db, key: string, now: Date = new Date()): Promise<Principal> {
  return (await keyLookup(db, hashKey(key), now)).principal;
}

/** The principal of a key's hash, and when the key expires (ms since the epoch; null: never). */
export async function keyLookup(db: Db, keyHash: string, now: Date): Promise<{ principal: Principal; expiresAt: number | null }> {
  // One round trip: the key and whichever of user, device or fleet its actor is.
  const rows = await db.query<{
    actor: number;
    expiry: string | null;
    user_id: number | null;
    is_admin: unknown;
    device_id: number | null;
    device_uuid: string | null;
    device_app: number | null;
    app_id: number | null;
  }>(
    `SELECT k.is_of__actor AS actor, k.expiry_date AS expiry, u.id AS user_id, u.is_admin AS is_admin,
            d.id AS device_id, d.uuid AS device_uuid, d.belongs_to__application AS device_app, a.id AS app_id
       FROM "api_key" k
       LEFT JOIN "user" u ON u.actor = k.is_of__actor
       LEFT JOIN "device" d ON d.actor = k.is_of__actor
       LEFT JOIN "application" a ON a.actor = k.is_of__actor
      WHERE k.key_hash = ?`,
    [keyHash],
  );
  const k = rows[0];
  const expiresAt = k?.expiry == null ? null : new Date(k.expiry).getTime();
  if (!k || (expiresAt !== null && expiresAt <= now.getTime())) throw unauthorized();
  const actor = Number(k.actor);
  const found = (principal: Principal) => ({ principal, expiresAt });
  if (k.user_id !== null) return found({ kind: 'user', userId: Number(k.user_id), actor, isAdmin: k.is_admin === true || k.is_admin === 1 });
  if (k.device_id !== null) return found({ kind: 'device', deviceId: Number(k.device_id), uuid: String(k.device_uuid), actor, applicationId: Number(k.device_app) });
  if (k.app_id !== null) return found({ kind: 'provisioning', applicationId: Number(k.app_id), actor });
  throw unauthorized();
}
