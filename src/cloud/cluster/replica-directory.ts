/**
 * Who is alive and who holds which device's tunnel, kept in the cloud's database so that
 * several cloud processes (replicas) on one database agree without talking to each other.
 *
 * A replica is alive while its heartbeat row is fresh by the database's clock. A live
 * replica removes the rows of one that stopped beating (killed with -9, cut off) and takes
 * its devices offline, unless they have already reconnected elsewhere. A device is online
 * while it has a tunnel row; a replica only ever deletes its own rows, so a device that moved
 * from one replica to another is never taken offline by the old one closing late.
 */
import type { Db } from '../db/port.js';

export interface ReplicaDirectoryOptions {
  readonly db: Db;
  /** This replica's id: lowercase hex, also its notification channel's suffix. */
  readonly id: string;
  /** A replica whose heartbeat is older than this is dead; its rows are removed. */
  readonly staleAfterMs: number;
}

export class ReplicaDirectory {
  private readonly db: Db;
  private readonly now: string;
  readonly id: string;
  readonly staleAfterMs: number;

  constructor(opts: ReplicaDirectoryOptions) {
    this.db = opts.db;
    this.id = opts.id;
    this.staleAfterMs = opts.staleAfterMs;
    this.now = opts.db.dialect.nowMs;
  }

  async register(): Promise<void> {
    await this.db.query(`INSERT INTO "cloud_replica" (id, started_at, heartbeat_at) VALUES (?, ${this.now}, ${this.now})`, [this.id]);
  }

  /**
   * Renews this replica's heartbeat. False when the row was gone: another replica judged
   * this one dead (a long pause), so its tunnel rows went too and must be claimed again.
   */
  async beat(): Promise<boolean> {
    const renewed = await this.db.query(`UPDATE "cloud_replica" SET heartbeat_at = ${this.now} WHERE id = ? RETURNING id`, [this.id]);
    if (renewed.length > 0) return true;
    await this.register();
    return false;
  }

  /** Removes replicas that stopped beating, and their tunnels; returns their ids. */
  async sweep(at: string): Promise<string[]> {
    return this.db.transaction(async (tx) => {
      const dead = await tx.query<{ id: string }>(`DELETE FROM "cloud_replica" WHERE heartbeat_at < ${this.now} - ? RETURNING id`, [this.staleAfterMs]);
      if (dead.length === 0) return [];
      const ids = dead.map((r) => r.id);
      const gone = await tx.query<{ uuid: string }>(`DELETE FROM "device_tunnel" WHERE replica IN (${marks(ids)}) RETURNING uuid`, ids);
      await tx.query(`DELETE FROM "cloud_message" WHERE replica IN (${marks(ids)})`, ids);
      await offlineUnlessTunnelled(tx, gone.map((r) => r.uuid), at);
      return ids;
    });
  }

  /**
   * The device's tunnel is now on this replica (taking it over from any other). On PostgreSQL
   * one statement: a replica killed mid-rollout sends thousands of tunnels to the others
   * within seconds, and a transaction of two writes held a pool connection for four round
   * trips each (SQLite, in this process, has no round trips to save and no writes in WITH).
   */
  async connected(uuid: string, deviceId: number, at: string): Promise<void> {
    if (this.db.dialect.name === 'postgres') {
      await this.db.query(
        `WITH tunnel AS (INSERT INTO "device_tunnel" (uuid, replica, since) VALUES (?, ?, ${this.now})
                           ON CONFLICT (uuid) DO UPDATE SET replica = excluded.replica, since = excluded.since)
         UPDATE "device" SET is_online = ?, last_connectivity_event = ?, api_heartbeat_state = ? WHERE id = ?`,
        [uuid, this.id, true, at, 'online', deviceId],
      );
      return;
    }
    await this.db.transaction(async (tx) => {
      await tx.query(
        `INSERT INTO "device_tunnel" (uuid, replica, since) VALUES (?, ?, ${this.now})
           ON CONFLICT (uuid) DO UPDATE SET replica = excluded.replica, since = excluded.since`,
        [uuid, this.id],
      );
      await tx.query('UPDATE "device" SET is_online = ?, last_connectivity_event = ?, api_heartbeat_state = ? WHERE id = ?', [true, at, 'online', deviceId]);
    });
  }

  /** The device's tunnel on this replica closed; it is offline unless it is on another one by now. */
  async disconnected(uuid: string, at: string): Promise<void> {
    if (this.db.dialect.name === 'postgres') {
      // One statement sees the tunnel rows as they were before its own delete: a device has
      // one row at most (uuid is the key), so any row but this replica's is another's tunnel.
      await this.db.query(
        `WITH gone AS (DELETE FROM "device_tunnel" WHERE uuid = ? AND replica = ?)
         UPDATE "device" SET is_online = ?, last_connectivity_event = ?, api_heartbeat_state = ?
          WHERE uuid = ? AND NOT EXISTS (SELECT 1 FROM "device_tunnel" t WHERE t.uuid = "device".uuid AND t.replica <> ?)`,
        [uuid, this.id, false, at, 'offline', uuid, this.id],
      );
      return;
    }
    await this.db.transaction(async (tx) => {
      await tx.query(`DELETE FROM "device_tunnel" WHERE uuid = ? AND replica = ?`, [uuid, this.id]);
      await offlineUnlessTunnelled(tx, [uuid], at);
    });
  }

  /** Claims again every tunnel this replica holds, after its rows were swept. */
  async reclaim(held: ReadonlyArray<{ uuid: string; deviceId: number }>, at: string): Promise<void> {
    for (const { uuid, deviceId } of held) await this.connected(uuid, deviceId, at);
  }

  /** For each given device with a tunnel on a live replica: that replica's id. */
  async owners(uuids: readonly string[]): Promise<Map<string, string>> {
    const owners = new Map<string, string>();
    for (const chunk of chunks(uuids, 500)) {
      const rows = await this.db.query<{ uuid: string; replica: string }>(
        `SELECT t.uuid, t.replica FROM "device_tunnel" t JOIN "cloud_replica" r ON r.id = t.replica
          WHERE t.uuid IN (${marks(chunk)}) AND r.heartbeat_at >= ${this.now} - ?`,
        [...chunk, this.staleAfterMs],
      );
      for (const r of rows) owners.set(r.uuid, r.replica);
    }
    return owners;
  }

  /** Leaves the cluster on a clean stop: this replica's devices are offline at once. */
  async leave(at: string): Promise<void> {
    await this.db.transaction(async (tx) => {
      const gone = await tx.query<{ uuid: string }>(`DELETE FROM "device_tunnel" WHERE replica = ? RETURNING uuid`, [this.id]);
      await offlineUnlessTunnelled(tx, gone.map((r) => r.uuid), at);
      await tx.query(`DELETE FROM "cloud_replica" WHERE id = ?`, [this.id]);
    });
  }
}

/** Devices whose tunnel went away are offline, unless they have reconnected to some replica meanwhile. */
async function offlineUnlessTunnelled(tx: Db, uuids: readonly string[], at: string): Promise<void> {
  for (const chunk of chunks(uuids, 500)) {
    await tx.query(
      `UPDATE "device" SET is_online = ?, last_connectivity_event = ?, api_heartbeat_state = ? WHERE uuid IN (${marks(chunk)})
         AND NOT EXISTS (SELECT 1 FROM "device_tunnel" t WHERE t.uuid = "device".uuid)`,
      [false, at, 'offline', ...chunk],
    );
  }
}

const marks = (items: readonly unknown[]): string => items.map(() => '?').join(', ');

function* chunks<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}
