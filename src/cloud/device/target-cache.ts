/**
 * The device state endpoint's fast path. One indexed lookup reads the calling device key's
 * device and the versions of the three rows its target is built from (device, fleet,
 * release: migration 005 keeps them current with triggers). A target built before under
 * the same versions is served as it was; only a changed version rebuilds it, so a poll that
 * ends in `304` costs that one lookup.
 *
 * The cache holds at most `maxEntries` targets (least recently used leaves first). It is
 * per process; replicas on one database each build a device's target once per change.
 *
 * A release's part of a target (its row and images) is the same for every device running it,
 * and a rollout makes every device of a fleet rebuild at once: it is kept by release and
 * release version, and devices that miss together share one read of it, so a rebuild reads
 * only the device's own rows (two queries, not four).
 */
import type { Db } from '../db/port.js';
import { hashKey } from '../auth/keys.js';
import { composeTarget, etagOf, loadReleaseRows, loadTargetRows, type ReleaseRows } from './target-state.js';

export interface DeviceTargetVersion {
  readonly deviceId: number;
  readonly uuid: string;
  /** Changes whenever the device's target may have changed. */
  readonly version: string;
  /** The release its target is built from, and that release's version (null: none). */
  readonly release: { readonly id: number; readonly version: number } | null;
}

export interface ServedTarget {
  readonly body: string;
  readonly etag: string;
}

/**
 * The device of a device key and its target version, or null when the key is not a live
 * device key (unknown, expired, a user's or a fleet's): the caller's general
 * authentication then says which.
 */
export async function deviceTargetVersion(db: Db, key: string, now: Date): Promise<DeviceTargetVersion | null> {
  const [row] = await db.query<{ expiry: string | null; id: number; uuid: string; dv: number; av: number; rid: number | null; rv: number | null }>(
    `SELECT k.expiry_date AS expiry, d.id, d.uuid, d.target_version AS dv, a.target_version AS av, r.id AS rid, r.target_version AS rv
       FROM "api_key" k
       JOIN "device" d ON d.actor = k.is_of__actor
       JOIN "application" a ON a.id = d.belongs_to__application
       LEFT JOIN "release" r ON r.id = COALESCE(d.should_be_running__release, a.should_be_running__release)
      WHERE k.key_hash = ?`,
    [hashKey(key)],
  );
  if (!row || (row.expiry !== null && new Date(row.expiry) <= now)) return null;
  return {
    deviceId: Number(row.id),
    uuid: String(row.uuid),
    version: `${row.dv}.${row.av}.${row.rid ?? '-'}.${row.rv ?? '-'}`,
    release: row.rid === null || row.rv === null ? null : { id: Number(row.rid), version: Number(row.rv) },
  };
}

export class TargetCache {
  private readonly entries = new Map<number, ServedTarget & { version: string }>();
  /** By `release id.release version`; a promise, so devices that miss together read it once. */
  private readonly releases = new Map<string, Promise<ReleaseRows>>();

  constructor(private readonly deps: { readonly db: Db; readonly maxEntries: number; readonly maxReleases?: number }) {}

  /**
   * The release's rows as of at least `version`: the device lookup read the version first,
   * so rows read now are as new as it or newer, and a newer read only makes a target rebuild
   * once more on its next poll (as below), never serve older rows under a newer version.
   */
  private releaseRows(id: number, version: number): Promise<ReleaseRows> {
    const key = `${id}.${version}`;
    let rows = this.releases.get(key);
    if (!rows) {
      rows = loadReleaseRows(this.deps.db, id);
      this.releases.set(key, rows);
      rows.catch(() => this.releases.get(key) === rows && this.releases.delete(key));
      if (this.releases.size > (this.deps.maxReleases ?? 64)) this.releases.delete(this.releases.keys().next().value!);
    }
    return rows;
  }

  async target(device: DeviceTargetVersion): Promise<ServedTarget> {
    const hit = this.entries.get(device.deviceId);
    if (hit && hit.version === device.version) {
      // Map order is insertion order: re-inserting marks it most recently used.
      this.entries.delete(device.deviceId);
      this.entries.set(device.deviceId, hit);
      return hit;
    }
    // Rows read after the version are at least as new as it, so a write in between can only
    // make this entry rebuild once more, never serve an older target under a newer version.
    const { release } = device;
    // The device row may name another release than the lookup did (it changed in between): read that one afresh.
    const rows = await loadTargetRows(this.deps.db, device.deviceId, (id) => (release && id === release.id ? this.releaseRows(id, release.version) : loadReleaseRows(this.deps.db, id)));
    const body = JSON.stringify({ [device.uuid]: composeTarget(rows) });
    const entry = { body, etag: etagOf(body), version: device.version };
    this.entries.delete(device.deviceId);
    this.entries.set(device.deviceId, entry);
    if (this.entries.size > this.deps.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    return entry;
  }
}
